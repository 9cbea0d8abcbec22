/*
 * _C.TensorBase: the Python face of a dt_tensor symbol.
 *
 * Metadata getters never wait; ops validate, record the caller's file:line,
 * call the C API (which enqueues one record and returns at once) and wrap the
 * result. Only to_torch() waits, with the GIL released.
 *
 * A TensorBase holds its dt_tensor reference, the Python graph object it
 * belongs to (so `tensor.graph` is the very Graph the user created) and a
 * cached DeviceMesh (so `tensor.device_mesh` is the mesh the user passed, with
 * the names they gave). Op results inherit both from their inputs.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

#include <string.h>
#include <structmember.h>

static dtpy_state *tensor_state(PyObject *self) { return dtpy_find_state(Py_TYPE(self)); }

/* --------------------------------------------------------------- wrapping */

void dtpy_tensor_rebind(dtpy_tensor *self, dt_tensor *t) {
    dt_tensor *old = self->t;
    self->t = t;
    if (!dt_mesh_equal(dt_tensor_mesh(old), dt_tensor_mesh(t)))
        Py_CLEAR(self->mesh); /* the cached DeviceMesh is rebuilt on demand */
    dt_tensor_release(old);
}

PyObject *dtpy_tensor_wrap(dtpy_state *st, dt_tensor *t, PyObject *graph, PyObject *mesh_hint,
                           dt_mesh *hint_ptr) {
    if (t == NULL)
        return dtpy_raise_last(st);
    PyTypeObject *cls = st->tensor_cls;
    dtpy_tensor *o;
    if (st->n_free_tensors > 0) {
        /* A kept object: it is all zero past its header, untracked, and holds
         * no reference, its type's included. */
        o = (dtpy_tensor *)st->free_tensors[--st->n_free_tensors];
        PyObject_Init((PyObject *)o, cls); /* type (a new reference) and refcount */
        PyObject_GC_Track(o);
    } else {
        o = (dtpy_tensor *)cls->tp_alloc(cls, 0);
    }
    if (o == NULL) {
        dt_tensor_release(t);
        return NULL;
    }
    o->t = t;
    o->graph = Py_NewRef(graph);
    if (mesh_hint != NULL && mesh_hint != Py_None && hint_ptr != NULL) {
        dt_mesh *m = dt_tensor_mesh(t);
        if (m == hint_ptr || dt_mesh_equal(m, hint_ptr))
            o->mesh = Py_NewRef(mesh_hint);
    }
    /* Every op's result passes here: the place to wait for capacity. */
    if (dtpy_wait_capacity_slow() < 0) {
        Py_DECREF(o);
        return NULL;
    }
    return (PyObject *)o;
}

/* Wraps an op result that inherits graph and mesh from input `a`. */
PyObject *dtpy_tensor_wrap_like(dtpy_state *st, dt_tensor *t, dtpy_tensor *a) {
    return dtpy_tensor_wrap(st, t, a->graph, a->mesh, dt_tensor_mesh(a->t));
}

PyObject *dtpy_tensor_pair(dtpy_state *st, dtpy_tensor *like, dt_tensor *v, dt_tensor *i) {
    PyObject *pv = dtpy_tensor_wrap_like(st, v, like);
    if (pv == NULL) {
        dt_tensor_release(i);
        return NULL;
    }
    PyObject *pi = dtpy_tensor_wrap_like(st, i, like);
    if (pi == NULL) {
        Py_DECREF(pv);
        return NULL;
    }
    PyObject *r = PyTuple_Pack(2, pv, pi);
    Py_DECREF(pv);
    Py_DECREF(pi);
    return r;
}

/* ------------------------------------------------------------ lifecycle */

static int tensor_traverse(PyObject *self, visitproc visit, void *arg) {
    dtpy_tensor *o = (dtpy_tensor *)self;
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(o->graph);
    Py_VISIT(o->mesh);
    return 0;
}

static int tensor_clear(PyObject *self) {
    dtpy_tensor *o = (dtpy_tensor *)self;
    Py_CLEAR(o->mesh);
    Py_CLEAR(o->graph);
    return 0;
}

static void tensor_dealloc(PyObject *self) {
    dtpy_tensor *o = (dtpy_tensor *)self;
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (o->weakreflist != NULL)
        PyObject_ClearWeakRefs(self);
    /* Release the symbol before the graph object: the graph's last reference
     * may shut it down. Releasing after a shutdown is harmless. */
    dt_tensor *t = o->t;
    o->t = NULL;
    dt_tensor_release(t);
    tensor_clear(self);
    dtpy_state *st = dtpy_fast_state;
    if (st != NULL && tp == st->tensor_cls && st->reuse_ok && st->n_free_tensors < DTPY_FREE_TENSORS &&
        o->weakreflist == NULL && !PyObject_GC_IsFinalized(self)) {
        st->free_tensors[st->n_free_tensors++] = self; /* every field is NULL again */
    } else {
        tp->tp_free(self);
    }
    Py_DECREF(tp);
}

/* ------------------------------------------------------------ metadata */

static PyObject *tensor_get_shape(PyObject *self, void *c) {
    (void)c;
    dtpy_state *st = tensor_state(self);
    dt_tensor *t = ((dtpy_tensor *)self)->t;
    PyObject *tup = dtpy_shape_tuple(dt_tensor_ndim(t), dt_tensor_shape(t));
    if (tup == NULL)
        return NULL;
    PyObject *size = PyObject_CallOneArg(st->torch_size_type, tup);
    Py_DECREF(tup);
    return size;
}

static PyObject *tensor_get_ndim(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromLong(dt_tensor_ndim(((dtpy_tensor *)self)->t));
}

static PyObject *tensor_get_dtype(PyObject *self, void *c) {
    (void)c;
    dtpy_state *st = tensor_state(self);
    return Py_NewRef(dtpy_dtype_to_torch(st, dt_tensor_dtype(((dtpy_tensor *)self)->t)));
}

static PyObject *tensor_get_graph(PyObject *self, void *c) {
    (void)c;
    return Py_NewRef(((dtpy_tensor *)self)->graph);
}

static PyObject *tensor_get_id(PyObject *self, void *c) {
    (void)c;
    return PyLong_FromUnsignedLongLong(dt_tensor_id(((dtpy_tensor *)self)->t));
}

static PyObject *tensor_get_is_dtensor(PyObject *self, void *c) {
    (void)c;
    return PyBool_FromLong(dt_mesh_size(dt_tensor_mesh(((dtpy_tensor *)self)->t), -1) > 1);
}

static PyObject *tensor_get_device(PyObject *self, void *c) {
    (void)c;
    dtpy_state *st = tensor_state(self);
    dt_mesh *m = dt_tensor_mesh(((dtpy_tensor *)self)->t);
    if (dt_mesh_device_type(m) == DT_DEVICE_CPU)
        return Py_NewRef(st->torch_device_cpu);
    return PyObject_CallFunction(st->torch_device_type, "sL", "cuda", (long long)dt_mesh_ids(m)[0]);
}

static PyObject *tensor_get_device_mesh(PyObject *self, void *c) {
    (void)c;
    dtpy_tensor *o = (dtpy_tensor *)self;
    if (o->mesh == NULL) {
        dtpy_state *st = tensor_state(self);
        if (st->mesh_from_handle == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "the dtorch package did not register its classes");
            return NULL;
        }
        PyObject *h = dtpy_mesh_handle_new(st, dt_tensor_mesh(o->t));
        if (h == NULL)
            return NULL;
        o->mesh = PyObject_CallOneArg(st->mesh_from_handle, h);
        Py_DECREF(h);
        if (o->mesh == NULL)
            return NULL;
    }
    return Py_NewRef(o->mesh);
}

static PyObject *tensor_get_placements(PyObject *self, void *c) {
    (void)c;
    dtpy_state *st = tensor_state(self);
    dt_tensor *t = ((dtpy_tensor *)self)->t;
    int n = dt_mesh_ndim(dt_tensor_mesh(t));
    const dt_placement *pl = dt_tensor_placements(t);
    if (st->shard_cls == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the dtorch package did not register its classes");
        return NULL;
    }
    PyObject *list = PyList_New(n);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < n; i++) {
        PyObject *p;
        if (pl[i].kind == DT_PLACEMENT_SHARD) {
            PyObject *d = PyLong_FromLong(pl[i].dim);
            p = d ? PyObject_CallOneArg(st->shard_cls, d) : NULL;
            Py_XDECREF(d);
        } else if (pl[i].kind == DT_PLACEMENT_PARTIAL) {
            p = Py_NewRef(st->partial_obj);
        } else {
            p = Py_NewRef(st->replicate_obj);
        }
        if (p == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, p);
    }
    return list;
}

/* Normalises a possibly negative dim against `ndim` (torch's rules: a 0-d
 * tensor accepts -1 and 0). Returns -1 with IndexError. */
static int wrap_dim(long dim, int ndim, int *out) {
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n) {
        PyErr_Format(PyExc_IndexError,
                     "Dimension out of range (expected to be in range of [%d, %d], but got %ld)", -n, n - 1,
                     dim);
        return -1;
    }
    *out = (int)(dim < 0 ? dim + n : dim);
    return 0;
}

static PyObject *tensor_size(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"dim", NULL};
    PyObject *dim_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:size", kwlist, &dim_obj))
        return NULL;
    if (dim_obj == Py_None)
        return tensor_get_shape(self, NULL);
    dt_tensor *t = ((dtpy_tensor *)self)->t;
    long dim = PyLong_AsLong(dim_obj);
    if (dim == -1 && PyErr_Occurred())
        return NULL;
    int ndim = dt_tensor_ndim(t), d;
    if (ndim == 0) {
        PyErr_Format(PyExc_IndexError, "dimension specified as %ld but tensor has no dimensions", dim);
        return NULL;
    }
    if (wrap_dim(dim, ndim, &d) < 0)
        return NULL;
    return PyLong_FromLongLong(dt_tensor_shape(t)[d]);
}

static PyObject *tensor_dim(PyObject *self, PyObject *unused) {
    (void)unused;
    return tensor_get_ndim(self, NULL);
}

static PyObject *tensor_numel(PyObject *self, PyObject *unused) {
    (void)unused;
    return PyLong_FromLongLong(dt_tensor_numel(((dtpy_tensor *)self)->t));
}

static PyObject *tensor_is_floating_point(PyObject *self, PyObject *unused) {
    (void)unused;
    return PyBool_FromLong(dt_dtype_is_floating(dt_tensor_dtype(((dtpy_tensor *)self)->t)));
}

static Py_ssize_t tensor_length(PyObject *self) {
    dt_tensor *t = ((dtpy_tensor *)self)->t;
    if (dt_tensor_ndim(t) == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return (Py_ssize_t)dt_tensor_shape(t)[0];
}

/* ---------------------------------------------------------------- values */

static PyObject *tensor_to_torch(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = tensor_state(self);
    dt_tensor *t = ((dtpy_tensor *)self)->t;
    dt_future *f = dt_tensor_fetch(t);
    if (f == NULL)
        return dtpy_raise_last(st);
    PyObject *r = dtpy_read_value(st, f, dt_tensor_dtype(t), dt_tensor_ndim(t), dt_tensor_shape(t));
    dt_future_release(f);
    return r;
}

/* _local_value(mesh_index): what one device holds, as stored (tests). */
static PyObject *tensor_local_value(PyObject *self, PyObject *arg) {
    dtpy_state *st = tensor_state(self);
    dt_tensor *t = ((dtpy_tensor *)self)->t;
    long long i = PyLong_AsLongLong(arg);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    dt_future *f = dt_tensor_fetch_local(t, (int64_t)i);
    if (f == NULL)
        return dtpy_raise_last(st);
    int64_t shape[DT_MAX_NDIM];
    int ndim = dt_future_shape(f, shape);
    PyObject *r = dtpy_read_value(st, f, dt_tensor_dtype(t), ndim, shape);
    dt_future_release(f);
    return r;
}

/* _local_values(): every device's block, in flat mesh order (tests). All the
 * reads are started before the first is waited for, so they overlap. */
static PyObject *tensor_local_values(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = tensor_state(self);
    dt_tensor *t = ((dtpy_tensor *)self)->t;
    int64_t n = dt_mesh_size(dt_tensor_mesh(t), -1);
    dt_future **fs = PyMem_Calloc((size_t)n, sizeof *fs);
    if (fs == NULL)
        return PyErr_NoMemory();
    PyObject *out = PyList_New((Py_ssize_t)n);
    for (int64_t i = 0; out != NULL && i < n; i++) {
        if ((fs[i] = dt_tensor_fetch_local(t, i)) == NULL) {
            Py_CLEAR(out);
            dtpy_raise_last(st);
        }
    }
    for (int64_t i = 0; out != NULL && i < n; i++) {
        int64_t shape[DT_MAX_NDIM];
        int ndim = dt_future_shape(fs[i], shape);
        PyObject *r = dtpy_read_value(st, fs[i], dt_tensor_dtype(t), ndim, shape);
        if (r == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, (Py_ssize_t)i, r);
    }
    for (int64_t i = 0; i < n; i++)
        dt_future_release(fs[i]);
    PyMem_Free(fs);
    return out;
}

static PyObject *tensor_to_torch_async(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = tensor_state(self);
    dtpy_tensor *o = (dtpy_tensor *)self;
    dt_future *f = dt_tensor_fetch(o->t);
    if (f == NULL)
        return dtpy_raise_last(st);
    dtpy_future *fu =
        (dtpy_future *)dtpy_future_new(st, st->tensor_future_cls, f, DTPY_FUTURE_FETCH, o->graph);
    if (fu == NULL)
        return NULL;
    fu->dtype = dt_tensor_dtype(o->t);
    fu->ndim = dt_tensor_ndim(o->t);
    for (int i = 0; i < fu->ndim; i++)
        fu->shape[i] = dt_tensor_shape(o->t)[i];
    return (PyObject *)fu;
}

/* ------------------------------------------------------------------- ops */

static PyObject *torch_operand_error(const char *op, int tensor_first) {
    PyErr_Format(PyExc_TypeError,
                 "%s: cannot mix a dtorch.Tensor with a torch.Tensor %s; convert the torch tensor with "
                 "dtorch.from_torch(t, device_mesh=..., placements=...) or read the dtorch tensor with "
                 ".to_torch()",
                 op, tensor_first ? "(right operand)" : "(left operand)");
    return NULL;
}

/* The operators + - * / and unary - are the elementwise family's slots
 * (ops_elementwise.c), as are their method forms; one implementation each. */

static PyObject *matmul(dtpy_state *st, dtpy_tensor *a, dtpy_tensor *b) {
    if (dtpy_same_graph(a->t, b->t, "matmul") < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_matmul(a->t, b->t), a);
}

static PyObject *nb_matmul(PyObject *a, PyObject *b) {
    dtpy_state *st = dtpy_find_state(Py_TYPE(a));
    if (st == NULL || !DTPY_IS_TENSOR(st, a)) {
        st = dtpy_find_state(Py_TYPE(b));
        if (st == NULL)
            Py_RETURN_NOTIMPLEMENTED;
    }
    int at = DTPY_IS_TENSOR(st, a), bt = DTPY_IS_TENSOR(st, b);
    if (at && bt)
        return matmul(st, (dtpy_tensor *)a, (dtpy_tensor *)b);
    PyObject *other = at ? b : a;
    if (PyObject_TypeCheck(other, (PyTypeObject *)st->torch_tensor_type))
        return torch_operand_error("matmul", at);
    Py_RETURN_NOTIMPLEMENTED;
}

static PyObject *tensor_matmul(PyObject *self, PyObject *other) {
    dtpy_state *st = tensor_state(self);
    if (!DTPY_IS_TENSOR(st, other)) {
        if (PyObject_TypeCheck(other, (PyTypeObject *)st->torch_tensor_type))
            return torch_operand_error("matmul", 1);
        return PyErr_Format(PyExc_TypeError, "matmul(): argument 'other' must be a dtorch.Tensor, not %.100s",
                            Py_TYPE(other)->tp_name);
    }
    return matmul(st, (dtpy_tensor *)self, (dtpy_tensor *)other);
}

/* _redistribute(mesh_or_None, placements_or_None): the Python method
 * `redistribute` validates and converts its arguments first. */
static PyObject *tensor_redistribute(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (dtpy_nargs(nargs, 2, 2, "TensorBase._redistribute") < 0)
        return NULL;
    dtpy_state *st = tensor_state(self);
    dtpy_tensor *a = (dtpy_tensor *)self;
    PyObject *mesh_obj = args[0];
    dt_mesh *mesh = NULL;
    if (mesh_obj != Py_None) {
        mesh = dtpy_mesh_of(st, mesh_obj);
        if (mesh == NULL)
            return NULL;
    }
    dt_mesh *target = mesh ? mesh : dt_tensor_mesh(a->t);
    dt_placement pl[DT_MAX_MESH_NDIM];
    int pl_null;
    if (dtpy_parse_placements(args[1], dt_mesh_ndim(target), pl, &pl_null) < 0)
        return NULL;
    if (pl_null) {
        for (int i = 0; i < dt_mesh_ndim(target); i++) {
            pl[i].kind = DT_PLACEMENT_REPLICATE;
            pl[i].dim = 0;
        }
    }
    dtpy_record_call_site(st);
    dt_tensor *t = dt_redistribute(a->t, mesh, pl);
    if (mesh_obj != Py_None)
        return dtpy_tensor_wrap(st, t, a->graph, mesh_obj, mesh);
    return dtpy_tensor_wrap_like(st, t, a);
}

/* ---------------------------------------------------------------- type */

/* This file's rows of the type's method table; dtpy_tensor_methods_init joins
 * them with the elementwise family's (ops_elementwise.c) into the one table the
 * type is created with. python/dtorch/_methods.py lists every name. */
static PyMethodDef core_methods[] = {
    {"size", (PyCFunction)(void (*)(void))tensor_size, METH_VARARGS | METH_KEYWORDS,
     "size(dim=None) -> torch.Size or int. Never waits."},
    {"dim", tensor_dim, METH_NOARGS, "dim() -> int: the number of dimensions."},
    {"numel", tensor_numel, METH_NOARGS, "numel() -> int: the number of elements."},
    {"nelement", tensor_numel, METH_NOARGS, "nelement() -> int: alias of numel()."},
    {"is_floating_point", tensor_is_floating_point, METH_NOARGS, "is_floating_point() -> bool"},
    {"to_torch", tensor_to_torch, METH_NOARGS,
     "to_torch() -> torch.Tensor: waits for the value and returns the full tensor."},
    {"_local_values", tensor_local_values, METH_NOARGS,
     "_local_values() -> list of torch.Tensor: what every device holds, as stored, in flat mesh order "
     "(tests)"},
    {"_local_value", tensor_local_value, METH_O,
     "_local_value(mesh_index) -> torch.Tensor: what the device at flat mesh index `mesh_index` holds, as "
     "stored (its shard, its own replica, or its Partial addend). Waits. For tests."},
    {"to_torch_async", tensor_to_torch_async, METH_NOARGS,
     "to_torch_async() -> TensorFuture: starts reading the value without waiting."},
    {"matmul", tensor_matmul, METH_O, "matmul(other) -> Tensor: self @ other (torch.matmul, every rank)."},
    {"_redistribute", (PyCFunction)(void (*)(void))tensor_redistribute, METH_FASTCALL,
     "_redistribute(mesh, placements): see Tensor.redistribute."},
    {NULL, NULL, 0, NULL},
};

/* core_methods, then dtpy_ew_methods, then the sentinel: filled once by
 * dtpy_tensor_methods_init before the type is created, read-only after. */
static PyMethodDef tensor_methods[256];

int dtpy_tensor_methods_init(void) {
    static int done;
    if (done)
        return 0;
    const PyMethodDef *parts[] = {core_methods, dtpy_ew_methods};
    size_t n = 0;
    for (size_t p = 0; p < sizeof parts / sizeof *parts; p++) {
        for (const PyMethodDef *d = parts[p]; d->ml_name != NULL; d++) {
            for (size_t k = 0; k < n; k++) {
                if (strcmp(tensor_methods[k].ml_name, d->ml_name) == 0) {
                    PyErr_Format(PyExc_SystemError, "TensorBase.%s is defined twice", d->ml_name);
                    return -1;
                }
            }
            if (n + 1 >= sizeof tensor_methods / sizeof *tensor_methods) {
                PyErr_SetString(PyExc_SystemError, "TensorBase's method table is full");
                return -1;
            }
            tensor_methods[n++] = *d;
        }
    }
    tensor_methods[n] = (PyMethodDef){NULL, NULL, 0, NULL};
    done = 1;
    return 0;
}

static PyGetSetDef tensor_getset[] = {
    {"shape", tensor_get_shape, NULL, "The global shape (torch.Size).", NULL},
    {"ndim", tensor_get_ndim, NULL, "The number of dimensions.", NULL},
    {"dtype", tensor_get_dtype, NULL, "The torch dtype.", NULL},
    {"device", tensor_get_device, NULL, "The torch.device of the mesh's first device.", NULL},
    {"device_mesh", tensor_get_device_mesh, NULL, "The DeviceMesh the tensor is placed on.", NULL},
    {"placements", tensor_get_placements, NULL, "One placement per mesh dimension (list).", NULL},
    {"graph", tensor_get_graph, NULL, "The dtorch.Graph the tensor belongs to.", NULL},
    {"is_dtensor", tensor_get_is_dtensor, NULL, "True when the mesh has more than one device.", NULL},
    {"_id", tensor_get_id, NULL, "The process-unique id of the symbol.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static int append_name(PyObject *list, const char *name) {
    PyObject *s = PyUnicode_FromString(name);
    int rc = s ? PyList_Append(list, s) : -1;
    Py_XDECREF(s);
    return rc;
}

/* _C.METHOD_NAMES: the names of TensorBase's methods and properties, in
 * table order (python/dtorch/_methods.py's C_METHODS). */
int dtpy_add_tensor_methods(PyObject *module) {
    if (dtpy_tensor_methods_init() < 0)
        return -1;
    PyObject *names = PyList_New(0);
    int rc = names ? 0 : -1;
    for (const PyMethodDef *d = tensor_methods; rc == 0 && d->ml_name != NULL; d++)
        rc = append_name(names, d->ml_name);
    for (const PyGetSetDef *g = tensor_getset; rc == 0 && g->name != NULL; g++)
        rc = append_name(names, g->name);
    PyObject *tup = rc == 0 ? PyList_AsTuple(names) : NULL;
    Py_XDECREF(names);
    rc = tup ? PyModule_AddObjectRef(module, "METHOD_NAMES", tup) : -1;
    Py_XDECREF(tup);
    return rc;
}

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(dtpy_tensor, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot tensor_slots[] = {
    {Py_tp_doc, "The C base of dtorch.Tensor: a global distributed tensor symbol."},
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_clear, tensor_clear},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {Py_tp_members, tensor_members},
    /* elementwise family (ops_elementwise.c); in-place slots rebind self */
    {Py_nb_add, dtpy_ew_add},
    {Py_nb_subtract, dtpy_ew_sub},
    {Py_nb_multiply, dtpy_ew_mul},
    {Py_nb_true_divide, dtpy_ew_truediv},
    {Py_nb_negative, dtpy_ew_negative},
    {Py_nb_inplace_add, dtpy_ew_iadd},
    {Py_nb_inplace_subtract, dtpy_ew_isub},
    {Py_nb_inplace_multiply, dtpy_ew_imul},
    {Py_nb_inplace_true_divide, dtpy_ew_itruediv},
    {Py_nb_floor_divide, dtpy_ew_floor_divide},
    {Py_nb_inplace_floor_divide, dtpy_ew_ifloordiv},
    {Py_nb_remainder, dtpy_ew_remainder},
    {Py_nb_inplace_remainder, dtpy_ew_iremainder},
    {Py_nb_power, dtpy_ew_power},
    {Py_nb_inplace_power, dtpy_ew_ipower},
    {Py_nb_and, dtpy_ew_and},
    {Py_nb_inplace_and, dtpy_ew_iand},
    {Py_nb_or, dtpy_ew_or},
    {Py_nb_inplace_or, dtpy_ew_ior},
    {Py_nb_xor, dtpy_ew_xor},
    {Py_nb_inplace_xor, dtpy_ew_ixor},
    {Py_nb_invert, dtpy_ew_invert},
    {Py_nb_absolute, dtpy_ew_absolute},
    {Py_nb_positive, dtpy_ew_positive},
    {Py_tp_richcompare, dtpy_ew_richcompare},
    {Py_tp_hash, dtpy_ew_hash},
    {Py_nb_matrix_multiply, nb_matmul},
    {Py_mp_length, tensor_length},
    {0, NULL},
};

/* Immutable: no attribute of the type changes after creation (the method
 * table is complete when it is created). */
PyType_Spec dtpy_tensor_spec = DTPY_TYPE_SPEC(
    "TensorBase", dtpy_tensor,
    Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_IMMUTABLETYPE,
    tensor_slots);
