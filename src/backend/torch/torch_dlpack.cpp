/*
 * The torch backend's DLPack entries: from_dlpack (takes ownership of a
 * DLManagedTensor and keeps a private copy), to_dlpack (a view that keeps the
 * impl alive) and dlpack_delete. Like every entry, each body is a try block
 * whose catch turns the exception into a status (torch_backend.cpp).
 */
#include <ATen/ATen.h>
#include <ATen/DLConvertor.h>
#include <ATen/dlpack.h>

#include <string>

#include "backend/torch/torch_int.h"

namespace dt_torch {

void call_dl_deleter(DLManagedTensor *m) {
    if (m && m->deleter)
        m->deleter(m);
}

dt_status torch_from_dlpack(void *dl_managed, void **out, dt_dtype *dtype, int *ndim, int64_t *shape,
                            char *err, size_t errlen) {
    DLManagedTensor *m = static_cast<DLManagedTensor *>(dl_managed);
    /* Until at::fromDLPack has taken `m`, this entry owns it and must call
     * its deleter on every failure. fromDLPack can only throw before it binds
     * the deleter for an unsupported device or dtype, so both are checked
     * here first; after that call, the tensor (alive or unwinding) owns `m`. */
    bool owned = true;
    try {
        if (!m)
            fail("torch backend: NULL DLManagedTensor");
        if (!out || !dtype || !ndim || !shape)
            fail("torch backend: NULL out parameter");
        *out = nullptr;
        const DLTensor &dl = m->dl_tensor;
        if (dl.ndim < 0 || dl.ndim > DT_MAX_NDIM)
            fail("torch backend: DLPack tensor has " + std::to_string(dl.ndim) + " dims (at most " +
                 std::to_string(DT_MAX_NDIM) + ")");
        if (dl.ndim > 0 && !dl.shape)
            fail("torch backend: DLPack tensor without shape");
        bool cpu = dl.device.device_type == kDLCPU;
        bool cuda = dl.device.device_type == kDLCUDA;
        if (!cpu && !(cuda && at::hasCUDA()))
            fail("torch backend: unsupported DLPack device type " +
                 std::to_string((int)dl.device.device_type));
        int dt = from_aten(at::toScalarType(dl.dtype)); // throws for codes torch lacks
        if (dt < 0)
            fail("torch backend: DLPack dtype has no dtorch equivalent");

        owned = false;
        at::Tensor src = at::fromDLPack(m);
        // A private snapshot on the same device: the producer may reuse its
        // buffer once this returns, and `src` (with m) is released here.
        at::Tensor r = src.clone(at::MemoryFormat::Contiguous);
        src.reset();
        int nd = (int)r.dim();
        *dtype = (dt_dtype)from_aten(r.scalar_type());
        *ndim = nd;
        for (int d = 0; d < nd; ++d)
            shape[d] = r.size(d);
        *out = new at::Tensor(std::move(r));
        return DT_OK;
    } catch (...) {
        if (owned)
            call_dl_deleter(m);
        return translate_current(err, errlen);
    }
}

dt_status torch_to_dlpack(const void *p, void **out_dl_managed, char *err, size_t errlen) {
    try {
        if (!out_dl_managed)
            fail("torch backend: NULL out");
        *out_dl_managed = nullptr;
        const at::Tensor &t = impl(p);
        // The DLManagedTensor holds its own reference to the tensor.
        *out_dl_managed = at::toDLPack(t);
        return DT_OK;
    } catch (...) {
        return translate_current(err, errlen);
    }
}

void torch_dlpack_delete(void *dl_managed) {
    try {
        call_dl_deleter(static_cast<DLManagedTensor *>(dl_managed));
    } catch (...) {
        return;
    }
}

} // namespace dt_torch
