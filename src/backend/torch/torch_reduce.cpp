/*
 * LibTorch kernels of the reductions family: DT_K_REDUCE (backend.h states
 * the exact semantics of every mode).
 *
 * The PLAIN mode calls the very ATen overload torch's Python API calls for the
 * same arguments (x.max() -> at::max(x), x.sum(dim, keepdim) -> at::sum(...)),
 * so a one-device mesh is bit-identical to eager torch. The other modes are
 * the pieces of the distributed lowerings in src/ops/reduce.c.
 *
 * Threads: kernels run on worker threads, concurrently; no state is kept.
 */
#include <ATen/ATen.h>

#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "backend/torch/torch_int.h"

namespace dt_torch {
namespace {

/* The dims named by the mask, ascending; a 0-d tensor takes bit 0 as dim 0
 * (ATen accepts dim 0 and -1 on 0-d tensors). */
std::vector<int64_t> mask_dims(const at::Tensor &x, uint64_t mask) {
    std::vector<int64_t> dims;
    int64_t nd = x.dim();
    if (nd == 0) {
        if (mask & 1u)
            dims.push_back(0);
        return dims;
    }
    if (nd < 64 && (mask >> nd) != 0)
        fail("torch backend: reduce dims mask names a dim beyond the tensor's " + std::to_string(nd));
    for (int64_t d = 0; d < nd; ++d)
        if (mask & (uint64_t(1) << d))
            dims.push_back(d);
    return dims;
}

std::vector<int64_t> all_dims(const at::Tensor &x) {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < x.dim(); ++d)
        dims.push_back(d);
    return dims;
}

int64_t single_dim(const std::vector<int64_t> &dims, const char *op) {
    if (dims.size() != 1)
        fail(std::string("torch backend: ") + op + " takes exactly one dim");
    return dims[0];
}

/* torch's dtype= argument: passed only when it changes the dtype, as the
 * Python API does when dtype is None. */
c10::optional<at::ScalarType> opt_dtype(const at::Tensor &x, at::ScalarType st) {
    if (x.scalar_type() == st)
        return c10::nullopt;
    return st;
}

/* An op with only single-dim overloads (prod, any, all) over several dims:
 * one dim after the other, from the last, keeping dims until the end. */
template <typename F> at::Tensor fold_dims(at::Tensor x, const std::vector<int64_t> &dims, bool keep, F one) {
    if (x.dim() == 0)
        return one(x, 0, keep);
    for (auto it = dims.rbegin(); it != dims.rend(); ++it)
        x = one(x, *it, true);
    if (!keep)
        for (auto it = dims.rbegin(); it != dims.rend(); ++it)
            x = x.squeeze(*it);
    return x;
}

at::Tensor plain(int op, const at::Tensor &x, const dt__kattr *a, at::ScalarType st) {
    bool keep = (a->flags & DT_KF_KEEPDIM) != 0;
    bool all = (a->flags & DT_KF_ALL) != 0;
    std::vector<int64_t> dims = all ? all_dims(x) : mask_dims(x, a->dims_mask);
    switch (op) {
    case DT_REDUCE_SUM:
        if (all && !keep)
            return at::sum(x, opt_dtype(x, st));
        return at::sum(x, at::IntArrayRef(dims), keep, opt_dtype(x, st));
    case DT_REDUCE_MEAN:
        if (all && !keep)
            return at::mean(x, opt_dtype(x, st));
        return at::mean(x, at::IntArrayRef(dims), keep, opt_dtype(x, st));
    case DT_REDUCE_PROD: {
        c10::optional<at::ScalarType> dt = opt_dtype(x, st);
        if (all && !keep)
            return at::prod(x, dt);
        if (dims.size() == 1)
            return at::prod(x, dims[0], keep, dt);
        at::Tensor y = dt ? x.to(*dt) : x;
        return fold_dims(y, dims, keep,
                         [](const at::Tensor &t, int64_t d, bool k) { return at::prod(t, d, k); });
    }
    case DT_REDUCE_AMAX:
        return all && !keep ? at::amax(x) : at::amax(x, dims, keep);
    case DT_REDUCE_AMIN:
        return all && !keep ? at::amin(x) : at::amin(x, dims, keep);
    case DT_REDUCE_MAX:
        if (all)
            return at::max(x);
        return std::get<0>(at::max(x, single_dim(dims, "max"), keep));
    case DT_REDUCE_MIN:
        if (all)
            return at::min(x);
        return std::get<0>(at::min(x, single_dim(dims, "min"), keep));
    case DT_REDUCE_ARGMAX:
        if (all)
            return at::argmax(x, c10::nullopt, keep);
        return at::argmax(x, single_dim(dims, "argmax"), keep);
    case DT_REDUCE_ARGMIN:
        if (all)
            return at::argmin(x, c10::nullopt, keep);
        return at::argmin(x, single_dim(dims, "argmin"), keep);
    case DT_REDUCE_ANY:
        if (all && !keep)
            return at::any(x);
        if (dims.size() == 1)
            return at::any(x, dims[0], keep);
        return fold_dims(x, dims, keep,
                         [](const at::Tensor &t, int64_t d, bool k) { return at::any(t, d, k); });
    case DT_REDUCE_ALL:
        if (all && !keep)
            return at::all(x);
        if (dims.size() == 1)
            return at::all(x, dims[0], keep);
        return fold_dims(x, dims, keep,
                         [](const at::Tensor &t, int64_t d, bool k) { return at::all(t, d, k); });
    default:
        fail("torch backend: unknown reduce op " + std::to_string(op));
    }
}

/* The local arg index as a global one (keepdim). */
at::Tensor global_index(int op, const at::Tensor &x, const dt__kattr *a) {
    bool is_max = op == DT_REDUCE_ARGMAX;
    int64_t nd = x.dim();
    if (a->ndim != nd || a->gndim != nd)
        fail("torch backend: reduce global index needs the region's rank");
    if (a->flags & DT_KF_ALL) {
        at::Tensor li = is_max ? at::argmax(x, c10::nullopt, true) : at::argmin(x, c10::nullopt, true);
        /* One element: unravel with the local shape, offset, ravel with the
         * global shape. */
        int64_t flat = li.reshape({-1})[0].item<int64_t>(), g = 0, stride = 1;
        for (int64_t d = nd - 1; d >= 0; --d) {
            int64_t c = flat % x.size(d);
            flat /= x.size(d);
            g += (c + a->start[d]) * stride;
            stride *= a->gshape[d];
        }
        return at::full(li.sizes(), g, at::TensorOptions().dtype(at::kLong));
    }
    int64_t d = single_dim(mask_dims(x, a->dims_mask), "arg index");
    /* max(dim)'s indices equal argmax's (first occurrence, NaN first) and
     * also exist for bool. */
    at::Tensor li = is_max ? std::get<1>(at::max(x, d, true)) : std::get<1>(at::min(x, d, true));
    return li + a->start[d];
}

/* Per reduced position, the smallest global index among the best values. */
at::Tensor combine(int op, const at::Tensor &vals, const at::Tensor &idx, const dt__kattr *a) {
    bool is_max = op == DT_REDUCE_ARGMAX;
    bool keep = (a->flags & DT_KF_KEEPDIM) != 0;
    std::vector<int64_t> dims = (a->flags & DT_KF_ALL) ? all_dims(vals) : mask_dims(vals, a->dims_mask);
    if (!vals.sizes().equals(idx.sizes()))
        fail("torch backend: reduce combine needs values and indices alike");
    at::Tensor best = is_max ? at::amax(vals, dims, true) : at::amin(vals, dims, true);
    at::Tensor hit = vals.eq(best);
    if (at::isFloatingType(vals.scalar_type()))
        hit = hit.logical_or(vals.isnan().logical_and(best.isnan()));
    at::Tensor none = at::full({}, std::numeric_limits<int64_t>::max(), idx.options());
    return at::amin(at::where(hit, idx, none), dims, keep);
}

at::Tensor reduce_kernel(const dt__kattr *a, void *const *in, int n_in) {
    int op = a->sub & 0xff, mode = a->sub >> 8;
    at::ScalarType st = to_aten(a->dtype);
    if (op < 0 || op >= DT_REDUCE_COUNT)
        fail("torch backend: unknown reduce op " + std::to_string(op));
    switch (mode) {
    case DT_KR_PLAIN:
        need_inputs(DT_K_REDUCE, n_in, 1, 1);
        return finish(plain(op, impl(in[0]), a, st), st);
    case DT_KR_INDICES: {
        need_inputs(DT_K_REDUCE, n_in, 1, 1);
        const at::Tensor &x = impl(in[0]);
        int64_t d = single_dim(mask_dims(x, a->dims_mask), "max/min indices");
        bool keep = (a->flags & DT_KF_KEEPDIM) != 0;
        if (op == DT_REDUCE_MAX)
            return finish(std::get<1>(at::max(x, d, keep)), st);
        if (op == DT_REDUCE_MIN)
            return finish(std::get<1>(at::min(x, d, keep)), st);
        fail("torch backend: reduce indices need max or min");
    }
    case DT_KR_GLOBAL_INDEX:
        need_inputs(DT_K_REDUCE, n_in, 1, 1);
        if (op != DT_REDUCE_ARGMAX && op != DT_REDUCE_ARGMIN)
            fail("torch backend: global index needs argmax/argmin");
        return finish(global_index(op, impl(in[0]), a), st);
    case DT_KR_COMBINE:
        need_inputs(DT_K_REDUCE, n_in, 2, 2);
        if (op != DT_REDUCE_ARGMAX && op != DT_REDUCE_ARGMIN)
            fail("torch backend: combine needs argmax/argmin");
        return finish(combine(op, impl(in[0]), impl(in[1]), a), st);
    case DT_KR_SUM_DIV: {
        need_inputs(DT_K_REDUCE, n_in, 1, 1);
        const at::Tensor &x = impl(in[0]);
        bool keep = (a->flags & DT_KF_KEEPDIM) != 0;
        /* Half and bfloat16 sum in float so that only the final cast rounds,
         * as at::mean does. */
        at::ScalarType acc = st == at::kHalf || st == at::kBFloat16 ? at::kFloat : st;
        std::vector<int64_t> dims = mask_dims(x, a->dims_mask);
        at::Tensor s = at::sum(x, at::IntArrayRef(dims), keep, acc);
        return finish(s.div_(a->f[0]), st);
    }
    default:
        fail("torch backend: unknown reduce mode " + std::to_string(mode));
    }
}

} // namespace

DT_TORCH_KERNEL(DT_K_REDUCE, reduce_kernel);

} // namespace dt_torch
