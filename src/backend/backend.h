/*
 * The compute backend: what a worker calls to run one kernel on one device.
 *
 * A backend is a table of function pointers (ggml-backend style). Core code
 * never names ATen: it hands opaque value handles ("impls") to these entries.
 * An impl is one dense local tensor on one device; backends may let several
 * impls share storage because dtorch never mutates an impl after the kernel
 * that produced it returns.
 *
 * Threading: every entry may be called concurrently from any thread (workers
 * of several devices, the client thread for from_host/assemble). No entry may
 * throw, abort or longjmp; failures return a status and write a message into
 * `err` (at most `errlen` bytes, NUL-terminated).
 */
#ifndef DT_BACKEND_H
#define DT_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dtorch/dtorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Kernel ops: append-only; names in kop_names (core/kernel_stream.c). */
typedef enum dt__kop {
    /* out = contiguous copy of in[0][start[d] : start[d] + shape[d]] for d < ndim.
     * May alias in[0] when the region is the whole tensor. */
    DT_K_SLICE = 0,
    /* out = tensor of `shape`, `dtype` filled with `scalar`. */
    DT_K_FULL,
    /* out = tensor of `shape`, `dtype`, values unspecified. */
    DT_K_EMPTY,
    /* out[i] = f[0] + (start[0] + i) * f[2] for i < shape[0], of `dtype`
     * (computed as torch.arange(f[0], f[1], f[2]) then sliced, so values
     * match torch exactly). gshape[0] is the global length. */
    DT_K_ARANGE,
    /* out = the region (`start`, `shape`) of a global tensor of `gshape`
     * (`gndim` dims) whose values are rand/randn drawn from a CPU generator
     * seeded with `seed`, then cast to `dtype` if needed. DT_K_RAND with
     * sub DT_KRAND_INT draws randint instead (see DT_KRAND_* below). */
    DT_K_RAND,
    DT_K_RANDN,
    /* out = in[0] (sub) in[1] with broadcasting; sub is DT_BINARY_ADD, SUB,
     * MUL or DIV (the other dt_binary_ops are DT_K_EW_BINARY's); result
     * dtype `dtype`. */
    DT_K_BINARY,
    /* out = in[0] (sub) scalar, or scalar (sub) in[0] when flags & DT_KF_REVERSED
     * (as Python's reflected operators: rsub, reciprocal(in[0]) * scalar);
     * sub as for BINARY; result dtype `dtype`. */
    DT_K_BINARY_SCALAR,
    /* out = -in[0] */
    DT_K_NEG,
    /* out = in[0] @ in[1] with torch.matmul's semantics (any ranks >= 1,
     * batch broadcasting; the ref backend does 2-D only). */
    DT_K_MATMUL,
    /* out = sum of in[0] over the dims whose bit is set in `dims_mask`,
     * keeping them when flags & DT_KF_KEEPDIM; result dtype `dtype`. A zero mask
     * with flags & DT_KF_ALL sums everything to a 0-d tensor. */
    DT_K_SUM,
    /* out = cat(in[0..n_in), dim = `dim`) (any n_in >= 1; inputs may be empty
     * along `dim`). */
    DT_K_CAT,
    /* out = ((in[0] + in[1]) + in[2]) + ... in this order (n_in >= 1). With one
     * input, out may alias in[0]. */
    DT_K_SUM_N,
    /* out = zeros shaped and typed like in[0]. */
    DT_K_ZEROS_LIKE,
    /* ---- reductions family (src/ops/reduce.c, torch_reduce.cpp) ---- */
    /* out = reduction (sub & 0xff, a dt_reduce_op) of in[0] over the dims set
     * in `dims_mask`, keeping them when flags & DT_KF_KEEPDIM; with
     * flags & DT_KF_ALL, torch's no-dim form (x.max(), x.argmax(), ...) giving
     * a 0-d tensor. A 0-d in[0] takes dims_mask bit 0 as "dim 0". Result dtype
     * `dtype`. sub >> 8 is a DT_KR_* mode:
     *  PLAIN: the torch op (MAX/MIN with one dim: the values of max(dim);
     *    ANY/ALL over several dims: one dim after the other);
     *  INDICES: MAX/MIN with one dim: the indices of max(dim)/min(dim);
     *  GLOBAL_INDEX: ARGMAX/ARGMIN (keepdim forced): the local arg index
     *    turned into a global one: in[0] is the region at `start` (ndim
     *    dims) of a global tensor of `gshape`; with one dim, the index plus
     *    start[dim]; with DT_KF_ALL, the flat index in the global tensor
     *    (the result keeps every dim as size 1);
     *  COMBINE: ARGMAX/ARGMIN: in[0] gathered candidate values, in[1] their
     *    global indices (same shape): per reduced position, the smallest
     *    index among the best values (NaN counts as best, as in torch);
     *  SUM_DIV: MEAN: the local sum divided by f[0] (the global count), so
     *    that Partial pieces add up to the global mean. */
    DT_K_REDUCE,
    /* ---- linear algebra family (src/ops/matmul.c, einsum.c, torch_linalg.cpp) ---- */
    /* out = sub (a DT_KL_*) of in[0..n_in): MM at::mm, BMM at::bmm, OUTER
     * at::outer, LINEAR at::linear(in[0], in[1], in[2] if n_in == 3),
     * EINSUM at::einsum(`text`, in[0..n_in)). Result dtype `dtype`. */
    DT_K_LINALG,
    /* ---- views and shape family (src/ops/views.c, torch_views.cpp) ---- */
    /* A data-movement kernel; `sub` (a dt__kview) says which, with the exact
     * semantics listed at dt__kview below. Result dtype `dtype`, contiguous. */
    DT_K_VIEW,

    /* ---- elementwise family (src/ops/elementwise*.c, torch_elementwise.cpp) ---- */
    /* torch.<sub>(x, y) for any dt_binary_op `sub`, result dtype `dtype`:
     * with two inputs x = in[0], y = in[1] (broadcasting); with one input
     * x = in[0], y = `scalar`, or x = `scalar`, y = in[0] when
     * flags & DT_KF_REVERSED (torch's function form, e.g. torch.div(2, t):
     * the scalar is a wrapped number). ADD and SUB scale y by `scalar2`
     * (torch's alpha); other subs ignore scalar2. */
    DT_K_EW_BINARY,
    /* out = torch.<sub>(in[0]) for a dt_unary_op `sub`, result dtype `dtype`;
     * ROUND rounds to `scalar.i` decimals. */
    DT_K_UNARY,
    /* out = in[0].to(dtype). */
    DT_K_CAST,
    /* out = torch.where(in[0], x, y): x is `scalar` when flags &
     * DT_KF_EW_X_SCALAR, else the next input; y is `scalar2` when flags &
     * DT_KF_EW_Y_SCALAR, else the next input; result dtype `dtype`. */
    DT_K_WHERE,
    /* out = in[0].masked_fill(in[1], v) with v = in[2] (a 0-d tensor) when
     * n_in == 3, else `scalar`; result dtype `dtype`. */
    DT_K_MASKED_FILL,
    /* out = torch.clamp(in[0], min, max): min is `scalar` with flags &
     * DT_KF_EW_MIN_SCALAR, the next input with DT_KF_EW_MIN_TENSOR, else
     * None; max likewise with `scalar2` and the *_MAX_* flags (inputs in the
     * order min, max). A scalar next to a tensor bound is a wrapped number. */
    DT_K_CLAMP,

    /* ---- nn functional family (kernels in backend/torch/torch_nn.cpp). Each
     * computes what the torch.nn.functional op of the same name computes on
     * the local tensors it is given; DT_KNN_* below are their flags. For all
     * of them ndim/shape hold the local output shape (an empty one returns an
     * empty tensor without computing). */
    /* out = act(in[0]), sub = dt_activation_kind; f[0] = negative_slope
     * (LEAKY_RELU) or alpha (ELU); result dtype `dtype`. */
    DT_K_ACTIVATION,
    /* out = softmax(in[0], dim), log_softmax when sub == 1; with
     * DT_KNN_DTYPE the input is cast to `dtype` first (torch's dtype=). */
    DT_K_SOFTMAX,
    /* Normalisation, sub = DT_KNORM_*. in[0] = x; BATCH then takes
     * running_mean, running_var; then weight (DT_KNN_WEIGHT) and bias
     * (DT_KNN_BIAS) when present. LAYER/RMS: normalized_shape = ints[0..ndim);
     * GROUP: num_groups = ints[0]; f[0] = eps (RMS: the dtype's default when
     * DT_KNN_DEFAULT); BATCH: inference statistics, momentum f[1]. */
    DT_K_NORM,
    /* out[..., :] = weight[in[0][...], :] with in[1] holding rows
     * [ints[0], ints[0] + ints[1]) of a vocab of ints[2] rows. With
     * DT_KNN_MASKED, indices outside that range give zero rows; every index
     * must lie in [0, ints[2]) or the kernel fails ("index out of range in
     * self", as ATen). Result dtype `dtype`. */
    DT_K_EMBEDDING,
    /* out = conv2d(in[0], in[1], bias in[2] when DT_KNN_BIAS) with stride
     * ints[0..2), padding ints[2..4), dilation ints[4..6), groups ints[6];
     * sub = dt_conv_padding (VALID/SAME pass torch's string padding). */
    DT_K_CONV2D,
    /* out = interpolate(in[0]) in mode sub = dt_interp_mode: output size
     * ints[0..ndim) or, with DT_KNN_SCALES, scale factors f[0..ndim) (ndim
     * = spatial dims); align_corners when DT_KNN_ALIGN (modes that take it). */
    DT_K_INTERPOLATE,
    /* out = pad(in[0], ints[0..gndim), mode sub = dt_pad_mode, value f[0], or
     * torch's default (None) with DT_KNN_DEFAULT). */
    DT_K_PAD,
    /* out = in[0] * mask / (1 - f[0]) where mask is the region (start, shape)
     * of a Bernoulli(1 - f[0]) tensor of the global shape gshape (gndim
     * dims) drawn from a CPU generator seeded with `seed` (shape is both the
     * region's and the output's); f[0] == 1 gives zeros. Result dtype `dtype`. */
    DT_K_DROPOUT,
    /* out = softmax(q @ k^T * scale + bias) @ v with q, k, v = in[0..3) and
     * attn_mask in[3] when DT_KNN_MASK (bool: False masks out; float: added);
     * scale = f[1], or 1/sqrt(q.size(-1)) with DT_KNN_DEFAULT; a causal
     * lower-triangular mask with DT_KNN_CAUSAL; dropout f[0] on the attention
     * weights with the mask being a region of a global Bernoulli tensor of
     * gshape [..., L, S] drawn from `seed` as DT_K_DROPOUT's: it starts at
     * start[d] and spans shape[d] on the leading dims, all of L and S. */
    DT_K_SDPA,

    /* ---- creation and data-dependent family (src/ops/sort_scan.c,
     * torch_sort.cpp). DT_K_RAND above also takes this family's sub codes
     * (DT_KRAND_*). ---- */
    /* One op along `dim` of in[0] (0 <= dim < max(ndim(in[0]), 1)), sub a
     * DT_KS_*; result dtype `dtype`:
     *  SORT_VALUES / SORT_INDICES: torch.sort(in[0], dim, descending =
     *    flags & DT_KS_DESCENDING, stable = flags & DT_KS_STABLE)'s values /
     *    int64 indices (at::sort with the optional stable argument);
     *  TOPK_VALUES / TOPK_INDICES: torch.topk(in[0], k = ints[0], dim,
     *    largest = flags & DT_KS_LARGEST, sorted = flags & DT_KS_SORTED)'s
     *    values / int64 indices;
     *  CUMSUM: torch.cumsum(in[0], dim, dtype = `dtype` when flags &
     *    DT_KS_DTYPE, else None). */
    DT_K_SORT,

    /* ---- pooling, part of the nn functional family (src/ops/nn_pool.c,
     * torch_nn.cpp): ndim/shape hold the local output shape and an empty one
     * returns an empty tensor without computing. ---- */
    /* One ATen pooling call on in[0] [..., C, H, W], sub a DT_KPOOL_*, with
     * kernel_size ints[0..2), stride ints[2..4), padding ints[4..6),
     * dilation ints[6..8), ceil_mode = flags & DT_KPOOL_CEIL:
     *  MAX: at::max_pool2d (torch.nn.functional.max_pool2d's call without
     *    return_indices);
     *  MAX_WI / MAX_WI_INDICES: the values / int64 indices of
     *    at::max_pool2d_with_indices (its call with return_indices=True);
     *  AVG: at::avg_pool2d(count_include_pad = flags & DT_KPOOL_COUNT_PAD,
     *    divisor_override = ints[8] when flags & DT_KPOOL_DIVISOR, else None);
     *  ADAPTIVE_AVG: at::adaptive_avg_pool2d(output_size ints[0..2));
     *  ADAPTIVE_MAX / ADAPTIVE_MAX_INDICES: the values / int64 indices of
     *    at::adaptive_max_pool2d(output_size ints[0..2)).
     * Result dtype `dtype`. */
    DT_K_POOL2D,
    /* out = masked_scatter of in[0] (input), in[1] (bool mask), in[2]
     * (source), result dtype `dtype`. Without DT_KMS_REGION it is
     * at::masked_scatter(in[0], in[1], in[2]) (both broadcast). With it the
     * device computes the region (start, shape) (ndim dims) of the result of
     * global shape gshape (gndim dims): in[0] is the part of the input that
     * broadcasts to that region, in[1] the whole mask (broadcastable to
     * gshape) and in[2] the whole source; each True element of the region
     * takes source.flatten()[r] where r is its rank among the True elements
     * of the whole broadcast mask in row-major order (torch's semantics).
     * DT_KMS_ZERO_INPUT puts zeros where the input would show, and
     * DT_KMS_ZERO_SOURCE zeros where the source would (the pieces of a
     * Partial result that are not this device's). Fewer source elements than
     * True elements in the whole mask fail as ATen's "Number of elements of
     * source < number of ones in mask". */
    DT_K_MASKED_SCATTER,
    DT_K_COUNT
} dt__kop;

enum {
    DT_KF_REVERSED = 1 << 0,
    DT_KF_KEEPDIM = 1 << 1,
    DT_KF_ALL = 1 << 2,
    /* Set by the core (the window's reuse pass, src/core/passes/reuse.c):
     * the kernel's op computes each output element from the inputs'
     * elements at its position, so it may write into in[0]'s buffer. */
    DT_KF_REUSE = 1 << 29,
    /* Set by the core at run time, on a DT_KF_REUSE kernel only: nothing
     * else will ever read in[0], so an elementwise kernel may write its
     * result into in[0]'s buffer when the backend can see that buffer is
     * unshared and of the result's dtype and shape. Results must be
     * bit-identical either way; a backend may ignore it. Both bits are high
     * so that no family's own flags collide with them. */
    DT_KF_INPLACE = 1 << 30
};

/* DT_K_REDUCE modes (sub >> 8). */
enum { DT_KR_PLAIN = 0, DT_KR_INDICES, DT_KR_GLOBAL_INDEX, DT_KR_COMBINE, DT_KR_SUM_DIV };
/* DT_K_LINALG sub codes. */
enum { DT_KL_MM = 0, DT_KL_BMM, DT_KL_OUTER, DT_KL_LINEAR, DT_KL_EINSUM };
/* Sub codes of DT_K_VIEW. "region" means the strided selection
 * in[0][start[d] : start[d] + step[d] * shape[d] : step[d]] for d < ndim
 * (shape[d] elements per dim, step[d] >= 1). */
typedef enum dt__kview {
    /* out = in[0].reshape(shape[0..ndim)) (same numel). */
    DT_KV_RESHAPE = 0,
    /* out = in[0].permute(ints[0..ndim)). */
    DT_KV_PERMUTE,
    /* out = in[0].expand(shape[0..ndim)) (torch expand rules). */
    DT_KV_EXPAND,
    /* out = region of in[0], reshaped to gshape[0..gndim). */
    DT_KV_STRIDED,
    /* out = in[0] with its region := in[1].reshape(gshape[0..gndim))
     * broadcast to the region and cast to in[0]'s dtype (gndim == ndim). */
    DT_KV_SET_TENSOR,
    /* out = in[0] with its region filled with `scalar` (fill_ semantics). */
    DT_KV_SET_SCALAR,
    /* out = in[0][:, ..., :, in[1]] with `dim` full slices before the
     * index: torch advanced indexing by one int64 tensor of any shape
     * (negative indices wrap; out of range is a kernel error). */
    DT_KV_INDEX,
    /* out = in[0] with in[0][(:,) * dim, in[1]] := scalar (index_put_). */
    DT_KV_INDEX_FILL,
    /* out = in[0].masked_fill(in[1].reshape(gshape[0..gndim)), scalar). */
    DT_KV_MASKED_FILL,
    /* out = cat(x_i, dim) over in[0..n_in) where x_i is in[i] cast to `dtype`
     * and, when in[i] has ndim - 1 dims, unsqueezed at `dim` first (stack). */
    DT_KV_CAT,
    /* out = tril(in[0], ints[0]) / triu(in[0], ints[0]). */
    DT_KV_TRIL,
    DT_KV_TRIU,
    /* out = flip(in[0], dims whose bit is set in dims_mask). */
    DT_KV_FLIP,
    /* out = roll(in[0], shifts ints[0..nints), dims start[0..nints)); with
     * nints == 0: roll of the flattened tensor by ints[0], shape restored. */
    DT_KV_ROLL,
    /* out = in[0].repeat(ints[0..nints)). */
    DT_KV_REPEAT,
    /* n_in == 1: out = in[0].repeat_interleave(ints[0], dim);
     * n_in == 2: out = in[0].repeat_interleave(in[1], dim, output_size = ints[1]). */
    DT_KV_REPEAT_INTERLEAVE,
    DT_KV_COUNT
} dt__kview;
/* Flags of the elementwise family's kernels (high bits, so that other
 * families' flags never collide with them). */
enum {
    DT_KF_EW_X_SCALAR = 1 << 16,   /* WHERE: x is `scalar` */
    DT_KF_EW_Y_SCALAR = 1 << 17,   /* WHERE: y is `scalar2` */
    DT_KF_EW_MIN_SCALAR = 1 << 18, /* CLAMP: min is `scalar` */
    DT_KF_EW_MIN_TENSOR = 1 << 19, /* CLAMP: min is an input */
    DT_KF_EW_MAX_SCALAR = 1 << 20, /* CLAMP: max is `scalar2` */
    DT_KF_EW_MAX_TENSOR = 1 << 21  /* CLAMP: max is an input */
};

/* Flags and sub codes of the nn kernels (DT_K_ACTIVATION .. DT_K_SDPA). */
enum {
    DT_KNN_WEIGHT = 1 << 0,  /* NORM: a weight input follows */
    DT_KNN_BIAS = 1 << 1,    /* NORM, CONV2D: a bias input follows */
    DT_KNN_DEFAULT = 1 << 2, /* NORM (RMS): default eps; SDPA: default scale */
    DT_KNN_MASKED = 1 << 3,  /* EMBEDDING: vocab-sharded masked lookup */
    DT_KNN_SCALES = 1 << 4,  /* INTERPOLATE: scale factors, not sizes */
    DT_KNN_ALIGN = 1 << 5,   /* INTERPOLATE: align_corners=True */
    DT_KNN_CAUSAL = 1 << 6,  /* SDPA: is_causal */
    DT_KNN_MASK = 1 << 7,    /* SDPA: attn_mask input */
    DT_KNN_DTYPE = 1 << 8,   /* SOFTMAX: cast to `dtype` first */
    /* SDPA: one ring-attention step (inputs q, kv packed, [accumulator]) and
     * the final extraction (input the accumulator); torch_attention.cpp says
     * what each holds. */
    DT_KNN_RING = 1 << 9,
    DT_KNN_RING_FINAL = 1 << 10
};
enum { DT_KNORM_LAYER = 0, DT_KNORM_RMS, DT_KNORM_GROUP, DT_KNORM_BATCH };

/* DT_K_RAND sub codes. UNIFORM (0, what every RAND kernel without a sub
 * code is) draws rand as documented at DT_K_RAND; INT draws
 * torch.randint(scalar.i, scalar2.i, gshape, generator, dtype=`dtype`) from
 * the generator seeded with `seed` (at::randint in `dtype` itself), then
 * takes the region (`start`, `shape`). */
enum { DT_KRAND_UNIFORM = 0, DT_KRAND_INT = 1 };
/* DT_K_SORT sub codes and flags (flags in high bits, clear of DT_KF_*). */
enum { DT_KS_SORT_VALUES = 0, DT_KS_SORT_INDICES, DT_KS_TOPK_VALUES, DT_KS_TOPK_INDICES, DT_KS_CUMSUM };
enum {
    DT_KS_DESCENDING = 1 << 24, /* sort */
    DT_KS_STABLE = 1 << 25,     /* sort */
    DT_KS_LARGEST = 1 << 26,    /* topk */
    DT_KS_SORTED = 1 << 27,     /* topk */
    DT_KS_DTYPE = 1 << 28       /* cumsum: dtype= given */
};

/* DT_K_POOL2D sub codes and flags (flags in high bits, clear of DT_KF_* and
 * DT_KNN_*). */
enum {
    DT_KPOOL_MAX = 0,
    DT_KPOOL_MAX_WI,
    DT_KPOOL_MAX_WI_INDICES,
    DT_KPOOL_AVG,
    DT_KPOOL_ADAPTIVE_AVG,
    DT_KPOOL_ADAPTIVE_MAX,
    DT_KPOOL_ADAPTIVE_MAX_INDICES,
    DT_KPOOL_COUNT
};
enum {
    DT_KPOOL_CEIL = 1 << 12,      /* ceil_mode=True */
    DT_KPOOL_COUNT_PAD = 1 << 13, /* AVG: count_include_pad=True */
    DT_KPOOL_DIVISOR = 1 << 14    /* AVG: divisor_override = ints[8] */
};
/* DT_K_MASKED_SCATTER flags. */
enum {
    DT_KMS_REGION = 1 << 12,     /* a region of the result, not all of it */
    DT_KMS_ZERO_INPUT = 1 << 13, /* zeros where the input shows */
    DT_KMS_ZERO_SOURCE = 1 << 14 /* zeros where the source goes */
};

/* Attributes of one kernel. Only the fields the op documents are meaningful. */
typedef struct dt__kattr {
    int32_t dtype;      /* dt_dtype of the output */
    int32_t sub;        /* dt_binary_op for BINARY / BINARY_SCALAR */
    int32_t flags;      /* DT_KF_* */
    int32_t ndim;       /* entries of shape/start */
    int32_t dim;        /* CAT */
    int32_t gndim;      /* entries of gshape */
    uint64_t dims_mask; /* SUM */
    uint64_t seed;      /* RAND/RANDN */
    int64_t shape[DT_MAX_NDIM];
    int64_t start[DT_MAX_NDIM];
    int64_t gshape[DT_MAX_NDIM];
    dt_scalar scalar; /* FULL, BINARY_SCALAR */
    double f[3];      /* ARANGE start, end, step */
    const char *text; /* LINALG EINSUM: the equation (interned, never freed) */
    /* views family (DT_K_VIEW): per-dim steps of a region. */
    int64_t step[DT_MAX_NDIM];
    int32_t nints;
    dt_scalar scalar2; /* EW_BINARY alpha, WHERE y, CLAMP max */
    /* An int list whose meaning the kernel op states (views: nints entries;
     * nn kernels: their integer arguments). */
    int64_t ints[2 * DT_MAX_NDIM];
} dt__kattr;

typedef struct dt__backend {
    const char *name;

    /* Runs kernel `kop` on `n_in` input impls; on success *out is a new impl.
     * Called on a worker thread. */
    dt_status (*run)(int kop, const dt__kattr *a, void *const *in, int n_in, void **out, char *err,
                     size_t errlen);
    /* Frees an impl. NULL is ignored. */
    void (*free)(void *impl);
    /* Bytes of memory the impl's elements occupy (numel * dtype size). */
    size_t (*nbytes)(const void *impl);
    /* A new impl holding a copy of row-major host data. */
    dt_status (*from_host)(dt_dtype dtype, int ndim, const int64_t *shape, const void *data, void **out,
                           char *err, size_t errlen);
    /* Copies an impl into row-major host memory of exactly `nbytes`. */
    dt_status (*to_host)(const void *impl, void *buf, size_t nbytes, char *err, size_t errlen);
    /* Optional (NULL when unsupported). Takes ownership of a DLManagedTensor
     * in every case; *out is a new impl with a private copy of its values, and
     * dtype/ndim/shape describe it. */
    dt_status (*from_dlpack)(void *dl_managed, void **out, dt_dtype *dtype, int *ndim, int64_t *shape,
                             char *err, size_t errlen);
    /* Optional. A new DLManagedTensor viewing `impl` (keeps it alive). */
    dt_status (*to_dlpack)(const void *impl, void **out_dl_managed, char *err, size_t errlen);
    /* Optional. Calls a DLManagedTensor's deleter. */
    void (*dlpack_delete)(void *dl_managed);
    /* Builds a new full tensor of `shape` (ndim dims) and `dtype` from `n`
     * pieces: piece i is placed at offsets starts[i*ndim .. i*ndim+ndim) with
     * its own shape. Without `accumulate` the pieces do not overlap and each
     * is copied in; with it the result starts at zero and pieces are added in
     * index order. When n == 1 and the piece covers the whole tensor the
     * result must still be a fresh copy. */
    dt_status (*assemble)(dt_dtype dtype, int ndim, const int64_t *shape, int n, void *const *pieces,
                          const int64_t *starts, int accumulate, void **out, char *err, size_t errlen);
    /* Called on a worker thread when it starts and again (before its next
     * kernels) whenever the number of worker threads alive in the process
     * changes, with that number, so the backend can bound its own intra-op
     * threads. May be NULL. */
    void (*worker_init)(dt_device_type type, int64_t device_id, int live_workers);
    /* torch's current default float dtype, or DT_FLOAT32. May be NULL. */
    dt_dtype (*default_dtype)(void);
    /* Optional. 1 when the two impls share their element storage (a kernel
     * wrote in place), so memory is accounted once. */
    int (*same_storage)(const void *a, const void *b);
    /* Optional. Returns cached free memory to the system. */
    void (*empty_cache)(void);
    /* Optional. How many devices of `type` the backend can run kernels on:
     * ids 0 .. n-1 are usable; a negative n means any id (CPU devices are
     * virtual). NULL means CPU only. Any thread. */
    int64_t (*device_count)(dt_device_type type);
    /* Optional. Bytes of cached free memory that empty_cache would return
     * now. Any thread. */
    int64_t (*cached_bytes)(void);

    /* ---- Devices, streams and events (api_version >= 2) ----
     *
     * The interface version this table was written against: 0 or 1 for a
     * table without the slots below (the core then ignores them), 2 for
     * DT_BACKEND_API_VERSION. Every slot below is optional: a NULL slot
     * means the core's host implementation (a worker thread per stream;
     * an event is "kernel n of stream s has completed", waited on with the
     * producing stream's mutex and condition variable, streams.c).
     *
     * Streams: a device (type, id) has one stream per kind (0 compute, 1
     * communication). stream_new makes the backend's context for one
     * (controller thread); stream_enter is called on the stream's worker
     * thread before its first kernel (a backend whose current stream is
     * thread-local, as ATen's CUDA stream, binds it there, so `run` needs no
     * context); stream_free is called after the worker has stopped.
     *
     * Events: with event_new and event_record set, the worker of a stream
     * records a new event after each kernel that has an output (the
     * backend should pool them), before the core publishes the kernel as
     * completed on the host. A kernel on another stream that reads that
     * output first waits for the host completion (for an asynchronous
     * backend: the launch and the record), then calls event_wait on its own
     * stream (CUDA: cudaStreamWaitEvent), so the device queue, not the
     * thread, waits for the data. event_query says 1 once the work before
     * the record has finished; event_free is called when the blob dies (any
     * thread). */
    int api_version;
    dt_status (*stream_new)(dt_device_type type, int64_t device_id, int kind, void **ctx, char *err,
                            size_t errlen);
    void (*stream_enter)(void *ctx);
    void (*stream_free)(void *ctx);
    dt_status (*event_new)(void *stream_ctx, void **ev);
    dt_status (*event_record)(void *ev, void *stream_ctx);
    dt_status (*event_wait)(void *stream_ctx, void *ev);
    int (*event_query)(void *ev);
    void (*event_free)(void *ev);
} dt__backend;

/* The version of the device/stream/event slots above. */
#define DT_BACKEND_API_VERSION 2

/* Calls every registered backend's empty_cache. */
void dt__backends_empty_cache(void);
/* The sum of the registered backends' cached_bytes. */
int64_t dt__backends_cached_bytes(void);

/* The pure-C reference backend (bool/int32/int64/float32/float64 storage;
 * arithmetic on the non-bool ones), always built. */
extern const dt__backend dt__backend_ref;

/* Makes a backend available by name. The LibTorch shim registers itself from
 * a constructor when libdtorch is loaded, so the core never names it. At most
 * 8 backends. */
void dt__backend_register(const dt__backend *backend);
/* Looks a backend up by name; NULL picks the default: "torch" when
 * registered, else "ref". NULL when unknown. */
const dt__backend *dt__backend_find(const char *name);

#ifdef __cplusplus
}
#endif

#endif /* DT_BACKEND_H */
