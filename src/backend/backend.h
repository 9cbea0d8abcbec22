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

/* Kernel ops: append-only; names in dt__kop_name (core/kernel.c). */
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
     * seeded with `seed`, then cast to `dtype` if needed. */
    DT_K_RAND,
    DT_K_RANDN,
    /* out = in[0] (sub) in[1] with broadcasting; sub is a dt_binary_op;
     * result dtype `dtype`. */
    DT_K_BINARY,
    /* out = in[0] (sub) scalar, or scalar (sub) in[0] when flags & DT_KF_REVERSED;
     * result dtype `dtype`. */
    DT_K_BINARY_SCALAR,
    /* out = -in[0] */
    DT_K_NEG,
    /* out = in[0] @ in[1] (2-D). */
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
    DT_K_COUNT
} dt__kop;

enum {
    DT_KF_REVERSED = 1 << 0,
    DT_KF_KEEPDIM = 1 << 1,
    DT_KF_ALL = 1 << 2
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
    DT_KNN_DTYPE = 1 << 8    /* SOFTMAX: cast to `dtype` first */
};
enum { DT_KNORM_LAYER = 0, DT_KNORM_RMS, DT_KNORM_GROUP, DT_KNORM_BATCH };

/* Attributes of one kernel. Only the fields the op documents are meaningful. */
typedef struct dt__kattr {
    int32_t dtype; /* dt_dtype of the output */
    int32_t sub;   /* dt_binary_op for BINARY / BINARY_SCALAR */
    int32_t flags; /* DT_KF_* */
    int32_t ndim;  /* entries of shape/start */
    int32_t dim;   /* CAT */
    int32_t gndim; /* entries of gshape */
    uint64_t dims_mask; /* SUM */
    uint64_t seed;      /* RAND/RANDN */
    int64_t shape[DT_MAX_NDIM];
    int64_t start[DT_MAX_NDIM];
    int64_t gshape[DT_MAX_NDIM];
    dt_scalar scalar; /* FULL, BINARY_SCALAR */
    double f[3];      /* ARANGE start, end, step */
    int64_t ints[2 * DT_MAX_NDIM]; /* nn kernels: integer arguments */
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
} dt__backend;

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
