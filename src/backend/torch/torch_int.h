/*
 * Shared pieces of the LibTorch backend, for the operator-family files
 * (torch_<family>.cpp) that add kernels next to torch_backend.cpp.
 *
 * A family file defines kernels as
 *     at::Tensor my_kernel(const dt__kattr *a, void *const *in, int n_in);
 * and registers each with DT_TORCH_KERNEL(DT_K_..., my_kernel). The kernel may
 * throw (c10::Error, or fail() for a caller mistake): torch_run catches
 * everything at the boundary and turns it into a status. It returns the
 * result tensor in the attr dtype through finish(), which keeps a view as a
 * view (with the rules written there). A kernel must accept inputs of any
 * strides, views of each other's storage included.
 *
 * Threads: kernels run on worker threads, concurrently; they must not keep
 * mutable state between calls.
 */
#ifndef DT_TORCH_INTERNAL_H
#define DT_TORCH_INTERNAL_H

#include <ATen/ATen.h>

#include <stdexcept>
#include <string>

#include "backend/backend.h"

namespace dt_torch {

/* A caller mistake caught by the backend (bad dtype, rank, op, pointer) rather
 * than by ATen: it maps to DT_EINVAL instead of DT_EBACKEND. */
struct invalid_arg : std::runtime_error {
    explicit invalid_arg(const std::string &m) : std::runtime_error(m) {}
};
[[noreturn]] void fail(const std::string &m);

at::ScalarType to_aten(int32_t dtype);
/* -1 for an ATen type dtorch has no name for. */
int from_aten(at::ScalarType st);
/* The Scalar a Python bool/int/float of that kind would give torch. */
at::Scalar to_scalar(const dt_scalar &s);
/* The tensor behind an impl pointer (fails on NULL). */
const at::Tensor &impl(const void *p);
void check_ndim(int ndim, const char *what);
at::IntArrayRef dims_of(const int64_t *shape, int ndim);
/* A fresh contiguous copy in `st`. */
at::Tensor fresh(const at::Tensor &x, at::ScalarType st);
/* r in dtype st (a guard: the core infers torch's dtype), in ATen's layout
 * unless it overlaps itself or covers under a quarter of its storage. */
at::Tensor finish(const at::Tensor &r, at::ScalarType st);
/* The view x[start[d] : start[d] + shape[d]]; *whole tells if that is all of x. */
at::Tensor region(const at::Tensor &x, int ndim, const int64_t *start, const int64_t *shape, bool *whole);
/* Whether a kernel may write its result into x (DT_KF_INPLACE): the core
 * allows it, x is its storage's only owner (no view, no export), contiguous,
 * of the result's dtype, and an operand of sizes `other_sizes` broadcasts
 * into it. Pass x's own sizes for a unary op. */
bool donatable(const dt__kattr *a, const at::Tensor &x, at::IntArrayRef other_sizes);
/* x op= y for tiny same-dtype float operands and sub ADD/SUB/MUL/DIV (no
 * alpha), by a plain loop that is bit-identical to ATen's kernel; false when
 * it does not apply (torch_backend.cpp). */
bool tiny_binary_inplace(int sub, at::Tensor &x, const at::Tensor &y);
/* Fails unless lo <= n_in <= hi (hi < 0: no upper bound). */
void need_inputs(int kop, int n_in, int lo, int hi);
/* The current exception (inside a catch) as a status and message. */
dt_status translate_current(char *err, size_t errlen) noexcept;

/* Options for a kernel that builds its result from nothing (full, empty,
 * arange): dtype st on the calling worker's device, the host unless the CUDA
 * shim's stream_enter named its GPU (set_factory_device), so a factory on a
 * cuda mesh is torch's CUDA kernel, bit for bit, with no copy. Random
 * factories stay on the host: their values are the CPU generator's. */
at::TensorOptions factory_options(at::ScalarType st);
void set_factory_device(c10::Device d);

/* The DLPack entries (torch_dlpack.cpp). */
dt_status torch_from_dlpack(void *dl_managed, void **out, dt_dtype *dtype, int *ndim, int64_t *shape,
                            char *err, size_t errlen);
dt_status torch_to_dlpack(const void *p, void **out_dl_managed, char *err, size_t errlen);
void torch_dlpack_delete(void *dl_managed);

/* Marks the calling thread as a dtorch worker: its large allocations come
 * from the caching CPU allocator (torch_alloc.cpp), installed on first call. */
void mark_worker_thread();
/* Frees every cached block. */
void empty_cpu_cache();
/* Bytes of free blocks the cache holds now (any thread). */
size_t cpu_cache_bytes();

/* Ring attention's step and final kernels (torch_attention.cpp): DT_K_SDPA
 * with DT_KNN_RING or DT_KNN_RING_FINAL. */
at::Tensor ring_attention_kernel(const dt__kattr *a, void *const *in, int n_in);

using kernel_fn = at::Tensor (*)(const dt__kattr *a, void *const *in, int n_in);
struct kernel_registrar {
    kernel_registrar(int kop, kernel_fn fn);
};
/* The kernel registered for kop, or nullptr (torch_backend.cpp). */
kernel_fn kernel_for(int kop);
/* The thread_rest entry (torch_chain.cpp, the file built with OpenMP). */
void torch_thread_rest(void);
void torch_thread_serial(void);

/* Captured runs (torch_graph.cpp): the CPU emulation of CUDA graphs. While
 * tl_graph_capture is set (graph_begin on this thread), torch_run notes
 * each kernel it ran there (graph_note). */
extern thread_local void *tl_graph_capture;
void graph_note(int kop, const dt__kattr *a, void *const *in, int n_in, void *out);
dt_status torch_graph_begin(void *stream_ctx, void **graph, char *err, size_t errlen);
dt_status torch_graph_end(void *graph, char *err, size_t errlen);
dt_status torch_graph_launch(void *graph, char *err, size_t errlen);
void torch_graph_free(void *graph);
int torch_layout(const void *impl, dt__layout *out);
/* t's layout (`host`: not on the calling worker's device); -1 for a dtype
 * or rank dtorch has no name for. */
int tensor_layout(const at::Tensor &t, bool host, dt__layout *l);
/* How many tensors name t's storage. */
int64_t storage_uses(const at::Tensor &t);
dt_status torch_graph_static(const void *impl, void **out, char *err, size_t errlen);
dt_status torch_graph_copy(void *dst, const void *src, char *err, size_t errlen);
void *torch_graph_share(const void *impl);
int64_t torch_graph_held(const void *impl);

/* The run_chain entry (torch_chain.cpp). */
dt_status torch_run_chain(const dt__chain_step *steps, int nsteps, void *const *in, int n_in, int inplace,
                          void **out, int *failed_step, int64_t *blocks, char *err, size_t errlen) noexcept;

} // namespace dt_torch

#define DT_TORCH_KERNEL(kop, fn) static const dt_torch::kernel_registrar dt_torch_reg_##fn((kop), (fn))

#endif /* DT_TORCH_INTERNAL_H */
