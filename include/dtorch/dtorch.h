/*
 * dtorch — distributed tensors driven from one thread.
 *
 * This header is the whole public face of libdtorch. A client thread builds
 * distributed tensors (a global shape, a dtype, a device mesh and one placement
 * per mesh dimension) and records operations on them; every call returns at
 * once. A controller thread per graph lowers the recorded operations into
 * per-device kernels, and one worker thread per device runs them. Only value
 * reads wait.
 *
 *     dt_graph *g;
 *     dt_mesh *mesh;
 *     int64_t ids[] = {0, 1}, mshape[] = {2}, shape[] = {4, 3};
 *     dt_placement shard0[] = {{DT_PLACEMENT_SHARD, 0}};
 *     dt_graph_create(NULL, &g);
 *     dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &mesh);
 *     dt_tensor *x = dt_rand(g, DT_FLOAT32, 2, shape, mesh, shard0);
 *     dt_tensor *y = dt_binary_scalar(DT_BINARY_MUL, x, dt_scalar_float(2.0), 0);
 *     float out[12];
 *     dt_tensor_read(y, out, sizeof out);   // the only wait
 *     dt_tensor_release(y); dt_tensor_release(x);
 *     dt_mesh_release(mesh); dt_graph_release(g);
 *
 * Conventions (see STYLE.md):
 *  - Functions that build a tensor return a new reference, or NULL on failure
 *    with dt_last_status()/dt_last_error() describing why. Nothing is enqueued
 *    when a call fails.
 *  - Other fallible functions return dt_status (0 = DT_OK, negative = error);
 *    the detail is in the calling thread's dt_last_error().
 *  - Every handle is reference counted; *_release accepts NULL.
 *  - Unless stated, functions may be called from any thread. Calls on one graph
 *    from several threads are serialised by the graph's queue in call order.
 */
#ifndef DTORCH_DTORCH_H
#define DTORCH_DTORCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define DT_API __declspec(dllexport)
#else
#define DT_API __attribute__((visibility("default")))
#endif

/* ---------------------------------------------------------------- limits */

#define DT_MAX_NDIM 8      /* tensor rank */
#define DT_MAX_MESH_NDIM 4 /* device mesh rank */
#define DT_MAX_DIM_NAME 32 /* bytes of a mesh dimension name, NUL included */

/* ---------------------------------------------------------------- status */

/* X(name, value, message): append-only. */
#define DT_STATUS_MAP(X)                                                      \
    X(OK, 0, "ok")                                                             \
    X(EINVAL, -1, "invalid argument")                                          \
    X(ETYPE, -2, "wrong type")                                                 \
    X(EINDEX, -3, "index out of range")                                        \
    X(EPLACEMENT, -4, "placements not accepted by the operator")               \
    X(EKERNEL, -5, "a kernel failed on a device")                              \
    X(ENOMEM, -6, "out of memory")                                             \
    X(ESHUTDOWN, -7, "the graph is shut down")                                 \
    X(EUNSUPPORTED, -8, "not supported")                                       \
    X(ETIMEDOUT, -9, "timed out")                                              \
    X(EBACKEND, -10, "backend error")                                          \
    X(EINTERNAL, -11, "internal error")                                        \
    X(ESHAPE, -12, "shapes do not match")                                      \
    X(EOP, -13, "the operation does not accept these inputs")

typedef int dt_status;
enum {
#define DT__STATUS_ENUM(name, value, msg) DT_##name = value,
    DT_STATUS_MAP(DT__STATUS_ENUM)
#undef DT__STATUS_ENUM
};

/* A static description of a status code; never NULL. */
DT_API const char *dt_status_str(dt_status status);
/* The calling thread's last error message ("" when none). Borrowed: valid
 * until the thread's next dtorch call. */
DT_API const char *dt_last_error(void);
/* The status of the calling thread's last failed call (DT_OK when none). */
DT_API dt_status dt_last_status(void);
/* Clears the calling thread's error. */
DT_API void dt_clear_error(void);

/* ---------------------------------------------------------------- dtypes */

typedef enum dt_dtype {
    DT_BOOL = 0,
    DT_UINT8,
    DT_INT8,
    DT_INT16,
    DT_INT32,
    DT_INT64,
    DT_FLOAT16,
    DT_BFLOAT16,
    DT_FLOAT32,
    DT_FLOAT64,
    DT_DTYPE_COUNT
} dt_dtype;

/* Bytes per element; 0 for an invalid dtype. */
DT_API size_t dt_dtype_size(dt_dtype dtype);
/* torch's name without the prefix ("float32"); "invalid" when out of range. */
DT_API const char *dt_dtype_name(dt_dtype dtype);
DT_API int dt_dtype_is_floating(dt_dtype dtype);

/* A Python-style scalar operand: the kind decides type promotion as in torch
 * (an int scalar never promotes a float tensor; a float scalar turns an
 * integer tensor into the default float dtype). */
typedef enum dt_scalar_kind { DT_SCALAR_BOOL = 0, DT_SCALAR_INT, DT_SCALAR_FLOAT } dt_scalar_kind;
typedef struct dt_scalar {
    int32_t kind; /* dt_scalar_kind */
    int64_t i;    /* value when kind is BOOL or INT */
    double f;     /* value when kind is FLOAT */
} dt_scalar;

static inline dt_scalar dt_scalar_int(int64_t v) {
    dt_scalar s = {DT_SCALAR_INT, v, (double)v};
    return s;
}
static inline dt_scalar dt_scalar_float(double v) {
    dt_scalar s = {DT_SCALAR_FLOAT, (int64_t)0, v};
    return s;
}
static inline dt_scalar dt_scalar_bool(int v) {
    dt_scalar s = {DT_SCALAR_BOOL, v ? 1 : 0, v ? 1.0 : 0.0};
    return s;
}

/* Sets the float dtype that integer tensors promote to with a float scalar
 * (torch's default dtype). DT_FLOAT32 until set. Process-wide. */
DT_API dt_status dt_set_default_dtype(dt_dtype dtype);
DT_API dt_dtype dt_get_default_dtype(void);

/* ---------------------------------------------------------------- meshes */

typedef enum dt_device_type { DT_DEVICE_CPU = 0, DT_DEVICE_CUDA = 1 } dt_device_type;

/* An immutable N-D array of device ids of one device type, with a name per
 * dimension. Compared by value. CPU ids are virtual devices: each id is an
 * independent device with its own worker thread. */
typedef struct dt_mesh dt_mesh;

/* Creates a mesh. `shape` has `ndim` entries (each >= 1), `ids` has their
 * product, row-major, all distinct and >= 0. `dim_names` may be NULL (names
 * "dim0", "dim1", ... are given) or hold `ndim` distinct non-empty strings
 * shorter than DT_MAX_DIM_NAME. *out is a new reference. */
DT_API dt_status dt_mesh_create(dt_device_type type, int ndim, const int64_t *shape, const int64_t *ids,
                                const char *const *dim_names, dt_mesh **out);
DT_API void dt_mesh_retain(dt_mesh *mesh);
DT_API void dt_mesh_release(dt_mesh *mesh);
DT_API dt_device_type dt_mesh_device_type(const dt_mesh *mesh);
DT_API int dt_mesh_ndim(const dt_mesh *mesh);
/* Size of dimension `dim`, or the number of devices when dim < 0. */
DT_API int64_t dt_mesh_size(const dt_mesh *mesh, int dim);
/* Borrowed arrays, valid while the mesh lives. */
DT_API const int64_t *dt_mesh_shape(const dt_mesh *mesh);
DT_API const int64_t *dt_mesh_ids(const dt_mesh *mesh);
DT_API const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim);
/* 1 when equal by value (type, shape, ids, names), else 0. */
DT_API int dt_mesh_equal(const dt_mesh *a, const dt_mesh *b);

/* ------------------------------------------------------------ placements */

typedef enum dt_placement_kind {
    DT_PLACEMENT_REPLICATE = 0,
    DT_PLACEMENT_SHARD = 1,
    DT_PLACEMENT_PARTIAL = 2
} dt_placement_kind;

/* One per mesh dimension. `dim` is the tensor dimension of a Shard (negative
 * values count from the end and are normalised when applied). A mesh
 * dimension of size 1 is always stored as Replicate. */
typedef struct dt_placement {
    int32_t kind; /* dt_placement_kind */
    int32_t dim;
} dt_placement;

/* ---------------------------------------------------------------- graphs */

/* A graph is one controller thread and its worker threads (one per device
 * used). Several graphs run concurrently. */
typedef struct dt_graph dt_graph;

typedef struct dt_graph_options {
    /* "torch" (LibTorch, the default when built in) or "ref" (a small pure-C
     * float32 backend used by the C tests). NULL means the default. */
    const char *backend;
} dt_graph_options;

/* Starts a graph's controller. Workers start on first use of a device.
 * `options` may be NULL. *out is a new reference. */
DT_API dt_status dt_graph_create(const dt_graph_options *options, dt_graph **out);
DT_API void dt_graph_retain(dt_graph *graph);
/* Drops a reference. The last one shuts the graph down (see
 * dt_graph_shutdown). Tensors hold references to their graph. */
DT_API void dt_graph_release(dt_graph *graph);
/* Finishes all work issued so far, then stops and joins the graph's threads.
 * Idempotent. Afterwards ops on the graph fail with DT_ESHUTDOWN, while
 * releasing tensors and meshes stays safe. Must not be called from a worker. */
DT_API dt_status dt_graph_shutdown(dt_graph *graph);
/* Waits until all work issued on the graph so far has run. Returns DT_EKERNEL
 * never: kernel errors surface on value reads of the affected tensors. */
DT_API dt_status dt_graph_sync(dt_graph *graph);
/* Name of the graph's backend ("torch" or "ref"). Borrowed. */
DT_API const char *dt_graph_backend(const dt_graph *graph);

/* Records where the calling thread's next ops come from, so kernel errors can
 * name the user's source line. `file` is copied (interned); NULL clears it. */
DT_API void dt_set_call_site(const char *file, int line);

/* Seeds dtorch's random factories (process-wide). A random tensor's values
 * depend only on the seed, the number of random calls since seeding and its
 * global shape and dtype, never on mesh or placements. */
DT_API void dt_manual_seed(uint64_t seed);

/* --------------------------------------------------------------- tensors */

/* A client-side symbol: global shape, dtype, mesh, placements. It holds no
 * data; the data lives in per-device blobs owned by the graph's controller.
 * Metadata getters never wait. */
typedef struct dt_tensor dt_tensor;

DT_API void dt_tensor_retain(dt_tensor *t);
/* Drops a reference; the last one tells the controller that the values may be
 * freed once the kernels that read them have run. */
DT_API void dt_tensor_release(dt_tensor *t);

DT_API dt_dtype dt_tensor_dtype(const dt_tensor *t);
DT_API int dt_tensor_ndim(const dt_tensor *t);
DT_API const int64_t *dt_tensor_shape(const dt_tensor *t); /* borrowed, ndim entries */
DT_API int64_t dt_tensor_numel(const dt_tensor *t);
DT_API dt_mesh *dt_tensor_mesh(const dt_tensor *t);                /* borrowed */
DT_API const dt_placement *dt_tensor_placements(const dt_tensor *t); /* borrowed, mesh ndim entries */
DT_API dt_graph *dt_tensor_graph(const dt_tensor *t);              /* borrowed */
/* A process-unique id of the symbol. */
DT_API uint64_t dt_tensor_id(const dt_tensor *t);

/* ------------------------------------------------------------- factories */
/* Each factory takes the global shape (`ndim` entries >= 0), the mesh and
 * `dt_mesh_ndim(mesh)` placements (NULL = all Replicate). A Partial placement
 * puts the value on the first coordinate of that mesh dim and zeros
 * elsewhere. All return a new reference or NULL. */

/* Copies `nbytes` of row-major host data (must equal numel * dtype size) at
 * the call; the buffer may be reused at once. */
DT_API dt_tensor *dt_tensor_from_buffer(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape,
                                        const void *data, size_t nbytes, dt_mesh *mesh,
                                        const dt_placement *placements);
/* Distributes a DLPack tensor (a DLManagedTensor *, e.g. from a PyCapsule
 * "dltensor"). Ownership of `dl_managed` passes to dtorch in every case, even
 * on failure. Its values are snapshotted at the call. Requires a backend with
 * DLPack support ("torch"). */
DT_API dt_tensor *dt_tensor_from_dlpack(dt_graph *g, void *dl_managed, dt_mesh *mesh,
                                        const dt_placement *placements);
DT_API dt_tensor *dt_full(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_scalar value,
                          dt_mesh *mesh, const dt_placement *placements);
/* Uninitialised values (in practice zeros). */
DT_API dt_tensor *dt_empty(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                           const dt_placement *placements);
/* Uniform [0, 1) and standard normal; floating dtypes only. */
DT_API dt_tensor *dt_rand(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                          const dt_placement *placements);
DT_API dt_tensor *dt_randn(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                           const dt_placement *placements);
/* 1-D values start, start+step, ... below `end` (above when step < 0), sized
 * as torch.arange sizes them. */
DT_API dt_tensor *dt_arange(dt_graph *g, dt_dtype dtype, double start, double end, double step, dt_mesh *mesh,
                            const dt_placement *placements);

/* ------------------------------------------------------------------- ops */
/* Ops validate their arguments and placements at the call, infer the output
 * metadata, enqueue one record and return a new reference. A placement
 * combination an op cannot compute without communication fails with
 * DT_EPLACEMENT and a message naming the op, the placements given, the
 * accepted combinations and the redistribute() that fixes it. Both tensors of
 * a binary op must belong to the same graph and mesh. */

typedef enum dt_binary_op { DT_BINARY_ADD = 0, DT_BINARY_SUB, DT_BINARY_MUL, DT_BINARY_DIV, DT_BINARY_COUNT } dt_binary_op;

/* a op b with torch broadcasting and type promotion (DIV is true division).
 * Per mesh dim it accepts (R,R)->R, (S,S)->S on the same broadcast dim,
 * (S,R)->S and (R,S)->S (the Replicate side is sliced locally), and for
 * Partial: ADD/SUB (P,P)->P, MUL (P,R)->P and (R,P)->P, DIV (P,R)->P. */
DT_API dt_tensor *dt_binary(dt_binary_op op, dt_tensor *a, dt_tensor *b);
/* a op s, or s op a when `scalar_first` is nonzero. Partial inputs are
 * accepted by MUL, and by DIV when the tensor is the dividend. */
DT_API dt_tensor *dt_binary_scalar(dt_binary_op op, dt_tensor *a, dt_scalar s, int scalar_first);
/* -a; keeps every placement. */
DT_API dt_tensor *dt_neg(dt_tensor *a);
/* 2-D a[M,K] @ b[K,N]. Per mesh dim: (R,R)->R, (S0,R)->S0, (R,S1)->S1,
 * (S1,S0)->P, (S1,R)->P, (R,S0)->P, (P,R)->P, (R,P)->P. */
DT_API dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b);
/* Sum over `dims` (`ndims` entries, negative allowed; ndims < 0 means all
 * dims, and so does ndims == 0). Booleans and integers sum to int64. A reduced Shard becomes Partial;
 * Partial stays Partial. */
DT_API dt_tensor *dt_sum(dt_tensor *a, int ndims, const int64_t *dims, int keepdim);
/* Moves `a` to `placements` on `mesh` (NULL = a's mesh). Per mesh dim:
 * S->R all-gather, P->R all-reduce, P->S reduce-scatter, S(i)->S(j)
 * all-to-all, R->S local slice, R->P keep on the first coordinate, S->P via R;
 * nested shards (several mesh dims on one tensor dim) included. Moves to
 * another mesh are not supported yet (DT_EUNSUPPORTED). */
DT_API dt_tensor *dt_redistribute(dt_tensor *a, dt_mesh *mesh, const dt_placement *placements);

/* ------------------------------------------------------ nn functional */
/* torch.nn.functional's operators (inference: no autograd). Like every op
 * they validate at the call, infer the output and return a new reference or
 * NULL. All-Replicate inputs are always accepted; placements are matched per
 * mesh dim as stated per function ("S(d)" a shard of tensor dim d, "P"
 * Partial). Inputs given as NULL are absent (torch's None). Results on a
 * one-device mesh equal eager torch's bit for bit; shard-only results are
 * exact except where a function says otherwise; Partial results are sums. */

typedef enum dt_activation_kind {
    DT_ACT_RELU = 0,
    DT_ACT_GELU,       /* approximate="none" */
    DT_ACT_GELU_TANH,  /* approximate="tanh" */
    DT_ACT_SILU,
    DT_ACT_LEAKY_RELU, /* param = negative_slope */
    DT_ACT_ELU,        /* param = alpha */
    DT_ACT_SIGMOID,
    DT_ACT_TANH,
    DT_ACT_COUNT
} dt_activation_kind;

/* act(x) elementwise; `param` as noted on the kind (ignored otherwise).
 * Floating dtypes only, except RELU (integers too, not bool) and
 * SIGMOID/TANH (integers and bool give the default float dtype).
 * Per mesh dim: R->R, S(d)->S(d); Partial is rejected (not linear). Shards
 * of GELU, GELU_TANH, SILU, ELU and SIGMOID may differ from the unsharded
 * result in the last bit: ATen's CPU kernels compute a vectorised body and a
 * scalar tail that round differently, and a shard moves elements between
 * the two. RELU, LEAKY_RELU and TANH are exact. */
DT_API dt_tensor *dt_activation(dt_activation_kind kind, dt_tensor *x, double param);

/* softmax (log_softmax when `log`) over `dim`; `dtype` < 0 keeps x's dtype,
 * else x is cast to it first (torch's dtype=). Floating dtypes only.
 * Per mesh dim: R->R, S(d)->S(d) for d != dim; a shard of `dim` and Partial
 * are rejected. */
DT_API dt_tensor *dt_softmax(dt_tensor *x, int dim, int log, int dtype);

/* layer_norm over the last `nnorm` dims, which must equal
 * `normalized_shape`; `weight`/`bias` (may be NULL) have that shape.
 * Per mesh dim: x R->R or S(d)->S(d) for a d before the normalized dims;
 * weight and bias Replicate; Partial rejected. */
DT_API dt_tensor *dt_layer_norm(dt_tensor *x, int nnorm, const int64_t *normalized_shape, dt_tensor *weight,
                                dt_tensor *bias, double eps);
/* rms_norm: x * rsqrt(mean(x^2 over the normalized dims) + eps) * weight,
 * computed as torch 2.x does (half/bfloat16 upcast to float32, then cast
 * back before the weight). eps NAN means torch's default, the epsilon of
 * x's computation type (float32 for half/bfloat16). Placements as
 * layer_norm. */
DT_API dt_tensor *dt_rms_norm(dt_tensor *x, int nnorm, const int64_t *normalized_shape, dt_tensor *weight,
                              double eps);
/* group_norm of x [N, C, *] with C divisible by num_groups; weight/bias
 * [C] or NULL. Per mesh dim: x R->R or S(0)->S(0); weight and bias
 * Replicate; Partial rejected. */
DT_API dt_tensor *dt_group_norm(dt_tensor *x, int64_t num_groups, dt_tensor *weight, dt_tensor *bias,
                                double eps);
/* batch_norm in inference mode (running statistics, training=False) of
 * x [N, C, *]; running_mean/var required, weight/bias [C] or NULL.
 * Per mesh dim: x S(d)->S(d) for any d (the op is per channel); the [C]
 * inputs Replicate (sliced locally) or S(0) together with x S(1);
 * Partial rejected. */
DT_API dt_tensor *dt_batch_norm(dt_tensor *x, dt_tensor *running_mean, dt_tensor *running_var,
                                dt_tensor *weight, dt_tensor *bias, double momentum, double eps);

/* weight[indices]: indices int32/int64 of any shape, weight [V, D]; the
 * result has indices' shape + [D] and weight's dtype. Per mesh dim
 * (indices, weight): (R,R)->R, (S(d),R)->S(d), (R,S(1))->S(-1) (output's
 * last dim), (R,S(0))->P (vocab-parallel: each device looks up the indices
 * in its vocab range and gives zeros elsewhere), (R,P)->P. An index outside
 * [0, V) fails the kernel ("index out of range in self"), which surfaces as
 * a KernelError at the next read. */
DT_API dt_tensor *dt_embedding(dt_tensor *indices, dt_tensor *weight);

typedef enum dt_conv_padding {
    DT_CONV_PAD_EXPLICIT = 0, /* the padding array */
    DT_CONV_PAD_VALID,        /* torch's padding="valid" */
    DT_CONV_PAD_SAME          /* torch's padding="same" */
} dt_conv_padding;
/* conv2d of x [N, Cin, H, W] (or [Cin, H, W]) with weight
 * [Cout, Cin/groups, kH, kW] and bias [Cout] or NULL; stride, padding and
 * dilation have 2 entries each (padding read only for EXPLICIT). Per mesh
 * dim (x, weight, bias): (R,R,R)->R, (S(0),R,R)->S(0) (batch),
 * (R,S(0),S(0) or R)->S(1) (output channels, groups == 1 only); without
 * bias also (P,R)->P and (R,P)->P. Shards may differ from the unsharded
 * result in the last bits (the backend may pick other algorithms for other
 * sizes). */
DT_API dt_tensor *dt_conv2d(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation, int64_t groups,
                            dt_conv_padding padding_mode);

typedef enum dt_interp_mode {
    DT_INTERP_NEAREST = 0,
    DT_INTERP_NEAREST_EXACT,
    DT_INTERP_LINEAR,   /* 3-D input */
    DT_INTERP_BILINEAR, /* 4-D input */
    DT_INTERP_BICUBIC,  /* 4-D input */
    DT_INTERP_TRILINEAR, /* 5-D input */
    DT_INTERP_COUNT
} dt_interp_mode;
/* interpolate x [N, C, *spatial] (1 to 3 spatial dims) to `size` (one
 * entry per spatial dim) or by `scale_factors` (exactly one of the two is
 * non-NULL; the output size is trunc(in * scale) as ATen computes it and
 * the scales are passed on, as torch.nn.functional.interpolate does without
 * recompute_scale_factor). align_corners: -1 for None (False), 0 or 1; only
 * the linear modes take it. Per mesh dim: R->R, S(0)->S(0), S(1)->S(1),
 * P->P (interpolation is linear); spatial shards are rejected. Channel
 * shards of the linear modes may differ in the last bit (ATen vectorises
 * across channels). */
DT_API dt_tensor *dt_interpolate(dt_tensor *x, dt_interp_mode mode, const int64_t *size,
                                 const double *scale_factors, int align_corners);

typedef enum dt_pad_mode { DT_PAD_CONSTANT = 0, DT_PAD_REFLECT, DT_PAD_REPLICATE, DT_PAD_CIRCULAR, DT_PAD_COUNT } dt_pad_mode;
/* torch.nn.functional.pad: `npad` (even) amounts, last dim first
 * (left, right, top, bottom, ...); negative amounts crop in CONSTANT mode.
 * Per mesh dim: R->R, S(d)->S(d) for a dim that is not padded, P->P unless
 * the mode is CONSTANT with a nonzero value. */
DT_API dt_tensor *dt_pad(dt_tensor *x, int npad, const int64_t *pad, dt_pad_mode mode, double value);

/* dropout: with `training`, x * mask / (1 - p) with a Bernoulli(1 - p) mask
 * drawn from dtorch's random stream (dt_manual_seed) for the global shape,
 * so the values are the same whatever the mesh and placements; without, x
 * itself (a new reference to it). Floating dtypes. Per mesh dim: R->R,
 * S(d)->S(d), P->P (the mask is the same on every device). */
DT_API dt_tensor *dt_dropout(dt_tensor *x, double p, int training);

/* softmax(q @ k^T * scale + mask) @ v for q [..., L, E], k [..., S, E],
 * v [..., S, Ev] with equal leading (batch, head) dims; attn_mask (NULL,
 * bool: True keeps, or q's dtype: added) broadcasts to [..., L, S];
 * is_causal masks j > i (not with attn_mask); scale NAN means
 * 1/sqrt(E); dropout_p > 0 drops attention weights with a mask drawn like
 * dt_dropout's. LibTorch 1.13 computes it from ATen ops; 2.1+ uses the
 * fused at::scaled_dot_product_attention (when dropout_p == 0). Per mesh
 * dim: q, k, v (and a mask dim of full size) R or S(d) on a leading dim
 * (the same d) -> S(d); (R,R,P)->P (linear in v); shards of the sequence or
 * embedding dims and other Partials are rejected. */
DT_API dt_tensor *dt_scaled_dot_product_attention(dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *attn_mask,
                                                  double dropout_p, int is_causal, double scale);

/* ------------------------------------------------------- operator registry */

/* One user-facing operator: its torch name, its family, the placement
 * combinations it accepts per mesh dim, and whether it redistributes by
 * itself. docs/operators.md is generated from this table. */
typedef struct dt_op_doc {
    const char *name;
    const char *family;
    const char *signatures;
    int redistributes;
} dt_op_doc;

/* Number of registered operators. */
DT_API int dt_op_doc_count(void);
/* Operator i (0 <= i < count), or NULL. Static storage. */
DT_API const dt_op_doc *dt_op_doc_get(int i);

/* ------------------------------------------------------------ value reads */

/* A pending value: the result of a read or of a graph-wide sync. */
typedef struct dt_future dt_future;

/* Starts reading the full global value of `t`. Never waits. New reference or
 * NULL. */
DT_API dt_future *dt_tensor_fetch(dt_tensor *t);
/* A future that completes when all work issued on `g` so far has run. */
DT_API dt_future *dt_graph_sync_future(dt_graph *g);
/* Waits up to `timeout_ms` (< 0: without limit). DT_OK when ready,
 * DT_ETIMEDOUT otherwise. Ready includes failed. */
DT_API dt_status dt_future_wait(dt_future *f, int64_t timeout_ms);
DT_API int dt_future_is_ready(const dt_future *f);
/* Registers `fn(arg)` to be called once when the future becomes ready, on the
 * thread that completes it (or at once on the caller's thread if already
 * ready). Only one callback per future. */
DT_API dt_status dt_future_on_ready(dt_future *f, void (*fn)(void *arg), void *arg);
/* Waits, then copies the full row-major value into `buf` (`nbytes` must be
 * numel * dtype size). DT_EKERNEL with the failing op, device and call site
 * when a kernel the value depends on failed. */
DT_API dt_status dt_future_read(dt_future *f, void *buf, size_t nbytes);
/* Waits, then hands out the full value as a new DLManagedTensor (on the host
 * for CPU meshes). The caller owns it: pass it to a DLPack consumer or free
 * it with dt_dlpack_delete. */
DT_API dt_status dt_future_to_dlpack(dt_future *f, void **out_dl_managed);
/* Waits; the status of a sync future (DT_OK) or a fetch (DT_EKERNEL...). */
DT_API dt_status dt_future_status(dt_future *f);
DT_API void dt_future_release(dt_future *f);

/* Fetch + read in one blocking call. */
DT_API dt_status dt_tensor_read(dt_tensor *t, void *buf, size_t nbytes);
/* Calls the DLManagedTensor's deleter. NULL is ignored. */
DT_API void dt_dlpack_delete(void *dl_managed);

#ifdef __cplusplus
}
#endif

#endif /* DTORCH_DTORCH_H */
