/*
 * LibTorch kernels of the linear algebra family: DT_K_LINALG (backend.h).
 * matmul is DT_KL_MATMUL (at::matmul).
 *
 * Each sub code calls the ATen function torch's Python API calls (torch.mm ->
 * at::mm, F.linear -> at::linear, torch.einsum -> at::einsum), so a
 * one-device mesh is bit-identical to eager torch. A module's linear
 * (DT_KF_LINEAR_PARAM) calls it with a weight that requires grad, as a
 * module's nn.Parameter does, since that changes torch's choice of product.
 *
 * Threads: kernels run on worker threads, concurrently; no state is kept.
 */
#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <string>
#include <vector>

#include "backend/torch/torch_int.h"

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
        if ((a->flags & DT_KF_LINEAR_PARAM) && impl(in[0]).dim() >= 3) {
            /* A module's weight: torch's own choice of product for a weight
             * that requires grad (matmul then folds an input of 3+ dims
             * into one mm), with no graph recorded (dt_linear_param). An
             * input of 1 or 2 dims gets one product either way: no alias. */
            c10::AutoGradMode no_grad(false);
            at::Tensor w = impl(in[1]).detach();
            if (w.is_floating_point() || w.is_complex())
                w.set_requires_grad(true);
            return finish(n_in == 3 ? at::linear(impl(in[0]), w, impl(in[2])) : at::linear(impl(in[0]), w),
                          st);
        }
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
