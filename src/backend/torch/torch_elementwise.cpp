/*
 * LibTorch kernels of the elementwise family: DT_K_EW_BINARY, DT_K_UNARY,
 * DT_K_CAST, DT_K_WHERE, DT_K_MASKED_FILL and DT_K_CLAMP (backend.h states
 * each one's semantics).
 *
 * Each kernel calls the ATen overload that eager torch reaches from Python
 * for the same call, so a one-device result is bit-identical to torch: a
 * Python scalar operand is an at::Scalar where torch has a Scalar overload
 * (x ** 2 is pow(Tensor, Scalar), whose special cases differ from
 * pow(Tensor, Tensor)), and a wrapped-number tensor where torch's argument
 * parser wraps it (torch.div(2, x)).
 *
 * Threads: kernels run on worker threads, concurrently; no state is kept.
 */
#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>

#include <string>

#include "backend/torch/torch_int.h"

namespace dt_torch {
namespace {

/* A Python number as torch's argument parser passes it for a Tensor
 * parameter: a 0-d CPU tensor flagged as a wrapped number, so that type
 * promotion treats it as a scalar. */
at::Tensor wrapped(const dt_scalar &s) { return at::native::wrapped_scalar_tensor(to_scalar(s)); }

at::Tensor binary_tt(int sub, const at::Tensor &x, const at::Tensor &y, const at::Scalar &alpha) {
    switch (sub) {
    case DT_BINARY_ADD:
        return at::add(x, y, alpha);
    case DT_BINARY_SUB:
        return at::sub(x, y, alpha);
    case DT_BINARY_MUL:
        return at::mul(x, y);
    case DT_BINARY_DIV:
        return at::div(x, y);
    case DT_BINARY_DIV_TRUNC:
        return at::div(x, y, c10::optional<c10::string_view>("trunc"));
    case DT_BINARY_DIV_FLOOR:
        return at::floor_divide(x, y);
    case DT_BINARY_REMAINDER:
        return at::remainder(x, y);
    case DT_BINARY_POW:
        return at::pow(x, y);
    case DT_BINARY_MAXIMUM:
        return at::maximum(x, y);
    case DT_BINARY_MINIMUM:
        return at::minimum(x, y);
    case DT_BINARY_EQ:
        return at::eq(x, y);
    case DT_BINARY_NE:
        return at::ne(x, y);
    case DT_BINARY_LT:
        return at::lt(x, y);
    case DT_BINARY_LE:
        return at::le(x, y);
    case DT_BINARY_GT:
        return at::gt(x, y);
    case DT_BINARY_GE:
        return at::ge(x, y);
    case DT_BINARY_LOGICAL_AND:
        return at::logical_and(x, y);
    case DT_BINARY_LOGICAL_OR:
        return at::logical_or(x, y);
    case DT_BINARY_LOGICAL_XOR:
        return at::logical_xor(x, y);
    case DT_BINARY_BITWISE_AND:
        return at::bitwise_and(x, y);
    case DT_BINARY_BITWISE_OR:
        return at::bitwise_or(x, y);
    case DT_BINARY_BITWISE_XOR:
        return at::bitwise_xor(x, y);
    default:
        fail("torch backend: unknown binary op " + std::to_string(sub));
    }
}

/* x op= y through the out= form with out = x: the same structured ATen
 * kernel as binary_tt's, writing into x (x has the result's dtype and
 * shape; see donatable). false when the op has no such form. */
bool binary_tt_into(int sub, at::Tensor &x, const at::Tensor &y, const at::Scalar &alpha) {
    switch (sub) {
    case DT_BINARY_ADD:
        at::add_out(x, x, y, alpha);
        return true;
    case DT_BINARY_SUB:
        at::sub_out(x, x, y, alpha);
        return true;
    case DT_BINARY_MUL:
        at::mul_out(x, x, y);
        return true;
    case DT_BINARY_DIV:
        at::div_out(x, x, y);
        return true;
    case DT_BINARY_DIV_TRUNC:
        at::div_out(x, x, y, c10::optional<c10::string_view>("trunc"));
        return true;
    case DT_BINARY_DIV_FLOOR:
        at::floor_divide_out(x, x, y);
        return true;
    case DT_BINARY_REMAINDER:
        at::remainder_out(x, x, y);
        return true;
    case DT_BINARY_POW:
        at::pow_out(x, x, y);
        return true;
    case DT_BINARY_MAXIMUM:
        at::maximum_out(x, x, y);
        return true;
    case DT_BINARY_MINIMUM:
        at::minimum_out(x, x, y);
        return true;
    default:
        return false;
    }
}

/* x op= s through the in-place methods of the Scalar overloads binary_ts
 * calls (the same kernels, into x). */
bool binary_ts_into(int sub, at::Tensor &x, const dt_scalar &ds, const at::Scalar &alpha) {
    at::Scalar s = to_scalar(ds);
    switch (sub) {
    case DT_BINARY_ADD:
        x.add_(s, alpha);
        return true;
    case DT_BINARY_SUB:
        x.sub_(s, alpha);
        return true;
    case DT_BINARY_MUL:
        // Python's x.mul_(float) is mul_.Tensor with a wrapped number; ATen's
        // mul_.Scalar rounds the scalar to x's dtype first (bf16/fp16 differ).
        x.mul_(wrapped(ds));
        return true;
    case DT_BINARY_DIV:
        x.div_(s);
        return true;
    case DT_BINARY_DIV_TRUNC:
        x.div_(s, c10::optional<c10::string_view>("trunc"));
        return true;
    case DT_BINARY_DIV_FLOOR:
        x.floor_divide_(s);
        return true;
    case DT_BINARY_REMAINDER:
        x.remainder_(s);
        return true;
    case DT_BINARY_POW:
        x.pow_(s);
        return true;
    default:
        return false;
    }
}

/* x op s through the Scalar overloads torch's Python binding picks. */
at::Tensor binary_ts(int sub, const at::Tensor &x, const dt_scalar &ds, const at::Scalar &alpha) {
    at::Scalar s = to_scalar(ds);
    switch (sub) {
    case DT_BINARY_ADD:
        return at::add(x, s, alpha);
    case DT_BINARY_SUB:
        return at::sub(x, s, alpha);
    case DT_BINARY_MUL:
        return at::mul(x, s);
    case DT_BINARY_DIV:
        return at::div(x, s);
    case DT_BINARY_DIV_TRUNC:
        return at::div(x, s, c10::optional<c10::string_view>("trunc"));
    case DT_BINARY_DIV_FLOOR:
        return at::floor_divide(x, s);
    case DT_BINARY_REMAINDER:
        return at::remainder(x, s);
    case DT_BINARY_POW:
        return at::pow(x, s);
    case DT_BINARY_EQ:
        return at::eq(x, s);
    case DT_BINARY_NE:
        return at::ne(x, s);
    case DT_BINARY_LT:
        return at::lt(x, s);
    case DT_BINARY_LE:
        return at::le(x, s);
    case DT_BINARY_GT:
        return at::gt(x, s);
    case DT_BINARY_GE:
        return at::ge(x, s);
    case DT_BINARY_BITWISE_AND:
        return at::bitwise_and(x, s);
    case DT_BINARY_BITWISE_OR:
        return at::bitwise_or(x, s);
    case DT_BINARY_BITWISE_XOR:
        return at::bitwise_xor(x, s);
    default:
        return binary_tt(sub, x, wrapped(ds), alpha);
    }
}

/* s op x: torch.<op>(s, x) (the function form). */
at::Tensor binary_st(int sub, const dt_scalar &ds, const at::Tensor &x, const at::Scalar &alpha) {
    switch (sub) {
    case DT_BINARY_POW:
        return at::pow(to_scalar(ds), x);
    case DT_BINARY_REMAINDER:
        return at::remainder(to_scalar(ds), x);
    default:
        return binary_tt(sub, wrapped(ds), x, alpha);
    }
}

at::Tensor ew_binary(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_EW_BINARY, n_in, 1, 2);
    at::Scalar alpha = to_scalar(a->scalar2);
    // In place into in[0] (DT_KF_INPLACE): s op x has no such form.
    bool alpha_one = a->scalar2.kind != DT_SCALAR_FLOAT && a->scalar2.i == 1;
    if (n_in == 2 && donatable(a, impl(in[0]), impl(in[1]).sizes())) {
        at::Tensor x = impl(in[0]);
        if ((alpha_one && tiny_binary_inplace(a->sub, x, impl(in[1]))) ||
            binary_tt_into(a->sub, x, impl(in[1]), alpha))
            return x;
    } else if (n_in == 1 && !(a->flags & DT_KF_REVERSED) && donatable(a, impl(in[0]), impl(in[0]).sizes())) {
        at::Tensor x = impl(in[0]);
        if (binary_ts_into(a->sub, x, a->scalar, alpha))
            return x;
    }
    at::Tensor r;
    if (n_in == 2)
        r = binary_tt(a->sub, impl(in[0]), impl(in[1]), alpha);
    else if ((a->flags & DT_KF_EW_OPERATOR) && a->sub == DT_BINARY_SUB)
        r = at::rsub(impl(in[0]), to_scalar(a->scalar), alpha); // s - t: torch's __rsub__
    else if ((a->flags & DT_KF_EW_OPERATOR) && a->sub == DT_BINARY_DIV)
        r = at::mul(at::reciprocal(impl(in[0])), to_scalar(a->scalar)); // s / t: torch's __rtruediv__
    else if (a->flags & DT_KF_REVERSED)
        r = binary_st(a->sub, a->scalar, impl(in[0]), alpha);
    else
        r = binary_ts(a->sub, impl(in[0]), a->scalar, alpha);
    return finish(r, to_aten(a->dtype));
}

// The calls come from include/dtorch/dtorch_ops.def: at::<name>(x) for every
// row, and its `into` column for the form that writes into x.
#define ATEN_CALL_OUT(E, name)                                                                               \
    case DT_UNARY_##E:                                                                                       \
        return at::name(x);
#define ATEN_CALL_INPLACE ATEN_CALL_OUT
#define ATEN_CALL_NONE ATEN_CALL_OUT
#define ATEN_CALL_CUSTOM(E, name)
#define ATEN_INTO_OUT(E, name)                                                                               \
    case DT_UNARY_##E:                                                                                       \
        at::name##_out(x, x);                                                                                \
        return true;
#define ATEN_INTO_INPLACE(E, name)                                                                           \
    case DT_UNARY_##E:                                                                                       \
        at::name##_(x);                                                                                      \
        return true;
#define ATEN_INTO_NONE(E, name)
#define ATEN_INTO_CUSTOM(E, name)
#define ATEN_CALL(E, name, result, bool_kernel, into, ...) ATEN_CALL_##into(E, name)
#define ATEN_INTO(E, name, result, bool_kernel, into, ...) ATEN_INTO_##into(E, name)

at::Tensor unary_op(const dt__kattr *a, const at::Tensor &x) {
    switch (a->sub) {
#define DT_UNARY_OP(E, name, ...) ATEN_CALL(E, name, __VA_ARGS__)
#include "dtorch/dtorch_ops.def"
    // torch.round(x) and torch.round(x, decimals=d) are different kernels.
    case DT_UNARY_ROUND:
        return a->scalar.i == 0 ? at::round(x) : at::round(x, a->scalar.i);
    default:
        fail("torch backend: unknown unary op " + std::to_string(a->sub));
    }
}

/* unary_op's call in its out= form with out = x (the same structured
 * kernel, into x). false when the op has no such form or changes dtype
 * (square, round and the predicates: out of place). */
bool unary_into(const dt__kattr *a, at::Tensor &x) {
    switch (a->sub) {
#define DT_UNARY_OP(E, name, ...) ATEN_INTO(E, name, __VA_ARGS__)
#include "dtorch/dtorch_ops.def"
    default:
        return false;
    }
}

at::Tensor unary(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_UNARY, n_in, 1, 1);
    if (donatable(a, impl(in[0]), impl(in[0]).sizes())) {
        at::Tensor x = impl(in[0]);
        if (unary_into(a, x))
            return x;
    }
    return finish(unary_op(a, impl(in[0])), to_aten(a->dtype));
}

at::Tensor cast(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_CAST, n_in, 1, 1);
    return finish(impl(in[0]).to(to_aten(a->dtype)), to_aten(a->dtype));
}

at::Tensor where(const dt__kattr *a, void *const *in, int n_in) {
    bool xs = (a->flags & DT_KF_EW_X_SCALAR) != 0, ys = (a->flags & DT_KF_EW_Y_SCALAR) != 0;
    int want = 1 + !xs + !ys;
    need_inputs(DT_K_WHERE, n_in, want, want);
    const at::Tensor &c = impl(in[0]);
    at::Tensor r;
    if (xs && ys)
        r = at::where(c, to_scalar(a->scalar), to_scalar(a->scalar2));
    else if (xs)
        r = at::where(c, to_scalar(a->scalar), impl(in[1]));
    else if (ys)
        r = at::where(c, impl(in[1]), to_scalar(a->scalar2));
    else
        r = at::where(c, impl(in[1]), impl(in[2]));
    return finish(r, to_aten(a->dtype));
}

at::Tensor masked_fill(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_MASKED_FILL, n_in, 2, 3);
    const at::Tensor &x = impl(in[0]), &m = impl(in[1]);
    // masked_fill is a copy then masked_fill_: in place, only the copy goes.
    if (donatable(a, x, m.sizes()) && (n_in == 2 || donatable(a, x, impl(in[2]).sizes()))) {
        at::Tensor y = x;
        if (n_in == 3)
            y.masked_fill_(m, impl(in[2]));
        else
            y.masked_fill_(m, to_scalar(a->scalar));
        return y;
    }
    at::Tensor r =
        n_in == 3 ? at::masked_fill(x, m, impl(in[2])) : at::masked_fill(x, m, to_scalar(a->scalar));
    return finish(r, to_aten(a->dtype));
}

at::Tensor clamp(const dt__kattr *a, void *const *in, int n_in) {
    int f = a->flags;
    bool min_s = f & DT_KF_EW_MIN_SCALAR, min_t = f & DT_KF_EW_MIN_TENSOR;
    bool max_s = f & DT_KF_EW_MAX_SCALAR, max_t = f & DT_KF_EW_MAX_TENSOR;
    int want = 1 + min_t + max_t;
    need_inputs(DT_K_CLAMP, n_in, want, want);
    const at::Tensor &x = impl(in[0]);
    at::Tensor r;
    if (!min_t && !max_t) {
        c10::optional<at::Scalar> lo, hi;
        if (min_s)
            lo = to_scalar(a->scalar);
        if (max_s)
            hi = to_scalar(a->scalar2);
        if (donatable(a, x, x.sizes())) {
            at::Tensor y = x;
            at::clamp_out(y, x, lo, hi);
            return y;
        }
        r = at::clamp(x, lo, hi);
    } else {
        // torch's parser wraps a number given next to a tensor bound.
        c10::optional<at::Tensor> lo, hi;
        int next = 1;
        if (min_t)
            lo = impl(in[next++]);
        else if (min_s)
            lo = wrapped(a->scalar);
        if (max_t)
            hi = impl(in[next++]);
        else if (max_s)
            hi = wrapped(a->scalar2);
        r = at::clamp(x, lo, hi);
    }
    return finish(r, to_aten(a->dtype));
}

} // namespace

DT_TORCH_KERNEL(DT_K_EW_BINARY, ew_binary);
DT_TORCH_KERNEL(DT_K_UNARY, unary);
DT_TORCH_KERNEL(DT_K_CAST, cast);
DT_TORCH_KERNEL(DT_K_WHERE, where);
DT_TORCH_KERNEL(DT_K_MASKED_FILL, masked_fill);
DT_TORCH_KERNEL(DT_K_CLAMP, clamp);

} // namespace dt_torch
