/*
 * Argument converters shared by every ops_<family>.c: one definition each, so
 * a dtorch op rejects a bad argument with the same torch-style TypeError
 * ("softmax(): argument 'dim' must be int, not str") whichever family it
 * belongs to.
 *
 * Each returns 0 (or a count) with the value in *out, or -1 with an exception
 * set. `op` is the name the user called (e.g. "softmax"), `what` the
 * argument's name. Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

#include <math.h>

int dtpy_tensor_arg(dtpy_state *st, PyObject *o, const char *op, const char *what, int optional,
                    dtpy_tensor **out) {
    *out = NULL;
    if (o == Py_None && optional)
        return 0;
    if (DTPY_IS_TENSOR(st, o)) {
        *out = (dtpy_tensor *)o;
        return 0;
    }
    if (PyObject_TypeCheck(o, (PyTypeObject *)st->torch_tensor_type))
        PyErr_Format(
            PyExc_TypeError,
            "%s(): argument '%s' is a torch.Tensor; convert it with dtorch.from_torch(t, device_mesh=..., "
            "placements=...) first",
            op, what);
    else
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be a dtorch.Tensor%s, not %.100s", op, what,
                     optional ? " or None" : "", Py_TYPE(o)->tp_name);
    return -1;
}

dtpy_tensor *dtpy_tensor_arg_or_null(dtpy_state *st, PyObject *o, const char *op, const char *what) {
    dtpy_tensor *t;
    return dtpy_tensor_arg(st, o, op, what, 0, &t) < 0 ? NULL : t;
}

/* An int, or an object with __index__ (numpy and torch integers), as torch
 * takes them; bool and float are rejected, as torch does. */
int dtpy_int_arg(PyObject *o, const char *op, const char *what, int64_t *out) {
    if (PyBool_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be int, not %.100s", op, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    long long v = PyLong_AsLongLong(o);
    if (v == -1 && PyErr_Occurred())
        return -1;
    *out = (int64_t)v;
    return 0;
}

int dtpy_ints_arg(PyObject *o, const char *op, const char *what, int64_t *out, int cap) {
    PyObject *seq = PySequence_Fast(o, "");
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be a sequence of ints, not %.100s", op, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > cap) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s(): argument '%s' has %zd entries (at most %d)", op, what, n, cap);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (dtpy_int_arg(PySequence_Fast_GET_ITEM(seq, i), op, what, &out[i]) < 0) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return (int)n;
}

int dtpy_float_arg(PyObject *o, const char *op, const char *what, int optional, double *out) {
    if (o == Py_None && optional) {
        *out = NAN;
        return 0;
    }
    *out = PyFloat_AsDouble(o);
    if (*out == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s(): argument '%s' must be a number, not %.100s", op, what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    return 0;
}

int dtpy_dims_arg(PyObject *obj, const char *op, int64_t *dims) {
    if (obj == Py_None)
        return -1;
    if (PyLong_Check(obj) && !PyBool_Check(obj)) {
        dims[0] = PyLong_AsLongLong(obj);
        if (dims[0] == -1 && PyErr_Occurred())
            return -2;
        return 1;
    }
    if (PyTuple_Check(obj) || PyList_Check(obj)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        if (n > DT_MAX_NDIM) {
            PyErr_Format(PyExc_IndexError, "%s(): dim has %zd entries, more than a tensor's %d dims", op, n,
                         DT_MAX_NDIM);
            return -2;
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *v = PySequence_Fast_GET_ITEM(obj, i);
            if (!PyLong_Check(v) || PyBool_Check(v)) {
                PyErr_Format(PyExc_TypeError, "%s(): dim must contain ints, not %.100s", op,
                             Py_TYPE(v)->tp_name);
                return -2;
            }
            dims[i] = PyLong_AsLongLong(v);
            if (dims[i] == -1 && PyErr_Occurred())
                return -2;
        }
        return (int)n;
    }
    PyErr_Format(PyExc_TypeError, "%s(): dim must be None, an int or a tuple of ints, not %.100s", op,
                 Py_TYPE(obj)->tp_name);
    return -2;
}

int dtpy_dtype_arg(dtpy_state *st, PyObject *o, int optional, int *out) {
    if (o == Py_None && optional) {
        *out = -1;
        return 0;
    }
    int dt = dtpy_dtype_from_torch(st, o);
    if (dt < 0)
        return -1;
    *out = dt;
    return 0;
}
