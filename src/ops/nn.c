/*
 * The nn functional family, part 1: the shared placement engine and lowering
 * (see nn_internal.h), activations, softmax/log_softmax, dropout, pad,
 * interpolate and conv2d, and the family's registry rows. Normalisations and
 * embedding live in nn_norm.c, scaled_dot_product_attention in attention.c,
 * pooling in nn_pool.c (with its own registry rows).
 *
 * Every op here is local: a device computes its output region from regions
 * of its inputs, so the lowering is one kernel per device (plus SLICE
 * kernels where a Replicate input is narrowed to the region needed).
 *
 * Threads: the dt_* functions and dt__nn_submit on client threads;
 * dt__lower_nn on the controller.
 */
#include <math.h>
#include <string.h>

#include "ops/elementwise.h"
#include "ops/nn_internal.h"
#include "ops/ops.h"

#define R_ DT_PLACEMENT_REPLICATE
#define S_ DT_PLACEMENT_SHARD
#define P_ DT_PLACEMENT_PARTIAL

/* ------------------------------------------------------------- helpers */

void dt__nn_full(const dt__meta *m, int64_t *s, int64_t *l) {
    for (int d = 0; d < m->ndim; d++) {
        s[d] = 0;
        l[d] = m->shape[d];
    }
}

dt_status dt__nn_need(const char *op, const char *what, const dt_tensor *t) {
    if (!t)
        return dt__error(DT_EINVAL, "%s(): argument '%s' is NULL", op, what);
    return DT_OK;
}

dt_status dt__nn_wrap_dim(const char *op, int64_t dim, int ndim, int *out) {
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n)
        return dt__error(DT_EINDEX,
                         "%s(): Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                         op, -n, n - 1, (long long)dim);
    *out = (int)(dim < 0 ? dim + n : dim);
    return DT_OK;
}

static const nn_rules *rules_of(int op) {
    switch (op) {
    case DT_OP_ACTIVATION:
        return &dt__nn_rules_activation;
    case DT_OP_SOFTMAX:
        return &dt__nn_rules_softmax;
    case DT_OP_NORM:
        return &dt__nn_rules_norm;
    case DT_OP_EMBEDDING:
        return &dt__nn_rules_embedding;
    case DT_OP_CONV2D:
        return &dt__nn_rules_conv2d;
    case DT_OP_INTERPOLATE:
        return &dt__nn_rules_interpolate;
    case DT_OP_PAD:
        return &dt__nn_rules_pad;
    case DT_OP_DROPOUT:
        return &dt__nn_rules_dropout;
    case DT_OP_SDPA:
        return &dt__nn_rules_sdpa;
    case DT_OP_POOL2D:
        return &dt__nn_rules_pool2d;
    default:
        return NULL;
    }
}

/* The region of input j needed for output region (os, ol). */
static void needed_region(const nn_rules *r, const nn_ctx *c, int j, const int64_t *coord, const int64_t *os,
                          const int64_t *ol, int64_t *s, int64_t *l) {
    if (r->needed) {
        r->needed(c, j, coord, os, ol, s, l);
        return;
    }
    /* Invariant: ops without a `needed` rule keep the rank (nn_rules). */
    DT_ASSERT(c->in[j]->ndim == c->out->ndim);
    memcpy(s, os, sizeof(int64_t) * (size_t)c->out->ndim);
    memcpy(l, ol, sizeof(int64_t) * (size_t)c->out->ndim);
}

/* ------------------------------------------------------------- engine */

/* Writes the suggested fix: input j's placements with mesh dim md made
 * Replicate. */
static dt_status reject(const char *name, const nn_rules *r, const dt__meta *const *ins, int nin, int md,
                        int j) {
    dt_placement fix[DT_MAX_MESH_NDIM];
    memcpy(fix, ins[j]->pl, sizeof fix);
    fix[md] = (dt_placement){R_, 0};
    return dt__placement_error(name, ins, nin, md, r->accepted, j, fix);
}

/* The output placement on mesh dim md, or a PlacementError. */
static dt_status mesh_dim_rule(const char *name, const nn_rules *r, const nn_ctx *c, uint32_t linear_mask,
                               int md, dt_placement *res) {
    int out_dim = -1, shard_in = -1, partial_in = -1, nonrep = 0;
    for (int j = 0; j < c->nin; j++) {
        dt_placement p = c->in[j]->pl[md];
        if (p.kind == R_)
            continue;
        nonrep++;
        if (p.kind == P_) {
            if (!(linear_mask & (1u << j)) || partial_in >= 0)
                return reject(name, r, c->in, c->nin, md, j);
            partial_in = j;
            continue;
        }
        int od = r->shard_map(c, j, p.dim);
        if (od == NN_REJECT)
            return reject(name, r, c->in, c->nin, md, j);
        if (od == NN_PARTIAL) {
            if (partial_in >= 0)
                return reject(name, r, c->in, c->nin, md, j);
            partial_in = j;
            continue;
        }
        if (out_dim >= 0 && od != out_dim)
            return reject(name, r, c->in, c->nin, md, j);
        out_dim = od;
        shard_in = j;
    }
    if (partial_in >= 0) {
        /* A partial sum stays exact only if the op sees it alone: every other
         * input must be whole on this mesh dim. */
        if (nonrep > 1)
            return reject(name, r, c->in, c->nin, md, shard_in >= 0 ? shard_in : partial_in);
        *res = (dt_placement){P_, 0};
    } else if (out_dim >= 0) {
        *res = (dt_placement){S_, out_dim};
    } else {
        *res = (dt_placement){R_, 0};
    }
    return DT_OK;
}

/* Every device must hold every region it reads: with nested shards the
 * per-mesh-dim rule is not enough, and this also guards the lowering. */
static dt_status check_regions(const char *name, const nn_rules *r, const nn_ctx *c) {
    const dt_mesh *mesh = c->out->mesh;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
    int64_t ns[DT_MAX_NDIM], nl[DT_MAX_NDIM], ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    for (int64_t idx = 0; idx < mesh->ndev; idx++) {
        dt__mesh_coord(mesh, idx, coord);
        dt__local_region(c->out, coord, os, ol);
        for (int j = 0; j < c->nin; j++) {
            needed_region(r, c, j, coord, os, ol, ns, nl);
            dt__local_region(c->in[j], coord, ls, ll);
            for (int d = 0; d < c->in[j]->ndim; d++) {
                if (nl[d] > 0 && (ns[d] < ls[d] || ns[d] + nl[d] > ls[d] + ll[d])) {
                    dt__placement_error(name, c->in, c->nin, 0, r->accepted, -1, NULL);
                    dt__error_append(" (the shards of the inputs do not line up on every device)");
                    return DT_EPLACEMENT;
                }
            }
        }
    }
    return DT_OK;
}

dt_tensor *dt__nn_submit(int op, const char *name, dt_tensor *const *ins, int nin, dt__meta *out,
                         const dt__nattr *a, uint32_t linear_mask) {
    const nn_rules *r = rules_of(op);
    /* Invariant: the family's own entry points pass their op and count. */
    DT_ASSERT(r && nin >= 1 && nin <= DT_MAX_OP_INPUTS);
    nn_ctx c = {.op = op, .a = a, .nin = nin, .out = out};
    for (int j = 0; j < nin; j++) {
        if (!ins[j]) {
            dt__error(DT_EINVAL, "%s(): tensor argument %d is NULL", name, j);
            return NULL;
        }
        if (ins[j]->graph != ins[0]->graph) {
            dt__error(DT_EINVAL, "%s(): the tensors belong to different graphs", name);
            return NULL;
        }
        if (!dt_mesh_equal(ins[j]->v->meta.mesh, ins[0]->v->meta.mesh)) {
            dt__error(DT_EINVAL,
                      "%s(): the tensors are on different device meshes; move one with "
                      "redistribute(device_mesh=...)",
                      name);
            return NULL;
        }
        c.in[j] = &ins[j]->v->meta;
    }
    out->mesh = c.in[0]->mesh;
    memset(out->pl, 0, sizeof out->pl);
    for (int md = 0; md < out->mesh->ndim; md++)
        if (mesh_dim_rule(name, r, &c, linear_mask, md, &out->pl[md]) != DT_OK)
            return NULL;
    if (out->mesh->ndev > 1 && check_regions(name, r, &c) != DT_OK)
        return NULL;
    dt_tensor *t = dt__tensor_new(ins[0]->graph, out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(op);
    if (n) {
        n->n_in = nin;
        for (int j = 0; j < nin; j++)
            n->in[j] = ins[j]->v;
        n->out = t->v;
        n->a = *a;
    }
    return dt__client_submit(t, n);
}

dt_status dt__lower_nn(dt__lower *L, dt__node *n) {
    const nn_rules *r = rules_of(n->op);
    DT_ASSERT(r); /* invariant: dt__ops sends only nn ops here */
    dt__tval *o = n->out;
    const dt__meta *out = &o->meta;
    const dt_mesh *mesh = out->mesh;
    nn_ctx c = {.op = n->op, .a = &n->a, .nin = n->n_in, .out = out};
    for (int j = 0; j < n->n_in; j++)
        c.in[j] = &n->in[j]->meta;
    if (dt__lw_alloc_blobs(L, o) != DT_OK)
        return L->status;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], ns[DT_MAX_NDIM], nl[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(out, coord, os, ol);
        dt__kernel *k = dt__lw_kernel(L, r->kop);
        if (!k)
            break;
        k->n_in = n->n_in;
        for (int j = 0; j < n->n_in; j++) {
            needed_region(r, &c, j, coord, os, ol, ns, nl);
            k->in[j] = dt__lw_region(L, n->in[j], i, coord, ns, nl);
        }
        if (r->sub_names)
            k->opname = r->sub_names[n->a.sub];
        dt__kattr *ka = &k->attr;
        ka->dtype = out->dtype;
        ka->sub = n->a.sub;
        ka->flags = n->a.flags;
        ka->seed = n->a.seed;
        ka->scalar = n->a.scalar;
        memcpy(ka->f, n->a.f, sizeof ka->f);
        memcpy(ka->ints, n->a.ints, sizeof ka->ints);
        /* The local output shape: kernels use it to skip empty regions. */
        ka->ndim = out->ndim;
        memcpy(ka->shape, ol, sizeof ka->shape);
        if (r->kattr)
            r->kattr(&c, coord, os, ol, ka);
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
    return L->status;
}

/* Shard rule of same-shaped elementwise ops: every dim passes through. */
static int map_same(const nn_ctx *c, int j, int d) {
    (void)c;
    (void)j;
    return d;
}

/* ---------------------------------------------------------- activations */

static const char *const act_names[DT_ACT_COUNT] = {
    [DT_ACT_RELU] = "relu",
    [DT_ACT_GELU] = "gelu",
    [DT_ACT_GELU_TANH] = "gelu",
    [DT_ACT_SILU] = "silu",
    [DT_ACT_LEAKY_RELU] = "leaky_relu",
    [DT_ACT_ELU] = "elu",
    [DT_ACT_SIGMOID] = "sigmoid",
    [DT_ACT_TANH] = "tanh",
};

const nn_rules dt__nn_rules_activation = {
    .kop = DT_K_ACTIVATION,
    .accepted = "R->R, S(d)->S(d)",
    .sub_names = act_names,
    .shard_map = map_same,
};

dt_tensor *dt_activation(dt_activation_kind kind, dt_tensor *x, double param) {
    dt_clear_error();
    if ((unsigned)kind >= DT_ACT_COUNT) {
        dt__error(DT_EINVAL, "activation: unknown kind %d", (int)kind);
        return NULL;
    }
    const char *name = act_names[kind];
    if (dt__nn_need(name, "input", x) != DT_OK)
        return NULL;
    const dt__meta *m = &x->v->meta;
    dt__meta out = *m;
    if (kind == DT_ACT_SIGMOID || kind == DT_ACT_TANH) {
        /* torch computes these in the default float dtype for integers. */
        if (!dt_dtype_is_floating(m->dtype))
            out.dtype = dt_get_default_dtype();
    } else if (kind == DT_ACT_RELU) {
        if (m->dtype == DT_BOOL) {
            dt__error(DT_EOP, "relu(): Boolean inputs not supported for relu");
            return NULL;
        }
    } else if (!dt_dtype_is_floating(m->dtype)) {
        /* torch 2.x: its CPU kernel has no integer case (NotImplementedError). */
        dt__error(DT_EUNSUPPORTED, "%s(): \"%s\" not implemented for '%s' (use a floating dtype)", name, name,
                  dt__ew_torch_name(m->dtype));
        return NULL;
    }
    if (!isfinite(param) && (kind == DT_ACT_LEAKY_RELU || kind == DT_ACT_ELU)) {
        dt__error(DT_EINVAL, "%s(): the %s must be finite", name,
                  kind == DT_ACT_ELU ? "alpha" : "negative_slope");
        return NULL;
    }
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.sub = kind;
    a.f[0] = param;
    return dt__nn_submit(DT_OP_ACTIVATION, name, &x, 1, &out, &a, 0);
}

/* ------------------------------------------------------------- softmax */

static int map_softmax(const nn_ctx *c, int j, int d) {
    (void)j;
    return d == c->a->ints[0] ? NN_REJECT : d;
}

static void kattr_softmax(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol,
                          dt__kattr *k) {
    (void)coord, (void)os, (void)ol;
    k->dim = (int32_t)c->a->ints[0];
}

static const char *const softmax_names[2] = {"softmax", "log_softmax"};

const nn_rules dt__nn_rules_softmax = {
    .kop = DT_K_SOFTMAX,
    .accepted = "R->R, S(d)->S(d) for d != dim (the softmax dim must not be sharded)",
    .sub_names = softmax_names,
    .shard_map = map_softmax,
    .kattr = kattr_softmax,
};

dt_tensor *dt_softmax(dt_tensor *x, int dim, int log, int dtype) {
    dt_clear_error();
    const char *name = softmax_names[log ? 1 : 0];
    if (dt__nn_need(name, "input", x) != DT_OK)
        return NULL;
    const dt__meta *m = &x->v->meta;
    int d = 0;
    if (dt__nn_wrap_dim(name, dim, m->ndim, &d) != DT_OK)
        return NULL;
    if (dtype >= DT_DTYPE_COUNT) {
        dt__error(DT_ETYPE, "%s(): unknown dtype %d", name, dtype);
        return NULL;
    }
    dt__meta out = *m;
    if (dtype >= 0)
        out.dtype = (dt_dtype)dtype;
    if (!dt_dtype_is_floating(out.dtype)) {
        dt__error(DT_EUNSUPPORTED, "%s(): \"%s\" not implemented for '%s' (use a floating dtype)", name, name,
                  dt__ew_torch_name(out.dtype));
        return NULL;
    }
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.sub = log ? 1 : 0;
    a.flags = dtype >= 0 ? DT_KNN_DTYPE : 0;
    /* A 0-d tensor has no dim to shard; keep the wrapped index. */
    a.ints[0] = m->ndim ? d : -1;
    return dt__nn_submit(DT_OP_SOFTMAX, name, &x, 1, &out, &a, 0);
}

/* ------------------------------------------------------------- dropout */

static void kattr_dropout(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol,
                          dt__kattr *k) {
    (void)coord;
    k->gndim = c->out->ndim;
    memcpy(k->gshape, c->out->shape, sizeof k->gshape);
    memcpy(k->start, os, sizeof(int64_t) * (size_t)c->out->ndim);
    memcpy(k->shape, ol, sizeof(int64_t) * (size_t)c->out->ndim);
}

const nn_rules dt__nn_rules_dropout = {
    .kop = DT_K_DROPOUT,
    .accepted = "R->R, S(d)->S(d), P->P",
    .shard_map = map_same,
    .kattr = kattr_dropout,
};

dt_tensor *dt_dropout(dt_tensor *x, double p, int training) {
    dt_clear_error();
    if (dt__nn_need("dropout", "input", x) != DT_OK)
        return NULL;
    if (!(p >= 0.0 && p <= 1.0)) {
        dt__error(DT_EINVAL, "dropout(): dropout probability has to be between 0 and 1, but got %g", p);
        return NULL;
    }
    const dt__meta *m = &x->v->meta;
    /* ATen returns its input untouched in these cases, without drawing. */
    if (!training || p == 0.0 || dt__numel(m->ndim, m->shape) == 0) {
        dt_tensor_retain(x);
        return x;
    }
    if (!dt_dtype_is_floating(m->dtype)) {
        dt__error(DT_EOP, "dropout(): argument 'input' must be a floating-point tensor in training, got %s",
                  dt_dtype_name(m->dtype));
        return NULL;
    }
    dt__meta out = *m;
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.f[0] = p;
    a.seed = dt__next_random_seed();
    return dt__nn_submit(DT_OP_DROPOUT, "dropout", &x, 1, &out, &a, 1u);
}

/* ----------------------------------------------------------------- pad */

/* Tensor dim d is padded when pad[2*(ndim-1-d)] or its pair is nonzero. */
static int pad_touches(const nn_ctx *c, int d) {
    int nd = c->in[0]->ndim, npad = (int)c->a->scalar.i;
    int i = nd - 1 - d;
    if (2 * i + 1 >= npad)
        return 0;
    return c->a->ints[2 * i] != 0 || c->a->ints[2 * i + 1] != 0;
}

static int map_pad(const nn_ctx *c, int j, int d) {
    (void)j;
    return pad_touches(c, d) ? NN_REJECT : d;
}

static void needed_pad(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                       int64_t *s, int64_t *l) {
    (void)j, (void)coord;
    const dt__meta *x = c->in[0];
    for (int d = 0; d < x->ndim; d++) {
        if (pad_touches(c, d)) {
            s[d] = 0;
            l[d] = x->shape[d];
        } else {
            s[d] = os[d];
            l[d] = ol[d];
        }
    }
}

static void kattr_pad(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol,
                      dt__kattr *k) {
    (void)coord, (void)os, (void)ol;
    /* ints holds the amounts (up to 2 * DT_MAX_NDIM); their count travels
     * in the node's scalar, which pad does not otherwise use. */
    k->gndim = (int32_t)c->a->scalar.i;
}

const nn_rules dt__nn_rules_pad = {
    .kop = DT_K_PAD,
    .accepted = "R->R, S(d)->S(d) for an unpadded dim d, P->P (not with a nonzero constant value)",
    .shard_map = map_pad,
    .needed = needed_pad,
    .kattr = kattr_pad,
};

static const char *const pad_mode_names[DT_PAD_COUNT] = {"constant", "reflect", "replicate", "circular"};

dt_tensor *dt_pad(dt_tensor *x, int npad, const int64_t *pad, dt_pad_mode mode, double value) {
    dt_clear_error();
    if (dt__nn_need("pad", "input", x) != DT_OK)
        return NULL;
    if ((unsigned)mode >= DT_PAD_COUNT) {
        dt__error(DT_EINVAL, "pad(): unknown mode %d", (int)mode);
        return NULL;
    }
    const dt__meta *m = &x->v->meta;
    if (npad < 0 || (npad > 0 && !pad)) {
        dt__error(DT_EINVAL, "pad(): argument 'pad' is NULL");
        return NULL;
    }
    if (npad % 2 != 0) {
        dt__error(DT_EOP, "pad(): Padding length must be divisible by 2");
        return NULL;
    }
    if (npad / 2 > m->ndim) {
        dt__error(DT_EOP, "pad(): Padding length too large");
        return NULL;
    }
    int has_value = !isnan(value);
    if (mode != DT_PAD_CONSTANT) {
        int pd = npad / 2;
        if (has_value && value != 0.0) {
            dt__error(DT_EOP, "pad(): Padding mode \"%s\" doesn't take in value argument",
                      pad_mode_names[mode]);
            return NULL;
        }
        has_value = 0;
        if (!((pd == 1 && (m->ndim == 2 || m->ndim == 3)) || (pd == 2 && (m->ndim == 3 || m->ndim == 4)) ||
              (pd == 3 && (m->ndim == 4 || m->ndim == 5)))) {
            dt__error(DT_EUNSUPPORTED,
                      "pad(): Only 2D, 3D, 4D, 5D padding with non-constant padding are supported for now");
            return NULL;
        }
        if (m->dtype == DT_BOOL || !dt_dtype_is_floating(m->dtype)) {
            dt__error(DT_EOP, "pad(): mode '%s' is not implemented for %s tensors", pad_mode_names[mode],
                      dt_dtype_name(m->dtype));
            return NULL;
        }
    }
    dt__meta out = *m;
    for (int i = 0; i < npad / 2; i++) {
        int d = m->ndim - 1 - i;
        int64_t lo = pad[2 * i], hi = pad[2 * i + 1], n = m->shape[d];
        if (mode == DT_PAD_REFLECT && (lo >= n || hi >= n || lo < 0 || hi < 0)) {
            dt__error(DT_EOP,
                      "pad(): padding size should be less than the corresponding input dimension, but got: "
                      "padding (%lld, %lld) at dimension %d of input of size %lld",
                      (long long)lo, (long long)hi, d, (long long)n);
            return NULL;
        }
        if (mode == DT_PAD_CIRCULAR && (lo > n || hi > n)) {
            dt__error(DT_EOP, "pad(): Padding value causes wrapping around more than once.");
            return NULL;
        }
        out.shape[d] = n + lo + hi;
        if (out.shape[d] < 0 || (mode != DT_PAD_CONSTANT && out.shape[d] <= 0)) {
            dt__error(
                DT_EOP,
                "pad(): The input size %lld, plus negative padding %lld and %lld resulted in a negative "
                "output size, which is invalid. Check dimension %d of your input.",
                (long long)n, (long long)lo, (long long)hi, d);
            return NULL;
        }
    }
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.sub = mode;
    a.flags = has_value ? 0 : DT_KNN_DEFAULT;
    a.f[0] = has_value ? value : 0.0;
    for (int i = 0; i < npad; i++)
        a.ints[i] = pad[i];
    a.scalar = dt_scalar_int(npad);
    /* Constant padding with a nonzero value is affine, not linear. */
    uint32_t linear = (mode != DT_PAD_CONSTANT || !has_value || value == 0.0) ? 1u : 0u;
    return dt__nn_submit(DT_OP_PAD, "pad", &x, 1, &out, &a, linear);
}

/* ---------------------------------------------------------- interpolate */

static const char *const interp_names[DT_INTERP_COUNT] = {
    "nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear",
};

static int map_interp(const nn_ctx *c, int j, int d) {
    (void)c, (void)j;
    return d < 2 ? d : NN_REJECT;
}

static void needed_interp(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                          int64_t *s, int64_t *l) {
    (void)j, (void)coord;
    dt__nn_full(c->in[0], s, l);
    for (int d = 0; d < 2; d++) {
        s[d] = os[d];
        l[d] = ol[d];
    }
}

const nn_rules dt__nn_rules_interpolate = {
    .kop = DT_K_INTERPOLATE,
    .accepted = "R->R, S(0)->S(0), S(1)->S(1), P->P (spatial dims must not be sharded)",
    .shard_map = map_interp,
    .needed = needed_interp,
};

dt_tensor *dt_interpolate(dt_tensor *x, dt_interp_mode mode, const int64_t *size, const double *scale_factors,
                          int align_corners) {
    dt_clear_error();
    if (dt__nn_need("interpolate", "input", x) != DT_OK)
        return NULL;
    if ((unsigned)mode >= DT_INTERP_COUNT) {
        dt__error(DT_EINVAL, "interpolate(): unknown mode %d", (int)mode);
        return NULL;
    }
    const dt__meta *m = &x->v->meta;
    int nsp = m->ndim - 2;
    if (nsp < 1 || nsp > 3) {
        dt__error(
            DT_EUNSUPPORTED,
            "interpolate(): Input Error: Only 3D, 4D and 5D input Tensors supported (got %dD) for the modes: "
            "nearest | linear | bilinear | bicubic | trilinear | nearest-exact (got %s)",
            m->ndim, interp_names[mode]);
        return NULL;
    }
    int want = mode == DT_INTERP_LINEAR                                  ? 1
               : mode == DT_INTERP_BILINEAR || mode == DT_INTERP_BICUBIC ? 2
               : mode == DT_INTERP_TRILINEAR                             ? 3
                                                                         : nsp;
    if (want != nsp) {
        dt__error(DT_EUNSUPPORTED, "interpolate(): Got %dD input, but %s mode needs %dD input", m->ndim,
                  interp_names[mode], want + 2);
        return NULL;
    }
    if ((size == NULL) == (scale_factors == NULL)) {
        dt__error(DT_EINVAL, size ? "interpolate(): only one of size or scale_factor should be defined"
                                  : "interpolate(): either size or scale_factor should be defined");
        return NULL;
    }
    int nearest = mode == DT_INTERP_NEAREST || mode == DT_INTERP_NEAREST_EXACT;
    if (!(dt_dtype_is_floating(m->dtype) || (nearest && m->dtype == DT_UINT8))) {
        dt__error(DT_EOP, "interpolate(): mode '%s' is not implemented for %s tensors", interp_names[mode],
                  dt_dtype_name(m->dtype));
        return NULL;
    }
    if (nearest && align_corners >= 0) {
        dt__error(DT_EINVAL,
                  "interpolate(): align_corners option can only be set with the interpolating modes: "
                  "linear | bilinear | bicubic | trilinear");
        return NULL;
    }
    dt__meta out = *m;
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.sub = mode;
    a.flags = align_corners > 0 ? DT_KNN_ALIGN : 0;
    for (int i = 0; i < nsp; i++) {
        int64_t o;
        if (size) {
            o = size[i];
        } else {
            double sf = scale_factors[i];
            if (!isfinite(sf) || sf <= 0) {
                dt__error(DT_EOP, "interpolate(): scale_factor must be positive and finite, got %g", sf);
                return NULL;
            }
            /* ATen's compute_output_size truncates the double product. */
            o = (int64_t)((double)m->shape[i + 2] * sf);
            a.f[i] = sf;
        }
        if (o <= 0 || m->shape[i + 2] <= 0) {
            dt__error(
                DT_EOP,
                "interpolate(): Input and output sizes should be greater than 0, but got input size %lld "
                "and output size %lld at spatial dim %d",
                (long long)m->shape[i + 2], (long long)o, i);
            return NULL;
        }
        out.shape[i + 2] = o;
        a.ints[i] = o;
    }
    if (scale_factors)
        a.flags |= DT_KNN_SCALES;
    return dt__nn_submit(DT_OP_INTERPOLATE, "interpolate", &x, 1, &out, &a, 1u);
}

/* -------------------------------------------------------------- conv2d */

/* The output's channel dim: 1 for batched input, 0 for unbatched. */
static int conv_cdim(const nn_ctx *c) { return c->in[0]->ndim == 4 ? 1 : 0; }

static int map_conv(const nn_ctx *c, int j, int d) {
    if (j == 0)
        return c->in[0]->ndim == 4 && d == 0 ? 0 : NN_REJECT;
    /* Output channels: a slice of weight rows (and bias) computes a slice of
     * channels only when every group sees all input channels. */
    if (d == 0 && c->a->ints[6] == 1)
        return conv_cdim(c);
    return NN_REJECT;
}

static void needed_conv(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                        int64_t *s, int64_t *l) {
    (void)coord;
    dt__nn_full(c->in[j], s, l);
    if (j == 0) {
        if (c->in[0]->ndim == 4) {
            s[0] = os[0];
            l[0] = ol[0];
        }
    } else {
        int cd = conv_cdim(c);
        s[0] = os[cd];
        l[0] = ol[cd];
    }
}

const nn_rules dt__nn_rules_conv2d = {
    .kop = DT_K_CONV2D,
    .accepted = "(x, weight, bias): (R,R,R)->R, (S(0),R,R)->S(0), (R,S(0),S(0) or R)->S(1) (groups == 1); "
                "without bias (P,R)->P, (R,P)->P",
    .shard_map = map_conv,
    .needed = needed_conv,
};

dt_tensor *dt_conv2d(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, const int64_t *stride,
                     const int64_t *padding, const int64_t *dilation, int64_t groups,
                     dt_conv_padding padding_mode) {
    dt_clear_error();
    if (dt__nn_need("conv2d", "input", x) != DT_OK || dt__nn_need("conv2d", "weight", weight) != DT_OK)
        return NULL;
    if (!stride || !dilation || (padding_mode == DT_CONV_PAD_EXPLICIT && !padding)) {
        dt__error(DT_EINVAL, "conv2d(): stride, padding and dilation need 2 entries each");
        return NULL;
    }
    if ((unsigned)padding_mode > DT_CONV_PAD_SAME) {
        dt__error(DT_EINVAL, "conv2d(): unknown padding mode %d", (int)padding_mode);
        return NULL;
    }
    const dt__meta *mx = &x->v->meta, *mw = &weight->v->meta, *mb = bias ? &bias->v->meta : NULL;
    if (mw->ndim != 4) {
        dt__error(DT_EOP,
                  "conv2d(): weight should have 4 dimensions [out_channels, in_channels/groups, kH, kW], "
                  "got %d",
                  mw->ndim);
        return NULL;
    }
    if (mx->ndim != 3 && mx->ndim != 4) {
        dt__error(DT_EOP,
                  "conv2d(): Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of "
                  "%d dimensions",
                  mx->ndim);
        return NULL;
    }
    if (groups <= 0) {
        dt__error(DT_EOP, "conv2d(): non-positive groups is not supported");
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        if (stride[i] <= 0) {
            dt__error(DT_EOP, "conv2d(): non-positive stride is not supported");
            return NULL;
        }
        if (dilation[i] <= 0) {
            dt__error(DT_EOP, "conv2d(): dilation should be greater than zero");
            return NULL;
        }
        if (padding_mode == DT_CONV_PAD_EXPLICIT && padding[i] < 0) {
            dt__error(DT_EOP, "conv2d(): negative padding is not supported");
            return NULL;
        }
    }
    if (padding_mode == DT_CONV_PAD_SAME && (stride[0] != 1 || stride[1] != 1)) {
        dt__error(DT_EOP, "conv2d(): padding='same' is not supported for strided convolutions");
        return NULL;
    }
    int b = mx->ndim == 4 ? 1 : 0; /* batch dims before the channels */
    int64_t cin = mx->shape[b], cout = mw->shape[0];
    if (cout % groups != 0) {
        dt__error(DT_EOP,
                  "conv2d(): Given groups=%lld, expected weight to be divisible by %lld at dimension 0, "
                  "but got weight of size [%lld, %lld, %lld, %lld] instead",
                  (long long)groups, (long long)groups, (long long)mw->shape[0], (long long)mw->shape[1],
                  (long long)mw->shape[2], (long long)mw->shape[3]);
        return NULL;
    }
    if (cin != mw->shape[1] * groups) {
        dt__error(DT_EOP,
                  "conv2d(): Given groups=%lld, weight of size [%lld, %lld, %lld, %lld], expected input to "
                  "have %lld channels, but got %lld channels instead",
                  (long long)groups, (long long)mw->shape[0], (long long)mw->shape[1],
                  (long long)mw->shape[2], (long long)mw->shape[3], (long long)(mw->shape[1] * groups),
                  (long long)cin);
        return NULL;
    }
    if (mb && (mb->ndim != 1 || mb->shape[0] != cout)) {
        dt__error(DT_EOP,
                  "conv2d(): Given weight of size [%lld, ...], expected bias to be 1-dimensional with %lld "
                  "elements",
                  (long long)cout, (long long)cout);
        return NULL;
    }
    if (!dt_dtype_is_floating(mx->dtype)) {
        dt__error(DT_EOP, "conv2d(): argument 'input' must be a floating-point tensor, got %s",
                  dt_dtype_name(mx->dtype));
        return NULL;
    }
    if (mw->dtype != mx->dtype || (mb && mb->dtype != mx->dtype)) {
        dt__error(DT_EOP, "conv2d(): Input type (%s), weight type (%s) and bias type (%s) should be the same",
                  dt_dtype_name(mx->dtype), dt_dtype_name(mw->dtype), mb ? dt_dtype_name(mb->dtype) : "none");
        return NULL;
    }
    dt__meta out = *mx;
    out.shape[b] = cout;
    for (int i = 0; i < 2; i++) {
        int64_t in = mx->shape[b + 1 + i], k = mw->shape[2 + i];
        int64_t eff = dilation[i] * (k - 1) + 1;
        int64_t o;
        if (padding_mode == DT_CONV_PAD_SAME) {
            o = in; /* padded by dilation * (k - 1) in total */
        } else {
            int64_t p = padding_mode == DT_CONV_PAD_VALID ? 0 : padding[i];
            int64_t padded = in + 2 * p;
            o = padded < eff ? 0 : (padded - eff) / stride[i] + 1;
            if (padded < eff) {
                dt__error(DT_EOP,
                          "conv2d(): Calculated padded input size per channel: (%lld). Kernel size: (%lld). "
                          "Kernel size can't be greater than actual input size",
                          (long long)padded, (long long)eff);
                return NULL;
            }
        }
        out.shape[b + 1 + i] = o;
    }
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.sub = padding_mode;
    a.flags = bias ? DT_KNN_BIAS : 0;
    for (int i = 0; i < 2; i++) {
        a.ints[i] = stride[i];
        a.ints[2 + i] = padding_mode == DT_CONV_PAD_EXPLICIT ? padding[i] : 0;
        a.ints[4 + i] = dilation[i];
    }
    a.ints[6] = groups;
    dt_tensor *ins[3] = {x, weight, bias};
    /* Convolution is linear in x and in weight, but the bias is added once
     * per part: Partial passes only without bias. */
    uint32_t linear = bias ? 0u : 3u;
    return dt__nn_submit(DT_OP_CONV2D, "conv2d", ins, bias ? 3 : 2, &out, &a, linear);
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_nn[] = {
    {"relu", "nn", "R->R, S(d)->S(d)", 0},
    {"gelu", "nn", "R->R, S(d)->S(d)", 0},
    {"silu", "nn", "R->R, S(d)->S(d)", 0},
    {"leaky_relu", "nn", "R->R, S(d)->S(d)", 0},
    {"elu", "nn", "R->R, S(d)->S(d)", 0},
    {"softmax", "nn", "R->R, S(d)->S(d) for d != dim", 0},
    {"log_softmax", "nn", "R->R, S(d)->S(d) for d != dim", 0},
    {"dropout", "nn", "R->R, S(d)->S(d), P->P; identity when not training", 0},
    {"pad", "nn", "R->R, S(d)->S(d) for unpadded d, P->P (not with a nonzero constant value)", 0},
    {"interpolate", "nn", "R->R, S(0)->S(0), S(1)->S(1), P->P", 0},
    {"conv2d", "nn",
     "(x, weight, bias): (R,R,R)->R, (S(0),R,R)->S(0), (R,S(0),S(0)|R)->S(1) (groups 1); no bias: (P,R)->P, "
     "(R,P)->P",
     0},
    {"layer_norm", "nn", "(x, weight, bias): (R,R,R)->R, (S(d),R,R)->S(d) for d before the normalized dims",
     0},
    {"rms_norm", "nn", "(x, weight): (R,R)->R, (S(d),R)->S(d) for d before the normalized dims", 0},
    {"group_norm", "nn", "(x, weight, bias): (R,R,R)->R, (S(0),R,R)->S(0)", 0},
    {"batch_norm", "nn",
     "(x, running_mean, running_var, weight, bias): x S(d)->S(d) for any d with the [C] inputs R (sliced) or "
     "S(0) when d is the channel dim 1",
     0},
    {"embedding", "nn", "(indices, weight): (R,R)->R, (S(d),R)->S(d), (R,S(1))->S(-1), (R,S(0))->P, (R,P)->P",
     0},
    {"scaled_dot_product_attention", "nn",
     "(q, k, v, mask): R or S(d) on the same batch/head dim d -> S(d); (R,R,P,R)->P", 0},
    {NULL, NULL, NULL, 0},
};
