/*
 * matmul of 2-D tensors: a[M,K] @ b[K,N].
 *
 * Placements per mesh dim: (R,R)->R, (S0,R)->S0, (R,S1)->S1, and the
 * K-sharded forms that leave partial sums: (S1,S0)->P, (S1,R)->P and
 * (R,S0)->P (the Replicate side is sliced to the same K range locally);
 * Partial is linear: (P,R)->P, (R,P)->P.
 *
 * Threads: dt_matmul on client threads; dt__lower_matmul on the controller.
 */
#include <string.h>

#include "core/core.h"
#include "ops/ops.h"

static const char *const matmul_accepts =
    "(R,R)->R, (S(0),R)->S(0), (R,S(1))->S(1), (S(1),S(0))->P, (S(1),R)->P, (R,S(0))->P, (P,R)->P, (R,P)->P";

#define R_ DT_PLACEMENT_REPLICATE
#define S_ DT_PLACEMENT_SHARD
#define P_ DT_PLACEMENT_PARTIAL

/* Output placement for one mesh dim; *k_sharded says K is split there. */
static int matmul_mesh_dim(dt_placement pa, dt_placement pb, dt_placement *res, int *k_sharded) {
    int a = pa.kind == S_ ? S_ + pa.dim * 4 : pa.kind; /* R=0, P=2, S0=1, S1=5 */
    int b = pb.kind == S_ ? S_ + pb.dim * 4 : pb.kind;
    const int S0 = S_, S1 = S_ + 4;
    *k_sharded = 0;
    if (a == R_ && b == R_)
        *res = (dt_placement){R_, 0};
    else if (a == S0 && b == R_)
        *res = (dt_placement){S_, 0};
    else if (a == R_ && b == S1)
        *res = (dt_placement){S_, 1};
    else if ((a == S1 && b == S0) || (a == S1 && b == R_) || (a == R_ && b == S0)) {
        *res = (dt_placement){P_, 0};
        *k_sharded = 1;
    } else if ((a == P_ && b == R_) || (a == R_ && b == P_))
        *res = (dt_placement){P_, 0};
    else
        return -1;
    return 0;
}

/* K range of the device at `coord`: K split by the K-sharded mesh dims in
 * mesh-dim order, like a nested shard. */
static void k_range(const dt__meta *a, uint32_t kmask, const int64_t *coord, int64_t *ks, int64_t *kl) {
    *ks = 0;
    *kl = a->shape[1];
    for (int md = 0; md < a->mesh->ndim; md++) {
        if (!(kmask & (1u << md)))
            continue;
        int64_t s, l;
        dt__chunk(*kl, a->mesh->shape[md], coord[md], &s, &l);
        *ks += s;
        *kl = l;
    }
}

static void needed(const dt__meta *a, const dt__meta *out, uint32_t kmask, const int64_t *coord, int64_t *as,
                   int64_t *al, int64_t *bs, int64_t *bl) {
    int64_t os[DT_MAX_NDIM], ol[DT_MAX_NDIM], ks, kl;
    dt__local_region(out, coord, os, ol);
    k_range(a, kmask, coord, &ks, &kl);
    as[0] = os[0], al[0] = ol[0], as[1] = ks, al[1] = kl;
    bs[0] = ks, bl[0] = kl, bs[1] = os[1], bl[1] = ol[1];
}

static int within(const dt__meta *m, const int64_t *coord, const int64_t *s, const int64_t *l) {
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    dt__local_region(m, coord, ls, ll);
    for (int d = 0; d < m->ndim; d++)
        if (l[d] > 0 && (s[d] < ls[d] || s[d] + l[d] > ls[d] + ll[d]))
            return 0;
    return 1;
}

dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b) {
    dt_clear_error();
    if (!a || !b) {
        dt__error(DT_EINVAL, "matmul: tensor argument is NULL");
        return NULL;
    }
    if (a->graph != b->graph) {
        dt__error(DT_EINVAL, "matmul: the tensors belong to different graphs");
        return NULL;
    }
    const dt__meta *ma = &a->v->meta, *mb = &b->v->meta;
    if (!dt_mesh_equal(ma->mesh, mb->mesh)) {
        dt__error(DT_EINVAL, "matmul: the tensors are on different device meshes");
        return NULL;
    }
    if (ma->ndim != 2 || mb->ndim != 2) {
        dt__error(DT_EUNSUPPORTED, "matmul: only 2-D @ 2-D is supported so far, got %d-D and %d-D", ma->ndim,
                  mb->ndim);
        return NULL;
    }
    if (ma->shape[1] != mb->shape[0]) {
        dt__error(DT_ESHAPE, "matmul: mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                  (long long)ma->shape[0], (long long)ma->shape[1], (long long)mb->shape[0],
                  (long long)mb->shape[1]);
        return NULL;
    }
    if (ma->dtype != mb->dtype) {
        dt__error(DT_EOP, "matmul: expected both tensors to have the same dtype, but got %s and %s",
                  dt_dtype_name(ma->dtype), dt_dtype_name(mb->dtype));
        return NULL;
    }
    if (ma->dtype == DT_BOOL) {
        dt__error(DT_EOP, "matmul: bool tensors are not supported");
        return NULL;
    }
    dt__meta out;
    memset(&out, 0, sizeof out);
    out.dtype = ma->dtype;
    out.ndim = 2;
    out.shape[0] = ma->shape[0];
    out.shape[1] = mb->shape[1];
    out.mesh = ma->mesh;
    uint32_t kmask = 0;
    const dt__meta *ins[2] = {ma, mb};
    for (int md = 0; md < out.mesh->ndim; md++) {
        int ks;
        if (matmul_mesh_dim(ma->pl[md], mb->pl[md], &out.pl[md], &ks) != 0) {
            dt_placement fix[DT_MAX_MESH_NDIM];
            int which = mb->pl[md].kind == R_ ? 0 : 1;
            memcpy(fix, ins[which]->pl, sizeof fix);
            fix[md] = (dt_placement){R_, 0};
            dt__placement_error("matmul", ins, 2, md, matmul_accepts, which, fix);
            return NULL;
        }
        if (ks)
            kmask |= 1u << md;
    }
    if (out.mesh->ndim > 1) {
        int64_t coord[DT_MAX_MESH_NDIM], as[2], al[2], bs[2], bl[2];
        for (int64_t i = 0; i < out.mesh->ndev; i++) {
            dt__mesh_coord(out.mesh, i, coord);
            needed(ma, &out, kmask, coord, as, al, bs, bl);
            if (!within(ma, coord, as, al) || !within(mb, coord, bs, bl)) {
                dt__placement_error("matmul", ins, 2, 0, matmul_accepts, -1, NULL);
                dt__error_append(" (nested shards do not line up)");
                return NULL;
            }
        }
    }
    dt_tensor *t = dt__tensor_new(a->graph, &out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_MATMUL);
    if (n) {
        n->n_in = 2;
        n->in[0] = a->v;
        n->in[1] = b->v;
        n->out = t->v;
        n->a.k_mesh_mask = kmask;
    }
    return dt__client_submit(t, n);
}

void dt__lower_matmul(dt__lower *L, dt__node *n) {
    dt__tval *o = n->out;
    const dt_mesh *mesh = o->meta.mesh;
    dt__lw_alloc_blobs(o);
    int64_t coord[DT_MAX_MESH_NDIM], as[2], al[2], bs[2], bl[2];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        needed(&n->in[0]->meta, &o->meta, n->a.k_mesh_mask, coord, as, al, bs, bl);
        dt__kernel *k = dt__lw_kernel(L, DT_K_MATMUL);
        k->n_in = 2;
        k->in[0] = dt__lw_region(L, n->in[0], i, coord, as, al);
        k->in[1] = dt__lw_region(L, n->in[1], i, coord, bs, bl);
        k->attr.dtype = o->meta.dtype;
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_linalg[] = {
    {"matmul", "linalg", "(R,R)->R, (S(0),R)->S(0), (R,S(1))->S(1), (S(1),S(0))->P, (S(1),R)->P*, (R,S(0))->P*, "
                         "(P,R)->P, (R,P)->P",
     0},
    {NULL, NULL, NULL, 0},
};
