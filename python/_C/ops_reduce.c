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

/* The arguments both entries share: x (args[0]) and op (args[1]), with the
 * op's torch name for errors; parse_common fills it, 0 or -1 with an
 * exception. */
typedef struct reduce_args {
    dt_reduce_op op;
    const char *name;
    dtpy_tensor *x;
} reduce_args;

static int parse_common(dtpy_state *st, PyObject *const *args, reduce_args *r) {
    long op = PyLong_AsLong(args[1]);
    if (op == -1 && PyErr_Occurred())
        return -1;
    const char *name = op >= 0 && op < DT_REDUCE_COUNT ? dt_reduce_op_name((dt_reduce_op)op) : NULL;
    r->op = (dt_reduce_op)op;
    r->name = name ? name : "reduce";
    r->x = dtpy_tensor_arg_or_null(st, args[0], r->name, "input");
    return r->x == NULL ? -1 : 0;
}

static PyObject *mod_reduce(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(5, "_reduce");
    dtpy_state *st = dtpy_state_of(module);
    reduce_args r;
    int64_t dims[DT_MAX_NDIM];
    int ndims, keepdim, dtype = -1;
    if (parse_common(st, args, &r) < 0 || (ndims = dtpy_dims_arg(args[2], r.name, dims)) < -1 ||
        (keepdim = PyObject_IsTrue(args[3])) < 0 || dtpy_dtype_arg(st, args[4], 1, &dtype) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_reduce(r.op, r.x->t, ndims, dims, keepdim, dtype), r.x);
}

static PyObject *mod_reduce_with_indices(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(4, "_reduce_with_indices");
    dtpy_state *st = dtpy_state_of(module);
    reduce_args r;
    if (parse_common(st, args, &r) < 0)
        return NULL;
    if (!PyLong_Check(args[2]) || PyBool_Check(args[2]))
        return PyErr_Format(PyExc_TypeError, "%s(): argument 'dim' must be int, not %.100s", r.name,
                            Py_TYPE(args[2])->tp_name);
    int64_t dim = PyLong_AsLongLong(args[2]);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    int keepdim = PyObject_IsTrue(args[3]);
    if (keepdim < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *values = NULL, *indices = NULL;
    if (dt_reduce_with_indices(r.op, r.x->t, dim, keepdim, &values, &indices) != DT_OK)
        return dtpy_raise_last(st);
    return dtpy_tensor_pair(st, r.x, values, indices);
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
