/*
 * _C.GraphBase: a handle on a dt_graph (one controller and its workers),
 * subclassed by dtorch.Graph. sync() and cancel() wait with the GIL released
 * (wait.c); the last reference shuts the graph down and joins its threads,
 * also with the GIL released.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"backend", "per_device_per_process", NULL};
    const char *backend = NULL;
    int per_process = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|zp:Graph", kwlist, &backend, &per_process))
        return NULL;
    dtpy_state *st = dtpy_state_of_type(type);
    if (st == NULL)
        return NULL;
    dtpy_graph *self = (dtpy_graph *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    dt_graph_options opts = {.backend = backend, .per_device_per_process = per_process};
    dt_status s = dt_graph_create(&opts, &self->g);
    if (s != DT_OK) {
        self->g = NULL;
        Py_DECREF(self);
        return dtpy_raise(st, s);
    }
    /* Ops never wait for pipeline capacity holding the GIL: dtpy_tensor_wrap
     * waits after the op, GIL released, in slices (dtpy_wait_capacity_slow, wait.c). */
    dt_graph_set_deferred_backpressure(self->g, 1);
    return (PyObject *)self;
}

static void graph_dealloc(PyObject *self) {
    dt_graph *g = ((dtpy_graph *)self)->g;
    ((dtpy_graph *)self)->g = NULL;
    if (g != NULL) {
        /* The last reference shuts the graph down and joins its threads. */
        Py_BEGIN_ALLOW_THREADS dt_graph_release(g);
        Py_END_ALLOW_THREADS
    }
    dtpy_free_object(self);
}

static dt_graph *G(PyObject *self) { return ((dtpy_graph *)self)->g; }

static PyObject *graph_sync(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    dt_future *f = dt_graph_sync_future(G(self));
    if (f == NULL)
        return dtpy_raise_last(st);
    int rc = dtpy_wait_future(st, f);
    dt_status s = rc < 0 ? DT_OK : dt_future_status(f);
    dt_future_release(f);
    if (rc < 0)
        return NULL;
    if (s != DT_OK)
        return dtpy_raise(st, s);
    Py_RETURN_NONE;
}

static PyObject *graph_sync_future(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    dt_future *f = dt_graph_sync_future(G(self));
    if (f == NULL)
        return dtpy_raise_last(st);
    return dtpy_future_new(st, st->sync_future_cls, f, DTPY_FUTURE_SYNC, self);
}

static PyObject *graph_shutdown(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    dt_status s;
    Py_BEGIN_ALLOW_THREADS s = dt_graph_shutdown(G(self));
    Py_END_ALLOW_THREADS if (s != DT_OK) return dtpy_raise(st, s);
    Py_RETURN_NONE;
}

static PyObject *graph_cancel(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    if (nargs > 1)
        return PyErr_Format(PyExc_TypeError, "cancel() takes at most 1 argument (%zd given)", nargs);
    double timeout = -1.0;
    if (nargs == 1 && args[0] != Py_None) {
        timeout = PyFloat_AsDouble(args[0]);
        if (timeout == -1.0 && PyErr_Occurred())
            return NULL;
        if (timeout < 0)
            return PyErr_Format(PyExc_ValueError, "cancel(): timeout must be >= 0 or None");
    }
    int r = dtpy_wait_cancel(st, G(self), timeout);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyObject *graph_get_backend(PyObject *self, void *c) {
    (void)c;
    const char *b = dt_graph_backend(G(self));
    return PyUnicode_FromString(b ? b : "");
}

static PyObject *graph_satisfy(PyObject *self, PyObject *mesh) {
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    dt_mesh *m = dtpy_mesh_of(st, mesh);
    if (m == NULL)
        return NULL;
    return PyBool_FromLong(dt_graph_satisfy(G(self), m));
}

static PyMethodDef graph_methods[] = {
    {"_satisfy", graph_satisfy, METH_O,
     "_satisfy(mesh) -> bool: whether the graph's backend can run on every device of the mesh."},
    {"sync", graph_sync, METH_NOARGS, "sync(): waits until all work issued on the graph so far has run."},
    {"sync_future", graph_sync_future, METH_NOARGS,
     "sync_future() -> VoidFutureCollect: completes when all work issued so far has run."},
    {"shutdown", graph_shutdown, METH_NOARGS,
     "shutdown(): finishes the issued work, then stops the graph's threads. Idempotent."},
    {"cancel", (PyCFunction)(void (*)(void))graph_cancel, METH_FASTCALL,
     "cancel(timeout=None) -> bool: shuts the graph down WITHOUT running its pending work (pending reads "
     "fail as cancelled). Waits up to timeout seconds (None: until done; Ctrl-C interrupts) for the threads "
     "to stop; True once they have. Idempotent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef graph_getset[] = {
    {"backend", graph_get_backend, NULL, "The graph's compute backend (\"torch\" or \"ref\").", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot graph_slots[] = {
    DTPY_HANDLE_SLOTS("GraphBase(backend=None): one dtorch controller and its workers.", graph_new,
                      graph_dealloc, graph_methods, graph_getset),
};

PyType_Spec dtpy_graph_spec = DTPY_TYPE_SPEC("GraphBase", dtpy_graph, Py_TPFLAGS_BASETYPE, graph_slots);
