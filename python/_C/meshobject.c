/*
 * _C.Mesh: a handle on an immutable dt_mesh (dtorch.DeviceMesh keeps one as
 * its `_handle`). Its getters describe the mesh; equal() compares by value.
 *
 * Every function runs on a Python thread holding the GIL; none waits.
 */
#include "dtorch_py.h"

static PyObject *mesh_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"device_type", "shape", "ids", "dim_names", NULL};
    int device_type;
    PyObject *shape_obj, *ids_obj, *names_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOO|O:Mesh", kwlist, &device_type, &shape_obj, &ids_obj,
                                     &names_obj))
        return NULL;
    dtpy_state *st = dtpy_state_of_type(type);
    if (st == NULL)
        return NULL;
    int64_t shape[DT_MAX_NDIM];
    int ndim = dtpy_parse_shape(shape_obj, shape, "the mesh");
    if (ndim < 0)
        return NULL;
    PyObject *ids_seq = PySequence_Fast(ids_obj, "ids must be a sequence of ints");
    if (ids_seq == NULL)
        return NULL;
    Py_ssize_t nids = PySequence_Fast_GET_SIZE(ids_seq);
    int64_t *ids = PyMem_Malloc(sizeof(int64_t) * (size_t)(nids > 0 ? nids : 1));
    const char *names[DT_MAX_MESH_NDIM > DT_MAX_NDIM ? DT_MAX_MESH_NDIM : DT_MAX_NDIM];
    PyObject *names_seq = NULL;
    PyObject *result = NULL;
    if (ids == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < nids; i++) {
        ids[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(ids_seq, i));
        if (ids[i] == -1 && PyErr_Occurred())
            goto done;
    }
    int64_t prod = 1;
    for (int i = 0; i < ndim; i++)
        prod *= shape[i];
    if (prod != nids) {
        PyErr_Format(PyExc_ValueError, "the mesh shape holds %lld devices but %zd ids were given",
                     (long long)prod, nids);
        goto done;
    }
    if (names_obj != Py_None) {
        names_seq = PySequence_Fast(names_obj, "dim_names must be a sequence of str");
        if (names_seq == NULL)
            goto done;
        if (PySequence_Fast_GET_SIZE(names_seq) != ndim) {
            PyErr_Format(PyExc_ValueError, "mesh_dim_names has %zd names but the mesh has %d dimensions",
                         PySequence_Fast_GET_SIZE(names_seq), ndim);
            goto done;
        }
        for (int i = 0; i < ndim; i++) {
            PyObject *n = PySequence_Fast_GET_ITEM(names_seq, i);
            if (!PyUnicode_Check(n)) {
                PyErr_Format(PyExc_TypeError, "mesh_dim_names must hold str, not %.100s",
                             Py_TYPE(n)->tp_name);
                goto done;
            }
            names[i] = PyUnicode_AsUTF8(n);
            if (names[i] == NULL)
                goto done;
        }
    }
    dt_mesh *m = NULL;
    dt_status s = dt_mesh_create((dt_device_type)device_type, ndim, shape, ids,
                                 names_seq ? (const char *const *)names : NULL, &m);
    if (s != DT_OK) {
        dtpy_raise(st, s);
        goto done;
    }
    dtpy_mesh *self = (dtpy_mesh *)type->tp_alloc(type, 0);
    if (self == NULL) {
        dt_mesh_release(m);
        goto done;
    }
    self->m = m;
    result = (PyObject *)self;
done:
    Py_XDECREF(names_seq);
    PyMem_Free(ids);
    Py_DECREF(ids_seq);
    return result;
}

static void mesh_dealloc(PyObject *self) {
    dt_mesh_release(((dtpy_mesh *)self)->m);
    dtpy_free_object(self);
}

static dt_mesh *M(PyObject *self) { return ((dtpy_mesh *)self)->m; }

static PyObject *mesh_get_device_type(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(dt_mesh_device_type(M(self)));
}

static PyObject *mesh_get_ndim(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(dt_mesh_ndim(M(self)));
}

static PyObject *mesh_get_shape(PyObject *self, void *c) {
    (void)c;
    return dtpy_shape_tuple(dt_mesh_ndim(M(self)), dt_mesh_shape(M(self)));
}

static PyObject *mesh_get_ids(PyObject *self, void *c) {
    (void)c;
    int64_t n = dt_mesh_size(M(self), -1);
    const int64_t *ids = dt_mesh_ids(M(self));
    PyObject *tup = PyTuple_New((Py_ssize_t)n);
    if (tup == NULL)
        return NULL;
    for (int64_t i = 0; i < n; i++) {
        PyObject *v = PyLong_FromLongLong(ids[i]);
        if (v == NULL) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, (Py_ssize_t)i, v);
    }
    return tup;
}

static PyObject *mesh_get_dim_names(PyObject *self, void *c) {
    (void)c;
    int n = dt_mesh_ndim(M(self));
    PyObject *tup = PyTuple_New(n);
    if (tup == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        const char *name = dt_mesh_dim_name(M(self), i);
        PyObject *v = PyUnicode_FromString(name ? name : "");
        if (v == NULL) {
            Py_DECREF(tup);
            return NULL;
        }
        PyTuple_SET_ITEM(tup, i, v);
    }
    return tup;
}

static PyObject *mesh_equal(PyObject *self, PyObject *other) {
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(other, st->mesh_type))
        Py_RETURN_FALSE;
    return PyBool_FromLong(dt_mesh_equal(M(self), M(other)));
}

static PyMethodDef mesh_methods[] = {
    {"equal", mesh_equal, METH_O, "equal(other) -> bool: equality by value."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef mesh_getset[] = {
    {"device_type", mesh_get_device_type, NULL, "DEVICE_CPU or DEVICE_CUDA.", NULL},
    {"ndim", mesh_get_ndim, NULL, "Number of mesh dimensions.", NULL},
    {"shape", mesh_get_shape, NULL, "The mesh shape (tuple).", NULL},
    {"ids", mesh_get_ids, NULL, "The device ids, row-major (tuple).", NULL},
    {"dim_names", mesh_get_dim_names, NULL, "One name per dimension (tuple).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot mesh_slots[] = {
    DTPY_HANDLE_SLOTS(
        "Mesh(device_type, shape, ids, dim_names=None): a handle on an immutable dtorch device mesh.",
        mesh_new, mesh_dealloc, mesh_methods, mesh_getset),
};

PyType_Spec dtpy_mesh_spec = DTPY_TYPE_SPEC("Mesh", dtpy_mesh, Py_TPFLAGS_IMMUTABLETYPE, mesh_slots);

PyObject *dtpy_mesh_handle_new(dtpy_state *st, dt_mesh *m) {
    dtpy_mesh *h = (dtpy_mesh *)st->mesh_type->tp_alloc(st->mesh_type, 0);
    if (h == NULL)
        return NULL;
    dt_mesh_retain(m);
    h->m = m;
    return (PyObject *)h;
}
