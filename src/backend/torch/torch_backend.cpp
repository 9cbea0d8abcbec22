/*
 * The LibTorch compute backend: the only C++ in dtorch.
 *
 * It implements the dt__backend vtable of backend.h on top of ATen. An impl is
 * an `at::Tensor *` made with `new` and released with `delete`; the tensor
 * has whatever strides the kernel's ATen call gave it (finish(): a view of an
 * input is handed on as a view, as eager torch would) and is never written
 * after the entry that made it returns unless donatable() sees that nothing
 * else holds its storage, which is why a view, a whole-tensor SLICE or a
 * one-input SUM_N may hand out a second at::Tensor sharing the same storage.
 *
 * Threads: every entry may run on any thread, concurrently with any other
 * entry - the kernel ops on worker threads (one per device stream), from_host,
 * to_host and assemble also on the client and controller threads. Nothing is
 * shared between calls: each call builds its own tensors (and, for
 * RAND/RANDN, its own generator), so this file holds no lock and no mutable
 * global. worker_init changes only the calling thread's intra-op thread count
 * (plus ATen's process-wide default for threads that start later).
 *
 * No exception may cross into C: every entry body is a try block whose
 * catch (...) calls translate_current(), which turns c10::Error,
 * std::exception and anything else into a status and the first line of the
 * message. Entries that cannot report (free, nbytes, dlpack_delete,
 * worker_init, default_dtype) swallow errors instead. (The try/catch is
 * written out rather than hidden behind macros so clang-format can read it.)
 *
 * Builds against LibTorch >= 2.4 (CMake checks the version).
 */
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/DLConvertor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/Parallel.h>
#include <ATen/dlpack.h>
#include <c10/core/DefaultDtype.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/torch/torch_int.h"

extern "C" {
extern const dt__backend dt__backend_torch;
}

namespace dt_torch {

/* Kernels that operator-family files register (torch_int.h). The table
 * is zero-initialised before any dynamic initialiser runs, and each family
 * file fills its own slots during static initialisation, before main. */
static kernel_fn kernel_table[DT_K_COUNT];

kernel_fn kernel_for(int kop) { return kop >= 0 && kop < DT_K_COUNT ? kernel_table[kop] : nullptr; }

kernel_registrar::kernel_registrar(int kop, kernel_fn fn) {
    if (kop >= 0 && kop < DT_K_COUNT)
        kernel_table[kop] = fn;
}

/* ------------------------------------------------------------ error mapping */

[[noreturn]] void fail(const std::string &m) { throw invalid_arg(m); }

/* Copies the first line of `msg` into err: ATen messages often continue with
 * context lines that only repeat what the core already reports. */
dt_status report(char *err, size_t errlen, dt_status st, const char *msg) noexcept {
    if (err && errlen > 0) {
        if (!msg)
            msg = "unknown error";
        size_t n = std::strcspn(msg, "\n");
        std::snprintf(err, errlen, "%.*s", (int)std::min(n, (size_t)4096), msg);
    }
    return st;
}

/* Called from inside a catch block: rethrows the exception in flight and maps
 * it to a status, so every entry shares one translation. */
dt_status translate_current(char *err, size_t errlen) noexcept {
    try {
        throw;
    } catch (const c10::OutOfMemoryError &e) {
        return report(err, errlen, DT_ENOMEM, e.what_without_backtrace());
    } catch (const c10::Error &e) {
        return report(err, errlen, DT_EBACKEND, e.what_without_backtrace());
    } catch (const invalid_arg &e) {
        return report(err, errlen, DT_EINVAL, e.what());
    } catch (const std::bad_alloc &) {
        return report(err, errlen, DT_ENOMEM, "torch backend: out of memory");
    } catch (const std::exception &e) {
        return report(err, errlen, DT_EBACKEND, e.what());
    } catch (...) {
        return report(err, errlen, DT_EBACKEND, "torch backend: unknown C++ exception");
    }
}

/* ------------------------------------------------------------------- dtypes */

at::ScalarType to_aten(int32_t dtype) {
    switch (dtype) {
    case DT_BOOL:
        return at::kBool;
    case DT_UINT8:
        return at::kByte;
    case DT_INT8:
        return at::kChar;
    case DT_INT16:
        return at::kShort;
    case DT_INT32:
        return at::kInt;
    case DT_INT64:
        return at::kLong;
    case DT_FLOAT16:
        return at::kHalf;
    case DT_BFLOAT16:
        return at::kBFloat16;
    case DT_FLOAT32:
        return at::kFloat;
    case DT_FLOAT64:
        return at::kDouble;
    default:
        fail("torch backend: unknown dtype " + std::to_string(dtype));
    }
}

/* -1 for an ATen type dtorch has no name for (complex, quantized, ...). */
int from_aten(at::ScalarType st) {
    switch (st) {
    case at::kBool:
        return DT_BOOL;
    case at::kByte:
        return DT_UINT8;
    case at::kChar:
        return DT_INT8;
    case at::kShort:
        return DT_INT16;
    case at::kInt:
        return DT_INT32;
    case at::kLong:
        return DT_INT64;
    case at::kHalf:
        return DT_FLOAT16;
    case at::kBFloat16:
        return DT_BFLOAT16;
    case at::kFloat:
        return DT_FLOAT32;
    case at::kDouble:
        return DT_FLOAT64;
    default:
        return -1;
    }
}

/* The kind, not the value, decides torch's type promotion, so the Scalar must
 * carry the same C++ type a Python bool/int/float would give it. */
at::Scalar to_scalar(const dt_scalar &s) {
    switch (s.kind) {
    case DT_SCALAR_BOOL:
        return at::Scalar(s.i != 0);
    case DT_SCALAR_INT:
        return at::Scalar(static_cast<int64_t>(s.i));
    case DT_SCALAR_FLOAT:
        return at::Scalar(s.f);
    default:
        fail("torch backend: unknown scalar kind " + std::to_string(s.kind));
    }
}

/* ------------------------------------------------------------------ helpers */

const at::Tensor &impl(const void *p) {
    if (!p)
        fail("torch backend: NULL tensor impl");
    return *static_cast<const at::Tensor *>(p);
}

void check_ndim(int ndim, const char *what) {
    if (ndim < 0 || ndim > DT_MAX_NDIM)
        fail(std::string("torch backend: ") + what + " has " + std::to_string(ndim) + " dims (0.." +
             std::to_string(DT_MAX_NDIM) + " allowed)");
}

at::IntArrayRef dims_of(const int64_t *shape, int ndim) {
    return ndim > 0 ? at::IntArrayRef(shape, (size_t)ndim) : at::IntArrayRef();
}

/* A fresh contiguous copy in `st`: the result owns compact storage, so it
 * never keeps a larger source alive. */
at::Tensor fresh(const at::Tensor &x, at::ScalarType st) {
    return x.to(st, /*non_blocking=*/false, /*copy=*/true, at::MemoryFormat::Contiguous);
}

/* Kernel results in the attr dtype, in the layout the ATen call gave them:
 * a strided view (a permute, a slice, attention's [B, L, H, D] buffer seen as
 * [B, H, L, D]) is handed on as eager torch hands it on, with no copy, and
 * the next kernel reads it as eager torch's next op would (the same strides,
 * so the same kernel paths and bits). Two kinds of view are copied
 * (docs/decisions.md, "Kernel results may be views"):
 *  - one with internal overlap (a stride 0 over more than one element, as
 *    expand makes): no impl ever has two elements at one address;
 *  - one that covers less than a quarter of its storage: a small slice must
 *    not pin a large buffer (a copy is never more than 4x smaller than what
 *    it frees, and memory accounting charges the storage).
 * The cast normally does not happen (the core infers the dtype torch infers);
 * it is a guard, not a semantic step. */
at::Tensor finish(const at::Tensor &r, at::ScalarType st) {
    if (r.scalar_type() != st)
        return r.to(st, false, false, at::MemoryFormat::Contiguous);
    if (!r.has_storage())
        return r.contiguous();
    const size_t used = (size_t)r.numel() * r.element_size();
    if (used * 4 < r.storage().nbytes())
        return r.clone(at::MemoryFormat::Contiguous);
    if (!r.is_contiguous() && at::has_internal_overlap(r) == at::MemOverlap::Yes)
        return r.contiguous();
    return r;
}

/* The view of x[start[d] : start[d] + shape[d]] for every d; *whole tells
 * whether that is all of x. Bounds are checked by narrow (c10::Error). */
at::Tensor region(const at::Tensor &x, int ndim, const int64_t *start, const int64_t *shape, bool *whole) {
    check_ndim(ndim, "region");
    if (x.dim() != ndim)
        fail("torch backend: region of " + std::to_string(ndim) + " dims on a tensor of " +
             std::to_string(x.dim()) + " dims");
    at::Tensor v = x;
    *whole = true;
    for (int d = 0; d < ndim; ++d) {
        if (start[d] != 0 || shape[d] != x.size(d))
            *whole = false;
        v = v.narrow(d, start[d], shape[d]);
    }
    return v;
}

void need_inputs(int kop, int n_in, int lo, int hi) {
    if (n_in < lo || (hi >= 0 && n_in > hi))
        fail("torch backend: kernel op " + std::to_string(kop) + " got " + std::to_string(n_in) + " inputs");
}

bool is_integral_no_bool(at::ScalarType st) { return at::isIntegralType(st, /*includeBool=*/false); }

thread_local c10::Device tl_factory_device(c10::kCPU); /* the worker's (set_factory_device) */

at::TensorOptions factory_options(at::ScalarType st) {
    return at::TensorOptions().dtype(st).device(tl_factory_device);
}
void set_factory_device(c10::Device d) { tl_factory_device = d; }

/* torch.arange with integer dtype sees Python ints; pass int64 scalars when the
 * doubles are exact integers so the Scalars are those torch would get.
 * Otherwise keep doubles (ATen converts or rejects them as torch does). */
at::Tensor arange_global(const double f[3], at::ScalarType st) {
    bool ints = is_integral_no_bool(st);
    for (int i = 0; i < 3 && ints; ++i)
        ints = std::isfinite(f[i]) && f[i] == std::trunc(f[i]) && std::fabs(f[i]) < 9.2e18;
    at::TensorOptions o = factory_options(st);
    if (ints)
        return at::arange(at::Scalar(static_cast<int64_t>(f[0])), at::Scalar(static_cast<int64_t>(f[1])),
                          at::Scalar(static_cast<int64_t>(f[2])), o);
    return at::arange(at::Scalar(f[0]), at::Scalar(f[1]), at::Scalar(f[2]), o);
}

/* The whole global random tensor, then the region. Generating everything and
 * slicing is what makes the values independent of mesh and placements. Half
 * and bfloat16 draw in float32 and round (so the values are float32's, cast);
 * float64 draws in float64. */
at::Tensor random_region(bool normal, const dt__kattr *a, at::ScalarType st) {
    check_ndim(a->gndim, "rand global shape");
    if (!normal && a->sub == DT_KRAND_INT) {
        // randint draws in the result dtype itself, as torch.randint(dtype=) does.
        at::Generator gen = at::detail::createCPUGenerator(a->seed);
        at::Tensor g = at::randint(a->scalar.i, a->scalar2.i, dims_of(a->gshape, a->gndim), gen,
                                   at::TensorOptions().dtype(st));
        bool whole = false;
        at::Tensor v = region(g, a->gndim, a->start, a->shape, &whole);
        return whole ? g : v.clone(at::MemoryFormat::Contiguous);
    }
    if (a->sub != DT_KRAND_UNIFORM)
        fail("torch backend: unknown rand sub code " + std::to_string(a->sub));
    if (!at::isFloatingType(st))
        fail("torch backend: rand/randn need a floating dtype");
    at::ScalarType gen_st = st == at::kDouble ? at::kDouble : at::kFloat;
    at::Generator gen = at::detail::createCPUGenerator(a->seed);
    at::IntArrayRef gshape = dims_of(a->gshape, a->gndim);
    at::TensorOptions o = at::TensorOptions().dtype(gen_st);
    at::Tensor g = normal ? at::randn(gshape, gen, o) : at::rand(gshape, gen, o);
    bool whole = false;
    at::Tensor v = region(g, a->gndim, a->start, a->shape, &whole); // the region has gndim dims
    if (whole && gen_st == st)
        return g;
    return fresh(v, st);
}

/* ------------------------------------------------------------ in place */

/* Whether the result may be written into x: the core says nothing else will
 * read x (DT_KF_INPLACE), x is the only owner of its storage (no view, no
 * DLPack export), and x already has the result's dtype and shape (the other
 * operand broadcasts into it). In-place ATen ops run the same kernels as the
 * out-of-place ones, so the values are bit-identical. */
bool donatable(const dt__kattr *a, const at::Tensor &x, at::IntArrayRef other_sizes) {
    if (!(a->flags & DT_KF_INPLACE))
        return false;
    if (!x.defined() || x.use_count() != 1 || !x.has_storage() || x.storage().use_count() != 1)
        return false;
    if (!x.is_contiguous() || x.scalar_type() != to_aten(a->dtype) || x.storage_offset() != 0)
        return false;
    if ((size_t)x.dim() < other_sizes.size())
        return false;
    for (size_t i = 0; i < other_sizes.size(); ++i) {
        int64_t o = other_sizes[other_sizes.size() - 1 - i], d = x.size(x.dim() - 1 - (int64_t)i);
        if (o != d && o != 1)
            return false;
    }
    return true;
}

/* Tiny same-dtype float operands: a plain loop instead of ATen's dispatch and
 * TensorIterator set-up, which cost far more than the arithmetic for a few
 * elements. Each element is x op y in the operands' own precision, exactly as
 * ATen's kernels compute it (add/sub with alpha 1: x + 1*y is x + y), so the
 * values are bit-identical. */
template <typename T> bool tiny_binary(int sub, T *x, const T *y, int64_t n, bool y_scalar) {
    for (int64_t i = 0; i < n; ++i) {
        T b = y[y_scalar ? 0 : i];
        switch (sub) {
        case DT_BINARY_ADD:
            x[i] = x[i] + b;
            break;
        case DT_BINARY_SUB:
            x[i] = x[i] - b;
            break;
        case DT_BINARY_MUL:
            x[i] = x[i] * b;
            break;
        case DT_BINARY_DIV:
            x[i] = x[i] / b;
            break;
        default:
            return false;
        }
    }
    return true;
}

bool tiny_binary_inplace(int sub, at::Tensor &x, const at::Tensor &y) {
    constexpr int64_t kTiny = 4096;
    int64_t n = x.numel();
    if (n > kTiny || sub > DT_BINARY_DIV || !y.is_contiguous() || y.scalar_type() != x.scalar_type() ||
        y.device() != x.device() || !x.device().is_cpu())
        return false;
    bool y_scalar = y.numel() == 1;
    if (!y_scalar && !y.sizes().equals(x.sizes()))
        return false;
    switch (x.scalar_type()) {
    case at::kFloat:
        return tiny_binary(sub, x.data_ptr<float>(), y.data_ptr<float>(), n, y_scalar);
    case at::kDouble:
        return tiny_binary(sub, x.data_ptr<double>(), y.data_ptr<double>(), n, y_scalar);
    default:
        return false;
    }
}

void torch_empty_cache(void) {
    try {
        empty_cpu_cache();
    } catch (...) {
        return;
    }
}

int64_t torch_cached_bytes(void) {
    try {
        return (int64_t)cpu_cache_bytes();
    } catch (...) {
        return 0;
    }
}

int torch_same_storage(const void *a, const void *b) {
    try {
        const at::Tensor &x = impl(a), &y = impl(b);
        return x.has_storage() && y.has_storage() && x.storage().is_alias_of(y.storage()) ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

/* ------------------------------------------------------------- the kernels */

dt_status torch_run(int kop, const dt__kattr *a, void *const *in, int n_in, void **out, char *err,
                    size_t errlen) {
    try {
        if (out)
            *out = nullptr;
        if (!a || !out)
            fail("torch backend: NULL attr or out");
        if (n_in < 0 || (n_in > 0 && !in))
            fail("torch backend: bad input list");
        at::Tensor r;
        switch (kop) {
        case DT_K_SLICE: {
            need_inputs(kop, n_in, 1, 1);
            const at::Tensor &x = impl(in[0]);
            bool whole = false;
            at::Tensor v = region(x, a->ndim, a->start, a->shape, &whole);
            // A contiguous copy rather than a view: the comm sends SLICE's
            // result by its pointer (comm/nccl.c), and a shard's slice of a
            // replicated value would pin the whole source storage.
            r = whole ? x.contiguous() : v.clone(at::MemoryFormat::Contiguous);
            break;
        }
        case DT_K_FULL: {
            check_ndim(a->ndim, "full");
            r = at::full(dims_of(a->shape, a->ndim), to_scalar(a->scalar),
                         factory_options(to_aten(a->dtype)));
            break;
        }
        case DT_K_EMPTY: {
            check_ndim(a->ndim, "empty");
            // Zeros, not at::empty: runs must be reproducible.
            r = at::zeros(dims_of(a->shape, a->ndim), factory_options(to_aten(a->dtype)));
            break;
        }
        case DT_K_ARANGE: {
            at::ScalarType st = to_aten(a->dtype);
            // Only start[0], shape[0] and gshape[0] are documented for ARANGE,
            // so ndim/gndim are not consulted. The length check catches a
            // client whose arange sizing disagrees with torch's.
            at::Tensor g = arange_global(a->f, st);
            if (g.size(0) != a->gshape[0])
                fail("torch backend: arange has " + std::to_string(g.size(0)) + " values, expected " +
                     std::to_string(a->gshape[0]));
            bool whole = false;
            at::Tensor v = region(g, 1, a->start, a->shape, &whole);
            r = whole ? g : v.clone(at::MemoryFormat::Contiguous);
            break;
        }
        case DT_K_RAND:
        case DT_K_RANDN:
            r = random_region(kop == DT_K_RANDN, a, to_aten(a->dtype));
            break;
        case DT_K_CAT: {
            need_inputs(kop, n_in, 1, -1);
            std::vector<at::Tensor> list;
            list.reserve((size_t)n_in);
            for (int i = 0; i < n_in; ++i)
                list.push_back(impl(in[i]));
            r = finish(at::cat(at::TensorList(list), a->dim), to_aten(a->dtype));
            break;
        }
        case DT_K_SUM_N: {
            need_inputs(kop, n_in, 1, -1);
            // A left fold in index order: floating-point addition is not
            // associative, and callers rely on this exact order.
            at::Tensor acc = impl(in[0]);
            for (int i = 1; i < n_in; ++i)
                acc = at::add(acc, impl(in[i]));
            r = finish(acc, to_aten(a->dtype));
            break;
        }
        case DT_K_ZEROS_LIKE: {
            need_inputs(kop, n_in, 1, 1);
            const at::Tensor &x = impl(in[0]);
            r = at::zeros(x.sizes(), x.options());
            break;
        }
        default:
            if (kop < 0 || kop >= DT_K_COUNT || !kernel_table[kop])
                fail("torch backend: unknown kernel op " + std::to_string(kop));
            r = kernel_table[kop](a, in, n_in);
        }
        *out = new at::Tensor(std::move(r));
        if (tl_graph_capture) /* the CUDA-graph emulation records it (torch_graph.cpp) */
            graph_note(kop, a, in, n_in, *out);
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

/* ---------------------------------------------------------- other entries */

void torch_free(void *p) {
    // Destroying a tensor does not throw; the catch is for the boundary rule.
    try {
        delete static_cast<at::Tensor *>(p);
    } catch (...) {
        return;
    }
}

size_t torch_nbytes(const void *p) {
    try {
        if (!p)
            return 0;
        const at::Tensor &t = impl(p);
        return (size_t)t.numel() * t.element_size();
    } catch (...) {
        return 0;
    }
}

size_t torch_storage_nbytes(const void *p) {
    try {
        if (!p)
            return 0;
        const at::Tensor &t = impl(p);
        if (!t.has_storage())
            return (size_t)t.numel() * t.element_size();
        return t.storage().nbytes();
    } catch (...) {
        return 0;
    }
}

int torch_describe(const void *p, dt_dtype *dtype, int64_t *shape) {
    try {
        if (!p)
            return -1;
        const at::Tensor &t = impl(p);
        if (t.dim() > DT_MAX_NDIM)
            return -1;
        int dt = from_aten(t.scalar_type());
        if (dt < 0)
            return -1;
        *dtype = (dt_dtype)dt;
        for (int64_t d = 0; d < t.dim(); ++d)
            shape[d] = t.size(d);
        return (int)t.dim();
    } catch (...) {
        return -1;
    }
}

dt_status torch_from_host(dt_dtype dtype, int ndim, const int64_t *shape, const void *data, void **out,
                          char *err, size_t errlen) {
    try {
        if (!out)
            fail("torch backend: NULL out");
        *out = nullptr;
        at::ScalarType st = to_aten(dtype);
        check_ndim(ndim, "from_host");
        if (ndim > 0 && !shape)
            fail("torch backend: NULL shape");
        int64_t numel = 1;
        for (int d = 0; d < ndim; ++d) {
            if (shape[d] < 0)
                fail("torch backend: negative size in from_host");
            numel *= shape[d];
        }
        at::IntArrayRef sizes = dims_of(shape, ndim);
        at::TensorOptions o = at::TensorOptions().dtype(st);
        at::Tensor r;
        if (numel == 0) {
            r = at::empty(sizes, o); // no bytes to read; data may be NULL
        } else {
            if (!data)
                fail("torch backend: NULL data in from_host");
            // from_blob borrows the caller's buffer; clone makes it ours.
            r = at::from_blob(const_cast<void *>(data), sizes, o).clone();
        }
        *out = new at::Tensor(std::move(r));
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status torch_to_host(const void *p, void *buf, size_t nbytes, char *err, size_t errlen) {
    try {
        at::Tensor t = impl(p);
        if (!t.device().is_cpu())
            t = t.cpu();
        t = t.contiguous();
        size_t have = (size_t)t.numel() * t.element_size();
        if (have != nbytes)
            fail("torch backend: to_host buffer has " + std::to_string(nbytes) + " bytes, tensor has " +
                 std::to_string(have));
        if (have > 0) {
            if (!buf)
                fail("torch backend: NULL buffer in to_host");
            std::memcpy(buf, t.data_ptr(), have);
        }
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status torch_assemble(dt_dtype dtype, int ndim, const int64_t *shape, int n, void *const *pieces,
                         const int64_t *starts, int accumulate, void **out, char *err, size_t errlen) {
    try {
        if (!out)
            fail("torch backend: NULL out");
        *out = nullptr;
        at::ScalarType st = to_aten(dtype);
        check_ndim(ndim, "assemble");
        if (ndim > 0 && !shape)
            fail("torch backend: NULL shape");
        if (n < 0 || (n > 0 && !pieces) || (n > 0 && ndim > 0 && !starts))
            fail("torch backend: bad piece list in assemble");
        at::IntArrayRef sizes = dims_of(shape, ndim);
        // The result lives where the pieces live (the first one decides).
        at::TensorOptions o = at::TensorOptions().dtype(st);
        if (n > 0)
            o = o.device(impl(pieces[0]).device());

        if (n == 1 && !accumulate) {
            // The common single-shard read: one copy instead of zero-fill + copy.
            const at::Tensor &p = impl(pieces[0]);
            bool whole = p.dim() == ndim && p.sizes() == sizes;
            for (int d = 0; d < ndim && whole; ++d)
                whole = starts[d] == 0;
            if (whole) {
                *out = new at::Tensor(fresh(p, st));
                return DT_OK;
            }
        }
        at::Tensor r = at::zeros(sizes, o);
        for (int i = 0; i < n; ++i) {
            const at::Tensor &p = impl(pieces[i]);
            if (p.dim() != ndim)
                fail("torch backend: assemble piece " + std::to_string(i) + " has " +
                     std::to_string(p.dim()) + " dims, expected " + std::to_string(ndim));
            at::Tensor dst = r;
            for (int d = 0; d < ndim; ++d)
                dst = dst.narrow(d, starts[(size_t)i * ndim + d], p.size(d));
            if (accumulate)
                dst.add_(p);
            else
                dst.copy_(p);
        }
        *out = new at::Tensor(std::move(r));
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

void torch_worker_init(dt_device_type type, int64_t device_id, int live_workers) {
    try {
        mark_worker_thread();
        (void)type;
        (void)device_id;
        (void)live_workers;
        // Every worker runs its kernels with the intra-op thread count eager
        // torch uses (torch's process setting, which init_num_threads applies
        // to this thread), not a share of it: torch 2.x CPU kernels split
        // their work by thread count and some round differently per split
        // (softmax along a non-last dim, conv2d), so only the same count
        // gives eager torch's bits. Re-applied whenever the worker count
        // changes, so a torch.set_num_threads() before then is followed.
        at::init_num_threads();
    } catch (...) {
        return;
    }
}

dt_dtype torch_default_dtype(void) {
    try {
        int dt = from_aten(c10::typeMetaToScalarType(c10::get_default_dtype()));
        return dt < 0 ? DT_FLOAT32 : (dt_dtype)dt;
    } catch (...) {
        return DT_FLOAT32;
    }
}

int64_t torch_device_count(dt_device_type type) {
    if (type == DT_DEVICE_CPU)
        return -1;
    try {
        // at::hasCUDA() is false in a CPU build of torch and when no driver is
        // loaded; getNumGPUs() then counts the GPUs the CUDA runtime sees.
        return at::hasCUDA() ? (int64_t)at::getNumGPUs() : 0;
    } catch (...) {
        return 0;
    }
}

} // namespace dt_torch

using namespace dt_torch;

/* Positional because designated initialisers are C++20; the order is
 * backend.h's. Constant-initialised, so it is ready before any constructor. */
const dt__backend dt__backend_torch = {
    "torch",
    torch_run,
    torch_free,
    torch_nbytes,
    torch_from_host,
    torch_to_host,
    torch_from_dlpack,
    torch_to_dlpack,
    torch_dlpack_delete,
    torch_assemble,
    torch_worker_init,
    torch_default_dtype,
    torch_same_storage,
    torch_empty_cache,
    torch_device_count,
    torch_cached_bytes,
    /* Devices, streams, events: CPU devices use the core's host streams and
     * events (NULL slots); CUDA streams/events fill these later. */
    DT_BACKEND_API_VERSION,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    torch_run_chain,
    torch_describe,
    /* Device buffers for comm back ends: CPU collectives are in-process. */
    nullptr,
    nullptr,
    nullptr,
    torch_storage_nbytes,
    torch_thread_rest,
    torch_thread_serial,
    /* Captured runs: a test-only emulation, under DTORCH_GRAPH_EMULATE=1 (torch_graph.cpp). */
    torch_graph_begin,
    torch_graph_end,
    torch_graph_launch,
    torch_graph_free,
    torch_layout,
    torch_graph_static,
    torch_graph_copy,
    torch_graph_share,
    torch_graph_held,
};

/* Registers at load time so the core finds "torch" by name without naming
 * this file; LibTorch's own libraries are initialised before ours. */
__attribute__((constructor)) static void dt_torch_register(void) { dt__backend_register(&dt__backend_torch); }
