/*
 * dtorch._C's factory functions: full, empty, rand, randn, arange, from_torch
 * and _from_local (tests).
 *
 * They take already-normalised arguments (a graph object, a torch dtype, a
 * shape tuple, a DeviceMesh and (kind, dim) placement pairs); argument
 * conveniences such as varargs sizes and dtype inference live in
 * python/dtorch/_factories.py, where they are cheap to read and change.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

#include <string.h>

/* ------------------------------------------------------------- factories */

/* Parses the (graph, dtype, shape, ..., mesh, placements) arguments shared by
 * the factories. `shape_index` < 0 means no shape argument. */
typedef struct factory_args {
    dt_graph *g;
    int dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_mesh *mesh;
    dt_placement placements[DT_MAX_MESH_NDIM];
    int placements_null;
} factory_args;

static int parse_factory(dtpy_state *st, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t expected,
                         const char *name, int has_shape, factory_args *fa) {
    if (dtpy_nargs(nargs, expected, expected, name) < 0)
        return -1;
    fa->g = dtpy_graph_arg(st, args[0]);
    if (fa->g == NULL)
        return -1;
    fa->dtype = dtpy_dtype_from_torch(st, args[1]);
    if (fa->dtype < 0)
        return -1;
    fa->ndim = 0;
    if (has_shape) {
        fa->ndim = dtpy_parse_shape(args[2], fa->shape, "size");
        if (fa->ndim < 0)
            return -1;
    }
    fa->mesh = dtpy_mesh_of(st, args[nargs - 2]);
    if (fa->mesh == NULL)
        return -1;
    return dtpy_parse_placements(args[nargs - 1], dt_mesh_ndim(fa->mesh), fa->placements,
                                 &fa->placements_null);
}

#define FA_PL(fa) ((fa).placements_null ? NULL : (fa).placements)

/* full(graph, dtype, shape, value, mesh, placements) */
static PyObject *mod_full(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    factory_args fa;
    dt_scalar v;
    if (parse_factory(st, args, nargs, 6, "full", 1, &fa) < 0)
        return NULL;
    int r = dtpy_parse_scalar(args[3], &v);
    if (r < 0)
        return NULL;
    if (r == 0)
        return PyErr_Format(PyExc_TypeError, "fill_value must be a bool, int or float, not %.100s",
                            Py_TYPE(args[3])->tp_name);
    dtpy_record_call_site(st);
    dt_tensor *t = dt_full(fa.g, (dt_dtype)fa.dtype, fa.ndim, fa.shape, v, fa.mesh, FA_PL(fa));
    return dtpy_tensor_wrap(st, t, args[0], args[4], fa.mesh);
}

typedef dt_tensor *(*shape_factory_fn)(dt_graph *, dt_dtype, int, const int64_t *, dt_mesh *,
                                       const dt_placement *);

static PyObject *shape_factory(PyObject *module, PyObject *const *args, Py_ssize_t nargs, const char *name,
                               shape_factory_fn fn) {
    dtpy_state *st = dtpy_state_of(module);
    factory_args fa;
    if (parse_factory(st, args, nargs, 5, name, 1, &fa) < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *t = fn(fa.g, (dt_dtype)fa.dtype, fa.ndim, fa.shape, fa.mesh, FA_PL(fa));
    return dtpy_tensor_wrap(st, t, args[0], args[3], fa.mesh);
}

/* empty/rand/randn(graph, dtype, shape, mesh, placements) */
static PyObject *mod_empty(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return shape_factory(m, a, n, "empty", dt_empty);
}
static PyObject *mod_rand(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return shape_factory(m, a, n, "rand", dt_rand);
}
static PyObject *mod_randn(PyObject *m, PyObject *const *a, Py_ssize_t n) {
    return shape_factory(m, a, n, "randn", dt_randn);
}

/* arange(graph, dtype, start, end, step, mesh, placements) */
static PyObject *mod_arange(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    factory_args fa;
    if (parse_factory(st, args, nargs, 7, "arange", 0, &fa) < 0)
        return NULL;
    double start = PyFloat_AsDouble(args[2]);
    double end = PyFloat_AsDouble(args[3]);
    double step = PyFloat_AsDouble(args[4]);
    if (PyErr_Occurred())
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *t = dt_arange(fa.g, (dt_dtype)fa.dtype, start, end, step, fa.mesh, FA_PL(fa));
    return dtpy_tensor_wrap(st, t, args[0], args[5], fa.mesh);
}

/* from_torch(graph, tensor, mesh, placements): `tensor` is a contiguous
 * torch.Tensor without autograd history; for a graph whose backend is not
 * "torch" it is on the CPU (the caller sees to it) and is copied from its
 * host buffer instead of through DLPack. */
static PyObject *mod_from_torch(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    DTPY_NARGS(4, "from_torch");
    dt_graph *g = dtpy_graph_arg(st, args[0]);
    if (g == NULL)
        return NULL;
    PyObject *tensor = args[1];
    if (!PyObject_TypeCheck(tensor, (PyTypeObject *)st->torch_tensor_type))
        return PyErr_Format(PyExc_TypeError, "expected a torch.Tensor, got %.100s", Py_TYPE(tensor)->tp_name);
    dt_mesh *mesh = dtpy_mesh_of(st, args[2]);
    if (mesh == NULL)
        return NULL;
    dt_placement pl[DT_MAX_MESH_NDIM];
    int pl_null;
    if (dtpy_parse_placements(args[3], dt_mesh_ndim(mesh), pl, &pl_null) < 0)
        return NULL;

    PyObject *dtype_obj = PyObject_GetAttr(tensor, st->str_dtype);
    if (dtype_obj == NULL)
        return NULL;
    int dtype = dtpy_dtype_from_torch(st, dtype_obj);
    Py_DECREF(dtype_obj);
    if (dtype < 0)
        return NULL;

    dt_tensor *t;
    const char *backend = dt_graph_backend(g);
    if (backend == NULL || strcmp(backend, "torch") != 0) {
        /* Only the torch backend imports DLPack: copy the host buffer. */
        int64_t shape[DT_MAX_NDIM];
        PyObject *shape_obj = PyObject_GetAttrString(tensor, "shape");
        if (shape_obj == NULL)
            return NULL;
        int ndim = dtpy_parse_shape(shape_obj, shape, "tensor");
        Py_DECREF(shape_obj);
        if (ndim < 0)
            return NULL;
        int64_t numel = 1;
        for (int i = 0; i < ndim; i++)
            numel *= shape[i];
        PyObject *ptr_obj = PyObject_CallMethodNoArgs(tensor, st->str_data_ptr);
        if (ptr_obj == NULL)
            return NULL;
        void *ptr = PyLong_AsVoidPtr(ptr_obj);
        Py_DECREF(ptr_obj);
        if (PyErr_Occurred())
            return NULL;
        dtpy_record_call_site(st);
        t = dt_tensor_from_buffer(g, (dt_dtype)dtype, ndim, shape, ptr,
                                  (size_t)numel * dt_dtype_size((dt_dtype)dtype), mesh, pl_null ? NULL : pl);
    } else {
        PyObject *cap = PyObject_CallOneArg(st->to_dlpack, tensor);
        if (cap == NULL)
            return NULL;
        void *dl = PyCapsule_GetPointer(cap, "dltensor");
        if (dl == NULL) {
            Py_DECREF(cap);
            return NULL;
        }
        /* dt_tensor_from_dlpack owns the DLManagedTensor from here on, in
         * every case: rename the capsule so its destructor leaves it alone. */
        if (PyCapsule_SetName(cap, "used_dltensor") < 0) {
            Py_DECREF(cap);
            return NULL;
        }
        Py_DECREF(cap);
        dtpy_record_call_site(st);
        t = dt_tensor_from_dlpack(g, dl, mesh, pl_null ? NULL : pl);
    }
    return dtpy_tensor_wrap(st, t, args[0], args[2], mesh);
}

/* _from_local(graph, dtype, shape, blocks, mesh, placements): `blocks` is a
 * list with one contiguous CPU torch.Tensor of `dtype` per device, in
 * row-major mesh order, each that device's local block (the caller sees to
 * contiguity, dtype and device). The blocks are copied at the call. */
static PyObject *mod_from_local(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    factory_args fa;
    if (parse_factory(st, args, nargs, 6, "_from_local", 1, &fa) < 0)
        return NULL;
    PyObject *blocks = PySequence_Fast(args[3], "_from_local: blocks must be a list of torch.Tensor");
    if (blocks == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(blocks);
    PyObject *result = NULL;
    const void **data = NULL;
    size_t *nbytes = NULL;
    if (n != dt_mesh_size(fa.mesh, -1)) {
        PyErr_Format(PyExc_ValueError, "_from_local: %zd blocks for a mesh of %lld devices", n,
                     (long long)dt_mesh_size(fa.mesh, -1));
        goto done;
    }
    data = PyMem_Calloc((size_t)n + 1, sizeof *data);
    nbytes = PyMem_Calloc((size_t)n + 1, sizeof *nbytes);
    if (data == NULL || nbytes == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(blocks, i);
        if (!PyObject_TypeCheck(b, (PyTypeObject *)st->torch_tensor_type)) {
            PyErr_Format(PyExc_TypeError, "_from_local: block %zd is a %.100s, not a torch.Tensor", i,
                         Py_TYPE(b)->tp_name);
            goto done;
        }
        PyObject *ptr = PyObject_CallMethodNoArgs(b, st->str_data_ptr);
        if (ptr == NULL)
            goto done;
        data[i] = PyLong_AsVoidPtr(ptr);
        Py_DECREF(ptr);
        PyObject *numel = PyObject_CallMethod(b, "numel", NULL);
        if (numel == NULL)
            goto done;
        long long count = PyLong_AsLongLong(numel);
        Py_DECREF(numel);
        if (PyErr_Occurred())
            goto done;
        nbytes[i] = (size_t)count * dt_dtype_size((dt_dtype)fa.dtype);
    }
    dtpy_record_call_site(st);
    dt_tensor *t = dt_tensor_from_local_buffers(fa.g, (dt_dtype)fa.dtype, fa.ndim, fa.shape, fa.mesh,
                                                FA_PL(fa), (const void *const *)data, nbytes);
    result = dtpy_tensor_wrap(st, t, args[0], args[4], fa.mesh);
done:
    PyMem_Free(data);
    PyMem_Free(nbytes);
    Py_DECREF(blocks);
    return result;
}

static PyMethodDef factory_methods[] = {
    {"full", (PyCFunction)(void (*)(void))mod_full, METH_FASTCALL,
     "full(graph, dtype, shape, value, mesh, placements) -> Tensor"},
    {"empty", (PyCFunction)(void (*)(void))mod_empty, METH_FASTCALL,
     "empty(graph, dtype, shape, mesh, placements) -> Tensor"},
    {"rand", (PyCFunction)(void (*)(void))mod_rand, METH_FASTCALL,
     "rand(graph, dtype, shape, mesh, placements) -> Tensor"},
    {"randn", (PyCFunction)(void (*)(void))mod_randn, METH_FASTCALL,
     "randn(graph, dtype, shape, mesh, placements) -> Tensor"},
    {"arange", (PyCFunction)(void (*)(void))mod_arange, METH_FASTCALL,
     "arange(graph, dtype, start, end, step, mesh, placements) -> Tensor"},
    {"from_torch", (PyCFunction)(void (*)(void))mod_from_torch, METH_FASTCALL,
     "from_torch(graph, tensor, mesh, placements) -> Tensor"},
    {"_from_local", (PyCFunction)(void (*)(void))mod_from_local, METH_FASTCALL,
     "_from_local(graph, dtype, shape, blocks, mesh, placements) -> Tensor: one local block per device "
     "(tests)"},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_factory_methods(PyObject *module) { return PyModule_AddFunctions(module, factory_methods); }
