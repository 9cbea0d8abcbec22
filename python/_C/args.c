/*
 * Argument converters shared by every file of the extension: one definition
 * each, so a dtorch op rejects a bad argument with the same torch-style
 * TypeError ("softmax(): argument 'dim' must be int, not str") whichever
 * family it belongs to. Also here: the torch <-> dtorch dtype tables, the
 * parsers of the normalised forms the Python package passes (placements as
 * (kind, dim) pairs, meshes, shapes, scalars), the argument-count check of
 * the positional `_C._x` functions and the graph argument.
 *
 * Each converter returns 0 (or a count) with the value in *out, or -1 with
 * an exception set. `op` is the name the user called (e.g. "softmax"),
 * `what` the argument's name. Every function runs on a Python thread holding
 * the GIL.
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

/* ----------------------------------------------------------------- dtypes */

static const char *const torch_dtype_names[DT_DTYPE_COUNT] = {
    [DT_BOOL] = "bool",       [DT_UINT8] = "uint8",     [DT_INT8] = "int8",       [DT_INT16] = "int16",
    [DT_INT32] = "int32",     [DT_INT64] = "int64",     [DT_FLOAT16] = "float16", [DT_BFLOAT16] = "bfloat16",
    [DT_FLOAT32] = "float32", [DT_FLOAT64] = "float64",
};

const char *dtpy_dtype_torch_name(dt_dtype dtype) {
    return (unsigned)dtype < DT_DTYPE_COUNT ? torch_dtype_names[dtype] : NULL;
}

int dtpy_dtype_from_torch(dtpy_state *st, PyObject *dtype) {
    for (int i = 0; i < DT_DTYPE_COUNT; i++)
        if (st->torch_dtypes[i] == dtype)
            return i;
    PyErr_Format(PyExc_TypeError, "dtorch does not support dtype %R", dtype);
    return -1;
}

PyObject *dtpy_dtype_to_torch(dtpy_state *st, dt_dtype dtype) {
    if ((int)dtype < 0 || dtype >= DT_DTYPE_COUNT)
        return Py_None;
    return st->torch_dtypes[dtype];
}

int dtpy_sync_default_dtype(dtpy_state *st) {
    PyObject *d = PyObject_CallNoArgs(st->torch_get_default_dtype);
    if (d == NULL)
        return -1;
    if (d == st->last_default_dtype) {
        Py_DECREF(d);
        return 0;
    }
    int dt = dtpy_dtype_from_torch(st, d);
    if (dt < 0) {
        Py_DECREF(d);
        return -1;
    }
    dt_status s = dt_set_default_dtype((dt_dtype)dt);
    if (s != DT_OK) {
        Py_DECREF(d);
        dtpy_raise(st, s);
        return -1;
    }
    Py_XSETREF(st->last_default_dtype, d);
    return 0;
}

/* ------------------------------------------------- the package's normal forms */

int dtpy_parse_placements(PyObject *obj, int mesh_ndim, dt_placement *out, int *is_null) {
    *is_null = 0;
    if (obj == Py_None) {
        *is_null = 1;
        return 0;
    }
    PyObject *seq = PySequence_Fast(obj, "placements must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != mesh_ndim) {
        PyErr_Format(PyExc_ValueError, "placements has %zd entries but the mesh has %d dimension%s", n,
                     mesh_ndim, mesh_ndim == 1 ? "" : "s");
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        long kind, dim;
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2) {
            PyErr_SetString(PyExc_TypeError, "internal placements must be (kind, dim) pairs");
            Py_DECREF(seq);
            return -1;
        }
        kind = PyLong_AsLong(PyTuple_GET_ITEM(item, 0));
        dim = PyLong_AsLong(PyTuple_GET_ITEM(item, 1));
        if (PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        if (kind < DT_PLACEMENT_REPLICATE || kind > DT_PLACEMENT_PARTIAL || dim < INT32_MIN ||
            dim > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "invalid placement");
            Py_DECREF(seq);
            return -1;
        }
        out[i].kind = (int32_t)kind;
        out[i].dim = (int32_t)dim;
    }
    Py_DECREF(seq);
    return 0;
}

dt_mesh *dtpy_mesh_of(dtpy_state *st, PyObject *mesh_obj) {
    if (PyObject_TypeCheck(mesh_obj, st->mesh_type))
        return ((dtpy_mesh *)mesh_obj)->m;
    PyObject *h = PyObject_GetAttr(mesh_obj, st->str_handle);
    if (h == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "expected a dtorch.DeviceMesh, got %.100s", Py_TYPE(mesh_obj)->tp_name);
        return NULL;
    }
    dt_mesh *m = NULL;
    if (PyObject_TypeCheck(h, st->mesh_type))
        m = ((dtpy_mesh *)h)->m;
    else
        PyErr_Format(PyExc_TypeError, "expected a dtorch.DeviceMesh, got %.100s", Py_TYPE(mesh_obj)->tp_name);
    Py_DECREF(h); /* the DeviceMesh keeps its handle alive */
    return m;
}

int dtpy_parse_shape(PyObject *obj, int64_t *shape, const char *what) {
    if (PyLong_Check(obj)) {
        shape[0] = PyLong_AsLongLong(obj);
        if (shape[0] == -1 && PyErr_Occurred())
            return -1;
        return 1;
    }
    PyObject *seq = PySequence_Fast(obj, "a shape must be a sequence of ints");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > DT_MAX_NDIM) {
        PyErr_Format(PyExc_ValueError, "%s has %zd dimensions; dtorch supports at most %d", what, n,
                     DT_MAX_NDIM);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *v = PySequence_Fast_GET_ITEM(seq, i);
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
        shape[i] = x;
    }
    Py_DECREF(seq);
    return (int)n;
}

int dtpy_parse_scalar(PyObject *o, dt_scalar *out) {
    if (PyBool_Check(o)) {
        *out = dt_scalar_bool(o == Py_True);
        return 1;
    }
    if (PyLong_Check(o)) {
        long long v = PyLong_AsLongLong(o);
        if (v == -1 && PyErr_Occurred())
            return -1;
        *out = dt_scalar_int(v);
        return 1;
    }
    if (PyFloat_Check(o)) {
        *out = dt_scalar_float(PyFloat_AS_DOUBLE(o));
        return 1;
    }
    return 0;
}

PyObject *dtpy_shape_tuple(int ndim, const int64_t *shape) {
    PyObject *tup = PyTuple_New(ndim);
    if (tup == NULL)
        return NULL;
    for (int i = 0; i < ndim; i++) {
        PyObject *v = PyLong_FromLongLong(shape[i]);
        if (v == NULL) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, i, v);
    }
    return tup;
}

/* ------------------------------------------------------ counts and graphs */

int dtpy_nargs(Py_ssize_t nargs, Py_ssize_t lo, Py_ssize_t hi, const char *name) {
    if (nargs >= lo && nargs <= hi)
        return 0;
    if (lo == hi)
        PyErr_Format(PyExc_TypeError, "_C.%s takes %zd arguments (%zd given)", name, lo, nargs);
    else
        PyErr_Format(PyExc_TypeError, "_C.%s takes %zd %s %zd arguments (%zd given)", name, lo,
                     hi == lo + 1 ? "or" : "to", hi, nargs);
    return -1;
}

dt_graph *dtpy_graph_arg(dtpy_state *st, PyObject *o) {
    if (!PyObject_TypeCheck(o, st->graph_base_type) || ((dtpy_graph *)o)->g == NULL) {
        PyErr_Format(PyExc_TypeError, "graph must be a dtorch.Graph, not %.100s", Py_TYPE(o)->tp_name);
        return NULL;
    }
    return ((dtpy_graph *)o)->g;
}

int dtpy_same_graph(dt_tensor *a, dt_tensor *b, const char *op) {
    if (dt_tensor_graph(a) != dt_tensor_graph(b)) {
        PyErr_Format(PyExc_ValueError,
                     "%s: the operands belong to different graphs; a dtorch op takes tensors of one graph "
                     "(create both with the same graph=...)",
                     op);
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------- constants */

int dtpy_add_constants(PyObject *module, const dtpy_constant *c, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (PyModule_AddIntConstant(module, c[i].name, c[i].value) < 0)
            return -1;
    return 0;
}
