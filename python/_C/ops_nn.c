/*
 * The nn functional family's entries on dtorch._C (`_nn_*`), called by
 * python/dtorch/_ops_nn.py (the functions of dtorch.nn.functional and their
 * torch top-level forms).
 *
 * The Python layer does torch's argument conveniences (keyword arguments,
 * int-or-tuple sizes, string modes, defaults); these entries take the
 * normalised positional form, convert it, record the call site and call the
 * C API. Every error comes back as the Python exception of its dt_status.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

#include <math.h>

/* Arguments are converted by args.c (dtpy_tensor_arg, dtpy_int_arg, ...). */
static dt_tensor *handle(dtpy_tensor *t) { return t ? t->t : NULL; }

/* _nn_activation(x, kind, param) */
static PyObject *nn_activation(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(3, "_nn_activation");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x;
    int64_t kind;
    double param;
    if (dtpy_tensor_arg(st, args[0], "activation", "input", 0, &x) < 0 ||
        dtpy_int_arg(args[1], "activation", "kind", &kind) < 0 ||
        dtpy_float_arg(args[2], "activation", "param", 0, &param) < 0)
        return NULL;
    if (dtpy_sync_default_dtype(st) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_activation((dt_activation_kind)kind, x->t, param), x);
}

/* _nn_softmax(x, dim, log, dtype_or_None) */
static PyObject *nn_softmax(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(4, "_nn_softmax");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x;
    int64_t dim;
    if (dtpy_tensor_arg(st, args[0], "softmax", "input", 0, &x) < 0 ||
        dtpy_int_arg(args[1], "softmax", "dim", &dim) < 0)
        return NULL;
    int log = PyObject_IsTrue(args[2]);
    if (log < 0)
        return NULL;
    int dtype = -1;
    if (dtpy_dtype_arg(st, args[3], 1, &dtype) < 0)
        return NULL;
    if (dim < INT32_MIN || dim > INT32_MAX)
        return PyErr_Format(PyExc_IndexError, "softmax(): Dimension out of range (got %lld)", dim);
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_softmax(x->t, (int)dim, log, dtype), x);
}

/* _nn_layer_norm(x, normalized_shape, weight, bias, eps) */
static PyObject *nn_layer_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(5, "_nn_layer_norm");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x, *w, *b;
    int64_t ns[DT_MAX_NDIM];
    double eps;
    int n;
    if (dtpy_tensor_arg(st, args[0], "layer_norm", "input", 0, &x) < 0 ||
        (n = dtpy_ints_arg(args[1], "layer_norm", "normalized_shape", ns, DT_MAX_NDIM)) < 0 ||
        dtpy_tensor_arg(st, args[2], "layer_norm", "weight", 1, &w) < 0 ||
        dtpy_tensor_arg(st, args[3], "layer_norm", "bias", 1, &b) < 0 ||
        dtpy_float_arg(args[4], "layer_norm", "eps", 0, &eps) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_layer_norm(x->t, n, ns, handle(w), handle(b), eps), x);
}

/* _nn_rms_norm(x, normalized_shape, weight, eps_or_None) */
static PyObject *nn_rms_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(4, "_nn_rms_norm");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x, *w;
    int64_t ns[DT_MAX_NDIM];
    double eps;
    int n;
    if (dtpy_tensor_arg(st, args[0], "rms_norm", "input", 0, &x) < 0 ||
        (n = dtpy_ints_arg(args[1], "rms_norm", "normalized_shape", ns, DT_MAX_NDIM)) < 0 ||
        dtpy_tensor_arg(st, args[2], "rms_norm", "weight", 1, &w) < 0 ||
        dtpy_float_arg(args[3], "rms_norm", "eps", 1, &eps) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_rms_norm(x->t, n, ns, handle(w), eps), x);
}

/* _nn_group_norm(x, num_groups, weight, bias, eps) */
static PyObject *nn_group_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(5, "_nn_group_norm");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x, *w, *b;
    int64_t groups;
    double eps;
    if (dtpy_tensor_arg(st, args[0], "group_norm", "input", 0, &x) < 0 ||
        dtpy_int_arg(args[1], "group_norm", "num_groups", &groups) < 0 ||
        dtpy_tensor_arg(st, args[2], "group_norm", "weight", 1, &w) < 0 ||
        dtpy_tensor_arg(st, args[3], "group_norm", "bias", 1, &b) < 0 ||
        dtpy_float_arg(args[4], "group_norm", "eps", 0, &eps) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_group_norm(x->t, groups, handle(w), handle(b), eps), x);
}

/* _nn_batch_norm(x, running_mean, running_var, weight, bias, momentum, eps) */
static PyObject *nn_batch_norm(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(7, "_nn_batch_norm");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x, *rm, *rv, *w, *b;
    double momentum, eps;
    if (dtpy_tensor_arg(st, args[0], "batch_norm", "input", 0, &x) < 0 ||
        dtpy_tensor_arg(st, args[1], "batch_norm", "running_mean", 1, &rm) < 0 ||
        dtpy_tensor_arg(st, args[2], "batch_norm", "running_var", 1, &rv) < 0 ||
        dtpy_tensor_arg(st, args[3], "batch_norm", "weight", 1, &w) < 0 ||
        dtpy_tensor_arg(st, args[4], "batch_norm", "bias", 1, &b) < 0 ||
        dtpy_float_arg(args[5], "batch_norm", "momentum", 0, &momentum) < 0 ||
        dtpy_float_arg(args[6], "batch_norm", "eps", 0, &eps) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(
        st, dt_batch_norm(x->t, handle(rm), handle(rv), handle(w), handle(b), momentum, eps), x);
}

/* _nn_embedding(indices, weight) */
static PyObject *nn_embedding(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(2, "_nn_embedding");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *idx, *w;
    if (dtpy_tensor_arg(st, args[0], "embedding", "input", 0, &idx) < 0 ||
        dtpy_tensor_arg(st, args[1], "embedding", "weight", 0, &w) < 0)
        return NULL;
    dtpy_record_call_site(st);
    /* The result lives with the weight's graph and mesh (the same as the
     * indices', or the call fails). */
    return dtpy_tensor_wrap_like(st, dt_embedding(idx->t, w->t), idx);
}

/* _nn_conv2d(x, weight, bias, stride, padding, dilation, groups, padding_mode) */
static PyObject *nn_conv2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(8, "_nn_conv2d");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x, *w, *b;
    int64_t stride[2], padding[2] = {0, 0}, dilation[2];
    int64_t groups, mode;
    if (dtpy_tensor_arg(st, args[0], "conv2d", "input", 0, &x) < 0 ||
        dtpy_tensor_arg(st, args[1], "conv2d", "weight", 0, &w) < 0 ||
        dtpy_tensor_arg(st, args[2], "conv2d", "bias", 1, &b) < 0 ||
        dtpy_ints_arg(args[3], "conv2d", "stride", stride, 2) != 2 ||
        dtpy_ints_arg(args[4], "conv2d", "padding", padding, 2) != 2 ||
        dtpy_ints_arg(args[5], "conv2d", "dilation", dilation, 2) != 2 ||
        dtpy_int_arg(args[6], "conv2d", "groups", &groups) < 0 ||
        dtpy_int_arg(args[7], "conv2d", "padding_mode", &mode) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "conv2d(): stride, padding and dilation need 2 entries each");
        return NULL;
    }
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(
        st, dt_conv2d(x->t, w->t, handle(b), stride, padding, dilation, groups, (dt_conv_padding)mode), x);
}

/* _nn_interpolate(x, mode, size_or_None, scales_or_None, align_corners) */
static PyObject *nn_interpolate(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(5, "_nn_interpolate");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x;
    int64_t mode, align;
    int64_t size[3];
    double scales[3];
    int have_size = args[2] != Py_None, have_scales = args[3] != Py_None;
    if (dtpy_tensor_arg(st, args[0], "interpolate", "input", 0, &x) < 0 ||
        dtpy_int_arg(args[1], "interpolate", "mode", &mode) < 0 ||
        dtpy_int_arg(args[4], "interpolate", "align_corners", &align) < 0)
        return NULL;
    int nsp = dt_tensor_ndim(x->t) - 2;
    if (have_size) {
        int n = dtpy_ints_arg(args[2], "interpolate", "size", size, 3);
        if (n < 0)
            return NULL;
        if (n != nsp)
            return PyErr_Format(PyExc_ValueError, "interpolate(): size has %d entries for %d spatial dims", n,
                                nsp);
    }
    if (have_scales) {
        PyObject *seq = PySequence_Fast(args[3], "interpolate(): scale_factor must be a sequence");
        if (seq == NULL)
            return NULL;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
        if (n != nsp || n > 3) {
            Py_DECREF(seq);
            return PyErr_Format(PyExc_ValueError,
                                "interpolate(): scale_factor has %zd entries for %d spatial dims", n, nsp);
        }
        for (Py_ssize_t i = 0; i < n; i++) {
            if (dtpy_float_arg(PySequence_Fast_GET_ITEM(seq, i), "interpolate", "scale_factor", 0,
                               &scales[i]) < 0) {
                Py_DECREF(seq);
                return NULL;
            }
        }
        Py_DECREF(seq);
    }
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st,
                                 dt_interpolate(x->t, (dt_interp_mode)mode, have_size ? size : NULL,
                                                have_scales ? scales : NULL, (int)align),
                                 x);
}

/* _nn_pad(x, pad, mode, value_or_None) */
static PyObject *nn_pad(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(4, "_nn_pad");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x;
    int64_t pad[2 * DT_MAX_NDIM];
    int64_t mode;
    double value;
    int n;
    if (dtpy_tensor_arg(st, args[0], "pad", "input", 0, &x) < 0 ||
        (n = dtpy_ints_arg(args[1], "pad", "pad", pad, 2 * DT_MAX_NDIM)) < 0 ||
        dtpy_int_arg(args[2], "pad", "mode", &mode) < 0 ||
        dtpy_float_arg(args[3], "pad", "value", 1, &value) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_pad(x->t, n, pad, (dt_pad_mode)mode, value), x);
}

/* _nn_dropout(x, p, training) */
static PyObject *nn_dropout(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(3, "_nn_dropout");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x;
    double p;
    if (dtpy_tensor_arg(st, args[0], "dropout", "input", 0, &x) < 0 ||
        dtpy_float_arg(args[1], "dropout", "p", 0, &p) < 0)
        return NULL;
    int training = PyObject_IsTrue(args[2]);
    if (training < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_dropout(x->t, p, training), x);
}

/* _nn_pixel_shuffle(x, upscale_factor) */
static PyObject *nn_pixel_shuffle(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(2, "_nn_pixel_shuffle");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x;
    int64_t r;
    if (dtpy_tensor_arg(st, args[0], "pixel_shuffle", "input", 0, &x) < 0 ||
        dtpy_int_arg(args[1], "pixel_shuffle", "upscale_factor", &r) < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_pixel_shuffle(x->t, r), x);
}

/* _nn_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale_or_None) */
static PyObject *nn_sdpa(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(7, "_nn_sdpa");
    dtpy_state *st = dtpy_state_of(m);
    const char *op = "scaled_dot_product_attention";
    dtpy_tensor *q, *k, *v, *mask;
    double p, scale;
    if (dtpy_tensor_arg(st, args[0], op, "query", 0, &q) < 0 ||
        dtpy_tensor_arg(st, args[1], op, "key", 0, &k) < 0 ||
        dtpy_tensor_arg(st, args[2], op, "value", 0, &v) < 0 ||
        dtpy_tensor_arg(st, args[3], op, "attn_mask", 1, &mask) < 0 ||
        dtpy_float_arg(args[4], op, "dropout_p", 0, &p) < 0 ||
        dtpy_float_arg(args[6], op, "scale", 1, &scale) < 0)
        return NULL;
    int causal = PyObject_IsTrue(args[5]);
    if (causal < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(
        st, dt_scaled_dot_product_attention(q->t, k->t, v->t, handle(mask), p, causal, scale), q);
}

/* _nn_sdpa_ring(q, k, v, is_causal, scale_or_None, mesh_dim) */
static PyObject *nn_sdpa_ring(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(6, "_nn_sdpa_ring");
    dtpy_state *st = dtpy_state_of(m);
    const char *op = "scaled_dot_product_attention";
    dtpy_tensor *q, *k, *v;
    double scale;
    int64_t md;
    if (dtpy_tensor_arg(st, args[0], op, "query", 0, &q) < 0 ||
        dtpy_tensor_arg(st, args[1], op, "key", 0, &k) < 0 ||
        dtpy_tensor_arg(st, args[2], op, "value", 0, &v) < 0 ||
        dtpy_float_arg(args[4], op, "scale", 1, &scale) < 0 || dtpy_int_arg(args[5], op, "mesh_dim", &md) < 0)
        return NULL;
    int causal = PyObject_IsTrue(args[3]);
    if (causal < 0)
        return NULL;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_sdpa_ring(q->t, k->t, v->t, causal, scale, (int)md), q);
}

/* --------------------------------------------------------------- pooling */

/* A pair of ints (the Python layer has already expanded single ints). */
static int pair_arg(PyObject *o, const char *op, const char *what, int64_t *out) {
    int n = dtpy_ints_arg(o, op, what, out, 2);
    if (n < 0)
        return -1;
    if (n != 2) {
        PyErr_Format(PyExc_ValueError, "%s(): argument '%s' needs 2 entries, got %d", op, what, n);
        return -1;
    }
    return 0;
}

/* _nn_max_pool2d(x, kernel_size, stride_or_None, padding, dilation, ceil_mode, return_indices) */
static PyObject *nn_max_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(7, "_nn_max_pool2d");
    dtpy_state *st = dtpy_state_of(m);
    const char *op = "max_pool2d";
    dtpy_tensor *x;
    int64_t k[2], s[2], p[2], d[2];
    if (dtpy_tensor_arg(st, args[0], op, "input", 0, &x) < 0 || pair_arg(args[1], op, "kernel_size", k) < 0 ||
        (args[2] != Py_None && pair_arg(args[2], op, "stride", s) < 0) ||
        pair_arg(args[3], op, "padding", p) < 0 || pair_arg(args[4], op, "dilation", d) < 0)
        return NULL;
    int ceil = PyObject_IsTrue(args[5]), with_indices = PyObject_IsTrue(args[6]);
    if (ceil < 0 || with_indices < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *v = NULL, *i = NULL;
    if (dt_max_pool2d(x->t, k, args[2] != Py_None ? s : NULL, p, d, ceil, &v, with_indices ? &i : NULL) !=
        DT_OK)
        return dtpy_raise_last(st);
    return with_indices ? dtpy_tensor_pair(st, x, v, i) : dtpy_tensor_wrap_like(st, v, x);
}

/* _nn_avg_pool2d(x, kernel_size, stride_or_None, padding, ceil_mode, count_include_pad, divisor_or_None) */
static PyObject *nn_avg_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(7, "_nn_avg_pool2d");
    dtpy_state *st = dtpy_state_of(m);
    const char *op = "avg_pool2d";
    dtpy_tensor *x;
    int64_t k[2], s[2], p[2];
    int64_t divisor = 0;
    if (dtpy_tensor_arg(st, args[0], op, "input", 0, &x) < 0 || pair_arg(args[1], op, "kernel_size", k) < 0 ||
        (args[2] != Py_None && pair_arg(args[2], op, "stride", s) < 0) ||
        pair_arg(args[3], op, "padding", p) < 0 ||
        (args[6] != Py_None && dtpy_int_arg(args[6], op, "divisor_override", &divisor) < 0))
        return NULL;
    int ceil = PyObject_IsTrue(args[4]), count_pad = PyObject_IsTrue(args[5]);
    if (ceil < 0 || count_pad < 0)
        return NULL;
    int64_t div = divisor;
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st,
                                 dt_avg_pool2d(x->t, k, args[2] != Py_None ? s : NULL, p, ceil, count_pad,
                                               args[6] != Py_None ? &div : NULL),
                                 x);
}

/* _nn_adaptive_pool2d(x, output_size, kind): kind 0 avg, 1 max, 2 max with indices */
static PyObject *nn_adaptive_pool2d(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(3, "_nn_adaptive_pool2d");
    dtpy_state *st = dtpy_state_of(m);
    int64_t kind;
    if (dtpy_int_arg(args[2], "adaptive_pool2d", "kind", &kind) < 0)
        return NULL;
    const char *op = kind ? "adaptive_max_pool2d" : "adaptive_avg_pool2d";
    dtpy_tensor *x;
    int64_t size[2];
    if (dtpy_tensor_arg(st, args[0], op, "input", 0, &x) < 0 ||
        pair_arg(args[1], op, "output_size", size) < 0)
        return NULL;
    dtpy_record_call_site(st);
    if (kind == 0)
        return dtpy_tensor_wrap_like(st, dt_adaptive_avg_pool2d(x->t, size), x);
    dt_tensor *v = NULL, *i = NULL;
    if (dt_adaptive_max_pool2d(x->t, size, &v, kind == 2 ? &i : NULL) != DT_OK)
        return dtpy_raise_last(st);
    return kind == 2 ? dtpy_tensor_pair(st, x, v, i) : dtpy_tensor_wrap_like(st, v, x);
}

/* _nn_alias(x, cls): a new Python tensor of class `cls` (a subclass of
 * TensorBase with the same layout, e.g. dtorch.nn.Parameter) on x's value. */
static PyObject *nn_alias(PyObject *m, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(2, "_nn_alias");
    dtpy_state *st = dtpy_state_of(m);
    dtpy_tensor *x;
    if (dtpy_tensor_arg(st, args[0], "alias", "data", 0, &x) < 0)
        return NULL;
    if (!PyType_Check(args[1]) || !PyType_IsSubtype((PyTypeObject *)args[1], st->tensor_base_type))
        return PyErr_Format(PyExc_TypeError, "alias: the class must subclass _C.TensorBase");
    PyTypeObject *cls = (PyTypeObject *)args[1];
    if (cls->tp_basicsize != st->tensor_cls->tp_basicsize)
        return PyErr_Format(PyExc_TypeError, "alias: %.100s adds instance fields (use __slots__ = ())",
                            cls->tp_name);
    dtpy_tensor *o = (dtpy_tensor *)cls->tp_alloc(cls, 0);
    if (o == NULL)
        return NULL;
    dt_tensor_retain(x->t);
    o->t = x->t;
    o->graph = Py_NewRef(x->graph);
    o->mesh = Py_XNewRef(x->mesh);
    return (PyObject *)o;
}

#define FASTCALL(f) (PyCFunction)(void (*)(void))(f), METH_FASTCALL

static PyMethodDef nn_methods[] = {
    {"_nn_activation", FASTCALL(nn_activation), "_nn_activation(x, kind, param)"},
    {"_nn_softmax", FASTCALL(nn_softmax), "_nn_softmax(x, dim, log, dtype)"},
    {"_nn_layer_norm", FASTCALL(nn_layer_norm), "_nn_layer_norm(x, normalized_shape, weight, bias, eps)"},
    {"_nn_rms_norm", FASTCALL(nn_rms_norm), "_nn_rms_norm(x, normalized_shape, weight, eps)"},
    {"_nn_group_norm", FASTCALL(nn_group_norm), "_nn_group_norm(x, num_groups, weight, bias, eps)"},
    {"_nn_batch_norm", FASTCALL(nn_batch_norm),
     "_nn_batch_norm(x, running_mean, running_var, weight, bias, momentum, eps)"},
    {"_nn_embedding", FASTCALL(nn_embedding), "_nn_embedding(indices, weight)"},
    {"_nn_conv2d", FASTCALL(nn_conv2d),
     "_nn_conv2d(x, weight, bias, stride, padding, dilation, groups, padding_mode)"},
    {"_nn_interpolate", FASTCALL(nn_interpolate),
     "_nn_interpolate(x, mode, size, scale_factors, align_corners)"},
    {"_nn_pad", FASTCALL(nn_pad), "_nn_pad(x, pad, mode, value)"},
    {"_nn_dropout", FASTCALL(nn_dropout), "_nn_dropout(x, p, training)"},
    {"_nn_pixel_shuffle", FASTCALL(nn_pixel_shuffle), "_nn_pixel_shuffle(x, upscale_factor)"},
    {"_nn_alias", FASTCALL(nn_alias), "_nn_alias(x, cls): a tensor of class cls on x's value"},
    {"_nn_sdpa", FASTCALL(nn_sdpa), "_nn_sdpa(q, k, v, attn_mask, dropout_p, is_causal, scale)"},
    {"_nn_sdpa_ring", FASTCALL(nn_sdpa_ring), "_nn_sdpa_ring(q, k, v, is_causal, scale, mesh_dim)"},
    {"_nn_max_pool2d", FASTCALL(nn_max_pool2d),
     "_nn_max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices)"},
    {"_nn_avg_pool2d", FASTCALL(nn_avg_pool2d),
     "_nn_avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)"},
    {"_nn_adaptive_pool2d", FASTCALL(nn_adaptive_pool2d),
     "_nn_adaptive_pool2d(x, output_size, kind): kind 0 avg, 1 max, 2 max with indices"},
    {NULL, NULL, 0, NULL},
};

/* The codes _nn_activation, _nn_interpolate, _nn_pad and _nn_conv2d take
 * (dt_activation_kind from dtorch_ops.def, dt_interp_mode, dt_pad_mode,
 * dt_conv_padding). */
static const dtpy_constant nn_constants[] = {
#define DT_ACTIVATION(E, ...) {"ACTIVATION_" #E, DT_ACT_##E},
#include "dtorch/dtorch_ops.def"
    {"INTERP_NEAREST", DT_INTERP_NEAREST},       {"INTERP_NEAREST_EXACT", DT_INTERP_NEAREST_EXACT},
    {"INTERP_LINEAR", DT_INTERP_LINEAR},         {"INTERP_BILINEAR", DT_INTERP_BILINEAR},
    {"INTERP_BICUBIC", DT_INTERP_BICUBIC},       {"INTERP_TRILINEAR", DT_INTERP_TRILINEAR},
    {"PAD_CONSTANT", DT_PAD_CONSTANT},           {"PAD_REFLECT", DT_PAD_REFLECT},
    {"PAD_REPLICATE", DT_PAD_REPLICATE},         {"PAD_CIRCULAR", DT_PAD_CIRCULAR},
    {"CONV_PAD_EXPLICIT", DT_CONV_PAD_EXPLICIT}, {"CONV_PAD_VALID", DT_CONV_PAD_VALID},
    {"CONV_PAD_SAME", DT_CONV_PAD_SAME},
};

int dtpy_add_nn_methods(PyObject *module) {
    if (PyModule_AddFunctions(module, nn_methods) < 0)
        return -1;
    return DTPY_ADD_CONSTANTS(module, nn_constants);
}
