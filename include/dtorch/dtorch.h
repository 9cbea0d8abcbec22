/*
 * dtorch — distributed tensors driven from one thread.
 *
 * This header, with dtorch/dtorch_ops.h (the operators, included at its end),
 * is the whole public face of libdtorch. A client thread builds
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
 * Conventions (docs/style.md says why):
 *  - Functions that build a tensor return a new reference, or NULL on failure
 *    with dt_last_status()/dt_last_error() describing why. Nothing is enqueued
 *    when a call fails.
 *  - Other fallible functions return dt_status (0 = DT_OK, negative = error);
 *    the detail is in the calling thread's dt_last_error().
 *  - Every handle is reference counted; *_release accepts NULL.
 *  - Misuse armor: every entry point that takes a handle accepts NULL or a
 *    handle whose last reference was released. Such a call reports DT_EINVAL
 *    ("... is a released handle"), a getter returns its neutral value (as for
 *    NULL), and retain/release do nothing (a double release frees nothing
 *    twice). Detection is best effort, as SQLite's for a closed connection:
 *    a handle's memory may be reused by a new handle of the same type, and
 *    the old pointer then names the new object. Not a licence to use
 *    released handles; a guard against crashes when a program does.
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
#define DT_VERSION_STRING                                                                                    \
    DT__STR(DT_VERSION_MAJOR) "." DT__STR(DT_VERSION_MINOR) "." DT__STR(DT_VERSION_PATCH)
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
#define DT_STATUS_MAP(X)                                                                                     \
    X(OK, 0, "ok")                                                                                           \
    X(EINVAL, -1, "invalid argument")                                                                        \
    X(ETYPE, -2, "wrong type")                                                                               \
    X(EINDEX, -3, "index out of range")                                                                      \
    X(EPLACEMENT, -4, "placements not accepted by the operator")                                             \
    X(EKERNEL, -5, "a kernel failed on a device")                                                            \
    X(ENOMEM, -6, "out of memory")                                                                           \
    X(ESHUTDOWN, -7, "the graph is shut down")                                                               \
    X(EUNSUPPORTED, -8, "not supported")                                                                     \
    X(ETIMEDOUT, -9, "timed out")                                                                            \
    X(EBACKEND, -10, "backend error")                                                                        \
    X(EINTERNAL, -11, "internal error")                                                                      \
    X(ESHAPE, -12, "shapes do not match")                                                                    \
    X(EOP, -13, "the operation does not accept these inputs")                                                \
    X(EDEVICE, -14, "a device of the mesh is not available")                                                 \
    X(ECANCELLED, -15, "cancelled: the graph was cancelled before this ran")                                 \
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
    /* Nonzero: the graph runs every device on a worker node of a cluster
     * made with dt_cluster_options.private_nodes (one process per device);
     * a device no worker node serves is an error at the call that names it. */
    int per_device_per_process;
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
DT_API dt_mesh *dt_tensor_mesh(const dt_tensor *t);                  /* borrowed */
DT_API const dt_placement *dt_tensor_placements(const dt_tensor *t); /* borrowed, mesh ndim entries */
DT_API dt_graph *dt_tensor_graph(const dt_tensor *t);                /* borrowed */
/* A process-unique id of the symbol. */
DT_API uint64_t dt_tensor_id(const dt_tensor *t);
/* The call site (dt_set_call_site) current when the symbol was made: *file
 * NULL when none was set (and for a released handle). The file is interned
 * (lives as long as the process); either pointer may be NULL. */
DT_API void dt_tensor_site(const dt_tensor *t, const char **file, int *line);
/* The live symbols, of every graph, whose mesh is of `type` and holds one of
 * the device ids first..first+count-1 (what a worker node's devices hold,
 * MainNode.remove): up to `cap` of them into out[], each retained (release
 * each); returns how many there are (more than cap: call again with room).
 * Any thread; a symbol made or dropped meanwhile on another thread may be
 * missed or counted. */
DT_API int64_t dt_tensors_on_devices(dt_device_type type, int64_t first, int64_t count, dt_tensor **out,
                                     int64_t cap);
/* Recovery after a worker node is lost (MainNode.replace, docs/cluster.md).
 * A value made, in a cluster, on a mesh with a worker node's device by a
 * pure op (no host data, no callable, no side effect) keeps a copy of its
 * producing node: its op, attributes and its inputs' value ids (no input is
 * kept alive by it). dt_tensor_lineage writes those ids (at most
 * 6) and returns how many, or -1 when t has no lineage (a
 * value loaded from host data, local, or released); dt_tensor_lineage_op
 * names the op (NULL without). dt_tensor_recompute submits the same node
 * again on `inputs` (the current values for those ids, of t's graph) with
 * the output on `mesh` (t's device type and device count; the ids may
 * differ): a new symbol, or NULL (DT_EINVAL: no lineage, a wrong input or
 * mesh). dt_tensor_mark_lost makes every later read of t fail at once
 * (DT_EKERNEL) with `why` (copied). Client thread. */
DT_API int dt_tensor_lineage(const dt_tensor *t, uint64_t *in_ids);
DT_API const char *dt_tensor_lineage_op(const dt_tensor *t);
DT_API dt_tensor *dt_tensor_recompute(const dt_tensor *t, dt_tensor *const *inputs, int n_in, dt_mesh *mesh);
DT_API dt_status dt_tensor_mark_lost(dt_tensor *t, const char *why);

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
    int64_t submitted;      /* node records pushed since the graph was made (op calls, reads, syncs) */
    int64_t in_flight;      /* records in flight now */
    int64_t peak_in_flight; /* the most in flight the controller saw after a batch, since creation or reset */
    int64_t in_flight_limit; /* flow control's bound (32768) */
    int64_t check_interval;  /* submissions of a thread between two looks at the bound (64) */
    int64_t flow_waits;      /* times a client waited for the pipeline to drain */
    /* Node records never lowered because their result was dropped unread in
     * the controller round that took them (the window's dce pass). */
    int64_t nodes_eliminated;
    /* Kernels that wrote their result into their first input's buffer (the
     * window's reuse pass and the workers' last-reference check). */
    int64_t kernels_in_place;
    /* Node records run inside blocked elementwise chain kernels (the
     * window's chain pass), each counted once. */
    int64_t nodes_fused;
    int64_t cancelled; /* nodes and kernels dropped unrun by dt_graph_cancel */
} dt_graph_stats;

/* Fills *out with a snapshot of g's counters (each read atomically, not all
 * at one instant). With `reset_peak` the peak is then set to the records in
 * flight now. DT_EINVAL for NULL arguments. Any thread. */
DT_API dt_status dt_graph_get_stats(dt_graph *g, dt_graph_stats *out, int reset_peak);

/* Turns g's blocked elementwise chains (docs/decisions.md) on (1, the
 * default only when DTORCH_CHAINS=1 was set when g was made) or off, for the
 * controller rounds that start afterwards. Results are the same either way.
 * DT_EINVAL for a bad graph. Any thread. */
DT_API dt_status dt_graph_set_chains(dt_graph *g, int on);

/* The blocks g's chain kernels ran on so far, over every device (the
 * backend's block size, DTORCH_CHAIN_BLOCK for the torch backend, decides
 * how many; a chain run on whole tensors counts none); -1 for a bad graph.
 * A test aid. Any thread. */
DT_API int64_t dt_debug_chain_blocks(dt_graph *g);

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

/* Tests: the number of collective groups lowered so far in the process (all
 * graphs; read after a sync of the work of interest). Any thread. */
DT_API long dt_debug_collectives_lowered(void);
/* Tests: x's storage layout. 0 when it is regular; otherwise the number of
 * segments of its segmented dim (a communication-free cat along a sharded
 * dim, docs/decisions.md), with that dim, its (first) mesh dim and the segment
 * lengths (at most 8, user order) written out. -1 for a bad handle. */
DT_API int dt_debug_segments(const dt_tensor *x, int *dim, int *mesh_dim, int64_t *lens);
/* Tests: the mesh dims of x's segmented dim (several when it was cut over
 * nested shards), most major of its storage order first, written to
 * mesh_dims (at most 8); dt_debug_segments' mesh_dim is the first. 0 when x
 * is regular, -1 for a bad handle. */
DT_API int dt_debug_segment_mesh_dims(const dt_tensor *x, int *mesh_dims);

/* Fault injection: after `after_n` more successful allocations made by a
 * controller thread while it lowers a node (any graph), the next one fails,
 * once; the node's output is then poisoned with an error naming the op, "on
 * the controller" and the call site, raised at the next read. A negative
 * value disarms. Allocations of client and worker threads never fail. For
 * tests only. Any thread. */
DT_API void dt_debug_fail_allocs(int64_t after_n);
/* 1 while an armed failure has not happened yet, else 0. Any thread. */
DT_API int dt_debug_fail_allocs_pending(void);

/* Tests only: makes this process see `n_gpus` stand-in GPUs, so that the
 * logic of CUDA devices (meshes, worker nodes' CUDA devices, collectives
 * across nodes) runs on a machine without one. The stand-in is the default
 * backend's kernels on host memory, registered as its CUDA variant
 * ("torch_cuda"), whose device count applies CUDA_VISIBLE_DEVICES and the
 * virtualisation variables to `n_gpus` (0: no GPU again). Graphs made
 * afterwards use it for cuda meshes; a graph keeps the backends it was made
 * with. DT_EINVAL for a negative or huge count, or in a build with a real
 * CUDA backend. Any thread. */
DT_API dt_status dt_debug_fake_cuda(int n_gpus);

#ifdef __cplusplus
}
#endif

/* The operators, by family. */
#include "dtorch/dtorch_ops.h"

#endif /* DTORCH_DTORCH_H */
