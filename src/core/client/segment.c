/*
 * The gate of segmented dims (segment.h; the layout and its arithmetic are
 * core/records/seg.c, docs/decisions.md "segmented cat"): the one place
 * that keeps every op that does not understand the layout a cat along a
 * sharded dim leaves away from it.
 *
 * dt__seg_gate runs in dt__client_submit for every node before it is
 * queued. It sets the output's descriptor by the op's seg rule (the
 * seg_rule column of src/ops/ops.def, each family's rule next to the
 * family) when the op passes a segmented dim through (elementwise, permute,
 * reshape keeping the dim whole, clone, softmax/norms/reductions over other
 * dims, linear or matmul by a matrix where it is a row/batch dim, non-causal
 * unmasked attention, redistribute that keeps the dim off other mesh dims
 * and changes at most one grid mesh dim's sharding of it; the producers,
 * cat and getitem, set it themselves); otherwise (the fallback) each
 * segmented input is first converted to the regular layout
 * (dt__seg_regular) and the output is regular. The ops' own checks ran on
 * the regular layout (client threads see no segments in dt__local_region),
 * so the node is exactly the one a regular input would have made.
 *
 * dt__seg_broadcast is the broadcasting ops' rule (elementwise,
 * activations: their rows name it), here beside the gate because it reads
 * the inputs' value records.
 *
 * The conversion is built out of ops (redistribute, index, cat), so it lives
 * with them (src/ops/segment_regular.c) and reaches the gate through the
 * hook src/init.c registers.
 *
 * Threads: the gate and dt__seg_regular on client threads; the hook is set
 * once at start-up, before any thread reads it.
 */
#include <string.h>

#include "core/client/segment.h"
#include "core/client/tensor.h"
#include "core/core.h"
#include "core/records/meta.h"
#include "core/records/node.h"

static dt__seg_regular_fn regularise;

void dt__seg_set_regularise(dt__seg_regular_fn fn) { regularise = fn; }

dt_tensor *dt__seg_regular(dt_tensor *x) {
    /* Invariant: src/init.c registers it when the library loads. */
    DT_ASSERT(regularise);
    return regularise(x);
}

int dt__seg_broadcast(const dt__node *n, dt__meta *out) {
    dt__seg g = {0};
    for (int j = 0; j < n->n_in; j++) {
        const dt__meta *m = n->in[j] ? &n->in[j]->meta : NULL;
        if (!m || !m->seg.n)
            continue;
        dt__seg s = m->seg;
        s.dim = (int8_t)(s.dim + out->ndim - m->ndim);
        if (g.n && (!dt__seg_same(&g, &s) || g.dim != s.dim))
            return DT__SEG_REGULAR;
        g = s;
    }
    /* Every input holding the dim at full size must carry the descriptor. */
    for (int j = 0; j < n->n_in; j++) {
        const dt__meta *m = n->in[j] ? &n->in[j]->meta : NULL;
        if (!m)
            continue;
        int d = g.dim - (out->ndim - m->ndim);
        if (d >= 0 && m->shape[d] != 1 && !m->seg.n)
            return DT__SEG_REGULAR;
    }
    out->seg = g;
    return DT__SEG_PASS;
}

dt_status dt__seg_gate(dt_tensor *t, dt__node *n, dt_tensor **tmp, int *ntmp) {
    *ntmp = 0;
    dt__meta *out = &t->v->meta;
    const dt__op_info *op = &dt__ops[n->op];
    int any = 0;
    for (int j = 0; j < n->n_in; j++)
        any |= n->in[j] && n->in[j]->meta.seg.n;
    /* Only a producer sets a descriptor from regular inputs. */
    int rule = (any || (op->flags & DT_OPF_SEG_OWN)) && op->seg_rule ? op->seg_rule(n, out) : DT__SEG_REGULAR;
    if (rule == DT__SEG_OWN)
        return DT_OK;
    if (any && rule == DT__SEG_PASS && (!out->seg.n || dt__seg_layout_ok(out)))
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
