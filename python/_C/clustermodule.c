/*
 * The cluster functions of the extension (dtorch.cluster's MainNode over
 * dtorch_cluster.h). Waits release the GIL and run as a loop of short
 * timed waits with PyErr_CheckSignals in between, so Ctrl-C works.
 */
#include "dtorch_py.h"

#include <time.h>

#include "dtorch/dtorch_cluster.h"
#include "dtorch/dtorch_record.h"

#define SLICE_MS 100

/* A failed cluster call as the Python exception a caller expects. */
static PyObject *cluster_error(dt_status s) {
    PyObject *cls = s == DT_EINVAL      ? PyExc_ValueError
                    : s == DT_ETIMEDOUT ? PyExc_TimeoutError
                    : s == DT_EINDEX    ? PyExc_IndexError
                                        : PyExc_RuntimeError;
    PyErr_SetString(cls, dt_last_error());
    return NULL;
}

static PyObject *c_listen(PyObject *self, PyObject *args) {
    (void)self;
    const char *address = NULL, *token = NULL;
    int cpu = 0, hb = 0, priv = 0;
    if (!PyArg_ParseTuple(args, "ziz|ip", &address, &cpu, &token, &hb, &priv))
        return NULL;
    dt_cluster_options o = {.cpu_devices = cpu, .token = token, .heartbeat_ms = hb, .private_nodes = priv};
    dt_status s;
    Py_BEGIN_ALLOW_THREADS s = dt_cluster_listen(address, &o);
    Py_END_ALLOW_THREADS if (s != DT_OK) return cluster_error(s);
    Py_RETURN_NONE;
}

static PyObject *c_address(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    char buf[200];
    if (dt_cluster_address(buf, sizeof buf) != DT_OK)
        Py_RETURN_NONE;
    return PyUnicode_FromString(buf);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static PyObject *c_wait(PyObject *self, PyObject *args) {
    (void)self;
    int n;
    double timeout_s;
    if (!PyArg_ParseTuple(args, "id", &n, &timeout_s))
        return NULL;
    if (n < 0 || !(timeout_s >= 0))
        return PyErr_Format(PyExc_ValueError,
                            "wait_cluster_ready(num_nodes=%d, timeout_second=%g): both must be >= 0", n,
                            timeout_s);
    int64_t deadline = now_ms() + (int64_t)(timeout_s * 1000.0);
    for (;;) {
        int64_t left = deadline - now_ms();
        int slice = left < SLICE_MS ? (int)(left < 0 ? 0 : left) : SLICE_MS;
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_cluster_wait(n, slice);
        Py_END_ALLOW_THREADS if (s == DT_OK) Py_RETURN_NONE;
        if (s != DT_ETIMEDOUT)
            return cluster_error(s);
        if (left <= 0) {
            /* dt_cluster_wait's message has the refused and lost counts;
             * PyErr_Format knows no %g, so the seconds are formatted here. */
            char addr[200] = "?", why[400];
            dt_cluster_address(addr, sizeof addr);
            snprintf(why, sizeof why, "%s", dt_last_error());
            char *counts = strrchr(why, '(');
            char msg[800];
            snprintf(
                msg, sizeof msg,
                "MainNode.wait_cluster_ready: %d of %d worker nodes joined the main node at %s within %g s "
                "(%d registered in all%s%s",
                dt_cluster_num_alive(), n, addr, timeout_s, dt_cluster_num_nodes(), counts ? "; " : ")",
                counts ? counts + 1 : "");
            PyErr_SetString(PyExc_TimeoutError, msg);
            return NULL;
        }
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
}

static PyObject *c_nodes(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    int n = dt_cluster_num_nodes();
    PyObject *list = PyList_New(0);
    for (int i = 0; list && i < n; i++) {
        dt_node_info in;
        if (dt_cluster_node(i, &in) != DT_OK)
            break;
        static const char *const states[] = {"alive", "lost", "stopped", "removed"};
        PyObject *d = Py_BuildValue(
            "{s:i,s:s,s:i,s:L,s:i,s:L,s:i,s:s,s:s,s:s,s:L,s:L,s:L,s:L,s:L,s:L}", "index", in.index, "state",
            states[in.state], "cpu_devices", in.cpu_devices, "first_device_id", (long long)in.first_device_id,
            "cuda_devices", in.cuda_devices, "first_cuda_device_id", (long long)in.first_cuda_device_id,
            "pid", in.pid, "address", in.address, "host", in.host, "error", in.error, "data_bytes_sent",
            (long long)in.data_bytes_sent, "data_messages_sent", (long long)in.data_messages_sent,
            "data_bytes_received", (long long)in.data_bytes_received, "data_messages_received",
            (long long)in.data_messages_received, "clock_offset_ns", (long long)in.clock_offset_ns,
            "clock_rtt_ns", (long long)in.clock_rtt_ns);
        if (!d || PyList_Append(list, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(list);
            break;
        }
        Py_DECREF(d);
    }
    return list;
}

/* The worker nodes' kernel records since the last call (dt_cluster_take_trace): a list of
 * (node, device_type, device_id, stream_kind, seq, op, kernel, file, line, begin_ns, end_ns,
 * bytes), times on this process's clock; [] without ZeroMQ. */
static PyObject *c_take_trace(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    dt_cluster_trace_kernel *ks = NULL;
    size_t n = 0;
    if (!dt_cluster_available())
        return PyList_New(0);
    dt_status st;
    Py_BEGIN_ALLOW_THREADS st = dt_cluster_take_trace(&ks, &n);
    Py_END_ALLOW_THREADS if (st != DT_OK) return cluster_error(st);
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list && i < n; i++) {
        const dt_cluster_trace_kernel *k = &ks[i];
        PyObject *t = Py_BuildValue("(iiLiKssziLLL)", k->node, (int)k->device_type, (long long)k->device_id,
                                    (int)k->stream_kind, (unsigned long long)k->seq, k->op, k->kernel,
                                    k->file[0] ? k->file : NULL, k->line, (long long)k->begin_ns,
                                    (long long)k->end_ns, (long long)k->bytes);
        if (!t || PyList_Append(list, t) < 0)
            Py_CLEAR(list);
        Py_XDECREF(t);
    }
    dt_record_free(ks);
    return list;
}

static PyObject *c_shutdown(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    Py_BEGIN_ALLOW_THREADS dt_cluster_shutdown();
    Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *c_remove(PyObject *self, PyObject *args) {
    (void)self;
    int index;
    if (!PyArg_ParseTuple(args, "i", &index))
        return NULL;
    dt_status st;
    Py_BEGIN_ALLOW_THREADS st = dt_cluster_remove(index);
    Py_END_ALLOW_THREADS if (st != DT_OK) return cluster_error(st);
    Py_RETURN_NONE;
}

/* The live values with a piece on devices first..first+count-1 of `type`
 * (0 cpu, 1 cuda): a list of (id, shape, dtype, file or None, line). */
static PyObject *c_values_on(PyObject *self, PyObject *args) {
    int type;
    long long first, count;
    if (!PyArg_ParseTuple(args, "iLL", &type, &first, &count))
        return NULL;
    dt_tensor **ts = NULL;
    int64_t n = 0, cap = 0;
    do { /* more may appear between the calls: again with room for them */
        for (int64_t i = 0; i < (n < cap ? n : cap); i++)
            dt_tensor_release(ts[i]);
        PyMem_Free(ts);
        cap = n + 16;
        if (!(ts = PyMem_Calloc((size_t)cap, sizeof *ts)))
            return PyErr_NoMemory();
        n = dt_tensors_on_devices((dt_device_type)type, first, count, ts, cap);
    } while (n > cap);
    PyObject *list = PyList_New(0);
    for (int64_t i = 0; i < n; i++) {
        const char *file;
        int line, nd = dt_tensor_ndim(ts[i]);
        dt_tensor_site(ts[i], &file, &line);
        PyObject *shape = list ? PyTuple_New(nd) : NULL;
        for (int d = 0; shape && d < nd; d++)
            PyTuple_SET_ITEM(shape, d, PyLong_FromLongLong((long long)dt_tensor_shape(ts[i])[d]));
        PyObject *dtype = shape ? dtpy_dtype_to_torch(dtpy_state_of(self), dt_tensor_dtype(ts[i])) : NULL;
        PyObject *row = dtype ? Py_BuildValue("(KOOzi)", (unsigned long long)dt_tensor_id(ts[i]), shape,
                                              dtype, file, line)
                              : NULL;
        if (!row || PyList_Append(list, row) < 0)
            Py_CLEAR(list);
        Py_XDECREF(row); /* dtype is borrowed */
        Py_XDECREF(shape);
        dt_tensor_release(ts[i]);
    }
    PyMem_Free(ts);
    return list;
}

/* _lineage(x) -> (op name, (input value ids...)) or None: what made x, as
 * recorded for recovery (dt_tensor_lineage). */
static PyObject *c_lineage(PyObject *self, PyObject *arg) {
    dtpy_state *st = dtpy_state_of(self);
    if (!DTPY_IS_TENSOR(st, arg)) {
        PyErr_SetString(PyExc_TypeError, "_lineage(x) takes a dtorch tensor");
        return NULL;
    }
    const dt_tensor *t = ((dtpy_tensor *)arg)->t;
    uint64_t ids[8];
    int n = dt_tensor_lineage(t, ids);
    if (n < 0)
        Py_RETURN_NONE;
    PyObject *in = PyTuple_New(n);
    for (int i = 0; in && i < n; i++)
        PyTuple_SET_ITEM(in, i, PyLong_FromUnsignedLongLong((unsigned long long)ids[i]));
    PyObject *out = in ? Py_BuildValue("(sO)", dt_tensor_lineage_op(t), in) : NULL;
    Py_XDECREF(in);
    return out;
}

/* _recompute(x, inputs, mesh) -> a new tensor: x's recorded producer run
 * again on `inputs` (tensors, in its order), its output on `mesh`. */
static PyObject *c_recompute(PyObject *self, PyObject *args) {
    dtpy_state *st = dtpy_state_of(self);
    PyObject *x, *seq, *mesh_obj;
    if (!PyArg_ParseTuple(args, "OOO", &x, &seq, &mesh_obj))
        return NULL;
    if (!DTPY_IS_TENSOR(st, x)) {
        PyErr_SetString(PyExc_TypeError, "_recompute: x must be a dtorch tensor");
        return NULL;
    }
    dt_mesh *mesh = dtpy_mesh_of(st, mesh_obj);
    PyObject *fast = mesh ? PySequence_Fast(seq, "_recompute: inputs must be a sequence") : NULL;
    if (!fast)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    dt_tensor *in[8];
    for (Py_ssize_t i = 0; i < n && i < 8; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (o == Py_None) { /* an input the op left out (id 0) */
            in[i] = NULL;
            continue;
        }
        if (!DTPY_IS_TENSOR(st, o)) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "_recompute: inputs must be dtorch tensors");
            return NULL;
        }
        in[i] = ((dtpy_tensor *)o)->t;
    }
    dt_tensor *r = n <= 8 ? dt_tensor_recompute(((dtpy_tensor *)x)->t, in, (int)n, mesh) : NULL;
    Py_DECREF(fast);
    if (n > 8) {
        PyErr_SetString(PyExc_ValueError, "_recompute: at most 8 inputs");
        return NULL;
    }
    return dtpy_tensor_wrap(st, r, ((dtpy_tensor *)x)->graph, mesh_obj, mesh);
}

/* _mark_lost(x, why): every later read of x's value raises KernelError(why). */
static PyObject *c_mark_lost(PyObject *self, PyObject *args) {
    dtpy_state *st = dtpy_state_of(self);
    PyObject *x;
    const char *why;
    if (!PyArg_ParseTuple(args, "Os", &x, &why))
        return NULL;
    if (!DTPY_IS_TENSOR(st, x)) {
        PyErr_SetString(PyExc_TypeError, "_mark_lost: x must be a dtorch tensor");
        return NULL;
    }
    if (dt_tensor_mark_lost(((dtpy_tensor *)x)->t, why) != DT_OK)
        return dtpy_raise_last(st);
    Py_RETURN_NONE;
}

static PyObject *c_info(PyObject *self, PyObject *noargs) {
    (void)self, (void)noargs;
    dt_cluster_counters c;
    dt_cluster_counters_get(&c);
    return Py_BuildValue(
        "{s:O,s:O,s:i,s:i,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L}", "available",
        dt_cluster_available() ? Py_True : Py_False, "curve", dt_cluster_has_curve() ? Py_True : Py_False,
        "num_nodes", dt_cluster_num_nodes(), "num_alive", dt_cluster_num_alive(), "cpu_devices",
        (long long)dt_cluster_cpu_devices(), "cuda_devices", (long long)dt_cluster_cuda_devices(),
        "value_bytes", (long long)c.value_bytes, "values", (long long)c.values, "kernels_on_nodes",
        (long long)c.kernels_on_nodes, "relayed", (long long)c.relayed, "data_bytes_sent",
        (long long)c.data_bytes_sent, "data_messages_sent", (long long)c.data_messages_sent,
        "data_bytes_received", (long long)c.data_bytes_received, "data_messages_received",
        (long long)c.data_messages_received);
}

static PyMethodDef cluster_methods[] = {
    {"_cluster_listen", c_listen, METH_VARARGS,
     "_cluster_listen(address, cpu_devices, token, heartbeat_ms=0, private_nodes=False)"},
    {"_cluster_address", c_address, METH_NOARGS, "_cluster_address() -> 'HOST:PORT' or None"},
    {"_cluster_wait", c_wait, METH_VARARGS, "_cluster_wait(num_nodes, timeout_second); TimeoutError"},
    {"_cluster_nodes", c_nodes, METH_NOARGS, "_cluster_nodes() -> [dict] in registration order"},
    {"_cluster_shutdown", c_shutdown, METH_NOARGS, "_cluster_shutdown(): stop every worker node"},
    {"_cluster_take_trace", c_take_trace, METH_NOARGS,
     "_cluster_take_trace(): the worker nodes' kernel records since the last call"},
    {"_cluster_info", c_info, METH_NOARGS, "_cluster_info() -> dict"},
    {"_cluster_remove", c_remove, METH_VARARGS,
     "_cluster_remove(index): stop worker node index, mark it removed"},
    {"_values_on_devices", c_values_on, METH_VARARGS,
     "_values_on_devices(type, first, count) -> [(id, shape, dtype, file, line)] of the live values there"},
    {"_lineage", c_lineage, METH_O, "_lineage(x) -> (op, input ids) or None: x's recorded producer"},
    {"_recompute", c_recompute, METH_VARARGS, "_recompute(x, inputs, mesh) -> x's producer run again"},
    {"_mark_lost", c_mark_lost, METH_VARARGS, "_mark_lost(x, why): reads of x raise KernelError(why)"},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_cluster_methods(PyObject *module) { return PyModule_AddFunctions(module, cluster_methods); }
