/*
 * Elementwise ops, part 2: unary math (dt_unary, dt_neg, dt_round), casts
 * (dt_cast), and the selection ops where, masked_fill and clamp. The shared
 * planner and the lowering are in elementwise.c (see elementwise.h).
 *
 * Placements per mesh dim: unary ops and casts keep R and S(d). Partial
 * passes only through NEG, the one linear unary op; every other unary op
 * and every cast rejects it (a cast rounds each part, and the rounded parts
 * need not sum to the rounded sum). where, masked_fill and clamp follow the
 * "broadcast S/R" rule over their tensor inputs and reject Partial.
 *
 * Threads: every function here runs on client threads.
 */
#include <string.h>

#include "core/client/tensor.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/elementwise.h"

#define P_ DT_PLACEMENT_PARTIAL

/* How a unary op types its result (the `result` column of dtorch_ops.def). */
enum {
    U_KEEP,        /* same dtype, bool included */
    U_KEEP_NOBOOL, /* same dtype; bool rejected */
    U_FLOAT,       /* integer and bool inputs give the default float dtype */
    U_BOOL,        /* always bool */
    U_SQUARE,      /* same dtype; bool -> int64 */
    U_BITWISE      /* integers and bool only; same dtype */
};

static const struct {
    const char *name;
    int kind;
    const char *bool_kernel; /* torch's kernel name in its "not implemented for 'Bool'" error */
    uint32_t partial[2];     /* the placement sets (core/client/placement.h) */
    const char *accepted;
} unary_ops[DT_UNARY_COUNT] = {
#define DT_UNARY_OP(E, name, result, bool_kernel, into, py, partial, row)                                    \
    [DT_UNARY_##                                                                                             \
        E] = {#name, U_##result, bool_kernel, DT__PS_MASKS(partial), DT__PS_SHARDS_1 DT__PS_TEXT(partial)},
#include "dtorch/dtorch_ops.def"
};

const char *dt__ew_unary_name(int sub) {
    return sub >= 0 && sub < DT_UNARY_COUNT ? unary_ops[sub].name : "unary";
}

static dt_status unary_dtype(int op, dt_dtype in, dt_dtype *out) {
    const char *name = unary_ops[op].name;
    switch (unary_ops[op].kind) {
    case U_KEEP_NOBOOL:
        if (in != DT_BOOL)
            break;
        if (op == DT_UNARY_NEG)
            return dt__error(DT_EOP,
                             "neg: negation, the `-` operator, on a bool tensor is not supported; use ~ or "
                             "logical_not instead");
        if (op == DT_UNARY_RELU)
            return dt__error(DT_EOP, "relu: Boolean inputs not supported for relu");
        return dt__error(DT_EUNSUPPORTED, "%s: \"%s\" not implemented for 'Bool'", name,
                         unary_ops[op].bool_kernel);
    case U_FLOAT:
        *out = dt_dtype_is_floating(in) ? in : dt_get_default_dtype();
        return DT_OK;
    case U_BOOL:
        *out = DT_BOOL;
        return DT_OK;
    case U_SQUARE:
        *out = in == DT_BOOL ? DT_INT64 : in;
        return DT_OK;
    case U_BITWISE:
        if (dt_dtype_is_floating(in))
            return dt__error(DT_EUNSUPPORTED, "bitwise_not: \"bitwise_not_cpu\" not implemented for '%s'",
                             dt__ew_torch_name(in));
        break;
    default:
        break;
    }
    *out = in;
    return DT_OK;
}

static dt_tensor *unary_call(dt_unary_op op, dt_tensor *a, int64_t decimals, int flags) {
    dt_clear_error();
    if ((unsigned)op >= DT_UNARY_COUNT) {
        dt__error(DT_EINVAL, "unary: unknown op %d", (int)op);
        return NULL;
    }
    const char *name = unary_ops[op].name;
    dt__ew e = {.name = name, .op = DT_OP_UNARY, .nin = 1, .in = {a}};
    if (dt__ew_shape(&e) != DT_OK)
        return NULL;
    if (op == DT_UNARY_ROUND && decimals != 0 && !dt_dtype_is_floating(a->v->meta.dtype)) {
        /* round.decimals has no integer shortcut: its kernel is float-only. */
        dt__error(DT_EUNSUPPORTED, "round: \"round_cpu\" not implemented for '%s'",
                  dt__ew_torch_name(a->v->meta.dtype));
        return NULL;
    }
    if (unary_dtype(op, a->v->meta.dtype, &e.out.dtype) != DT_OK)
        return NULL;
    e.attr.sub = op;
    e.attr.scalar = dt_scalar_int(decimals);
    e.attr.scalar2 = dt_scalar_int(1);
    if (dt__ew_placements(&e, unary_ops[op].accepted, unary_ops[op].partial) != DT_OK)
        return NULL;
    return dt__ew_submit(&e, flags);
}

dt_tensor *dt_unary(dt_unary_op op, dt_tensor *a) { return unary_call(op, a, 0, 0); }
dt_tensor *dt_unary_ex(dt_unary_op op, dt_tensor *a, int flags) { return unary_call(op, a, 0, flags); }
dt_tensor *dt_round(dt_tensor *a, int64_t decimals, int flags) {
    return unary_call(DT_UNARY_ROUND, a, decimals, flags);
}
dt_tensor *dt_neg(dt_tensor *a) { return unary_call(DT_UNARY_NEG, a, 0, 0); }

/* ------------------------------------------------------------ casts */

dt_tensor *dt_cast(dt_tensor *a, dt_dtype dtype) {
    dt_clear_error();
    if ((unsigned)dtype >= DT_DTYPE_COUNT) {
        dt__error(DT_ETYPE, "to: unknown dtype %d", (int)dtype);
        return NULL;
    }
    dt__ew e = {.name = "to", .op = DT_OP_CAST, .nin = 1, .in = {a}};
    if (dt__ew_shape(&e) != DT_OK)
        return NULL;
    if (a->v->meta.dtype == dtype) {
        /* torch's x.to(x.dtype) is x itself. */
        dt_tensor_retain(a);
        return a;
    }
    e.out.dtype = dtype;
    e.attr.scalar2 = dt_scalar_int(1);
    if (dt__ew_placements(
            &e,
            "R->R, S(d)->S(d); no Partial: a cast rounds each part, and the rounded parts need not "
            "sum to the rounded sum",
            NULL) != DT_OK)
        return NULL;
    return dt__ew_submit(&e, 0);
}

/* ------------------------------------------------------------ selection */

#define ACCEPTS_BROADCAST "R on every input -> R; S(d) on any inputs with the others R -> S(d); no Partial"

static int scalar_ok(const char *name, dt_scalar s) {
    if (s.kind == DT_SCALAR_BOOL || s.kind == DT_SCALAR_INT || s.kind == DT_SCALAR_FLOAT)
        return 1;
    dt__error(DT_ETYPE, "%s: unknown scalar kind %d", name, s.kind);
    return 0;
}

static int is_mask_dtype(dt_dtype d) { return d == DT_BOOL || d == DT_UINT8; }

/* The C++ type torch names in its "value cannot be converted" error. */
static const char *cpp_type(dt_dtype d) {
    static const char *const names[DT_DTYPE_COUNT] = {
        [DT_BOOL] = "bool",        [DT_UINT8] = "uint8_t",
        [DT_INT8] = "int8_t",      [DT_INT16] = "int16_t",
        [DT_INT32] = "int",        [DT_INT64] = "int64_t",
        [DT_FLOAT16] = "at::Half", [DT_BFLOAT16] = "at::BFloat16",
        [DT_FLOAT32] = "float",    [DT_FLOAT64] = "double",
    };
    return (unsigned)d < DT_DTYPE_COUNT ? names[d] : "invalid";
}

dt_tensor *dt_where(dt_tensor *cond, dt_tensor *a, dt_scalar sa, dt_tensor *b, dt_scalar sb) {
    dt_clear_error();
    if ((!a && !scalar_ok("where", sa)) || (!b && !scalar_ok("where", sb)))
        return NULL;
    dt__ew e = {.name = "where", .op = DT_OP_WHERE, .nin = 1, .in = {cond}};
    if (a)
        e.in[e.nin++] = a;
    if (b)
        e.in[e.nin++] = b;
    if (dt__ew_shape(&e) != DT_OK)
        return NULL;
    if (!is_mask_dtype(cond->v->meta.dtype)) {
        dt__error(DT_EOP, "where: expected condition to be a boolean tensor, but got a tensor with dtype %s",
                  dt__ew_torch_name(cond->v->meta.dtype));
        return NULL;
    }
    const dt__meta *ts[2];
    dt_scalar ss[2];
    int nt = 0, ns = 0;
    if (a)
        ts[nt++] = &a->v->meta;
    else
        ss[ns++] = sa;
    if (b)
        ts[nt++] = &b->v->meta;
    else
        ss[ns++] = sb;
    e.out.dtype = dt__result_type(ts, nt, ss, ns);
    e.attr.flags = (a ? 0 : DT_KF_EW_X_SCALAR) | (b ? 0 : DT_KF_EW_Y_SCALAR);
    e.attr.scalar = sa;
    e.attr.scalar2 = sb;
    if (dt__ew_placements(&e, ACCEPTS_BROADCAST, NULL) != DT_OK)
        return NULL;
    return dt__ew_submit(&e, 0);
}

dt_tensor *dt_masked_fill(dt_tensor *a, dt_tensor *mask, dt_tensor *value, dt_scalar s, int flags) {
    dt_clear_error();
    if (!value && !scalar_ok("masked_fill", s))
        return NULL;
    dt__ew e = {.name = "masked_fill", .op = DT_OP_MASKED_FILL, .nin = value ? 3 : 2, .in = {a, mask, value}};
    if (dt__ew_shape(&e) != DT_OK)
        return NULL;
    dt_dtype dtype = a->v->meta.dtype;
    if (!is_mask_dtype(mask->v->meta.dtype)) {
        dt__error(DT_EOP, "masked_fill: masked_fill_ only supports boolean masks, but got mask with dtype %s",
                  dt_dtype_name(mask->v->meta.dtype));
        return NULL;
    }
    if (value && value->v->meta.ndim != 0) {
        dt__error(
            DT_EOP,
            "masked_fill: masked_fill_ only supports a 0-dimensional value tensor, but got tensor with %d "
            "dimension(s).",
            value->v->meta.ndim);
        return NULL;
    }
    if (!value && !dt__ew_scalar_fits(s, dtype)) {
        dt__error(DT_EOP, "masked_fill: value cannot be converted to type %s without overflow",
                  cpp_type(dtype));
        return NULL;
    }
    e.out.dtype = dtype;
    e.attr.scalar = s;
    e.attr.scalar2 = dt_scalar_int(1);
    if (dt__ew_placements(&e, ACCEPTS_BROADCAST, NULL) != DT_OK)
        return NULL;
    return dt__ew_submit(&e, flags);
}

dt_tensor *dt_clamp(dt_tensor *a, dt_tensor *min_t, dt_scalar min_s, dt_tensor *max_t, dt_scalar max_s,
                    int flags) {
    dt_clear_error();
    int has_min = (flags & DT_CLAMP_MIN) != 0, has_max = (flags & DT_CLAMP_MAX) != 0;
    if (!has_min && !has_max) {
        dt__error(DT_EOP, "clamp: At least one of 'min' or 'max' must not be None");
        return NULL;
    }
    if ((has_min && !min_t && !scalar_ok("clamp", min_s)) ||
        (has_max && !max_t && !scalar_ok("clamp", max_s)))
        return NULL;
    dt__ew e = {.name = "clamp", .op = DT_OP_CLAMP, .nin = 1, .in = {a}};
    int kf = 0;
    const dt__meta *ts[3];
    dt_scalar ss[2];
    int nt = 0, ns = 0;
    if (has_min) {
        if (min_t) {
            e.in[e.nin++] = min_t;
            kf |= DT_KF_EW_MIN_TENSOR;
        } else {
            ss[ns++] = min_s;
            kf |= DT_KF_EW_MIN_SCALAR;
        }
    }
    if (has_max) {
        if (max_t) {
            e.in[e.nin++] = max_t;
            kf |= DT_KF_EW_MAX_TENSOR;
        } else {
            ss[ns++] = max_s;
            kf |= DT_KF_EW_MAX_SCALAR;
        }
    }
    if (dt__ew_shape(&e) != DT_OK)
        return NULL;
    for (int i = 0; i < e.nin; i++)
        ts[nt++] = &e.in[i]->v->meta;
    const dt__meta *ma = &a->v->meta;
    if (e.nin > 1) {
        /* torch's clamp.Tensor promotes over all operands. */
        e.out.dtype = dt__result_type(ts, nt, ss, ns);
    } else {
        /* clamp.Scalar: a floating input keeps its dtype; others promote
         * with the scalars, whose values must then fit (Scalar::to<T>). */
        e.out.dtype = dt_dtype_is_floating(ma->dtype) ? ma->dtype : dt__result_type(ts, nt, ss, ns);
        for (int i = 0; i < ns; i++)
            if (!dt__ew_scalar_fits(ss[i], e.out.dtype)) {
                dt__error(DT_EOP, "clamp: value cannot be converted to type %s without overflow",
                          cpp_type(e.out.dtype));
                return NULL;
            }
    }
    if (e.out.dtype == DT_BOOL && (ns > 0 || e.nin == 3)) {
        /* torch's clamp kernels take no bool; only a single tensor bound,
         * which clamp computes as maximum or minimum, works. A tensor bound
         * next to a number is torch's clamp.Scalar (the tensor is 0-d). */
        dt__error(DT_EUNSUPPORTED, "clamp: \"%s\" not implemented for 'Bool'",
                  ns == 1 && e.nin == 1 ? (has_min ? "clamp_min_scalar_cpu" : "clamp_max_scalar_cpu")
                  : ns > 0              ? "clamp_scalar_cpu"
                                        : "clamp_cpu");
        return NULL;
    }
    e.attr.flags = kf;
    e.attr.scalar = has_min && !min_t ? min_s : dt_scalar_int(0);
    e.attr.scalar2 = has_max && !max_t ? max_s : dt_scalar_int(0);
    if (dt__ew_placements(&e, ACCEPTS_BROADCAST, NULL) != DT_OK)
        return NULL;
    return dt__ew_submit(&e, flags);
}
