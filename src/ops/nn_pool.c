/*
 * The nn functional family, part 3: 2-D pooling (max_pool2d, avg_pool2d,
 * adaptive_avg_pool2d, adaptive_max_pool2d). One node op, DT_OP_POOL2D,
 * whose sub code is the kernel's DT_KPOOL_* (backend.h); placements and
 * lowering are the family's engine (nn_int.h, nn.c).
 *
 * Validation repeats ATen's checks in ATen's order (max_pool2d_with_indices
 * and avg_pool2d meta functions: pooling_output_shape for H then W, then
 * pool2d_shape_check; the adaptive ops' own checks), so a bad call fails at
 * the call with the exception torch would raise, and the dtype (checked by
 * ATen when it dispatches the kernel) comes last.
 *
 * Placements: a window never leaves its (n, c) plane, so shards of the dims
 * before the last two pass through and each device pools its own planes;
 * H and W must be whole. Average pooling is linear, so a Partial input of a
 * floating dtype stays Partial.
 *
 * Threads: the dt_* functions run on client threads; the rules are read by
 * the controller (dt__lower_nn) too and are static read-only data.
 */
#include <stdint.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/elementwise.h"
#include "ops/nn_int.h"
#include "ops/ops.h"

/* ------------------------------------------------------------- rules */

/* Kernel op names by DT_KPOOL_* sub code, for kernel error messages. */
static const char *const pool_names[DT_KPOOL_COUNT] = {
    [DT_KPOOL_MAX] = "max_pool2d",
    [DT_KPOOL_MAX_WI] = "max_pool2d",
    [DT_KPOOL_MAX_WI_INDICES] = "max_pool2d",
    [DT_KPOOL_AVG] = "avg_pool2d",
    [DT_KPOOL_ADAPTIVE_AVG] = "adaptive_avg_pool2d",
    [DT_KPOOL_ADAPTIVE_MAX] = "adaptive_max_pool2d",
    [DT_KPOOL_ADAPTIVE_MAX_INDICES] = "adaptive_max_pool2d",
};

/* The spatial dims are the last two; everything before them is a batch of
 * independent planes. */
static int row_pool(const nn_ctx *c, int j, int d, int *od) {
    (void)j;
    *od = d;
    return d < c->in[0]->ndim - 2 ? NN_ROW_KEEP : NN_ROW_OP;
}

static const dt__ps_row pool_rows[] = DT__PS_ROWS(NN_POOL_ROWS);
static const uint32_t pool_partial[] = DT__PS_MASKS(P);
/* The rule's text: max pooling takes no Partial (the registry rows split it). */
#define POOL_TEXT NN_TEXT("R->R", NN_POOL_ROWS, P) "; P only for average pooling of floating dtypes"

static void needed_pool(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                        int64_t *s, int64_t *l) {
    (void)j, (void)coord;
    dt__nn_full(c->in[0], s, l);
    for (int d = 0; d < c->in[0]->ndim - 2; d++) {
        s[d] = os[d];
        l[d] = ol[d];
    }
}

const nn_rules dt__nn_rules_pool2d = {
    .kop = DT_K_POOL2D,
    .accepted = POOL_TEXT,
    .sub_names = pool_names,
    .rows = pool_rows,
    .shard_row = row_pool,
    .partial = pool_partial,
    .needed = needed_pool,
};

/* ----------------------------------------------------------- helpers */

/* Writes "[2, 0, 4, 4]" into sb (torch's IntArrayRef printing). */
static void format_shape(dt__strbuf *sb, const dt__meta *m) {
    dt__sb_printf(sb, "[");
    for (int d = 0; d < m->ndim; d++)
        dt__sb_printf(sb, "%s%lld", d ? ", " : "", (long long)m->shape[d]);
    dt__sb_printf(sb, "]");
}

/* ATen's div_rtn: integer division rounding towards negative infinity. */
static int64_t div_rtn(int64_t x, int64_t y) {
    int64_t q = x / y, r = x % y;
    if (r != 0 && ((r < 0) != (y < 0)))
        --q;
    return q;
}

/* Arguments beyond this are rejected so that the shape arithmetic below
 * cannot overflow (ATen's int64 arithmetic would wrap instead). */
#define POOL_ARG_MAX ((int64_t)1 << 31)

static dt_status check_range(const char *op, const char *what, const int64_t *v) {
    for (int i = 0; i < 2; i++)
        if (v[i] > POOL_ARG_MAX || v[i] < -POOL_ARG_MAX)
            return dt__error(DT_EOP, "%s(): %s %lld is out of range", op, what, (long long)v[i]);
    return DT_OK;
}

/* ATen's pooling_output_shape for one spatial dim, with its checks. */
static dt_status pool_out(const char *op, int64_t in, int64_t k, int64_t pad, int64_t s, int64_t dil,
                          int ceil, int64_t *out) {
    if (s == 0)
        return dt__error(DT_EOP, "%s(): stride should not be zero", op);
    if (pad < 0)
        return dt__error(DT_EOP, "%s(): pad must be non-negative, but got pad: %lld", op, (long long)pad);
    if (pad > ((k - 1) * dil + 1) / 2)
        return dt__error(DT_EOP,
                         "%s(): pad should be at most half of effective kernel size, but got pad=%lld, "
                         "kernel_size=%lld and dilation=%lld",
                         op, (long long)pad, (long long)k, (long long)dil);
    int64_t o = div_rtn(in + 2 * pad - dil * (k - 1) - 1 + (ceil ? s - 1 : 0), s) + 1;
    /* The last window must start inside the input or the left padding. */
    if (ceil && (o - 1) * s >= in + pad)
        --o;
    *out = o;
    return DT_OK;
}

/* The parts of ATen's pool2d_shape_check that pooling_output_shape leaves. */
static dt_status pool_shape_check(const char *op, const dt__meta *m, const int64_t *k, const int64_t *s,
                                  const int64_t *pad, const int64_t *dil, const int64_t *o) {
    if (k[0] <= 0 || k[1] <= 0)
        return dt__error(DT_EOP, "%s(): kernel size should be greater than zero, but got kH: %lld kW: %lld",
                         op, (long long)k[0], (long long)k[1]);
    if (s[0] <= 0 || s[1] <= 0)
        return dt__error(DT_EOP, "%s(): stride should be greater than zero, but got dH: %lld dW: %lld", op,
                         (long long)s[0], (long long)s[1]);
    if (dil[0] <= 0 || dil[1] <= 0)
        return dt__error(
            DT_EOP, "%s(): dilation should be greater than zero, but got dilationH: %lld dilationW: %lld", op,
            (long long)dil[0], (long long)dil[1]);
    const int64_t *sh = m->shape;
    int valid = (m->ndim == 3 && sh[0] != 0 && sh[1] != 0 && sh[2] != 0) ||
                (m->ndim == 4 && sh[1] != 0 && sh[2] != 0 && sh[3] != 0);
    if (!valid) {
        dt__strbuf sb;
        dt__sb_init(&sb);
        format_shape(&sb, m);
        return dt__error(
            DT_EOP,
            "%s(): Expected 3D or 4D (batch mode) tensor with optional 0 dim batch size for input, "
            "but got:%s",
            op, sb.buf);
    }
    if (k[1] / 2 < pad[1] || k[0] / 2 < pad[0])
        return dt__error(
            DT_EOP,
            "%s(): pad should be smaller than or equal to half of kernel size, but got padW = %lld, "
            "padH = %lld, kW = %lld, kH = %lld",
            op, (long long)pad[1], (long long)pad[0], (long long)k[1], (long long)k[0]);
    if (o[0] < 1 || o[1] < 1) {
        int nd = m->ndim;
        return dt__error(
            DT_EOP,
            "%s(): Given input size: (%lldx%lldx%lld). Calculated output size: (%lldx%lldx%lld). "
            "Output size is too small",
            op, (long long)sh[nd - 3], (long long)sh[nd - 2], (long long)sh[nd - 1], (long long)sh[nd - 3],
            (long long)o[0], (long long)o[1]);
    }
    return DT_OK;
}

/* Shape of a windowed pooling (max or avg): validates and fills out. */
static dt_status windowed(const char *op, const dt__meta *m, const int64_t *k, const int64_t *s,
                          const int64_t *pad, const int64_t *dil, int ceil, dt__meta *out) {
    if (check_range(op, "kernel_size", k) != DT_OK || check_range(op, "stride", s) != DT_OK ||
        check_range(op, "padding", pad) != DT_OK || check_range(op, "dilation", dil) != DT_OK)
        return DT_EOP;
    int nd = m->ndim;
    int64_t o[2];
    for (int i = 0; i < 2; i++)
        if (pool_out(op, m->shape[nd - 2 + i], k[i], pad[i], s[i], dil[i], ceil, &o[i]) != DT_OK)
            return DT_EOP;
    if (pool_shape_check(op, m, k, s, pad, dil, o) != DT_OK)
        return DT_EOP;
    *out = *m;
    out->shape[nd - 2] = o[0];
    out->shape[nd - 1] = o[1];
    return DT_OK;
}

static void store_window(dt__nattr *a, const int64_t *k, const int64_t *s, const int64_t *pad,
                         const int64_t *dil, int ceil) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < 2; i++) {
        a->ints[i] = k[i];
        a->ints[2 + i] = s[i];
        a->ints[4 + i] = pad[i];
        a->ints[6 + i] = dil[i];
    }
    a->flags = ceil ? DT_KPOOL_CEIL : 0;
}

static dt_status unsupported(const char *op, dt_dtype d) {
    return dt__error(DT_EUNSUPPORTED, "%s(): \"%s\" not implemented for '%s'", op, op, dt__ew_torch_name(d));
}

/* Records the values node and, when `indices` is wanted, the indices node
 * (one node per output, as max(dim) and sort do: both run the same ATen
 * call on the same data). */
static dt_status two_outputs(const char *op, dt_tensor *x, const dt__meta *out, dt__nattr *a, int sub_values,
                             int sub_indices, dt_tensor **values, dt_tensor **indices) {
    dt__meta mv = *out, mi = *out;
    a->sub = sub_values;
    dt_tensor *v = dt__nn_submit(DT_OP_POOL2D, op, &x, 1, &mv, a, 0);
    if (!v)
        return dt_last_status();
    if (indices) {
        mi.dtype = DT_INT64;
        a->sub = sub_indices;
        dt_tensor *i = dt__nn_submit(DT_OP_POOL2D, op, &x, 1, &mi, a, 0);
        if (!i) {
            dt_status st = dt_last_status();
            dt_tensor_release(v);
            return st;
        }
        *indices = i;
    }
    *values = v;
    return DT_OK;
}

/* Common argument checks of the two-output entries. */
static dt_status begin_two(const char *op, dt_tensor *x, const void *arg, dt_tensor **values,
                           dt_tensor **indices) {
    if (values)
        *values = NULL;
    if (indices)
        *indices = NULL;
    if (!values)
        return dt__error(DT_EINVAL, "%s(): the values out-parameter is NULL", op);
    if (!arg)
        return dt__error(DT_EINVAL, "%s(): a size argument is NULL", op);
    return dt__nn_need(op, "input", x);
}

/* ----------------------------------------------------------- entries */

dt_status dt_max_pool2d(dt_tensor *x, const int64_t *kernel_size, const int64_t *stride,
                        const int64_t *padding, const int64_t *dilation, int ceil_mode, dt_tensor **values,
                        dt_tensor **indices) {
    dt_clear_error();
    const char *op = "max_pool2d";
    dt_status st = begin_two(op, x, kernel_size && padding && dilation ? kernel_size : NULL, values, indices);
    if (st != DT_OK)
        return st;
    const dt__meta *m = &x->v->meta;
    if (m->ndim != 3 && m->ndim != 4)
        return dt__error(DT_EOP, "%s(): non-empty 3D or 4D (batch mode) tensor expected for input", op);
    const int64_t *s = stride ? stride : kernel_size;
    dt__meta out;
    if (windowed(op, m, kernel_size, s, padding, dilation, ceil_mode, &out) != DT_OK)
        return DT_EOP;
    if (m->dtype == DT_BOOL)
        return unsupported(op, m->dtype);
    dt__nattr a;
    store_window(&a, kernel_size, s, padding, dilation, ceil_mode);
    if (!indices)
        return two_outputs(op, x, &out, &a, DT_KPOOL_MAX, 0, values, NULL);
    return two_outputs(op, x, &out, &a, DT_KPOOL_MAX_WI, DT_KPOOL_MAX_WI_INDICES, values, indices);
}

dt_tensor *dt_avg_pool2d(dt_tensor *x, const int64_t *kernel_size, const int64_t *stride,
                         const int64_t *padding, int ceil_mode, int count_include_pad,
                         const int64_t *divisor_override) {
    dt_clear_error();
    const char *op = "avg_pool2d";
    if (dt__nn_need(op, "input", x) != DT_OK)
        return NULL;
    if (!kernel_size || !padding) {
        dt__error(DT_EINVAL, "%s(): kernel_size and padding need 2 entries each", op);
        return NULL;
    }
    if (divisor_override && *divisor_override == 0) {
        dt__error(DT_EOP, "%s(): divisor must be not zero", op);
        return NULL;
    }
    const dt__meta *m = &x->v->meta;
    /* ATen reads the plane count as size(-3) before any other check. */
    if (m->ndim < 3) {
        if (m->ndim == 0)
            dt__error(DT_EINDEX, "%s(): Dimension specified as -3 but tensor has no dimensions", op);
        else
            dt__error(DT_EINDEX,
                      "%s(): Dimension out of range (expected to be in range of [%d, %d], but got -3)", op,
                      -m->ndim, m->ndim - 1);
        return NULL;
    }
    const int64_t *s = stride ? stride : kernel_size;
    const int64_t one[2] = {1, 1};
    dt__meta out;
    if (windowed(op, m, kernel_size, s, padding, one, ceil_mode, &out) != DT_OK)
        return NULL;
    if (!dt_dtype_is_floating(m->dtype) && m->dtype != DT_INT64) {
        unsupported(op, m->dtype);
        return NULL;
    }
    dt__nattr a;
    store_window(&a, kernel_size, s, padding, one, ceil_mode);
    a.sub = DT_KPOOL_AVG;
    if (count_include_pad)
        a.flags |= DT_KPOOL_COUNT_PAD;
    if (divisor_override) {
        a.flags |= DT_KPOOL_DIVISOR;
        a.ints[8] = *divisor_override;
    }
    /* Linear for floats; an integer average truncates each part. */
    int linear = dt_dtype_is_floating(m->dtype);
    return dt__nn_submit(DT_OP_POOL2D, op, &x, 1, &out, &a, linear);
}

dt_tensor *dt_adaptive_avg_pool2d(dt_tensor *x, const int64_t *output_size) {
    dt_clear_error();
    const char *op = "adaptive_avg_pool2d";
    if (dt__nn_need(op, "input", x) != DT_OK)
        return NULL;
    if (!output_size) {
        dt__error(DT_EINVAL, "%s(): output_size needs 2 entries", op);
        return NULL;
    }
    const int64_t *os = output_size;
    if (os[0] < 0 || os[1] < 0) {
        dt__error(
            DT_EOP,
            "%s(): elements of output_size must be greater than or equal to 0 but received {%lld, %lld}", op,
            (long long)os[0], (long long)os[1]);
        return NULL;
    }
    const dt__meta *m = &x->v->meta;
    dt__strbuf sb;
    dt__sb_init(&sb);
    format_shape(&sb, m);
    if (os[0] == 1 && os[1] == 1) {
        /* ATen's adaptive_avg_pool2d is input.mean({-1, -2}, keepdim=true)
         * here, with mean's checks. */
        if (!dt_dtype_is_floating(m->dtype)) {
            dt__error(
                DT_EOP,
                "%s(): mean(): could not infer output dtype. Input dtype must be either a floating point or "
                "complex dtype. Got: %s",
                op, dt__ew_torch_name(m->dtype));
            return NULL;
        }
        if (m->ndim < 2) {
            dt__error(DT_EINDEX,
                      "%s(): Dimension out of range (expected to be in range of [-1, 0], but got -2)", op);
            return NULL;
        }
    } else {
        if (m->ndim != 3 && m->ndim != 4) {
            dt__error(DT_EOP, "%s(): Expected 3D or 4D tensor, but got %s", op, sb.buf);
            return NULL;
        }
        for (int d = m->ndim - 2; d < m->ndim; d++)
            if (m->shape[d] <= 0) {
                dt__error(
                    DT_EOP,
                    "%s(): Expected input to have non-zero size for non-batch dimensions, but input has "
                    "sizes %s with dimension %d being empty",
                    op, sb.buf, d);
                return NULL;
            }
        if (!dt_dtype_is_floating(m->dtype)) {
            unsupported(op, m->dtype);
            return NULL;
        }
    }
    dt__meta out = *m;
    out.shape[m->ndim - 2] = os[0];
    out.shape[m->ndim - 1] = os[1];
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.sub = DT_KPOOL_ADAPTIVE_AVG;
    a.ints[0] = os[0];
    a.ints[1] = os[1];
    return dt__nn_submit(DT_OP_POOL2D, op, &x, 1, &out, &a, 1);
}

dt_status dt_adaptive_max_pool2d(dt_tensor *x, const int64_t *output_size, dt_tensor **values,
                                 dt_tensor **indices) {
    dt_clear_error();
    const char *op = "adaptive_max_pool2d";
    dt_status st = begin_two(op, x, output_size, values, indices);
    if (st != DT_OK)
        return st;
    const dt__meta *m = &x->v->meta;
    dt__strbuf sb;
    dt__sb_init(&sb);
    format_shape(&sb, m);
    if (m->ndim != 3 && m->ndim != 4)
        return dt__error(DT_EOP, "%s(): Expected 3D or 4D tensor, but got: %s", op, sb.buf);
    for (int d = 1; d < m->ndim; d++)
        if (m->shape[d] <= 0)
            return dt__error(
                DT_EOP,
                "%s(): Expected input to have non-zero size for non-batch dimensions, but input has "
                "sizes %s with dimension %d being empty",
                op, sb.buf, d);
    dt__meta out = *m;
    out.shape[m->ndim - 2] = output_size[0];
    out.shape[m->ndim - 1] = output_size[1];
    if (output_size[0] < 0 || output_size[1] < 0) {
        dt__sb_init(&sb);
        format_shape(&sb, &out);
        return dt__error(DT_EOP, "%s(): Trying to create tensor with negative dimension %lld: %s", op,
                         (long long)(output_size[0] < 0 ? output_size[0] : output_size[1]), sb.buf);
    }
    if (!dt_dtype_is_floating(m->dtype))
        return unsupported(op, m->dtype);
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.ints[0] = output_size[0];
    a.ints[1] = output_size[1];
    return two_outputs(op, x, &out, &a, DT_KPOOL_ADAPTIVE_MAX, DT_KPOOL_ADAPTIVE_MAX_INDICES, values,
                       indices);
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_pool[] = {
    {"max_pool2d", "nn", NN_TEXT("R->R", NN_POOL_ROWS, NONE), 0},
    {"avg_pool2d", "nn", NN_TEXT("R->R", NN_POOL_ROWS, P) " (floating dtypes: pooling is linear)", 0},
    {"adaptive_avg_pool2d", "nn", NN_TEXT("R->R", NN_POOL_ROWS, P) " (pooling is linear)", 0},
    {"adaptive_max_pool2d", "nn", NN_TEXT("R->R", NN_POOL_ROWS, NONE), 0},
    {NULL, NULL, NULL, 0},
};
