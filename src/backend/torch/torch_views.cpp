/*
 * LibTorch kernels of the views and shape family: DT_K_VIEW and its sub
 * codes, and DT_K_MASKED_SCATTER (backend.h states each one's exact
 * semantics).
 *
 * Each kernel calls the ATen op eager torch calls for the same Python
 * expression, on the device's own block, so a one-device mesh gives exactly
 * torch's values. Where ATen returns a view (reshape of a viewable layout,
 * permute, a slice, split, chunk, narrow), the view is handed on as is
 * (finish(): blobs are immutable, so sharing storage is safe), strided or
 * not, as eager torch hands it on; expand's stride-0 view and a slice of
 * under a quarter of its storage are copied (docs/decisions.md, "Kernel
 * results may be views").
 *
 * Threads: kernels run on worker threads, concurrently; nothing here keeps
 * state between calls.
 */
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "backend/torch/torch_int.h"

namespace dt_torch {
namespace {

/* The region of backend.h: in[0][start : start + step * shape : step] per dim. */
at::Tensor strided_region(const at::Tensor &x, const dt__kattr *a) {
    check_ndim(a->ndim, "view region");
    if (x.dim() != a->ndim)
        fail("torch backend: view region of " + std::to_string(a->ndim) + " dims on a tensor of " +
             std::to_string(x.dim()) + " dims");
    at::Tensor v = x;
    for (int d = 0; d < a->ndim; ++d) {
        int64_t step = a->step[d] < 1 ? 1 : a->step[d];
        int64_t end = a->shape[d] > 0 ? a->start[d] + (a->shape[d] - 1) * step + 1 : a->start[d];
        v = v.slice(d, a->start[d], end, step);
        if (v.size(d) != a->shape[d])
            fail("torch backend: view region does not fit dim " + std::to_string(d));
    }
    return v;
}

/* [None] * dim + [index] for at::index / index_put_. */
c10::List<c10::optional<at::Tensor>> index_list(int dim, const at::Tensor &index) {
    c10::List<c10::optional<at::Tensor>> list;
    for (int d = 0; d < dim; ++d)
        list.push_back(c10::optional<at::Tensor>());
    list.push_back(c10::optional<at::Tensor>(index));
    return list;
}

at::Tensor view_kernel(const dt__kattr *a, void *const *in, int n_in) {
    at::ScalarType st = to_aten(a->dtype);
    switch (a->sub) {
    case DT_KV_RESHAPE:
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        check_ndim(a->ndim, "reshape");
        return finish(impl(in[0]).reshape(dims_of(a->shape, a->ndim)), st);
    case DT_KV_PERMUTE:
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        check_ndim(a->ndim, "permute");
        return finish(impl(in[0]).permute(dims_of(a->ints, a->ndim)), st);
    case DT_KV_CONTIGUOUS:
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        return finish(impl(in[0]).contiguous(), st);
    case DT_KV_EXPAND:
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        check_ndim(a->ndim, "expand");
        return finish(impl(in[0]).expand(dims_of(a->shape, a->ndim)), st);
    case DT_KV_STRIDED: {
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        check_ndim(a->gndim, "getitem result");
        return finish(strided_region(impl(in[0]), a).reshape(dims_of(a->gshape, a->gndim)), st);
    }
    case DT_KV_SET_TENSOR:
    case DT_KV_SET_SCALAR: {
        bool tensor = a->sub == DT_KV_SET_TENSOR;
        need_inputs(DT_K_VIEW, n_in, tensor ? 2 : 1, tensor ? 2 : 1);
        at::Tensor out = impl(in[0]).clone(at::MemoryFormat::Contiguous);
        at::Tensor region = strided_region(out, a);
        if (tensor) {
            check_ndim(a->gndim, "setitem value");
            region.copy_(impl(in[1]).reshape(dims_of(a->gshape, a->gndim)));
        } else {
            region.fill_(to_scalar(a->scalar));
        }
        return finish(out, st);
    }
    case DT_KV_INDEX:
        need_inputs(DT_K_VIEW, n_in, 2, 2);
        return finish(at::index(impl(in[0]), index_list(a->dim, impl(in[1]))), st);
    case DT_KV_INDEX_FILL: {
        need_inputs(DT_K_VIEW, n_in, 2, 2);
        const at::Tensor &x = impl(in[0]);
        at::Tensor out = x.clone(at::MemoryFormat::Contiguous);
        out.index_put_(index_list(a->dim, impl(in[1])), at::scalar_tensor(to_scalar(a->scalar), x.options()));
        return finish(out, st);
    }
    case DT_KV_MASKED_FILL: {
        need_inputs(DT_K_VIEW, n_in, 2, 2);
        check_ndim(a->gndim, "mask");
        at::Tensor mask = impl(in[1]).reshape(dims_of(a->gshape, a->gndim));
        return finish(impl(in[0]).masked_fill(mask, to_scalar(a->scalar)), st);
    }
    case DT_KV_CAT: {
        need_inputs(DT_K_VIEW, n_in, 1, 2);
        std::vector<at::Tensor> list;
        for (int i = 0; i < n_in; ++i) {
            at::Tensor t = impl(in[i]);
            if (t.scalar_type() != st)
                t = t.to(st);
            if (t.dim() == a->ndim - 1)
                t = t.unsqueeze(a->dim);
            list.push_back(t);
        }
        return finish(at::cat(at::TensorList(list), a->dim), st);
    }
    case DT_KV_TRIL:
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        return finish(at::tril(impl(in[0]), a->ints[0]), st);
    case DT_KV_TRIU:
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        return finish(at::triu(impl(in[0]), a->ints[0]), st);
    case DT_KV_FLIP: {
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        const at::Tensor &x = impl(in[0]);
        std::vector<int64_t> dims;
        for (int64_t d = 0; d < x.dim(); ++d)
            if (a->dims_mask & (uint64_t(1) << d))
                dims.push_back(d);
        if (dims.empty())
            return finish(x, st);
        return finish(at::flip(x, dims), st);
    }
    case DT_KV_ROLL: {
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        const at::Tensor &x = impl(in[0]);
        if (a->nints < 0 || a->nints > DT_MAX_NDIM)
            fail("torch backend: roll with a bad number of dims");
        if (a->nints == 0)
            return finish(at::roll(x, {a->ints[0]}), st);
        return finish(at::roll(x, dims_of(a->ints, a->nints), dims_of(a->start, a->nints)), st);
    }
    case DT_KV_REPEAT:
        need_inputs(DT_K_VIEW, n_in, 1, 1);
        check_ndim(a->nints, "repeat");
        return finish(impl(in[0]).repeat(dims_of(a->ints, a->nints)), st);
    case DT_KV_REPEAT_INTERLEAVE:
        need_inputs(DT_K_VIEW, n_in, 1, 2);
        if (n_in == 1)
            return finish(at::repeat_interleave(impl(in[0]), a->ints[0], a->dim), st);
        return finish(at::repeat_interleave(impl(in[0]), impl(in[1]), a->dim, a->ints[1]), st);
    default:
        fail("torch backend: unknown view sub code " + std::to_string(a->sub));
    }
}

/* DT_K_MASKED_SCATTER (backend.h). The whole result is ATen's own call; a
 * region ranks the True elements of the whole broadcast mask (a cumsum in
 * row-major order) and takes its own ones' source elements, which is the
 * same element-for-element copy. */
at::Tensor masked_scatter_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_MASKED_SCATTER, n_in, 3, 3);
    const at::Tensor &x = impl(in[0]), &mask = impl(in[1]), &src = impl(in[2]);
    at::ScalarType st = to_aten(a->dtype);
    if (!(a->flags & DT_KMS_REGION))
        return finish(at::masked_scatter(x, mask, src), st);
    check_ndim(a->gndim, "masked_scatter result");
    if (a->ndim != a->gndim)
        fail("torch backend: masked_scatter region of another rank than the result");
    at::IntArrayRef gshape = dims_of(a->gshape, a->gndim), shape = dims_of(a->shape, a->ndim);
    at::Tensor m = mask.expand(gshape);
    // rank[i] = how many True elements precede element i, plus one.
    at::Tensor rank = at::cumsum(m.reshape({-1}), 0, at::kLong).view(gshape);
    int64_t total = rank.numel() ? rank.reshape({-1})[-1].item<int64_t>() : 0;
    TORCH_CHECK(total <= src.numel(), "Number of elements of source < number of ones in mask");
    bool whole = false;
    at::Tensor mr = region(m, a->ndim, a->start, a->shape, &whole);
    at::Tensor rr = region(rank, a->ndim, a->start, a->shape, &whole);
    at::Tensor out = (a->flags & DT_KMS_ZERO_INPUT)
                         ? at::zeros(shape, x.options().dtype(st))
                         : x.expand(shape).to(st).clone(at::MemoryFormat::Contiguous);
    at::Tensor pick = rr.masked_select(mr).sub_(1);
    at::Tensor vals = (a->flags & DT_KMS_ZERO_SOURCE) ? at::zeros({pick.numel()}, src.options())
                                                      : src.reshape({-1}).index_select(0, pick);
    out.masked_scatter_(mr, vals);
    return finish(out, st);
}

} // namespace

DT_TORCH_KERNEL(DT_K_VIEW, view_kernel);
DT_TORCH_KERNEL(DT_K_MASKED_SCATTER, masked_scatter_kernel);

} // namespace dt_torch
