/*
 * dtorch._C entry points of the linear algebra family:
 *   _linalg(kind, a, b) -> Tensor   (LINALG_MM, LINALG_BMM, LINALG_OUTER)
 *   _linear(x, weight, bias_or_None) -> Tensor
 *   _einsum(equation, operands) -> Tensor
 * matmul and `@` are TensorBase's (tensorobject.c). The torch-style signatures live
 * in dtorch/_ops_linalg.py and dtorch/nn/_linalg.py.
 *
 * Every function runs on a Python thread holding the GIL; none waits.
 */
#include "dtorch_py.h"

/* The `kind` argument of _linalg (the module's LINALG_* constants). */
enum { KIND_MM = 0, KIND_BMM, KIND_OUTER };

static PyObject *mod_linalg(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(3, "_linalg");
    dtpy_state *st = dtpy_state_of(module);
    long kind = PyLong_AsLong(args[0]);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    const char *name = kind == KIND_MM ? "mm" : kind == KIND_BMM ? "bmm" : "outer";
    dtpy_tensor *a = dtpy_tensor_arg_or_null(st, args[1], name, "input");
    if (a == NULL)
        return NULL;
    dtpy_tensor *b = dtpy_tensor_arg_or_null(st, args[2], name, kind == KIND_OUTER ? "vec2" : "mat2");
    if (b == NULL || dtpy_same_graph(a->t, b->t, name) < 0)
        return NULL;
    dtpy_record_call_site(st);
    dt_tensor *t = kind == KIND_MM    ? dt_mm(a->t, b->t)
                   : kind == KIND_BMM ? dt_bmm(a->t, b->t)
                                      : dt_outer(a->t, b->t);
    return dtpy_tensor_wrap_like(st, t, a);
}

static PyObject *mod_linear(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    if (dtpy_nargs(nargs, 3, 4, "_linear") < 0)
        return NULL;
    /* The 4th: the weight is a module's parameter (dt_linear_param). */
    int param = nargs == 4 ? PyObject_IsTrue(args[3]) : 0;
    if (param < 0)
        return NULL;
    dtpy_state *st = dtpy_state_of(module);
    dtpy_tensor *x = dtpy_tensor_arg_or_null(st, args[0], "linear", "input");
    if (x == NULL)
        return NULL;
    dtpy_tensor *w = dtpy_tensor_arg_or_null(st, args[1], "linear", "weight");
    if (w == NULL || dtpy_same_graph(x->t, w->t, "linear") < 0)
        return NULL;
    dtpy_tensor *b = NULL;
    if (args[2] != Py_None) {
        b = dtpy_tensor_arg_or_null(st, args[2], "linear", "bias");
        if (b == NULL || dtpy_same_graph(x->t, b->t, "linear") < 0)
            return NULL;
    }
    dtpy_record_call_site(st);
    dt_tensor *(*fn)(dt_tensor *, dt_tensor *, dt_tensor *) = param ? dt_linear_param : dt_linear;
    return dtpy_tensor_wrap_like(st, fn(x->t, w->t, b ? b->t : NULL), x);
}

static PyObject *mod_einsum(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(2, "_einsum");
    dtpy_state *st = dtpy_state_of(module);
    if (!PyUnicode_Check(args[0]))
        return PyErr_Format(PyExc_TypeError, "einsum(): argument 'equation' must be str, not %.100s",
                            Py_TYPE(args[0])->tp_name);
    const char *eq = PyUnicode_AsUTF8(args[0]);
    if (eq == NULL)
        return NULL;
    PyObject *seq = PySequence_Fast(args[1], "einsum(): operands must be a sequence of dtorch.Tensor");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    dt_tensor *ts[2] = {NULL, NULL};
    dtpy_tensor *first = NULL;
    PyObject *result = NULL;
    if (n < 1 || n > 2) {
        PyErr_Format(n > 2 ? PyExc_NotImplementedError : PyExc_RuntimeError,
                     n > 2 ? "einsum(): dtorch takes one or two operands, got %zd; contract them in steps"
                           : "einsum(): must provide at least one operand (got %zd)",
                     n);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        dtpy_tensor *t = dtpy_tensor_arg_or_null(st, PySequence_Fast_GET_ITEM(seq, i), "einsum", "operands");
        if (t == NULL)
            goto done;
        if (first && dtpy_same_graph(first->t, t->t, "einsum") < 0)
            goto done;
        if (!first)
            first = t;
        ts[i] = t->t;
    }
    dtpy_record_call_site(st);
    result = dtpy_tensor_wrap_like(st, dt_einsum(eq, (int)n, ts), first);
done:
    Py_DECREF(seq);
    return result;
}

static PyMethodDef linalg_methods[] = {
    {"_linalg", (PyCFunction)(void (*)(void))mod_linalg, METH_FASTCALL,
     "_linalg(kind, a, b) -> Tensor: LINALG_MM, LINALG_BMM or LINALG_OUTER."},
    {"_linear", (PyCFunction)(void (*)(void))mod_linear, METH_FASTCALL,
     "_linear(x, weight, bias_or_None) -> Tensor: torch.nn.functional.linear."},
    {"_einsum", (PyCFunction)(void (*)(void))mod_einsum, METH_FASTCALL,
     "_einsum(equation, operands) -> Tensor: torch.einsum with one or two operands."},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_linalg_methods(PyObject *module) {
    static const dtpy_constant kinds[] = {
        {"LINALG_MM", KIND_MM}, {"LINALG_BMM", KIND_BMM}, {"LINALG_OUTER", KIND_OUTER}};
    if (PyModule_AddFunctions(module, linalg_methods) < 0 || DTPY_ADD_CONSTANTS(module, kinds) < 0)
        return -1;
    return 0;
}
