/*
 * The LibTorch CUDA shim (docs/cuda.md): the "torch_cuda" backend, which the
 * registry gives a graph's CUDA devices when torch has CUDA and a GPU is
 * visible (dt__backend_for_device). Linked only against a torch with CUDA
 * (libc10_cuda, libtorch_cuda); against a CPU torch CMake compiles this
 * file for its errors only (dtorch_torch_cuda_check), so it never runs
 * there. What has run on a GPU is docs/cuda.md's record.
 *
 * Devices: logical CUDA ids map onto the GPUs present (backend/cuda_map.h;
 * several logical ids on one GPU with DTORCH_DTENSOR_IN_SAME_DEVICE=1).
 *
 * Streams: each (logical device, kind) stream takes a stream from ATen's
 * pool of its GPU (compute: low priority, communication: high priority);
 * stream_enter makes it the worker's current device and stream, so every
 * ATen kernel the worker launches goes there and the worker never waits for
 * the GPU.
 *
 * Impls: a cuda_impl, whose first member is the at::Tensor the LibTorch
 * shim's entries read (torch_backend.cpp's impl()), plus the event recorded
 * after the kernel that made it and that kernel's stream. The core's event
 * slots (event_new/record/wait) order kernels across streams; the same event,
 * kept on the impl, also orders the reads a collective makes of its peers'
 * impls (the in-process comm runs kernels on peers' inputs, comm/inproc.c)
 * and tells to_host what to wait for. A CUDA input used on a stream other
 * than its producer's is held by the using stream (a reference, kept with an
 * event recorded after the kernel) until that use has completed, so its
 * memory is reused only afterwards. Inputs not on the worker's GPU (host
 * tensors from from_host, a peer's GPU) are copied there first, host ones
 * through pinned memory without blocking (the pinned copy is held the same
 * way); a kernel whose result is not on the GPU (a factory kernel that builds
 * on the host) has it moved there.
 *
 * A dead context: a device-side assert (an index out of range in a CUDA
 * kernel, as in eager torch) makes every later CUDA call fail, and c10 then
 * throws from inside destructors (the caching allocators record events when a
 * block that other streams used is freed), which is std::terminate: the
 * user's process would abort. Holding references instead of
 * CUDACachingAllocator::recordStream keeps those frees free of CUDA calls,
 * and once the shim has seen a context error (`dead`) it leaks what it would
 * free: the kernel errors still surface at the reads, and the process lives.
 *
 * Events: cudaEvent_t with timing off, pooled per GPU (a mutex-guarded free
 * list; event_free may run on any thread).
 */
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

#include "backend/cuda_map.h"
#include "backend/torch/torch_int.h"

extern "C" {
extern const dt__backend dt__backend_torch;
extern const dt__backend dt__backend_torch_cuda;
}

namespace dt_torch {
namespace {

const dt__backend &T = dt__backend_torch;

struct cuda_impl {
    at::Tensor t;               /* first: torch_backend.cpp's entries read it */
    cudaEvent_t ready{nullptr}; /* recorded after the producing kernel (the blob's event, not owned) */
    cudaStream_t stream{nullptr};
};

/* Inputs another stream made (or pinned host copies), kept alive until the
 * kernels that read them on this stream have run: `done` is recorded after
 * them. */
struct hold {
    cudaEvent_t done;
    std::vector<at::Tensor> keep;
};

struct stream_ctx {
    int64_t logical;
    c10::DeviceIndex gpu;
    int kind;
    c10::cuda::CUDAStream stream;
    std::deque<hold> holds;         /* oldest first; the worker thread only (then stream_free) */
    std::vector<cudaEvent_t> spare; /* `done` events to reuse */
};

thread_local stream_ctx *tl_ctx;        /* the worker's stream (stream_enter) */
thread_local cuda_impl *tl_last_output; /* the worker's last output, until its event is recorded */
/* The worker's stream is being captured into a CUDA graph (graph_begin to
 * graph_end): its kernels' inputs are the graph's static tensors, already
 * waited for, so nothing waits on, records or queries an event then (none
 * of which a capture allows). */
thread_local bool tl_capturing;

/* A pooled event and the GPU it belongs to. */
struct cuda_event {
    cudaEvent_t e;
    c10::DeviceIndex gpu;
};
std::mutex pool_lock;
std::vector<std::vector<cuda_event *>> event_pool; /* per GPU; guarded by pool_lock */

/* Set (once, any thread) when a CUDA call reported a context error. */
std::atomic<bool> dead{false};

void note(cudaError_t e) {
    if (e != cudaSuccess && e != cudaErrorNotReady)
        dead.store(true, std::memory_order_relaxed);
}

/* After an exception on a worker: a sticky context error shows on its stream. */
void note_stream() {
    if (tl_ctx && !tl_capturing) /* a failed capture is no context error */
        note(cudaStreamQuery(tl_ctx->stream.stream()));
}

void check(cudaError_t e, const char *what) {
    note(e);
    if (e != cudaSuccess)
        fail(std::string("torch_cuda: ") + what + ": " + cudaGetErrorString(e));
}

/* Drops the references in `keep`; in a dead context the tensors are leaked,
 * since freeing them may throw from a destructor. */
void release(std::vector<at::Tensor> &keep) {
    if (dead.load(std::memory_order_relaxed))
        for (at::Tensor &t : keep)
            if (t.defined())
                t.unsafeReleaseTensorImpl();
    keep.clear();
}

/* Releases the holds whose kernels have run (all of them with `wait`, after
 * waiting for each: the stream is going away). */
void reap(stream_ctx *c, bool wait) {
    while (!c->holds.empty()) {
        hold &h = c->holds.front();
        cudaError_t e = wait ? cudaEventSynchronize(h.done) : cudaEventQuery(h.done);
        if (e == cudaErrorNotReady)
            return;
        note(e);
        release(h.keep);
        c->spare.push_back(h.done);
        c->holds.pop_front();
    }
}

/* Keeps `keep` alive until the kernels enqueued so far on the worker's stream have run. */
void hold_until_done(std::vector<at::Tensor> &keep) {
    if (keep.empty())
        return;
    stream_ctx *c = tl_ctx;
    cudaEvent_t e = nullptr;
    if (!c->spare.empty()) {
        e = c->spare.back();
        c->spare.pop_back();
    } else {
        cudaError_t ce = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
        note(ce);
        if (ce != cudaSuccess)
            e = nullptr;
    }
    cudaError_t re = e ? cudaEventRecord(e, c->stream.stream()) : cudaErrorUnknown;
    note(re);
    if (re != cudaSuccess) { /* no event: the context is gone (or out of resources): wait no longer */
        if (e)
            c->spare.push_back(e);
        release(keep);
        return;
    }
    c->holds.push_back(hold{e, std::move(keep)});
    keep.clear();
}

dt__cuda_map device_map() {
    dt__cuda_map m;
    char err[256];
    int64_t gpus = (int64_t)c10::cuda::device_count();
    if (dt__cuda_map_from_env(gpus, &m, err, sizeof err) != 0)
        m.n_logical = 0; /* a bad value: no device, and the mesh check says why */
    return m;
}

/* Wraps a LibTorch shim impl (an at::Tensor*) as a cuda_impl, on the
 * worker's GPU when there is one. */
void *wrap(void *p) {
    at::Tensor *t = static_cast<at::Tensor *>(p);
    cuda_impl *c = new cuda_impl{std::move(*t)};
    delete t;
    if (tl_ctx && !(c->t.is_cuda() && c->t.device().index() == tl_ctx->gpu))
        c->t = c->t.to(at::Device(at::kCUDA, tl_ctx->gpu), /*non_blocking=*/true);
    return c;
}

/* The inputs a kernel on the worker's stream may read: each waits (on the
 * device) for its producer's event; those made on another stream go into
 * `keep` (held until the kernel has run, hold_until_done); those on another
 * device are copied to this GPU into `moved`, their pinned host sources into
 * `keep`. */
void prepare_inputs(void *const *in, int n_in, std::vector<at::Tensor> &moved, std::vector<at::Tensor> &keep,
                    std::vector<void *> &ptrs) {
    ptrs.assign(in, in + n_in);
    if (!tl_ctx || tl_capturing)
        return;
    reap(tl_ctx, false);
    cudaStream_t cur = tl_ctx->stream.stream();
    moved.reserve((size_t)n_in);
    for (int i = 0; i < n_in; i++) {
        const cuda_impl *c = static_cast<const cuda_impl *>(in[i]);
        if (!c)
            continue;
        if (c->ready && c->stream != cur)
            check(cudaStreamWaitEvent(cur, c->ready, 0), "cudaStreamWaitEvent");
        if (c->t.is_cuda() && c->t.device().index() == tl_ctx->gpu) {
            if (c->stream != cur && c->t.has_storage())
                keep.push_back(c->t);
            continue;
        }
        at::Tensor src = c->t.is_cuda() ? c->t : c->t.pin_memory();
        moved.push_back(src.to(at::Device(at::kCUDA, tl_ctx->gpu), /*non_blocking=*/true));
        keep.push_back(std::move(src));
        ptrs[(size_t)i] = &moved.back();
    }
}

/* Host-side wait for an impl's values (reads by the client thread). */
void wait_ready(const void *p) {
    const cuda_impl *c = static_cast<const cuda_impl *>(p);
    if (!c || !c->t.is_cuda())
        return;
    if (c->ready) {
        check(cudaEventSynchronize(c->ready), "cudaEventSynchronize");
    } else {
        c10::cuda::CUDAGuard g(c->t.device().index());
        c10::cuda::device_synchronize();
    }
}

dt_status out_of(dt_status st, void **out) {
    if (st == DT_OK && *out) {
        *out = wrap(*out);
        tl_last_output = static_cast<cuda_impl *>(*out);
    }
    return st;
}

/* ------------------------------------------------------------ entries */

/* A kernel's inputs on the worker's stream, and after it has run the holds on them. */
struct prepared {
    std::vector<at::Tensor> moved, keep;
    std::vector<void *> ptrs;
    prepared(void *const *in, int n_in) { prepare_inputs(in, n_in, moved, keep, ptrs); }
    ~prepared() {
        try {
            if (tl_ctx && !tl_capturing)
                hold_until_done(keep);
            release(keep);
            if (dead.load(std::memory_order_relaxed))
                release(moved);
        } catch (...) {
        }
    }
};

/* A kernel's failure: its status, and whether it left the context dead. */
dt_status failed(char *err, size_t errlen) {
    dt_status st = translate_current(err, errlen);
    note_stream();
    return st;
}

dt_status cuda_run(int kop, const dt__kattr *a, void *const *in, int n_in, void **out, char *err,
                   size_t errlen) {
    try {
        prepared p(in, n_in);
        dt_status st = out_of(T.run(kop, a, p.ptrs.data(), n_in, out, err, errlen), out);
        if (st != DT_OK)
            note_stream();
        return st;
    } catch (...) {
        return failed(err, errlen);
    }
}

dt_status cuda_run_chain(const dt__chain_step *steps, int nsteps, void *const *in, int n_in, int inplace,
                         void **out, int *failed_step, int64_t *blocks, char *err, size_t errlen) {
    *blocks = 0;
    try {
        prepared p(in, n_in);
        /* A moved input is a copy: writing the result into it is no donation. */
        int inp = inplace && p.moved.empty();
        dt_status st = out_of(
            T.run_chain(steps, nsteps, p.ptrs.data(), n_in, inp, out, failed_step, blocks, err, errlen), out);
        if (st != DT_OK)
            note_stream();
        return st;
    } catch (...) {
        *failed_step = -1;
        return failed(err, errlen);
    }
}

void cuda_free(void *p) {
    if (p == tl_last_output) /* a temporary freed before any event named it */
        tl_last_output = nullptr;
    cuda_impl *c = static_cast<cuda_impl *>(p);
    if (c && dead.load(std::memory_order_relaxed) && c->t.defined())
        c->t.unsafeReleaseTensorImpl();
    try {
        delete c;
    } catch (...) {
    }
}

dt_status cuda_from_host(dt_dtype dtype, int ndim, const int64_t *shape, const void *data, void **out,
                         char *err, size_t errlen) {
    try {
        return out_of(T.from_host(dtype, ndim, shape, data, out, err, errlen), out);
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status cuda_to_host(const void *p, void *buf, size_t nbytes, char *err, size_t errlen) {
    try {
        wait_ready(p);
        return T.to_host(p, buf, nbytes, err, errlen);
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status cuda_from_dlpack(void *dl, void **out, dt_dtype *dtype, int *ndim, int64_t *shape, char *err,
                           size_t errlen) {
    try {
        dt_status st = out_of(torch_from_dlpack(dl, out, dtype, ndim, shape, err, errlen), out);
        /* The private copy was made on the caller's current stream; workers
         * read it on theirs, so it must be complete first (a copy at the
         * call, as on CPU). */
        const cuda_impl *c = st == DT_OK ? static_cast<const cuda_impl *>(*out) : nullptr;
        if (c && c->t.is_cuda())
            c10::cuda::getCurrentCUDAStream(c->t.device().index()).synchronize();
        return st;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status cuda_to_dlpack(const void *p, void **out_dl, char *err, size_t errlen) {
    try {
        wait_ready(p);
        return torch_to_dlpack(p, out_dl, err, errlen);
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status cuda_assemble(dt_dtype dtype, int ndim, const int64_t *shape, int n, void *const *pieces,
                        const int64_t *starts, int accumulate, void **out, char *err, size_t errlen) {
    try {
        for (int i = 0; i < n; i++)
            wait_ready(pieces[i]);
        return out_of(T.assemble(dtype, ndim, shape, n, pieces, starts, accumulate, out, err, errlen), out);
    } catch (...) {
        return translate_current(err, errlen);
    }
}

void cuda_empty_cache(void) {
    try {
        c10::cuda::CUDACachingAllocator::emptyCache();
    } catch (...) {
    }
    T.empty_cache();
}

int64_t cuda_device_count(dt_device_type type) {
    if (type == DT_DEVICE_CPU)
        return -1;
    try {
        dt__cuda_map m = device_map();
        return dt__cuda_map_count(&m);
    } catch (...) {
        return 0;
    }
}

/* ------------------------------------------------ streams and events */

dt_status cuda_stream_new(dt_device_type type, int64_t id, int kind, void **ctx, char *err, size_t errlen) {
    try {
        dt__cuda_map m = device_map();
        int64_t gpu = dt__cuda_map_gpu(&m, id);
        if (type != DT_DEVICE_CUDA || gpu < 0)
            fail("torch_cuda: no CUDA device " + std::to_string(id));
        c10::cuda::CUDAStream s =
            c10::cuda::getStreamFromPool(/*isHighPriority=*/kind == 1, (c10::DeviceIndex)gpu);
        *ctx = new stream_ctx{id, (c10::DeviceIndex)gpu, kind, s, {}, {}};
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

void cuda_stream_enter(void *p) {
    stream_ctx *c = static_cast<stream_ctx *>(p);
    try {
        c10::cuda::set_device(c->gpu);
        c10::cuda::setCurrentCUDAStream(c->stream);
        set_factory_device(c10::Device(c10::kCUDA, c->gpu));
        tl_ctx = c;
    } catch (...) {
    }
}

void cuda_stream_free(void *p) {
    stream_ctx *c = static_cast<stream_ctx *>(p);
    if (!c)
        return;
    try {
        reap(c, true);
        if (!dead.load(std::memory_order_relaxed))
            for (cudaEvent_t e : c->spare)
                cudaEventDestroy(e);
    } catch (...) {
    }
    delete c;
}

dt_status cuda_event_new(void *p, void **ev) {
    stream_ctx *c = static_cast<stream_ctx *>(p);
    if (!c)
        return DT_EINVAL;
    try {
        std::lock_guard<std::mutex> g(pool_lock);
        if ((size_t)c->gpu < event_pool.size() && !event_pool[(size_t)c->gpu].empty()) {
            *ev = event_pool[(size_t)c->gpu].back();
            event_pool[(size_t)c->gpu].pop_back();
            return DT_OK;
        }
    } catch (...) {
        return DT_ENOMEM;
    }
    /* The worker's current device is the stream's GPU (stream_enter). */
    cudaEvent_t e = nullptr;
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess)
        return DT_EBACKEND;
    cuda_event *ce = new (std::nothrow) cuda_event{e, c->gpu};
    if (!ce) {
        cudaEventDestroy(e);
        return DT_ENOMEM;
    }
    *ev = ce;
    return DT_OK;
}

dt_status cuda_event_record(void *ev, void *p) {
    stream_ctx *c = static_cast<stream_ctx *>(p);
    cudaEvent_t e = static_cast<cuda_event *>(ev)->e;
    cudaError_t ce = cudaEventRecord(e, c->stream.stream());
    note(ce);
    if (ce != cudaSuccess)
        return DT_EBACKEND;
    if (tl_last_output) {
        tl_last_output->ready = e;
        tl_last_output->stream = c->stream.stream();
        tl_last_output = nullptr;
    }
    return DT_OK;
}

dt_status cuda_event_wait(void *p, void *ev) {
    stream_ctx *c = static_cast<stream_ctx *>(p);
    cudaEvent_t e = static_cast<cuda_event *>(ev)->e;
    cudaError_t ce = cudaStreamWaitEvent(c->stream.stream(), e, 0);
    note(ce);
    return ce == cudaSuccess ? DT_OK : DT_EBACKEND;
}

/* Done, or failed (the error surfaces at the read): anything but "not ready". */
int cuda_event_query(void *ev) {
    cudaError_t ce = cudaEventQuery(static_cast<cuda_event *>(ev)->e);
    note(ce);
    return ce != cudaErrorNotReady;
}

/* Back to its GPU's free list (any thread); the pool lives as long as the
 * process, as ATen's own event pools do. */
void cuda_event_free(void *ev) {
    cuda_event *ce = static_cast<cuda_event *>(ev);
    if (!ce)
        return;
    try {
        std::lock_guard<std::mutex> g(pool_lock);
        if (event_pool.size() <= (size_t)ce->gpu)
            event_pool.resize((size_t)ce->gpu + 1);
        event_pool[(size_t)ce->gpu].push_back(ce);
    } catch (...) {
        cudaEventDestroy(ce->e);
        delete ce;
    }
}

/* ---------------------------------------------- comm device buffers */

void *cuda_data_ptr(const void *p) {
    try {
        const at::Tensor &t = impl(p);
        return t.is_cuda() && t.is_contiguous() ? t.data_ptr() : nullptr;
    } catch (...) {
        return nullptr;
    }
}

dt_status cuda_empty(dt_dtype dtype, int ndim, const int64_t *shape, void **out, char *err, size_t errlen) {
    try {
        check_ndim(ndim, "empty");
        if (!tl_ctx)
            fail("torch_cuda: empty() outside a CUDA worker");
        at::Tensor t = at::empty(dims_of(shape, ndim),
                                 at::TensorOptions().dtype(to_aten(dtype)).device(at::kCUDA, tl_ctx->gpu));
        cuda_impl *c = new cuda_impl{std::move(t)};
        *out = c;
        tl_last_output = c;
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

/* The LibTorch shim's entries that need nothing CUDA-specific, called
 * through its table (read at call time: the tables are in different files). */
size_t cuda_nbytes(const void *p) { return T.nbytes(p); }
void cuda_dlpack_delete(void *dl) { T.dlpack_delete(dl); }
void cuda_worker_init(dt_device_type type, int64_t id, int live) { T.worker_init(type, id, live); }
dt_dtype cuda_default_dtype(void) { return T.default_dtype(); }
int cuda_same_storage(const void *a, const void *b) { return T.same_storage(a, b); }
int64_t cuda_cached_bytes(void) { return T.cached_bytes(); }
size_t cuda_storage_nbytes(const void *p) { return T.storage_nbytes(p); }

void *cuda_native_stream(void) { return tl_ctx ? (void *)tl_ctx->stream.stream() : nullptr; }

/* ------------------------------------------------------ captured runs */

/* A run slot's kernels captured on a worker's stream (backend.h, "Captured
 * runs"; core/worker/graph_run.c), with a private memory pool: the results
 * the kernels made during capture live there, and each replay writes them
 * again. Captured in thread-local mode, so other workers' CUDA calls go on
 * meanwhile. NOT YET RUN ON A GPU (docs/cuda.md). */
struct cuda_graph {
    at::cuda::CUDAGraph g;
    bool ended{false};
};

dt_status cuda_graph_begin(void *p, void **out, char *err, size_t errlen) {
    stream_ctx *c = static_cast<stream_ctx *>(p);
    cuda_graph *gr = nullptr;
    try {
        if (!c || c != tl_ctx || dead.load(std::memory_order_relaxed))
            return DT_EUNSUPPORTED;
        reap(c, false);
        gr = new cuda_graph();
        gr->g.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
        tl_capturing = true;
        *out = gr;
        return DT_OK;
    } catch (...) {
        delete gr;
        return translate_current(err, errlen);
    }
}

dt_status cuda_graph_end(void *p, char *err, size_t errlen) {
    cuda_graph *gr = static_cast<cuda_graph *>(p);
    tl_capturing = false;
    tl_last_output = nullptr;
    try {
        gr->g.capture_end();
        gr->ended = true;
        return DT_OK;
    } catch (...) {
        dt_status st = translate_current(err, errlen);
        /* A call the capture refused (a sync inside a kernel) left its error
         * as the thread's last one: not a context error, and the next
         * kernel's launch check must not report it. */
        (void)cudaGetLastError();
        return st;
    }
}

dt_status cuda_graph_launch(void *p, char *err, size_t errlen) {
    cuda_graph *gr = static_cast<cuda_graph *>(p);
    try {
        if (!gr->ended)
            fail("torch_cuda: launch of a graph whose capture did not end");
        gr->g.replay(); /* on the current stream: the worker's */
        return DT_OK;
    } catch (...) {
        return failed(err, errlen);
    }
}

void cuda_graph_free(void *p) {
    cuda_graph *gr = static_cast<cuda_graph *>(p);
    if (!gr || dead.load(std::memory_order_relaxed)) /* leaked in a dead context, as tensors are */
        return;
    try {
        delete gr;
    } catch (...) {
    }
}

int cuda_layout(const void *p, dt__layout *l) {
    try {
        const at::Tensor &t = impl(p);
        return tensor_layout(t, !(tl_ctx && t.is_cuda() && t.device().index() == tl_ctx->gpu), l);
    } catch (...) {
        return -1;
    }
}

/* A new impl made on the worker's stream, ready there (no event to wait for). */
cuda_impl *on_stream(at::Tensor t) {
    cuda_impl *c = new cuda_impl{std::move(t)};
    c->stream = tl_ctx ? tl_ctx->stream.stream() : nullptr;
    return c;
}

dt_status cuda_graph_static(const void *p, void **out, char *err, size_t errlen) {
    try {
        void *const in[1] = {const_cast<void *>(p)};
        prepared pr(in, 1);
        const at::Tensor &t = impl(pr.ptrs[0]);
        at::Tensor s = at::empty_strided(t.sizes(), t.strides(), t.options());
        s.copy_(t, /*non_blocking=*/true);
        *out = on_stream(std::move(s));
        return DT_OK;
    } catch (...) {
        return failed(err, errlen);
    }
}

dt_status cuda_graph_copy(void *dst, const void *src, char *err, size_t errlen) {
    try {
        void *const in[1] = {const_cast<void *>(src)};
        prepared pr(in, 1);
        impl(dst).copy_(impl(pr.ptrs[0]), /*non_blocking=*/true);
        return DT_OK;
    } catch (...) {
        return failed(err, errlen);
    }
}

/* A launch's output as the core hands it out: its event is recorded next
 * (tl_last_output). */
void *cuda_graph_share(const void *p) {
    try {
        cuda_impl *c = on_stream(impl(p).alias());
        tl_last_output = c;
        return c;
    } catch (...) {
        return nullptr;
    }
}

int64_t cuda_graph_held(const void *p) {
    try {
        return storage_uses(impl(p));
    } catch (...) {
        return INT64_MAX;
    }
}

} // namespace
} // namespace dt_torch

using namespace dt_torch;

/* Positional, in backend.h's order (designated initialisers are C++20). */
const dt__backend dt__backend_torch_cuda = {
    "torch_cuda",
    cuda_run,
    cuda_free,
    cuda_nbytes,
    cuda_from_host,
    cuda_to_host,
    cuda_from_dlpack,
    cuda_to_dlpack,
    cuda_dlpack_delete,
    cuda_assemble,
    cuda_worker_init,
    cuda_default_dtype,
    cuda_same_storage,
    cuda_empty_cache,
    cuda_device_count,
    cuda_cached_bytes,
    DT_BACKEND_API_VERSION,
    cuda_stream_new,
    cuda_stream_enter,
    cuda_stream_free,
    cuda_event_new,
    cuda_event_record,
    cuda_event_wait,
    cuda_event_query,
    cuda_event_free,
    cuda_run_chain,
    nullptr /* describe */,
    cuda_data_ptr,
    cuda_empty,
    cuda_native_stream,
    cuda_storage_nbytes,
    nullptr /* thread_rest: a CUDA worker's kernels start no host threads */,
    nullptr /* thread_serial: the "torch" backend, registered beside it, sets the thread */,
    cuda_graph_begin,
    cuda_graph_end,
    cuda_graph_launch,
    cuda_graph_free,
    cuda_layout,
    cuda_graph_static,
    cuda_graph_copy,
    cuda_graph_share,
    cuda_graph_held,
};

__attribute__((constructor)) static void dt_torch_cuda_register(void) {
    dt__backend_register(&dt__backend_torch_cuda);
}
