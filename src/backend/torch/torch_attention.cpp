/*
 * Ring attention's two kernels (backend.h, DT_K_SDPA with DT_KNN_RING or
 * DT_KNN_RING_FINAL; lowered by src/ops/ring_attention.c).
 *
 * A ring step attends one query block to one key/value block and merges the
 * result into the running accumulator with the log-sum-exp rule (online
 * softmax). The accumulator is one tensor [..., Lq, Dv + 1]: the output so
 * far, normalised, in the first Dv columns and the log-sum-exp of each row's
 * scores so far in the last, so a step has one output blob. Rows that saw no
 * key yet have log-sum-exp -inf and output 0; merging weighs each side by
 * exp(lse_side - lse_new), which is 0 for a -inf side.
 *
 * Inputs of a step: q [..., Lq, D], kv [..., Lk, D + Dv] (key and value
 * concatenated on the last dim, so the ring passes one blob), and the
 * accumulator when this is not the first block. Attributes: ints[0] and
 * ints[1] the global sequence positions of the first query and key rows (the
 * causal mask keeps key position <= query position, torch's top-left
 * alignment), ints[2] = D; f[1] the scale unless DT_KNN_DEFAULT (then
 * 1/sqrt(D)); DT_KNN_CAUSAL when the block needs the mask; dtype the
 * accumulator's (float32 for half inputs). The final kernel takes the
 * accumulator and returns its first Dv columns in the output dtype.
 */
#include <cmath>

#include "torch_int.h"

namespace dt_torch {

namespace {

at::Tensor ring_step(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_SDPA, n_in, 2, 3);
    at::ScalarType st = to_aten(a->dtype);
    at::Tensor q = impl(in[0]).to(st), kv = impl(in[1]).to(st);
    int64_t d = a->ints[2];
    int64_t dv = kv.size(-1) - d;
    at::Tensor k = kv.narrow(-1, 0, d), v = kv.narrow(-1, d, dv);
    double scale = (a->flags & DT_KNN_DEFAULT) ? 1.0 / std::sqrt((double)q.size(-1)) : a->f[1];
    at::Tensor s = at::mul(at::matmul(q, k.transpose(-2, -1)), scale);
    if (a->flags & DT_KNN_CAUSAL) {
        at::TensorOptions pos = q.options().dtype(at::kLong);
        at::Tensor qpos = at::arange(a->ints[0], a->ints[0] + q.size(-2), pos).unsqueeze(-1);
        at::Tensor kpos = at::arange(a->ints[1], a->ints[1] + k.size(-2), pos).unsqueeze(0);
        s = s.masked_fill(at::gt(kpos, qpos), -INFINITY);
    }
    at::Tensor lse = at::logsumexp(s, -1, true);
    at::Tensor seen = at::isfinite(lse);
    // A row whose every score is masked has lse -inf: its weights are 0.
    at::Tensor p = at::exp(at::sub(s, at::where(seen, lse, at::zeros_like(lse))));
    p = at::where(seen, p, at::zeros_like(p));
    at::Tensor o = at::matmul(p, v);
    if (n_in == 3) {
        const at::Tensor &acc = impl(in[2]);
        at::Tensor oa = acc.narrow(-1, 0, dv), la = acc.narrow(-1, dv, 1);
        at::Tensor m = at::maximum(la, lse);
        at::Tensor m0 = at::where(at::isfinite(m), m, at::zeros_like(m));
        at::Tensor ea = at::exp(at::sub(la, m0)), eb = at::exp(at::sub(lse, m0));
        at::Tensor den = at::add(ea, eb);
        at::Tensor any = at::gt(den, 0);
        at::Tensor safe = at::where(any, den, at::ones_like(den));
        o = at::div(at::add(at::mul(oa, ea), at::mul(o, eb)), safe);
        lse = at::where(any, at::add(m0, at::log(safe)), la);
    }
    return finish(at::cat({o, lse}, -1), st);
}

at::Tensor ring_final(const dt__kattr *a, void *const *in, int n_in) {
    need_inputs(DT_K_SDPA, n_in, 1, 1);
    const at::Tensor &acc = impl(in[0]);
    return finish(acc.narrow(-1, 0, acc.size(-1) - 1), to_aten(a->dtype));
}

} // namespace

at::Tensor ring_attention_kernel(const dt__kattr *a, void *const *in, int n_in) {
    return (a->flags & DT_KNN_RING_FINAL) ? ring_final(a, in, n_in) : ring_step(a, in, n_in);
}

} // namespace dt_torch
