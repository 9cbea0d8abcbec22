/*
 * The controller (EagerGraphExecutor): one thread per graph. It takes the
 * client's queue whole, lowers each node into per-device kernels, and hands
 * each stream its kernels once per batch. It never waits on a worker.
 *
 * Threads: everything here runs on the controller thread, except that
 * dt__lw_* helpers are called by op lowering functions on that same thread.
 * Locks taken: graph qlock (only to sleep on an empty queue), stream locks
 * one at a time (inside dt__stream_submit); never two at once.
 */
#include <string.h>

#include "core/core.h"

/* ---------------------------------------------------------------- helpers */

dt__stream *dt__lw_stream_kind(dt__lower *L, const dt_mesh *mesh, int64_t idx, int kind) {
    dt_graph *g = L->g;
    int64_t id = mesh->ids[idx] * DT_STREAM_KINDS + kind;
    /* CUDA devices are not driven yet; every id gets a CPU-style worker. */
    if (id >= g->nstreams) {
        int64_t ncap = g->nstreams ? g->nstreams : 8;
        while (ncap <= id)
            ncap *= 2;
        dt__stream **ns = dt__realloc(g->streams, (size_t)ncap * sizeof *ns);
        DT_ASSERT(ns);
        memset(ns + g->nstreams, 0, (size_t)(ncap - g->nstreams) * sizeof *ns);
        g->streams = ns;
        g->nstreams = ncap;
    }
    if (!g->streams[id]) {
        g->streams[id] = dt__stream_start(g, mesh->type, mesh->ids[idx], kind);
        DT_ASSERT(g->streams[id]);
    }
    return g->streams[id];
}

dt__stream *dt__lw_stream(dt__lower *L, const dt_mesh *mesh, int64_t idx) {
    return dt__lw_stream_kind(L, mesh, idx, DT_STREAM_COMPUTE);
}

dt__kernel *dt__lw_kernel(dt__lower *L, int kop) {
    dt__kernel *k = dt__pool_alloc(&dt__kernel_pool);
    DT_ASSERT(k);
    k->kop = kop;
    k->opname = dt__ops[L->node->op].name;
    k->site_file = L->node->site_file;
    k->site_line = L->node->site_line;
    return k;
}

/* Adds k to the stream's batch; the batch is handed over by flush(). */
static void stream_append(dt_graph *g, dt__stream *s, dt__kernel *k) {
    g->kqueued_local++;
    k->next = NULL;
    if (s->btail)
        s->btail->next = k;
    else
        s->bhead = k;
    s->btail = k;
    if (!s->dirty) {
        s->dirty = 1;
        s->next_dirty = g->dirty;
        g->dirty = s;
    }
}

static dt__blob *push_on(dt__lower *L, dt__stream *s, dt__kernel *k) {
    if (!k->out && k->kop != DT_KC_FETCH && k->kop != DT_KC_SYNC) {
        k->out = dt__blob_new(L->g->be);
        DT_ASSERT(k->out);
    }
    if (k->out)
        k->out->producer = s;
    /* An input made on another stream may not be ready when this runs. */
    for (int i = 0; i < k->n_in; i++)
        if (k->in[i]->producer != s)
            k->wait = 1;
    stream_append(L->g, s, k);
    return dt__blob_retain(k->out);
}

dt__blob *dt__lw_push(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k) {
    return push_on(L, dt__lw_stream(L, mesh, idx), k);
}

dt__blob *dt__lw_push_comm(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k) {
    return push_on(L, dt__lw_stream_kind(L, mesh, idx, DT_STREAM_COMM), k);
}

void dt__lw_alloc_blobs(dt__tval *v) {
    if (!v->blobs) {
        v->blobs = dt__calloc((size_t)v->meta.mesh->ndev, sizeof *v->blobs);
        DT_ASSERT(v->blobs);
    }
}

dt__blob *dt__lw_region(dt__lower *L, dt__tval *v, int64_t idx, const int64_t *coord, const int64_t *start,
                        const int64_t *len) {
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    dt__local_region(&v->meta, coord, ls, ll);
    int same = 1;
    for (int d = 0; d < v->meta.ndim; d++) {
        DT_ASSERT(start[d] >= ls[d] && start[d] + len[d] <= ls[d] + ll[d]);
        if (start[d] != ls[d] || len[d] != ll[d])
            same = 0;
    }
    if (same)
        return dt__blob_retain(v->blobs[idx]);
    dt__kernel *k = dt__lw_kernel(L, DT_K_SLICE);
    k->n_in = 1;
    k->in[0] = dt__blob_retain(v->blobs[idx]);
    k->attr.dtype = v->meta.dtype;
    k->attr.ndim = v->meta.ndim;
    for (int d = 0; d < v->meta.ndim; d++) {
        k->attr.start[d] = start[d] - ls[d];
        k->attr.shape[d] = len[d];
    }
    return dt__lw_push(L, v->meta.mesh, idx, k);
}

/* -------------------------------------------------------- reads, syncs */

/* A fetch sends one kernel per device holding a distinct piece: devices at
 * coordinate 0 of every Replicate mesh dim. Partial pieces are summed. */
static void lower_fetch(dt__lower *L, dt__node *n) {
    dt__tval *v = n->in[0];
    dt_future *f = n->extra;
    const dt__meta *m = &v->meta;
    const dt_mesh *mesh = m->mesh;
    int accumulate = 0;
    for (int md = 0; md < mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_PARTIAL)
            accumulate = 1;
    int64_t coord[DT_MAX_MESH_NDIM], len[DT_MAX_NDIM];
    int npieces = 0;
    if (f->local >= 0) {
        /* One device's block as stored: no sum, the piece starts at 0. */
        f->pieces = dt__calloc(1, sizeof *f->pieces);
        f->starts = dt__calloc((size_t)(m->ndim ? m->ndim : 1), sizeof *f->starts);
        DT_ASSERT(f->pieces && f->starts);
        f->accumulate = 0;
        dt__kernel *k = dt__lw_kernel(L, DT_KC_FETCH);
        k->n_in = 1;
        k->in[0] = dt__blob_retain(v->blobs[f->local]);
        k->rank = 0;
        k->extra = f;
        atomic_fetch_add(&f->refs, 1);
        dt__lw_push(L, mesh, f->local, k);
        f->npieces = 1;
        dt__future_expect(f, 1);
        dt_future_release(f);
        return;
    }
    f->pieces = dt__calloc((size_t)mesh->ndev, sizeof *f->pieces);
    f->starts = dt__calloc((size_t)mesh->ndev * (size_t)(m->ndim ? m->ndim : 1), sizeof *f->starts);
    DT_ASSERT(f->pieces && f->starts);
    f->accumulate = accumulate;
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        int skip = 0;
        for (int md = 0; md < mesh->ndim; md++)
            if (m->pl[md].kind == DT_PLACEMENT_REPLICATE && coord[md] != 0)
                skip = 1;
        if (skip)
            continue;
        dt__local_region(m, coord, f->starts + (size_t)npieces * (size_t)m->ndim, len);
        dt__kernel *k = dt__lw_kernel(L, DT_KC_FETCH);
        k->n_in = 1;
        k->in[0] = dt__blob_retain(v->blobs[i]);
        k->rank = npieces++;
        k->extra = f;
        atomic_fetch_add(&f->refs, 1);
        dt__lw_push(L, mesh, i, k);
    }
    f->npieces = npieces;
    dt__future_expect(f, npieces);
    dt_future_release(f); /* the node's reference */
}

static void lower_sync(dt__lower *L, dt__node *n) {
    dt_graph *g = L->g;
    dt_future *f = n->extra;
    int count = 0;
    for (int64_t id = 0; id < g->nstreams; id++)
        if (g->streams[id])
            count++;
    dt__future_expect(f, count + 1);
    for (int64_t id = 0; id < g->nstreams; id++) {
        dt__stream *s = g->streams[id];
        if (!s)
            continue;
        dt__kernel *k = dt__lw_kernel(L, DT_KC_SYNC);
        k->extra = f;
        atomic_fetch_add(&f->refs, 1);
        stream_append(g, s, k);
    }
    /* The controller's own arrival: covers a graph with no streams yet. */
    dt__future_arrive(f, -1, NULL);
    dt_future_release(f);
}

/* ------------------------------------------------------------ op table */

const dt__op_info dt__ops[DT_OP_COUNT] = {
    [DT_OP_SOURCE] = {"tensor", dt__lower_factory},
    [DT_OP_FULL] = {"full", dt__lower_factory},
    [DT_OP_RAND] = {"rand", dt__lower_factory},
    [DT_OP_RANDN] = {"randn", dt__lower_factory},
    [DT_OP_ARANGE] = {"arange", dt__lower_factory},
    [DT_OP_BINARY] = {"binary", dt__lower_binary},
    [DT_OP_BINARY_SCALAR] = {"binary_scalar", dt__lower_binary},
    [DT_OP_NEG] = {"neg", dt__lower_unary},
    [DT_OP_MATMUL] = {"matmul", dt__lower_matmul},
    [DT_OP_SUM] = {"sum", dt__lower_sum},
    [DT_OP_REDISTRIBUTE] = {"redistribute", dt__lower_redistribute},
    [DT_OP_REDUCE] = {"reduce", dt__lower_reduce},
    [DT_OP_LINALG] = {"linalg", dt__lower_linalg},
    [DT_OP_VIEW] = {"view", dt__lower_view},
    [DT_OP_UNARY] = {"unary", dt__lower_elementwise},
    [DT_OP_CAST] = {"to", dt__lower_elementwise},
    [DT_OP_WHERE] = {"where", dt__lower_elementwise},
    [DT_OP_MASKED_FILL] = {"masked_fill", dt__lower_elementwise},
    [DT_OP_CLAMP] = {"clamp", dt__lower_elementwise},
    /* nn functional family */
    [DT_OP_ACTIVATION] = {"activation", dt__lower_nn},
    [DT_OP_SOFTMAX] = {"softmax", dt__lower_nn},
    [DT_OP_NORM] = {"norm", dt__lower_nn},
    [DT_OP_EMBEDDING] = {"embedding", dt__lower_nn},
    [DT_OP_CONV2D] = {"conv2d", dt__lower_nn},
    [DT_OP_INTERPOLATE] = {"interpolate", dt__lower_nn},
    [DT_OP_PAD] = {"pad", dt__lower_nn},
    [DT_OP_DROPOUT] = {"dropout", dt__lower_nn},
    [DT_OP_SDPA] = {"scaled_dot_product_attention", dt__lower_nn},
    /* creation and data-dependent family */
    [DT_OP_RANDINT] = {"randint", dt__lower_factory},
    [DT_OP_SORT_SCAN] = {"sort_scan", dt__lower_sort_scan},
    [DT_OP_POOL2D] = {"pool2d", dt__lower_nn},
    [DT_OP_MASKED_SCATTER] = {"masked_scatter", dt__lower_masked_scatter},
    [DT_OP_DEBUG_GATE] = {"debug_gate", dt__lower_debug_gate},
    [DT_OP_FETCH] = {"fetch", lower_fetch},
    [DT_OP_SYNC] = {"sync", lower_sync},
    [DT_OP_STOP] = {"stop", NULL},
};
_Static_assert(DT_OP_COUNT == 36, "update dt__ops when adding an op");

/* -------------------------------------------------------------- the loop */

/* After dt_graph_cancel: frees what node n owns without lowering it. Its
 * outputs get no blobs (nothing can read them: the graph is closed); a read
 * or sync fails with DT_ECANCELLED. */
static void discard(dt_graph *g, dt__node *n) {
    atomic_fetch_add_explicit(&g->dropped, 1, memory_order_relaxed);
    if (n->op == DT_OP_FETCH || n->op == DT_OP_SYNC) {
        dt__future_fail(n->extra, DT_ECANCELLED, "cancelled: the graph was cancelled before this read ran");
        dt_future_release(n->extra); /* the node's reference */
        n->extra = NULL;
    } else if (n->op == DT_OP_DEBUG_GATE) {
        dt__debug_node_drop(n);
    } else {
        dt__source_free(g->be, n);
    }
}

static void flush(dt_graph *g) {
    while (g->dirty) {
        dt__stream *s = g->dirty;
        g->dirty = s->next_dirty;
        s->dirty = 0;
        s->next_dirty = NULL;
        dt__stream_submit(s, s->bhead, s->btail);
        s->bhead = s->btail = NULL;
    }
}

void *dt__controller_main(void *arg) {
    dt_graph *g = arg;
    dt__lower L = {.g = g, .node = NULL};
    int stop = 0;
    while (!stop) {
        dt__graph_wait_queue(g);
        dt__tval *released = dt__graph_take_releases(g);
        dt__node *batch = dt__graph_take(g);
        long lowered = 0;
        while (batch) {
            dt__node *n = batch;
            batch = n->next;
            lowered++;
            if (n->op == DT_OP_STOP) {
                /* Last of the closing batch: the values dropped before the
                 * close travel on it. */
                stop = 1;
                for (dt__tval *v = n->extra, *next; v; v = next) {
                    next = v->next_release;
                    dt__tval_free_deferred(g, v);
                }
            } else if (atomic_load_explicit(&g->cancelled, memory_order_relaxed)) {
                discard(g, n);
            } else {
                L.node = n;
                dt__ops[n->op].lower(&L, n);
            }
            dt__node_free(n);
        }
        while (released) {
            dt__tval *v = released;
            released = v->next_release;
            dt__tval_free_deferred(g, v);
        }
        /* Published before the kernels can run and retire. */
        atomic_store_explicit(&g->kqueued, g->kqueued_local, memory_order_relaxed);
        flush(g);
        /* STOP was never counted: it does not go through dt__graph_submit. */
        dt__backlog_done(g, lowered - stop);
        /* Once per batch, for dt_graph_get_stats: the batch's nodes now count
         * as their kernels only, so this is what flow control bounds. */
        long in_flight = dt__backlog(g);
        if (in_flight > atomic_load_explicit(&g->peak_backlog, memory_order_relaxed))
            atomic_store_explicit(&g->peak_backlog, in_flight, memory_order_relaxed);
    }
    dt__graph_flush_releases(g);
    /* Nodes after STOP cannot exist: the queue is closed before STOP goes in. */
    for (int64_t id = 0; id < g->nstreams; id++)
        if (g->streams[id])
            dt__stream_stop(g->streams[id]);
    dt__free(g->streams);
    g->streams = NULL;
    g->nstreams = 0;
    dt__graph_controller_exited(g);
    return NULL;
}
