/*
 * Elementwise ops, part 1: the binary ops (add, sub with alpha; mul; div with
 * rounding modes; remainder, pow, maximum, minimum, comparisons, logical and
 * bitwise ops; tensor-tensor with broadcasting, tensor-scalar, scalar-tensor
 * and in-place forms), the planner both elementwise files share
 * (elementwise.h), the lowering of every elementwise node, and the family's
 * registry rows. Unary ops, casts, where, masked_fill and clamp are in
 * elementwise_unary.c.
 *
 * Placements, matched independently per mesh dim (PlacementSignature):
 *   "broadcast S/R": (R,..,R)->R; every Shard input shards the same
 *   broadcast output dim d and the others are Replicate -> S(d) (the
 *   Replicate side is sliced locally, no communication). A Shard of a size-1
 *   dim that broadcasts is rejected (the other devices would have nothing to
 *   broadcast). Partial only where the op is linear in that input: add/sub
 *   (P,P)->P, mul (P,R)->P and (R,P)->P, div (P,R)->P; with a scalar: mul,
 *   and div with the tensor as dividend. Every other binary op rejects P.
 *
 * Threads: the dt_* entries and the planner on client threads; the lower_*
 * functions on the controller.
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
#include "ops/ops.h"

static const char *const binary_names[DT_BINARY_COUNT] = {
#define DT_BINARY_OP(E, name, ...) [DT_BINARY_##E] = #name,
#include "dtorch/dtorch_ops.def"
};

/* How a binary op types its result (the `result` column of dtorch_ops.def). */
enum {
    B_KEEP,   /* the promoted dtype */
    B_FLOAT,  /* integer and bool give the default float dtype */
    B_BOOL,   /* always bool */
    B_INTDIV, /* the promoted dtype; bool rejected; an integer scalar divisor of 0 is an error */
    B_POW,    /* the promoted dtype; bool rejected but for a bool exponent; no negative integer powers */
    B_BITWISE /* integers and bool only */
};

static const struct {
    int result;
    const char *bool_kernel; /* torch's kernel name in its "not implemented for 'Bool'" error */
    int alpha;               /* the op takes alpha (its `call` column is ALPHA) */
} binary_ops[DT_BINARY_COUNT] = {
#define ALPHA_ALPHA 1
#define ALPHA_SCALAR 0
#define ALPHA_SCALAR2 0
#define ALPHA_TENSOR 0
#define ALPHA_CUSTOM 0
#define DT_BINARY_OP(E, name, tensors, scalar, row, note, result, bool_kernel, call, ...)                    \
    [DT_BINARY_##E] = {B_##result, bool_kernel, ALPHA_##call},
#include "dtorch/dtorch_ops.def"
};

/* Per binary op, from dtorch_ops.def through the placement sets
 * (core/client/placement.h): the Partial combinations it is linear in with two
 * tensors and with a scalar, and the accepted text of both forms. */
static const uint32_t binary_tensor_sets[DT_BINARY_COUNT][3] = {
#define DT_BINARY_OP(E, name, tensors, scalar, row, ...) [DT_BINARY_##E] = DT__PS_MASKS(tensors),
#include "dtorch/dtorch_ops.def"
};
static const uint32_t binary_scalar_sets[DT_BINARY_COUNT][2] = {
#define DT_BINARY_OP(E, name, tensors, scalar, row, ...) [DT_BINARY_##E] = DT__PS_MASKS(scalar),
#include "dtorch/dtorch_ops.def"
};
static const char *const binary_tensor_accepts[DT_BINARY_COUNT] = {
#define DT_BINARY_OP(E, name, tensors, scalar, row, ...)                                                     \
    [DT_BINARY_##E] = DT__PS_SHARDS_2 DT__PS_TEXT(tensors),
#include "dtorch/dtorch_ops.def"
};
static const char *const binary_scalar_accepts[DT_BINARY_COUNT] = {
#define DT_BINARY_OP(E, name, tensors, scalar, row, ...)                                                     \
    [DT_BINARY_##E] = DT__PS_SHARDS_1 DT__PS_TEXT(scalar),
#include "dtorch/dtorch_ops.def"
};
static const uint32_t no_partial[1] = {0};

#define R_ DT_PLACEMENT_REPLICATE
#define S_ DT_PLACEMENT_SHARD
#define P_ DT_PLACEMENT_PARTIAL

/* ------------------------------------------------------------ helpers */

const char *dt__ew_torch_name(dt_dtype d) {
    static const char *const names[DT_DTYPE_COUNT] = {
        [DT_BOOL] = "Bool",     [DT_UINT8] = "Byte",     [DT_INT8] = "Char",    [DT_INT16] = "Short",
        [DT_INT32] = "Int",     [DT_INT64] = "Long",     [DT_FLOAT16] = "Half", [DT_BFLOAT16] = "BFloat16",
        [DT_FLOAT32] = "Float", [DT_FLOAT64] = "Double",
    };
    return (unsigned)d < DT_DTYPE_COUNT ? names[d] : "invalid";
}

int dt__ew_can_cast(dt_dtype from, dt_dtype to) {
    if (dt_dtype_is_floating(from) && !dt_dtype_is_floating(to))
        return 0;
    if (from != DT_BOOL && to == DT_BOOL)
        return 0;
    return 1;
}

/* c10's overflows<To, From>() for the From a Scalar holds (int64_t, double
 * or bool); the limits of each dtorch dtype. */
int dt__ew_scalar_fits(dt_scalar s, dt_dtype d) {
    static const double lo[DT_DTYPE_COUNT] = {
        [DT_UINT8] = 0,
        [DT_INT8] = -128,
        [DT_INT16] = -32768,
        [DT_INT32] = -2147483648.0,
        [DT_INT64] = -9223372036854775808.0,
        [DT_FLOAT16] = -65504.0,
        [DT_BFLOAT16] = -3.3895313892515355e38,
        [DT_FLOAT32] = -3.4028234663852886e38,
        [DT_FLOAT64] = -1.7976931348623157e308,
    };
    static const double hi[DT_DTYPE_COUNT] = {
        [DT_UINT8] = 255,
        [DT_INT8] = 127,
        [DT_INT16] = 32767,
        [DT_INT32] = 2147483647.0,
        [DT_INT64] = 9223372036854775807.0,
        [DT_FLOAT16] = 65504.0,
        [DT_BFLOAT16] = 3.3895313892515355e38,
        [DT_FLOAT32] = 3.4028234663852886e38,
        [DT_FLOAT64] = 1.7976931348623157e308,
    };
    if (d == DT_BOOL || s.kind == DT_SCALAR_BOOL)
        return 1;
    if (s.kind == DT_SCALAR_FLOAT) {
        /* inf and NaN only exist in floating dtypes. */
        if (isinf(s.f) || isnan(s.f))
            return dt_dtype_is_floating(d);
        return !(s.f < lo[d] || s.f > hi[d]);
    }
    /* Integers: unsigned targets let negative values wrap (two's complement),
     * as long as their magnitude fits. */
    if (d == DT_UINT8)
        return s.i <= 255 && (s.i >= 0 || -s.i <= 255);
    if (d == DT_INT64 || dt_dtype_is_floating(d))
        return (double)s.i >= lo[d] && (double)s.i <= hi[d];
    return s.i >= (int64_t)lo[d] && s.i <= (int64_t)hi[d];
}

static void format_shape(dt__strbuf *sb, int ndim, const int64_t *shape) {
    dt__sb_printf(sb, "[");
    for (int d = 0; d < ndim; d++)
        dt__sb_printf(sb, d ? ", %lld" : "%lld", (long long)shape[d]);
    dt__sb_printf(sb, "]");
}

/* ------------------------------------------------------------ planner */

dt_status dt__ew_shape(dt__ew *e) {
    dt_status st = dt__check_operands(e->name, e->in, e->nin);
    if (st != DT_OK)
        return st;
    dt__meta *out = &e->out;
    const dt__meta *m0 = &e->in[0]->v->meta;
    /* The common case, inputs of one shape (or one input): that shape. */
    int same = 1;
    for (int i = 1; i < e->nin && same; i++) {
        const dt__meta *m = &e->in[i]->v->meta;
        same = m->ndim == m0->ndim && memcmp(m->shape, m0->shape, (size_t)m0->ndim * sizeof *m0->shape) == 0;
    }
    if (same) {
        memset(out, 0, sizeof *out);
        out->ndim = m0->ndim;
        memcpy(out->shape, m0->shape, (size_t)m0->ndim * sizeof *m0->shape);
        out->mesh = m0->mesh;
        return DT_OK;
    }
    memset(out, 0, sizeof *out);
    out->mesh = m0->mesh;
    /* torch broadcasts pairwise from the left: the running shape is "a". */
    for (int i = 0; i < e->nin; i++) {
        const dt__meta *m = &e->in[i]->v->meta;
        int nd = out->ndim > m->ndim ? out->ndim : m->ndim;
        int64_t shape[DT_MAX_NDIM];
        for (int d = 0; d < nd; d++) {
            int da = d - (nd - out->ndim), db = d - (nd - m->ndim);
            int64_t sa = da >= 0 ? out->shape[da] : 1, sb = db >= 0 ? m->shape[db] : 1;
            if (sa != sb && sa != 1 && sb != 1)
                return dt__error(DT_ESHAPE,
                                 "%s: the size of tensor a (%lld) must match the size of tensor b (%lld) at "
                                 "non-singleton dimension %d",
                                 e->name, (long long)sa, (long long)sb, d);
            shape[d] = sa == 1 ? sb : sa;
        }
        out->ndim = nd;
        memcpy(out->shape, shape, sizeof shape);
    }
    return DT_OK;
}

/* The region of input `in` that output region (ostart, olen) needs: a dim
 * that broadcasts (size 1 against a larger output) needs its one element,
 * every other dim the output's range. */
static void needed_region(const dt__meta *in, const dt__meta *out, const int64_t *ostart, const int64_t *olen,
                          int64_t *start, int64_t *len) {
    int off = out->ndim - in->ndim;
    for (int d = 0; d < in->ndim; d++) {
        if (in->shape[d] == 1 && out->shape[d + off] != 1) {
            start[d] = 0;
            len[d] = 1;
        } else {
            start[d] = ostart[d + off];
            len[d] = olen[d + off];
        }
    }
}

static void ew_needed(const dt__pctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                      int64_t *s, int64_t *l) {
    (void)coord;
    needed_region(c->in[j], c->out, os, ol, s, l);
}

dt_status dt__ew_placements(dt__ew *e, const char *accepted, const uint32_t *partial) {
    dt__pctx c = {.op = e->op, .nin = e->nin, .out = &e->out};
    for (int i = 0; i < e->nin; i++)
        c.in[i] = &e->in[i]->v->meta;
    const dt__psig sig = {
        .shard_map = dt__ps_broadcast_map, .needed = ew_needed, .partial = partial, .accepted = accepted};
    int i;
    if (dt__ps_apply(e->name, &sig, &c, 0, e->out.pl, &i) == DT_OK)
        return DT_OK;
    if (i < 0)
        return DT_EPLACEMENT;
    /* Nested shards that do not line up. The fix: give input i the output's
     * placements (its dims that broadcast stay Replicate); then its regions
     * are the output's. */
    const dt__meta *out = &e->out, *in = c.in[i];
    dt_placement fix[DT_MAX_MESH_NDIM];
    int off = out->ndim - in->ndim;
    for (int md = 0; md < out->mesh->ndim; md++) {
        dt_placement p = out->pl[md];
        int id = p.dim - off;
        fix[md] = p.kind == S_ && id >= 0 && in->shape[id] == out->shape[p.dim] ? (dt_placement){S_, id}
                                                                                : (dt_placement){R_, 0};
    }
    dt__placement_error(e->name, c.in, c.nin, 0, accepted, i, fix);
    dt__error_append(" (nested shards do not line up)");
    return DT_EPLACEMENT;
}

/* The node of a planned call (node op, inputs, output layout, attributes);
 * returns the output symbol. */
static dt_tensor *submit_planned(int node_op, int nin, dt_tensor *const *in, const dt__meta *out,
                                 dt__ew_attr attr) {
    dt_tensor *t = dt__tensor_new(in[0]->graph, out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new_prefix(node_op, DT__NODE_COMMON_BYTES);
    if (n) {
        n->n_in = nin;
        for (int i = 0; i < nin; i++)
            n->in[i] = in[i]->v;
        n->out = t->v;
        n->a.sub = attr.sub;
        n->a.flags = attr.flags;
        n->a.scalar = attr.scalar;
        n->a.scalar2 = attr.scalar2;
    }
    return dt__client_submit(t, n);
}

static dt_tensor *submit_node(dt__ew *e) { return submit_planned(e->op, e->nin, e->in, &e->out, e->attr); }

dt_tensor *dt__ew_submit(dt__ew *e, int flags) {
    if (!(flags & DT_EW_INPLACE))
        return submit_node(e);
    /* torch's in-place rules, checked before anything is enqueued. */
    const dt__meta *self = &e->in[0]->v->meta;
    int same = self->ndim == e->out.ndim;
    for (int d = 0; same && d < self->ndim; d++)
        same = self->shape[d] == e->out.shape[d];
    if (!same) {
        dt__strbuf a, b;
        dt__sb_init(&a);
        dt__sb_init(&b);
        format_shape(&a, self->ndim, self->shape);
        format_shape(&b, e->out.ndim, e->out.shape);
        dt__error(DT_EOP, "%s_: output with shape %s doesn't match the broadcast shape %s", e->name, a.buf,
                  b.buf);
        return NULL;
    }
    if (!dt__ew_can_cast(e->out.dtype, self->dtype)) {
        dt__error(DT_EOP, "%s_: result type %s can't be cast to the desired output type %s", e->name,
                  dt__ew_torch_name(e->out.dtype), dt__ew_torch_name(self->dtype));
        return NULL;
    }
    int cast = e->out.dtype != self->dtype;
    if (cast) {
        for (int md = 0; md < e->out.mesh->ndim; md++) {
            if (e->out.pl[md].kind == P_) {
                dt_placement fix[DT_MAX_MESH_NDIM];
                memcpy(fix, self->pl, sizeof fix);
                fix[md] = (dt_placement){R_, 0};
                const dt__meta *ins[1] = {self};
                dt__placement_error(e->name, ins, 1, md,
                                    "a Partial result that must be cast back to the input's dtype (casts of "
                                    "Partial values are not exact)",
                                    0, fix);
                return NULL;
            }
        }
    }
    dt_tensor *t = submit_node(e);
    if (!t || !cast)
        return t;
    dt__ew c = {.name = "to", .op = DT_OP_CAST, .nin = 1, .in = {t}};
    c.out = t->v->meta;
    c.out.dtype = self->dtype;
    dt_tensor *r = submit_node(&c);
    dt_tensor_release(t);
    return r;
}

/* ------------------------------------------------------------ binary */

static int is_one(dt_scalar s) { return s.kind == DT_SCALAR_INT && s.i == 1; }

/* The result dtype of op over promoted dtype rt, and torch's call-time
 * errors. `s` is the scalar operand (NULL for tensor-tensor). */
static dt_status binary_dtype(int op, const char *name, dt_dtype rt, int has_bool, const dt_scalar *s,
                              int scalar_first, dt_scalar alpha, dt_dtype *out) {
    if (op == DT_BINARY_SUB && has_bool)
        return dt__error(DT_EOP,
                         "sub: subtraction, the `-` operator, with a bool tensor is not supported; use the "
                         "`~` or logical_not() operator to invert a mask");
    if (binary_ops[op].alpha) {
        if (alpha.kind == DT_SCALAR_BOOL && rt != DT_BOOL)
            return dt__error(DT_EOP, "%s: Boolean alpha only supported for Boolean results.", name);
        if (alpha.kind == DT_SCALAR_FLOAT && !dt_dtype_is_floating(rt))
            return dt__error(
                DT_EOP, "%s: For integral input tensors, argument alpha must not be a floating point number.",
                name);
    } else if (!is_one(alpha)) {
        return dt__error(DT_EINVAL, "%s: takes no alpha (only add and sub do)", name);
    }
    int integral = !dt_dtype_is_floating(rt);
    int kind = binary_ops[op].result;
    switch (kind) {
    case B_FLOAT:
        *out = integral ? dt_get_default_dtype() : rt;
        return DT_OK;
    case B_BOOL:
        *out = DT_BOOL;
        return DT_OK;
    case B_INTDIV:
    case B_POW:
        /* pow(Tensor, Scalar) fills or copies for an exponent of 0 or 1
         * without a kernel, so a bool tensor to a bool power works. */
        if (rt == DT_BOOL && !(kind == B_POW && s && !scalar_first && s->kind == DT_SCALAR_BOOL))
            return dt__error(DT_EUNSUPPORTED, "%s: \"%s\" not implemented for 'Bool'", name,
                             binary_ops[op].bool_kernel);
        if (s && !scalar_first && integral && s->kind != DT_SCALAR_FLOAT) {
            if (kind == B_POW && s->i < 0)
                return dt__error(DT_EOP, "%s: Integers to negative integer powers are not allowed.", name);
            if (kind == B_INTDIV && s->i == 0)
                return dt__error(DT_EOP, "%s: ZeroDivisionError", name);
        }
        break;
    case B_BITWISE:
        if (!integral)
            return dt__error(DT_EUNSUPPORTED, "%s: \"%s_cpu\" not implemented for '%s'", name, name,
                             dt__ew_torch_name(rt));
        break;
    default:
        break;
    }
    *out = rt;
    return DT_OK;
}

/* The body of every binary entry. `function_form` tells how a scalar-first
 * call computes (torch.<op>(s, a) rather than Python's reflected operator). */
/* A per-thread memo of the last planned call per op: a loop repeats one
 * (op, input layouts, scalars) combination, and its output layout, dtype and
 * kernel choice are a function of exactly those, so a repeat skips shape,
 * dtype and placement inference. Errors are never memoised. */
#define BIN_MEMO 8
typedef struct bin_memo {
    int valid, op, nin, flags, function_form;
    dt_dtype default_dtype; /* promotion of Python scalars depends on it */
    dt_scalar s, alpha;
    dt__meta in[2];
    dt__meta out;
    int32_t attr_flags;
} bin_memo;
static _Thread_local bin_memo tls_memo[BIN_MEMO];

/* One thread-local lookup per call (each access to a thread-local of a shared
 * library is a call into the dynamic linker). */
__attribute__((noinline)) static bin_memo *memo_slot(int op) { return &tls_memo[op & (BIN_MEMO - 1)]; }

static int same_scalar(dt_scalar x, dt_scalar y) {
    return x.kind == y.kind && (x.kind == DT_SCALAR_FLOAT ? memcmp(&x.f, &y.f, sizeof x.f) == 0 : x.i == y.i);
}

static int memo_hit(const bin_memo *m, int op, dt_tensor *a, dt_tensor *b, dt_scalar s, dt_scalar alpha,
                    int flags, int function_form) {
    int nin = b ? 2 : 1;
    if (!m->valid || m->op != op || m->nin != nin || m->flags != flags || m->function_form != function_form ||
        !same_scalar(m->alpha, alpha) || m->default_dtype != dt_get_default_dtype())
        return 0;
    if (!b && !same_scalar(m->s, s))
        return 0;
    if (b && b->graph != a->graph)
        return 0;
    return dt__meta_same(&m->in[0], &a->v->meta) && (!b || dt__meta_same(&m->in[1], &b->v->meta));
}

static void memo_store(bin_memo *m, const dt__ew *e, int flags, int function_form) {
    m->valid = 1;
    m->op = e->attr.sub;
    m->nin = e->nin;
    m->flags = flags;
    m->function_form = function_form;
    m->default_dtype = dt_get_default_dtype();
    m->s = e->attr.scalar;
    m->alpha = e->attr.scalar2;
    for (int i = 0; i < e->nin; i++)
        m->in[i] = e->in[i]->v->meta;
    m->out = e->out;
    m->attr_flags = e->attr.flags;
}

static dt_tensor *binary_call(dt_binary_op op, dt_tensor *a, dt_tensor *b, dt_scalar s, dt_scalar alpha,
                              int flags, int function_form) {
    dt_clear_error();
    if ((unsigned)op >= DT_BINARY_COUNT) {
        dt__error(DT_EINVAL, "binary: unknown op %d", (int)op);
        return NULL;
    }
    const char *name = binary_names[op];
    int scalar_first = !b && (flags & DT_EW_SCALAR_FIRST);
    if (!dt__tensor_ok(a)) {
        dt__error(DT_EINVAL, "%s: tensor argument is %s", name, dt__handle_bad(a));
        return NULL;
    }
    if (!b && s.kind != DT_SCALAR_BOOL && s.kind != DT_SCALAR_INT && s.kind != DT_SCALAR_FLOAT) {
        dt__error(DT_ETYPE, "%s: unknown scalar kind %d", name, s.kind);
        return NULL;
    }
    if (alpha.kind != DT_SCALAR_BOOL && alpha.kind != DT_SCALAR_INT && alpha.kind != DT_SCALAR_FLOAT) {
        dt__error(DT_ETYPE, "%s: unknown alpha kind %d", name, alpha.kind);
        return NULL;
    }
    if (!b && (op == DT_BINARY_MAXIMUM || op == DT_BINARY_MINIMUM ||
               (op >= DT_BINARY_LOGICAL_AND && op <= DT_BINARY_LOGICAL_XOR))) {
        dt__error(DT_ETYPE, "%s(): argument 'other' must be Tensor, not %s", name,
                  s.kind == DT_SCALAR_FLOAT ? "float"
                  : s.kind == DT_SCALAR_INT ? "int"
                                            : "bool");
        return NULL;
    }
    if ((flags & DT_EW_INPLACE) && scalar_first) {
        dt__error(DT_EINVAL, "%s_: an in-place op writes into a tensor, not into a scalar", name);
        return NULL;
    }
    /* s < a is a > s: comparisons reverse by swapping the op. */
    if (scalar_first && op >= DT_BINARY_LT && op <= DT_BINARY_GE) {
        static const int swapped[] = {DT_BINARY_GT, DT_BINARY_GE, DT_BINARY_LT, DT_BINARY_LE};
        op = (dt_binary_op)swapped[op - DT_BINARY_LT];
        scalar_first = 0;
    } else if (scalar_first && (op == DT_BINARY_EQ || op == DT_BINARY_NE)) {
        scalar_first = 0;
    } else if (scalar_first && !function_form &&
               (op == DT_BINARY_ADD || op == DT_BINARY_MUL || op == DT_BINARY_BITWISE_AND ||
                op == DT_BINARY_BITWISE_OR || op == DT_BINARY_BITWISE_XOR)) {
        /* s * t: torch's __rmul__ (__radd__, __rand__, ...) is t.mul(s), whose
         * kernel keeps a second-operand scalar in float for bf16/fp16;
         * torch.mul(s, t) rounds it to t's dtype first. */
        scalar_first = 0;
    }
    bin_memo *memo = memo_slot(op);
    if (memo_hit(memo, op, a, b, s, alpha, flags, function_form)) {
        dt__ew_attr attr = {.sub = op, .flags = memo->attr_flags, .scalar = s, .scalar2 = alpha};
        if (!(flags & DT_EW_INPLACE)) {
            /* The node goes out without building the planning record. */
            dt_tensor *in[2] = {a, b};
            return submit_planned(DT_OP_EW_BINARY, b ? 2 : 1, in, &memo->out, attr);
        }
        dt__ew e = {.name = name, .op = DT_OP_EW_BINARY, .nin = b ? 2 : 1, .in = {a, b}};
        e.attr = attr;
        e.out = memo->out;
        return dt__ew_submit(&e, flags);
    }
    dt__ew e = {.name = name, .op = DT_OP_EW_BINARY, .nin = b ? 2 : 1, .in = {a, b}};
    e.attr.sub = op;
    e.attr.scalar = s;
    e.attr.scalar2 = alpha;
    if (dt__ew_shape(&e) != DT_OK)
        return NULL;
    const dt__meta *ma = &a->v->meta;
    dt_dtype rt;
    int has_bool;
    if (b) {
        rt = dt__result_type2(ma, &b->v->meta);
        has_bool = ma->dtype == DT_BOOL || b->v->meta.dtype == DT_BOOL;
    } else {
        rt = dt__result_type_scalar(ma, s);
        has_bool = ma->dtype == DT_BOOL || s.kind == DT_SCALAR_BOOL;
    }
    if (binary_dtype(op, name, rt, has_bool, b ? NULL : &s, scalar_first, alpha, &e.out.dtype) != DT_OK)
        return NULL;
    e.attr.sub = op;
    e.attr.scalar = s;
    e.attr.scalar2 = alpha;
    e.attr.flags = scalar_first ? DT_KF_REVERSED : 0;
    if (scalar_first && !function_form && (op == DT_BINARY_SUB || op == DT_BINARY_DIV))
        e.attr.flags |= DT_KF_EW_OPERATOR;
    /* A scalar divided by a Partial tensor is not linear in it. */
    int rdiv = !b && scalar_first && op == DT_BINARY_DIV;
    const char *accepted = b      ? binary_tensor_accepts[op]
                           : rdiv ? DT__PS_SHARDS_1 DT__PS_TEXT(NONE)
                                  : binary_scalar_accepts[op];
    const uint32_t *sets = b ? binary_tensor_sets[op] : rdiv ? no_partial : binary_scalar_sets[op];
    if (dt__ew_placements(&e, accepted, sets) != DT_OK)
        return NULL;
    memo_store(memo, &e, flags, function_form);
    return dt__ew_submit(&e, flags);
}

dt_tensor *dt_binary(dt_binary_op op, dt_tensor *a, dt_tensor *b) {
    if (!dt__tensor_ok(b)) {
        dt_clear_error();
        dt__error(DT_EINVAL, "binary: tensor argument is %s", dt__handle_bad(b));
        return NULL;
    }
    return binary_call(op, a, b, dt_scalar_int(0), dt_scalar_int(1), 0, 0);
}

dt_tensor *dt_binary_scalar(dt_binary_op op, dt_tensor *a, dt_scalar s, int scalar_first) {
    return binary_call(op, a, NULL, s, dt_scalar_int(1), scalar_first ? DT_EW_SCALAR_FIRST : 0, 0);
}

dt_tensor *dt_binary_ex(dt_binary_op op, dt_tensor *a, dt_tensor *b, dt_scalar s, dt_scalar alpha,
                        int flags) {
    return binary_call(op, a, b, s, alpha, flags, 1);
}

/* ------------------------------------------------------------ lowering */

static int kernel_op(const dt__node *n) {
    switch (n->op) {
    case DT_OP_EW_BINARY:
        return DT_K_EW_BINARY;
    case DT_OP_UNARY:
        return DT_K_UNARY;
    case DT_OP_CAST:
        return DT_K_CAST;
    case DT_OP_WHERE:
        return DT_K_WHERE;
    case DT_OP_MASKED_FILL:
        return DT_K_MASKED_FILL;
    case DT_OP_CLAMP:
        return DT_K_CLAMP;
    /* Invariant: dt__ops sends only these ops here. */
    default:
        DT_ASSERT(!"not an elementwise node");
        return -1;
    }
}

void dt__ew_kernel_spec(const dt__node *n, int *kop, dt__kattr *a, const char **opname) {
    *kop = kernel_op(n);
    *opname = NULL;
    if (n->op == DT_OP_EW_BINARY)
        *opname = binary_names[n->a.sub];
    else if (n->op == DT_OP_UNARY)
        *opname = dt__ew_unary_name(n->a.sub);
    a->dtype = n->out->meta.dtype;
    a->sub = n->a.sub;
    a->flags = n->a.flags;
    a->scalar = n->a.scalar;
    a->scalar2 = n->a.scalar2;
}

/* 1 when the layouts alone show that on every device each input's region
 * is its own block there (decided once per node, not per device): on the
 * one mesh, nothing segmented, and each mesh dim that shards an input's dim
 * shards the output's dim it lines up with (so dt__local_region makes both
 * regions by the same cuts of the same length) and is no broadcast dim;
 * one that shards only the output's dim cuts a dim the input lacks or
 * broadcasts (its one element, as needed_region takes it). 0 does not say
 * no: the probes decide. */
static int ew_blocks_follow(const dt__node *n) {
    const dt__meta *out = &n->out->meta;
    if (out->seg.n)
        return 0;
    for (int j = 0; j < n->n_in; j++) {
        const dt__meta *in = &n->in[j]->meta;
        int off = out->ndim - in->ndim;
        if (in->mesh != out->mesh || in->seg.n || off < 0)
            return 0;
        for (int md = 0; md < out->mesh->ndim; md++) {
            int is = in->pl[md].kind == DT_PLACEMENT_SHARD, os = out->pl[md].kind == DT_PLACEMENT_SHARD;
            int y = out->pl[md].dim, x = y - off; /* the output's sharded dim, the input's under it */
            if (!is && !os)
                continue;
            if (is != os || in->pl[md].dim != x) {
                if (is || (x >= 0 && !(in->shape[x] == 1 && out->shape[y] != 1)))
                    return 0;
            } else if (in->shape[x] == 1 && out->shape[y] != 1) {
                return 0; /* a broadcast dim cut on the input */
            }
        }
    }
    return 1;
}

/* 1 when on every device each input's region is its own block there (no
 * slice): by the layouts (ew_blocks_follow), else checked on dt__lw_probes'
 * devices (needed_region copies the output region's offsets, or takes a
 * broadcast dim's one element). Arithmetic only. */
static int ew_own_blocks(const dt__lower *L, const dt__node *n) {
    if (ew_blocks_follow(n))
        return 1;
    const dt__meta *out = &n->out->meta;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    int64_t devs[DT__LW_BCAST_MAX_DEV];
    int np = dt__lw_probes(L, n, 1, devs);
    for (int i = 0; i < np; i++) {
        dt__mesh_coord(out->mesh, devs[i], coord);
        dt__local_region(out, coord, os, ol);
        for (int j = 0; j < n->n_in; j++) {
            needed_region(&n->in[j]->meta, out, os, ol, s, l);
            if (!dt__lw_own_block(&n->in[j]->meta, coord, s, l))
                return 0;
        }
    }
    return 1;
}

/* One kernel per device: each input is sliced (when Replicate or broadcast)
 * to the region the device's output needs; or one device-independent record
 * (dt__lw_bcast) where every device's input blocks are its blobs. */
dt_status dt__lower_elementwise(dt__lower *L, dt__node *n) {
    const dt__meta *out = &n->out->meta;
    int kop;
    const char *opname;
    dt__kattr spec = {0};
    dt__ew_kernel_spec(n, &kop, &spec, &opname);
    /* One record for every device where the blocks line up (lower_bcast.c),
     * or where each device's region of each input is its own block (a
     * Replicate input broadcast along the dims the output's shards cut). */
    if (dt__lw_bcast(L, n->out, kop, &spec, opname, n->in, n->n_in, 0) ||
        (dt__lw_bcast_wanted(L, n->out) && ew_own_blocks(L, n) &&
         dt__lw_bcast(L, n->out, kop, &spec, opname, n->in, n->n_in, 1)))
        return L->status;
    int64_t ns[DT_MAX_NDIM], nl[DT_MAX_NDIM];
    for (dt__lw_dev dev = DT__LW_EACH(n->out, kop); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        k->n_in = n->n_in;
        for (int j = 0; j < n->n_in; j++) {
            needed_region(&n->in[j]->meta, out, dev.start, dev.len, ns, nl);
            k->in[j] = dt__lw_region(L, n->in[j], dev.idx, dev.coord, ns, nl);
        }
        if (opname)
            k->opname = opname;
        k->attr.dtype = spec.dtype;
        k->attr.sub = spec.sub;
        k->attr.flags = spec.flags;
        k->attr.scalar = spec.scalar;
        k->attr.scalar2 = spec.scalar2;
        dt__lw_each_push(L, &dev);
    }
    return L->status;
}

/* ------------------------------------------------------------ registry */

#define SIG_CAST "R->R, S(d)->S(d); no Partial (a cast of a Partial is not exact); same dtype: any"
/* The binary and unary rows come from dtorch_ops.def, their accepted
 * placements from the same placement sets as the errors' text. */
#define DOC_ROW(name, doc) {name, "elementwise", doc, 0},
#define DOC_NOROW(name, doc)
#define SCALAR_NA ""
#define SCALAR_NONE "; scalar: " DT__PS_SHARDS_1 DT__PS_TEXT(NONE)
#define SCALAR_P "; scalar: " DT__PS_SHARDS_1 DT__PS_TEXT(P)
#define SCALAR_PDIV "; tensor / scalar: " DT__PS_SHARDS_1 DT__PS_TEXT(P) "; scalar / tensor: no Partial"

const dt_op_doc dt__docs_elementwise[] = {
#define DT_BINARY_OP(E, name, tensors, scalar, row, note, ...)                                               \
    DOC_##row(#name, DT__PS_SHARDS_2 DT__PS_TEXT(tensors) SCALAR_##scalar note)
#include "dtorch/dtorch_ops.def"
    {"equal", "elementwise", DT__PS_SHARDS_2 " compare in place; any other combination reads both values", 1},
    {"where", "elementwise",
     "(R,R,R)->R, S(d) on any inputs (same output dim d, others R)->S(d)*; no Partial", 0},
    {"masked_fill", "elementwise",
     "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d)*, (R,S(d))->S(d)*; no Partial", 0},
    {"clamp", "elementwise", "R->R, S(d)->S(d); tensor bounds: broadcast as where; no Partial", 0},
    {"clip", "elementwise", "as clamp", 0},
#define DT_UNARY_OP(E, name, result, bool_kernel, into, py, partial, row)                                    \
    DOC_##row(#name, DT__PS_SHARDS_1 DT__PS_TEXT(partial))
#include "dtorch/dtorch_ops.def"
    {"to", "elementwise", SIG_CAST, 0},
    {"type_as", "elementwise", SIG_CAST, 0},
    {"half", "elementwise", SIG_CAST, 0},
    {"float", "elementwise", SIG_CAST, 0},
    {"double", "elementwise", SIG_CAST, 0},
    {"bfloat16", "elementwise", SIG_CAST, 0},
    {"int", "elementwise", SIG_CAST, 0},
    {"long", "elementwise", SIG_CAST, 0},
    {"bool", "elementwise", SIG_CAST, 0},
    {NULL, NULL, NULL, 0},
};
