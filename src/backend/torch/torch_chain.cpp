/*
 * The LibTorch backend's run_chain (backend.h, DT_K_CHAIN): a chain of
 * elementwise kernels run block by block, so that the intermediates stay in
 * cache and only the inputs and the result are read or written in memory.
 *
 * Each step calls the kernel the unfused node runs (the kernel table), on
 * views of the inputs' blocks and on the previous step's block result,
 * which the step may overwrite (DT_KF_INPLACE: the in-place forms run the
 * same structured ATen kernels). A block has at most ATen's grain size of
 * elements, so each call runs on one thread and splits its block into a
 * vectorised body and a scalar tail exactly where a one-thread call on the
 * whole tensor would (blocks start at multiples of every vector width);
 * the blocks are handed out one by one to the intra-op threads (at::parallel_for
 * over the threads, a shared counter over the blocks).
 * The block size is DTORCH_CHAIN_BLOCK elements (1024..32768, rounded down
 * to a multiple of 1024; default 32768, also for a value out of that range:
 * ATen's grain size, 128 KiB of float32 per operand, measured in
 * docs/benchmarks.md). The blocks run are reported (*blocks), so a test can
 * see the size taken (dt_debug_chain_blocks).
 *
 * Blocks are row-major ranges, which is the order ATen's kernels walk a
 * contiguous tensor in. A strided input (kernel results may be views) is
 * walked by the unfused kernel in its own memory order, with its vector
 * body and scalar tail elsewhere, and some kernels round differently there
 * (docs/decisions.md): a chain with a non-contiguous input runs its steps
 * one after the other on the whole tensors instead, as the unfused nodes
 * would.
 *
 * Threads: a worker thread, and ATen's intra-op threads inside
 * parallel_for; no state is kept but the block size, read once.
 */
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

#include "backend/torch/torch_int.h"

#ifdef _OPENMP
#include <omp.h>
/* OpenMP 5.0's (libgomp since GCC 9); weak, so a runtime without it only
 * means threads are not given back. */
#pragma weak omp_pause_resource_all
#endif

/* MKL's per-thread thread count (mkl_service.h's mkl_set_num_threads_local,
 * the C entry; returns the previous one, and 0 restores the
 * global setting). Weak: a LibTorch built without MKL has none, and then
 * nothing needs it. */
extern "C" int MKL_Set_Num_Threads_Local(int nthreads) __attribute__((weak));

namespace dt_torch {
namespace {

/* Makes MKL calls on this thread sequential while it lives. ATen runs its
 * own nested parallel_for calls inline, but MKL's vector math (exp, sin,
 * tanh, ... through at::vml) does not know about ATen's regions: with
 * mkl_set_dynamic(false), which ATen sets, each call inside a chain block
 * started a nested team of intra-op threads, so two block threads forked
 * and joined two more threads per step per block on two cores. */
struct mkl_sequential {
    int prev = -1;
    mkl_sequential() {
        if (MKL_Set_Num_Threads_Local)
            prev = MKL_Set_Num_Threads_Local(1);
    }
    ~mkl_sequential() {
        if (prev >= 0)
            MKL_Set_Num_Threads_Local(prev);
    }
    mkl_sequential(const mkl_sequential &) = delete;
    mkl_sequential &operator=(const mkl_sequential &) = delete;
};

int64_t block_elems() {
    static const int64_t b = [] {
        const char *e = std::getenv("DTORCH_CHAIN_BLOCK");
        long v = e ? std::atol(e) : 0;
        if (v < 1024 || v > 32768)
            v = 32768;
        return (int64_t)(v / 1024 * 1024);
    }();
    return b;
}

/* Whether the result may go into x's buffer (as donatable(), for the
 * chain's own output). */
bool may_take(const at::Tensor &x, at::ScalarType st) {
    return x.use_count() == 1 && x.has_storage() && x.storage().use_count() == 1 && x.is_contiguous() &&
           x.scalar_type() == st && x.storage_offset() == 0;
}

/* The steps on the whole tensors, each kernel as its unfused node runs it
 * (step i > 0 may write into the previous step's result, its own). */
at::Tensor run_whole(const dt__chain_step *steps, int nsteps, void *const *in, std::atomic<int> &failed) {
    at::Tensor cur;
    for (int i = 0; i < nsteps; ++i) {
        const dt__chain_step &st = steps[i];
        void *args[DT__CHAIN_MAX_IN];
        for (int j = 0; j < st.n_in; ++j)
            args[j] = st.src[j] < 0 ? static_cast<void *>(&cur) : in[st.src[j]];
        dt__kattr a = st.attr;
        if (i > 0 && st.src[0] < 0)
            a.flags |= DT_KF_INPLACE;
        failed.store(i);
        at::Tensor r = kernel_for(st.kop)(&a, args, st.n_in);
        cur = std::move(r);
    }
    failed.store(-1);
    return cur;
}

} // namespace

dt_status torch_run_chain(const dt__chain_step *steps, int nsteps, void *const *in, int n_in, int inplace,
                          void **out, int *failed_step, int64_t *blocks, char *err, size_t errlen) noexcept {
    *out = nullptr;
    *failed_step = -1;
    *blocks = 0;
    std::atomic<int> failed{-1};
    try {
        if (nsteps < 1 || n_in < 1 || n_in > DT__CHAIN_MAX_IN)
            fail("torch backend: a chain of " + std::to_string(nsteps) + " steps and " +
                 std::to_string(n_in) + " inputs");
        for (int i = 0; i < nsteps; ++i)
            if (!kernel_for(steps[i].kop))
                fail("torch backend: unknown kernel op " + std::to_string(steps[i].kop) + " in a chain");
        for (int j = 0; j < n_in; ++j)
            if (!impl(in[j]).is_contiguous()) {
                *out = new at::Tensor(run_whole(steps, nsteps, in, failed));
                return DT_OK;
            }
        const at::Tensor &x0 = impl(in[0]);
        const int64_t n = x0.numel();
        at::ScalarType odt = to_aten(steps[nsteps - 1].attr.dtype);
        at::Tensor o = inplace && may_take(x0, odt) ? x0 : at::empty(x0.sizes(), x0.options().dtype(odt));
        at::Tensor flat[DT__CHAIN_MAX_IN];
        for (int j = 0; j < n_in; ++j) {
            const at::Tensor &x = impl(in[j]);
            if (x.numel() != n)
                fail("torch backend: chain inputs of different sizes");
            flat[j] = x.view({-1});
        }
        at::Tensor of = o.view({-1});
        const int64_t B = block_elems(), nb = (n + B - 1) / B;
        auto run_block = [&](int64_t b) {
            const int64_t off = b * B, len = std::min(B, n - off);
            at::Tensor blk[DT__CHAIN_MAX_IN];
            for (int j = 0; j < n_in; ++j)
                blk[j] = flat[j].narrow(0, off, len);
            at::Tensor cur;
            for (int i = 0; i < nsteps; ++i) {
                const dt__chain_step &st = steps[i];
                void *args[DT__CHAIN_MAX_IN];
                for (int j = 0; j < st.n_in; ++j)
                    args[j] =
                        st.src[j] < 0 ? static_cast<void *>(&cur) : static_cast<void *>(&blk[st.src[j]]);
                dt__kattr a = st.attr;
                if (i > 0 && st.src[0] < 0)
                    a.flags |= DT_KF_INPLACE; // cur is this block's own
                try {
                    at::Tensor r = kernel_for(st.kop)(&a, args, st.n_in);
                    cur = std::move(r);
                } catch (...) {
                    int none = -1;
                    failed.compare_exchange_strong(none, i);
                    throw;
                }
            }
            of.narrow(0, off, len).copy_(cur);
        };
        // Blocks are handed out one at a time from a shared counter rather
        // than in one fixed range per thread: a thread that loses its core
        // for a while (to the client or controller thread, or to another
        // process) does not hold up the others at the end. Which thread runs
        // a block does not change its values (each block is computed alone).
        std::atomic<int64_t> next{0};
        const int64_t nt = std::min<int64_t>(nb, at::get_num_threads());
        at::parallel_for(0, nt, 1, [&](int64_t, int64_t) {
            mkl_sequential serial;
            for (int64_t b; failed.load(std::memory_order_relaxed) < 0 &&
                            (b = next.fetch_add(1, std::memory_order_relaxed)) < nb;)
                run_block(b);
        });
        *out = new at::Tensor(std::move(o));
        *blocks = nb;
        return DT_OK;
    } catch (...) {
        *failed_step = failed.load();
        return translate_current(err, errlen);
    }
}

void torch_thread_rest(void) {
#ifdef _OPENMP
    /* Frees this thread's team (its threads exit); about half a microsecond
     * when it has none. Not for a thread set to one OpenMP thread: it makes
     * no team, and may hold one made before a fork that dtorch was not
     * loaded to see (dt__backends_thread_forked); torch.set_num_threads(1),
     * the usual remedy in such a child, keeps dtorch away from it too. */
    if (omp_pause_resource_all && !omp_in_parallel() && omp_get_max_threads() > 1)
        (void)omp_pause_resource_all(omp_pause_soft);
#endif
}

void torch_thread_serial(void) {
    try {
        /* torch's own per-thread first-use setting first (inside libtorch:
         * its flag is libtorch's), so it does not set the process's count
         * on this thread after us. */
        (void)at::get_num_threads();
    } catch (...) {
        return;
    }
#ifdef _OPENMP
    if (omp_in_parallel())
        return;
    torch_thread_rest(); /* a team made before goes too */
    omp_set_num_threads(1);
#endif
    if (MKL_Set_Num_Threads_Local)
        (void)MKL_Set_Num_Threads_Local(1);
}

} // namespace dt_torch
