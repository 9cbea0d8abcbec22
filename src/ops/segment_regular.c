/*
 * Segmented dims to the regular layout (docs/decisions.md "segmented cat";
 * the layout is core/records/seg.h): the conversion the gate
 * (core/client/segment.c) runs on a segmented input of an op without a
 * pass-through rule, and that reads and regular-only callers (cat of
 * mismatched descriptors) ask for through dt__seg_regular. It is built out
 * of ops (redistribute, index, cat) as redistribute itself is, so it lives
 * here and src/init.c registers it with the gate.
 *
 * Threads: client threads.
 */
#include <string.h>

#include "core/client/segment.h"
#include "core/client/tensor.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "dtorch/dtorch_ops.h"
#include "ops/ops.h"
#include "ops/views_int.h"

/* A node copying a's blocks as they are, with `out` as the result's meta:
 * reinterprets a segmented-Replicate value's storage order as a regular
 * dim. No gate: the caller says what the blocks are. */
static dt_tensor *reinterpret(dt_tensor *a, const dt__meta *out) {
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, NULL, out, DT_V_CLONE, &n);
    return t ? dt__client_submit_raw(t, n) : NULL;
}

dt_tensor *dt__seg_regularise(dt_tensor *x) {
    const dt__meta *m = &x->v->meta;
    int d = m->seg.dim;
    unsigned mask = dt__seg_mask(&m->seg);
    /* 1. every device gets the whole dim in storage order: one all-gather
     * per sharding mesh dim, each a step the gate keeps (segment.h). */
    dt_tensor *rep = x;
    dt_tensor_retain(rep);
    for (int md = m->mesh->ndim - 1; md >= 0 && rep; md--) {
        if (!dt__seg_shards(&rep->v->meta, md, d))
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
