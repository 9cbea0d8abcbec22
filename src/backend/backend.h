/*
 * The compute backend: what a worker calls to run one kernel on one device.
 *
 * A backend is a table of function pointers (ggml-backend style). Core code
 * never names ATen: it hands opaque value handles ("impls") to these entries.
 * An impl is one local tensor on one device. It need not be contiguous: a
 * view-like kernel (reshape, permute, a slice, attention's output) may hand
 * out a strided view of its input's storage or of its own temporary, as
 * eager torch does, and several impls may share storage, because dtorch
 * never mutates an impl after the kernel that produced it returns unless
 * the backend sees that nothing else holds its storage (DT_KF_INPLACE).
 * Every entry that reads an impl must therefore accept any strides
 * (to_host copies them out in row-major order); docs/decisions.md, "Kernel
 * results may be views", says which results are views and how they are
 * counted.
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

/* Kernel ops: append-only; the rows, with each op's semantics, are
 * backend/kernels.def. */
typedef enum dt__kop {
#define DT_KOP(E, ...) DT_K_##E,
#include "backend/kernels.def"
    DT_K_COUNT
} dt__kop;

enum {
    DT_KF_REVERSED = 1 << 0,
    DT_KF_KEEPDIM = 1 << 1,
    DT_KF_ALL = 1 << 2,
    /* DT_KL_LINEAR: the weight is a module's (torch's nn.Parameter, which
     * requires grad): the product is the one eager torch takes then
     * (dt_linear_param). */
    DT_KF_LINEAR_PARAM = 1 << 3,
    /* Set by the core (the reuse mark, src/core/controller/passes/reuse.c):
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
enum { DT_KL_MM = 0, DT_KL_BMM, DT_KL_OUTER, DT_KL_LINEAR, DT_KL_EINSUM, DT_KL_MATMUL };
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
    /* out = in[0].contiguous() (in[0] itself when it already is). */
    DT_KV_CONTIGUOUS,
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
    DT_KF_EW_MAX_TENSOR = 1 << 21, /* CLAMP: max is an input */
    /* EW_BINARY with DT_KF_REVERSED, SUB or DIV: Python's reflected
     * operator (s - t, s / t), which torch computes as at::rsub(t, s) and
     * reciprocal(t) * s, not as torch.sub(s, t) / torch.div(s, t). */
    DT_KF_EW_OPERATOR = 1 << 22
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
    int32_t sub;        /* the op within a family kernel (each kernel op says) */
    int32_t flags;      /* DT_KF_* */
    int32_t ndim;       /* entries of shape/start */
    int32_t dim;        /* CAT */
    int32_t gndim;      /* entries of gshape */
    uint64_t dims_mask; /* REDUCE */
    uint64_t seed;      /* RAND/RANDN */
    int64_t shape[DT_MAX_NDIM];
    int64_t start[DT_MAX_NDIM];
    int64_t gshape[DT_MAX_NDIM];
    dt_scalar scalar; /* FULL, EW_BINARY */
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

/* One step of a DT_K_CHAIN kernel (run_chain below). */
#define DT__CHAIN_MAX_STEPS 16
#define DT__CHAIN_MAX_IN 6
typedef struct dt__chain_step {
    int32_t kop;                  /* an elementwise DT_K_* */
    int32_t n_in;                 /* the kernel's inputs */
    int8_t src[DT__CHAIN_MAX_IN]; /* per input: the chain's input index, or -1: the previous result */
    dt__kattr attr;               /* the kernel's attributes */
} dt__chain_step;

struct dt__layout;

typedef struct dt__backend {
    const char *name;

    /* Runs kernel `kop` on `n_in` input impls; on success *out is a new impl.
     * Called on a worker thread. */
    dt_status (*run)(int kop, const dt__kattr *a, void *const *in, int n_in, void **out, char *err,
                     size_t errlen);
    /* Frees an impl. NULL is ignored. */
    void (*free)(void *impl);
    /* Bytes of the impl's elements in row-major order (numel * dtype size):
     * what to_host writes. A view may keep more alive (storage_nbytes). */
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
     * wrote in place, or one is a view of the other), so memory is
     * accounted once. */
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
     * producing stream's mutex and condition variable, events.c).
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

    /* ---- Blocked elementwise chains (DT_K_CHAIN; any api_version) ----
     * Optional (NULL: the core runs the steps one after the other, whole).
     * Runs `nsteps` (1..DT__CHAIN_MAX_STEPS) elementwise kernels in order:
     * step i's inputs are in[src[j]], or the previous step's result where
     * src[j] < 0. Every input has the same shape; *out gets the last step's
     * result, of that shape and the last step's dtype. `inplace` allows the
     * result to be written into in[0]'s buffer (DT_KF_INPLACE's rules). On
     * failure *failed_step is the step whose kernel failed (-1: none in
     * particular) and err its message. On success *blocks is the number of
     * blocks the steps ran on (0 when they ran on the whole tensors; the
     * core counts them, dt_debug_chain_blocks). Called on a worker thread. */
    dt_status (*run_chain)(const struct dt__chain_step *steps, int nsteps, void *const *in, int n_in,
                           int inplace, void **out, int *failed_step, int64_t *blocks, char *err,
                           size_t errlen);

    /* Optional (any api_version; NULL: unknown). The impl's dtype and shape
     * (at most DT_MAX_NDIM dims into `shape`): returns its ndim, or -1. Used
     * to ship a value to another process (core/controller/remote.c). Any thread. */
    int (*describe)(const void *impl, dt_dtype *dtype, int64_t *shape);
    /* ---- Device buffers for comm back ends (any api_version) ----
     * Optional; a comm that drives the device itself (NCCL: comm/nccl.c)
     * needs all three and reports a kernel error without them. Called on the
     * worker of the impl's device (its stream current, stream_enter). */
    /* The impl's element storage when it is contiguous (device memory for
     * CUDA), else NULL. */
    void *(*data_ptr)(const void *impl);
    /* A new contiguous impl of `dtype` and `shape` with unspecified values, on
     * the calling worker's device. */
    dt_status (*empty)(dt_dtype dtype, int ndim, const int64_t *shape, void **out, char *err, size_t errlen);
    /* The calling worker's current native stream (CUDA: a cudaStream_t), or
     * NULL when there is none. */
    void *(*native_stream)(void);

    /* Optional (any api_version; NULL: nbytes). Bytes of the storage the
     * impl keeps alive: more than nbytes for a view of part of a larger
     * buffer. Memory accounting charges this (core/records/blob.c). Any thread. */
    size_t (*storage_nbytes)(const void *impl);

    /* Optional (any api_version). The calling thread is about to sleep for a
     * while (a client blocked on a read, a worker idle for a few
     * milliseconds): give back what the backend keeps on this thread for
     * running kernels in parallel. LibTorch: the thread's idle OpenMP team.
     * libgomp counts every team's threads, idle or not, against the
     * machine's cores; once they outnumber the cores, every team's threads
     * sleep between parallel regions instead of spinning, and each region
     * pays a wake-up per thread (the client's team from eager torch work
     * beside a worker's team: about 140 sleeps a pass of bench/block.py).
     * The next parallel region on the thread makes its team again (about
     * 100 us). Any thread, outside a parallel region. */
    void (*thread_rest)(void);
    /* Optional: the calling thread runs the backend's work on itself alone
     * from now on, making no team of intra-op threads: for dtorch's
     * service threads, whose copies (a RESULT's bytes into a value, a
     * batch's host values on a worker node) are short and frequent, and
     * whose idle team would otherwise count against the cores for good
     * (see thread_rest; nothing rests those threads). LibTorch: OpenMP and
     * MKL thread counts of 1 for the thread. Outside a parallel region. */
    void (*thread_serial)(void);

    /* ---- Captured runs (CUDA graphs; any api_version) ----
     * Optional: all NULL, or graph_begin returning DT_EUNSUPPORTED, means the
     * backend captures nothing and every run's kernels run one by one. A
     * worker captures the kernels of a repeated run slot on its stream
     * (core/worker/graph_run.c; docs/decisions.md, "CUDA graphs"):
     *
     *   graph_begin; run (each kernel, on the static inputs: no event
     *   waits, no holds, no host reads); graph_end; graph_launch ...
     *
     * Between graph_begin and graph_end the calling worker's `run` calls
     * are recorded into the graph (CUDA: launched into a stream capture,
     * their results' memory from the graph's private pool, values not yet
     * computed). graph_launch runs the recorded kernels again on the
     * worker's stream, writing the same result impls (the static outputs)
     * in place. Every entry runs on the worker that made the graph, its
     * stream current; graph_free on any thread. No entry throws. */
    /* Starts recording this worker's run calls into a new graph. */
    dt_status (*graph_begin)(void *stream_ctx, void **graph, char *err, size_t errlen);
    /* Ends the recording. On failure the graph is unusable (graph_free it)
     * and the impls run made meanwhile hold no values. */
    dt_status (*graph_end)(void *graph, char *err, size_t errlen);
    /* Runs the recorded kernels on the worker's stream. */
    dt_status (*graph_launch)(void *graph, char *err, size_t errlen);
    void (*graph_free)(void *graph);
    /* The impl's layout for a capture's key: 0, or -1 when unknown. */
    int (*layout)(const void *impl, struct dt__layout *out);
    /* A new impl of the same dtype, shape and strides as `impl`, with its
     * values, made on the worker's stream (a graph's static input). */
    dt_status (*graph_static)(const void *impl, void **out, char *err, size_t errlen);
    /* dst's values := src's (same layout), queued on the worker's stream. */
    dt_status (*graph_copy)(void *dst, const void *src, char *err, size_t errlen);
    /* A new impl naming impl's storage (a fresh view of all of it), or NULL:
     * a launch's output as the core hands it out. */
    void *(*graph_share)(const void *impl);
    /* How many impls name impl's storage now (its use count): the core
     * launches a graph again only while its static tensors' counts are
     * what they were when nothing outside the graph held them. */
    int64_t (*graph_held)(const void *impl);
} dt__backend;

/* An impl's layout (dt__backend.layout): what a capture depends on. */
typedef struct dt__layout {
    int32_t dtype, ndim;
    int32_t host; /* 1: not on the calling worker's device (a kernel would read the host) */
    int32_t pad;
    int64_t offset; /* storage offset, in elements */
    int64_t shape[DT_MAX_NDIM];
    int64_t stride[DT_MAX_NDIM];
    uintptr_t addr; /* the data pointer (0 when there is none) */
} dt__layout;

/* The version of the device/stream/event slots above. */
#define DT_BACKEND_API_VERSION 2

/* Calls every registered backend's empty_cache. */
void dt__backends_empty_cache(void);
/* Whether threads give their backend resources back when they wait
 * (thread_rest): 1 unless DTORCH_THREAD_REST=0 in the environment (read
 * once), which bench/block.py uses to measure what it buys. */
int dt__thread_rest_on(void);
/* Calls every registered backend's thread_rest on the calling thread, when
 * dt__thread_rest_on and the thread did not fork (see below). */
void dt__backends_thread_rest(void);
/* Calls every registered backend's thread_serial on the calling thread (a
 * service thread, at its start). */
void dt__backends_thread_serial(void);
/* In a fork child, on the thread that forked (the core's pthread_atfork
 * handler, registered at load): it never rests again. What it kept for running in
 * parallel (an OpenMP team) names threads that stayed in the parent, and
 * giving it back would wait for them for ever. */
void dt__backends_thread_forked(void);
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
/* The backend a graph whose backend is `be` uses for devices of `type`: for
 * CUDA, the registered "<name>_cuda" backend (the LibTorch CUDA shim,
 * torch/torch_cuda.cpp, built only against a torch with CUDA) when it sees a
 * device; otherwise `be` itself (whose device_count then refuses cuda meshes
 * at the call). */
const dt__backend *dt__backend_for_device(const dt__backend *be, dt_device_type type);

#ifdef __cplusplus
}
#endif

#endif /* DT_BACKEND_H */
