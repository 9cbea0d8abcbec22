/*
 * The nn functional family, spatial ops: pad, interpolate and conv2d. Each is
 * an nn_rules table (nn_int.h) driven by the family's engine in nn.c;
 * their registry rows are in nn.c's dt__docs_nn.
 *
 * Threads: the dt_* functions on client threads; the rules' callbacks on the
 * thread that runs the engine (client for placements, controller for
 * lowering).
 */
#include <math.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/elementwise.h"
#include "ops/nn_int.h"
#include "ops/ops.h"

#define R_ DT_PLACEMENT_REPLICATE
#define S_ DT_PLACEMENT_SHARD
#define P_ DT_PLACEMENT_PARTIAL

/* ----------------------------------------------------------------- pad */

/* Tensor dim d is padded when pad[2*(ndim-1-d)] or its pair is nonzero. */
static int pad_touches(const nn_ctx *c, int d) {
    int nd = c->in[0]->ndim, npad = (int)c->a->scalar.i;
    int i = nd - 1 - d;
    if (2 * i + 1 >= npad)
        return 0;
    return c->a->ints[2 * i] != 0 || c->a->ints[2 * i + 1] != 0;
}

static int row_pad(const nn_ctx *c, int j, int d, int *od) {
    (void)j;
    *od = d;
    return pad_touches(c, d) ? NN_ROW_OP : NN_ROW_KEEP;
}

static const dt__ps_row pad_rows[] = DT__PS_ROWS(NN_PAD_ROWS), interp_rows[] = DT__PS_ROWS(NN_INTERP_ROWS),
                        conv_rows[] = DT__PS_ROWS(NN_CONV_ROWS);
static const uint32_t set_p[] = DT__PS_MASKS(P), set_conv[] = DT__PS_MASKS(MUL);

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
    .accepted = NN_PAD_TEXT,
    .rows = pad_rows,
    .shard_row = row_pad,
    .partial = set_p,
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
    int linear = mode != DT_PAD_CONSTANT || !has_value || value == 0.0;
    return dt__nn_submit(DT_OP_PAD, "pad", &x, 1, &out, &a, linear);
}

/* ---------------------------------------------------------- interpolate */

static const char *const interp_names[DT_INTERP_COUNT] = {
    "nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear",
};

static int row_interp(const nn_ctx *c, int j, int d, int *od) {
    (void)c, (void)j;
    *od = d;
    return d < 2 ? NN_ROW_KEEP : NN_ROW_OP;
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
    .accepted = NN_INTERP_TEXT,
    .rows = interp_rows,
    .shard_row = row_interp,
    .partial = set_p,
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
    return dt__nn_submit(DT_OP_INTERPOLATE, "interpolate", &x, 1, &out, &a, 1);
}

/* -------------------------------------------------------------- conv2d */

/* The output's channel dim: 1 for batched input, 0 for unbatched. */
static int conv_cdim(const nn_ctx *c) { return c->in[0]->ndim == 4 ? 1 : 0; }

static int row_conv(const nn_ctx *c, int j, int d, int *od) {
    *od = 0;
    if (j == 0)
        return c->in[0]->ndim == 4 && d == 0 ? NN_ROW_KEEP : NN_ROW_OP;
    /* Output channels: a slice of weight rows (and bias) computes a slice of
     * channels only when every group sees all input channels. */
    *od = conv_cdim(c);
    return d == 0 && c->a->ints[6] == 1 ? NN_ROW_OUT : NN_ROW_OP;
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
    .accepted = NN_CONV_TEXT,
    .rows = conv_rows,
    .shard_row = row_conv,
    .partial = set_conv,
    .needed = needed_conv,
};

/* conv2d's stride, padding, dilation and groups, in torch's order (after the
 * ranks, dt_conv2d). */
static dt_status check_conv_params(const int64_t *stride, const int64_t *padding, const int64_t *dilation,
                                   int64_t groups, dt_conv_padding padding_mode) {
    if (groups <= 0)
        return dt__error(DT_EOP, "conv2d(): non-positive groups is not supported");
    for (int i = 0; i < 2; i++) {
        if (stride[i] <= 0)
            return dt__error(DT_EOP, "conv2d(): non-positive stride is not supported");
        if (dilation[i] <= 0)
            return dt__error(DT_EOP, "conv2d(): dilation should be greater than zero");
        if (padding_mode == DT_CONV_PAD_EXPLICIT && padding[i] < 0)
            return dt__error(DT_EOP, "conv2d(): negative padding is not supported");
    }
    if (padding_mode == DT_CONV_PAD_SAME && (stride[0] != 1 || stride[1] != 1))
        return dt__error(DT_EOP, "conv2d(): padding='same' is not supported for strided convolutions");
    return DT_OK;
}

/* The channels of x, weight and bias (mb NULL: none) against groups, and
 * their dtypes. */
static dt_status check_conv_operands(const dt__meta *mx, const dt__meta *mw, const dt__meta *mb,
                                     int64_t groups) {
    int b = mx->ndim == 4 ? 1 : 0; /* batch dims before the channels */
    int64_t cin = mx->shape[b], cout = mw->shape[0];
    if (cout % groups != 0)
        return dt__error(
            DT_EOP,
            "conv2d(): Given groups=%lld, expected weight to be divisible by %lld at dimension 0, "
            "but got weight of size [%lld, %lld, %lld, %lld] instead",
            (long long)groups, (long long)groups, (long long)mw->shape[0], (long long)mw->shape[1],
            (long long)mw->shape[2], (long long)mw->shape[3]);
    if (cin != mw->shape[1] * groups)
        return dt__error(
            DT_EOP,
            "conv2d(): Given groups=%lld, weight of size [%lld, %lld, %lld, %lld], expected input to "
            "have %lld channels, but got %lld channels instead",
            (long long)groups, (long long)mw->shape[0], (long long)mw->shape[1], (long long)mw->shape[2],
            (long long)mw->shape[3], (long long)(mw->shape[1] * groups), (long long)cin);
    if (mb && (mb->ndim != 1 || mb->shape[0] != cout))
        return dt__error(DT_EOP,
                         "conv2d(): Given weight of size [%lld, ...], expected bias to be 1-dimensional with "
                         "%lld elements",
                         (long long)cout, (long long)cout);
    if (!dt_dtype_is_floating(mx->dtype))
        return dt__error(DT_EOP, "conv2d(): argument 'input' must be a floating-point tensor, got %s",
                         dt_dtype_name(mx->dtype));
    if (mw->dtype != mx->dtype || (mb && mb->dtype != mx->dtype))
        return dt__error(
            DT_EOP, "conv2d(): Input type (%s), weight type (%s) and bias type (%s) should be the same",
            dt_dtype_name(mx->dtype), dt_dtype_name(mw->dtype), mb ? dt_dtype_name(mb->dtype) : "none");
    return DT_OK;
}

/* The result's meta: x's with cout channels and each spatial size after the
 * kernel; an error where the kernel is larger than the padded input. */
static dt_status conv_out(const dt__meta *mx, const dt__meta *mw, const int64_t *stride,
                          const int64_t *padding, const int64_t *dilation, dt_conv_padding padding_mode,
                          dt__meta *out) {
    int b = mx->ndim == 4 ? 1 : 0;
    *out = *mx;
    out->shape[b] = mw->shape[0];
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
            if (padded < eff)
                return dt__error(DT_EOP,
                                 "conv2d(): Calculated padded input size per channel: (%lld). Kernel size: "
                                 "(%lld). Kernel size can't be greater than actual input size",
                                 (long long)padded, (long long)eff);
        }
        out->shape[b + 1 + i] = o;
    }
    return DT_OK;
}

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
    dt__meta out;
    if (check_conv_params(stride, padding, dilation, groups, padding_mode) != DT_OK ||
        check_conv_operands(mx, mw, mb, groups) != DT_OK ||
        conv_out(mx, mw, stride, padding, dilation, padding_mode, &out) != DT_OK)
        return NULL;
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
    int linear = !bias;
    return dt__nn_submit(DT_OP_CONV2D, "conv2d", ins, bias ? 3 : 2, &out, &a, linear);
}
