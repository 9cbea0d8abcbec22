/*
 * The dt__lw_* lowering helpers (lower.h) that op lowering functions call on
 * the controller thread: streams by mesh position, kernel records, packing a
 * kernel into a stream's batch (dt__lw_bind / dt__lw_stream_append; the
 * batch is handed over by the controller's flush, core/controller/executor.c),
 * collectives and region copies.
 *
 * Threads: the controller thread only (op lowering functions and the
 * controller loop call them). Locks: none held across a call; the stream map
 * they look streams up in is controller-only (core/controller/stream_map.c), and kernels
 * reach a stream only at the controller's flush (dt__stream_submit).
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_comm.h"
#include "core/controller/lower_queue.h"
#include "core/controller/replay.h"
#include "core/controller/stream_map.h"
#include "core/controller/trace_lower.h"
#include "core/controller/window.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/ufn.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

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

/* What every kernel of the node carries, builder or record: the node's op
 * name (a lowering may put a finer one over it) and its call site. */
static void node_site(const dt__lower *L, const char **opname, const char **file, int32_t *line) {
    *opname = dt__ops[L->node->op].name;
    *file = L->node->site_file;
    *line = L->node->site_line;
}

/* 1 when a new kernel (builder or record) `k` was made; else records the
 * failure (a no-op after an earlier one). */
static int made(dt__lower *L, const void *k) {
    if (!k)
        dt__lw_fail(L, DT_ENOMEM, "out of memory (kernel record)");
    return k != NULL;
}

dt__kernel *dt__lw_kernel(dt__lower *L, int kop) {
    dt__kernel *k =
        L->status == DT_OK ? dt__pool_alloc_in(&dt__kernel_pool, L->g->ctl_pools, sizeof(dt__kernel)) : NULL;
    if (!made(L, k))
        return NULL;
    k->kop = kop;
    node_site(L, &k->opname, &k->site_file, &k->site_line);
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
        } else if (k->kop == DT_KC_GATE) {
            dt__debug_gate_unref(k->extra);
        } else if (k->kop == DT_KC_USER) {
            dt__ufn_unref(k->extra);
        }
    }
    dt__kernel_free(k);
}

/* The queued form of a builder: its references and extra move into it. */
static dt__krec *pack(dt_graph *g, const dt__kernel *k) {
    /* One pass over the attributes into a stack buffer when they have no
     * text (all but einsum), then a record of the exact size. */
    uint8_t tmp[DT__KATTR_PACK_MAX];
    size_t n = k->attr.text ? dt__kattr_pack_size(&k->attr) : dt__kattr_pack(&k->attr, tmp);
    dt__krec *r = dt__krec_alloc_in(g->ctl_pools, n);
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
        k->out = dt__blob_new_in(L->g->ctl_pools, s->be);
        if (!k->out)
            dt__lw_fail(L, DT_ENOMEM, "out of memory (blob record)");
        bad = !k->out;
    }
    /* The node's reuse mark (passes/reuse.c) goes on its backend kernels. */
    if (k->kop < DT_K_COUNT)
        k->attr.flags |= L->kflags;
    dt__krec *r = bad ? NULL : pack(L->g, k);
    if (!r) {
        /* A NULL input or stream means an earlier step failed. */
        dt__lw_fail(L, DT_ENOMEM, "out of memory");
        dt__lw_discard(k);
        return NULL;
    }
    dt__pool_free_in(&dt__kernel_pool, L->g->ctl_pools, k); /* its references moved into r */
    dt__lw_bind(L->g, s, r);
    dt__lw_stream_append(L->g, s, r);
    return dt__blob_retain(r->out);
}

/* A core kernel's record with no attributes, carrying the node's op name
 * and call site; NULL (L->status set) when out of memory. */
dt__krec *dt__lw_core_krec(dt__lower *L, int kop) {
    dt__krec *k = L->status == DT_OK ? dt__krec_alloc_in(L->g->ctl_pools, 0) : NULL;
    if (!made(L, k))
        return NULL;
    k->kop = kop;
    node_site(L, &k->opname, &k->site_file, &k->site_line);
    return k;
}

/* Queues a record whose blobs are all there (cannot fail). */
void dt__lw_push_krec(dt_graph *g, dt__stream *s, dt__krec *k) {
    dt__lw_bind(g, s, k);
    dt__lw_stream_append(g, s, k);
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

int dt__lw_each(dt__lower *L, dt__lw_dev *d) {
    const dt__meta *m = &d->v->meta;
    if (d->idx < 0 && dt__lw_alloc_blobs(L, d->v) != DT_OK)
        return 0;
    if (L->status != DT_OK || ++d->idx >= m->mesh->ndev)
        return 0;
    dt__mesh_coord(m->mesh, d->idx, d->coord);
    dt__local_region(m, d->coord, d->start, d->len);
    d->k = d->kop == DT__LW_NO_KERNEL ? NULL : dt__lw_kernel(L, d->kop);
    return d->k || d->kop == DT__LW_NO_KERNEL;
}

void dt__lw_each_push(dt__lower *L, dt__lw_dev *d) {
    d->v->blobs[d->idx] = dt__lw_push(L, d->v->meta.mesh, d->idx, d->k);
    d->k = NULL;
}

dt_status dt__lw_collective(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c, int64_t base,
                            int64_t stride, dt__blob **blobs, dt__blob **next, dt_dtype dtype,
                            const char *opname) {
    return dt__lw_collective_after(L, mesh, stream_kind, c, base, stride, blobs, NULL, next, dtype, opname);
}

atomic_long dt__collectives_lowered;

long dt_debug_collectives_lowered(void) { return atomic_load(&dt__collectives_lowered); }

dt_status dt__lw_collective_after(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c,
                                  int64_t base, int64_t stride, dt__blob **blobs, dt__blob **deps,
                                  dt__blob **next, dt_dtype dtype, const char *opname) {
    atomic_fetch_add_explicit(&dt__collectives_lowered, 1, memory_order_relaxed);
    if (!deps && dt__lw_coll_bcast(L, mesh, stream_kind, c, base, stride, blobs, next, opname))
        return L->status; /* one device-independent record (lower_bcast.c) */
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
    if (ok && group && dt__rec_enabled(DT__REC_EXPLAIN))
        dt__rec_collective(L, mesh, c, base, stride, opname); /* explain (core/records/trace.h) */
    ok = ok && group;
    for (int r = 0; ok && r < c->n; r++) {
        ks[r] = dt__coll_krec(c, group, seq, r);
        if (ks[r])
            ks[r]->out = dt__blob_new_in(L->g->ctl_pools, ss[r]->be);
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
        node_site(L, &k->opname, &k->site_file, &k->site_line);
        if (opname)
            k->opname = opname;
        dt__lw_bind(L->g, ss[r], k);
        dt__lw_stream_append(L->g, ss[r], k);
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
