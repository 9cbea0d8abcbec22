/*
 * dtorch._C entry points of the reductions family:
 *   _reduce(x, op, dim, keepdim, dtype) -> Tensor
 *   _reduce_with_indices(x, op, dim, keepdim) -> (values, indices)
 * plus the REDUCE_* op codes (dt_reduce_op). The torch-style signatures
 * (positional/keyword handling, return types) live in dtorch/_ops_reduce.py.
 *
 * Every function runs on a Python thread holding the GIL; none waits.
 */
#include "dtorch_py.h"

static const char *op_name(long op) {
    const char *name = op >= 0 && op < DT_REDUCE_COUNT ? dt_reduce_op_name((dt_reduce_op)op) : NULL;
    return name ? name : "reduce";
}

static PyObject *mod_reduce(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(5, "_reduce");
    dtpy_state *st = dtpy_state_of(module);
    long op = PyLong_AsLong(args[1]);
    if (op == -1 && PyErr_Occurred())
        return NULL;
    const char *name = op_name(op);
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, args[0], name, "input");
    if (a == NULL)
        return NULL;
    int64_t dims[DT_MAX_NDIM];
    int ndims = dtpy_dims_arg(args[2], name, dims);
    if (ndims < -1)
        return NULL;
    int keepdim = PyObject_IsTrue(args[3]);
    if (keepdim < 0)
        return NULL;
    int dtype = -1;
    if (dtpy_dtype_arg(st, args[4], 1, &dtype) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_reduce((dt_reduce_op)op, a->t, ndims, dims, keepdim, dtype), a);
}

static PyObject *mod_reduce_with_indices(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(4, "_reduce_with_indices");
    dtpy_state *st = dtpy_state_of(module);
    long op = PyLong_AsLong(args[1]);
    if (op == -1 && PyErr_Occurred())
        return NULL;
    const char *name = op_name(op);
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, args[0], name, "input");
    if (a == NULL)
        return NULL;
    if (!PyLong_Check(args[2]) || PyBool_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "%s(): argument 'dim' must be int, not %.100s", name,
                            Py_TYPE(args[2])->tp_name);
    int64_t dim = PyLong_AsLongLong(args[2]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    int keepdim = PyObject_IsTrue(args[3]);
    if (keepdim < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *values = NULL, *indices = NULL;
    if (dt_reduce_with_indices((dt_reduce_op)op, a->t, dim, keepdim, &values, &indices) != DT_OK)
        return dtpy_raise_last(st);
    return dtpy_tensor_pair(st, a, values, indices);
}

static PyMethodDef reduce_methods[] = {
    {"_reduce", (PyCFunction)(void (*)(void))mod_reduce, METH_FASTCALL,
     "_reduce(x, op, dim, keepdim, dtype) -> Tensor: reduction `op` (a REDUCE_* code)."},
    {"_reduce_with_indices", (PyCFunction)(void (*)(void))mod_reduce_with_indices, METH_FASTCALL,
     "_reduce_with_indices(x, op, dim, keepdim) -> (values, indices) for REDUCE_MAX / REDUCE_MIN."},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_reduce_methods(PyObject *module) {
    static const dtpy_constant codes[] = {
#define DT_REDUCE_OP(E, ...) {"REDUCE_" #E, DT_REDUCE_##E},
#include "dtorch/dtorch_ops.def"
    };
    if (PyModule_AddFunctions(module, reduce_methods) < 0)
        return -1;
    return DTPY_ADD_CONSTANTS(module, codes);
}
