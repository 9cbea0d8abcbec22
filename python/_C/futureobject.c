/*
 * _C.FutureBase: a handle on a dt_future, subclassed by dtorch.TensorFuture
 * (a fetched value) and dtorch.VoidFutureCollect (a graph sync). get() waits
 * with the GIL released (wait.c) and caches the value; _notify_fd lets an
 * asyncio loop await one without a helper thread.
 *
 * Every function runs on a Python thread holding the GIL, except
 * notify_fd_cb (on the thread that completes the future).
 */
#include "dtorch_py.h"

#include <unistd.h>

PyObject *dtpy_future_new(dtpy_state *st, PyTypeObject *cls, dt_future *f, int kind, PyObject *graph) {
    (void)st;
    dtpy_future *o = (dtpy_future *)cls->tp_alloc(cls, 0);
    if (o == NULL) {
        dt_future_release(f);
        return NULL;
    }
    o->f = f;
    o->kind = kind;
    o->graph = Py_XNewRef(graph);
    return (PyObject *)o;
}

PyObject *dtpy_future_value(dtpy_state *st, dtpy_future *fu) {
    if (fu->result == NULL) {
        if (fu->kind == DTPY_FUTURE_SYNC) {
            if (dtpy_wait_future(st, fu->f) < 0)
                return NULL;
            dt_status s = dt_future_status(fu->f);
            if (s != DT_OK)
                return dtpy_raise(st, s);
            fu->result = Py_NewRef(Py_None);
        } else {
            fu->result = dtpy_read_value(st, fu->f, fu->dtype, fu->ndim, fu->shape);
            if (fu->result == NULL)
                return NULL;
        }
    }
    return Py_NewRef(fu->result);
}

static int future_traverse(PyObject *self, visitproc visit, void *arg) {
    dtpy_future *o = (dtpy_future *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->graph);
    Py_VISIT(o->result);
    return 0;
}

static int future_clear(PyObject *self) {
    dtpy_future *o = (dtpy_future *)self;
    Py_CLEAR(o->graph);
    Py_CLEAR(o->result);
    return 0;
}

static void future_dealloc(PyObject *self) {
    dtpy_future *o = (dtpy_future *)self;
    PyObject_GC_UnTrack(self);
    dt_future_release(o->f);
    o->f = NULL;
    future_clear(self);
    dtpy_free_object(self);
}

static PyObject *future_get(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    return dtpy_future_value(st, (dtpy_future *)self);
}

static PyObject *future_is_ready(PyObject *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(dt_future_is_ready(((dtpy_future *)self)->f));
}

static PyObject *future_wait_for(PyObject *self, PyObject *arg) {
    dtpy_state *st = dtpy_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    long long ms = PyLong_AsLongLong(arg);
    if (ms == -1 && PyErr_Occurred())
        return NULL;
    int r = dtpy_wait_for(st, ((dtpy_future *)self)->f, ms);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

/* Called on the thread that completes the future (a worker, or the caller
 * when it is already done): one byte into the event loop's wake-up pipe.
 * No GIL, no allocation: write() is all it does. */
static void notify_fd_cb(void *arg) {
    char byte = 1;
    ssize_t n = write((int)(intptr_t)arg, &byte, 1);
    (void)n; /* a full pipe already holds a wake-up */
}

/* _notify_fd(fd): when the future completes, write one byte to fd (the
 * write end of a non-blocking pipe the asyncio loop reads), so `await` wakes
 * the loop without polling and without a helper thread. */
static PyObject *future_notify_fd(PyObject *self, PyObject *arg) {
    int fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (fd < 0) {
        PyErr_SetString(PyExc_ValueError, "_notify_fd: fd must be a non-negative file descriptor");
        return NULL;
    }
    if (dt_future_on_ready(((dtpy_future *)self)->f, notify_fd_cb, (void *)(intptr_t)fd) != DT_OK)
        return dtpy_raise_last(dtpy_state_of_type(Py_TYPE(self)));
    Py_RETURN_NONE;
}

static PyMethodDef future_methods[] = {
    {"_notify_fd", future_notify_fd, METH_O, "_notify_fd(fd): write a byte to fd when the future completes."},
    {"get", future_get, METH_NOARGS,
     "get(): waits and returns the value (a torch.Tensor, or None for a sync future); raises the "
     "failure of the work it waited for."},
    {"wait", future_get, METH_NOARGS, "wait(): same as get(), as torch.futures.Future.wait()."},
    {"wait_for", future_wait_for, METH_O,
     "wait_for(timeout_ms) -> bool: waits at most timeout_ms milliseconds; True when ready."},
    {"is_ready", future_is_ready, METH_NOARGS, "is_ready() -> bool; never waits."},
    {"done", future_is_ready, METH_NOARGS, "done() -> bool: alias of is_ready()."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot future_slots[] = {
    {Py_tp_doc, "The C base of dtorch's futures."},
    {Py_tp_dealloc, future_dealloc},
    {Py_tp_traverse, future_traverse},
    {Py_tp_clear, future_clear},
    {Py_tp_methods, future_methods},
    {0, NULL},
};

PyType_Spec dtpy_future_spec = DTPY_TYPE_SPEC(
    "FutureBase", dtpy_future, Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    future_slots);
