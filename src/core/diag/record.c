/*
 * Recording for explain and traces (record.h): the bounded per-thread
 * buffers, the hooks the controller, the workers and the client call while
 * recording is on, and the take functions that hand the records over.
 *
 * Threads: dt__rec_node_*, dt__rec_collective, dt__rec_send_recv and
 * dt__rec_kernel_queued on the controller; dt__rec_kernel_ran on a worker;
 * dt__rec_client_submit on client threads (it writes only the node being
 * submitted); dt_record_* and dt_graph_take_* on any client thread. Lock
 * order: the recorder's lock is a leaf.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/coll.h"
#include "core/client/graph_int.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/core.h"
#include "core/diag/record.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream_int.h"

dt__rec_flags dt__rec_flag;

/* Records per buffer: the controller's explain and node buffers, its kernel
 * map and each worker's kernels. A full buffer drops (and counts). */
#define EXPLAIN_CAP (1u << 18)
#define NODES_CAP (1u << 18)
#define KMAP_CAP (1u << 20)
#define KERNELS_CAP (1u << 20)

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

/* ------------------------------------------------------------ recorder */

dt__rec *dt__rec_new(void) {
    dt__rec *r = dt__calloc(1, sizeof *r);
    if (!r)
        return NULL;
    pthread_mutex_init(&r->lock, NULL);
    dt__recbuf_init(&r->explain, sizeof(dt_explain_record), EXPLAIN_CAP);
    dt__recbuf_init(&r->nodes, sizeof(dt__rec_node), NODES_CAP);
    dt__recbuf_init(&r->kmap, sizeof(dt__rec_kmap), KMAP_CAP);
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

/* ----------------------------------------------------- controller hooks */

/* Appends the collective being merged, if any. */
static void flush_pending(dt__rec *r) {
    if (!r->pend_valid)
        return;
    r->pend_valid = 0;
    dt_explain_record *e = dt__recbuf_slot(&r->explain);
    if (!e)
        return;
    *e = r->pend;
    dt__recbuf_commit(&r->explain);
}

int64_t dt__rec_node_begin(dt__lower *L, dt__node *n) {
    dt__rec *r = L->g->rec;
    if (!r || !dt__rec_enabled(DT__REC_TRACE))
        return 0;
    /* Reads and syncs are the take's own synchronisation: not traced, so
     * nothing is written after a sync completes (STOP never comes here: the
     * controller handles it before). */
    if (dt__ops[n->op].flags & DT_OPF_FUTURE)
        return 0;
    r->cur_node = ++r->node_seq;
    r->cur_op = NULL;
    return dt__rec_now();
}

void dt__rec_node_end(dt__lower *L, dt__node *n, int64_t t0) {
    dt__rec *r = L->g->rec;
    if (!r)
        return;
    flush_pending(r);
    if (!r->cur_node)
        return;
    dt__rec_node *rec = dt__recbuf_slot(&r->nodes);
    if (rec) {
        dt_trace_node *p = &rec->pub;
        p->id = r->cur_node;
        /* The family's name ("binary", "reduce") says less than its kernels'. */
        p->op = r->cur_op ? r->cur_op : dt__ops[n->op].name;
        p->file = n->site_file;
        p->line = n->site_line;
        p->client_thread = n->rec_tid;
        p->client_begin_ns = n->rec_t0;
        p->client_end_ns = n->rec_t1;
        p->lower_begin_ns = t0;
        p->lower_end_ns = dt__rec_now();
        p->dtype = n->out ? (int32_t)n->out->meta.dtype : -1;
        const dt__tval *vs[DT_TRACE_SHAPES];
        int nv = 0;
        if (n->out)
            vs[nv++] = n->out;
        for (int i = 0; i < n->n_in && nv < DT_TRACE_SHAPES; i++)
            if (n->in[i])
                vs[nv++] = n->in[i];
        p->n_shapes = nv;
        for (int i = 0; i < nv; i++) {
            p->ndim[i] = vs[i]->meta.ndim;
            memcpy(p->shape[i], vs[i]->meta.shape, sizeof p->shape[i]);
        }
        dt__recbuf_commit(&r->nodes);
    }
    r->cur_node = 0;
}

/* Flushes the pending explain record and starts the next one for the
 * node being lowered: op defaults to the node's. */
static dt_explain_record *begin_pending(dt__rec *r, dt__lower *L, int kind, int md, const char *op,
                                        int64_t bytes) {
    flush_pending(r);
    dt_explain_record *e = &r->pend;
    memset(e, 0, sizeof *e);
    e->file = L->node->site_file;
    e->line = L->node->site_line;
    e->kind = kind;
    e->mesh_dim = md;
    e->op = op ? op : dt__ops[L->node->op].name;
    e->bytes = bytes;
    r->pend_valid = 1;
    return e;
}

void dt__rec_collective(dt__lower *L, const dt_mesh *mesh, const dt__coll *c, int64_t base, int64_t stride,
                        const char *opname) {
    dt__rec *r = L->g->rec;
    if (!r || !dt__rec_enabled(DT__REC_EXPLAIN))
        return;
    int md = -1;
    for (int d = 0; d < mesh->ndim; d++)
        if (mesh->strides[d] == stride && mesh->shape[d] == c->n) {
            md = d;
            break;
        }
    int64_t most = 0, es = (int64_t)dt_dtype_size(c->dtype);
    for (int k = 0; k < c->n; k++) {
        int64_t numel = 1;
        for (int d = 0; d < c->ndim; d++)
            numel *= c->shapes[k][d];
        if (numel * es > most)
            most = numel * es;
    }
    /* The other groups of the same collective (the caller queues them one
     * after another, base 0 first): one record, the most over them. */
    if (base != 0 && r->pend_valid && r->pend.kind == c->kind && r->pend.mesh_dim == md) {
        if (most > r->pend.bytes)
            r->pend.bytes = most;
        return;
    }
    /* dt__coll_kind and dt_comm_kind agree (static assert below). */
    dt_explain_record *e = begin_pending(r, L, (int)c->kind, md, opname, most);
    if (md >= 0 && mesh->names_given)
        memcpy(e->mesh_dim_name, mesh->names[md], sizeof e->mesh_dim_name);
}

_Static_assert((int)DT_COLL_ALLGATHER == (int)DT_COMM_ALL_GATHER &&
                   (int)DT_COLL_ALLREDUCE == (int)DT_COMM_ALL_REDUCE &&
                   (int)DT_COLL_REDUCESCATTER == (int)DT_COMM_REDUCE_SCATTER &&
                   (int)DT_COLL_ALLTOALL == (int)DT_COMM_ALL_TO_ALL &&
                   (int)DT_COLL_SHIFT == (int)DT_COMM_SHIFT,
               "the collective kinds are the comm kinds");

void dt__rec_send_recv(dt__lower *L, int64_t bytes) {
    dt__rec *r = L->g->rec;
    if (!r || !dt__rec_enabled(DT__REC_EXPLAIN))
        return;
    begin_pending(r, L, DT_COMM_SEND_RECV, -1, NULL, bytes);
}

void dt__rec_kernel_queued(dt_graph *g, const dt__stream *s, const dt__krec *k, uint64_t seq) {
    dt__rec *r = g->rec;
    if (!r->cur_op)
        r->cur_op = k->opname;
    dt__rec_kmap *m = dt__recbuf_slot(&r->kmap);
    if (!m)
        return;
    m->key = dt__rec_stream_key(s->type, s->kind, s->device_id);
    m->seq = seq;
    m->node = r->cur_node;
    dt__recbuf_commit(&r->kmap);
}

/* --------------------------------------------------------- worker hook */

void dt__rec_kernel_ran(dt__stream *s, const dt__krec *k, const char *kernel, int64_t t0) {
    dt__rec *r = s->g->rec;
    if (!r)
        return;
    dt__recbuf *b = s->rec;
    if (!b) {
        b = dt__malloc(sizeof *b);
        if (!b)
            return;
        dt__recbuf_init(b, sizeof(dt__rec_kernel), KERNELS_CAP);
        b->key = dt__rec_stream_key(s->type, s->kind, s->device_id);
        pthread_mutex_lock(&r->lock);
        b->next = r->workers;
        r->workers = b;
        pthread_mutex_unlock(&r->lock);
        s->rec = b;
    }
    dt__rec_kernel *e = dt__recbuf_slot(b);
    if (!e)
        return;
    e->seq = s->completed + 1; /* the number dt__kernel_run completes next */
    e->begin_ns = t0;
    e->end_ns = dt__rec_now();
    e->bytes = k->out && k->out->impl && s->be->nbytes ? (int64_t)s->be->nbytes(k->out->impl) : 0;
    e->op = k->opname;
    e->kernel = kernel;
    e->file = k->site_file;
    e->line = k->site_line;
    e->kop = k->kop;
    dt__recbuf_commit(b);
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

/* Copies [b->taken, count) of `b` into a new array (*out, *n). */
static dt_status take_buf(dt__recbuf *b, size_t out_elem, void **out, size_t *n) {
    size_t cnt = dt__recbuf_count(b), k = cnt - b->taken;
    *out = NULL;
    *n = 0;
    if (!k)
        return DT_OK;
    char *arr = dt__malloc(k * out_elem);
    if (!arr)
        return dt__error(DT_ENOMEM, "records: out of memory");
    for (size_t i = 0; i < k; i++)
        memcpy(arr + i * out_elem, dt__recbuf_at(b, b->taken + i), out_elem);
    b->taken = cnt;
    *out = arr;
    *n = k;
    return DT_OK;
}

/* The start of a take: checks g, waits for its queued work, then locks its
 * records (*r, unlocked by the caller). *r stays NULL on failure or when g
 * records nothing. */
static dt_status take_begin(dt_graph *g, dt__rec **r, int64_t *dropped) {
    if (dropped)
        *dropped = 0;
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
    dt_status st = dt_graph_sync(g);
    if (st != DT_OK || !g->rec)
        return st;
    *r = g->rec;
    pthread_mutex_lock(&(*r)->lock);
    return DT_OK;
}

dt_status dt_graph_take_explain(dt_graph *g, dt_explain_record **out, size_t *n, int64_t *dropped) {
    if (!out || !n)
        return dt__error(DT_EINVAL, "dt_graph_take_explain: NULL argument");
    *out = NULL;
    *n = 0;
    dt__rec *r = NULL;
    dt_status st = take_begin(g, &r, dropped);
    if (!r)
        return st;
    st = take_buf(&r->explain, sizeof **out, (void **)out, n);
    long d = atomic_exchange(&r->explain.dropped, 0);
    if (dropped)
        *dropped = d;
    if (st == DT_OK && !dt__rec_enabled(DT__REC_EXPLAIN))
        dt__recbuf_reset(&r->explain);
    pthread_mutex_unlock(&r->lock);
    return st;
}

static int kmap_cmp(const void *a, const void *b) {
    const dt__rec_kmap *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The node of kernel `seq` on stream `key`, from the sorted map. */
static uint64_t kmap_find(const dt__rec_kmap *m, size_t n, uint64_t key, uint64_t seq) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const dt__rec_kmap *e = &m[mid];
        if (e->key < key || (e->key == key && e->seq < seq))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && m[lo].key == key && m[lo].seq == seq ? m[lo].node : 0;
}

dt_status dt_graph_take_trace(dt_graph *g, dt_trace_node **nodes, size_t *n_nodes, dt_trace_kernel **kernels,
                              size_t *n_kernels, int64_t *dropped) {
    if (!nodes || !n_nodes || !kernels || !n_kernels)
        return dt__error(DT_EINVAL, "dt_graph_take_trace: NULL argument");
    *nodes = NULL;
    *kernels = NULL;
    *n_nodes = *n_kernels = 0;
    dt__rec *r = NULL;
    dt_status st = take_begin(g, &r, dropped);
    if (!r)
        return st;
    long d = 0;
    st = take_buf(&r->nodes, sizeof **nodes, (void **)nodes, n_nodes);
    d += atomic_exchange(&r->nodes.dropped, 0);
    /* The whole map (kernels of earlier takes' nodes may run later), sorted
     * by stream and number. */
    size_t nm = dt__recbuf_count(&r->kmap);
    dt__rec_kmap *map = st == DT_OK ? dt__malloc((nm ? nm : 1) * sizeof *map) : NULL;
    if (st == DT_OK && !map)
        st = dt__error(DT_ENOMEM, "records: out of memory");
    for (size_t i = 0; map && i < nm; i++)
        map[i] = *(const dt__rec_kmap *)dt__recbuf_at(&r->kmap, i);
    if (map)
        qsort(map, nm, sizeof *map, kmap_cmp);
    d += atomic_exchange(&r->kmap.dropped, 0);
    size_t total = 0;
    for (dt__recbuf *b = r->workers; b; b = b->next)
        total += dt__recbuf_count(b) - b->taken;
    dt_trace_kernel *ks = st == DT_OK && total ? dt__calloc(total, sizeof *ks) : NULL;
    if (st == DT_OK && total && !ks)
        st = dt__error(DT_ENOMEM, "records: out of memory");
    size_t nk = 0;
    for (dt__recbuf *b = r->workers; b && st == DT_OK; b = b->next) {
        size_t cnt = dt__recbuf_count(b);
        for (size_t i = b->taken; i < cnt && nk < total; i++) {
            const dt__rec_kernel *e = dt__recbuf_at(b, i);
            dt_trace_kernel *o = &ks[nk++];
            o->node = kmap_find(map, nm, b->key, e->seq);
            o->device_type = (int32_t)(b->key >> 56);
            o->stream_kind = (int32_t)((b->key >> 48) & 0xff);
            o->device_id = (int64_t)(b->key & 0xffffffffffffull);
            o->seq = e->seq;
            o->op = e->op;
            o->kernel = e->kernel;
            o->file = e->file;
            o->line = e->line;
            o->begin_ns = e->begin_ns;
            o->end_ns = e->end_ns;
            o->bytes = e->bytes;
        }
        b->taken = cnt;
        d += atomic_exchange(&b->dropped, 0);
    }
    dt__free(map);
    if (st != DT_OK) {
        dt__free(*nodes);
        dt__free(ks);
        *nodes = NULL;
        *n_nodes = 0;
        ks = NULL;
        nk = 0;
    } else if (!dt__rec_enabled(DT__REC_TRACE)) {
        dt__recbuf_reset(&r->nodes);
        dt__recbuf_reset(&r->kmap);
        for (dt__recbuf *b = r->workers; b; b = b->next)
            dt__recbuf_reset(b);
    }
    pthread_mutex_unlock(&r->lock);
    *kernels = ks;
    *n_kernels = nk;
    if (dropped)
        *dropped = d;
    return st;
}
