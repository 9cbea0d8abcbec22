/*
 * dtorch._C entry points of the creation and data-dependent family:
 *   _randint(graph, dtype, low, high, shape, mesh, placements) -> Tensor
 *   _cumsum(x, dim, dtype_or_None) -> Tensor
 *   _sort(x, dim, descending, stable, with_values) -> (values, indices), or
 *       indices alone when with_values is false (argsort)
 *   _topk(x, k, dim, largest, sorted) -> (values, indices)
 *   _nonzero(x) -> Tensor
 * The torch-style signatures (argument forms, return types) live in
 * dtorch/_factories.py and dtorch/_ops_sort_scan.py.
 *
 * Every function runs on a Python thread holding the GIL. Only _nonzero
 * waits (for the input's value), with the GIL released.
 */
#include "dtorch_py.h"

static PyObject *mod_randint(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(7, "_randint");
    dtpy_state *st = dtpy_state_of(module);
    dt_graph *g = dtpy_graph_arg(st, args[0]);
    if (g == NULL)
        return NULL;
    int dtype = dtpy_dtype_from_torch(st, args[1]);
    if (dtype < 0)
        return NULL;
    int64_t low, high;
    if (dtpy_int_arg(args[2], "randint", "low", &low) < 0 ||
        dtpy_int_arg(args[3], "randint", "high", &high) < 0)
        return NULL;
    int64_t shape[DT_MAX_NDIM];
    int ndim = dtpy_parse_shape(args[4], shape, "size");
    if (ndim < 0)
        return NULL;
    dt_mesh *mesh = dtpy_mesh_of(st, args[5]);
    if (mesh == NULL)
        return NULL;
    dt_placement pl[DT_MAX_MESH_NDIM];
    int pl_null;
    if (dtpy_parse_placements(args[6], dt_mesh_ndim(mesh), pl, &pl_null) < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *t = dt_randint(g, (dt_dtype)dtype, low, high, ndim, shape, mesh, pl_null ? NULL : pl);
    return dtpy_tensor_wrap(st, t, args[0], args[5], mesh);
}

static PyObject *mod_cumsum(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(3, "_cumsum");
    dtpy_state *st = dtpy_state_of(module);
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, args[0], "cumsum", "input");
    int64_t dim;
    if (a == NULL || dtpy_int_arg(args[1], "cumsum", "dim", &dim) < 0)
        return NULL;
    int dtype = -1;
    if (dtpy_dtype_arg(st, args[2], 1, &dtype) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_cumsum(a->t, dim, dtype), a);
}

static PyObject *mod_sort(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(5, "_sort");
    dtpy_state *st = dtpy_state_of(module);
    int with_values = PyObject_IsTrue(args[4]);
    const char *name = with_values ? "sort" : "argsort";
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, args[0], name, "input");
    int64_t dim;
    if (a == NULL || dtpy_int_arg(args[1], name, "dim", &dim) < 0)
        return NULL;
    int descending = PyObject_IsTrue(args[2]), stable = PyObject_IsTrue(args[3]);
    if (descending < 0 || stable < 0 || with_values < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *v = NULL, *i = NULL;
    if (dt_sort(a->t, dim, descending, stable, with_values ? &v : NULL, &i) != DT_OK)
        return dtpy_raise_last(st);
    return with_values ? dtpy_tensor_pair(st, a, v, i) : dtpy_tensor_wrap_like(st, i, a);
}

static PyObject *mod_topk(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(5, "_topk");
    dtpy_state *st = dtpy_state_of(module);
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, args[0], "topk", "input");
    int64_t k, dim;
    if (a == NULL || dtpy_int_arg(args[1], "topk", "k", &k) < 0 ||
        dtpy_int_arg(args[2], "topk", "dim", &dim) < 0)
        return NULL;
    int largest = PyObject_IsTrue(args[3]), sorted = PyObject_IsTrue(args[4]);
    if (largest < 0 || sorted < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *v = NULL, *i = NULL;
    if (dt_topk(a->t, k, dim, largest, sorted, &v, &i) != DT_OK)
        return dtpy_raise_last(st);
    return dtpy_tensor_pair(st, a, v, i);
}

static PyObject *mod_nonzero(PyObject *module, PyObject *arg) {
    dtpy_state *st = dtpy_state_of(module);
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, arg, "nonzero", "input");
    if (a == NULL)
        return NULL;
    dtpy_record_call_site(st);
    /* The wait for the input's value is the interruptible one (GIL
     * released in slices, Ctrl-C checked); the count then runs with the
     * value ready and touches no Python object. */
    dt_future *f = dt_tensor_fetch(a->t);
    if (f == NULL)
        return dtpy_raise_last(st);
    if (dtpy_wait_future(st, f) < 0) {
        dt_future_release(f);
        return NULL;
    }
    dt_tensor *t;
    Py_BEGIN_ALLOW_THREADS t = dt_nonzero_read(a->t, f);
    Py_END_ALLOW_THREADS dt_future_release(f);
    return dtpy_tensor_wrap_like(st, t, a);
}

static PyMethodDef creation_methods[] = {
    {"_randint", (PyCFunction)(void (*)(void))mod_randint, METH_FASTCALL,
     "_randint(graph, dtype, low, high, shape, mesh, placements) -> Tensor"},
    {"_cumsum", (PyCFunction)(void (*)(void))mod_cumsum, METH_FASTCALL, "_cumsum(x, dim, dtype) -> Tensor"},
    {"_sort", (PyCFunction)(void (*)(void))mod_sort, METH_FASTCALL,
     "_sort(x, dim, descending, stable, with_values) -> (values, indices) or indices"},
    {"_topk", (PyCFunction)(void (*)(void))mod_topk, METH_FASTCALL,
     "_topk(x, k, dim, largest, sorted) -> (values, indices)"},
    {"_nonzero", mod_nonzero, METH_O, "_nonzero(x) -> Tensor (waits for x's value)"},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_creation_methods(PyObject *module) { return PyModule_AddFunctions(module, creation_methods); }
