/*
 * The small handle types of dtorch._C: Mesh (a dt_mesh), GraphBase (a
 * dt_graph, subclassed by dtorch.Graph) and FutureBase (a dt_future,
 * subclassed by dtorch.TensorFuture and dtorch.VoidFutureCollect), plus the
 * GIL-releasing wait loop and the DLPack hand-over of values to torch.
 *
 * Every function runs on a Python thread holding the GIL; the waits release
 * it around each timed dt_future_wait slice.
 */
#include "dtorch_py.h"

#include <string.h>
#include <time.h>

/* How long one GIL-released wait lasts before signals are checked. */
#define WAIT_SLICE_MS 50

/* ============================================================ waiting */

int dtpy_wait_future(dtpy_state *st, dt_future *f) {
    if (dt_future_is_ready(f))
        return 0;
    for (;;) {
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_future_wait(f, WAIT_SLICE_MS);
        Py_END_ALLOW_THREADS if (s == DT_OK) return 0;
        if (s != DT_ETIMEDOUT) {
            dtpy_raise(st, s);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

int dtpy_wait_capacity_slow(void) {
    dt_graph *g = dt_take_backpressure();
    if (g == NULL)
        return 0;
    int rc = 0;
    for (;;) {
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_graph_wait_capacity(g, WAIT_SLICE_MS);
        Py_END_ALLOW_THREADS if (s != DT_ETIMEDOUT) break; /* capacity, or a forked graph whose op already
                                                              failed */
        if (PyErr_CheckSignals() < 0) {
            rc = -1;
            break;
        }
    }
    /* The last reference may join the graph's threads. */
    Py_BEGIN_ALLOW_THREADS dt_graph_release(g);
    Py_END_ALLOW_THREADS return rc;
}

static int64_t monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits up to `timeout_ms` (< 0: no limit) in slices; 1 ready, 0 timed out,
 * -1 error (a signal handler raised). */
static int wait_for(dtpy_state *st, dt_future *f, long long timeout_ms) {
    if (timeout_ms < 0)
        return dtpy_wait_future(st, f) < 0 ? -1 : 1;
    if (dt_future_is_ready(f))
        return 1;
    int64_t deadline = monotonic_ms() + timeout_ms;
    for (;;) {
        long long slice = (long long)(deadline - monotonic_ms());
        if (slice > WAIT_SLICE_MS)
            slice = WAIT_SLICE_MS;
        if (slice < 0)
            slice = 0;
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_future_wait(f, slice);
        Py_END_ALLOW_THREADS if (s == DT_OK) return 1;
        if (s != DT_ETIMEDOUT) {
            dtpy_raise(st, s);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
        if (slice == 0 || monotonic_ms() >= deadline)
            return dt_future_is_ready(f) ? 1 : 0;
    }
}

/* ============================================================ DLPack values */

/* torch renames the capsule to "used_dltensor" when it takes the tensor; a
 * capsule still named "dltensor" was never consumed and must be freed here. */
static void dlpack_capsule_destructor(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor"))
        dt_dlpack_delete(PyCapsule_GetPointer(cap, "dltensor"));
}

static PyObject *shape_to_tuple(int ndim, const int64_t *shape) {
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

/* Copies the value into a fresh torch tensor of `dtype` on the host, for
 * backends without DLPack support ("ref"). */
static PyObject *read_host(dtpy_state *st, dt_future *f, dt_dtype dtype, int ndim, const int64_t *shape) {
    int64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    PyObject *size = shape_to_tuple(ndim, shape);
    if (size == NULL)
        return NULL;
    PyObject *kw = Py_BuildValue("{sO}", "dtype", dtpy_dtype_to_torch(st, dtype));
    PyObject *args = kw ? PyTuple_Pack(1, size) : NULL;
    PyObject *out = args ? PyObject_Call(st->torch_empty, args, kw) : NULL;
    Py_XDECREF(args);
    Py_XDECREF(kw);
    Py_DECREF(size);
    if (out == NULL)
        return NULL;
    dt_status s;
    if (numel == 0) {
        Py_BEGIN_ALLOW_THREADS s = dt_future_status(f);
        Py_END_ALLOW_THREADS
    } else {
        PyObject *ptr_obj = PyObject_CallMethodNoArgs(out, st->str_data_ptr);
        void *ptr = ptr_obj ? PyLong_AsVoidPtr(ptr_obj) : NULL;
        Py_XDECREF(ptr_obj);
        if (PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        size_t nbytes = (size_t)numel * dt_dtype_size(dtype);
        Py_BEGIN_ALLOW_THREADS s = dt_future_read(f, ptr, nbytes);
        Py_END_ALLOW_THREADS
    }
    if (s != DT_OK) {
        Py_DECREF(out);
        return dtpy_raise(st, s);
    }
    return out;
}

PyObject *dtpy_read_value(dtpy_state *st, dt_future *f, dt_dtype dtype, int ndim, const int64_t *shape) {
    if (dtpy_wait_future(st, f) < 0)
        return NULL;
    void *dl = NULL;
    dt_status s;
    Py_BEGIN_ALLOW_THREADS s = dt_future_to_dlpack(f, &dl);
    Py_END_ALLOW_THREADS if (s == DT_EUNSUPPORTED) {
        /* Only a fetch of a backend without DLPack gets here. */
        dt_clear_error();
        return read_host(st, f, dtype, ndim, shape);
    }
    if (s != DT_OK)
        return dtpy_raise(st, s);
    PyObject *cap = PyCapsule_New(dl, "dltensor", dlpack_capsule_destructor);
    if (cap == NULL) {
        dt_dlpack_delete(dl);
        return NULL;
    }
    PyObject *out = PyObject_CallOneArg(st->from_dlpack, cap);
    Py_DECREF(cap);
    return out;
}

/* ============================================================ Mesh */

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
    PyTypeObject *tp = Py_TYPE(self);
    dt_mesh_release(((dtpy_mesh *)self)->m);
    tp->tp_free(self);
    Py_DECREF(tp);
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
    return shape_to_tuple(dt_mesh_ndim(M(self)), dt_mesh_shape(M(self)));
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
    {Py_tp_doc,
     "Mesh(device_type, shape, ids, dim_names=None): a handle on an immutable dtorch device mesh."},
    {Py_tp_new, mesh_new},
    {Py_tp_dealloc, mesh_dealloc},
    {Py_tp_methods, mesh_methods},
    {Py_tp_getset, mesh_getset},
    {0, NULL},
};

PyType_Spec dtpy_mesh_spec = {
    .name = "dtorch._C.Mesh",
    .basicsize = sizeof(dtpy_mesh),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = mesh_slots,
};

/* ============================================================ GraphBase */

static PyObject *graph_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"backend", NULL};
    const char *backend = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|z:Graph", kwlist, &backend))
        return NULL;
    dtpy_state *st = dtpy_state_of_type(type);
    if (st == NULL)
        return NULL;
    dtpy_graph *self = (dtpy_graph *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    dt_graph_options opts = {backend};
    dt_status s = dt_graph_create(&opts, &self->g);
    if (s != DT_OK) {
        self->g = NULL;
        Py_DECREF(self);
        return dtpy_raise(st, s);
    }
    /* Ops never wait for pipeline capacity holding the GIL: dtpy_tensor_wrap
     * waits after the op, GIL released, in slices (dtpy_wait_capacity). */
    dt_graph_set_deferred_backpressure(self->g, 1);
    return (PyObject *)self;
}

static void graph_dealloc(PyObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    dt_graph *g = ((dtpy_graph *)self)->g;
    ((dtpy_graph *)self)->g = NULL;
    if (g != NULL) {
        /* The last reference shuts the graph down and joins its threads. */
        Py_BEGIN_ALLOW_THREADS dt_graph_release(g);
        Py_END_ALLOW_THREADS
    }
    tp->tp_free(self);
    Py_DECREF(tp);
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
    int64_t deadline = timeout < 0 ? -1 : monotonic_ms() + (int64_t)(timeout * 1000.0);
    for (;;) {
        int64_t slice = WAIT_SLICE_MS;
        if (deadline >= 0 && deadline - monotonic_ms() < slice)
            slice = deadline - monotonic_ms() > 0 ? deadline - monotonic_ms() : 0;
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_graph_cancel(G(self), slice);
        Py_END_ALLOW_THREADS if (s == DT_OK) Py_RETURN_TRUE;
        if (s != DT_ETIMEDOUT)
            return dtpy_raise(st, s);
        if (PyErr_CheckSignals() < 0)
            return NULL;
        if (deadline >= 0 && monotonic_ms() >= deadline)
            Py_RETURN_FALSE;
    }
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
    {Py_tp_doc, "GraphBase(backend=None): one dtorch controller and its workers."},
    {Py_tp_new, graph_new},
    {Py_tp_dealloc, graph_dealloc},
    {Py_tp_methods, graph_methods},
    {Py_tp_getset, graph_getset},
    {0, NULL},
};

PyType_Spec dtpy_graph_spec = {
    .name = "dtorch._C.GraphBase",
    .basicsize = sizeof(dtpy_graph),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = graph_slots,
};

/* ============================================================ FutureBase */

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
    PyTypeObject *tp = Py_TYPE(self);
    dtpy_future *o = (dtpy_future *)self;
    PyObject_GC_UnTrack(self);
    dt_future_release(o->f);
    o->f = NULL;
    future_clear(self);
    tp->tp_free(self);
    Py_DECREF(tp);
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
    int r = wait_for(st, ((dtpy_future *)self)->f, ms);
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

PyType_Spec dtpy_future_spec = {
    .name = "dtorch._C.FutureBase",
    .basicsize = sizeof(dtpy_future),
    .flags =
        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = future_slots,
};
