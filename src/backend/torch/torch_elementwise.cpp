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

// The binary calls come from include/dtorch/dtorch_ops.def's binary rows:
// `call` names the ATen overloads the op has (x op y, x op s, s op x) and
// `into` the form that writes into x; CUSTOM rows are written by hand below.
#define BIN_TT_SCALAR(E, name)                                                                               \
    case DT_BINARY_##E:                                                                                      \
        return at::name(x, y);
#define BIN_TT_SCALAR2 BIN_TT_SCALAR
#define BIN_TT_TENSOR BIN_TT_SCALAR
#define BIN_TT_ALPHA(E, name)                                                                                \
    case DT_BINARY_##E:                                                                                      \
        return at::name(x, y, alpha);
#define BIN_TT_CUSTOM(E, name)
#define BIN_TS_SCALAR(E, name)                                                                               \
    case DT_BINARY_##E:                                                                                      \
        return at::name(x, s);
#define BIN_TS_SCALAR2 BIN_TS_SCALAR
#define BIN_TS_ALPHA(E, name)                                                                                \
    case DT_BINARY_##E:                                                                                      \
        return at::name(x, s, alpha);
#define BIN_TS_TENSOR(E, name)
#define BIN_TS_CUSTOM(E, name)
#define BIN_ST_SCALAR2(E, name)                                                                              \
    case DT_BINARY_##E:                                                                                      \
        return at::name(to_scalar(ds), x);
#define BIN_ST_SCALAR(E, name)
#define BIN_ST_ALPHA(E, name)
#define BIN_ST_TENSOR(E, name)
#define BIN_ST_CUSTOM(E, name)
#define BIN_TT_INTO_OUT_SCALAR(E, name)                                                                      \
    case DT_BINARY_##E:                                                                                      \
        at::name##_out(x, x, y);                                                                             \
        return true;
#define BIN_TT_INTO_OUT_SCALAR2 BIN_TT_INTO_OUT_SCALAR
#define BIN_TT_INTO_OUT_TENSOR BIN_TT_INTO_OUT_SCALAR
#define BIN_TT_INTO_OUT_ALPHA(E, name)                                                                       \
    case DT_BINARY_##E:                                                                                      \
        at::name##_out(x, x, y, alpha);                                                                      \
        return true;
#define BIN_TT_INTO_OUT_CUSTOM(E, name)
#define BIN_TS_INTO_OUT_SCALAR(E, name)                                                                      \
    case DT_BINARY_##E:                                                                                      \
        x.name##_(s);                                                                                        \
        return true;
#define BIN_TS_INTO_OUT_SCALAR2 BIN_TS_INTO_OUT_SCALAR
#define BIN_TS_INTO_OUT_ALPHA(E, name)                                                                       \
    case DT_BINARY_##E:                                                                                      \
        x.name##_(s, alpha);                                                                                 \
        return true;
#define BIN_TS_INTO_OUT_TENSOR(E, name)
#define BIN_TS_INTO_OUT_CUSTOM(E, name)
#define BIN_TT_INTO_OUT(E, name, call) BIN_TT_INTO_OUT_##call(E, name)
#define BIN_TS_INTO_OUT(E, name, call) BIN_TS_INTO_OUT_##call(E, name)
#define BIN_TT_INTO_NONE(E, name, call)
#define BIN_TS_INTO_NONE(E, name, call)
#define BIN_TT_INTO_CUSTOM(E, name, call)
#define BIN_TS_INTO_CUSTOM(E, name, call)
#define BIN_ROW(form, E, name, tensors, scalar, row, note, result, bool_kernel, call, ...)                   \
    BIN_##form##_##call(E, name)
#define BIN_INTO(form, E, name, tensors, scalar, row, note, result, bool_kernel, call, into, py)             \
    BIN_##form##_INTO_##into(E, name, call)

at::Tensor binary_tt(int sub, const at::Tensor &x, const at::Tensor &y, const at::Scalar &alpha) {
    switch (sub) {
#define DT_BINARY_OP(...) BIN_ROW(TT, __VA_ARGS__)
#include "dtorch/dtorch_ops.def"
    case DT_BINARY_DIV_TRUNC:
        return at::div(x, y, c10::optional<c10::string_view>("trunc"));
    default:
        fail("torch backend: unknown binary op " + std::to_string(sub));
    }
}

/* x op= y through the out= form with out = x: the same structured ATen
 * kernel as binary_tt's, writing into x (x has the result's dtype and
 * shape; see donatable). false when the op has no such form. */
bool binary_tt_into(int sub, at::Tensor &x, const at::Tensor &y, const at::Scalar &alpha) {
    switch (sub) {
#define DT_BINARY_OP(...) BIN_INTO(TT, __VA_ARGS__)
#include "dtorch/dtorch_ops.def"
    case DT_BINARY_MUL:
        at::mul_out(x, x, y);
        return true;
    case DT_BINARY_DIV_TRUNC:
        at::div_out(x, x, y, c10::optional<c10::string_view>("trunc"));
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
#define DT_BINARY_OP(...) BIN_INTO(TS, __VA_ARGS__)
#include "dtorch/dtorch_ops.def"
    case DT_BINARY_MUL:
        // Python's x.mul_(float) is mul_.Tensor with a wrapped number; ATen's
        // mul_.Scalar rounds the scalar to x's dtype first (bf16/fp16 differ).
        x.mul_(wrapped(ds));
        return true;
    case DT_BINARY_DIV_TRUNC:
        x.div_(s, c10::optional<c10::string_view>("trunc"));
        return true;
    default:
        return false;
    }
}

/* x op s through the Scalar overloads torch's Python binding picks; an op
 * without one takes s as a wrapped number, as torch's parser passes it. */
at::Tensor binary_ts(int sub, const at::Tensor &x, const dt_scalar &ds, const at::Scalar &alpha) {
    at::Scalar s = to_scalar(ds);
    switch (sub) {
#define DT_BINARY_OP(...) BIN_ROW(TS, __VA_ARGS__)
#include "dtorch/dtorch_ops.def"
    case DT_BINARY_DIV_TRUNC:
        return at::div(x, s, c10::optional<c10::string_view>("trunc"));
    default:
        return binary_tt(sub, x, wrapped(ds), alpha);
    }
}

/* s op x: torch.<op>(s, x) (the function form). */
at::Tensor binary_st(int sub, const dt_scalar &ds, const at::Tensor &x, const at::Scalar &alpha) {
    switch (sub) {
#define DT_BINARY_OP(...) BIN_ROW(ST, __VA_ARGS__)
#include "dtorch/dtorch_ops.def"
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
