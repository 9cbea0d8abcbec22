/*
 * Captured runs on the CPU backend: a test-only emulation of CUDA graphs
 * (backend.h, "Captured runs"; core/worker/graph_run.c), on only under
 * DTORCH_GRAPH_EMULATE=1 in the environment (read once); otherwise
 * graph_begin says DT_EUNSUPPORTED and the core captures nothing.
 *
 * Nothing CUDA runs on the machines without a GPU, so the emulation keeps
 * what the core relies on from a CUDA graph: "capture" records each kernel
 * the worker runs meanwhile (its op, attributes, input impls and result
 * impl: the static tensors), and "launch" runs the recorded kernels again
 * and copies each result into the recorded result's storage in place, so
 * the static outputs keep their addresses and a launch overwrites the
 * values a previous launch handed out, exactly where a CUDA graph would.
 * The core's liveness rule (launch only while nothing outside holds the
 * static tensors) is therefore exercised for real: a value kept from an
 * earlier launch that a launch overwrote would read wrong.
 *
 * The layout, static-copy, copy, share and held entries are the real ones
 * for CPU tensors (the CUDA shim has its own, torch_cuda.cpp).
 */
#include <cstdlib>
#include <vector>

#include "backend/torch/torch_int.h"

extern "C" {
extern const dt__backend dt__backend_torch;
}

namespace dt_torch {

struct emu_kernel {
    int kop;
    dt__kattr a;
    std::vector<void *> in;
    void *out;
};

struct emu_graph {
    std::vector<emu_kernel> ks;
};

thread_local void *tl_graph_capture;

namespace {

bool emulate() {
    static const bool on = [] {
        const char *e = std::getenv("DTORCH_GRAPH_EMULATE");
        return e && e[0] == '1' && e[1] == 0;
    }();
    return on;
}

} // namespace

void graph_note(int kop, const dt__kattr *a, void *const *in, int n_in, void *out) {
    emu_graph *g = static_cast<emu_graph *>(tl_graph_capture);
    g->ks.push_back(emu_kernel{kop, *a, std::vector<void *>(in, in + n_in), out});
}

dt_status torch_graph_begin(void *, void **graph, char *err, size_t errlen) {
    if (!emulate())
        return DT_EUNSUPPORTED;
    try {
        emu_graph *g = new emu_graph();
        tl_graph_capture = g;
        *graph = g;
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status torch_graph_end(void *, char *, size_t) {
    tl_graph_capture = nullptr;
    return DT_OK;
}

dt_status torch_graph_launch(void *graph, char *err, size_t errlen) {
    try {
        for (const emu_kernel &k : static_cast<emu_graph *>(graph)->ks) {
            void *fresh = nullptr;
            dt_status st =
                dt__backend_torch.run(k.kop, &k.a, k.in.data(), (int)k.in.size(), &fresh, err, errlen);
            if (st != DT_OK)
                return st;
            at::Tensor *r = static_cast<at::Tensor *>(fresh);
            const at::Tensor &dst = impl(k.out);
            /* A view of a static tensor (a reshape) is already where it was. */
            if (!(r->has_storage() && dst.has_storage() && r->storage().is_alias_of(dst.storage())))
                dst.copy_(*r);
            delete r;
        }
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

void torch_graph_free(void *graph) { delete static_cast<emu_graph *>(graph); }

int tensor_layout(const at::Tensor &t, bool host, dt__layout *l) {
    int dt = from_aten(t.scalar_type());
    if (dt < 0 || t.dim() > DT_MAX_NDIM)
        return -1;
    l->dtype = dt;
    l->ndim = (int32_t)t.dim();
    l->host = host;
    l->offset = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d) {
        l->shape[d] = t.size(d);
        l->stride[d] = t.stride(d);
    }
    l->addr = (uintptr_t)t.data_ptr();
    return 0;
}

int64_t storage_uses(const at::Tensor &t) { return t.has_storage() ? (int64_t)t.storage().use_count() : 1; }

int torch_layout(const void *p, dt__layout *l) {
    try {
        return tensor_layout(impl(p), false, l); /* a CPU worker's device is the host */
    } catch (...) {
        return -1;
    }
}

dt_status torch_graph_static(const void *p, void **out, char *err, size_t errlen) {
    try {
        const at::Tensor &t = impl(p);
        at::Tensor s = at::empty_strided(t.sizes(), t.strides(), t.options());
        s.copy_(t);
        *out = new at::Tensor(std::move(s));
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

dt_status torch_graph_copy(void *dst, const void *src, char *err, size_t errlen) {
    try {
        impl(dst).copy_(impl(src));
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

void *torch_graph_share(const void *p) {
    try {
        return new at::Tensor(impl(p).alias());
    } catch (...) {
        return nullptr;
    }
}

int64_t torch_graph_held(const void *p) {
    try {
        return storage_uses(impl(p));
    } catch (...) {
        return INT64_MAX;
    }
}

} // namespace dt_torch
