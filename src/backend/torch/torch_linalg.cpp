/*
 * LibTorch kernels of the linear algebra family: DT_K_LINALG (backend.h).
 * matmul is DT_KL_MATMUL (at::matmul).
 *
 * Each sub code calls the ATen function torch's Python API calls (torch.mm ->
 * at::mm, F.linear -> at::linear, torch.einsum -> at::einsum), so a
 * one-device mesh is bit-identical to eager torch.
 *
 * Threads: kernels run on worker threads, concurrently; no state is kept.
 */
#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "backend/torch/torch_internal.h"

namespace dt_torch {
namespace {

at::Tensor linalg_kernel(const dt__kattr *a, void *const *in, int n_in) {
    at::ScalarType st = to_aten(a->dtype);
    switch (a->sub) {
    case DT_KL_MM:
        need_inputs(DT_K_LINALG, n_in, 2, 2);
        return finish(at::mm(impl(in[0]), impl(in[1])), st);
    case DT_KL_BMM:
        need_inputs(DT_K_LINALG, n_in, 2, 2);
        return finish(at::bmm(impl(in[0]), impl(in[1])), st);
    case DT_KL_OUTER:
        need_inputs(DT_K_LINALG, n_in, 2, 2);
        return finish(at::outer(impl(in[0]), impl(in[1])), st);
    case DT_KL_LINEAR:
        need_inputs(DT_K_LINALG, n_in, 2, 3);
        if (n_in == 3)
            return finish(at::linear(impl(in[0]), impl(in[1]), impl(in[2])), st);
        return finish(at::linear(impl(in[0]), impl(in[1])), st);
    case DT_KL_MATMUL:
        need_inputs(DT_K_LINALG, n_in, 2, 2);
        return finish(at::matmul(impl(in[0]), impl(in[1])), st);
    case DT_KL_EINSUM: {
        need_inputs(DT_K_LINALG, n_in, 1, -1);
        if (!a->text)
            fail("torch backend: einsum without an equation");
        std::vector<at::Tensor> ops;
        for (int i = 0; i < n_in; ++i)
            ops.push_back(impl(in[i]));
        return finish(at::einsum(a->text, at::TensorList(ops)), st);
    }
    default:
        fail("torch backend: unknown linalg op " + std::to_string(a->sub));
    }
}

} // namespace

DT_TORCH_KERNEL(DT_K_LINALG, linalg_kernel);

} // namespace dt_torch
