/*
 * dtorch._C functions of the views and shape family: thin wrappers over the
 * C API (dt_reshape, dt_index, dt_setitem, dt_cat, ...). They take already
 * normalised arguments; torch's argument conventions (varargs sizes, key
 * parsing for __getitem__/__setitem__, chunk/split sizes) live in
 * python/dtorch/_ops_views.py, whose functions python/dtorch/_methods.py
 * makes the Tensor methods.
 *
 * Assignments (__setitem__, copy_) compute a new value and rebind the Python
 * object to it (_rebind): dtorch values are immutable, so every reference
 * to that Python object sees the new value, while tensors made from it
 * earlier (x[0], x.view(...)) keep theirs.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

/* -------------------------------------------------------------- helpers */

/* Parses a sequence of (start, step, len, drop) tuples into `dims`. */
static int parse_spec(PyObject *obj, int ndim, dt_slice *dims) {
    PyObject *seq = PySequence_Fast(obj, "index spec must be a sequence");
    if (seq == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n != ndim) {
        PyErr_Format(PyExc_ValueError, "index spec has %zd entries for a tensor of %d dimensions", n, ndim);
        Py_DECREF(seq);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        long long s, step, len;
        int drop;
        if (!PyTuple_Check(item) || !PyArg_ParseTuple(item, "LLLp", &s, &step, &len, &drop)) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "index spec entries must be (start, step, len, drop)");
            Py_DECREF(seq);
            return -1;
        }
        dims[i] = (dt_slice){s, step, len, drop};
    }
    Py_DECREF(seq);
    return 0;
}

/* ------------------------------------------------------------ shape ops */

static PyObject *v_reshape(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    int64_t shape[DT_MAX_NDIM];
    dtpy_tensor *a;
    int nd;
    if (dtpy_nargs(nargs, 2, 2, "_v_reshape") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "reshape", "input")) ||
        (nd = dtpy_parse_shape(args[1], shape, "shape")) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_reshape(a->t, nd, shape), a);
}

static PyObject *v_squeeze(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    int64_t dims[DT_MAX_NDIM];
    dtpy_tensor *a;
    int nd = -1;
    if (dtpy_nargs(nargs, 2, 2, "_v_squeeze") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "squeeze", "input")))
        return NULL;
    if (args[1] != Py_None && (nd = dtpy_parse_shape(args[1], dims, "dim")) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_squeeze(a->t, nd, dims), a);
}

static PyObject *v_unsqueeze(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a;
    if (dtpy_nargs(nargs, 2, 2, "_v_unsqueeze") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "unsqueeze", "input")))
        return NULL;
    int64_t dim;
    if (dtpy_int_arg(args[1], "unsqueeze", "dim", &dim) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_unsqueeze(a->t, dim), a);
}

static PyObject *v_permute(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    int64_t dims[DT_MAX_NDIM];
    dtpy_tensor *a;
    int nd;
    if (dtpy_nargs(nargs, 2, 2, "_v_permute") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "permute", "input")) ||
        (nd = dtpy_parse_shape(args[1], dims, "dims")) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_permute(a->t, nd, dims), a);
}

static PyObject *v_expand(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    int64_t sizes[DT_MAX_NDIM];
    dtpy_tensor *a;
    int nd;
    if (dtpy_nargs(nargs, 2, 2, "_v_expand") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "expand", "input")) ||
        (nd = dtpy_parse_shape(args[1], sizes, "size")) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_expand(a->t, nd, sizes), a);
}

/* An op of one tensor and nothing else (clone, contiguous). */
static PyObject *v_unary(PyObject *m, PyObject *arg, const char *op, dt_tensor *(*fn)(dt_tensor *)) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, arg, op, "input");
    if (a == NULL)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, fn(a->t), a);
}

static PyObject *v_clone(PyObject *m, PyObject *arg) { return v_unary(m, arg, "clone", dt_clone); }

static PyObject *v_contiguous(PyObject *m, PyObject *arg) {
    return v_unary(m, arg, "contiguous", dt_contiguous);
}

/* ------------------------------------------------------------- indexing */

/* _v_index(x, spec, new_axes_mask) */
static PyObject *v_index(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dt_slice dims[DT_MAX_NDIM];
    dtpy_tensor *a;
    if (dtpy_nargs(nargs, 3, 3, "_v_index") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "getitem", "input")) ||
        parse_spec(args[1], dt_tensor_ndim(a->t), dims) < 0)
        return NULL;
    unsigned long long mask = PyLong_AsUnsignedLongLong(args[2]);
    if (mask == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_index(a->t, dims, (uint64_t)mask), a);
}

/* _v_index_tensor(x, dim, index) */
static PyObject *v_index_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a, *idx;
    if (dtpy_nargs(nargs, 3, 3, "_v_index_tensor") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "getitem", "input")) ||
        !(idx = dtpy_tensor_arg_or_null(st, args[2], "getitem", "index")))
        return NULL;
    int64_t dim;
    if (dtpy_int_arg(args[1], "getitem", "dim", &dim) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_index_tensor(a->t, dim, idx->t), a);
}

/* A Python scalar operand, or a TypeError naming `op`. */
static int scalar_arg(PyObject *o, dt_scalar *s, const char *op) {
    int r = dtpy_parse_scalar(o, s);
    if (r == 0)
        PyErr_Format(PyExc_TypeError, "%s: the value must be a number, not %.100s", op, Py_TYPE(o)->tp_name);
    return r == 1 ? 0 : -1;
}

/* _v_setitem(x, spec, value) -> the new value of x (value: tensor or number) */
static PyObject *v_setitem(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dt_slice dims[DT_MAX_NDIM];
    dtpy_tensor *a;
    if (dtpy_nargs(nargs, 3, 3, "_v_setitem") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "setitem", "input")) ||
        parse_spec(args[1], dt_tensor_ndim(a->t), dims) < 0)
        return NULL;
    dt_scalar s = dt_scalar_int(0);
    dt_tensor *value = NULL;
    if (DTPY_IS_TENSOR(st, args[2]))
        value = ((dtpy_tensor *)args[2])->t;
    else if (scalar_arg(args[2], &s, "setitem") < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_setitem(a->t, dims, value, s), a);
}

/* _v_setitem_mask(x, dim, mask, scalar) / _v_setitem_index(x, dim, index, scalar) */
static PyObject *setitem_tensor(PyObject *m, PyObject *const *args, Py_ssize_t nargs, int mask) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a, *t;
    dt_scalar s;
    if (dtpy_nargs(nargs, 4, 4, mask ? "_v_setitem_mask" : "_v_setitem_index") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "setitem", "input")) ||
        !(t = dtpy_tensor_arg_or_null(st, args[2], "setitem", "index")) ||
        scalar_arg(args[3], &s, "setitem") < 0)
        return NULL;
    int64_t dim;
    if (dtpy_int_arg(args[1], "setitem", "dim", &dim) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(
        st, mask ? dt_setitem_mask(a->t, dim, t->t, s) : dt_setitem_index(a->t, dim, t->t, s), a);
}
static PyObject *v_setitem_mask(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    return setitem_tensor(m, args, nargs, 1);
}
static PyObject *v_setitem_index(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    return setitem_tensor(m, args, nargs, 0);
}

/* _v_copy(dst, src) -> the new value of dst */
static PyObject *v_copy(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a, *b;
    if (dtpy_nargs(nargs, 2, 2, "_v_copy") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "copy_", "self")) ||
        !(b = dtpy_tensor_arg_or_null(st, args[1], "copy_", "src")))
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_copy(a->t, b->t), a);
}

/* ------------------------------------------------------ cat and friends */

/* _v_cat(tensors, dim, stack) */
static PyObject *v_cat(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    if (dtpy_nargs(nargs, 3, 3, "_v_cat") < 0)
        return NULL;
    int stack = PyObject_IsTrue(args[2]);
    const char *op = stack ? "stack" : "cat";
    int64_t dim;
    if (stack < 0 || dtpy_int_arg(args[1], op, "dim", &dim) < 0)
        return NULL;
    PyObject *seq = PySequence_Fast(args[0], "tensors must be a sequence of dtorch tensors");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    dt_tensor **ts = PyMem_Malloc(sizeof *ts * (size_t)(n ? n : 1));
    if (ts == NULL) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    dtpy_tensor *first = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        if (!DTPY_IS_TENSOR(st, o)) {
            PyErr_Format(PyExc_TypeError,
                         "%s(): expected a sequence of dtorch tensors, but element %zd is %.100s", op, i,
                         Py_TYPE(o)->tp_name);
            PyMem_Free(ts);
            Py_DECREF(seq);
            return NULL;
        }
        ts[i] = ((dtpy_tensor *)o)->t;
        if (!first)
            first = (dtpy_tensor *)o;
    }
    if (n > INT32_MAX) {
        PyMem_Free(ts);
        Py_DECREF(seq);
        return PyErr_Format(PyExc_ValueError, "%s(): too many tensors", op);
    }
    dtpy_record_call_site(st);
    dt_tensor *t = stack ? dt_stack((int)n, ts, dim) : dt_cat((int)n, ts, dim);
    PyObject *r = first ? dtpy_tensor_wrap_like(st, t, first) : dtpy_raise_last(st);
    PyMem_Free(ts);
    Py_DECREF(seq);
    return r;
}

/* _v_tril(x, diagonal, upper) */
static PyObject *v_tril(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a;
    if (dtpy_nargs(nargs, 3, 3, "_v_tril") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "tril", "input")))
        return NULL;
    int64_t diag;
    if (dtpy_int_arg(args[1], "tril", "diagonal", &diag) < 0)
        return NULL;
    int upper = PyObject_IsTrue(args[2]);
    if (upper < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_tril(a->t, diag, upper), a);
}

/* _v_flip(x, dims) */
static PyObject *v_flip(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    int64_t dims[DT_MAX_NDIM];
    dtpy_tensor *a;
    int nd;
    if (dtpy_nargs(nargs, 2, 2, "_v_flip") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "flip", "input")) ||
        (nd = dtpy_parse_shape(args[1], dims, "dims")) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_flip(a->t, nd, dims), a);
}

/* _v_roll(x, shifts, dims_or_None) */
static PyObject *v_roll(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    int64_t shifts[DT_MAX_NDIM], dims[DT_MAX_NDIM];
    dtpy_tensor *a;
    int ns, nd = 0;
    if (dtpy_nargs(nargs, 3, 3, "_v_roll") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "roll", "input")) ||
        (ns = dtpy_parse_shape(args[1], shifts, "shifts")) < 0)
        return NULL;
    if (args[2] != Py_None && (nd = dtpy_parse_shape(args[2], dims, "dims")) < 0)
        return NULL;
    if (args[2] != Py_None && nd != ns)
        return PyErr_Format(PyExc_RuntimeError, "roll: shifts and dimensions must align. shifts: %d, dims:%d",
                            ns, nd);
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_roll(a->t, ns, shifts, args[2] == Py_None ? NULL : dims), a);
}

/* _v_repeat(x, repeats) */
static PyObject *v_repeat(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    int64_t reps[DT_MAX_NDIM];
    dtpy_tensor *a;
    int nd;
    if (dtpy_nargs(nargs, 2, 2, "_v_repeat") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "repeat", "input")) ||
        (nd = dtpy_parse_shape(args[1], reps, "repeats")) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_repeat(a->t, nd, reps), a);
}

/* _v_repeat_interleave(x, repeats, dim, output_size): repeats an int or a
 * dtorch tensor (then output_size is its sum). */
static PyObject *v_repeat_interleave(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a;
    if (dtpy_nargs(nargs, 4, 4, "_v_repeat_interleave") < 0 ||
        !(a = dtpy_tensor_arg_or_null(st, args[0], "repeat_interleave", "input")))
        return NULL;
    int64_t dim;
    if (dtpy_int_arg(args[2], "repeat_interleave", "dim", &dim) < 0)
        return NULL;
    if (DTPY_IS_TENSOR(st, args[1])) {
        int64_t size;
        if (dtpy_int_arg(args[3], "repeat_interleave", "size", &size) < 0)
            return NULL;
        dtpy_record_call_site(st);
        return dtpy_tensor_wrap_like(
            st, dt_repeat_interleave_tensor(a->t, ((dtpy_tensor *)args[1])->t, dim, size), a);
    }
    int64_t r;
    if (dtpy_int_arg(args[1], "repeat_interleave", "repeats", &r) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_repeat_interleave(a->t, r, dim), a);
}

/* _v_masked_scatter(x, mask, source, inplace): x.masked_scatter(mask, source);
 * with inplace the new value of x (the caller rebinds x). */
static PyObject *v_masked_scatter(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *a, *mask, *src;
    if (dtpy_nargs(nargs, 4, 4, "_v_masked_scatter") < 0)
        return NULL;
    int inplace = PyObject_IsTrue(args[3]);
    if (inplace < 0)
        return NULL;
    const char *op = inplace ? "masked_scatter_" : "masked_scatter";
    if (!(a = dtpy_tensor_arg_or_null(st, args[0], op, "input")) ||
        !(mask = dtpy_tensor_arg_or_null(st, args[1], op, "mask")) ||
        !(src = dtpy_tensor_arg_or_null(st, args[2], op, "source")))
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_masked_scatter(a->t, mask->t, src->t, inplace ? DT_EW_INPLACE : 0),
                                 a);
}

/* ------------------------------------------------------------ registration */

#define FAST(name, fn, doc)                                                                                  \
    { name, (PyCFunction)(void (*)(void))fn, METH_FASTCALL, doc }

static PyMethodDef views_methods[] = {
    FAST("_v_reshape", v_reshape, "_v_reshape(x, shape) -> Tensor (one -1 allowed)"),
    FAST("_v_squeeze", v_squeeze, "_v_squeeze(x, dims or None) -> Tensor"),
    FAST("_v_unsqueeze", v_unsqueeze, "_v_unsqueeze(x, dim) -> Tensor"),
    FAST("_v_permute", v_permute, "_v_permute(x, dims) -> Tensor"),
    FAST("_v_expand", v_expand, "_v_expand(x, sizes) -> Tensor"),
    {"_v_clone", v_clone, METH_O, "_v_clone(x) -> Tensor"},
    {"_v_contiguous", v_contiguous, METH_O, "_v_contiguous(x) -> Tensor"},
    FAST("_v_index", v_index,
         "_v_index(x, spec, new_axes_mask) -> Tensor; spec: (start, step, len, drop) per dim"),
    FAST("_v_index_tensor", v_index_tensor, "_v_index_tensor(x, dim, index) -> Tensor"),
    FAST("_v_setitem", v_setitem, "_v_setitem(x, spec, value) -> the new value of x"),
    FAST("_v_setitem_mask", v_setitem_mask, "_v_setitem_mask(x, dim, mask, scalar) -> the new value of x"),
    FAST("_v_setitem_index", v_setitem_index,
         "_v_setitem_index(x, dim, index, scalar) -> the new value of x"),
    FAST("_v_copy", v_copy, "_v_copy(dst, src) -> the new value of dst"),
    FAST("_v_cat", v_cat, "_v_cat(tensors, dim, stack) -> Tensor"),
    FAST("_v_tril", v_tril, "_v_tril(x, diagonal, upper) -> Tensor"),
    FAST("_v_flip", v_flip, "_v_flip(x, dims) -> Tensor"),
    FAST("_v_roll", v_roll, "_v_roll(x, shifts, dims or None) -> Tensor"),
    FAST("_v_repeat", v_repeat, "_v_repeat(x, repeats) -> Tensor"),
    FAST("_v_repeat_interleave", v_repeat_interleave,
         "_v_repeat_interleave(x, repeats (int or Tensor), dim, output_size) -> Tensor"),
    FAST("_v_masked_scatter", v_masked_scatter,
         "_v_masked_scatter(x, mask, source, inplace) -> Tensor (with inplace: the new value of x)"),
    {NULL, NULL, 0, NULL},
};

int dtpy_add_views_methods(PyObject *module) { return PyModule_AddFunctions(module, views_methods); }
