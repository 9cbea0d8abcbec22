/*
 * Reductions: sum(dims, keepdim).
 *
 * Placements per mesh dim: R->R, P->P, S(d)->S(d') for a kept dim (renumbered
 * when dims are dropped), and S(d)->P for a reduced dim: each device sums its
 * shard and the pending sum is left as Partial (redistribute to Replicate to
 * finish it). Booleans and integers sum to int64, as in torch.
 *
 * Threads: dt_sum on client threads; dt__lower_sum on the controller.
 */
#include <string.h>

#include "core/core.h"
#include "ops/ops.h"

dt_tensor *dt_sum(dt_tensor *a, int ndims, const int64_t *dims, int keepdim) {
    dt_clear_error();
    if (!a) {
        dt__error(DT_EINVAL, "sum: tensor argument is NULL");
        return NULL;
    }
    const dt__meta *m = &a->v->meta;
    uint64_t mask = 0;
    int all = ndims <= 0; /* torch sums everything for an empty dim list too */
    if (all) {
        for (int d = 0; d < m->ndim; d++)
            mask |= 1ull << d;
    } else {
        if (ndims > 0 && !dims) {
            dt__error(DT_EINVAL, "sum: dims is NULL");
            return NULL;
        }
        int rank = m->ndim ? m->ndim : 1; /* a 0-d tensor accepts dim 0 and -1 */
        for (int i = 0; i < ndims; i++) {
            int64_t d = dims[i];
            if (d < -rank || d >= rank) {
                dt__error(DT_EINDEX, "sum: dim %lld is out of range (expected to be in range of [%d, %d])",
                          (long long)d, -rank, rank - 1);
                return NULL;
            }
            if (d < 0)
                d += rank;
            if (m->ndim == 0)
                continue;
            if (mask & (1ull << d)) {
                dt__error(DT_EINVAL, "sum: dim %lld appears multiple times in the list of dims", (long long)d);
                return NULL;
            }
            mask |= 1ull << d;
        }
    }
    dt__meta out;
    memset(&out, 0, sizeof out);
    out.mesh = m->mesh;
    out.dtype = dt_dtype_is_floating(m->dtype) ? m->dtype : DT_INT64;
    int newdim[DT_MAX_NDIM];
    for (int d = 0; d < m->ndim; d++) {
        if (mask & (1ull << d)) {
            newdim[d] = -1;
            if (keepdim)
                out.shape[out.ndim++] = 1;
        } else {
            newdim[d] = out.ndim;
            out.shape[out.ndim++] = m->shape[d];
        }
    }
    for (int md = 0; md < m->mesh->ndim; md++) {
        dt_placement p = m->pl[md];
        if (p.kind == DT_PLACEMENT_SHARD) {
            if (mask & (1ull << p.dim))
                p = (dt_placement){DT_PLACEMENT_PARTIAL, 0};
            else if (!keepdim)
                p.dim = newdim[p.dim];
        }
        out.pl[md] = p;
    }
    dt_tensor *t = dt__tensor_new(a->graph, &out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_SUM);
    if (n) {
        n->n_in = 1;
        n->in[0] = a->v;
        n->out = t->v;
        n->a.dims_mask = mask;
        n->a.flags = (keepdim ? DT_KF_KEEPDIM : 0) | (all && !keepdim ? DT_KF_ALL : 0);
    }
    return dt__client_submit(t, n);
}

void dt__lower_sum(dt__lower *L, dt__node *n) {
    dt__tval *o = n->out;
    const dt_mesh *mesh = o->meta.mesh;
    dt__lw_alloc_blobs(o);
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__kernel *k = dt__lw_kernel(L, DT_K_SUM);
        k->n_in = 1;
        k->in[0] = dt__blob_retain(n->in[0]->blobs[i]);
        k->attr.dtype = o->meta.dtype;
        k->attr.dims_mask = n->a.dims_mask;
        k->attr.flags = n->a.flags;
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_reduce[] = {
    {"sum", "reduction", "R->R, P->P, S(kept d)->S(d'), S(reduced d)->P", 0},
    {NULL, NULL, NULL, 0},
};
