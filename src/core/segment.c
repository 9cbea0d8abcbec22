/*
 * Segmented dims (segment.h, dt__seg; docs/decisions.md "segmented cat"):
 * the layout a cat along a sharded dim leaves without communication, and the
 * one place that keeps every other op away from it.
 *
 * dt__seg_gate runs in dt__client_submit for every node before it is
 * queued. It sets the output's descriptor: the op's rule below when the op
 * passes a segmented dim through (elementwise, permute, reshape keeping the
 * dim whole, clone, softmax/norms/reductions over other dims, linear or
 * matmul by a matrix where it is a row/batch dim, non-causal
 * unmasked attention, redistribute that keeps the dim off other mesh dims;
 * the producers, cat and getitem, set it themselves); otherwise (the fallback) each segmented
 * input is first converted to the regular layout (dt__seg_regular) and the
 * output is regular. The ops' own checks ran on the regular layout (client
 * threads see no segments in dt__local_region), so the node is exactly the
 * one a regular input would have made.
 *
 * Threads: client threads.
 */
#include <string.h>

#include "core/core.h"
#include "core/graph.h"
#include "core/mesh.h"
#include "core/meta.h"
#include "core/node.h"
#include "core/segment.h"
#include "core/tensor.h"
#include "dtorch/dtorch_ops.h"
#include "ops/ops.h"
#include "ops/views_int.h"

static int same_desc(const dt__seg *a, const dt__seg *b) {
    return a->n == b->n && a->md == b->md && memcmp(a->len, b->len, sizeof(int64_t) * (size_t)a->n) == 0;
}

/* Output dim o for each input dim, right-aligned (broadcasting ops). */
static int rule_broadcast(const dt__node *n, dt__meta *out) {
    dt__seg g = {0};
    for (int j = 0; j < n->n_in; j++) {
        const dt__meta *m = n->in[j] ? &n->in[j]->meta : NULL;
        if (!m || !m->seg.n)
            continue;
        dt__seg s = m->seg;
        s.dim = (int8_t)(s.dim + out->ndim - m->ndim);
        if (g.n && (!same_desc(&g, &s) || g.dim != s.dim))
            return 0;
        g = s;
    }
    /* Every input holding the dim at full size must carry the descriptor. */
    for (int j = 0; j < n->n_in; j++) {
        const dt__meta *m = n->in[j] ? &n->in[j]->meta : NULL;
        if (!m)
            continue;
        int d = g.dim - (out->ndim - m->ndim);
        if (d >= 0 && m->shape[d] != 1 && !m->seg.n)
            return 0;
    }
    out->seg = g;
    return 1;
}

/* The output dim of a reshape that keeps input dim d whole, or -1. */
static int reshape_dim(const dt__meta *in, const dt__meta *out, int d) {
    int64_t before = dt__numel(d, in->shape), p = 1;
    for (int o = 0; o < out->ndim; p *= out->shape[o], o++)
        if (p == before && out->shape[o] == in->shape[d])
            return o;
    return -1;
}

/* 1 when no mesh dim but md shards tensor dim d in out, and md shards it
 * (if at all) as the input's md did or leaves it. */
static int layout_ok(const dt__meta *out, int md, int d) {
    for (int m = 0; m < out->mesh->ndim; m++)
        if (m != md && out->pl[m].kind == DT_PLACEMENT_SHARD && out->pl[m].dim == d)
            return 0;
    return 1;
}

/* The pass-through rules: 1 with out->seg set, 0 for the fallback. */
static int pass_rule(const dt__node *n, dt__meta *out) {
    const dt__meta *in = &n->in[0]->meta;
    dt__seg g = in->seg;
    switch (n->op) {
    case DT_OP_EW_BINARY:
    case DT_OP_UNARY:
    case DT_OP_CAST:
    case DT_OP_WHERE:
    case DT_OP_MASKED_FILL:
    case DT_OP_CLAMP:
    case DT_OP_ACTIVATION:
        if (!rule_broadcast(n, out))
            return 0;
        return layout_ok(out, out->seg.md, out->seg.dim);
    case DT_OP_VIEW:
        if (!g.n || n->n_in != 1)
            return 0;
        if (n->a.sub == DT_V_CLONE) {
            out->seg = g;
            return 1;
        }
        if (n->a.sub == DT_V_PERMUTE) {
            for (int o = 0; o < out->ndim; o++)
                if (n->a.v_ints[o] == g.dim)
                    g.dim = (int8_t)o, o = out->ndim;
        } else if (n->a.sub == DT_V_RESHAPE) {
            int o = reshape_dim(in, out, g.dim);
            if (o < 0)
                return 0;
            g.dim = (int8_t)o;
        } else {
            return 0;
        }
        /* The op moved the Shard with the dim. */
        if (in->pl[g.md].kind == DT_PLACEMENT_SHARD && in->pl[g.md].dim == in->seg.dim &&
            !(out->pl[g.md].kind == DT_PLACEMENT_SHARD && out->pl[g.md].dim == g.dim))
            return 0;
        out->seg = g;
        return layout_ok(out, g.md, g.dim);
    case DT_OP_SDPA:
    case DT_OP_SDPA_RING: {
        if (n->a.flags & (DT_KNN_CAUSAL | DT_KNN_MASK) || n->n_in != 3 || n->a.f[0] != 0.0)
            return 0;
        const dt__seg *k = &n->in[1]->meta.seg, *v = &n->in[2]->meta.seg;
        /* Keys and values permuted alike leave the result unchanged. */
        if (k->n != v->n || (k->n && (!same_desc(k, v) || k->dim != v->dim)))
            return 0;
        if (k->n && k->dim != n->in[1]->meta.ndim - 2)
            return 0;
        if (g.n && g.dim != in->ndim - 2)
            return 0;
        out->seg = g;
        return 1;
    }
    case DT_OP_SOFTMAX:
        /* Over another dim: each row is whole on its device. */
        if (!g.n || n->a.ints[0] == g.dim)
            return 0;
        out->seg = g;
        return 1;
    case DT_OP_NORM:
        /* layer_norm/rms_norm over trailing dims that exclude the dim (the
         * weight and bias have only those dims). */
        if (!g.n || (n->a.sub != DT_KNORM_LAYER && n->a.sub != DT_KNORM_RMS) ||
            g.dim >= in->ndim - n->a.ints[DT_MAX_NDIM])
            return 0;
        out->seg = g;
        return 1;
    case DT_OP_REDUCE: {
        if (!g.n || n->n_in != 1 || (n->a.dims_mask >> g.dim) & 1 || out->ndim > in->ndim ||
            (n->a.flags & DT_KF_ALL))
            return 0;
        if (out->ndim < in->ndim)
            g.dim = (int8_t)(g.dim - __builtin_popcountll(n->a.dims_mask & ((1ull << g.dim) - 1)));
        if (out->shape[g.dim] != in->shape[in->seg.dim])
            return 0;
        out->seg = g;
        return layout_ok(out, g.md, g.dim);
    }
    case DT_OP_LINALG:
        /* linear, or matmul by a matrix: the dim a batch or row dim of the
         * first operand, the others without it. */
        if (!g.n || g.dim >= in->ndim - 1 || (n->a.sub != DT_KL_LINEAR && n->a.sub != DT_KL_MATMUL) ||
            n->in[1]->meta.ndim != 2 || out->ndim != in->ndim)
            return 0;
        for (int j = 1; j < n->n_in; j++)
            if (n->in[j]->meta.seg.n)
                return 0;
        if (in->pl[g.md].kind != out->pl[g.md].kind || out->pl[g.md].dim != in->pl[g.md].dim)
            return 0; /* the dim keeps its number: so must its Shard */
        out->seg = g;
        return layout_ok(out, g.md, g.dim);
    case DT_OP_REDISTRIBUTE:
        if (!g.n || out->mesh != in->mesh || !layout_ok(out, g.md, g.dim))
            return 0;
        out->seg = g;
        return 1;
    default:
        return 0;
    }
}

/* 1 for nodes that set their output's descriptor themselves. */
static int producer(const dt__node *n) {
    return n->op == DT_OP_VIEW && (n->a.sub == DT_V_CAT || (n->a.sub == DT_V_INDEX && n->a.v_nints > 0));
}

dt_status dt__seg_gate(dt_tensor *t, dt__node *n, dt_tensor **tmp, int *ntmp) {
    *ntmp = 0;
    dt__meta *out = &t->v->meta;
    if (producer(n))
        return DT_OK;
    int any = 0;
    for (int j = 0; j < n->n_in; j++)
        any |= n->in[j] && n->in[j]->meta.seg.n;
    memset(&out->seg, 0, sizeof out->seg);
    if (!any || pass_rule(n, out))
        return DT_OK;
    memset(&out->seg, 0, sizeof out->seg);
    for (int j = 0; j < n->n_in; j++) {
        if (!n->in[j] || !n->in[j]->meta.seg.n)
            continue;
        dt_tensor *r = dt__seg_regular(dt__tval_tensor(n->in[j]));
        if (!r)
            return dt_last_status();
        tmp[(*ntmp)++] = r;
        for (int k = j + 1; k < n->n_in; k++)
            if (n->in[k] == n->in[j])
                n->in[k] = r->v;
        n->in[j] = r->v;
    }
    return DT_OK;
}

/* A node copying a's blocks as they are, with `out` as the result's meta:
 * reinterprets a segmented-Replicate value's storage order as a regular
 * dim. No gate: the caller says what the blocks are. */
static dt_tensor *reinterpret(dt_tensor *a, const dt__meta *out) {
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, NULL, out, DT_V_CLONE, &n);
    return t ? dt__client_submit_raw(t, n) : NULL;
}

dt_tensor *dt__seg_regular(dt_tensor *x) {
    const dt__meta *m = &x->v->meta;
    const dt__seg g = m->seg;
    int d = g.dim, md = g.md;
    int64_t w = m->mesh->shape[md];
    /* 1. every device of md gets the whole dim in storage order. */
    dt_placement pl[DT_MAX_MESH_NDIM];
    memcpy(pl, m->pl, sizeof pl);
    pl[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
    dt_tensor *rep = dt_redistribute(x, NULL, pl);
    if (!rep)
        return NULL;
    /* 2. the same blocks, read as a regular dim. */
    dt__meta flat = rep->v->meta;
    memset(&flat.seg, 0, sizeof flat.seg);
    dt_tensor *st = reinterpret(rep, &flat);
    dt_tensor_release(rep);
    if (!st)
        return NULL;
    /* 3. the pieces in user order: segment-major, then device. */
    dt_tensor *pieces[DT_MAX_SEGMENTS * 64];
    int np = 0;
    dt_tensor *res = NULL;
    if (w > 64) {
        dt__error(DT_EINVAL, "segmented dim over more than 64 devices");
        goto out;
    }
    for (int s = 0; s < g.n; s++) {
        for (int64_t j = 0; j < w; j++) {
            int64_t len = dt__seg_piece(&g, w, s, j), at, blk;
            if (len == 0)
                continue;
            dt__seg_block(&g, w, j, &at, &blk);
            for (int q = 0; q < s; q++)
                at += dt__seg_piece(&g, w, q, j);
            dt_slice sl[DT_MAX_NDIM];
            for (int k = 0; k < flat.ndim; k++)
                sl[k] = (dt_slice){0, 1, flat.shape[k], 0};
            sl[d] = (dt_slice){at, 1, len, 0};
            if (!(pieces[np] = dt_index(st, sl, 0)))
                goto out;
            np++;
        }
    }
    dt_tensor *c = np == 1 ? (dt_tensor_retain(pieces[0]), pieces[0]) : dt_cat(np, pieces, d);
    if (!c)
        goto out;
    /* 4. back to the value's placements (a local slice on md). */
    res = dt_redistribute(c, NULL, m->pl);
    dt_tensor_release(c);
out:
    for (int i = 0; i < np; i++)
        dt_tensor_release(pieces[i]);
    dt_tensor_release(st);
    return res;
}

long dt_debug_collectives_lowered(void) { return atomic_load(&dt__collectives_lowered); }

int dt_debug_segments(const dt_tensor *x, int *dim, int *mesh_dim, int64_t *lens) {
    if (!dt__tensor_ok(x))
        return -1;
    const dt__seg *g = &x->v->meta.seg;
    if (g->n) {
        *dim = g->dim;
        *mesh_dim = g->md;
        memcpy(lens, g->len, sizeof(int64_t) * (size_t)g->n);
    }
    return g->n;
}
