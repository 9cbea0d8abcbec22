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
 * unmasked attention, redistribute that keeps the dim off other mesh dims
 * and changes at most one grid mesh dim's sharding of it;
 * the producers, cat and getitem, set it themselves); otherwise (the fallback) each segmented
 * input is first converted to the regular layout (dt__seg_regular) and the
 * output is regular. The ops' own checks ran on the regular layout (client
 * threads see no segments in dt__local_region), so the node is exactly the
 * one a regular input would have made.
 *
 * The region helpers (dt__seg_range, dt__seg_piece, dt__seg_step) run
 * anywhere: they are pure.
 *
 * Threads: the gate and dt__seg_regular on client threads.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/segment.h"
#include "core/client/tensor.h"
#include "core/core.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "dtorch/dtorch_ops.h"
#include "ops/ops.h"
#include "ops/views_int.h"

static int same_desc(const dt__seg *a, const dt__seg *b) {
    return a->n == b->n && a->nmd == b->nmd && memcmp(a->mds, b->mds, (size_t)a->nmd) == 0 &&
           memcmp(a->len, b->len, sizeof(int64_t) * (size_t)a->n) == 0;
}

/* ------------------------------------------------------------ regions */

static int shards(const dt__meta *m, int md, int d) {
    return m->pl[md].kind == DT_PLACEMENT_SHARD && m->pl[md].dim == d;
}

unsigned dt__seg_mask(const dt__seg *g) {
    unsigned mask = 0;
    for (int i = 0; i < g->nmd; i++)
        mask |= 1u << g->mds[i];
    return mask;
}

unsigned dt__seg_sharding(const dt__meta *m) {
    unsigned mask = 0;
    for (int i = 0; i < m->seg.nmd; i++)
        if (shards(m, m->seg.mds[i], m->seg.dim))
            mask |= 1u << m->seg.mds[i];
    return mask;
}

int64_t dt__seg_piece(const dt__meta *m, int s, const int64_t *coord) {
    unsigned mask = dt__seg_mask(&m->seg);
    int64_t len = m->seg.len[s], st;
    for (int md = 0; md < m->mesh->ndim; md++) /* nested: ascending mesh dims */
        if ((mask >> md) & 1)
            dt__chunk(len, m->mesh->shape[md], coord[md], &st, &len);
    return len;
}

/* The block B(c): c's pieces of every segment. */
static int64_t block_len(const dt__meta *m, const int64_t *c) {
    int64_t n = 0;
    for (int s = 0; s < m->seg.n; s++)
        n += dt__seg_piece(m, s, c);
    return n;
}

/* Grid order: the sharding mesh dims first, then the others, each in
 * descriptor order (the canonical form already is). */
static int grid_order(const dt__meta *m, int *ord) {
    unsigned sh = dt__seg_sharding(m);
    int k = 0, p;
    for (int i = 0; i < m->seg.nmd; i++)
        if ((sh >> m->seg.mds[i]) & 1)
            ord[k++] = m->seg.mds[i];
    p = k;
    for (int i = 0; i < m->seg.nmd; i++)
        if (!((sh >> m->seg.mds[i]) & 1))
            ord[k++] = m->seg.mds[i];
    return p;
}

void dt__seg_range(const dt__meta *m, const int64_t *coord, int64_t *start, int64_t *len) {
    int ord[DT_MAX_MESH_NDIM], k = m->seg.nmd, p = grid_order(m, ord), seen = 0;
    int64_t c[DT_MAX_MESH_NDIM];
    memcpy(c, coord, sizeof(int64_t) * (size_t)m->mesh->ndim);
    for (int i = 0; i < k; i++)
        c[ord[i]] = 0;
    *start = *len = 0;
    /* Every block in storage order (an odometer, ord[k-1] fastest); the
     * device's are the contiguous run matching it on the sharding dims. */
    for (;;) {
        int match = 1;
        for (int j = 0; j < p; j++)
            match &= c[ord[j]] == coord[ord[j]];
        int64_t b = block_len(m, c);
        if (match)
            *len += b, seen = 1;
        else if (!seen)
            *start += b;
        int i = k - 1;
        while (i >= 0 && ++c[ord[i]] == m->mesh->shape[ord[i]])
            c[ord[i--]] = 0;
        if (i < 0)
            return;
    }
}

/* The canonical descriptor for m's placements: the sharding mesh dims
 * ascending, then `gathered` (-1: none), then the other ones in their
 * present order. */
static void canonical(dt__meta *m, int gathered) {
    dt__seg *g = &m->seg;
    unsigned sh = dt__seg_sharding(m);
    int8_t mds[DT_MAX_MESH_NDIM];
    int k = 0;
    for (int md = 0; md < m->mesh->ndim; md++)
        if ((sh >> md) & 1)
            mds[k++] = (int8_t)md;
    if (gathered >= 0)
        mds[k++] = (int8_t)gathered;
    for (int i = 0; i < g->nmd; i++)
        if (!((sh >> g->mds[i]) & 1) && g->mds[i] != gathered)
            mds[k++] = g->mds[i];
    memcpy(g->mds, mds, (size_t)k);
}

void dt__seg_step(dt__meta *m, int md, dt_placement to) {
    int on = m->seg.n && ((dt__seg_mask(&m->seg) >> md) & 1), was = on && shards(m, md, m->seg.dim);
    m->pl[md] = to;
    if (on && was != shards(m, md, m->seg.dim))
        canonical(m, was ? md : -1);
}

int dt__seg_redistributes(const dt__meta *in, const dt__meta *out) {
    const dt__seg *g = &in->seg;
    unsigned mask = dt__seg_mask(g), a = dt__seg_sharding(in), b = 0;
    for (int md = 0; md < in->mesh->ndim; md++) {
        if (!shards(out, md, g->dim))
            continue;
        if (!((mask >> md) & 1))
            return 0; /* a mesh dim outside the grid */
        b |= 1u << md;
    }
    unsigned diff = a ^ b;
    if (diff & (diff - 1))
        return 0; /* more than one change: the order of the steps would matter */
    if (diff & b) /* starts to shard: it must split the held range in blocks */
        for (int i = 0; i < g->nmd; i++)
            if (!((a >> g->mds[i]) & 1))
                return (1u << g->mds[i]) == diff;
    return 1;
}

/* ------------------------------------------------------------ the gate */

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

/* 1 when out's descriptor holds for its placements: no mesh dim outside
 * the grid shards the dim, and the descriptor is in its canonical form (the
 * sharding mesh dims first: each device's blocks are a contiguous range). */
static int layout_ok(const dt__meta *out) {
    unsigned mask = dt__seg_mask(&out->seg);
    for (int m = 0; m < out->mesh->ndim; m++)
        if (!((mask >> m) & 1) && shards(out, m, out->seg.dim))
            return 0;
    dt__meta c = *out;
    canonical(&c, -1);
    return memcmp(c.seg.mds, out->seg.mds, (size_t)out->seg.nmd) == 0;
}

/* 1 when out (its descriptor set) is sharded on the dim by the same mesh
 * dims as in: the op moved each Shard with the dim and added none. */
static int same_sharding(const dt__meta *in, const dt__meta *out) {
    return dt__seg_sharding(in) == dt__seg_sharding(out);
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
        return rule_broadcast(n, out);
    case DT_OP_VIEW:
        if (!g.n || n->n_in != 1)
            return 0;
        if (n->a.sub == DT_V_CLONE || n->a.sub == DT_V_CONTIGUOUS) {
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
        out->seg = g;
        return same_sharding(in, out); /* the op moved the Shards with the dim */
    case DT_OP_SDPA:
    case DT_OP_SDPA_RING: {
        if (n->a.flags & (DT_KNN_CAUSAL | DT_KNN_MASK) || n->n_in != 3 || n->a.f[0] != 0.0)
            return 0;
        const dt__seg *k = &n->in[1]->meta.seg, *v = &n->in[2]->meta.seg;
        /* Keys and values permuted alike leave the result unchanged. */
        if (k->n != v->n ||
            (k->n && (!same_desc(k, v) || k->dim != v->dim ||
                      dt__seg_sharding(&n->in[1]->meta) != dt__seg_sharding(&n->in[2]->meta))))
            return 0;
        if (k->n && k->dim != n->in[1]->meta.ndim - 2)
            return 0;
        if (g.n && g.dim != in->ndim - 2)
            return 0;
        out->seg = g;
        return same_sharding(in, out);
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
        return same_sharding(in, out);
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
        out->seg = g; /* the dim keeps its number: so must its Shards */
        return same_sharding(in, out);
    case DT_OP_REDISTRIBUTE: {
        if (!g.n || out->mesh != in->mesh || !dt__seg_redistributes(in, out))
            return 0;
        /* The one mesh dim that changes moves as the plan's step does. */
        dt__meta step = *in;
        for (int md = 0; md < in->mesh->ndim; md++)
            dt__seg_step(&step, md, out->pl[md]);
        out->seg = step.seg;
        return 1;
    }
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
    if (!any || (pass_rule(n, out) && (!out->seg.n || layout_ok(out))))
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
    int d = m->seg.dim;
    unsigned mask = dt__seg_mask(&m->seg);
    /* 1. every device gets the whole dim in storage order: one all-gather
     * per sharding mesh dim, each a step the gate keeps (segment.h). */
    dt_tensor *rep = x;
    dt_tensor_retain(rep);
    for (int md = m->mesh->ndim - 1; md >= 0 && rep; md--) {
        if (!shards(&rep->v->meta, md, d))
            continue;
        dt_placement pl[DT_MAX_MESH_NDIM];
        memcpy(pl, rep->v->meta.pl, sizeof pl);
        pl[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
        dt_tensor *next = dt_redistribute(rep, NULL, pl);
        dt_tensor_release(rep);
        rep = next;
    }
    if (!rep)
        return NULL;
    /* 2. the same blocks, read as a regular dim. */
    dt__meta flat = rep->v->meta, full = rep->v->meta;
    memset(&flat.seg, 0, sizeof flat.seg);
    dt_tensor *st = reinterpret(rep, &flat);
    dt_tensor_release(rep);
    if (!st)
        return NULL;
    /* Where block B(c) starts: its range were every grid dim sharding (in
     * the descriptor's order, the storage order's). */
    for (int md = 0; md < m->mesh->ndim; md++)
        if ((mask >> md) & 1)
            full.pl[md] = (dt_placement){DT_PLACEMENT_SHARD, d};
    /* 3. the pieces in user order: segment-major, then device in nested
     * (ascending mesh dim) order. */
    int64_t grid = 1;
    for (int md = 0; md < m->mesh->ndim; md++)
        if ((mask >> md) & 1)
            grid *= m->mesh->shape[md];
    dt_tensor *pieces[DT_MAX_SEGMENTS * 64];
    int np = 0;
    dt_tensor *res = NULL;
    if (grid > 64) {
        dt__error(DT_EINVAL, "segmented dim over more than 64 devices");
        goto out;
    }
    for (int s = 0; s < full.seg.n; s++) {
        int64_t c[DT_MAX_MESH_NDIM] = {0};
        for (int64_t j = 0; j < grid; j++) {
            int64_t len = dt__seg_piece(&full, s, c), at, blk;
            if (len > 0) {
                dt__seg_range(&full, c, &at, &blk);
                for (int q = 0; q < s; q++)
                    at += dt__seg_piece(&full, q, c);
                dt_slice sl[DT_MAX_NDIM];
                for (int k = 0; k < flat.ndim; k++)
                    sl[k] = (dt_slice){0, 1, flat.shape[k], 0};
                sl[d] = (dt_slice){at, 1, len, 0};
                if (!(pieces[np] = dt_index(st, sl, 0)))
                    goto out;
                np++;
            }
            for (int md = m->mesh->ndim - 1; md >= 0; md--) /* the next device, nested order */
                if ((mask >> md) & 1) {
                    if (++c[md] < m->mesh->shape[md])
                        break;
                    c[md] = 0;
                }
        }
    }
    dt_tensor *c = np == 1 ? (dt_tensor_retain(pieces[0]), pieces[0]) : dt_cat(np, pieces, d);
    if (!c)
        goto out;
    /* 4. back to the value's placements (local slices). */
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
        *mesh_dim = g->mds[0];
        memcpy(lens, g->len, sizeof(int64_t) * (size_t)g->n);
    }
    return g->n;
}

int dt_debug_segment_mesh_dims(const dt_tensor *x, int *mesh_dims) {
    if (!dt__tensor_ok(x))
        return -1;
    const dt__seg *g = &x->v->meta.seg;
    for (int i = 0; i < g->nmd && g->n; i++)
        mesh_dims[i] = g->mds[i];
    return g->n ? g->nmd : 0;
}
