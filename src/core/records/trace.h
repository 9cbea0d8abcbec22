/*
 * Recording for dtorch.explain() and dtorch.profiler.trace() (trace.c): a
 * bounded, append-only buffer of fixed-size records per writing thread, the
 * records the controller and the workers append while recording is on, and
 * the hooks that append them.
 *
 * Writers: the controller appends explain records (one per collective it
 * lowers), node records (one per node it lowers) and kernel-map records (which
 * node each queued kernel belongs to); each worker appends one record per
 * kernel it runs (begin and end timestamps, CLOCK_MONOTONIC). Each buffer has
 * one writer, so appending takes no lock: the writer fills the next slot and
 * then publishes the count with a release store. A full buffer drops the
 * record and counts it.
 *
 * Readers (dt_graph_take_explain / dt_graph_take_trace, client threads)
 * first wait for the graph's work issued so far (dt_graph_sync), then read
 * [taken, count) of every buffer under the recorder's lock. The sync orders
 * every record of that work before the read; records of later work may be
 * appended meanwhile (acquire load of the count). Buffers are emptied only
 * when recording of their kind is off everywhere and the graph has drained,
 * so no writer is appending then.
 *
 * Flags: process-wide counts (dt_record_enable nests); the hooks test one
 * relaxed load of them, a predictable branch when recording is off.
 *
 * Lock order: the recorder's lock is a leaf (taken by a worker only to
 * register its buffer, by readers to read).
 */
#ifndef DT_CORE_TRACE_H
#define DT_CORE_TRACE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dtorch/dtorch_record.h"

/* ------------------------------------------------------------- buffers */

#define DT__REC_CHUNKS 256
/* Records per buffer: the controller's explain and node buffers, its kernel
 * map and each worker's kernels. A full buffer drops (and counts). */
#define DT__REC_EXPLAIN_CAP (1u << 18)
#define DT__REC_NODES_CAP (1u << 18)
#define DT__REC_KMAP_CAP (1u << 20)
#define DT__REC_KERNELS_CAP (1u << 20)

/* A bounded buffer of `cap` records of `elem` bytes, allocated in up to
 * DT__REC_CHUNKS chunks as it fills. One writer thread; readers as above. */
typedef struct dt__recbuf {
    size_t elem, cap, per_chunk;
    void *chunks[DT__REC_CHUNKS]; /* writer-allocated before the count that covers them */
    _Atomic size_t n;             /* records published (writer: release; readers: acquire) */
    atomic_long dropped;          /* records lost to a full buffer (or out of memory) */
    size_t taken;                 /* readers (under the recorder's lock): records handed out */
    size_t upto;                  /* readers (under the lock): the count a take in progress saw */
    uint64_t key;                 /* what the writer is (a stream's dt__rec_stream_key) */
    struct dt__recbuf *next;      /* the recorder's list of worker buffers */
} dt__recbuf;

/* An empty buffer for up to `cap` records of `elem` bytes (no allocation). */
void dt__recbuf_init(dt__recbuf *b, size_t elem, size_t cap);
/* Writer: the next free slot (zeroed), or NULL when full or out of memory
 * (the record is counted as dropped). dt__recbuf_commit publishes it. */
void *dt__recbuf_slot(dt__recbuf *b);
void dt__recbuf_commit(dt__recbuf *b);
/* Readers: the records published so far, and record i of them. */
size_t dt__recbuf_count(const dt__recbuf *b);
const void *dt__recbuf_at(const dt__recbuf *b, size_t i);
/* With no writer appending: forgets every record and frees the chunks. */
void dt__recbuf_reset(dt__recbuf *b);
/* Writer, of a full buffer, under the readers' lock `lock`: when every record
 * was taken, starts again at the first slot (the chunks stay) so recording
 * that never stops (DTORCH_EXPLAIN=1, a long-open explain()) keeps its newest
 * records instead of dropping all after the first `cap`. */
void dt__recbuf_rewind_taken(dt__recbuf *b, pthread_mutex_t *lock);
/* Frees the chunks (not b). NULL is ignored. */
void dt__recbuf_free(dt__recbuf *b);

/* --------------------------------------------------- what is recorded */

enum { DT__REC_EXPLAIN = 0, DT__REC_TRACE = 1, DT__REC_KINDS };

/* Process-wide: recording of kind k is on while on[k] > 0; `any` is their
 * sum, so one load tells a hook that nothing is recorded. A cache line of
 * their own: every hook reads them, and a counter that some thread writes
 * per op sharing the line would make each of those reads a miss. */
typedef struct dt__rec_flags {
    _Alignas(64) atomic_int on[DT__REC_KINDS];
    atomic_int any;
    char pad[64 - (DT__REC_KINDS + 1) * sizeof(atomic_int)];
} dt__rec_flags;
extern dt__rec_flags dt__rec_flag;

/* Acquire (a plain load on x86 and a cheap one elsewhere): a writer that
 * sees recording on also sees the reset that a reader did before turning it
 * on. */
static inline int dt__rec_enabled(int k) {
    return atomic_load_explicit(&dt__rec_flag.on[k], memory_order_acquire) > 0;
}
static inline int dt__rec_anything(void) {
    return atomic_load_explicit(&dt__rec_flag.any, memory_order_acquire) > 0;
}

/* Nanoseconds on CLOCK_MONOTONIC. */
int64_t dt__rec_now(void);

/* The controller's node record (trace). */
typedef struct dt__rec_node {
    dt_trace_node pub;
} dt__rec_node;

/* The controller's kernel-map record: kernel number `seq` of the stream
 * `key` belongs to node `node`. */
typedef struct dt__rec_kmap {
    uint64_t key, seq, node;
} dt__rec_kmap;

/* A worker's kernel record. */
typedef struct dt__rec_kernel {
    uint64_t seq;
    int64_t begin_ns, end_ns, bytes;
    const char *op, *kernel, *file;
    int32_t line, kop;
} dt__rec_kernel;

/* A graph's recorder (graph.c makes it with the graph and frees it after
 * the graph's threads have exited). */
typedef struct dt__rec {
    pthread_mutex_t lock;   /* guards the list and readers' cursors */
    dt__recbuf explain;     /* controller: dt_explain_record */
    dt__recbuf nodes;       /* controller: dt__rec_node */
    dt__recbuf kmap;        /* controller: dt__rec_kmap */
    dt__recbuf *workers;    /* one per worker that has traced, newest first */
    uint64_t node_seq;      /* controller: the last node id given */
    uint64_t cur_node;      /* controller: the node being lowered (0: none traced) */
    const char *cur_op;     /* controller: its first kernel's op name (names the node) */
    int pend_valid;         /* controller: `pend` is an explain record not yet appended */
    dt_explain_record pend; /* the collective being lowered, merged over its groups */
    uint64_t pend_node;     /* the node `pend` belongs to */
} dt__rec;

dt__rec *dt__rec_new(void);
/* After every thread that writes into it has exited. NULL is ignored. */
void dt__rec_free(dt__rec *r);

/* A stream's identity in records: (type, kind, device id). */
static inline uint64_t dt__rec_stream_key(int type, int kind, int64_t device_id) {
    return (uint64_t)type << 56 | (uint64_t)kind << 48 | ((uint64_t)device_id & 0xffffffffffffull);
}

/* ------------------------------------------------------------- hooks */

/* Each role appends its own records, from its own folder: the controller
 * (core/controller/trace_lower.h), the workers (dt__rec_kernel_ran,
 * core/worker/stream.h) and, here, the client. */
struct dt__node;
/* Client: stamps a node being submitted (its client thread and times). */
void dt__rec_client_submit(struct dt__node *n);

#endif /* DT_CORE_TRACE_H */
