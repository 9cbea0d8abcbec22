/*
 * Elementwise ops: add, sub, mul, div (tensor-tensor with broadcasting and
 * tensor-scalar) and neg.
 *
 * Placements, matched independently per mesh dim (PlacementSignature):
 *   (R,R)->R; (S(d),S(d))->S(d) when both shard the same broadcast output dim;
 *   (S(d),R)->S(d) and (R,S(d))->S(d): the Replicate side is sliced locally
 *   (no communication), unless its dim is broadcast (size 1);
 *   Partial only where the op is linear in that input: add/sub (P,P)->P,
 *   mul (P,R)->P and (R,P)->P, div (P,R)->P; with a scalar: mul, and div with
 *   the tensor as dividend. A shard of a size-1 dim that broadcasts is not
 *   accepted (the other devices would have nothing to broadcast).
 *
 * Threads: dt_binary/dt_binary_scalar/dt_neg on client threads; the lower_*
 * functions on the controller.
 */
#include <string.h>

#include "core/core.h"
#include "ops/ops.h"

static const char *const binary_names[DT_BINARY_COUNT] = {"add", "sub", "mul", "div"};

static const char *const binary_accepts[DT_BINARY_COUNT] = {
    "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d), (R,S(d))->S(d), (P,P)->P",
    "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d), (R,S(d))->S(d), (P,P)->P",
    "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d), (R,S(d))->S(d), (P,R)->P, (R,P)->P",
    "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d), (R,S(d))->S(d), (P,R)->P",
};

/* The region of input `in` that output region (ostart, olen) needs. */
static void needed_region(const dt__meta *in, const dt__meta *out, const int64_t *ostart, const int64_t *olen,
                          int64_t *start, int64_t *len) {
    int off = out->ndim - in->ndim;
    for (int d = 0; d < in->ndim; d++) {
        if (in->shape[d] == 1) {
            start[d] = 0;
            len[d] = 1;
        } else {
            start[d] = ostart[d + off];
            len[d] = olen[d + off];
        }
    }
}

/* When shards nest (several mesh dims on one tensor dim), per-dim rules are
 * not enough: check every device's needed input regions lie in what it has. */
static dt_status check_nested(const char *op, const dt__meta *const *ins, int nin, const dt__meta *out,
                              const char *accepted) {
    int nested = dt__has_nested_shards(out);
    for (int i = 0; i < nin; i++)
        nested |= dt__has_nested_shards(ins[i]);
    if (!nested)
        return DT_OK;
    const dt_mesh *mesh = out->mesh;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
    int64_t ns[DT_MAX_NDIM], nl[DT_MAX_NDIM], ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    for (int64_t idx = 0; idx < mesh->ndev; idx++) {
        dt__mesh_coord(mesh, idx, coord);
        dt__local_region(out, coord, os, ol);
        for (int i = 0; i < nin; i++) {
            needed_region(ins[i], out, os, ol, ns, nl);
            dt__local_region(ins[i], coord, ls, ll);
            for (int d = 0; d < ins[i]->ndim; d++)
                if (nl[d] > 0 && (ns[d] < ls[d] || ns[d] + nl[d] > ls[d] + ll[d]))
                    return dt__placement_error(op, ins, nin, 0, accepted, -1, NULL);
        }
    }
    return DT_OK;
}

/* Output placement for one mesh dim of a binary op, or -1 (rejected). */
static int binary_mesh_dim(int op, const dt__meta *a, const dt__meta *b, const dt__meta *out, int md,
                           dt_placement *res) {
    dt_placement pa = a->pl[md], pb = b->pl[md];
    int ka = pa.kind, kb = pb.kind;
    if (ka == DT_PLACEMENT_PARTIAL || kb == DT_PLACEMENT_PARTIAL) {
        int ok = (ka == DT_PLACEMENT_PARTIAL && kb == DT_PLACEMENT_PARTIAL &&
                  (op == DT_BINARY_ADD || op == DT_BINARY_SUB)) ||
                 (ka == DT_PLACEMENT_PARTIAL && kb == DT_PLACEMENT_REPLICATE &&
                  (op == DT_BINARY_MUL || op == DT_BINARY_DIV)) ||
                 (ka == DT_PLACEMENT_REPLICATE && kb == DT_PLACEMENT_PARTIAL && op == DT_BINARY_MUL);
        *res = (dt_placement){DT_PLACEMENT_PARTIAL, 0};
        return ok ? 0 : -1;
    }
    int oa = -1, ob = -1;
    if (ka == DT_PLACEMENT_SHARD) {
        oa = pa.dim + out->ndim - a->ndim;
        if (a->shape[pa.dim] == 1 && out->shape[oa] != 1)
            return -1;
    }
    if (kb == DT_PLACEMENT_SHARD) {
        ob = pb.dim + out->ndim - b->ndim;
        if (b->shape[pb.dim] == 1 && out->shape[ob] != 1)
            return -1;
    }
    if (oa >= 0 && ob >= 0 && oa != ob)
        return -1;
    int o = oa >= 0 ? oa : ob;
    *res = o >= 0 ? (dt_placement){DT_PLACEMENT_SHARD, o} : (dt_placement){DT_PLACEMENT_REPLICATE, 0};
    return 0;
}

/* Which input to redistribute, and to what, for the error message: the
 * offending input's placements with that mesh dim made Replicate. */
static void suggest_fix(const dt__meta *a, const dt__meta *b, int md, int *which, dt_placement *fix) {
    const dt__meta *x = b->pl[md].kind == DT_PLACEMENT_REPLICATE ? a : b;
    *which = x == a ? 0 : 1;
    memcpy(fix, x->pl, sizeof x->pl);
    fix[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
}

static dt_status check_pair(const char *opname, dt_tensor *a, dt_tensor *b) {
    if (!a || !b)
        return dt__error(DT_EINVAL, "%s: tensor argument is NULL", opname);
    if (a->graph != b->graph)
        return dt__error(DT_EINVAL, "%s: the tensors belong to different graphs", opname);
    if (!dt_mesh_equal(a->v->meta.mesh, b->v->meta.mesh))
        return dt__error(DT_EINVAL,
                         "%s: the tensors are on different device meshes; move one with redistribute(device_mesh=...)",
                         opname);
    return DT_OK;
}

dt_tensor *dt_binary(dt_binary_op op, dt_tensor *a, dt_tensor *b) {
    dt_clear_error();
    if ((unsigned)op >= DT_BINARY_COUNT) {
        dt__error(DT_EINVAL, "binary: unknown op %d", (int)op);
        return NULL;
    }
    const char *name = binary_names[op];
    if (check_pair(name, a, b) != DT_OK)
        return NULL;
    const dt__meta *ma = &a->v->meta, *mb = &b->v->meta;
    dt__meta out;
    memset(&out, 0, sizeof out);
    out.ndim = ma->ndim > mb->ndim ? ma->ndim : mb->ndim;
    for (int d = 0; d < out.ndim; d++) {
        int da = d - (out.ndim - ma->ndim), db = d - (out.ndim - mb->ndim);
        int64_t sa = da >= 0 ? ma->shape[da] : 1, sb = db >= 0 ? mb->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1) {
            dt__error(DT_ESHAPE,
                      "%s: the size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton "
                      "dimension %d",
                      name, (long long)sa, (long long)sb, d);
            return NULL;
        }
        out.shape[d] = sa == 1 ? sb : sa;
    }
    out.dtype = dt__result_type2(ma, mb);
    if (op == DT_BINARY_DIV && !dt_dtype_is_floating(out.dtype))
        out.dtype = dt_get_default_dtype();
    if (op == DT_BINARY_SUB && (ma->dtype == DT_BOOL || mb->dtype == DT_BOOL)) {
        dt__error(DT_EOP, "sub: subtraction, the `-` operator, with a bool tensor is not supported; use "
                            "the `~` or logical_not() operator to invert a mask");
        return NULL;
    }
    out.mesh = ma->mesh;
    for (int md = 0; md < out.mesh->ndim; md++) {
        if (binary_mesh_dim(op, ma, mb, &out, md, &out.pl[md]) != 0) {
            const dt__meta *ins[2] = {ma, mb};
            int which;
            dt_placement fix[DT_MAX_MESH_NDIM];
            suggest_fix(ma, mb, md, &which, fix);
            dt__placement_error(name, ins, 2, md, binary_accepts[op], which, fix);
            return NULL;
        }
    }
    const dt__meta *ins[2] = {ma, mb};
    if (out.mesh->ndim > 1 && check_nested(name, ins, 2, &out, binary_accepts[op]) != DT_OK)
        return NULL;
    dt_tensor *t = dt__tensor_new(a->graph, &out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_BINARY);
    if (n) {
        n->n_in = 2;
        n->in[0] = a->v;
        n->in[1] = b->v;
        n->out = t->v;
        n->a.sub = op;
    }
    return dt__client_submit(t, n);
}

/* A unary-shaped op: same shape and placements, new dtype. */
static dt_tensor *unary_like(int op, dt_tensor *a, dt_dtype dtype, dt__node **node) {
    dt__meta out = a->v->meta;
    out.dtype = dtype;
    dt_tensor *t = dt__tensor_new(a->graph, &out);
    *node = NULL;
    if (!t)
        return NULL;
    *node = dt__node_new(op);
    if (*node) {
        (*node)->n_in = 1;
        (*node)->in[0] = a->v;
        (*node)->out = t->v;
    }
    return t;
}

dt_tensor *dt_binary_scalar(dt_binary_op op, dt_tensor *a, dt_scalar s, int scalar_first) {
    dt_clear_error();
    if ((unsigned)op >= DT_BINARY_COUNT) {
        dt__error(DT_EINVAL, "binary: unknown op %d", (int)op);
        return NULL;
    }
    const char *name = binary_names[op];
    if (!a) {
        dt__error(DT_EINVAL, "%s: tensor argument is NULL", name);
        return NULL;
    }
    if (s.kind != DT_SCALAR_BOOL && s.kind != DT_SCALAR_INT && s.kind != DT_SCALAR_FLOAT) {
        dt__error(DT_ETYPE, "%s: unknown scalar kind %d", name, s.kind);
        return NULL;
    }
    const dt__meta *m = &a->v->meta;
    dt_dtype dtype = dt__result_type_scalar(m, s);
    if (op == DT_BINARY_DIV && !dt_dtype_is_floating(dtype))
        dtype = dt_get_default_dtype();
    if (op == DT_BINARY_SUB && (m->dtype == DT_BOOL || s.kind == DT_SCALAR_BOOL)) {
        dt__error(DT_EOP, "sub: subtraction, the `-` operator, with a bool tensor is not supported; use "
                            "the `~` or logical_not() operator to invert a mask");
        return NULL;
    }
    int linear = op == DT_BINARY_MUL || (op == DT_BINARY_DIV && !scalar_first);
    for (int md = 0; md < m->mesh->ndim; md++) {
        if (m->pl[md].kind == DT_PLACEMENT_PARTIAL && !linear) {
            dt_placement fix[DT_MAX_MESH_NDIM];
            memcpy(fix, m->pl, sizeof fix);
            fix[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
            const dt__meta *ins[1] = {m};
            dt__placement_error(name, ins, 1, md,
                                "R->R, S(d)->S(d); P->P only for mul, and for div by a scalar", 0, fix);
            return NULL;
        }
    }
    dt__node *n;
    dt_tensor *t = unary_like(DT_OP_BINARY_SCALAR, a, dtype, &n);
    if (!t)
        return NULL;
    if (n) {
        n->a.sub = op;
        n->a.scalar = s;
        n->a.flags = scalar_first ? DT_KF_REVERSED : 0;
    }
    return dt__client_submit(t, n);
}

dt_tensor *dt_neg(dt_tensor *a) {
    dt_clear_error();
    if (!a) {
        dt__error(DT_EINVAL, "neg: tensor argument is NULL");
        return NULL;
    }
    if (a->v->meta.dtype == DT_BOOL) {
        dt__error(DT_EOP, "neg: negation, the `-` operator, on a bool tensor is not supported; use ~ or "
                            "logical_not instead");
        return NULL;
    }
    dt__node *n;
    dt_tensor *t = unary_like(DT_OP_NEG, a, a->v->meta.dtype, &n);
    return t ? dt__client_submit(t, n) : NULL;
}

/* ------------------------------------------------------------ lowering */

void dt__lower_binary(dt__lower *L, dt__node *n) {
    dt__tval *o = n->out;
    const dt__meta *out = &o->meta;
    const dt_mesh *mesh = out->mesh;
    dt__lw_alloc_blobs(o);
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], ns[DT_MAX_NDIM], nl[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__kernel *k;
        if (n->op == DT_OP_BINARY) {
            dt__mesh_coord(mesh, i, coord);
            dt__local_region(out, coord, os, ol);
            dt__blob *in[2];
            for (int j = 0; j < 2; j++) {
                needed_region(&n->in[j]->meta, out, os, ol, ns, nl);
                in[j] = dt__lw_region(L, n->in[j], i, coord, ns, nl);
            }
            k = dt__lw_kernel(L, DT_K_BINARY);
            k->n_in = 2;
            k->in[0] = in[0];
            k->in[1] = in[1];
        } else {
            k = dt__lw_kernel(L, DT_K_BINARY_SCALAR);
            k->n_in = 1;
            k->in[0] = dt__blob_retain(n->in[0]->blobs[i]);
            k->attr.scalar = n->a.scalar;
            k->attr.flags = n->a.flags;
        }
        k->opname = binary_names[n->a.sub];
        k->attr.dtype = out->dtype;
        k->attr.sub = n->a.sub;
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
}

void dt__lower_unary(dt__lower *L, dt__node *n) {
    dt__tval *o = n->out;
    const dt_mesh *mesh = o->meta.mesh;
    dt__lw_alloc_blobs(o);
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__kernel *k = dt__lw_kernel(L, DT_K_NEG);
        k->n_in = 1;
        k->in[0] = dt__blob_retain(n->in[0]->blobs[i]);
        k->attr.dtype = o->meta.dtype;
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_elementwise[] = {
    {"add", "elementwise", "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d)*, (R,S(d))->S(d)*, (P,P)->P", 0},
    {"sub", "elementwise", "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d)*, (R,S(d))->S(d)*, (P,P)->P", 0},
    {"mul", "elementwise",
     "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d)*, (R,S(d))->S(d)*, (P,R)->P, (R,P)->P; scalar: P->P", 0},
    {"div", "elementwise",
     "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d)*, (R,S(d))->S(d)*, (P,R)->P; tensor / scalar: P->P", 0},
    {"neg", "elementwise", "R->R, S(d)->S(d), P->P", 0},
    {NULL, NULL, NULL, 0},
};
