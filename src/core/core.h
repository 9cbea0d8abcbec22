/*
 * The runtime's shared structures: meshes, tensor metadata, the client's
 * symbols, the node records of the client->controller queue, per-device
 * blobs, kernels, worker streams, futures, and the lowering context.
 *
 * Threads and ownership (who may touch what):
 *  - dt__meta inside a dt__tval is written once by the client before the node
 *    that creates it is enqueued, then only read (by any thread).
 *  - dt__tval.blobs is controller-only; dt__tval.next_release is written by
 *    the client that drops the symbol, then read by the controller.
 *  - A symbol and its value share one record (graph.c): the client must not
 *    touch the symbol after pushing the value onto the release stack.
 *  - dt__blob.impl/.error are written by the worker that runs the producing
 *    kernel, before any reader runs (same stream: program order; other
 *    streams: the reader waits on the blob's event, streams.c, which
 *    publishes the producer's completed count with release/acquire).
 *  - Kernels are created by the controller and owned by a stream's queue,
 *    then by its worker, which frees them after running.
 *
 * Lock order (outer first): graph life_lock -> graph qlock (only for the
 * controller's sleep; the queue itself is lock-free) -> stream lock;
 * collective, future and stream event (ev_lock) locks are leaves. No lock is
 * graph-wide on the kernel path: a cross-stream wait sleeps on the
 * producing stream's ev_lock only.
 */
#ifndef DT_CORE_H
#define DT_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "common/common.h"
#include "common/pool.h"
#include "dtorch/dtorch.h"

/* ---------------------------------------------------------------- mesh */

/* Fields written by different threads are kept on different cache lines: a
 * line that one core writes and another reads moves between them on every
 * access. */
#define DT_CACHE_LINE 64

/* ------------------------------------------------------------ handles */

/* Every public handle's first field is a magic: its type's LIVE value while
 * it lives, DEAD once the final release ran. The records are type-stable
 * (pools whose slabs are never returned while the process lives), so testing
 * a released handle reads defined memory; a record on a pool's free list
 * holds a 64-byte-aligned link there, never a LIVE value (none has its low
 * six bits clear). A record
 * reused by a new handle of the same type is live again: detection is best
 * effort. The dt__X_ok checks replace the NULL tests of the entry points;
 * dt__handle_bad names what is wrong with a handle that fails one. */
#define DT__MESH_LIVE 0x4d455348u   /* "MESH" */
#define DT__TENSOR_LIVE 0x54454e53u /* "TENS" */
#define DT__GRAPH_LIVE 0x47524150u  /* "GRAP" */
#define DT__FUTURE_LIVE 0x46555455u /* "FUTU" */
#define DT__GATE_LIVE 0x47415445u   /* "GATE" */
#define DT__HANDLE_DEAD 0xdeadbeefu
static inline const char *dt__handle_bad(const void *h) { return h ? "a released handle" : "NULL"; }

struct dt_mesh {
    uint32_t magic; /* DT__MESH_LIVE */
    dt_device_type type;
    int ndim;
    int names_given; /* the user named the dims (else defaults) */
    int64_t ndev;
    int64_t shape[DT_MAX_MESH_NDIM];
    int64_t strides[DT_MAX_MESH_NDIM]; /* row-major, in devices */
    char names[DT_MAX_MESH_NDIM][DT_MAX_DIM_NAME];
    int64_t *ids; /* ndev entries */
    uint64_t uid; /* unique per mesh ever made: a reused address is not the same mesh */
    /* Every value retains its mesh on the client and the controller drops
     * it: the count has a cache line of its own (the struct is allocated
     * aligned), away from the fields and the ids array the controller reads. */
    _Alignas(DT_CACHE_LINE) atomic_int refs;
};

/* The coordinate of the device at flat index `idx`. */
void dt__mesh_coord(const dt_mesh *m, int64_t idx, int64_t *coord);
static inline int dt__mesh_ok(const dt_mesh *m) { return m && m->magic == DT__MESH_LIVE; }

/* ---------------------------------------------------------------- meta */

typedef struct dt__meta {
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_mesh *mesh;                     /* owned reference */
    dt_placement pl[DT_MAX_MESH_NDIM]; /* normalised: shard dims >= 0 */
} dt__meta;

int64_t dt__numel(int ndim, const int64_t *shape);
/* 1 when two metas describe the same layout (dtype, shape, mesh, placements). */
int dt__meta_same(const dt__meta *a, const dt__meta *b);
/* torch.chunk's split of [0, n) into k pieces: piece i is
 * [min(i*c, n), min((i+1)*c, n)) with c = ceil(n/k). */
void dt__chunk(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len);
/* The region of the global tensor that the device at `coord` holds: nested
 * shards split in mesh-dim order. */
void dt__local_region(const dt__meta *m, const int64_t *coord, int64_t *start, int64_t *len);
/* 1 when the device at `coord` must hold zeros for a Partial value built from
 * a full one (its coordinate along some Partial mesh dim is not 0). */
int dt__partial_zero(const dt__meta *m, const int64_t *coord);
/* 1 when some tensor dim is sharded by more than one mesh dim. */
int dt__has_nested_shards(const dt__meta *m);

/* Validates and normalises user placements (NULL = all Replicate) for a
 * tensor of `ndim` dims on `mesh` into out (size-1 mesh dims become
 * Replicate). Sets the thread error and returns DT_EINVAL on bad input. */
dt_status dt__placements_normalize(const dt_mesh *mesh, int ndim, const dt_placement *in, dt_placement *out);
/* Writes "[Shard(dim=0), Replicate()]" into sb. */
void dt__placements_format(dt__strbuf *sb, const dt_placement *pl, int n);
dt_status dt__shape_check(int ndim, const int64_t *shape);

/* torch's type promotion. */
dt_dtype dt__promote_types(dt_dtype a, dt_dtype b);
/* Result dtype of a op b for tensors (0-d tensors rank like scalars as in
 * torch's result_type). */
dt_dtype dt__result_type2(const dt__meta *a, const dt__meta *b);
dt_dtype dt__result_type_scalar(const dt__meta *a, dt_scalar s);
/* torch's result_type over `nt` tensors and `ns` Python scalars. */
dt_dtype dt__result_type(const dt__meta *const *ts, int nt, const dt_scalar *ss, int ns);
int dt__dtype_is_int(dt_dtype d); /* integers, not bool */

/* ------------------------------------------------------------- values */

/* One device's live-blob byte counts (memstats.c): one record per
 * (device type, id) ever charged, made on first use and kept for the
 * process's life, so a pointer to it stays valid in any blob. */
typedef struct dt__memdev dt__memdev;
/* The record of device (type, id), made on first use; NULL when out of
 * memory (thread error set). Any thread. */
dt__memdev *dt__memdev_get(int type, int64_t id);
/* Adds `delta` bytes to a device's live-blob count (any thread). */
void dt__mem_charge(dt__memdev *dev, int64_t delta);

/* One dense local tensor on one device. Reference counted: the tensor's
 * per-device slot and every kernel that reads or writes it hold one.
 *
 * Its event is (producer, seq): the blob exists once kernel number `seq` of
 * stream `producer` has completed (streams.c). Both are written by the
 * controller when it queues the producing kernel, before any consumer is
 * queued, then only read. */
typedef struct dt__blob {
    atomic_int refs;
    void *impl;            /* backend value; NULL until produced or when poisoned */
    char *error;           /* non-NULL: the kernel that produced it failed (owned) */
    const dt__backend *be; /* the backend that made it (its device type's) */
    /* NULL: made by the controller itself (a source), ready at once. */
    struct dt__stream *producer;
    uint64_t seq;
    /* The backend's event recorded after the producing kernel (backends
     * with event slots only; NULL otherwise). Written by the producing
     * worker before it publishes its completed count; freed with the blob. */
    void *bev;
    /* Memory accounting: bytes charged to `mem` while the impl lives; 0
     * when uncounted or handed to a kernel that wrote in place. Written by
     * the producing worker, read by whoever frees. */
    int64_t charged;
    dt__memdev *mem;
    /* The blob's name in kernels and their encoding (kernel_codec.c): unique
     * within its graph, given by the controller when a kernel first names
     * the blob (dt__lw_push_on), 0 until then. Controller-written. */
    uint64_t id;
} dt__blob;

dt__blob *dt__blob_new(const dt__backend *be);
static inline dt__blob *dt__blob_retain(dt__blob *b) {
    if (b)
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}
void dt__blob_release(dt__blob *b);

/* The controller's record of a tensor symbol: metadata plus its blobs. */
typedef struct dt__tval {
    dt__meta meta;
    uint64_t id;
    dt__blob **blobs;              /* controller-only; one per mesh device once lowered */
    struct dt__tval *next_release; /* link in the graph's release stack */
} dt__tval;

/* Frees a tval and drops its blob references (controller, or any thread once
 * the controller is gone). */
void dt__tval_free(dt__tval *v);
/* The controller's form: the mesh reference is dropped later, in a batch
 * (dt__graph_flush_releases), so the mesh's count does not move between the
 * client's core and the controller's on every op. */
void dt__tval_free_deferred(struct dt_graph *g, dt__tval *v);
void dt__graph_flush_releases(struct dt_graph *g);

/* The client's symbol. */
struct dt_tensor {
    uint32_t magic; /* DT__TENSOR_LIVE */
    atomic_int refs;
    dt_graph *graph; /* owned reference */
    dt__tval *v;
};

static inline int dt__tensor_ok(const dt_tensor *t) { return t && t->magic == DT__TENSOR_LIVE; }

/* ---------------------------------------------------------------- ops */

/* Client-level ops: one node record each; the rows (name, lowering) are
 * src/ops/ops.def. */
typedef enum dt__op {
#define DT_OP(E, ...) DT_OP_##E,
#include "ops/ops.def"
    DT_OP_COUNT
} dt__op;

/* Node attributes: the fields any family may set first, then one block per
 * family that needs many ints (a union: every node belongs to one family).
 * The common fields lead so that an elementwise node's are in the node's
 * first cache lines, the ones the controller reads. */
typedef struct dt__nattr {
    int32_t sub;   /* dt_binary_op */
    int32_t flags; /* DT_KF_* for scalars/sum */
    dt_scalar scalar;
    /* elementwise: alpha of add/sub, y of where, max of clamp. */
    dt_scalar scalar2;
    uint64_t dims_mask;
    uint64_t seed;
    double f[3];
    /* linalg einsum: the equation (interned, never freed). */
    const char *text;
    union {
        /* views family (src/ops/views_int.h says what each holds per kind). */
        struct {
            int64_t v_start[DT_MAX_NDIM];
            int64_t v_step[DT_MAX_NDIM];
            int64_t v_len[DT_MAX_NDIM];
            int64_t v_ints[DT_MAX_NDIM];
            int32_t v_nints;
            int32_t v_dim;
            uint64_t v_mask;
        };
        /* nn family: integer arguments (normalized shape, conv stride/
         * padding/dilation/groups, pad amounts, interpolate sizes). */
        int64_t ints[2 * DT_MAX_NDIM];
        /* creation and data-dependent family: the dim of sort/topk/cumsum
         * (normalised, >= 0) and k of topk. */
        struct {
            int64_t sort_dim;
            int64_t sort_k;
        };
    };
} dt__nattr;

/* Most tensor inputs of one node or kernel (batch_norm takes five). */
#define DT_MAX_OP_INPUTS 6
#define DT__MAX_IN DT_MAX_OP_INPUTS

typedef struct dt__node {
    struct dt__node *next;
    int32_t op;
    int32_t n_in;
    dt__tval *out;
    dt__tval *in[DT_MAX_OP_INPUTS];
    const char *site_file; /* interned */
    int32_t site_line;
    void *extra; /* SOURCE: host impl (or blocks, DT__SOURCE_LOCAL); FETCH/SYNC: the dt_future */
    dt__nattr a;
} dt__node;

/* ------------------------------------------------------------ kernels */

/* Core-run kernel kinds beyond the backend's dt__kop. */
enum {
    DT_KC_COLLECTIVE = DT_K_COUNT, /* attributes: dt__collattr; run by the comm (collective.c) */
    DT_KC_FETCH,                   /* handle = dt_future, rank = piece */
    DT_KC_SYNC,                    /* handle = dt_future */
    DT_KC_STOP,                    /* the worker exits */
    DT_KC_ASSEMBLE,                /* handle = dt__assembly: pieces from other devices */
    DT_KC_GATE,                    /* handle = dt_debug_gate: wait for it, then copy in[0] */
    DT_KC_END
};

/* The pieces a DT_KC_ASSEMBLE kernel places into one new local tensor: a
 * cross-mesh copy's destination. */
typedef struct dt__assembly {
    int n;
    dt__blob **pieces; /* owned references */
    int64_t *starts;   /* n * ndim offsets inside the result */
    int64_t *lens;     /* n * ndim: each piece's shape (to stage it through host memory) */
} dt__assembly;

/* Drops an assembly's piece references and frees it (any thread). */
void dt__assembly_free(dt__assembly *as);

/* A kernel as lowering builds it (controller only): the op functions fill
 * in[], attr and extra, then dt__lw_push packs it into the compact record
 * below (dt__krec) and frees it. extra: the handle of a FETCH/SYNC (future),
 * GATE (gate) or ASSEMBLE (assembly) kernel. */
typedef struct dt__kernel {
    int32_t kop;
    int16_t n_in;
    int32_t rank;
    int32_t site_line;
    dt__blob *in[DT_MAX_OP_INPUTS];
    dt__blob *out;
    const char *opname;
    const char *site_file;
    void *extra;
    dt__kattr attr;
} dt__kernel;

/* A kernel as queued on a stream (core/kernel_rec.h). */
typedef struct dt__krec dt__krec;
/* Test-only: what dt__graph_set_kernel_tap_for_test calls (kernel_rec.h). */
typedef void (*dt__ktap_fn)(void *arg, const void *bytes, size_t len, dt_status st);

/* ------------------------------------------------------------ streams */

/* Stream kinds: each device has a compute stream and, created on first use,
 * a communication stream for collectives, so that a redistribute overlaps
 * independent compute. */
enum { DT_STREAM_COMPUTE = 0, DT_STREAM_COMM = 1, DT_STREAM_KINDS = 2 };

/* Device types a graph serves (dt_device_type values). */
#define DT_DEVICE_TYPES 2

/* A worker thread with an in-order kernel queue for one (device type, id,
 * kind). Streams live in the graph's stream map (streams.c), made on first
 * use, and stop with the graph.
 *
 * Events (streams.c): the worker counts the kernels it has completed in
 * `done` (every kernel the controller appended, in order), so "kernel n of
 * this stream has completed" is an event that costs nothing to record. A
 * worker of another stream that needs such an event spins briefly, then
 * sleeps on this stream's ev_lock/ev_cond; the worker broadcasts there only
 * when ev_waiters says someone sleeps. ev_lock is a leaf lock. */
typedef struct dt__stream {
    dt_device_type type;
    int64_t device_id;
    int kind;
    struct dt_graph *g;
    const dt__backend *be;
    void *ctx;         /* the backend's stream context (stream_new), or NULL */
    int record_events; /* the backend has event_new/record/free: record one per output */
    dt__memdev *mem;   /* the device's memory record */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    dt__krec *head, *tail; /* guarded by lock */
    int sleeping;          /* guarded by lock */
    atomic_uint pushed;    /* bumped per hand-over: the worker's spin watches it */
    /* Controller-only: kernels lowered in this batch, not yet handed over;
     * kernels appended ever (the last one's number is its event). */
    dt__krec *bhead, *btail;
    struct dt__stream *next_dirty;
    int dirty;
    uint64_t appended;
    struct dt__stream *next_all; /* controller-only: the graph's streams, oldest first */
    /* Worker-written, read by consumers on other streams. */
    _Alignas(DT_CACHE_LINE) _Atomic uint64_t done;
    uint64_t completed; /* worker-only: what it last stored into done */
    atomic_int ev_waiters;
    pthread_mutex_t ev_lock;
    pthread_cond_t ev_cond;
    /* Test-only counts (dt__graph_debug_stream): kernels run, and of those
     * collectives and cross-mesh assemblies. Worker-written, relaxed. */
    atomic_long n_run, n_comm;
    dt__krec *stop_k; /* the stop kernel, made with the stream */
} dt__stream;

/* Starts a stream (controller thread). NULL with the thread error set when
 * memory, the backend's stream or the thread cannot be had. */
dt__stream *dt__stream_start(struct dt_graph *g, dt_device_type type, int64_t device_id, int kind);
/* Hands over a list of kernels (controller thread). */
void dt__stream_submit(dt__stream *s, dt__krec *head, dt__krec *tail);
/* Queues the stop kernel after everything handed over (controller). */
void dt__stream_send_stop(dt__stream *s);
/* Frees a stream whose worker has been joined (controller). Only once every
 * worker of the graph has exited: a kernel on another stream may read this
 * one's completed count (its events) until then. */
void dt__stream_free(dt__stream *s);
/* Runs kernel k on s, then completes its number and drops its references
 * (s's worker thread; core/kernel_run.c). */
void dt__kernel_run(dt__krec *k, dt__stream *s);
/* After dt_graph_cancel: releases k without running it (its output poisoned,
 * a read or sync failed, a collective still meets its peers), completing
 * its number (s's worker thread; core/kernel_run.c). */
void dt__kernel_drop(dt__krec *k, dt__stream *s);
/* Charges k's new output to s's device; an output written into its donated
 * input's buffer (inplace) takes that input's charge over instead (s's
 * worker thread; core/blob.c). */
void dt__blob_account(dt__krec *k, const dt__stream *s, int inplace);

/* The stream map (streams.c; controller thread): the stream of (type, id,
 * kind), started on first use; NULL with the thread error set on failure. */
dt__stream *dt__graph_stream(struct dt_graph *g, dt_device_type type, int64_t id, int kind);
/* Stops every stream, oldest first, and frees the map (controller, at exit). */
void dt__graph_streams_stop(struct dt_graph *g);

/* Events (streams.c). The producing worker publishes a completed kernel
 * (after recording the backend's event, if any, for its output). */
void dt__event_complete(dt__stream *s, uint64_t n);
/* Makes stream `s` wait for blob b's event (worker of s): returns once the
 * producer has completed b's kernel on the host, and has the backend make
 * s's device queue wait on b's backend event if there is one. */
void dt__event_wait(dt__stream *s, const dt__blob *b);
/* 1 when b's event has completed (any thread): the host count, and the
 * backend's event_query for backends with events. */
int dt__event_query(const dt__blob *b);

/* ---------------------------------------------------------------- graph */

/* Fields are grouped by the threads that write them, each group on its own
 * cache line: a line written by the client and read by the controller (or
 * the other way round) moves between cores on every access, which costs more
 * than the rest of recording an op. */
struct dt_graph {
    uint32_t magic; /* DT__GRAPH_LIVE */
    /* Read-mostly. One backend per device type: lowering picks the one of
     * the mesh's type, and every blob keeps the backend that made it. */
    const dt__backend *be[DT_DEVICE_TYPES];
    /* Collectives on the communication stream (1, the default) or on the
     * compute stream (0): DTORCH_OVERLAP=0 at graph creation. */
    int overlap;
    /* The window's chain pass runs (1, the default; DTORCH_CHAINS=0 at
     * creation or dt_graph_set_chains turn it off). */
    atomic_int chains;
    pthread_t ctl;
    pthread_mutex_t life_lock; /* serialises shutdown */
    int shut_down;             /* the controller is joined; guarded by life_lock */
    int closed;                /* STOP is queued; guarded by life_lock */
    atomic_int gates_bypassed; /* set by shutdown: this graph's gate kernels stop waiting (debug.c) */
    atomic_int held;           /* dt_debug_hold_controller: the controller takes nothing (debug.c) */
    /* Set by dt_graph_cancel before it closes the queue: the controller
     * frees nodes unlowered, workers drop kernels unrun (dt__kernel_drop). */
    atomic_int cancelled;
    atomic_long dropped; /* nodes and kernels dropped by a cancel */
    unsigned fork_gen;   /* dt__fork_gen when made: another value means a forked child */
    int defer_pressure;  /* dt_graph_set_deferred_backpressure */
    int ctl_exited;      /* the controller has returned; guarded by bl_lock, signalled on bl_cond */

    /* Client-written. The queue is a lock-free stack of nodes (newest
     * first) that the controller takes whole; a head tagged with bit 0 (a
     * STOP node) marks a closed queue, after which no push can succeed. */
    _Alignas(DT_CACHE_LINE) _Atomic(dt__node *) qhead;
    /* Values the client dropped: a second lock-free stack (DT__R_CLOSED once
     * closed). Dropping a symbol is as frequent as making one, so it costs
     * a push, not a node. */
    _Atomic(dt__tval *) rhead;
    atomic_int ctl_sleeping; /* the controller sleeps (or is about to) on qcond */
    atomic_long submitted;   /* nodes pushed */

    _Alignas(DT_CACHE_LINE) atomic_int refs;

    /* Controller-written: kernels handed to streams. */
    _Alignas(DT_CACHE_LINE) atomic_long kqueued;
    long kqueued_local; /* controller-only: kqueued before it is published */
    /* The most records in flight the controller has seen after a batch
     * (dt_graph_get_stats); a client may reset it. */
    atomic_long peak_backlog;
    atomic_long nodes_eliminated; /* never lowered (passes/dce.c) */
    atomic_long nodes_fused;      /* run inside chain kernels (passes/chain.c) */
    dt_mesh *defer_mesh;          /* controller-only: mesh references not yet dropped */
    int defer_n;

    /* Flow control: the backlog is submitted + kqueued - retired, node
     * records queued plus kernels not yet run. A client that finds it above
     * DT_BACKLOG_MAX waits (bl_lock/bl_cond) until the pipeline has drained
     * to half, so a loop that records faster than the devices run cannot grow
     * memory without bound. */
    _Alignas(DT_CACHE_LINE) atomic_long retired; /* nodes lowered + kernels run */
    _Alignas(DT_CACHE_LINE) atomic_int bl_waiters;
    atomic_long flow_waits; /* times a client waited on the backlog */
    pthread_mutex_t bl_lock;
    pthread_cond_t bl_cond;
    /* The controller's sleep; clients take qlock only to wake it. */
    pthread_mutex_t qlock;
    pthread_cond_t qcond;

    /* Workers: kernels that wrote into in[0]'s buffer (dt_graph_get_stats). */
    _Alignas(DT_CACHE_LINE) atomic_long kernels_in_place;

    /* Controller-only: the stream map, an open-addressing table keyed by
     * (device type, id, kind) with linear probing (smap_cap a power of two,
     * at most half full), and the streams in creation order. */
    _Alignas(DT_CACHE_LINE) dt__stream **smap;
    size_t smap_cap, smap_n;
    dt__stream *streams, *streams_last;
    dt__stream *dirty;
    uint64_t blob_ids; /* the last blob id given (dt__blob.id) */
    /* Controller-only: the collectives' groups made so far (collective.c). */
    struct dt__group_ref *groups;
    dt__ktap_fn ktap; /* test-only (dt__graph_set_kernel_tap_for_test) */
    void *ktap_arg;
    /* One communication back end per device type, made on first use
     * (dt__graph_comm); read by workers, freed with the graph. */
    _Atomic(struct dt__comm *) comm[DT_DEVICE_TYPES];
};

/* The backend serving device type `t` on g (any thread). */
static inline const dt__backend *dt__graph_be(const dt_graph *g, dt_device_type t) { return g->be[t]; }
/* Bumped in the child of every fork() (graph.c): a graph whose fork_gen
 * differs was made by an ancestor process and has no threads here. */
extern _Atomic unsigned dt__fork_gen;
static inline int dt__graph_forked(const dt_graph *g) {
    return g->fork_gen != atomic_load_explicit(&dt__fork_gen, memory_order_relaxed);
}
/* The controller's last act: wakes dt_graph_cancel/shutdown waiters. */
void dt__graph_controller_exited(dt_graph *g);
/* The error message for a failed dt__graph_submit status; returns st. */
dt_status dt__submit_error(dt_status st);
/* Atfork helpers: take (1) or drop (0) every global lock of a module, so a
 * fork never copies one held by another thread. */
void dt__debug_fork_lock(int lock);
/* In a fork child: the parent's workers are gone. */
void dt__stream_forked(void);
/* A dropped gate kernel's gate reference (debug.c). */
void dt__debug_gate_drop(dt__krec *k);
void dt__debug_node_drop(dt__node *n);

#define DT__Q_IS_CLOSED(h) (((uintptr_t)(h)&1) != 0)
#define DT__R_CLOSED ((dt__tval *)(uintptr_t)1)

/* Spins briefly until *counter differs from `seen` (1) or gives up (0). The
 * spin is bounded (a few tens of microseconds) and yields the core between
 * probes, so a 2-core machine running more threads than cores is not starved:
 * it only saves the sleep/wake system calls when work arrives back to back. */
int dt__spin_until_changed(atomic_uint *counter, unsigned seen);
/* Probes of the bounded spins before a thread sleeps on its condition
 * variable; each probe yields the core once. */
#ifndef DT_SPIN_PROBES
#define DT_SPIN_PROBES 64
#endif

/* Pools of the per-op records (common/pool.h): made on one thread, freed on
 * another. */
extern dt__pool dt__node_pool, dt__kernel_pool, dt__blob_pool, dt__tval_pool;
/* Frees a node record (any thread). */
static inline void dt__node_free(dt__node *n) { dt__pool_free(&dt__node_pool, n); }
/* Frees a kernel builder (controller). */
static inline void dt__kernel_free(dt__kernel *k) { dt__pool_free(&dt__kernel_pool, k); }

#define DT_BACKLOG_MAX 32768
/* A client thread compares the backlog with DT_BACKLOG_MAX once every this
 * many submissions. */
#define DT_BACKLOG_STRIDE 64
/* Counts records leaving the pipeline and wakes a waiting client (any thread). */
void dt__backlog_done(dt_graph *g, long n);
/* Records in flight now: nodes pushed + kernels queued - nodes lowered -
 * kernels run (any thread; a snapshot). */
long dt__backlog(dt_graph *g);

/* Appends a node; DT_ESHUTDOWN (node untouched) once the graph is closed. */
dt_status dt__graph_submit(dt_graph *g, dt__node *n);
/* Controller: waits until the queue holds something, then takes it whole
 * (oldest first); the closing batch ends in STOP. */
void dt__graph_wait_queue(dt_graph *g);
dt__node *dt__graph_take(dt_graph *g);
/* Controller: takes the dropped values (any order). Taken before the nodes
 * of the same round, so every node that reads one of them was pushed before
 * and is lowered first. */
dt__tval *dt__graph_take_releases(dt_graph *g);
static inline int dt__graph_ok(const dt_graph *g) { return g && g->magic == DT__GRAPH_LIVE; }
/* Wakes the controller if it sleeps (after a push to the queue or the release
 * stack; graph.c). */
void dt__graph_wake(dt_graph *g);
void *dt__controller_main(void *arg);

/* ------------------------------------------------------------- futures */

struct dt_future {
    uint32_t magic; /* DT__FUTURE_LIVE */
    atomic_int refs;
    uint64_t id; /* unique in the process: its name in encoded kernels */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready;         /* guarded by lock */
    int remaining;     /* arrivals still expected */
    unsigned fork_gen; /* dt__fork_gen when made (see dt__graph_forked) */
    char *error;       /* first kernel error (owned) */
    dt_status status;
    void (*cb)(void *);
    void *cb_arg;
    /* FETCH: the pieces that assemble the full value. */
    const dt__backend *be;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    int npieces;
    int accumulate;
    int64_t local; /* dt_tensor_fetch_local's mesh index, or -1 for the global value */
    dt__blob **pieces;
    int64_t *starts; /* npieces * ndim */
    void *assembled; /* backend impl, built on first read */
};

static inline int dt__future_ok(const dt_future *f) { return f && f->magic == DT__FUTURE_LIVE; }
dt_future *dt__future_new(void);
/* Marks `n` more arrivals expected (controller, before kernels are sent). */
void dt__future_expect(dt_future *f, int n);
/* One arrival (worker thread). `piece`, if not NULL, is stored at index i. */
void dt__future_arrive(dt_future *f, int i, dt__blob *piece);
/* Completes a future at once with an error status (e.g. shutdown). */
void dt__future_fail(dt_future *f, dt_status st, const char *msg);

/* ---------------------------------------------------------- collectives */

typedef enum dt__coll_kind {
    DT_COLL_ALLGATHER = 0, /* cat along dim_a */
    DT_COLL_ALLREDUCE,     /* sum in rank order */
    DT_COLL_REDUCESCATTER, /* slice each peer along dim_b to my range, sum */
    DT_COLL_ALLTOALL,      /* slice each peer along dim_b to my range, cat along dim_a */
    DT_COLL_SHIFT,         /* a ring step: rank r gets rank r-1's input (mod n), whole */
    DT_COLL_KINDS
} dt__coll_kind;

/* The communication interface and collective kernels' attributes:
 * src/dist/comm.h. */

/* The planner's description of one collective (controller only): lowering
 * fills it and dt__lw_collective turns it into one kernel per rank. */
typedef struct dt__coll {
    int n;
    int kind;
    int dim_a, dim_b, ndim;
    dt_device_type type;
    dt_dtype dtype;
    int64_t (*shapes)[DT_MAX_NDIM]; /* n: each rank's input shape */
    int64_t *starts, *lens;         /* n: each rank's range along dim_b */
} dt__coll;

/* A collective of `n` ranks on devices of `type`; NULL when out of memory. */
dt__coll *dt__coll_new(dt_device_type type, int kind, int n, int ndim, dt_dtype dtype);
void dt__coll_free(dt__coll *c);
/* ------------------------------------------------------------ lowering */

/* The controller's view while it lowers one batch. */
typedef struct dt__lower {
    dt_graph *g;
    const dt__node *node; /* the node being lowered */
    /* The node's first failure (sticky, reset per node): once set, the
     * dt__lw_* helpers make nothing more and every push discards its kernel,
     * so a lowering function may check only where it must release what it
     * holds. Its detail is the controller thread's dt_last_error(). */
    dt_status status;
    int32_t kflags; /* DT_KF_* the window's passes put on its backend kernels */
} dt__lower;

/* Records a lowering failure (the first one wins) with its reason in the
 * thread error; returns L->status. */
dt_status dt__lw_fail(dt__lower *L, dt_status st, const char *what);

/* The stream of mesh device `idx`, started on first use; NULL (L->status
 * set) when it cannot be made. */
dt__stream *dt__lw_stream(dt__lower *L, const dt_mesh *mesh, int64_t idx);
dt__stream *dt__lw_stream_kind(dt__lower *L, const dt_mesh *mesh, int64_t idx, int kind);
/* As dt__lw_push, on the device's communication stream. */
dt__blob *dt__lw_push_comm(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k);
/* A new kernel of `kop` carrying the node's op name and call site; NULL
 * (L->status set) when out of memory or after an earlier failure. */
dt__kernel *dt__lw_kernel(dt__lower *L, int kop);
/* Queues `k` on the stream of mesh device `idx`; sets k->out to a new blob
 * unless already set, and returns that blob with one extra reference for the
 * caller. The builder is packed into a queued record (dt__krec, its
 * references and extra move there) and freed. Always takes k: NULL k, a NULL
 * input (an earlier failure) or a failure here (out of memory) discards it
 * (its references and extra go, see dt__lw_discard) and returns NULL with
 * L->status set. */
dt__blob *dt__lw_push(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k);
/* As dt__lw_push on a stream the caller already holds. */
dt__blob *dt__lw_push_on(dt__lower *L, dt__stream *s, dt__kernel *k);
/* Frees a kernel builder that will not be queued with its input and output
 * references and what its extra owns (future reference, assembly, gate
 * reference). NULL is ignored. */
void dt__lw_discard(dt__kernel *k);
/* Shared by core/lower.c, core/fetch.c and the controller loop
 * (core/executor.c), controller thread: */
/* Binds a queued kernel to stream s: names its blobs, makes its output's
 * event its number on s, marks it to wait on inputs from other streams. */
void dt__lw_bind(dt_graph *g, dt__stream *s, dt__krec *k);
/* Adds k to s's batch; the controller's flush hands the batch over. */
void dt__lw_stream_append(dt_graph *g, dt__stream *s, dt__krec *k);
/* A core kernel's record (DT_KC_*) with no attributes, carrying the node's
 * op name and call site; NULL (L->status set) when out of memory. */
dt__krec *dt__lw_core_krec(dt__lower *L, int kop);
/* Queues a record whose blobs are all there (cannot fail). */
void dt__lw_push_krec(dt_graph *g, dt__stream *s, dt__krec *k);
/* Queues collective `c` on all of its c->n ranks or on none: rank r is mesh
 * device base + r * stride, on its `stream_kind` stream. Every rank's stream,
 * kernel and output are made before any is queued, so a failure leaves no
 * rank waiting for peers that never come. On success the inputs
 * blobs[idx] move into the kernels (set NULL) and next[idx] get the outputs
 * (next may be blobs); on failure blobs are untouched. c is freed in either
 * case. The ranks meet in the comm's group for their devices and stream kind
 * (dt__lw_group), under the group's next sequence number. */
dt_status dt__lw_collective(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c, int64_t base,
                            int64_t stride, dt__blob **blobs, dt__blob **next, dt_dtype dtype,
                            const char *opname);
/* As dt__lw_collective; also, where deps[idx] is set, rank idx's kernel
 * waits for that blob before it runs (its reference moves in, set NULL): an
 * ordering edge, not an operand (ring attention bounds its blocks in flight
 * with it). deps may be NULL. */
dt_status dt__lw_collective_after(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c,
                                  int64_t base, int64_t stride, dt__blob **blobs, dt__blob **deps,
                                  dt__blob **next, dt_dtype dtype, const char *opname);
/* Makes sure v has its blob array; DT_ENOMEM (L->status set) if not. */
dt_status dt__lw_alloc_blobs(dt__lower *L, dt__tval *v);
/* A blob holding the region (start, len) of `v` on device `idx`, which must
 * lie within v's local region there: v's own blob (retained) when the regions
 * are equal, else the output of a SLICE kernel (NULL on failure, as
 * dt__lw_push). */
dt__blob *dt__lw_region(dt__lower *L, dt__tval *v, int64_t idx, const int64_t *coord, const int64_t *start,
                        const int64_t *len);

/* Per-op hooks (src/ops/ and src/dist/). */
/* Returns DT_OK, or the failure (L->status) after which the controller
 * poisons the node's output (dt__lower_node). */
typedef dt_status (*dt__lower_fn)(dt__lower *L, dt__node *n);
typedef struct dt__op_info {
    const char *name;
    dt__lower_fn lower;
} dt__op_info;
extern const dt__op_info dt__ops[DT_OP_COUNT];

dt_status dt__lower_factory(dt__lower *L, dt__node *n);
/* nattr.flags of a SOURCE node whose extra holds one host block per device
 * (dt_tensor_from_local_buffers) instead of one global host impl. */
#define DT__SOURCE_LOCAL 1
/* Frees what a SOURCE node that was never lowered owns (client thread). */
void dt__source_free(const dt__backend *be, dt__node *n);
dt_status dt__lower_redistribute(dt__lower *L, dt__node *n);
dt_status dt__lower_sdpa_ring(dt__lower *L, dt__node *n);
dt_status dt__lower_reduce(dt__lower *L, dt__node *n);
dt_status dt__lower_linalg(dt__lower *L, dt__node *n);
dt_status dt__lower_view(dt__lower *L, dt__node *n);
dt_status dt__lower_elementwise(dt__lower *L, dt__node *n);
dt_status dt__lower_nn(dt__lower *L, dt__node *n);
dt_status dt__lower_sort_scan(dt__lower *L, dt__node *n);
dt_status dt__lower_masked_scatter(dt__lower *L, dt__node *n);
dt_status dt__lower_debug_gate(dt__lower *L, dt__node *n);
/* Value reads and graph-wide barriers (core/fetch.c). */
dt_status dt__lower_fetch(dt__lower *L, dt__node *n);
dt_status dt__lower_sync(dt__lower *L, dt__node *n);

/* ----------------------------------------------------- test-only gates */

/* Runs a DT_KC_GATE kernel (worker thread): sleeps until its gate opens or
 * its graph shuts down, then sets k->out to a copy of k->in[0]. */
void dt__debug_gate_run(dt__krec *k, dt__stream *s);
/* Lets g's kernels waiting at gates through, and any that reach a gate
 * later, without opening the gates for other graphs (dt_graph_shutdown,
 * before it joins the workers, so a forgotten gate cannot hang a shutdown).
 * Any thread. */
void dt__debug_gates_bypass(dt_graph *g);
/* Drops one reference to a gate (a discarded gate kernel's). */
void dt__debug_gate_unref(void *gate);

/* ------------------------------------------------ test-only stream hooks */

/* Test-only: serves device type `type` on g with `be` (for a C test that
 * runs a second device type on a copy of the ref backend). Call right after
 * dt_graph_create, before any op on that type. */
void dt__graph_set_backend_for_test(dt_graph *g, dt_device_type type, const dt__backend *be);
/* Test-only: kernels run so far on stream (type, id, kind), and of those
 * collectives and cross-mesh assemblies; -1 when the stream does not exist.
 * Call only after dt_graph_sync with no op recorded since (it reads the
 * controller's map; the sync orders it). */
int dt__graph_debug_stream(dt_graph *g, dt_device_type type, int64_t id, int kind, long *run, long *comm);
/* Controller: waits while a test holds it (dt_debug_hold_controller), until
 * released or the graph shuts down. */
void dt__debug_wait_held(dt_graph *g);

/* ------------------------------------------------------------ client */

/* Checks a graph is usable and the mesh/meta are sane. */
dt_status dt__client_check_graph(dt_graph *g);
/* DT_EDEVICE (thread error naming the device) when g's backend cannot run on
 * every device of `mesh` (see dt_graph_satisfy). Client threads. */
dt_status dt__graph_check_mesh(const dt_graph *g, const dt_mesh *mesh);
/* Makes a new symbol on `g` with metadata `m` (takes a mesh reference). */
dt_tensor *dt__tensor_new(dt_graph *g, const dt__meta *m);
/* A node for `op` with the thread's call site. */
dt__node *dt__node_new(int op);
/* The same with only the first `zeroed` bytes zeroed. DT__NODE_COMMON_BYTES
 * leaves the family union of the attributes (a.v_*, a.ints, a.sort_*)
 * undefined: for the elementwise family, which reads none of it. */
#define DT__NODE_COMMON_BYTES (offsetof(dt__node, a) + offsetof(dt__nattr, ints))
dt__node *dt__node_new_prefix(int op, size_t zeroed);
/* Submits `n` whose out is t->v: on failure frees n and t and returns NULL. */
dt_tensor *dt__client_submit(dt_tensor *t, dt__node *n);
/* A PlacementError message: "op: placements ... not accepted ...". */
dt_status dt__placement_error(const char *op, const dt__meta *const *ins, int nin, int mesh_dim,
                              const char *accepted, int fix_input, const dt_placement *fix);

/* Random stream: (seed, call counter) mixed into one generator seed. */
uint64_t dt__next_random_seed(void);

#endif /* DT_CORE_H */
