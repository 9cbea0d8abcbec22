/*
 * LibTorch kernels of the nn functional family (backend.h, DT_K_ACTIVATION
 * .. DT_K_SDPA, and DT_K_POOL2D).
 *
 * Each kernel makes the same ATen call that torch.nn.functional makes for
 * the op, so a one-device result equals eager torch bit for bit (fused
 * at::rms_norm and at::scaled_dot_product_attention included). Attention
 * with dropout is the one composition: the fused op would draw its own mask,
 * which depends on the placements (see apply_dropout).
 *
 * Random masks (dropout, attention dropout) are drawn for the global shape
 * from a generator seeded by the core, then sliced to the device's region:
 * that is what makes them independent of mesh and placements.
 *
 * Threads: kernels run on worker threads, concurrently; they keep no state.
 * Exceptions are caught by torch_run (torch_backend.cpp).
 */
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/torch/torch_int.h"

namespace dt_torch {
namespace {

/* An empty local output: nothing to compute, and some ATen kernels refuse
 * empty inputs (reflection padding of an empty channel dim). */
bool empty_out(const dt__kattr *a) {
    for (int d = 0; d < a->ndim; ++d)
        if (a->shape[d] == 0)
            return true;
    return false;
}

at::Tensor empty_result(const dt__kattr *a, const at::Tensor &like) {
    check_ndim(a->ndim, "nn output");
    return at::empty(dims_of(a->shape, a->ndim), like.options().dtype(to_aten(a->dtype)));
}

/* ---------------------------------------------------------------- masks */

/* torch's dropout noise for the region: Bernoulli(1 - p) for the global
 * shape (drawn in float32 on the CPU, values 0/1), sliced, then in `like`'s
 * dtype and device divided by 1 - p as ATen's _dropout_impl does. */
at::Tensor dropout_noise(const dt__kattr *a, double p, const int64_t *lens, const at::Tensor &like) {
    check_ndim(a->gndim, "dropout global shape");
    at::Generator gen = at::detail::createCPUGenerator(a->seed);
    at::Tensor g = at::empty(dims_of(a->gshape, a->gndim), at::TensorOptions().dtype(at::kFloat));
    g.bernoulli_(1 - p, gen);
    bool whole = false;
    at::Tensor noise = region(g, a->gndim, a->start, lens, &whole).to(like.options(), false, true);
    noise.div_(1 - p);
    return noise;
}

/* ATen's dropout on x with the placement-invariant noise. */
at::Tensor apply_dropout(const at::Tensor &x, const dt__kattr *a, double p, const int64_t *lens) {
    if (p == 0)
        return x;
    if (p == 1)
        return at::mul(x, at::zeros({}, x.options()));
    return at::mul(x, dropout_noise(a, p, lens, x));
}

/* ---------------------------------------------------------- activations */

at::Tensor activation_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_ACTIVATION, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    if (donatable(a, x, x.sizes())) {
        // The out= (or in-place) form of the same ATen op, into x.
        at::Tensor y = x;
        switch (a->sub) {
        case DT_ACT_RELU:
            at::relu_(y);
            return y;
        case DT_ACT_GELU:
            at::gelu_out(y, x, "none");
            return y;
        case DT_ACT_GELU_TANH:
            at::gelu_out(y, x, "tanh");
            return y;
        case DT_ACT_SILU:
            at::silu_out(y, x);
            return y;
        case DT_ACT_SIGMOID:
            at::sigmoid_out(y, x);
            return y;
        case DT_ACT_TANH:
            at::tanh_out(y, x);
            return y;
        default:
            break; // leaky_relu, elu: out of place
        }
    }
    at::Tensor r;
    switch (a->sub) {
    case DT_ACT_RELU:
        r = at::relu(x);
        break;
    case DT_ACT_GELU:
        r = at::gelu(x, "none");
        break;
    case DT_ACT_GELU_TANH:
        r = at::gelu(x, "tanh");
        break;
    case DT_ACT_SILU:
        r = at::silu(x);
        break;
    // Python floats reach ATen as double Scalars; the other ELU scales keep
    // their integer defaults, as in torch.nn.functional.
    case DT_ACT_LEAKY_RELU:
        r = at::leaky_relu(x, at::Scalar(a->f[0]));
        break;
    case DT_ACT_ELU:
        r = at::elu(x, at::Scalar(a->f[0]));
        break;
    case DT_ACT_SIGMOID:
        r = at::sigmoid(x);
        break;
    case DT_ACT_TANH:
        r = at::tanh(x);
        break;
    default:
        fail("torch backend: unknown activation " + std::to_string(a->sub));
    }
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_ACTIVATION, activation_kernel);

at::Tensor softmax_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_SOFTMAX, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    c10::optional<at::ScalarType> dt;
    if (a->flags & DT_KNN_DTYPE)
        dt = to_aten(a->dtype);
    at::Tensor r = a->sub ? at::log_softmax(x, a->dim, dt) : at::softmax(x, a->dim, dt);
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_SOFTMAX, softmax_kernel);

/* ------------------------------------------------------- normalisations */

at::Tensor norm_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_NORM, n_in, 1, 5);
    const at::Tensor &x = impl(in[0]);
    if (empty_out(a))
        return empty_result(a, x);
    int next = 1;
    c10::optional<at::Tensor> mean, var, w, b;
    if (a->sub == DT_KNORM_BATCH) {
        need_inputs(DT_K_NORM, n_in, 3, 5);
        mean = impl(in[next++]);
        var = impl(in[next++]);
    }
    if (a->flags & DT_KNN_WEIGHT) {
        need_inputs(DT_K_NORM, n_in, next + 1, 5);
        w = impl(in[next++]);
    }
    if (a->flags & DT_KNN_BIAS) {
        need_inputs(DT_K_NORM, n_in, next + 1, 5);
        b = impl(in[next++]);
    }
    need_inputs(DT_K_NORM, n_in, next, next);
    at::Tensor r;
    switch (a->sub) {
    case DT_KNORM_LAYER:
        check_ndim(a->gndim, "layer_norm normalized_shape");
        // torch.nn.functional passes torch.backends.cudnn.enabled (True).
        r = at::layer_norm(x, dims_of(a->ints, a->gndim), w, b, a->f[0], /*cudnn_enable=*/true);
        break;
    case DT_KNORM_RMS: {
        check_ndim(a->gndim, "rms_norm normalized_shape");
        bool dflt = (a->flags & DT_KNN_DEFAULT) != 0;
        c10::optional<double> eps;
        if (!dflt)
            eps = a->f[0];
        r = at::rms_norm(x, dims_of(a->ints, a->gndim), w, eps);
        break;
    }
    case DT_KNORM_GROUP:
        r = at::group_norm(x, a->ints[0], w, b, a->f[0], /*cudnn_enabled=*/true);
        break;
    case DT_KNORM_BATCH:
        r = at::batch_norm(x, w, b, mean, var, /*training=*/false, a->f[1], a->f[0], /*cudnn_enabled=*/true);
        break;
    default:
        fail("torch backend: unknown norm " + std::to_string(a->sub));
    }
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_NORM, norm_kernel);

/* ------------------------------------------------------------ embedding */

at::Tensor embedding_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_EMBEDDING, n_in, 2, 2);
    const at::Tensor &idx = impl(in[0]);
    const at::Tensor &w = impl(in[1]);
    if (!(a->flags & DT_KNN_MASKED))
        return finish(at::embedding(w, idx), to_aten(a->dtype));
    int64_t start = a->ints[0], rows = a->ints[1], vocab = a->ints[2];
    if (idx.numel() > 0) {
        // The device holds only part of the vocab, so ATen's own check would
        // miss indices of other parts: check the whole range here.
        int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
        TORCH_CHECK_INDEX(lo >= 0 && hi < vocab, "index out of range in self");
    }
    std::vector<int64_t> shape(idx.sizes().begin(), idx.sizes().end());
    shape.push_back(w.size(1));
    if (rows == 0 || idx.numel() == 0)
        return at::zeros(shape, w.options());
    at::Tensor mine = at::logical_and(at::ge(idx, start), at::lt(idx, start + rows));
    at::Tensor local = at::where(mine, at::sub(idx, start), at::zeros({}, idx.options()));
    at::Tensor r = at::embedding(w, local);
    r.masked_fill_(at::logical_not(mine).unsqueeze(-1), 0);
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_EMBEDDING, embedding_kernel);

/* --------------------------------------------------------------- conv2d */

at::Tensor conv2d_kernel(const dt__kattr *a, void *const *in, int n_in) {
    bool has_bias = (a->flags & DT_KNN_BIAS) != 0;
    need_inputs(DT_K_CONV2D, n_in, has_bias ? 3 : 2, has_bias ? 3 : 2);
    const at::Tensor &x = impl(in[0]);
    if (empty_out(a))
        return empty_result(a, x);
    c10::optional<at::Tensor> bias;
    if (has_bias)
        bias = impl(in[2]);
    at::IntArrayRef stride(a->ints, 2), padding(a->ints + 2, 2), dilation(a->ints + 4, 2);
    at::Tensor r;
    switch (a->sub) {
    case DT_CONV_PAD_EXPLICIT:
        r = at::conv2d(x, impl(in[1]), bias, stride, padding, dilation, a->ints[6]);
        break;
    case DT_CONV_PAD_VALID:
        r = at::conv2d(x, impl(in[1]), bias, stride, "valid", dilation, a->ints[6]);
        break;
    case DT_CONV_PAD_SAME:
        r = at::conv2d(x, impl(in[1]), bias, stride, "same", dilation, a->ints[6]);
        break;
    default:
        fail("torch backend: unknown conv2d padding mode " + std::to_string(a->sub));
    }
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_CONV2D, conv2d_kernel);

/* ----------------------------------------------------------- resampling */

/* torch.nn.functional.interpolate's calls: the output size or the scale
 * factors (never both), as the Python function passes them. */
at::Tensor interpolate_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_INTERPOLATE, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    if (empty_out(a))
        return empty_result(a, x);
    int64_t nsp = x.dim() - 2;
    if (nsp < 1 || nsp > 3)
        fail("torch backend: interpolate needs 3-D to 5-D input");
    bool scales = (a->flags & DT_KNN_SCALES) != 0;
    bool align = (a->flags & DT_KNN_ALIGN) != 0;
    at::OptionalIntArrayRef size;
    c10::optional<at::ArrayRef<double>> sf;
    if (scales)
        sf = at::ArrayRef<double>(a->f, (size_t)nsp);
    else
        size = at::IntArrayRef(a->ints, (size_t)nsp);
    at::Tensor r;
    switch (a->sub) {
    case DT_INTERP_NEAREST:
        r = nsp == 1   ? at::upsample_nearest1d(x, size, sf)
            : nsp == 2 ? at::upsample_nearest2d(x, size, sf)
                       : at::upsample_nearest3d(x, size, sf);
        break;
    case DT_INTERP_NEAREST_EXACT:
        r = nsp == 1   ? at::_upsample_nearest_exact1d(x, size, sf)
            : nsp == 2 ? at::_upsample_nearest_exact2d(x, size, sf)
                       : at::_upsample_nearest_exact3d(x, size, sf);
        break;
    case DT_INTERP_LINEAR:
        r = at::upsample_linear1d(x, size, align, sf);
        break;
    case DT_INTERP_BILINEAR:
        r = at::upsample_bilinear2d(x, size, align, sf);
        break;
    case DT_INTERP_BICUBIC:
        r = at::upsample_bicubic2d(x, size, align, sf);
        break;
    case DT_INTERP_TRILINEAR:
        r = at::upsample_trilinear3d(x, size, align, sf);
        break;
    default:
        fail("torch backend: unknown interpolate mode " + std::to_string(a->sub));
    }
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_INTERPOLATE, interpolate_kernel);

at::Tensor pad_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_PAD, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    if (empty_out(a))
        return empty_result(a, x);
    if (a->gndim < 0 || a->gndim > 2 * DT_MAX_NDIM)
        fail("torch backend: bad pad length");
    static const char *const modes[] = {"constant", "reflect", "replicate", "circular"};
    if (a->sub < 0 || a->sub >= DT_PAD_COUNT)
        fail("torch backend: unknown pad mode " + std::to_string(a->sub));
    c10::optional<double> value;
    if (!(a->flags & DT_KNN_DEFAULT))
        value = a->f[0];
    at::Tensor r = at::pad(x, at::IntArrayRef(a->ints, (size_t)a->gndim), modes[a->sub], value);
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_PAD, pad_kernel);

/* -------------------------------------------------------------- dropout */

at::Tensor dropout_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_DROPOUT, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    if (empty_out(a))
        return empty_result(a, x);
    return finish(apply_dropout(x, a, a->f[0], a->shape), to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_DROPOUT, dropout_kernel);

/* -------------------------------------------------------- pixel_shuffle */

at::Tensor pixel_shuffle_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_PIXEL_SHUFFLE, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    if (empty_out(a))
        return empty_result(a, x);
    return finish(at::pixel_shuffle(x, a->ints[0]), to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_PIXEL_SHUFFLE, pixel_shuffle_kernel);

/* ------------------------------------------------------------ attention */

/* The math of torch 2.x's reference implementation: scores scaled after the
 * product, the causal mask as tril(ones(L, S)), a bool mask filling -inf
 * where it is False, a float mask added. */
at::Tensor sdpa_math(const at::Tensor &q, const at::Tensor &k, const at::Tensor &v,
                     const c10::optional<at::Tensor> &mask, bool causal, double scale, const dt__kattr *a) {
    int64_t L = q.size(-2), S = k.size(-2);
    at::Tensor attn = at::mul(at::matmul(q, k.transpose(-2, -1)), scale);
    if (causal) {
        at::Tensor keep = at::ones({L, S}, q.options().dtype(at::kBool)).tril(0);
        attn = attn.masked_fill(keep.logical_not(), -INFINITY);
    }
    if (mask) {
        if (mask->scalar_type() == at::kBool)
            attn = attn.masked_fill(mask->logical_not(), -INFINITY);
        else
            attn = at::add(attn, *mask);
    }
    attn = at::softmax(attn, -1);
    double p = a->f[0];
    if (p > 0) {
        int nd = a->gndim;
        check_ndim(nd, "attention");
        int64_t lens[DT_MAX_NDIM];
        for (int d = 0; d < nd; ++d)
            lens[d] = d < nd - 2 ? a->shape[d] : a->gshape[d];
        attn = apply_dropout(attn, a, p, lens);
    }
    return at::matmul(attn, v);
}

at::Tensor sdpa_kernel(const dt__kattr *a, void *const *in, int n_in) {
    if (a->flags & (DT_KNN_RING | DT_KNN_RING_FINAL))
        return ring_attention_kernel(a, in, n_in);
    bool has_mask = (a->flags & DT_KNN_MASK) != 0;
    need_inputs(DT_K_SDPA, n_in, has_mask ? 4 : 3, has_mask ? 4 : 3);
    const at::Tensor &q = impl(in[0]), &k = impl(in[1]), &v = impl(in[2]);
    if (empty_out(a))
        return empty_result(a, q);
    c10::optional<at::Tensor> mask;
    if (has_mask)
        mask = impl(in[3]);
    bool causal = (a->flags & DT_KNN_CAUSAL) != 0;
    bool dflt = (a->flags & DT_KNN_DEFAULT) != 0;
    at::Tensor r;
    // The fused op draws its own dropout mask, which would depend on the
    // placements: with dropout the composition runs instead.
    if (a->f[0] == 0) {
        c10::optional<double> scale;
        if (!dflt)
            scale = a->f[1];
        r = at::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale);
        return finish(r, to_aten(a->dtype));
    }
    double scale = dflt ? 1.0 / std::sqrt((double)q.size(-1)) : a->f[1];
    r = sdpa_math(q, k, v, mask, causal, scale, a);
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_SDPA, sdpa_kernel);

/* -------------------------------------------------------------- pooling */

/* The call torch.nn.functional makes for each pooling form (backend.h,
 * DT_K_POOL2D); the max forms with indices return one of the two outputs. */
at::Tensor pool2d_kernel(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_POOL2D, n_in, 1, 1);
    const at::Tensor &x = impl(in[0]);
    if (empty_out(a))
        return empty_result(a, x);
    at::IntArrayRef k(a->ints, 2), s(a->ints + 2, 2), p(a->ints + 4, 2), d(a->ints + 6, 2), size(a->ints, 2);
    bool ceil = (a->flags & DT_KPOOL_CEIL) != 0;
    at::Tensor r;
    switch (a->sub) {
    case DT_KPOOL_MAX:
        r = at::max_pool2d(x, k, s, p, d, ceil);
        break;
    case DT_KPOOL_MAX_WI:
        r = std::get<0>(at::max_pool2d_with_indices(x, k, s, p, d, ceil));
        break;
    case DT_KPOOL_MAX_WI_INDICES:
        r = std::get<1>(at::max_pool2d_with_indices(x, k, s, p, d, ceil));
        break;
    case DT_KPOOL_AVG: {
        c10::optional<int64_t> divisor;
        if (a->flags & DT_KPOOL_DIVISOR)
            divisor = a->ints[8];
        r = at::avg_pool2d(x, k, s, p, ceil, (a->flags & DT_KPOOL_COUNT_PAD) != 0, divisor);
        break;
    }
    case DT_KPOOL_ADAPTIVE_AVG:
        r = at::adaptive_avg_pool2d(x, size);
        break;
    case DT_KPOOL_ADAPTIVE_MAX:
        r = std::get<0>(at::adaptive_max_pool2d(x, size));
        break;
    case DT_KPOOL_ADAPTIVE_MAX_INDICES:
        r = std::get<1>(at::adaptive_max_pool2d(x, size));
        break;
    default:
        fail("torch backend: unknown pooling " + std::to_string(a->sub));
    }
    return finish(r, to_aten(a->dtype));
}
DT_TORCH_KERNEL(DT_K_POOL2D, pool2d_kernel);

} // namespace
} // namespace dt_torch
