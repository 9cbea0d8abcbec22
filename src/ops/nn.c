/*
 * The nn functional family, part 1: the shared placement engine and lowering
 * (see nn_int.h), activations, softmax/log_softmax, dropout, pixel_shuffle,
 * and the family's registry rows. pad, interpolate and conv2d live in nn_spatial.c,
 * normalisations and embedding in nn_norm.c, scaled_dot_product_attention in
 * attention.c, pooling in nn_pool.c (with its own registry rows).
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

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/elementwise.h"
#include "ops/nn_int.h"
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
    if (!dt__tensor_ok(t))
        return dt__error(DT_EINVAL, "%s(): argument '%s' is %s", op, what, dt__handle_bad(t));
    return DT_OK;
}

/* ------------------------------------------------------------- engine */

/* The engine's signature of an nn op: its rules, with the rule's Partial
 * sets when the call is `linear`. */
static dt__psig signature(const nn_rules *r, int linear) {
    return (dt__psig){.needed = r->needed,
                      .partial = linear ? r->partial : NULL,
                      .accepted = r->accepted,
                      .rows = r->rows,
                      .shard_row = r->shard_row};
}

dt_tensor *dt__nn_submit(int op, const char *name, dt_tensor *const *ins, int nin, dt__meta *out,
                         const dt__nattr *a, int linear) {
    const nn_rules *r = dt__ops[op].rules;
    /* Invariant: the family's own entry points pass their op and count. */
    DT_ASSERT(r && nin >= 1 && nin <= DT_MAX_OP_INPUTS);
    if (dt__check_operands(name, ins, nin) != DT_OK)
        return NULL;
    nn_ctx c = {.op = op, .a = a, .nin = nin, .out = out};
    for (int j = 0; j < nin; j++)
        c.in[j] = &ins[j]->v->meta;
    out->mesh = c.in[0]->mesh;
    memset(out->pl, 0, sizeof out->pl);
    const dt__psig sig = signature(r, linear);
    int bad;
    if (dt__ps_apply(name, &sig, &c, 1, out->pl, &bad) != DT_OK) {
        if (bad >= 0) {
            dt__placement_error(name, c.in, c.nin, 0, r->accepted, -1, NULL);
            dt__error_append(" (the shards of the inputs do not line up on every device)");
        }
        return NULL;
    }
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

/* The attributes of the kernel of device `coord` (output region os, ol). */
static void nn_kattr(const nn_rules *r, const nn_ctx *c, const dt__node *n, const int64_t *coord,
                     const int64_t *os, const int64_t *ol, dt__kattr *ka) {
    ka->dtype = c->out->dtype;
    ka->sub = n->a.sub;
    ka->flags = n->a.flags;
    ka->seed = n->a.seed;
    ka->scalar = n->a.scalar;
    memcpy(ka->f, n->a.f, sizeof ka->f);
    memcpy(ka->ints, n->a.ints, sizeof ka->ints);
    /* The local output shape: kernels use it to skip empty regions. */
    ka->ndim = c->out->ndim;
    memcpy(ka->shape, ol, sizeof ka->shape);
    if (r->kattr)
        r->kattr(c, coord, os, ol, ka);
}

/* Lowers n as one device-independent record (lower_bcast.c) when on every
 * device each input's region is the device's whole block of it and the
 * kernel's attributes (packed) are the same bytes on every device: a hook
 * that gives a device its offsets, or an uneven shard's shape, keeps the
 * node per device. Checked on dt__lw_probes' devices: the family's needed
 * and kattr hooks copy offsets and lengths of local regions, chosen by
 * shapes and attributes alone (nn_int.h). 1 when taken (L->status set on a
 * failure). */
static int nn_bcast(dt__lower *L, dt__node *n, const nn_rules *r, const nn_ctx *c) {
    const dt__meta *out = c->out;
    if (!dt__lw_bcast_wanted(L, n->out))
        return 0;
    const dt__psig sig = {.needed = r->needed};
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], ns[DT_MAX_NDIM], nl[DT_MAX_NDIM];
    dt__kattr ka[2]; /* device 0's, another's */
    dt__lw_same same;
    int64_t devs[DT__LW_BCAST_MAX_DEV];
    int np = dt__lw_probes(L, n, 1, devs);
    for (int i = 0; i < np; i++) {
        dt__kattr *ki = &ka[i > 0];
        int64_t d = devs[i];
        dt__mesh_coord(out->mesh, d, coord);
        dt__local_region(out, coord, os, ol);
        for (int j = 0; j < n->n_in; j++) {
            dt__ps_needed(&sig, c, j, coord, os, ol, ns, nl);
            if (!dt__lw_own_block(c->in[j], coord, ns, nl))
                return 0;
        }
        *ki = (dt__kattr){0};
        nn_kattr(r, c, n, coord, os, ol, ki);
        if (!dt__lw_same_attr(&same, i, ki))
            return 0;
    }
    const char *opname = r->sub_names ? r->sub_names[n->a.sub] : NULL;
    return dt__lw_bcast(L, n->out, r->kop, &ka[0], opname, n->in, n->n_in, 1);
}

dt_status dt__lower_nn(dt__lower *L, dt__node *n) {
    const nn_rules *r = dt__ops[n->op].rules;
    DT_ASSERT(r); /* invariant: dt__ops sends only nn ops here */
    const dt__meta *out = &n->out->meta;
    nn_ctx c = {.op = n->op, .a = &n->a, .nin = n->n_in, .out = out};
    for (int j = 0; j < n->n_in; j++)
        c.in[j] = &n->in[j]->meta;
    /* One record for every device where nothing differs but the blobs. */
    if (nn_bcast(L, n, r, &c))
        return L->status;
    const dt__psig sig = {.needed = r->needed};
    int64_t ns[DT_MAX_NDIM], nl[DT_MAX_NDIM];
    for (dt__lw_dev dev = DT__LW_EACH(n->out, r->kop); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        k->n_in = n->n_in;
        for (int j = 0; j < n->n_in; j++) {
            dt__ps_needed(&sig, &c, j, dev.coord, dev.start, dev.len, ns, nl);
            k->in[j] = dt__lw_region(L, n->in[j], dev.idx, dev.coord, ns, nl);
        }
        if (r->sub_names)
            k->opname = r->sub_names[n->a.sub];
        nn_kattr(r, &c, n, dev.coord, dev.start, dev.len, &k->attr);
        dt__lw_each_push(L, &dev);
    }
    return L->status;
}

int dt__nn_row_same(const nn_ctx *c, int j, int d, int *od) {
    (void)c;
    (void)j;
    *od = d;
    return NN_ROW_KEEP;
}

static const dt__ps_row act_rows[] = DT__PS_ROWS(NN_ACT_ROWS), softmax_rows[] = DT__PS_ROWS(NN_SOFTMAX_ROWS);
static const uint32_t set_p[] = DT__PS_MASKS(P);

/* ---------------------------------------------------------- activations */

static const char *const act_names[DT_ACT_COUNT] = {
#define DT_ACTIVATION(E, name) [DT_ACT_##E] = name,
#include "dtorch/dtorch_ops.def"
};

const char *dt_activation_name(dt_activation_kind kind) {
    return (unsigned)kind < DT_ACT_COUNT ? act_names[kind] : NULL;
}

const nn_rules dt__nn_rules_activation = {
    .kop = DT_K_ACTIVATION,
    .accepted = NN_ACT_TEXT,
    .sub_names = act_names,
    .rows = act_rows,
    .shard_row = dt__nn_row_same,
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

static int row_softmax(const nn_ctx *c, int j, int d, int *od) {
    (void)j;
    *od = d;
    return d == c->a->ints[0] ? NN_ROW_OP : NN_ROW_KEEP;
}

static void kattr_softmax(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol,
                          dt__kattr *k) {
    (void)coord, (void)os, (void)ol;
    k->dim = (int32_t)c->a->ints[0];
}

static const char *const softmax_names[2] = {"softmax", "log_softmax"};

const nn_rules dt__nn_rules_softmax = {
    .kop = DT_K_SOFTMAX,
    .accepted = NN_SOFTMAX_TEXT,
    .sub_names = softmax_names,
    .rows = softmax_rows,
    .shard_row = row_softmax,
    .kattr = kattr_softmax,
};

dt_tensor *dt_softmax(dt_tensor *x, int dim, int log, int dtype) {
    dt_clear_error();
    const char *name = softmax_names[log ? 1 : 0];
    if (dt__nn_need(name, "input", x) != DT_OK)
        return NULL;
    const dt__meta *m = &x->v->meta;
    int d = 0;
    if (dt__wrap_dim(name, dim, m->ndim, &d) != DT_OK)
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
    .accepted = NN_DROPOUT_TEXT,
    .rows = act_rows,
    .shard_row = dt__nn_row_same,
    .partial = set_p,
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
    return dt__nn_submit(DT_OP_DROPOUT, "dropout", &x, 1, &out, &a, 1);
}

/* ------------------------------------------------------- pixel_shuffle */

/* Batch dims pass through; the last three are rearranged as a whole. */
static int row_shuffle(const nn_ctx *c, int j, int d, int *od) {
    (void)j;
    *od = d;
    return d < c->in[0]->ndim - 3 ? NN_ROW_KEEP : NN_ROW_OP;
}

static void needed_shuffle(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                           int64_t *s, int64_t *l) {
    (void)j, (void)coord;
    dt__nn_full(c->in[0], s, l);
    for (int d = 0; d < c->in[0]->ndim - 3; d++) {
        s[d] = os[d];
        l[d] = ol[d];
    }
}

static const dt__ps_row shuffle_rows[] = DT__PS_ROWS(NN_SHUFFLE_ROWS);

const nn_rules dt__nn_rules_pixel_shuffle = {
    .kop = DT_K_PIXEL_SHUFFLE,
    .accepted = NN_SHUFFLE_TEXT,
    .rows = shuffle_rows,
    .shard_row = row_shuffle,
    .partial = set_p,
    .needed = needed_shuffle,
};

dt_tensor *dt_pixel_shuffle(dt_tensor *x, int64_t upscale_factor) {
    dt_clear_error();
    if (dt__nn_need("pixel_shuffle", "input", x) != DT_OK)
        return NULL;
    const dt__meta *m = &x->v->meta;
    if (m->ndim < 3) {
        dt__error(DT_EOP,
                  "pixel_shuffle(): pixel_shuffle expects input to have at least 3 dimensions, but got input "
                  "with %d dimension(s)",
                  m->ndim);
        return NULL;
    }
    if (upscale_factor <= 0) {
        dt__error(DT_EOP, "pixel_shuffle(): pixel_shuffle expects a positive upscale_factor, but got %lld",
                  (long long)upscale_factor);
        return NULL;
    }
    int nd = m->ndim;
    int64_t r2, c = m->shape[nd - 3];
    if (__builtin_mul_overflow(upscale_factor, upscale_factor, &r2) || c % r2 != 0) {
        dt__error(DT_EOP,
                  "pixel_shuffle(): pixel_shuffle expects its input's 'channel' dimension to be divisible by "
                  "the square of upscale_factor, but input.size(-3)=%lld is not divisible by %lld",
                  (long long)c, (long long)r2);
        return NULL;
    }
    dt__meta out = *m;
    out.shape[nd - 3] = c / r2;
    if (__builtin_mul_overflow(m->shape[nd - 2], upscale_factor, &out.shape[nd - 2]) ||
        __builtin_mul_overflow(m->shape[nd - 1], upscale_factor, &out.shape[nd - 1])) {
        dt__error(DT_EOP, "pixel_shuffle(): the output size overflows");
        return NULL;
    }
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.ints[0] = upscale_factor;
    /* It moves elements: linear, so Partial passes through. */
    return dt__nn_submit(DT_OP_PIXEL_SHUFFLE, "pixel_shuffle", &x, 1, &out, &a, 1);
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_nn[] = {
    {"relu", "nn", NN_ACT_TEXT, 0},
    {"gelu", "nn", NN_ACT_TEXT, 0},
    {"silu", "nn", NN_ACT_TEXT, 0},
    {"leaky_relu", "nn", NN_ACT_TEXT, 0},
    {"elu", "nn", NN_ACT_TEXT, 0},
    {"softmax", "nn", NN_SOFTMAX_TEXT, 0},
    {"log_softmax", "nn", NN_SOFTMAX_TEXT, 0},
    {"dropout", "nn", NN_DROPOUT_TEXT "; identity when not training", 0},
    {"pixel_shuffle", "nn", NN_SHUFFLE_TEXT, 0},
    {"pad", "nn", NN_PAD_TEXT, 0},
    {"interpolate", "nn", NN_INTERP_TEXT, 0},
    {"conv2d", "nn", NN_CONV_TEXT, 0},
    {"layer_norm", "nn", NN_NORM_TEXT, 0},
    {"rms_norm", "nn", NN_NORM_TEXT, 0},
    {"group_norm", "nn", NN_NORM_TEXT, 0},
    {"batch_norm", "nn", NN_NORM_TEXT, 0},
    {"embedding", "nn", NN_EMB_TEXT, 0},
    {"scaled_dot_product_attention", "nn",
     NN_SDPA_TEXT "; S(seq) on a context-parallel mesh dim (SdpaOption) -> S(seq) by Ulysses (all-to-all) or "
                  "ring attention",
     0},
    {NULL, NULL, NULL, 0},
};

/* ------------------------------------------------------ segmented dims */

/* softmax's seg rule (the SOFTMAX row's; core/records/seg.h): over another
 * dim, each row is whole on its device. */
int dt__seg_rule_softmax(const dt__node *n, dt__meta *out) {
    dt__seg g = n->in[0]->meta.seg;
    if (!g.n || n->a.ints[0] == g.dim)
        return DT__SEG_REGULAR;
    out->seg = g;
    return DT__SEG_PASS;
}
