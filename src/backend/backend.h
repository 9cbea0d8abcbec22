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
    DT_K_COUNT
} dt__kop;

enum {
    DT_KF_REVERSED = 1 << 0,
    DT_KF_KEEPDIM = 1 << 1,
    DT_KF_ALL = 1 << 2
};

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
    dt_scalar scalar2; /* EW_BINARY alpha, WHERE y, CLAMP max */
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
