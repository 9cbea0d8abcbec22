/*
 * LibTorch kernels of the creation and data-dependent family: DT_K_SORT
 * (sort, argsort, topk, cumsum along one dim; the semantics are documented
 * at DT_K_SORT in backend.h). randint lives with rand in torch_backend.cpp
 * (DT_K_RAND, sub DT_KRAND_INT).
 *
 * Each sub code makes the ATen call that eager torch makes for the same
 * Python call, so a one-device result is bit-identical to torch's (ties
 * included: the same call on the same data gives the same order).
 *
 * Threads: kernels run on worker threads, concurrently; no shared state.
 */
#include "backend/torch/torch_int.h"

namespace dt_torch {
namespace {

at::Tensor sort_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_SORT, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    at::ScalarType st = to_aten(a->dtype);
    int64_t dim = a->dim;
    switch (a->sub) {
    case DT_KS_SORT_VALUES:
    case DT_KS_SORT_INDICES: {
        // torch.sort(x, dim, descending, stable) binds to the overload with
        // the optional `stable` argument.
        auto r = at::sort(x, c10::optional<bool>((a->flags & DT_KS_STABLE) != 0), dim,
                          (a->flags & DT_KS_DESCENDING) != 0);
        return finish(a->sub == DT_KS_SORT_VALUES ? std::get<0>(r) : std::get<1>(r), st);
    }
    case DT_KS_TOPK_VALUES:
    case DT_KS_TOPK_INDICES: {
        auto r =
            at::topk(x, a->ints[0], dim, (a->flags & DT_KS_LARGEST) != 0, (a->flags & DT_KS_SORTED) != 0);
        return finish(a->sub == DT_KS_TOPK_VALUES ? std::get<0>(r) : std::get<1>(r), st);
    }
    case DT_KS_CUMSUM: {
        c10::optional<at::ScalarType> dt;
        if (a->flags & DT_KS_DTYPE)
            dt = st;
        return finish(at::cumsum(x, dim, dt), st);
    }
    default:
        fail("torch backend: unknown sort sub code " + std::to_string(a->sub));
    }
}

} // namespace

DT_TORCH_KERNEL(DT_K_SORT, sort_kernel);

} // namespace dt_torch
