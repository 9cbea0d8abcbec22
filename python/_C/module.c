/*
 * dtorch._C: module state, multi-phase initialisation, the status-to-exception
 * mapping, dtype tables, call-site recording and the shared parsers of
 * placements, meshes, shapes and scalars. The factory functions are in
 * factories.c.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

#include <string.h>

/* ---------------------------------------------------------------- state */

dtpy_state *dtpy_state_of_type(PyTypeObject *tp) {
    dtpy_state *st = dtpy_find_state(tp);
    if (st == NULL)
        PyErr_Format(PyExc_TypeError, "'%s' is not a dtorch._C type", tp->tp_name);
    return st;
}

/* ---------------------------------------------------------------- errors */

PyObject *dtpy_raise(dtpy_state *st, dt_status status) {
    PyObject *exc;
    switch (status) {
    case DT_EINVAL:
        exc = PyExc_ValueError;
        break;
    case DT_ETYPE:
        exc = PyExc_TypeError;
        break;
    case DT_EINDEX:
        exc = PyExc_IndexError;
        break;
    case DT_EPLACEMENT:
        exc = st->placement_error;
        break;
    case DT_EKERNEL:
        exc = st->kernel_error;
        break;
    case DT_EUNSUPPORTED:
        exc = PyExc_NotImplementedError;
        break;
    case DT_ENOMEM:
        exc = PyExc_MemoryError;
        break;
    default:
        exc = PyExc_RuntimeError;
        break;
    }
    const char *msg = dt_last_error();
    if (msg == NULL || msg[0] == '\0')
        msg = dt_status_str(status);
    PyErr_SetString(exc, msg);
    return NULL;
}

PyObject *dtpy_raise_last(dtpy_state *st) {
    dt_status s = dt_last_status();
    if (s == DT_OK) {
        PyErr_SetString(PyExc_RuntimeError, "dtorch: a call failed without reporting why");
        return NULL;
    }
    return dtpy_raise(st, s);
}

/* ---------------------------------------------------------------- dtypes */

static const char *const torch_dtype_names[DT_DTYPE_COUNT] = {
    [DT_BOOL] = "bool",       [DT_UINT8] = "uint8",     [DT_INT8] = "int8",       [DT_INT16] = "int16",
    [DT_INT32] = "int32",     [DT_INT64] = "int64",     [DT_FLOAT16] = "float16", [DT_BFLOAT16] = "bfloat16",
    [DT_FLOAT32] = "float32", [DT_FLOAT64] = "float64",
};

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

/* ------------------------------------------------------------- call sites */

/* PyFrame_GetLineNumber walks the code's line table on every call; a small
 * direct-mapped cache keyed by (code object, instruction offset) makes the
 * per-op call-site record cheap in loops. Code objects are compared by
 * address and kept alive by the frame while we look; a stale entry for a
 * freed-and-reused address can only give a wrong line, never a crash, and
 * only for a different code object at the same address and offset. GIL held. */
#define LINE_CACHE 256
static struct {
    const void *code;
    int lasti;
    int line;
} line_cache[LINE_CACHE];

static int cached_line(PyFrameObject *frame) {
    PyCodeObject *code = PyFrame_GetCode(frame); /* new reference */
    int lasti = PyFrame_GetLasti(frame);
    size_t h = (((uintptr_t)code >> 4) ^ (uintptr_t)lasti * 2654435761u) & (LINE_CACHE - 1);
    int line;
    if (line_cache[h].code == code && line_cache[h].lasti == lasti) {
        line = line_cache[h].line;
    } else {
        line = PyFrame_GetLineNumber(frame);
        line_cache[h].code = code;
        line_cache[h].lasti = lasti;
        line_cache[h].line = line;
    }
    Py_DECREF(code);
    return line;
}

void dtpy_record_call_site(dtpy_state *st) {
    PyFrameObject *frame = PyEval_GetFrame(); /* borrowed */
    PyThreadState *tstate = PyThreadState_Get();
    if (frame != NULL && tstate == st->site_tstate && st->site_code != NULL) {
        PyCodeObject *code = PyFrame_GetCode(frame); /* new reference */
        int same = (PyObject *)code == st->site_code && PyFrame_GetLasti(frame) == st->site_lasti;
        Py_DECREF(code);
        if (same)
            return;
    }
    const char *file = NULL;
    int line = 0;
    PyFrameObject *innermost = frame;
    Py_XINCREF(frame);
    while (frame != NULL) {
        PyCodeObject *code = PyFrame_GetCode(frame); /* new reference */
        PyObject *fn = code->co_filename;
        int in_package;
        if (fn == st->last_user_file) {
            in_package = 0;
        } else if (fn == st->last_pkg_file) {
            in_package = 1;
        } else {
            in_package = 0;
            if (st->package_dir != NULL && PyUnicode_Check(fn)) {
                Py_ssize_t r = PyUnicode_Tailmatch(fn, st->package_dir, 0, PY_SSIZE_T_MAX, -1);
                if (r < 0)
                    PyErr_Clear();
                in_package = r == 1;
            }
            if (in_package) {
                Py_INCREF(fn);
                Py_XSETREF(st->last_pkg_file, fn);
            } else {
                const char *utf8 = PyUnicode_Check(fn) ? PyUnicode_AsUTF8(fn) : NULL;
                if (utf8 == NULL) {
                    PyErr_Clear();
                } else {
                    Py_INCREF(fn);
                    Py_XSETREF(st->last_user_file, fn);
                    st->last_user_utf8 = utf8;
                }
            }
        }
        Py_DECREF(code);
        if (!in_package && fn == st->last_user_file) {
            file = st->last_user_utf8;
            line = cached_line(frame);
            /* Only a user frame's own (code, instruction) fixes the site; a
             * package frame's callers may differ between calls. */
            if (frame == innermost) {
                Py_XSETREF(st->site_code, (PyObject *)PyFrame_GetCode(frame));
                st->site_lasti = PyFrame_GetLasti(frame);
                st->site_tstate = tstate;
            } else {
                Py_CLEAR(st->site_code);
            }
            Py_DECREF(frame);
            break;
        }
        if (frame == innermost)
            Py_CLEAR(st->site_code);
        PyFrameObject *back = PyFrame_GetBack(frame); /* new reference */
        Py_DECREF(frame);
        frame = back;
    }
    dt_set_call_site(file, line);
}

/* ---------------------------------------------------------------- helpers */

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

PyTypeObject *dtpy_fast_tensor_cls;
dtpy_state *dtpy_fast_state;

/* Frees the tensor objects kept for reuse (tensor.c). */
static void free_kept_tensors(dtpy_state *st) {
    while (st->n_free_tensors > 0)
        PyObject_GC_Del(st->free_tensors[--st->n_free_tensors]);
}

/* _register(tensor_cls, tensor_future_cls, sync_future_cls, mesh_from_handle,
 *           shard_cls, replicate, partial, package_dir) */
static PyObject *mod_register(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    if (nargs != 8)
        return PyErr_Format(PyExc_TypeError, "_C._register takes 8 arguments (%zd given)", nargs);
    if (!PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], st->tensor_base_type))
        return PyErr_Format(PyExc_TypeError, "the tensor class must subclass _C.TensorBase");
    for (int i = 1; i <= 2; i++)
        if (!PyType_Check(args[i]) || !PyType_IsSubtype((PyTypeObject *)args[i], st->future_base_type))
            return PyErr_Format(PyExc_TypeError, "future classes must subclass _C.FutureBase");
    if (!PyUnicode_Check(args[7]))
        return PyErr_Format(PyExc_TypeError, "package_dir must be a str");
    Py_XSETREF(st->tensor_cls, (PyTypeObject *)Py_NewRef(args[0]));
    dtpy_fast_tensor_cls = st->tensor_cls;
    dtpy_fast_state = st;
    free_kept_tensors(st);
    /* Objects are reused only when the registered class adds no instance
     * fields (no __dict__, no slots): then zeroing the base's fields resets
     * an object completely. */
    st->reuse_ok = st->tensor_cls->tp_basicsize == st->tensor_base_type->tp_basicsize &&
                   st->tensor_cls->tp_itemsize == 0 && st->tensor_cls->tp_dictoffset == 0 &&
                   st->tensor_cls->tp_weaklistoffset == st->tensor_base_type->tp_weaklistoffset &&
                   st->tensor_cls->tp_finalize == NULL;
    Py_XSETREF(st->tensor_future_cls, (PyTypeObject *)Py_NewRef(args[1]));
    Py_XSETREF(st->sync_future_cls, (PyTypeObject *)Py_NewRef(args[2]));
    Py_XSETREF(st->mesh_from_handle, Py_NewRef(args[3]));
    Py_XSETREF(st->shard_cls, Py_NewRef(args[4]));
    Py_XSETREF(st->replicate_obj, Py_NewRef(args[5]));
    Py_XSETREF(st->partial_obj, Py_NewRef(args[6]));
    Py_XSETREF(st->package_dir, Py_NewRef(args[7]));
    Py_CLEAR(st->last_pkg_file);
    Py_CLEAR(st->last_user_file);
    st->last_user_utf8 = NULL;
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

static PyMethodDef module_methods[] = {
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
    {"_register", (PyCFunction)(void (*)(void))mod_register, METH_FASTCALL,
     "Registers the Python classes of the dtorch package."},
    {"status_str", mod_status_str, METH_O, "status_str(status) -> str"},
    {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------- init */

static int add_type(PyObject *module, PyType_Spec *spec, PyTypeObject **out) {
    PyObject *tp = PyType_FromModuleAndSpec(module, spec, NULL);
    if (tp == NULL)
        return -1;
    *out = (PyTypeObject *)tp;
    return PyModule_AddType(module, (PyTypeObject *)tp);
}

static int import_torch(dtpy_state *st) {
    PyObject *torch = PyImport_ImportModule("torch");
    if (torch == NULL)
        return -1;
    int rc = -1;
    PyObject *dlpack = NULL;
    for (int i = 0; i < DT_DTYPE_COUNT; i++) {
        st->torch_dtypes[i] = PyObject_GetAttrString(torch, torch_dtype_names[i]);
        if (st->torch_dtypes[i] == NULL)
            goto done;
    }
    if (!(st->torch_size_type = PyObject_GetAttrString(torch, "Size")) ||
        !(st->torch_tensor_type = PyObject_GetAttrString(torch, "Tensor")) ||
        !(st->torch_device_type = PyObject_GetAttrString(torch, "device")) ||
        !(st->torch_empty = PyObject_GetAttrString(torch, "empty")) ||
        !(st->torch_get_default_dtype = PyObject_GetAttrString(torch, "get_default_dtype")))
        goto done;
    st->torch_device_cpu = PyObject_CallFunction(st->torch_device_type, "s", "cpu");
    if (st->torch_device_cpu == NULL)
        goto done;
    dlpack = PyImport_ImportModule("torch.utils.dlpack");
    if (dlpack == NULL)
        goto done;
    if (!(st->from_dlpack = PyObject_GetAttrString(dlpack, "from_dlpack")) ||
        !(st->to_dlpack = PyObject_GetAttrString(dlpack, "to_dlpack")))
        goto done;
    rc = 0;
done:
    Py_XDECREF(dlpack);
    Py_DECREF(torch);
    return rc;
}

static int module_exec(PyObject *module) {
    dtpy_state *st = dtpy_state_of(module);
    if (dtpy_tensor_methods_init() < 0 || add_type(module, &dtpy_tensor_spec, &st->tensor_base_type) < 0 ||
        add_type(module, &dtpy_mesh_spec, &st->mesh_type) < 0 ||
        add_type(module, &dtpy_graph_spec, &st->graph_base_type) < 0 ||
        add_type(module, &dtpy_future_spec, &st->future_base_type) < 0)
        return -1;
    st->placement_error = PyErr_NewExceptionWithDoc(
        "dtorch.PlacementError",
        "An operator cannot take its inputs' placements; the message names the op, the placements "
        "given, the accepted ones and the redistribute() that fixes it.",
        PyExc_ValueError, NULL);
    if (st->placement_error == NULL ||
        PyModule_AddObjectRef(module, "PlacementError", st->placement_error) < 0)
        return -1;
    st->kernel_error = PyErr_NewExceptionWithDoc(
        "dtorch.KernelError",
        "A kernel failed on a device; raised at the next value read of an affected tensor.",
        PyExc_RuntimeError, NULL);
    if (st->kernel_error == NULL || PyModule_AddObjectRef(module, "KernelError", st->kernel_error) < 0)
        return -1;
    st->tensor_cls = (PyTypeObject *)Py_NewRef(st->tensor_base_type);
    st->tensor_future_cls = (PyTypeObject *)Py_NewRef(st->future_base_type);
    st->sync_future_cls = (PyTypeObject *)Py_NewRef(st->future_base_type);
    if (!(st->str_handle = PyUnicode_InternFromString("_handle")) ||
        !(st->str_dtype = PyUnicode_InternFromString("dtype")) ||
        !(st->str_data_ptr = PyUnicode_InternFromString("data_ptr")))
        return -1;
    if (import_torch(st) < 0)
        return -1;
    if (dtpy_add_reduce_methods(module) < 0 || dtpy_add_linalg_methods(module) < 0 ||
        dtpy_add_views_methods(module) < 0 || dtpy_add_elementwise_methods(module) < 0 ||
        dtpy_add_nn_methods(module) < 0)
        return -1;
    if (dtpy_add_creation_methods(module) < 0 || dtpy_add_testing_methods(module) < 0 ||
        dtpy_add_record_methods(module) < 0 || dtpy_add_factory_methods(module) < 0 ||
        dtpy_add_cluster_methods(module) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "MAX_NDIM", DT_MAX_NDIM) < 0 ||
        PyModule_AddIntConstant(module, "MAX_MESH_NDIM", DT_MAX_MESH_NDIM) < 0 ||
        PyModule_AddIntConstant(module, "PLACEMENT_REPLICATE", DT_PLACEMENT_REPLICATE) < 0 ||
        PyModule_AddIntConstant(module, "PLACEMENT_SHARD", DT_PLACEMENT_SHARD) < 0 ||
        PyModule_AddIntConstant(module, "PLACEMENT_PARTIAL", DT_PLACEMENT_PARTIAL) < 0 ||
        PyModule_AddIntConstant(module, "DEVICE_CPU", DT_DEVICE_CPU) < 0 ||
        PyModule_AddIntConstant(module, "DEVICE_CUDA", DT_DEVICE_CUDA) < 0 ||
        PyModule_AddStringConstant(module, "__version__", dt_version()) < 0 ||
        PyModule_AddStringConstant(module, "TORCH_BUILD_VERSION", DT_TORCH_BUILD_VERSION) < 0)
        return -1;
    return 0;
}

// clang-format off
#define STATE_OBJECTS(X)                                                                                   \
    X(tensor_base_type) X(mesh_type) X(graph_base_type) X(future_base_type) X(placement_error)             \
    X(kernel_error) X(tensor_cls) X(tensor_future_cls) X(sync_future_cls) X(mesh_from_handle) X(shard_cls) \
    X(replicate_obj) X(partial_obj) X(package_dir) X(torch_size_type) X(torch_tensor_type)                 \
    X(torch_device_type) X(torch_device_cpu) X(torch_empty) X(torch_get_default_dtype) X(from_dlpack)      \
    X(to_dlpack) X(last_default_dtype) X(last_user_file) X(last_pkg_file) X(site_code) X(str_handle)       \
    X(str_dtype) X(str_data_ptr)
// clang-format on

static int module_traverse(PyObject *module, visitproc visit, void *arg) {
    dtpy_state *st = dtpy_state_of(module);
#define VISIT(f) Py_VISIT(st->f);
    STATE_OBJECTS(VISIT)
#undef VISIT
    for (int i = 0; i < DT_DTYPE_COUNT; i++)
        Py_VISIT(st->torch_dtypes[i]);
    return 0;
}

static int module_clear(PyObject *module) {
    dtpy_state *st = dtpy_state_of(module);
    if (dtpy_fast_state == st) {
        dtpy_fast_tensor_cls = NULL;
        dtpy_fast_state = NULL;
    }
    free_kept_tensors(st);
    st->reuse_ok = 0;
#define CLEAR(f) Py_CLEAR(st->f);
    STATE_OBJECTS(CLEAR)
#undef CLEAR
    for (int i = 0; i < DT_DTYPE_COUNT; i++)
        Py_CLEAR(st->torch_dtypes[i]);
    st->last_user_utf8 = NULL;
    return 0;
}

static void module_free(void *module) { module_clear((PyObject *)module); }

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

PyModuleDef dtpy_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "dtorch._C",
    .m_doc = "The C layer of dtorch: tensors, meshes, graphs and futures over libdtorch.",
    .m_size = sizeof(dtpy_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__C(void) { return PyModuleDef_Init(&dtpy_module_def); }
