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
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/window.h"
#include "dist/comm.h"

/* ---------------------------------------------------------------- helpers */

dt_status dt__lw_fail(dt__lower *L, dt_status st, const char *what) {
    if (L->status == DT_OK) {
        L->status = st;
        dt__error(st, "%s", what);
    }
    return L->status;
}

dt__stream *dt__lw_stream_kind(dt__lower *L, const dt_mesh *mesh, int64_t idx, int kind) {
    /* Without overlap (DTORCH_OVERLAP=0) collectives share the compute
     * stream, so they serialise with compute: the baseline overlap is
     * measured against. */
    if (!L->g->overlap)
        kind = DT_STREAM_COMPUTE;
    dt__stream *s = dt__graph_stream(L->g, mesh->type, mesh->ids[idx], kind);
    if (!s)
        dt__lw_fail(L, dt_last_status() != DT_OK ? dt_last_status() : DT_ENOMEM,
                    "cannot start a stream (out of memory or threads)");
    return s;
}

dt__stream *dt__lw_stream(dt__lower *L, const dt_mesh *mesh, int64_t idx) {
    return dt__lw_stream_kind(L, mesh, idx, DT_STREAM_COMPUTE);
}

dt__kernel *dt__lw_kernel(dt__lower *L, int kop) {
    if (L->status != DT_OK)
        return NULL;
    dt__kernel *k = dt__pool_alloc(&dt__kernel_pool);
    if (!k) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (kernel record)");
        return NULL;
    }
    k->kop = kop;
    k->opname = dt__ops[L->node->op].name;
    k->site_file = L->node->site_file;
    k->site_line = L->node->site_line;
    return k;
}

void dt__lw_discard(dt__kernel *k) {
    if (!k)
        return;
    for (int i = 0; i < k->n_in; i++)
        dt__blob_release(k->in[i]);
    dt__blob_release(k->out);
    if (k->extra) {
        if (k->kop == DT_KC_FETCH || k->kop == DT_KC_SYNC) {
            dt_future_release(k->extra);
        } else if (k->kop == DT_KC_ASSEMBLE) {
            dt__assembly_free(k->extra);
        } else if (k->kop == DT_KC_GATE) {
            dt__debug_gate_unref(k->extra);
        }
    }
    dt__kernel_free(k);
}

/* Adds k to the stream's batch; the batch is handed over by flush(). */
static void stream_append(dt_graph *g, dt__stream *s, dt__krec *k) {
    g->kqueued_local++;
    s->appended++;
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

/* Binds a queued kernel to stream s: names its blobs (dt__blob.id), makes
 * its output's event this kernel's number on s, and marks it to wait when
 * an input comes from another stream. */
static void bind(dt_graph *g, dt__stream *s, dt__krec *k) {
    if (k->out) {
        if (!k->out->id)
            k->out->id = ++g->blob_ids;
        k->out->producer = s;
        k->out->seq = s->appended + 1;
    }
    for (int i = 0; i < k->n_in; i++) {
        if (!k->in[i]->id)
            k->in[i]->id = ++g->blob_ids; /* a source the controller made */
        if (k->in[i]->producer != s)
            k->wait = 1;
    }
}

/* The queued form of a builder: its references and extra move into it. */
static dt__krec *pack(const dt__kernel *k) {
    /* One pass over the attributes into a stack buffer when they have no
     * text (all but einsum), then a record of the exact size. */
    uint8_t tmp[DT__KATTR_PACK_MAX];
    size_t n = k->attr.text ? dt__kattr_pack_size(&k->attr) : dt__kattr_pack(&k->attr, tmp);
    dt__krec *r = dt__krec_alloc(n);
    if (!r)
        return NULL;
    r->kop = k->kop;
    r->n_in = k->n_in;
    r->rank = k->rank;
    r->site_line = k->site_line;
    memcpy(r->in, k->in, sizeof r->in);
    r->out = k->out;
    r->opname = k->opname;
    r->site_file = k->site_file;
    r->handle = k->extra;
    if (k->attr.text)
        dt__kattr_pack(&k->attr, r->attr);
    else
        memcpy(r->attr, tmp, n);
    return r;
}

dt__blob *dt__lw_push_on(dt__lower *L, dt__stream *s, dt__kernel *k) {
    if (!k)
        return NULL;
    int bad = L->status != DT_OK || !s;
    for (int i = 0; i < k->n_in; i++)
        if (!k->in[i])
            bad = 1;
    if (!bad && !k->out && k->kop != DT_KC_FETCH && k->kop != DT_KC_SYNC) {
        k->out = dt__blob_new(s->be);
        if (!k->out)
            dt__lw_fail(L, DT_ENOMEM, "out of memory (blob record)");
        bad = !k->out;
    }
    /* The node's reuse mark (passes/reuse.c) goes on its backend kernels. */
    if (k->kop < DT_K_COUNT)
        k->attr.flags |= L->kflags;
    dt__krec *r = bad ? NULL : pack(k);
    if (!r) {
        /* A NULL input or stream means an earlier step failed. */
        dt__lw_fail(L, DT_ENOMEM, "out of memory");
        dt__lw_discard(k);
        return NULL;
    }
    dt__kernel_free(k); /* its references moved into r */
    bind(L->g, s, r);
    stream_append(L->g, s, r);
    return dt__blob_retain(r->out);
}

/* A core kernel's record with no attributes, carrying the node's op name
 * and call site; NULL (L->status set) when out of memory. */
static dt__krec *core_krec(dt__lower *L, int kop) {
    dt__krec *k = L->status == DT_OK ? dt__krec_alloc(0) : NULL;
    if (!k) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (kernel record)");
        return NULL;
    }
    k->kop = kop;
    k->opname = dt__ops[L->node->op].name;
    k->site_file = L->node->site_file;
    k->site_line = L->node->site_line;
    return k;
}

/* Queues a record whose blobs are all there (cannot fail). */
static void push_krec(dt_graph *g, dt__stream *s, dt__krec *k) {
    bind(g, s, k);
    stream_append(g, s, k);
}

dt__blob *dt__lw_push(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k) {
    return dt__lw_push_on(L, k && L->status == DT_OK ? dt__lw_stream(L, mesh, idx) : NULL, k);
}

dt__blob *dt__lw_push_comm(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k) {
    return dt__lw_push_on(
        L, k && L->status == DT_OK ? dt__lw_stream_kind(L, mesh, idx, DT_STREAM_COMM) : NULL, k);
}

dt_status dt__lw_alloc_blobs(dt__lower *L, dt__tval *v) {
    if (!v->blobs && L->status == DT_OK) {
        v->blobs = dt__calloc((size_t)v->meta.mesh->ndev, sizeof *v->blobs);
        if (!v->blobs)
            dt__lw_fail(L, DT_ENOMEM, "out of memory (blob array)");
    }
    return L->status;
}

dt_status dt__lw_collective(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c, int64_t base,
                            int64_t stride, dt__blob **blobs, dt__blob **next, dt_dtype dtype,
                            const char *opname) {
    return dt__lw_collective_after(L, mesh, stream_kind, c, base, stride, blobs, NULL, next, dtype, opname);
}

dt_status dt__lw_collective_after(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c,
                                  int64_t base, int64_t stride, dt__blob **blobs, dt__blob **deps,
                                  dt__blob **next, dt_dtype dtype, const char *opname) {
    dt__krec **ks = c && L->status == DT_OK ? dt__calloc((size_t)c->n, sizeof *ks) : NULL;
    dt__stream **ss = ks ? dt__calloc((size_t)c->n, sizeof *ss) : NULL;
    int ok = ss != NULL;
    uint64_t group = 0, seq = 0;
    for (int r = 0; ok && r < c->n; r++) {
        int64_t idx = base + r * stride;
        ss[r] = dt__lw_stream_kind(L, mesh, idx, stream_kind);
        ok = ss[r] && blobs[idx];
    }
    /* The group of the streams' actual kind (DTORCH_OVERLAP=0 folds
     * communication into compute): one group's collectives share a stream
     * per rank, so they run in sequence order on every rank. */
    if (ok)
        group = dt__lw_group(L, mesh, base, stride, c->n, ss[0]->kind, &seq);
    ok = ok && group;
    for (int r = 0; ok && r < c->n; r++) {
        ks[r] = dt__coll_krec(c, group, seq, r);
        if (ks[r])
            ks[r]->out = dt__blob_new(ss[r]->be);
        ok = ks[r] && ks[r]->out;
    }
    if (!ok) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective)");
        for (int r = 0; ks && r < c->n; r++)
            dt__krec_discard(ks[r]);
        dt__coll_free(c);
        dt__free(ks);
        dt__free(ss);
        return L->status;
    }
    for (int r = 0; r < c->n; r++) {
        int64_t idx = base + r * stride;
        dt__krec *k = ks[r];
        k->n_in = 1;
        k->in[0] = blobs[idx]; /* the caller's reference moves into the kernel */
        blobs[idx] = NULL;
        if (deps && deps[idx]) {
            k->in[k->n_in++] = deps[idx];
            deps[idx] = NULL;
        }
        k->opname = opname ? opname : dt__ops[L->node->op].name;
        k->site_file = L->node->site_file;
        k->site_line = L->node->site_line;
        bind(L->g, ss[r], k);
        stream_append(L->g, ss[r], k);
        next[idx] = dt__blob_retain(k->out);
    }
    (void)dtype; /* the collective's own dtype (c->dtype) is its kernels' */
    dt__coll_free(c);
    dt__free(ks);
    dt__free(ss);
    return DT_OK;
}

dt__blob *dt__lw_region(dt__lower *L, dt__tval *v, int64_t idx, const int64_t *coord, const int64_t *start,
                        const int64_t *len) {
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    dt__local_region(&v->meta, coord, ls, ll);
    int same = 1;
    for (int d = 0; d < v->meta.ndim; d++) {
        /* Invariant: the planners ask only for parts of the local region. */
        DT_ASSERT(start[d] >= ls[d] && start[d] + len[d] <= ls[d] + ll[d]);
        if (start[d] != ls[d] || len[d] != ll[d])
            same = 0;
    }
    if (same)
        return dt__blob_retain(v->blobs[idx]);
    dt__kernel *k = dt__lw_kernel(L, DT_K_SLICE);
    if (!k)
        return NULL;
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
 * coordinate 0 of every Replicate mesh dim. Partial pieces are summed. Every
 * piece's stream and kernel are made before any is queued: on failure no
 * kernel holds the future and the controller completes it with the error. */
static dt_status lower_fetch(dt__lower *L, dt__node *n) {
    dt__tval *v = n->in[0];
    dt_future *f = n->extra;
    const dt__meta *m = &v->meta;
    const dt_mesh *mesh = m->mesh;
    int accumulate = 0;
    for (int md = 0; md < mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_PARTIAL)
            accumulate = 1;
    int64_t coord[DT_MAX_MESH_NDIM], len[DT_MAX_NDIM];
    int64_t nslots = f->local >= 0 ? 1 : mesh->ndev;
    f->pieces = dt__calloc((size_t)nslots, sizeof *f->pieces);
    f->starts = dt__calloc((size_t)nslots * (size_t)(m->ndim ? m->ndim : 1), sizeof *f->starts);
    dt__krec **ks = dt__calloc((size_t)nslots, sizeof *ks);
    dt__stream **ss = dt__calloc((size_t)nslots, sizeof *ss);
    if (!f->pieces || !f->starts || !ks || !ss) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (fetch pieces)");
        goto fail;
    }
    /* f->local: one device's block as stored, no sum, the piece starts at 0. */
    f->accumulate = f->local >= 0 ? 0 : accumulate;
    int npieces = 0;
    for (int64_t i = f->local >= 0 ? f->local : 0; i < (f->local >= 0 ? f->local + 1 : mesh->ndev); i++) {
        if (f->local < 0) {
            dt__mesh_coord(mesh, i, coord);
            int skip = 0;
            for (int md = 0; md < mesh->ndim; md++)
                if (m->pl[md].kind == DT_PLACEMENT_REPLICATE && coord[md] != 0)
                    skip = 1;
            if (skip)
                continue;
            dt__local_region(m, coord, f->starts + (size_t)npieces * (size_t)m->ndim, len);
        }
        ss[npieces] = dt__lw_stream(L, mesh, i);
        dt__krec *k = ss[npieces] ? core_krec(L, DT_KC_FETCH) : NULL;
        if (!k)
            goto fail;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(v->blobs[i]);
        k->rank = npieces;
        ks[npieces++] = k;
    }
    for (int r = 0; r < npieces; r++) {
        ks[r]->handle = f;
        atomic_fetch_add(&f->refs, 1);
        push_krec(L->g, ss[r], ks[r]);
    }
    f->npieces = npieces;
    dt__future_expect(f, npieces);
    dt__free(ks);
    dt__free(ss);
    dt_future_release(f); /* the node's reference */
    return DT_OK;
fail:
    for (int64_t r = 0; ks && r < nslots; r++)
        dt__krec_discard(ks[r]);
    dt__free(ks);
    dt__free(ss);
    dt__free(f->pieces);
    dt__free(f->starts);
    f->pieces = NULL;
    f->starts = NULL;
    return L->status;
}

static dt_status lower_sync(dt__lower *L, dt__node *n) {
    dt_graph *g = L->g;
    dt_future *f = n->extra;
    int count = 0;
    for (dt__stream *s = g->streams; s; s = s->next_all)
        count++;
    /* Every kernel first: a sync with some streams missing would complete
     * before their work. */
    dt__krec **ks = dt__calloc((size_t)(count ? count : 1), sizeof *ks);
    if (!ks)
        return dt__lw_fail(L, DT_ENOMEM, "out of memory (sync)");
    for (int i = 0; i < count; i++) {
        ks[i] = core_krec(L, DT_KC_SYNC);
        if (!ks[i]) {
            for (int j = 0; j < i; j++)
                dt__krec_discard(ks[j]);
            dt__free(ks);
            return L->status;
        }
    }
    dt__future_expect(f, count + 1);
    int i = 0;
    for (dt__stream *s = g->streams; s; s = s->next_all) {
        dt__krec *k = ks[i++];
        k->handle = f;
        atomic_fetch_add(&f->refs, 1);
        stream_append(g, s, k);
    }
    dt__free(ks);
    /* The controller's own arrival: covers a graph with no streams yet. */
    dt__future_arrive(f, -1, NULL);
    dt_future_release(f);
    return DT_OK;
}

/* ------------------------------------------------------ failed lowering */

/* A blob that is ready with an error (controller): it has no producer
 * stream, so its event has completed. */
static dt__blob *error_blob(const dt__backend *be, const char *msg) {
    dt__blob *b = dt__blob_new(be);
    if (!b)
        return NULL;
    b->error = dt__strdup(msg);
    if (!b->error) {
        dt__blob_release(b);
        return NULL;
    }
    return b;
}

/* After a failed lowering: every device blob of the node's output becomes an
 * error blob, so the next read raises it as it would a kernel failure and
 * everything downstream inherits it; a read or sync completes its future
 * with it. Kernels already queued for the node may still run; their outputs
 * are released here, not used. Allocation faults are off meanwhile. */
static void lower_failed(dt__lower *L, dt__node *n, dt_status st) {
    char msg[1024];
    const char *why = dt_last_error()[0] ? dt_last_error() : dt_status_str(st);
    if (n->site_file)
        snprintf(msg, sizeof msg, "%s failed on the controller (created at %s:%d): %s", dt__ops[n->op].name,
                 n->site_file, n->site_line, why);
    else
        snprintf(msg, sizeof msg, "%s failed on the controller: %s", dt__ops[n->op].name, why);
    if (n->op == DT_OP_FETCH || n->op == DT_OP_SYNC) {
        dt__future_fail(n->extra, DT_EKERNEL, msg);
        dt_future_release(n->extra); /* the node's reference */
        return;
    }
    dt__tval *v = n->out;
    if (!v)
        return;
    if (!v->blobs)
        v->blobs = dt__calloc((size_t)v->meta.mesh->ndev, sizeof *v->blobs);
    if (!v->blobs)
        dt__fatal("out of memory while reporting a failed lowering", msg);
    for (int64_t i = 0; i < v->meta.mesh->ndev; i++) {
        dt__blob_release(v->blobs[i]);
        v->blobs[i] = error_blob(dt__graph_be(L->g, v->meta.mesh->type), msg);
        if (!v->blobs[i])
            dt__fatal("out of memory while reporting a failed lowering", msg);
    }
}

/* Lowers one node; a failure poisons its output (lower_failed). The one
 * place the controller loop handles a lowering's status. */
static int lower_node(dt__lower *L, dt__node *n, int32_t kflags) {
    if (n->op == DT_OP_STOP) {
        /* Last of the closing batch: the values dropped before the close
         * travel on it. */
        for (dt__tval *v = n->extra, *next; v; v = next) {
            next = v->next_release;
            dt__tval_free_deferred(L->g, v);
        }
        return 1;
    }
    L->node = n;
    L->kflags = kflags;
    L->status = DT_OK;
    dt_clear_error();
    dt__fault_scope(1);
    dt_status st = dt__ops[n->op].lower(L, n);
    dt__fault_scope(0);
    if (st == DT_OK)
        st = L->status; /* a helper failed and the function missed it */
    if (st != DT_OK)
        lower_failed(L, n, st);
    return 0;
}

/* ------------------------------------------------------------ op table */

/* Generated from src/ops/ops.def: a row per op, so none can be missing. */
const dt__op_info dt__ops[DT_OP_COUNT] = {
#define DT_OP(E, name, lower) [DT_OP_##E] = {name, lower},
#include "ops/ops.def"
};

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
    } else if (n->op == DT_OP_SOURCE) {
        dt__source_free(dt__graph_be(g, n->out->meta.mesh->type), n);
    }
}

/* Test-only: the round's kernels, encoded, to the tap. */
static void tap(dt_graph *g) {
    int n = 0;
    for (dt__stream *s = g->dirty; s; s = s->next_dirty)
        n++;
    dt__kbatch b = {.n = n, .s = dt__calloc((size_t)(n ? n : 1), sizeof *b.s)};
    dt__bytes bytes = {0};
    dt_status st = b.s ? DT_OK : DT_ENOMEM;
    int i = n;
    for (dt__stream *s = g->dirty; s && b.s; s = s->next_dirty)
        b.s[--i] = (dt__kbatch_stream){s->type, s->device_id, s->kind, s->bhead, s->btail};
    if (st == DT_OK)
        st = dt__kernel_encode(g, &b, &bytes);
    g->ktap(g->ktap_arg, st == DT_OK ? bytes.p : NULL, st == DT_OK ? bytes.len : 0, st);
    dt__bytes_free(&bytes);
    dt__free(b.s); /* a view: the kernels stay on their streams */
}

void dt__graph_set_kernel_tap_for_test(dt_graph *g, dt__ktap_fn fn, void *arg) {
    g->ktap_arg = arg;
    g->ktap = fn;
}

static void flush(dt_graph *g) {
    if (g->ktap && g->dirty)
        tap(g);
    while (g->dirty) {
        dt__stream *s = g->dirty;
        g->dirty = s->next_dirty;
        s->dirty = 0;
        s->next_dirty = NULL;
        dt__stream_submit(s, s->bhead, s->btail);
        s->bhead = s->btail = NULL;
    }
}

dt_status dt__kbatch_push(dt_graph *g, dt__kbatch *b) {
    dt__stream **ss = dt__calloc((size_t)(b->n ? b->n : 1), sizeof *ss);
    if (!ss)
        return dt__error(DT_ENOMEM, "kernel batch: out of memory");
    /* Every stream first: a failure queues nothing. */
    for (int i = 0; i < b->n; i++) {
        ss[i] = dt__graph_stream(g, (dt_device_type)b->s[i].type, b->s[i].device_id, b->s[i].kind);
        if (!ss[i]) {
            dt__free(ss);
            return dt_last_status() != DT_OK ? dt_last_status() : DT_ENOMEM;
        }
    }
    for (int i = 0; i < b->n; i++) {
        for (dt__krec *k = b->s[i].head, *next; k; k = next) {
            next = k->next;
            bind(g, ss[i], k);
            stream_append(g, ss[i], k);
        }
        b->s[i].head = b->s[i].tail = NULL;
    }
    dt__free(ss);
    atomic_store_explicit(&g->kqueued, g->kqueued_local, memory_order_relaxed);
    flush(g);
    return DT_OK;
}

void *dt__controller_main(void *arg) {
    dt_graph *g = arg;
    dt__lower L = {.g = g, .node = NULL};
    /* The round's window (window.h); its arrays are kept across rounds. */
    dt__window w = {0};
    int stop = 0;
    while (!stop) {
        dt__graph_wait_queue(g);
        if (atomic_load_explicit(&g->held, memory_order_relaxed))
            dt__debug_wait_held(g); /* tests only */
        dt__tval *released = dt__graph_take_releases(g);
        dt__node *batch = dt__graph_take(g);
        /* Without a window (out of memory) or after a failed pass, the
         * nodes are lowered as the passes before left the marks. */
        int windowed = dt__window_fill(&w, batch, released) == DT_OK;
        if (windowed)
            (void)dt__window_run_passes(&w);
        long taken = 0;
        for (int i = 0; batch; i++) {
            dt__node *orig = batch, *n = orig;
            batch = orig->next;
            taken++;
            uint8_t f = windowed ? w.flags[i] : 0;
            if (windowed)
                n = w.nodes[i]; /* a pass may have put another node in the slot */
            if (n->op != DT_OP_STOP && atomic_load_explicit(&g->cancelled, memory_order_relaxed))
                discard(g, n); /* dt_graph_cancel: freed unlowered */
            else if (!(f & DT__WS_DEAD))
                stop |= lower_node(&L, n, (f & DT__WS_REUSE) ? DT_KF_REUSE : 0);
            /* A substitute is a node_pool record the window hands over. */
            if (n != orig)
                dt__node_free(n);
            dt__node_free(orig);
        }
        if (windowed && w.eliminated)
            atomic_fetch_add_explicit(&g->nodes_eliminated, w.eliminated, memory_order_relaxed);
        while (released) {
            dt__tval *v = released;
            released = v->next_release;
            dt__tval_free_deferred(g, v);
        }
        /* Published before the kernels can run and retire. */
        atomic_store_explicit(&g->kqueued, g->kqueued_local, memory_order_relaxed);
        flush(g);
        /* Every node taken leaves the backlog, lowered or not; STOP was never
         * counted: it does not go through dt__graph_submit. */
        dt__backlog_done(g, taken - stop);
        /* Once per batch, for dt_graph_get_stats: the batch's nodes now count
         * as their kernels only, so this is what flow control bounds. */
        long in_flight = dt__backlog(g);
        if (in_flight > atomic_load_explicit(&g->peak_backlog, memory_order_relaxed))
            atomic_store_explicit(&g->peak_backlog, in_flight, memory_order_relaxed);
    }
    dt__window_free(&w);
    dt__graph_flush_releases(g);
    /* Nodes after STOP cannot exist: the queue is closed before STOP goes in. */
    dt__graph_streams_stop(g);
    dt__graph_comm_free(g); /* after every worker: none runs a collective now */
    dt__graph_controller_exited(g);
    return NULL;
}
