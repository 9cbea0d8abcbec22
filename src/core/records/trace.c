/*
 * The recorder for explain and traces (trace.h): the bounded buffers, the
 * process-wide switches, the graph's recorder, and the client's stamp of a
 * node being submitted. Each role appends its own records from its own
 * folder: the controller's (core/controller/trace_lower.c), the workers'
 * (core/worker/trace_kernels.c); core/api/trace_take.c hands them over.
 *
 * Threads: dt__rec_client_submit on client threads (it writes only the node
 * being submitted); dt_record_* on any thread. Lock order: the recorder's
 * lock is a leaf.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/records/node.h"
#include "core/records/trace.h"

dt__rec_flags dt__rec_flag;

int64_t dt__rec_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ------------------------------------------------------------- buffers */

void dt__recbuf_init(dt__recbuf *b, size_t elem, size_t cap) {
    memset(b, 0, sizeof *b);
    b->elem = elem;
    b->per_chunk = (cap + DT__REC_CHUNKS - 1) / DT__REC_CHUNKS;
    if (b->per_chunk == 0)
        b->per_chunk = 1;
    b->cap = cap;
    atomic_init(&b->n, 0);
    atomic_init(&b->dropped, 0);
}

void *dt__recbuf_slot(dt__recbuf *b) {
    size_t n = atomic_load_explicit(&b->n, memory_order_relaxed); /* the writer's own count */
    if (n >= b->cap) {
        atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
        return NULL;
    }
    size_t c = n / b->per_chunk, i = n % b->per_chunk;
    if (!b->chunks[c]) {
        /* Published by the commit's release store, with the record. */
        b->chunks[c] = dt__malloc(b->per_chunk * b->elem);
        if (!b->chunks[c]) {
            atomic_fetch_add_explicit(&b->dropped, 1, memory_order_relaxed);
            return NULL;
        }
    }
    void *slot = (char *)b->chunks[c] + i * b->elem;
    memset(slot, 0, b->elem);
    return slot;
}

void dt__recbuf_commit(dt__recbuf *b) {
    size_t n = atomic_load_explicit(&b->n, memory_order_relaxed);
    atomic_store_explicit(&b->n, n + 1, memory_order_release);
}

size_t dt__recbuf_count(const dt__recbuf *b) { return atomic_load_explicit(&b->n, memory_order_acquire); }

const void *dt__recbuf_at(const dt__recbuf *b, size_t i) {
    return (const char *)b->chunks[i / b->per_chunk] + (i % b->per_chunk) * b->elem;
}

void dt__recbuf_free(dt__recbuf *b) {
    if (!b)
        return;
    for (int c = 0; c < DT__REC_CHUNKS; c++) {
        dt__free(b->chunks[c]);
        b->chunks[c] = NULL;
    }
}

void dt__recbuf_reset(dt__recbuf *b) {
    dt__recbuf_free(b);
    atomic_store_explicit(&b->n, 0, memory_order_relaxed);
    atomic_store_explicit(&b->dropped, 0, memory_order_relaxed);
    b->taken = 0;
}

void dt__recbuf_rewind_taken(dt__recbuf *b, pthread_mutex_t *lock) {
    pthread_mutex_lock(lock);
    /* The caller is the only writer: n cannot move while we look. */
    if (b->taken == dt__recbuf_count(b)) {
        atomic_store_explicit(&b->n, 0, memory_order_release);
        b->taken = 0;
    }
    pthread_mutex_unlock(lock);
}

/* ------------------------------------------------------------ recorder */

dt__rec *dt__rec_new(void) {
    dt__rec *r = dt__calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    dt__recbuf_init(&r->explain, sizeof(dt_explain_record), DT__REC_EXPLAIN_CAP);
    dt__recbuf_init(&r->nodes, sizeof(dt__rec_node), DT__REC_NODES_CAP);
    dt__recbuf_init(&r->kmap, sizeof(dt__rec_kmap), DT__REC_KMAP_CAP);
    return r;
}

void dt__rec_free(dt__rec *r) {
    if (!r)
        return;
    dt__recbuf_free(&r->explain);
    dt__recbuf_free(&r->nodes);
    dt__recbuf_free(&r->kmap);
    for (dt__recbuf *b = r->workers, *next; b; b = next) {
        next = b->next;
        dt__recbuf_free(b);
        dt__free(b);
    }
    pthread_mutex_destroy(&r->lock);
    dt__free(r);
}

/* --------------------------------------------------------- client hook */

static atomic_uint client_threads;
static _Thread_local uint32_t tls_client;

void dt__rec_client_submit(dt__node *n) {
    if (!tls_client)
        tls_client = atomic_fetch_add_explicit(&client_threads, 1, memory_order_relaxed) + 1;
    n->rec_tid = tls_client;
    n->rec_t1 = dt__rec_now();
    if (!n->rec_t0)
        n->rec_t0 = n->rec_t1;
}

/* ---------------------------------------------------------- public API */

dt_status dt_record_enable(dt_record_kind kind, int on) {
    if ((unsigned)kind >= DT__REC_KINDS)
        return dt__error(DT_EINVAL, "dt_record_enable: unknown record kind %d", (int)kind);
    if (on) {
        atomic_fetch_add(&dt__rec_flag.on[kind], 1);
        atomic_fetch_add(&dt__rec_flag.any, 1);
        return DT_OK;
    }
    /* Never below zero: an unmatched off is ignored. */
    int cur = atomic_load(&dt__rec_flag.on[kind]);
    while (cur > 0 && !atomic_compare_exchange_weak(&dt__rec_flag.on[kind], &cur, cur - 1)) {
    }
    if (cur > 0)
        atomic_fetch_sub(&dt__rec_flag.any, 1);
    return DT_OK;
}

int dt_record_enabled(dt_record_kind kind) {
    return (unsigned)kind < DT__REC_KINDS && atomic_load(&dt__rec_flag.on[kind]) > 0;
}

const char *dt_comm_kind_name(int kind) {
    static const char *const names[DT_COMM_KINDS] = {"all_gather", "all_reduce", "reduce_scatter",
                                                     "all_to_all", "shift",      "send_recv"};
    return kind >= 0 && kind < DT_COMM_KINDS ? names[kind] : NULL;
}

void dt_record_free(void *records) { dt__free(records); }
