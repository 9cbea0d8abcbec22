/*
 * dtorch._C's user kernels: _user_op records a node whose kernels call a
 * Python callable on each device's worker thread (dt_user_op, public
 * dtorch_ops.h). The callable is dtorch/_local_map.py's per-op runner:
 * call(rank, capsules, stream) takes the inputs' local pieces as DLPack
 * capsules and the worker's native stream (a CUDA device's cudaStream_t as an
 * int, 0 on CPU: dt_user_kernel_stream) and returns the local result as one,
 * or a str (the formatted traceback) when the user's function raised.
 *
 * Threads: _user_op runs on a Python thread holding the GIL. run_kernel runs
 * on a worker thread and takes the GIL itself (PyGILState_Ensure);
 * release_ctx runs on any thread and only queues the callable for the main
 * thread to drop (drop_dead, a pending call). Lock order: dead_lock is a
 * leaf, never held with the GIL requested. Every wait of
 * the extension releases the GIL (reads, flow control, graph shutdown), so a
 * worker waiting here for it never waits on a client that waits on that
 * worker. After the interpreter began finalising (the graphs were shut down
 * by dtorch/_graph.py's atexit handler before then) nothing is called: the
 * kernel fails and the callable is leaked rather than touched.
 */
#include <pthread.h>
#include <stdint.h>

#include "dtorch_py.h"

static int finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

/* torch renames a capsule it took to "used_dltensor"; one still named
 * "dltensor" was never consumed and frees its tensor here. */
static void capsule_free(PyObject *cap) {
    if (PyCapsule_IsValid(cap, "dltensor"))
        dt_dlpack_delete(PyCapsule_GetPointer(cap, "dltensor"));
}

/* The pending Python exception as the kernel's message (then cleared). */
static void exception_text(char *err, size_t errlen) {
#if PY_VERSION_HEX >= 0x030C0000
    PyObject *exc = PyErr_GetRaisedException();
#else
    PyObject *type, *tb, *exc;
    PyErr_Fetch(&type, &exc, &tb);
    PyErr_NormalizeException(&type, &exc, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
#endif
    PyObject *text = exc ? PyObject_Str(exc) : NULL;
    const char *s = text ? PyUnicode_AsUTF8(text) : NULL;
    snprintf(err, errlen, "%s: %s", exc ? Py_TYPE(exc)->tp_name : "error", s ? s : "(no message)");
    Py_XDECREF(text);
    Py_XDECREF(exc);
    PyErr_Clear();
}

static dt_status run_kernel(void *ctx, int64_t rank, int n_in, void *const *in_dl, void **out_dl, char *err,
                            size_t errlen) {
    if (!Py_IsInitialized() || finalizing()) {
        for (int i = 0; i < n_in; i++)
            dt_dlpack_delete(in_dl[i]);
        snprintf(err, errlen, "the Python interpreter is shutting down");
        return DT_EKERNEL;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    dt_status st = DT_EKERNEL;
    PyObject *caps = PyList_New(n_in), *res = NULL;
    int given = 0; /* inputs handed to a capsule (which owns them from then on) */
    for (; caps && given < n_in; given++) {
        PyObject *cap = PyCapsule_New(in_dl[given], "dltensor", capsule_free);
        if (!cap)
            break;
        PyList_SET_ITEM(caps, given, cap);
    }
    for (int i = given; i < n_in; i++)
        dt_dlpack_delete(in_dl[i]);
    if (given == n_in)
        res = PyObject_CallFunction((PyObject *)ctx, "LOK", (long long)rank, caps,
                                    (unsigned long long)(uintptr_t)dt_user_kernel_stream());
    if (!res) {
        exception_text(err, errlen);
    } else if (PyUnicode_Check(res)) {
        const char *s = PyUnicode_AsUTF8(res);
        snprintf(err, errlen, "%s", s ? s : "(unprintable error)");
    } else if (PyCapsule_IsValid(res, "dltensor")) {
        *out_dl = PyCapsule_GetPointer(res, "dltensor");
        if (PyCapsule_SetName(res, "used_dltensor") == 0)
            st = DT_OK;
        else
            *out_dl = NULL, exception_text(err, errlen);
    } else {
        snprintf(err, errlen, "the kernel runner returned %.100s, not a DLPack capsule",
                 Py_TYPE(res)->tp_name);
    }
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(res);
    Py_XDECREF(caps);
    PyGILState_Release(gil);
    return st;
}

/* The callables whose last runtime reference went: dropped by the interpreter's main thread (a
 * pending call), never on the thread that released them. A worker or the controller must not run
 * arbitrary Python deallocation: the callable's closure may hold dtorch tensors, whose release
 * during a shutdown waits for the controller, which is joining that very worker. Guarded by
 * dead_lock; `scheduled` says a pending call is queued. */
typedef struct dead_ctx {
    struct dead_ctx *next;
    PyObject *obj;
} dead_ctx;
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static dead_ctx *dead_list;
static int dead_scheduled;

/* Drops the dead callables (a thread holding the GIL). */
static int drop_dead(void *unused) {
    (void)unused;
    pthread_mutex_lock(&dead_lock);
    dead_ctx *d = dead_list;
    dead_list = NULL;
    dead_scheduled = 0;
    pthread_mutex_unlock(&dead_lock);
    while (d) {
        dead_ctx *next = d->next;
        Py_DECREF(d->obj);
        PyMem_RawFree(d);
        d = next;
    }
    return 0;
}

static void release_ctx(void *ctx) {
    if (!Py_IsInitialized() || finalizing())
        return; /* leaked at exit: nothing may touch Python objects now */
    dead_ctx *d = PyMem_RawMalloc(sizeof *d);
    if (d == NULL)
        return; /* leaked rather than dropped on this thread */
    d->obj = ctx;
    pthread_mutex_lock(&dead_lock);
    d->next = dead_list;
    dead_list = d;
    int schedule = !dead_scheduled;
    dead_scheduled = 1;
    pthread_mutex_unlock(&dead_lock);
    /* Needs no GIL; a full queue leaves the list to the next _user_op call's drop_dead. */
    if (schedule && Py_AddPendingCall(drop_dead, NULL) != 0) {
        pthread_mutex_lock(&dead_lock);
        dead_scheduled = 0;
        pthread_mutex_unlock(&dead_lock);
    }
}

/* _user_op(graph, call, name, inputs, dtype, shape, mesh, placements) */
static PyObject *mod_user_op(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    DTPY_NARGS(8, "_user_op");
    drop_dead(NULL);
    dt_graph *g = dtpy_graph_arg(st, args[0]);
    if (g == NULL)
        return NULL;
    if (!PyCallable_Check(args[1]) || !PyUnicode_Check(args[2]) || !PyList_Check(args[3]))
        return PyErr_Format(PyExc_TypeError, "_user_op: expected a callable, a name and a list of inputs");
    const char *name = PyUnicode_AsUTF8(args[2]);
    Py_ssize_t n = PyList_GET_SIZE(args[3]);
    if (name == NULL)
        return NULL;
    if (n > 6)
        return PyErr_Format(PyExc_ValueError, "%s: at most 6 tensor inputs are taken, got %zd", name, n);
    dt_tensor *in[6];
    for (Py_ssize_t i = 0; i < n; i++) {
        dtpy_tensor *t = dtpy_tensor_arg_or_null(st, PyList_GET_ITEM(args[3], i), name, "input");
        if (t == NULL)
            return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "%s: input %zd is None", name, i);
        in[i] = t->t;
    }
    int dtype = dtpy_dtype_from_torch(st, args[4]);
    if (dtype < 0)
        return NULL;
    int64_t shape[DT_MAX_NDIM];
    int ndim = dtpy_parse_shape(args[5], shape, "shape");
    if (ndim < 0)
        return NULL;
    dt_mesh *mesh = dtpy_mesh_of(st, args[6]);
    if (mesh == NULL)
        return NULL;
    dt_placement pl[DT_MAX_MESH_NDIM];
    int pl_null;
    if (dtpy_parse_placements(args[7], dt_mesh_ndim(mesh), pl, &pl_null) < 0)
        return NULL;
    Py_INCREF(args[1]); /* the runtime's reference, dropped by release_ctx */
    dt_user_kernel uk = {.name = name, .run = run_kernel, .release = release_ctx, .ctx = args[1]};
    dtpy_record_call_site(st);
    dt_tensor *t = dt_user_op(g, &uk, in, (int)n, (dt_dtype)dtype, ndim, shape, mesh, pl_null ? NULL : pl);
    return dtpy_tensor_wrap(st, t, args[0], args[6], mesh);
}

static PyMethodDef user_methods[] = {
    {"_user_op", (PyCFunction)(void (*)(void))mod_user_op, METH_FASTCALL,
     "_user_op(graph, call, name, inputs, dtype, shape, mesh, placements) -> Tensor: a user-kernel node"},
    {NULL, NULL, 0, NULL},
};

/* fork(): the list's lock is held across it, so a child never inherits it locked by a worker that
 * does not exist there (the child's graphs are dead; its dropped callables are still queued). */
static void fork_lock(void) { pthread_mutex_lock(&dead_lock); }
static void fork_unlock(void) { pthread_mutex_unlock(&dead_lock); }

int dtpy_add_user_methods(PyObject *module) {
    static int registered;
    if (!registered && pthread_atfork(fork_lock, fork_unlock, fork_unlock) == 0)
        registered = 1;
    return PyModule_AddFunctions(module, user_methods);
}
