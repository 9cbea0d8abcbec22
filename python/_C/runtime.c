/*
 * dtorch._C's functions over the library as a whole rather than one family:
 * seeding, memory statistics and the buffer cache, the operator registry
 * (op_docs), status strings, torch's default dtype, the call-site recorder
 * and _rebind (the Python tensor object takes another tensor's value).
 *
 * Every function runs on a Python thread holding the GIL; _empty_cache
 * releases it.
 */
#include "dtorch_py.h"

static PyObject *mod_manual_seed(PyObject *module, PyObject *arg) {
    (void)module;
    /* torch accepts negative seeds and reinterprets them as unsigned. */
    unsigned long long seed;
    long long s = PyLong_AsLongLong(arg);
    if (s == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        seed = PyLong_AsUnsignedLongLong(arg);
        if (seed == (unsigned long long)-1 && PyErr_Occurred())
            return NULL;
    } else {
        seed = (unsigned long long)s;
    }
    dt_manual_seed((uint64_t)seed);
    Py_RETURN_NONE;
}

static PyObject *mod_sync_default_dtype(PyObject *module, PyObject *unused) {
    (void)unused;
    if (dtpy_sync_default_dtype(dtpy_state_of(module)) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *mod_set_call_site(PyObject *module, PyObject *unused) {
    (void)unused;
    dtpy_record_call_site(dtpy_state_of(module));
    Py_RETURN_NONE;
}

static PyObject *mod_status_str(PyObject *module, PyObject *arg) {
    (void)module;
    long s = PyLong_AsLong(arg);
    if (s == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(dt_status_str((dt_status)s));
}

/* op_docs() -> list of (name, family, signatures, redistributes) from the
 * library's operator registry. */
static PyObject *mod_op_docs(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    int n = dt_op_doc_count();
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        const dt_op_doc *d = dt_op_doc_get(i);
        PyObject *row =
            Py_BuildValue("(sssO)", d->name, d->family, d->signatures, d->redistributes ? Py_True : Py_False);
        if (row == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, row);
    }
    return list;
}

/* _memory_stats(device_type, id) -> (current_bytes, peak_bytes). */
static PyObject *mod_memory_stats(PyObject *self, PyObject *args) {
    (void)self;
    int type;
    long long id;
    if (!PyArg_ParseTuple(args, "iL", &type, &id))
        return NULL;
    int64_t cur = 0, peak = 0;
    if (dt_memory_stats((dt_device_type)type, id, &cur, &peak) != DT_OK)
        return dtpy_raise_last(dtpy_state_of(self));
    return Py_BuildValue("(LL)", (long long)cur, (long long)peak);
}

static PyObject *mod_reset_peak(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    dt_reset_peak_memory_stats();
    Py_RETURN_NONE;
}

static PyObject *mod_empty_cache(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    Py_BEGIN_ALLOW_THREADS dt_empty_cache();
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

/* _rebind(x, y): the Python tensor x takes y's value (same graph); returns
 * x. Used by assignments, copy_ and inplace=True forms written in Python. */
static PyObject *mod_rebind(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(self);
    if (nargs != 2 || !DTPY_IS_TENSOR(st, args[0]) || !DTPY_IS_TENSOR(st, args[1])) {
        PyErr_SetString(PyExc_TypeError, "_rebind(x, y) takes two dtorch tensors");
        return NULL;
    }
    dtpy_tensor *x = (dtpy_tensor *)args[0], *y = (dtpy_tensor *)args[1];
    if (dt_tensor_graph(x->t) != dt_tensor_graph(y->t)) {
        PyErr_SetString(PyExc_ValueError, "_rebind: the tensors belong to different graphs");
        return NULL;
    }
    if (x != y) {
        dt_tensor_retain(y->t);
        dtpy_tensor_rebind(x, y->t);
    }
    return Py_NewRef(args[0]);
}

static PyMethodDef runtime_methods[] = {
    {"_rebind", (PyCFunction)(void (*)(void))mod_rebind, METH_FASTCALL,
     "_rebind(x, y) -> x holding y's value"},
    {"_memory_stats", mod_memory_stats, METH_VARARGS, "_memory_stats(device_type, id) -> (current, peak)"},
    {"_reset_peak_memory_stats", mod_reset_peak, METH_NOARGS,
     "Sets every device's peak to its current bytes."},
    {"_empty_cache", mod_empty_cache, METH_NOARGS, "Returns cached buffers to the system."},
    {"op_docs", mod_op_docs, METH_NOARGS, "op_docs() -> [(name, family, signatures, redistributes)]"},
    {"manual_seed", mod_manual_seed, METH_O, "manual_seed(seed): seeds dtorch's random factories."},
    {"_sync_default_dtype", mod_sync_default_dtype, METH_NOARGS,
     "Makes dtorch's promotion dtype follow torch.get_default_dtype()."},
    {"_record_call_site", mod_set_call_site, METH_NOARGS, "Records the caller's file:line for the next ops."},
    {"status_str", mod_status_str, METH_O, "status_str(status) -> str"},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_runtime_methods(PyObject *module) { return PyModule_AddFunctions(module, runtime_methods); }
