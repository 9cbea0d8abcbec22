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

/* --------------------------------------------------------------- version */

/* The version of this header. dt_version() reports the library's: a program
 * built against one header and run with another library can compare them. */
#define DT_VERSION_MAJOR 0
#define DT_VERSION_MINOR 1
#define DT_VERSION_PATCH 0
#define DT__STR2(x) #x
#define DT__STR(x) DT__STR2(x)
#define DT_VERSION_STRING DT__STR(DT_VERSION_MAJOR) "." DT__STR(DT_VERSION_MINOR) "." DT__STR(DT_VERSION_PATCH)
/* major * 10000 + minor * 100 + patch: 0.1.0 is 100. */
#define DT_VERSION_NUMBER (DT_VERSION_MAJOR * 10000 + DT_VERSION_MINOR * 100 + DT_VERSION_PATCH)

/* The library's version, "MAJOR.MINOR.PATCH" (static storage). Any thread. */
DT_API const char *dt_version(void);
/* The library's DT_VERSION_NUMBER. Any thread. */
DT_API int dt_version_number(void);

/* ---------------------------------------------------------------- limits */

#define DT_MAX_NDIM 8      /* tensor rank */
#define DT_MAX_MESH_NDIM 8 /* device mesh rank */
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
    X(EOP, -13, "the operation does not accept these inputs")                 \
    X(EDEVICE, -14, "a device of the mesh is not available")                  \
    X(ECANCELLED, -15, "cancelled: the graph was cancelled before this ran")   \
    X(EFORKED, -16, "the graph belongs to the parent of a fork")

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

/* Sets the function the library calls, on the failing thread, when it finds
 * one of its own invariants broken (a bug in dtorch, never a caller mistake
 * or a resource failure: those return a status or poison a value) just
 * before it calls abort(), as ggml's ggml_set_abort_callback: an embedder
 * can log `msg` or flush its own state. `cb` must not return into dtorch
 * (it may exit the process itself); NULL restores the default, which prints
 * `msg` to stderr. `ud` is passed through. Any thread; takes effect for
 * aborts that start afterwards. */
DT_API void dt_set_abort_callback(void (*cb)(const char *msg, void *ud), void *ud);

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
 * dt_graph_shutdown). Tensors hold references to their graph.
 * fork(): a graph made before a fork is dead in the child (its threads do
 * not exist there, its locks may be held forever): there, ops and reads on
 * it fail with DT_EFORKED, and releasing it or its tensors leaks them
 * instead of joining threads. The library's own global locks are taken
 * around fork() (pthread_atfork), so a fork never inherits them held.
 * Graphs made in the child work normally. */
DT_API void dt_graph_release(dt_graph *graph);
/* Finishes all work issued so far, then stops and joins the graph's threads.
 * Idempotent. Afterwards ops on the graph fail with DT_ESHUTDOWN, while
 * releasing tensors and meshes stays safe. Must not be called from a worker. */
DT_API dt_status dt_graph_shutdown(dt_graph *graph);
/* Shuts the graph down WITHOUT finishing its work: queued nodes are freed
 * unlowered, kernels queued on workers are dropped unrun (their outputs are
 * poisoned, pending reads and syncs fail with DT_ECANCELLED), gated kernels
 * are let through, and collectives whose ranks are dropped release the
 * ranks that wait for them. Only the kernel each worker is running when
 * this is called still finishes. For exit paths, where nobody can read the
 * pending values any more.
 * Waits at most `timeout_ms` (< 0: no limit) for the threads to stop:
 * DT_OK once they are joined, DT_ETIMEDOUT before (call again to wait
 * more; the cancellation itself is already in effect). Idempotent. During
 * a dt_graph_shutdown on another thread it drops the rest of the work and
 * returns once that shutdown has joined the threads. Client threads; must
 * not be called from a worker. */
DT_API dt_status dt_graph_cancel(dt_graph *graph, int64_t timeout_ms);
/* Waits until the graph's pipeline has drained to half its bound (see
 * dt_graph_stats) or `timeout_ms` has passed (< 0: no limit; 0: a poll):
 * DT_OK when there is capacity (also for a graph that is shut down),
 * DT_ETIMEDOUT otherwise, DT_EINVAL for NULL. Never blocks longer than the
 * timeout, so a caller may check for signals between slices. Any client
 * thread. */
DT_API dt_status dt_graph_wait_capacity(dt_graph *graph, int64_t timeout_ms);
/* By default (on = 0) a client that outruns the devices waits for pipeline
 * capacity inside the op call. With on = 1 an op on this graph returns at
 * once, fully recorded, and the wait is left to the caller:
 * dt_take_backpressure() names the graph, dt_graph_wait_capacity() waits in
 * slices. For hosts that must not block inside an op, such as an
 * interpreter holding a lock that wants to handle signals between slices.
 * Set it right after dt_graph_create, before the graph is shared. */
DT_API void dt_graph_set_deferred_backpressure(dt_graph *graph, int on);
/* For graphs with deferred backpressure: the graph whose pipeline an op
 * call of this thread found over its bound since the last call (a new
 * reference: wait with dt_graph_wait_capacity, then dt_graph_release), or
 * NULL. Thread-local; one thread-local load when there is none. */
DT_API dt_graph *dt_take_backpressure(void);
/* Waits until all work issued on the graph so far has run. Returns DT_EKERNEL
 * never: kernel errors surface on value reads of the affected tensors. */
DT_API dt_status dt_graph_sync(dt_graph *graph);
/* Name of the graph's backend ("torch" or "ref"). Borrowed. */
DT_API const char *dt_graph_backend(const dt_graph *graph);
/* 1 when the graph's backend can run on every device of `mesh`, else 0 (also
 * for NULL arguments). CPU ids are virtual devices and always available; a
 * CUDA id must name a GPU that the backend sees (the "ref" backend has none).
 * Factories and redistribute onto a mesh that does not satisfy this fail at
 * the call with DT_EDEVICE, naming the first missing device. Thread-safe. */
DT_API int dt_graph_satisfy(const dt_graph *graph, const dt_mesh *mesh);

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
/* Builds a tensor from what each device holds, as DTensor.from_local does:
 * `data[i]` is the row-major host block of the device at flat mesh index i
 * (row-major mesh order, as in dt_tensor_fetch_local) and `nbytes[i]` its
 * size, which must be that device's local shape (the region that `shape` and
 * the placements give it) times the dtype size. On a Partial mesh dim the
 * blocks are the addends; on a Replicate one they should be equal copies,
 * which is not checked (tests use that to build drifted replicas). The blocks
 * are copied at the call. Mainly for tests: a Partial whose every coordinate
 * holds a different piece. A size mismatch is DT_EINVAL and enqueues
 * nothing. */
DT_API dt_tensor *dt_tensor_from_local_buffers(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape,
                                               dt_mesh *mesh, const dt_placement *placements,
                                               const void *const *data, const size_t *nbytes);
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

/* Append-only. The ops after DIV are described with dt_binary_ex below. */
typedef enum dt_binary_op {
    DT_BINARY_ADD = 0,
    DT_BINARY_SUB,
    DT_BINARY_MUL,
    DT_BINARY_DIV,       /* true division */
    DT_BINARY_DIV_TRUNC, /* div(rounding_mode="trunc") */
    DT_BINARY_DIV_FLOOR, /* div(rounding_mode="floor"), floor_divide, // */
    DT_BINARY_REMAINDER, /* remainder, % (Python's sign convention) */
    DT_BINARY_POW,
    DT_BINARY_MAXIMUM,
    DT_BINARY_MINIMUM,
    DT_BINARY_EQ,
    DT_BINARY_NE,
    DT_BINARY_LT,
    DT_BINARY_LE,
    DT_BINARY_GT,
    DT_BINARY_GE,
    DT_BINARY_LOGICAL_AND,
    DT_BINARY_LOGICAL_OR,
    DT_BINARY_LOGICAL_XOR,
    DT_BINARY_BITWISE_AND, /* & */
    DT_BINARY_BITWISE_OR,  /* | */
    DT_BINARY_BITWISE_XOR, /* ^ */
    DT_BINARY_COUNT
} dt_binary_op;

/* a op b with torch broadcasting and type promotion (DIV is true division);
 * any dt_binary_op (see dt_binary_ex for the ops after DIV).
 * Per mesh dim it accepts (R,R)->R, (S,S)->S on the same broadcast dim,
 * (S,R)->S and (R,S)->S (the Replicate side is sliced locally), and for
 * Partial: ADD/SUB (P,P)->P, MUL (P,R)->P and (R,P)->P, DIV (P,R)->P. */
DT_API dt_tensor *dt_binary(dt_binary_op op, dt_tensor *a, dt_tensor *b);
/* a op s, or s op a when `scalar_first` is nonzero, as Python's operators
 * compute them (s - a is torch's rsub, s / a is reciprocal(a) * s, as in
 * torch's __rtruediv__; the ops after DIV compute torch.<op>(s, a), and
 * MAXIMUM, MINIMUM and the logical ops take no scalar). Partial inputs are
 * accepted by MUL, and by DIV when the tensor is the dividend. */
DT_API dt_tensor *dt_binary_scalar(dt_binary_op op, dt_tensor *a, dt_scalar s, int scalar_first);
/* -a; keeps every placement. Same as dt_unary(DT_UNARY_NEG, a). */
DT_API dt_tensor *dt_neg(dt_tensor *a);
/* torch.matmul for every rank (see "linear algebra" below). */
DT_API dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b);
/* dt_reduce(DT_REDUCE_SUM, a, ndims, dims, keepdim, -1) (see "reductions"). */
DT_API dt_tensor *dt_sum(dt_tensor *a, int ndims, const int64_t *dims, int keepdim);
/* Moves `a` to `placements` on `mesh` (NULL = a's mesh). Per mesh dim:
 * S->R all-gather, P->R all-reduce, P->S reduce-scatter, S(i)->S(j)
 * all-to-all, R->S local slice, R->P keep on the first coordinate, S->P via R;
 * nested shards (several mesh dims on one tensor dim) included. With another
 * mesh of the same device type (pipeline stages), Partial sums finish on the
 * source mesh, then each destination device assembles its region from the
 * overlapping source pieces (point-to-point copies). */
DT_API dt_tensor *dt_redistribute(dt_tensor *a, dt_mesh *mesh, const dt_placement *placements);

/* ------------------------------------------------------------ reductions */
/* torch's reductions. Every op takes `dims` (`ndims` entries, negative values
 * count from the end; ndims < 0 means "no dim": torch's x.op() form) and
 * `keepdim`. Placements per mesh dim: R->R; a Shard of a kept dim stays a
 * Shard (renumbered when dims are dropped); Partial only for SUM and MEAN
 * (P->P; not when the sum casts floats to an integer dtype). A Shard of a
 * reduced dim becomes Partial for SUM and MEAN (MEAN divides each local sum
 * by the global count, so the Partial pieces add up to the mean); every
 * other op redistributes by itself there: it reduces locally, all-gathers
 * the per-device results along that mesh dim and reduces them again, giving
 * Replicate on that mesh dim (ARGMAX/ARGMIN carry global indices and pick the
 * smallest index among equal best values, as torch does). */
typedef enum dt_reduce_op {
    DT_REDUCE_SUM = 0, /* bool/integers sum to int64 */
    DT_REDUCE_MEAN,    /* floating only (or with a floating `dtype`) */
    DT_REDUCE_PROD,    /* one dim or none; bool/integers to int64 */
    DT_REDUCE_AMAX,    /* any dims */
    DT_REDUCE_AMIN,
    DT_REDUCE_MAX,     /* no dim: the 0-d max; one dim: the values of max(dim) */
    DT_REDUCE_MIN,
    DT_REDUCE_ARGMAX,  /* one dim or none (flattened index); int64 */
    DT_REDUCE_ARGMIN,
    DT_REDUCE_ANY,     /* any dims; bool (uint8 for uint8 input, as torch) */
    DT_REDUCE_ALL,
    DT_REDUCE_COUNT
} dt_reduce_op;

/* The reduction `op` of `a`. ndims == 0 also means every dim for the ops
 * that take several dims (torch's empty dim list). `dtype` is the result
 * dtype for SUM, MEAN and PROD (torch's dtype= argument) or -1 for torch's
 * default; it must be -1 for the other ops. Errors as torch raises them: a dim
 * out of range is DT_EINDEX, an empty reduced dim for AMAX..ARGMIN is
 * DT_EINDEX, an integer MEAN is DT_EOP. Returns a new reference or NULL. */
DT_API dt_tensor *dt_reduce(dt_reduce_op op, dt_tensor *a, int ndims, const int64_t *dims, int keepdim,
                            int dtype);
/* torch.max(a, dim, keepdim) / torch.min(...) (op DT_REDUCE_MAX or
 * DT_REDUCE_MIN): *values gets the values and *indices the int64 indices of
 * the first best element, both new references (both NULL on failure).
 * Placements as dt_reduce. */
DT_API dt_status dt_reduce_with_indices(dt_reduce_op op, dt_tensor *a, int64_t dim, int keepdim,
                                        dt_tensor **values, dt_tensor **indices);

/* -------------------------------------------------------- linear algebra */
/* Matrix products. Placements are matched per mesh dim through the index
 * each tensor dim carries (M, K, N, a batch dim, an einsum letter): both
 * Replicate -> R; a Shard of an index the output keeps -> Shard of that
 * output dim (the other operand is Replicate, sliced locally, or shards the
 * same index); a Shard of a contracted index (K) on one or both operands ->
 * Partial; Partial with Replicate -> Partial. Sharding a size-1 dim that
 * broadcasts, and nested shards that do not line up, are PlacementErrors.
 *
 * dt_matmul (declared above): torch.matmul for every rank: 1-D.1-D dot,
 * 2-D @ 1-D, 1-D @ 2-D, N-D @ N-D with broadcast batch dims. For 2-D:
 * (R,R)->R, (S0,R)->S0, (R,S1)->S1, (S1,S0)->P, (S1,R)->P, (R,S0)->P,
 * (P,R)->P, (R,P)->P; batch-dim shards propagate. Same dtypes, not bool. */
/* torch.mm: 2-D only. */
DT_API dt_tensor *dt_mm(dt_tensor *a, dt_tensor *b);
/* torch.bmm: a[B,M,K] @ b[B,K,N]; batch shards propagate. */
DT_API dt_tensor *dt_bmm(dt_tensor *a, dt_tensor *b);
/* torch.outer: a[n] x b[m] -> [n,m] (type promotion as torch). (S0,R)->S0,
 * (R,S0)->S1, (P,R)->P, (R,P)->P. */
DT_API dt_tensor *dt_outer(dt_tensor *a, dt_tensor *b);
/* torch.nn.functional.linear: x[..., in] @ weight[out, in].T (+ bias), weight
 * 2-D or 1-D, bias NULL or broadcastable to the output. Column parallel:
 * (S(batch)/R x, S(0) weight) -> S(-1); row parallel: (S(-1), S(1)) -> P.
 * The bias follows the output: Replicate (sliced to the local output region)
 * or the output's Shard; on a mesh dim where the output is Partial a
 * Replicate bias is added on that dim's first coordinate only and a Partial
 * bias is added everywhere. */
DT_API dt_tensor *dt_linear(dt_tensor *x, dt_tensor *weight, dt_tensor *bias);
/* torch.einsum(equation, operands...) for one or two operands (letters
 * a-zA-Z, "...", implicit or explicit output). The equation is copied. */
DT_API dt_tensor *dt_einsum(const char *equation, int n, dt_tensor *const *operands);

/* ------------------------------------------------------------ memory stats */

/* Bytes of live blobs on one device, by dtorch's own accounting: a blob is
 * counted from the moment its kernel produced it until it is freed (its
 * tensor released and its last reader run). Process-wide, all graphs.
 * Returns DT_EINVAL for a negative id. */
DT_API dt_status dt_memory_stats(dt_device_type type, int64_t device_id, int64_t *current_bytes,
                                 int64_t *peak_bytes);
/* Sets every device's peak to its current bytes. */
DT_API void dt_reset_peak_memory_stats(void);
/* Returns memory the backends keep cached for reuse (freed blobs' buffers)
 * to the system. Any thread. */
DT_API void dt_empty_cache(void);
/* Bytes of freed buffers the backends keep cached for reuse now, i.e. what
 * dt_empty_cache would return: the torch backend keeps freed CPU blocks of
 * 1 MiB and more that its workers allocated; "ref" keeps none (0).
 * Process-wide, all graphs. Any thread; a snapshot. */
DT_API int64_t dt_memory_cached_bytes(void);
/* ------------------------------------------------------- views and shape */
/* Data-movement ops (src/ops/views.c, index.c, shape_ops.c). dtorch values
 * are immutable, so a "view" is a new symbol with its own value; the backend
 * may share storage underneath (a reshape of a contiguous block copies
 * nothing). All return a new reference or NULL, and record one node (cat and
 * stack of more than two inputs: one node per pairwise step).
 *
 * Placements, per mesh dim, unless an op says otherwise: Replicate stays
 * Replicate; Partial stays Partial (these ops are linear); a Shard follows
 * its tensor dim through the shape change. A Shard whose dim the op slices,
 * flips, rolls, repeats, indexes or concatenates along is a PlacementError
 * naming the redistribute() that fixes it. Errors mirror torch: a bad dim is
 * DT_EINDEX, a bad shape DT_ESHAPE, a bad dtype DT_ETYPE. */

/* a.reshape(shape) (also view, flatten, unflatten): `ndim` sizes, one may be
 * -1 (inferred). A Shard(d) moves to the result dim holding d's leading
 * digits, and is accepted only when every device's block of `a`, read in
 * row-major order, is exactly the block the result's placements give that
 * device (torch.chunk sizes, nested shards included); checked exactly per
 * device, else DT_EPLACEMENT. E.g. flatten of (a, b) with Shard(0) on n
 * devices is accepted when chunking a*b by n gives the same blocks as
 * chunking a then multiplying by b. */
DT_API dt_tensor *dt_reshape(dt_tensor *a, int ndim, const int64_t *shape);
/* Removes the size-1 dims listed in `dims` (ndims entries, negative allowed;
 * a listed dim of another size stays), or every size-1 dim when ndims < 0.
 * A Shard on a removed dim is rejected. */
DT_API dt_tensor *dt_squeeze(dt_tensor *a, int ndims, const int64_t *dims);
/* Inserts a size-1 dim at `dim` (-ndim-1 <= dim <= ndim). */
DT_API dt_tensor *dt_unsqueeze(dt_tensor *a, int64_t dim);
/* a.permute(dims) (also transpose, T, mT): `ndim` must equal a's ndim. Every
 * placement is accepted; Shard(d) becomes Shard(position of d in dims). */
DT_API dt_tensor *dt_permute(dt_tensor *a, int ndim, const int64_t *dims);
/* a.expand(sizes): -1 keeps a size; new leading dims allowed. A Shard on a
 * dim that grows from 1 is rejected. */
DT_API dt_tensor *dt_expand(dt_tensor *a, int ndim, const int64_t *sizes);
/* A value copy that shares the blobs of `a` (no kernel runs). */
DT_API dt_tensor *dt_clone(dt_tensor *a);

/* One input dim of a basic index: elements start, start+step, ... (`len` of
 * them, step >= 1, all within the dim); `drop` = 1 for an integer index
 * (len 1, the dim disappears from the result). */
typedef struct dt_slice {
    int64_t start;
    int64_t step;
    int64_t len;
    int32_t drop;
} dt_slice;

/* a[key] for a basic key (ints, slices, None, ...), given per input dim
 * (`dims` has ndim(a) entries). `new_axes` has bit i set when result dim i
 * is a new size-1 axis (None); the other result dims are the kept input dims
 * in order. Also narrow and select. Accepted: a Shard on a dim taken whole;
 * a Shard on a sliced or integer-indexed dim is rejected. */
DT_API dt_tensor *dt_index(dt_tensor *a, const dt_slice *dims, uint64_t new_axes);
/* a[(:,) * dim + (index,)]: torch advanced indexing along one dim by an int64
 * tensor of any shape; the result's dims dim .. dim+index.ndim-1 come from
 * `index`. Indices are read on the devices: out-of-range ones surface as
 * DT_EKERNEL at the next value read. Per mesh dim (a, index): (R,R)->R,
 * (S(j),R)->S(j') for j != dim, (R,S(k))->S(dim+k), (P,R)->P. */
DT_API dt_tensor *dt_index_tensor(dt_tensor *a, int64_t dim, dt_tensor *index);
/* The value of `a` after a[key] = value for a basic key given as in
 * dt_index (no new axes: a None only changes how `value` broadcasts, so the
 * caller drops those dims of `value`). `value` broadcasts to the selected
 * region (leading size-1 dims beyond it are allowed) and is cast to a's
 * dtype; value NULL means the scalar `s`. The result keeps a's placements.
 * Per mesh dim (a, value): (R,R), (S(d),R) (value sliced locally), (S(d),S)
 * when every device's needed part of value is what it holds, (P,R) and
 * (P, scalar) (the value lands on coordinate 0, zeros elsewhere), (P,P). */
DT_API dt_tensor *dt_setitem(dt_tensor *a, const dt_slice *dims, dt_tensor *value, dt_scalar s);
/* a with a[(:,) * dim + (mask,)] = s: `mask` is bool with the shape of a's
 * dims dim .. dim+mask.ndim-1. The mask must be Replicate, or sharded like a
 * on those dims; a Partial a takes s on coordinate 0 and zeros elsewhere. */
DT_API dt_tensor *dt_setitem_mask(dt_tensor *a, int64_t dim, dt_tensor *mask, dt_scalar s);
/* a with a[(:,) * dim + (index,)] = s for an int64 index (Replicate); a must
 * not be sharded on `dim`. */
DT_API dt_tensor *dt_setitem_index(dt_tensor *a, int64_t dim, dt_tensor *index, dt_scalar s);
/* The value of dst after dst.copy_(src): src broadcast to dst's shape, cast
 * to dst's dtype, on dst's placements. Redistributes src by itself when its
 * placements do not line up with dst's (same mesh required). */
DT_API dt_tensor *dt_copy(dt_tensor *dst, dt_tensor *src);

/* torch.masked_scatter(a, mask, source): a copy of a (broadcast with the
 * bool `mask`) whose True positions take source's elements in order, the
 * k-th True element in row-major order taking source.flatten()[k]. source
 * has a's dtype and any shape. Errors at the call as torch's: shapes that
 * do not broadcast (DT_ESHAPE), a non-bool mask or another source dtype
 * (DT_EOP); fewer source elements than True elements is only known from the
 * values and fails at the read (DT_EKERNEL, ATen's message). `flags`:
 * DT_EW_INPLACE for a.masked_scatter_(): then mask must broadcast to a's
 * shape (DT_EOP otherwise, as torch's expand) and the caller rebinds a.
 * Per mesh dim (a, mask, source): the mask is Replicate and so is the source
 * unless Partial: (R,R,R)->R, (S(d),R,R)->S(d) for a dim d of a that does not
 * broadcast, (P,R,R)->P, (R,R,P)->P, (P,R,P)->P. A device of a sharded result
 * reads the whole mask to know how many True elements precede its block, so
 * a sharded mask or source is a PlacementError (redistribute it to
 * Replicate) rather than a hidden exchange. */
DT_API dt_tensor *dt_masked_scatter(dt_tensor *a, dt_tensor *mask, dt_tensor *source, int flags);

/* torch.cat(ts, dim) with type promotion; 1-D empty inputs are skipped as in
 * torch. Per mesh dim: all inputs Partial -> P; otherwise no Partial, at most
 * one Shard dim j != dim among the inputs -> S(j) (Replicate inputs sliced
 * locally), else R. */
DT_API dt_tensor *dt_cat(int n, dt_tensor *const *ts, int64_t dim);
/* torch.stack(ts, dim): equal shapes; placements as cat, the new dim never
 * sharded. */
DT_API dt_tensor *dt_stack(int n, dt_tensor *const *ts, int64_t dim);
/* tril (upper = 0) / triu (upper = 1) with `diagonal`. Every placement is
 * accepted: a device holding rows r0.. and columns c0.. applies the local
 * diagonal diagonal + r0 - c0. */
DT_API dt_tensor *dt_tril(dt_tensor *a, int64_t diagonal, int upper);
/* torch.flip(a, dims); the flipped dims must not be sharded. */
DT_API dt_tensor *dt_flip(dt_tensor *a, int ndims, const int64_t *dims);
/* torch.roll(a, shifts, dims) with `n` pairs; dims NULL (n == 1) rolls the
 * flattened tensor, which then must not be sharded at all. Rolled dims must
 * not be sharded. */
DT_API dt_tensor *dt_roll(dt_tensor *a, int n, const int64_t *shifts, const int64_t *dims);
/* a.repeat(repeats) (n >= ndim(a) entries); a Shard on a dim repeated more
 * than once is rejected. */
DT_API dt_tensor *dt_repeat(dt_tensor *a, int n, const int64_t *repeats);
/* a.repeat_interleave(repeats, dim). A Shard on `dim` is accepted when every
 * device's output block is exactly its input block repeated (checked per
 * device; e.g. always when the mesh size divides the dim). */
DT_API dt_tensor *dt_repeat_interleave(dt_tensor *a, int64_t repeats, int64_t dim);
/* a.repeat_interleave(repeats, dim, output_size=output_size) with a 1-D int64
 * `repeats` (Replicate) whose sum the caller passes as output_size; `dim`
 * must not be sharded. */
DT_API dt_tensor *dt_repeat_interleave_tensor(dt_tensor *a, dt_tensor *repeats, int64_t dim, int64_t output_size);
/* ------------------------------------------------------ elementwise math */
/* torch's elementwise operators on distributed tensors: binary ops with
 * alpha, rounding modes, comparisons, logical and bitwise ops, pow,
 * maximum/minimum; unary math; casts; where, masked_fill and clamp. Shapes
 * broadcast and dtypes promote exactly as in torch (dt_binary above).
 *
 * Placements, matched per mesh dim (PlacementSignature). Let "broadcast
 * S/R" be the rule of dt_binary without Partial: (R,..,R)->R; every Shard
 * input must shard the same output dim d and the others be Replicate (sliced
 * locally), giving S(d); a Shard of a size-1 dim that broadcasts is
 * rejected. Then:
 *  - comparisons, logical, bitwise, pow, maximum, minimum, remainder and the
 *    rounding divisions: broadcast S/R; Partial is rejected (not linear);
 *  - add/sub with alpha keep dt_binary's Partial rules ((P,P)->P), and a
 *    scalar operand keeps those of dt_binary_scalar (mul, div by: P->P);
 *  - unary ops: R->R, S(d)->S(d); only NEG keeps P (the sole linear one);
 *  - casts: R->R, S(d)->S(d); a Partial is rejected: rounding each part to
 *    the new dtype is not rounding the sum, so the result would not be exact
 *    (casting to the same dtype is a no-op and keeps every placement);
 *  - where (3 inputs), masked_fill (2), clamp (1 to 3): broadcast S/R over
 *    their tensor inputs; no Partial.
 * Violations fail with DT_EPLACEMENT naming the op, the placements, the
 * accepted combinations and the redistribute() that fixes it. */

/* Flags of dt_binary_ex and the other entries below. */
typedef enum dt_ew_flags {
    /* dt_binary_ex with b == NULL: compute op(s, a), torch's function form
     * torch.<op>(s, a) (the scalar as a wrapped number). */
    DT_EW_SCALAR_FIRST = 1 << 0,
    /* In-place form (torch's a.<op>_(...)): the result must have a's shape
     * and its dtype must be castable to a's dtype under torch's rules (no
     * float -> integer, no non-bool -> bool); it comes back cast to a's
     * dtype. The caller rebinds its handle for `a` to the result (dtorch
     * values are immutable); placements are the op's (they may differ from
     * a's). */
    DT_EW_INPLACE = 1 << 1
} dt_ew_flags;

/* The general binary op: a op b (b not NULL), or a op s (b NULL), or s op a
 * (b NULL and DT_EW_SCALAR_FIRST). `alpha` scales the second operand of ADD
 * and SUB (torch's alpha; an integer or bool alpha is required for integer
 * and bool results, a bool alpha only for bool results); for every other op
 * it must be dt_scalar_int(1). Errors as torch raises them, at the call: a
 * bool result for SUB (DT_EOP) and for DIV_TRUNC, DIV_FLOOR, REMAINDER, POW
 * (DT_EUNSUPPORTED, torch's NotImplementedError; a bool tensor to a bool
 * scalar power is accepted); a floating result for the bitwise ops
 * (DT_EUNSUPPORTED); an integer tensor to a
 * negative integer scalar power (DT_EOP); an integer division by a zero
 * scalar (DT_EOP, "ZeroDivisionError"). Comparisons and logical ops return
 * bool (compared in the promoted dtype); MAXIMUM, MINIMUM and the logical
 * ops take two tensors (DT_ETYPE otherwise). `flags`: dt_ew_flags. */
DT_API dt_tensor *dt_binary_ex(dt_binary_op op, dt_tensor *a, dt_tensor *b, dt_scalar s, dt_scalar alpha,
                               int flags);

/* Append-only. */
typedef enum dt_unary_op {
    DT_UNARY_NEG = 0,    /* keeps dtype; bool rejected */
    DT_UNARY_ABS,        /* keeps dtype; bool rejected */
    DT_UNARY_EXP,        /* EXP..EXP2: integer and bool -> default float dtype */
    DT_UNARY_LOG,
    DT_UNARY_LOG2,
    DT_UNARY_LOG10,
    DT_UNARY_SQRT,
    DT_UNARY_RSQRT,
    DT_UNARY_RECIPROCAL,
    DT_UNARY_SIN,
    DT_UNARY_COS,
    DT_UNARY_TANH,
    DT_UNARY_SIGMOID,
    DT_UNARY_ERF,
    DT_UNARY_EXPM1,
    DT_UNARY_LOG1P,
    DT_UNARY_EXP2,
    DT_UNARY_SQUARE,     /* keeps dtype; bool -> int64 (pow(a, 2)) */
    DT_UNARY_FLOOR,      /* FLOOR..ROUND keep dtype; bool rejected */
    DT_UNARY_CEIL,
    DT_UNARY_TRUNC,
    DT_UNARY_ROUND,      /* see dt_round for decimals */
    DT_UNARY_SIGN,       /* keeps dtype */
    DT_UNARY_RELU,       /* keeps dtype; bool rejected */
    DT_UNARY_ISNAN,      /* ISNAN..LOGICAL_NOT -> bool */
    DT_UNARY_ISINF,
    DT_UNARY_ISFINITE,
    DT_UNARY_LOGICAL_NOT,
    DT_UNARY_BITWISE_NOT, /* ~; integers and bool only, keeps dtype */
    DT_UNARY_ASIN,        /* ASIN..COSH: integer and bool -> default float dtype */
    DT_UNARY_ACOS,
    DT_UNARY_ATAN,
    DT_UNARY_TAN,
    DT_UNARY_SINH,
    DT_UNARY_COSH,
    DT_UNARY_COUNT
} dt_unary_op;

/* op(a) with torch's dtype rules (see dt_unary_op). R->R, S(d)->S(d); P->P
 * only for NEG. */
DT_API dt_tensor *dt_unary(dt_unary_op op, dt_tensor *a);
/* dt_unary with dt_ew_flags (DT_EW_INPLACE for a.exp_() etc.). */
DT_API dt_tensor *dt_unary_ex(dt_unary_op op, dt_tensor *a, int flags);
/* torch.round(a, decimals=decimals); `flags` as dt_unary_ex. A non-zero
 * `decimals` needs a floating `a` (DT_EUNSUPPORTED otherwise, as torch). */
DT_API dt_tensor *dt_round(dt_tensor *a, int64_t decimals, int flags);

/* a.to(dtype): a new reference to `a` itself when the dtype is already
 * `dtype`. R->R, S(d)->S(d); Partial rejected (see above). */
DT_API dt_tensor *dt_cast(dt_tensor *a, dt_dtype dtype);

/* torch.where(cond, x, y): `cond` is bool (uint8 accepted, as in torch);
 * x is `a`, or the scalar `sa` when `a` is NULL; y likewise with b/sb.
 * The three broadcast; the dtype is torch's result_type(x, y). Broadcast
 * S/R over the tensor inputs; no Partial. */
DT_API dt_tensor *dt_where(dt_tensor *cond, dt_tensor *a, dt_scalar sa, dt_tensor *b, dt_scalar sb);

/* a.masked_fill(mask, v): v is the 0-d tensor `value`, or the scalar `s`
 * when `value` is NULL. `mask` is bool (uint8 accepted); the result has the
 * broadcast shape of a and mask and a's dtype; a scalar that does not fit
 * a's dtype fails as in torch ("value cannot be converted ... without
 * overflow", DT_EOP). Broadcast S/R over (a, mask[, value]); no Partial.
 * `flags`: DT_EW_INPLACE for masked_fill_. */
DT_API dt_tensor *dt_masked_fill(dt_tensor *a, dt_tensor *mask, dt_tensor *value, dt_scalar s, int flags);

/* Which bounds dt_clamp takes. */
typedef enum dt_clamp_flags {
    DT_CLAMP_MIN = 1 << 8, /* a min bound is given */
    DT_CLAMP_MAX = 1 << 9  /* a max bound is given */
} dt_clamp_flags;

/* torch.clamp(a, min, max): each bound, when its DT_CLAMP_* flag is set, is
 * the tensor (min_t / max_t) or, when that is NULL, the scalar. At least one
 * bound is required (DT_EOP). The dtype is torch's (a floating `a` keeps its
 * dtype; otherwise result_type of a and the bounds); a bool result is
 * DT_EUNSUPPORTED except with one tensor bound. Broadcast S/R over the
 * tensor inputs; no Partial. `flags`: dt_clamp_flags | dt_ew_flags. */
DT_API dt_tensor *dt_clamp(dt_tensor *a, dt_tensor *min_t, dt_scalar min_s, dt_tensor *max_t, dt_scalar max_s,
                           int flags);
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
 * dt_dropout's. Computed by the fused at::scaled_dot_product_attention
 * when dropout_p == 0, else from ATen ops (torch's math). Per mesh
 * dim: q, k, v (and a mask dim of full size) R or S(d) on a leading dim
 * (the same d) -> S(d); (R,R,P)->P (linear in v); shards of the sequence or
 * embedding dims and other Partials are rejected. */
DT_API dt_tensor *dt_scaled_dot_product_attention(dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *attn_mask,
                                                  double dropout_p, int is_causal, double scale);

/* 2-D pooling over the last two (spatial) dims of x [N, C, H, W] or
 * [C, H, W], computed by the ATen call torch.nn.functional makes, so a
 * one-device result equals eager torch bit for bit. kernel_size, padding and
 * dilation have 2 entries (H, W); stride has 2 or is NULL for kernel_size
 * (torch's stride=None). Every argument error torch raises is raised at the
 * call, in torch's order and with its exception kind: bad kernel, stride,
 * dilation or padding values, a padding over half the kernel, an output
 * smaller than 1, empty non-batch dims (DT_EOP); an avg_pool2d input of
 * fewer than 3 dims (DT_EINDEX, as torch's size(-3)); a dtype the ATen
 * kernel lacks (DT_EUNSUPPORTED: bool for max; avg takes floating dtypes
 * and int64; the adaptive ones floating dtypes).
 * Per mesh dim: R->R, and S(d)->S(d) for the dims before the last two
 * (batch, channels: every window lies inside one plane); a shard of H or W
 * is rejected (DT_EPLACEMENT naming the redistribute() to Replicate; windows
 * would cross shard edges and halos are not exchanged). Average pooling is
 * linear, so for floating dtypes P->P (the pooled parts sum to the pooled
 * sum up to rounding); max pooling rejects Partial (the max of a sum is not
 * the sum of maxima), and so does an integer avg_pool2d (it divides with
 * truncation). */

/* max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode): *values
 * (x's dtype) and, when `indices` is not NULL, *indices (int64, the flat
 * index of each maximum in its H*W input plane, as torch's
 * return_indices=True, which also computes the values through
 * at::max_pool2d_with_indices). `values` must not be NULL. On success the
 * out-parameters hold new references; on failure they are NULL. */
DT_API dt_status dt_max_pool2d(dt_tensor *x, const int64_t *kernel_size, const int64_t *stride,
                               const int64_t *padding, const int64_t *dilation, int ceil_mode,
                               dt_tensor **values, dt_tensor **indices);
/* avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override): `divisor_override` NULL for None (0 is torch's
 * "divisor must be not zero", DT_EOP). */
DT_API dt_tensor *dt_avg_pool2d(dt_tensor *x, const int64_t *kernel_size, const int64_t *stride,
                                const int64_t *padding, int ceil_mode, int count_include_pad,
                                const int64_t *divisor_override);
/* adaptive_avg_pool2d(x, output_size) with 2 sizes >= 0. An output of 1x1 is
 * torch's mean over the last two dims (keepdim), which takes any x of 2 or
 * more dims; other sizes take 3-D or 4-D x with nonzero H and W. */
DT_API dt_tensor *dt_adaptive_avg_pool2d(dt_tensor *x, const int64_t *output_size);
/* adaptive_max_pool2d(x, output_size): *values and, when `indices` is not
 * NULL, *indices (int64, as return_indices=True), as dt_max_pool2d. */
DT_API dt_status dt_adaptive_max_pool2d(dt_tensor *x, const int64_t *output_size, dt_tensor **values,
                                        dt_tensor **indices);

/* ------------------------------------- creation and data-dependent ops */
/* Random integers, scans, sorting and ops whose result shape depends on the
 * values (src/ops/factory.c, sort_scan.c). Like every op they validate at
 * the call and return a new reference or NULL (the two-output ops a status
 * and new references through their out-parameters). */

/* torch.randint(low, high, shape, dtype=dtype): uniform integers in
 * [low, high) drawn from dtorch's random stream (dt_manual_seed) for the
 * global shape, so the values are the same whatever the mesh and placements
 * (each device draws the global tensor and keeps its region). Any dtype;
 * errors as torch's, at the call: low >= high, or a bound outside an
 * integer dtype's range (DT_EOP). Placements as the other factories. */
DT_API dt_tensor *dt_randint(dt_graph *g, dt_dtype dtype, int64_t low, int64_t high, int ndim, const int64_t *shape,
                             dt_mesh *mesh, const dt_placement *placements);

/* torch.cumsum(a, dim, dtype): `dtype` < 0 means torch's default (bool and
 * integers accumulate in int64). Per mesh dim: R->R, S(d)->S(d) for d != dim,
 * P->P (cumsum is linear; not when floats are summed into an integer dtype).
 * S(dim) redistributes by itself: the devices along that mesh dim all-gather
 * the dim, each runs the cumsum of the whole dim on its part of the other
 * dims and keeps its own shard, so the result stays S(dim) and equals the
 * unsharded cumsum bit for bit. */
DT_API dt_tensor *dt_cumsum(dt_tensor *a, int64_t dim, int dtype);

/* torch.sort(a, dim, descending, stable): *values (a's dtype) and *indices
 * (int64); either out-parameter may be NULL when that output is not wanted
 * (argsort passes values = NULL), but not both. On success the non-NULL ones
 * hold new references; on failure they are set to NULL. Per mesh dim: R->R,
 * S(d)->S(d) for d != dim. S(dim) redistributes by itself: the devices along
 * that mesh dim all-gather the dim and sort it whole, so that mesh dim
 * becomes Replicate. Partial is rejected (DT_EPLACEMENT): the order of a sum
 * is not the sum of orders. */
DT_API dt_status dt_sort(dt_tensor *a, int64_t dim, int descending, int stable, dt_tensor **values,
                         dt_tensor **indices);
/* torch.topk(a, k, dim, largest, sorted): values and int64 indices of size k
 * along dim (0 <= k <= size of dim, else DT_EOP "selected index k out of
 * range"; a bool `a` on a CPU mesh too, as torch has no CPU kernel for it);
 * out-parameters and placements as dt_sort. */
DT_API dt_status dt_topk(dt_tensor *a, int64_t k, int64_t dim, int largest, int sorted, dt_tensor **values,
                         dt_tensor **indices);

/* torch.nonzero(a): the int64 [n, ndim] indices of a's nonzero elements in
 * row-major order (NaN counts as nonzero, -0.0 as zero). The shape depends
 * on the values, so this WAITS: it reads a's value (DT_EKERNEL, NULL, when a
 * kernel it depends on failed), computes the indices on the calling thread
 * and distributes them on a's mesh, all Replicate. Any input placements. */
DT_API dt_tensor *dt_nonzero(dt_tensor *a);

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

/* dt_nonzero in two steps, for callers that wait their own way (the Python
 * layer waits in slices with signal checks): `value` is dt_tensor_fetch(a),
 * borrowed; this waits for it if it is not ready yet (DT_EINVAL, NULL, for
 * NULL arguments or when `value` is not a whole read of a tensor of a's
 * dtype and size). */
DT_API dt_tensor *dt_nonzero_read(dt_tensor *a, dt_future *value);

/* Starts reading the full global value of `t`. Never waits. New reference or
 * NULL. */
DT_API dt_future *dt_tensor_fetch(dt_tensor *t);
/* Starts reading what ONE device holds of `t`, as stored there: the device at
 * flat index `mesh_index` of t's mesh (row-major over the mesh shape, the
 * order of dt_mesh_create's ids). Its shape is the device's local shape
 * (dt_future_shape); a Replicate mesh dim gives that device's own copy, a
 * Partial one its own addend. For tests (every replica equal) and debugging.
 * Never waits. A `mesh_index` out of range is DT_EINDEX. New reference or
 * NULL. */
DT_API dt_future *dt_tensor_fetch_local(dt_tensor *t, int64_t mesh_index);
/* The shape of the value a fetch future reads (`shape` holds DT_MAX_NDIM
 * entries); returns ndim, or -1 for a sync future. Never waits. */
DT_API int dt_future_shape(const dt_future *f, int64_t *shape);
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

/* ------------------------------------------ diagnostics (tests, debugging) */

/* One graph's pipeline as its flow control sees it. A *record* is a node a
 * client pushed that the controller has not lowered yet, or a kernel queued
 * on a worker that has not run yet (dropping a tensor is not a record). A
 * client thread that finds more than `in_flight_limit` records in flight
 * waits until half of them have drained; it looks once every
 * `check_interval` of its own submissions, so on a one-device mesh, where an
 * elementwise op is one record once lowered, the records in flight stay
 * below about in_flight_limit + check_interval per recording thread. */
typedef struct dt_graph_stats {
    int64_t submitted;       /* node records pushed since the graph was made (op calls, reads, syncs) */
    int64_t in_flight;       /* records in flight now */
    int64_t peak_in_flight;  /* the most in flight the controller saw after a batch, since creation or reset */
    int64_t in_flight_limit; /* flow control's bound (32768) */
    int64_t check_interval;  /* submissions of a thread between two looks at the bound (64) */
    int64_t flow_waits;      /* times a client waited for the pipeline to drain */
    /* Node records never lowered because their result was dropped unread in
     * the controller round that took them (the window's dce pass). */
    int64_t nodes_eliminated;
    /* Kernels that wrote their result into their first input's buffer (the
     * window's reuse pass and the workers' last-reference check). */
    int64_t kernels_in_place;
    int64_t cancelled;       /* nodes and kernels dropped unrun by dt_graph_cancel */
} dt_graph_stats;

/* Fills *out with a snapshot of g's counters (each read atomically, not all
 * at one instant). With `reset_peak` the peak is then set to the records in
 * flight now. DT_EINVAL for NULL arguments. Any thread. */
DT_API dt_status dt_graph_get_stats(dt_graph *g, dt_graph_stats *out, int reset_peak);

/* Test-only: with `hold` set, g's controller takes nothing more from its
 * queue (what it already took is lowered) until called again with 0 or the
 * graph shuts down; everything recorded meanwhile is then taken in one
 * round, so a test can place a value's creation and its drop in the same
 * window. A client that records more than the flow-control bound while held
 * waits for ever. DT_EINVAL for NULL. Any thread. */
DT_API dt_status dt_debug_hold_controller(dt_graph *g, int hold);

/* A test-controlled gate. dt_debug_gated(x, gate) is a copy of x whose
 * kernels wait, asleep on their device's worker, until the gate opens: a
 * test can hold a value pending, and everything queued behind it on the same
 * device, for as long as it likes, with no slow computation and no clock.
 * A gate opens once and stays open. For tests and debugging only.
 * dt_graph_shutdown lets the graph's own gated kernels through before it
 * waits for its workers (the gate stays closed for other graphs), so a
 * forgotten gate cannot hang a shutdown. */
typedef struct dt_debug_gate dt_debug_gate;

/* A new closed gate. *out is a new reference (the caller's, released with
 * dt_debug_gate_release). Any thread. */
DT_API dt_status dt_debug_gate_create(dt_debug_gate **out);
/* Opens the gate and wakes the kernels waiting on it. Idempotent. NULL is
 * ignored. Any thread. */
DT_API void dt_debug_gate_open(dt_debug_gate *gate);
/* 1 once the gate is open, else 0 (also for NULL). Any thread. */
DT_API int dt_debug_gate_is_open(const dt_debug_gate *gate);
/* Opens the gate (nobody could open it afterwards), then drops the caller's
 * reference; kernels that use the gate hold their own. NULL is ignored. */
DT_API void dt_debug_gate_release(dt_debug_gate *gate);
/* A new tensor with x's metadata and values that each device of x's mesh
 * produces (a copy of its block of x) only once `gate` is open. Records one
 * node; metadata getters answer at once. New reference or NULL (DT_EINVAL
 * for a NULL argument, DT_ESHUTDOWN). Client threads, as any op. */
DT_API dt_tensor *dt_debug_gated(dt_tensor *x, dt_debug_gate *gate);

/* Fault injection: after `after_n` more successful allocations made by a
 * controller thread while it lowers a node (any graph), the next one fails,
 * once; the node's output is then poisoned with an error naming the op, "on
 * the controller" and the call site, raised at the next read. A negative
 * value disarms. Allocations of client and worker threads never fail. For
 * tests only. Any thread. */
DT_API void dt_debug_fail_allocs(int64_t after_n);
/* 1 while an armed failure has not happened yet, else 0. Any thread. */
DT_API int dt_debug_fail_allocs_pending(void);

#ifdef __cplusplus
}
#endif

#endif /* DTORCH_DTORCH_H */
