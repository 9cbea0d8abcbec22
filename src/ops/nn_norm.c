/*
 * The nn functional family, part 2: layer_norm, rms_norm, group_norm,
 * batch_norm (inference) and embedding (including the vocab-parallel masked
 * lookup). The placement engine and lowering are nn.c's (nn_int.h).
 *
 * Normalisations reduce over some dims: those must be whole on every device,
 * so only the other dims may be sharded, and Partial is rejected (the ops
 * are not linear). batch_norm in inference is a per-channel affine map, so
 * any dim may be sharded, with the per-channel inputs sliced alongside.
 *
 * Threads: the dt_* functions on client threads; the rule callbacks on the
 * client (validation) and on the controller (lowering).
 */
#include <math.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/elementwise.h"
#include "ops/nn_int.h"
#include "ops/ops.h"

/* ------------------------------------------------------- normalisations */

static const char *const norm_names[] = {
    [DT_KNORM_LAYER] = "layer_norm",
    [DT_KNORM_RMS] = "rms_norm",
    [DT_KNORM_GROUP] = "group_norm",
    [DT_KNORM_BATCH] = "batch_norm",
};

static int row_norm(const nn_ctx *c, int j, int d, int *od) {
    int kind = c->a->sub;
    *od = d;
    if (kind == DT_KNORM_BATCH && j >= 1) {
        *od = 1; /* a [C] input's shard is a shard of the channels */
        return d == 0 ? NN_ROW_OUT : NN_ROW_OP;
    }
    if (kind == DT_KNORM_BATCH)
        return NN_ROW_KEEP;
    if (j >= 1)
        return NN_ROW_OP; /* weight/bias cover the normalized dims */
    if (kind == DT_KNORM_GROUP)
        return d == 0 ? NN_ROW_KEEP : NN_ROW_OP;
    /* layer/rms: ints[DT_MAX_NDIM] holds the number of normalized dims. */
    int nnorm = (int)c->a->ints[DT_MAX_NDIM];
    return d < c->in[0]->ndim - nnorm ? NN_ROW_KEEP : NN_ROW_OP;
}

static const dt__ps_row norm_rows[] = DT__PS_ROWS(NN_NORM_ROWS);

static void needed_norm(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                        int64_t *s, int64_t *l) {
    (void)coord;
    if (j == 0) {
        memcpy(s, os, sizeof(int64_t) * (size_t)c->out->ndim);
        memcpy(l, ol, sizeof(int64_t) * (size_t)c->out->ndim);
    } else if (c->a->sub == DT_KNORM_BATCH) {
        s[0] = os[1]; /* the channels of the output region */
        l[0] = ol[1];
    } else {
        dt__nn_full(c->in[j], s, l);
    }
}

static void kattr_norm(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol,
                       dt__kattr *k) {
    (void)coord, (void)os, (void)ol;
    /* LAYER/RMS: the kernel reads the normalized shape from ints[0..gndim). */
    k->gndim = (int32_t)c->a->ints[DT_MAX_NDIM];
}

const nn_rules dt__nn_rules_norm = {
    .kop = DT_K_NORM,
    .accepted = NN_NORM_TEXT,
    .sub_names = norm_names,
    .rows = norm_rows,
    .shard_row = row_norm,
    .needed = needed_norm,
    .kattr = kattr_norm,
};

static void format_shape(dt__strbuf *sb, int n, const int64_t *s) {
    dt__sb_printf(sb, "[");
    for (int i = 0; i < n; i++)
        dt__sb_printf(sb, "%s%lld", i ? ", " : "", (long long)s[i]);
    dt__sb_printf(sb, "]");
}

/* Checks x's trailing dims and the affine tensors against normalized_shape
 * (layer_norm and rms_norm share torch's messages). */
static dt_status check_normalized(const char *op, const dt__meta *x, int nnorm, const int64_t *ns,
                                  dt_tensor *const *affine, const char *const *what, int naffine) {
    dt__strbuf sb;
    if (nnorm < 1 || !ns)
        return dt__error(
            DT_EOP,
            "%s(): Expected normalized_shape to be at least 1-dimensional, i.e., containing at least "
            "one element, but got normalized_shape = []",
            op);
    if (nnorm > DT_MAX_NDIM)
        return dt__error(DT_EOP, "%s(): normalized_shape has %d entries (at most %d)", op, nnorm,
                         DT_MAX_NDIM);
    for (int i = 0; i < naffine; i++) {
        if (!affine[i])
            continue;
        const dt__meta *w = &affine[i]->v->meta;
        int same = w->ndim == nnorm;
        for (int d = 0; same && d < nnorm; d++)
            same = w->shape[d] == ns[d];
        if (!same) {
            dt__sb_init(&sb);
            dt__sb_printf(&sb,
                          "%s(): Expected %s to be of same shape as normalized_shape, but got %s of shape ",
                          op, what[i], what[i]);
            format_shape(&sb, w->ndim, w->shape);
            dt__sb_printf(&sb, " and normalized_shape = ");
            format_shape(&sb, nnorm, ns);
            return dt__error(DT_EOP, "%s", sb.buf);
        }
    }
    int ok = x->ndim >= nnorm;
    for (int d = 0; ok && d < nnorm; d++)
        ok = x->shape[x->ndim - nnorm + d] == ns[d];
    if (!ok) {
        dt__sb_init(&sb);
        dt__sb_printf(&sb, "%s(): Given normalized_shape=", op);
        format_shape(&sb, nnorm, ns);
        dt__sb_printf(&sb, ", expected input with shape [*");
        for (int d = 0; d < nnorm; d++)
            dt__sb_printf(&sb, ", %lld", (long long)ns[d]);
        dt__sb_printf(&sb, "], but got input of size");
        format_shape(&sb, x->ndim, x->shape);
        return dt__error(DT_EOP, "%s", sb.buf);
    }
    return DT_OK;
}

/* Floating x, and affine inputs of x's dtype (torch's CPU kernels require
 * it for layer/group norm; rms_norm multiplies with promotion but dtorch
 * keeps one dtype for predictability). */
static dt_status check_dtypes(const char *op, const dt__meta *x, dt_tensor *const *affine, int naffine) {
    if (!dt_dtype_is_floating(x->dtype))
        return dt__error(DT_EUNSUPPORTED, "%s(): \"%s\" not implemented for '%s' (use a floating dtype)", op,
                         op, dt__ew_torch_name(x->dtype));
    for (int i = 0; i < naffine; i++)
        if (affine[i] && affine[i]->v->meta.dtype != x->dtype)
            return dt__error(DT_EOP, "%s(): expected scalar type %s but found %s", op,
                             dt_dtype_name(x->dtype), dt_dtype_name(affine[i]->v->meta.dtype));
    return DT_OK;
}

/* Collects the given tensors in order, dropping NULLs. */
static int compact(dt_tensor *const *all, int n, dt_tensor **out) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (all[i])
            out[k++] = all[i];
    return k;
}

/* Submits a NORM node of `kind` on all[0] (the input) and those of all[1..n)
 * that are given, weight and bias last; the result has the input's meta. a
 * holds the kind's own attributes; the kind, eps and which of weight and
 * bias are given are added here. */
static dt_tensor *norm_submit(const char *op, int kind, dt__nattr *a, double eps, dt_tensor *const *all,
                              int n) {
    dt__meta out = all[0]->v->meta;
    a->sub = kind;
    a->flags |= (all[n - 2] ? DT_KNN_WEIGHT : 0) | (all[n - 1] ? DT_KNN_BIAS : 0);
    a->f[0] = eps;
    dt_tensor *ins[5];
    int nin = compact(all, n, ins);
    return dt__nn_submit(DT_OP_NORM, op, ins, nin, &out, a, 0);
}

/* An optional argument: absent, or a live handle (checked before its value is read). */
static dt_status need_opt(const char *op, const char *what, const dt_tensor *t) {
    return t ? dt__nn_need(op, what, t) : DT_OK;
}

static dt_tensor *layer_like(int kind, dt_tensor *x, int nnorm, const int64_t *ns, dt_tensor *weight,
                             dt_tensor *bias, double eps) {
    const char *op = norm_names[kind];
    if (dt__nn_need(op, "input", x) != DT_OK || need_opt(op, "weight", weight) != DT_OK ||
        need_opt(op, "bias", bias) != DT_OK)
        return NULL;
    const dt__meta *m = &x->v->meta;
    dt_tensor *affine[2] = {weight, bias};
    static const char *const what[2] = {"weight", "bias"};
    if (check_normalized(op, m, nnorm, ns, affine, what, 2) != DT_OK ||
        check_dtypes(op, m, affine, 2) != DT_OK)
        return NULL;
    dt__nattr a;
    memset(&a, 0, sizeof a);
    if (kind == DT_KNORM_RMS && isnan(eps))
        a.flags = DT_KNN_DEFAULT;
    for (int i = 0; i < nnorm; i++)
        a.ints[i] = ns[i];
    a.ints[DT_MAX_NDIM] = nnorm;
    dt_tensor *all[3] = {x, weight, bias};
    return norm_submit(op, kind, &a, isnan(eps) ? 0.0 : eps, all, 3);
}

dt_tensor *dt_layer_norm(dt_tensor *x, int nnorm, const int64_t *normalized_shape, dt_tensor *weight,
                         dt_tensor *bias, double eps) {
    dt_clear_error();
    if (isnan(eps)) {
        dt__error(DT_EINVAL, "layer_norm(): eps must be a number");
        return NULL;
    }
    return layer_like(DT_KNORM_LAYER, x, nnorm, normalized_shape, weight, bias, eps);
}

dt_tensor *dt_rms_norm(dt_tensor *x, int nnorm, const int64_t *normalized_shape, dt_tensor *weight,
                       double eps) {
    dt_clear_error();
    return layer_like(DT_KNORM_RMS, x, nnorm, normalized_shape, weight, NULL, eps);
}

/* group_norm's and batch_norm's input: a channel dim (dim 1) at least. */
static dt_status need_channels(const char *op, const dt__meta *x) {
    if (x->ndim < 2)
        return dt__error(DT_EOP, "%s(): Expected at least 2 dimensions for input tensor but received %d", op,
                         x->ndim);
    return DT_OK;
}

/* Checks a per-channel [C] input. */
static dt_status check_channels(const char *op, const char *what, const dt_tensor *t, const dt__meta *x) {
    if (!t)
        return DT_OK;
    const dt__meta *w = &t->v->meta;
    if (w->ndim != 1 || w->shape[0] != x->shape[1]) {
        dt__strbuf sb;
        dt__sb_init(&sb);
        dt__sb_printf(
            &sb,
            "%s(): Expected %s to be a vector of size equal to the number of channels in input, but "
            "got %s of shape ",
            op, what, what);
        format_shape(&sb, w->ndim, w->shape);
        dt__sb_printf(&sb, " and input of shape ");
        format_shape(&sb, x->ndim, x->shape);
        return dt__error(DT_EOP, "%s", sb.buf);
    }
    return DT_OK;
}

dt_tensor *dt_group_norm(dt_tensor *x, int64_t num_groups, dt_tensor *weight, dt_tensor *bias, double eps) {
    dt_clear_error();
    const char *op = "group_norm";
    if (dt__nn_need(op, "input", x) != DT_OK || need_opt(op, "weight", weight) != DT_OK ||
        need_opt(op, "bias", bias) != DT_OK)
        return NULL;
    const dt__meta *m = &x->v->meta;
    if (need_channels(op, m) != DT_OK)
        return NULL;
    if (num_groups <= 0 || m->shape[1] % num_groups != 0) {
        dt__strbuf sb;
        dt__sb_init(&sb);
        dt__sb_printf(&sb,
                      "group_norm(): Expected number of channels in input to be divisible by num_groups, but "
                      "got input of shape ");
        format_shape(&sb, m->ndim, m->shape);
        dt__sb_printf(&sb, " and num_groups=%lld", (long long)num_groups);
        dt__error(DT_EOP, "%s", sb.buf);
        return NULL;
    }
    dt_tensor *affine[2] = {weight, bias};
    if (check_channels(op, "weight", weight, m) != DT_OK || check_channels(op, "bias", bias, m) != DT_OK ||
        check_dtypes(op, m, affine, 2) != DT_OK)
        return NULL;
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.ints[0] = num_groups;
    dt_tensor *all[3] = {x, weight, bias};
    return norm_submit(op, DT_KNORM_GROUP, &a, eps, all, 3);
}

dt_tensor *dt_batch_norm(dt_tensor *x, dt_tensor *running_mean, dt_tensor *running_var, dt_tensor *weight,
                         dt_tensor *bias, double momentum, double eps) {
    dt_clear_error();
    const char *op = "batch_norm";
    if (dt__nn_need(op, "input", x) != DT_OK)
        return NULL;
    if (!running_mean || !running_var) {
        dt__error(DT_EINVAL, "batch_norm(): running_mean and running_var must be defined in evaluation mode");
        return NULL;
    }
    const dt__meta *m = &x->v->meta;
    if (need_channels(op, m) != DT_OK)
        return NULL;
    dt_tensor *per_c[4] = {running_mean, running_var, weight, bias};
    static const char *const what[4] = {"running_mean", "running_var", "weight", "bias"};
    for (int i = 0; i < 4; i++)
        if (need_opt(op, what[i], per_c[i]) != DT_OK || check_channels(op, what[i], per_c[i], m) != DT_OK)
            return NULL;
    if (!dt_dtype_is_floating(m->dtype)) {
        dt__error(DT_EOP, "batch_norm(): argument 'input' must be a floating-point tensor, got %s",
                  dt_dtype_name(m->dtype));
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        if (per_c[i] && !dt_dtype_is_floating(per_c[i]->v->meta.dtype)) {
            dt__error(DT_EOP, "batch_norm(): %s must be a floating-point tensor, got %s", what[i],
                      dt_dtype_name(per_c[i]->v->meta.dtype));
            return NULL;
        }
    }
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.f[1] = momentum;
    dt_tensor *all[5] = {x, running_mean, running_var, weight, bias};
    return norm_submit(op, DT_KNORM_BATCH, &a, eps, all, 5);
}

/* ------------------------------------------------------------ embedding */

static int row_embedding(const nn_ctx *c, int j, int d, int *od) {
    *od = d;
    if (j == 0)
        return NN_ROW_KEEP;
    /* weight: a vocab shard looks up only its rows -> partial sums; a shard
     * of the embedding dim is a shard of the output's last dim. */
    *od = d == 0 ? -1 : c->in[0]->ndim;
    return d == 0 ? NN_ROW_SUM : NN_ROW_OUT;
}

static const dt__ps_row emb_rows[] = DT__PS_ROWS(NN_EMB_ROWS);
static const uint32_t emb_partial[] = DT__PS_MASKS(EMB);

static void needed_embedding(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os,
                             const int64_t *ol, int64_t *s, int64_t *l) {
    int ni = c->in[0]->ndim;
    if (j == 0) {
        memcpy(s, os, sizeof(int64_t) * (size_t)ni);
        memcpy(l, ol, sizeof(int64_t) * (size_t)ni);
        return;
    }
    /* The rows this device holds (all of them unless vocab-sharded) and the
     * columns of its output region. */
    dt__local_region(c->in[1], coord, s, l);
    s[1] = os[ni];
    l[1] = ol[ni];
}

static void kattr_embedding(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol,
                            dt__kattr *k) {
    (void)os, (void)ol;
    int64_t s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    dt__local_region(c->in[1], coord, s, l);
    k->ints[0] = s[0];
    k->ints[1] = l[0];
    k->ints[2] = c->in[1]->shape[0];
}

const nn_rules dt__nn_rules_embedding = {
    .kop = DT_K_EMBEDDING,
    .accepted = NN_EMB_TEXT,
    .rows = emb_rows,
    .shard_row = row_embedding,
    .partial = emb_partial,
    .needed = needed_embedding,
    .kattr = kattr_embedding,
};

dt_tensor *dt_embedding(dt_tensor *indices, dt_tensor *weight) {
    dt_clear_error();
    if (dt__nn_need("embedding", "input", indices) != DT_OK ||
        dt__nn_need("embedding", "weight", weight) != DT_OK)
        return NULL;
    const dt__meta *mi = &indices->v->meta, *mw = &weight->v->meta;
    if (mi->dtype != DT_INT64 && mi->dtype != DT_INT32) {
        dt__error(
            DT_EOP,
            "embedding(): Expected tensor for argument #1 'indices' to have one of the following scalar "
            "types: Long, Int; but got %s instead",
            dt_dtype_name(mi->dtype));
        return NULL;
    }
    if (mw->ndim != 2) {
        dt__error(DT_EOP, "embedding(): 'weight' must be 2-D, got %d-D", mw->ndim);
        return NULL;
    }
    if (mi->ndim + 1 > DT_MAX_NDIM) {
        dt__error(DT_EINVAL, "embedding(): the result would have more than %d dims", DT_MAX_NDIM);
        return NULL;
    }
    dt__meta out;
    memset(&out, 0, sizeof out);
    out.dtype = mw->dtype;
    out.ndim = mi->ndim + 1;
    memcpy(out.shape, mi->shape, sizeof(int64_t) * (size_t)mi->ndim);
    out.shape[mi->ndim] = mw->shape[1];
    dt__nattr a;
    memset(&a, 0, sizeof a);
    for (int md = 0; md < mw->mesh->ndim; md++)
        if (mw->pl[md].kind == DT_PLACEMENT_SHARD && mw->pl[md].dim == 0)
            a.flags = DT_KNN_MASKED;
    dt_tensor *ins[2] = {indices, weight};
    /* Looking rows up is linear in the weight (not in the indices). */
    return dt__nn_submit(DT_OP_EMBEDDING, "embedding", ins, 2, &out, &a, 1);
}

/* ------------------------------------------------------ segmented dims */

/* The norms' seg rule (the NORM row's; core/records/seg.h): layer_norm and
 * rms_norm over trailing dims that exclude the dim (the weight and bias
 * have only those dims). */
int dt__seg_rule_norm(const dt__node *n, dt__meta *out) {
    const dt__meta *in = &n->in[0]->meta;
    dt__seg g = in->seg;
    if (!g.n || (n->a.sub != DT_KNORM_LAYER && n->a.sub != DT_KNORM_RMS) ||
        g.dim >= in->ndim - n->a.ints[DT_MAX_NDIM])
        return DT__SEG_REGULAR;
    out->seg = g;
    return DT__SEG_PASS;
}
