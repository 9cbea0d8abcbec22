/*
 * The hand-over of a fetched value to torch: through DLPack when the graph's
 * backend exports it (the torch backend: no copy), else by copying the host
 * buffer into a fresh torch tensor (the "ref" backend).
 *
 * Every function runs on a Python thread holding the GIL; the reads release
 * it.
 */
#include "dtorch_py.h"

/* torch renames the capsule to "used_dltensor" when it takes the tensor; a
 * capsule still named "dltensor" was never consumed and must be freed here. */
static void dlpack_capsule_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor"))
        dt_dlpack_delete(PyCapsule_GetPointer(cap, "dltensor"));
}

/* Copies the value into a fresh torch tensor of `dtype` on the host, for
 * backends without DLPack support ("ref"). */
static PyObject *read_host(dtpy_state *st, dt_future *f, dt_dtype dtype, int ndim, const int64_t *shape) {
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    PyObject *size = dtpy_shape_tuple(ndim, shape);
    if (size == NULL)
        return NULL;
    PyObject *kw = Py_BuildValue("{sO}", "dtype", dtpy_dtype_to_torch(st, dtype));
    PyObject *args = kw ? PyTuple_Pack(1, size) : NULL;
    PyObject *out = args ? PyObject_Call(st->torch_empty, args, kw) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_DECREF(size);
    if (out == NULL)
        return NULL;
    dt_status s;
    if (numel == 0) {
        Py_BEGIN_ALLOW_THREADS s = dt_future_status(f);
        Py_END_ALLOW_THREADS
    } else {
        PyObject *ptr_obj = PyObject_CallMethodNoArgs(out, st->str_data_ptr);
        void *ptr = ptr_obj ? PyLong_AsVoidPtr(ptr_obj) : NULL;
        Py_XDECREF(ptr_obj);
        if (PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        size_t nbytes = (size_t)numel * dt_dtype_size(dtype);
        Py_BEGIN_ALLOW_THREADS s = dt_future_read(f, ptr, nbytes);
        Py_END_ALLOW_THREADS
    }
    if (s != DT_OK) {
        Py_DECREF(out);
        return dtpy_raise(st, s);
    }
    return out;
}

PyObject *dtpy_read_value(dtpy_state *st, dt_future *f, dt_dtype dtype, int ndim, const int64_t *shape) {
    if (dtpy_wait_future(st, f) < 0)
        return NULL;
    void *dl = NULL;
    dt_status s;
    Py_BEGIN_ALLOW_THREADS s = dt_future_to_dlpack(f, &dl);
    Py_END_ALLOW_THREADS if (s == DT_EUNSUPPORTED) {
        /* Only a fetch of a backend without DLPack gets here. */
        dt_clear_error();
        return read_host(st, f, dtype, ndim, shape);
    }
    if (s != DT_OK)
        return dtpy_raise(st, s);
    PyObject *cap = PyCapsule_New(dl, "dltensor", dlpack_capsule_destructor);
    if (cap == NULL) {
        dt_dlpack_delete(dl);
        return NULL;
    }
    PyObject *out = PyObject_CallOneArg(st->from_dlpack, cap);
    Py_DECREF(cap);
    return out;
}
