/*
 * The elementwise family's Python face: Tensor methods (add with alpha, div
 * with rounding_mode, comparisons, logical/bitwise ops, pow, maximum,
 * minimum, where, masked_fill, clamp, unary math, casts and the in-place
 * forms), the number-protocol and rich-comparison slots that tensorobject.c's type
 * spec points at, and the module functions _C.ew_binary / _C.ew_where that
 * python/dtorch/_ops_elementwise.py builds torch's function forms on.
 *
 * In-place forms rebind: dtorch values are immutable, so x.add_(y) (and
 * x += y) computes the new value and swaps the dt_tensor handle inside the
 * Python object; every reference to that object sees the new value, and the
 * method returns the object itself (docs/decisions.md).
 *
 * The method rows (dtpy_ew_methods) are part of _C.TensorBase's one method
 * table, joined with tensorobject.c's when the type is created; the type is not
 * changed afterwards. dtpy_add_elementwise_methods adds the module functions.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

#include <string.h>

/* The C API's names (include/dtorch/dtorch_ops.def). */
#define binary_names(op) dt_binary_op_name(op)

/* ---------------------------------------------------------------- helpers */

static dtpy_state *state_of(PyObject *a, PyObject *b) {
    dtpy_state *st = dtpy_find_state(Py_TYPE(a));
    if ((st == NULL || !DTPY_IS_TENSOR(st, a)) && b != NULL) {
        dtpy_state *sb = dtpy_find_state(Py_TYPE(b));
        if (sb != NULL)
            st = sb;
    }
    return st;
}

static PyObject *wrap_like(dtpy_state *st, dt_tensor *t, PyObject *like) {
    return dtpy_tensor_wrap_like(st, t, (dtpy_tensor *)like);
}

/* The in-place ending: `self` now stands for `t` (a new reference, or NULL
 * when the call failed). Returns a new reference to self. */
static PyObject *rebind(dtpy_state *st, PyObject *self, dt_tensor *t) {
    if (t == NULL)
        return dtpy_raise_last(st);
    dtpy_tensor_rebind((dtpy_tensor *)self, t);
    return Py_NewRef(self);
}

static PyObject *finish(dtpy_state *st, PyObject *self, dt_tensor *t, int inplace) {
    return inplace ? rebind(st, self, t) : wrap_like(st, t, self);
}

static const char *type_name(PyObject *o) { return Py_TYPE(o)->tp_name; }

static int is_torch_tensor(dtpy_state *st, PyObject *o) {
    return PyObject_TypeCheck(o, (PyTypeObject *)st->torch_tensor_type);
}

static PyObject *torch_operand_error(const char *op) {
    return PyErr_Format(
        PyExc_TypeError,
        "%s: cannot mix a dtorch.Tensor with a torch.Tensor; convert the torch tensor with "
        "dtorch.from_torch(t, device_mesh=..., placements=...) or read the dtorch tensor with "
        ".to_torch()",
        op);
}

/* Classifies an operand: 1 dtorch tensor (*t borrowed), 2 Python number
 * (*s), 0 anything else (no exception), -1 with an exception. */
static int operand(dtpy_state *st, PyObject *o, dt_tensor **t, dt_scalar *s) {
    if (DTPY_IS_TENSOR(st, o)) {
        *t = ((dtpy_tensor *)o)->t;
        return 1;
    }
    int r = dtpy_parse_scalar(o, s);
    return r < 0 ? -1 : r ? 2 : 0;
}

/* Everything before a C call: torch's default dtype, when the result may
 * depend on it (`uses_default`: an integer or bool tensor that may become
 * floating, or a float scalar), and the caller's file:line for kernel
 * errors. */
static int prepare_ex(dtpy_state *st, int uses_default) {
    if (uses_default && dtpy_sync_default_dtype(st) < 0)
        return -1;
    dtpy_record_call_site(st);
    return 0;
}
static int prepare(dtpy_state *st) { return prepare_ex(st, 1); }

static int not_floating(dt_tensor *t) { return t != NULL && !dt_dtype_is_floating(dt_tensor_dtype(t)); }

/* ----------------------------------------------------------- binary core */

enum { CALL_FUNCTION = 0, CALL_SLOT = 1 };

/* a op b with either operand a number (not both), as torch.<op>(a, b)
 * computes it. `alpha` may be NULL (1). For CALL_SLOT, operands of foreign
 * types give NotImplemented so Python can try the other side. */
static PyObject *binary_core(dtpy_state *st, PyObject *a, PyObject *b, dt_binary_op op, PyObject *alpha,
                             int inplace, int mode) {
    const char *name = binary_names(op);
    dt_tensor *ta = NULL, *tb = NULL;
    dt_scalar sa, sb, al = dt_scalar_int(1);
    int ka = operand(st, a, &ta, &sa);
    if (ka < 0)
        return NULL;
    int kb = operand(st, b, &tb, &sb);
    if (kb < 0)
        return NULL;
    if (ka == 0 || kb == 0 || (ka == 2 && kb == 2)) {
        PyObject *bad = ka == 0 ? a : b;
        if (is_torch_tensor(st, bad))
            return torch_operand_error(name);
        if (mode == CALL_SLOT)
            Py_RETURN_NOTIMPLEMENTED;
        if (ka == 2 && kb == 2)
            return PyErr_Format(PyExc_TypeError, "%s(): expected at least one dtorch.Tensor operand", name);
        return PyErr_Format(PyExc_TypeError,
                            "%s(): argument '%s' must be a dtorch.Tensor or a number, not %.100s", name,
                            bad == a ? "input" : "other", type_name(bad));
    }
    if (alpha != NULL && alpha != Py_None) {
        int r = dtpy_parse_scalar(alpha, &al);
        if (r < 0)
            return NULL;
        if (r == 0)
            return PyErr_Format(PyExc_TypeError, "%s(): argument 'alpha' must be a number, not %.100s", name,
                                type_name(alpha));
    }
    if (ta && tb && dtpy_same_graph(ta, tb, name) < 0)
        return NULL;
    int uses_default = not_floating(ta) || not_floating(tb) || (!ta && sa.kind == DT_SCALAR_FLOAT) ||
                       (!tb && sb.kind == DT_SCALAR_FLOAT);
    if (prepare_ex(st, uses_default) < 0)
        return NULL;
    int flags = inplace ? DT_EW_INPLACE : 0;
    dt_tensor *t;
    if (ta && tb)
        t = dt_binary_ex(op, ta, tb, sb, al, flags);
    else if (ta)
        t = dt_binary_ex(op, ta, NULL, sb, al, flags);
    else
        t = dt_binary_ex(op, tb, NULL, sa, al, flags | DT_EW_SCALAR_FIRST);
    return finish(st, ta ? a : b, t, inplace);
}

/* ------------------------------------------------------------ slots */

static PyObject *slot_binary(PyObject *a, PyObject *b, dt_binary_op op, int inplace) {
    dtpy_state *st = state_of(a, b);
    if (st == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    return binary_core(st, a, b, op, NULL, inplace, CALL_SLOT);
}

/* + - * /, the commonest ops, on the shortest path to torch's operator forms
 * (dt_binary, dt_binary_scalar): two tensors, or a tensor and a Python
 * number. Anything else (errors, NotImplemented) goes through binary_core. */
static PyObject *slot_arith(PyObject *a, PyObject *b, dt_binary_op op) {
    dtpy_state *st = state_of(a, b);
    if (st == NULL)
        Py_RETURN_NOTIMPLEMENTED;
    int at = DTPY_IS_TENSOR(st, a), bt = DTPY_IS_TENSOR(st, b);
    if (at && bt) {
        dt_tensor *ta = ((dtpy_tensor *)a)->t, *tb = ((dtpy_tensor *)b)->t;
        if (dtpy_same_graph(ta, tb, binary_names(op)) < 0 ||
            prepare_ex(st, op == DT_BINARY_DIV && (not_floating(ta) || not_floating(tb))) < 0)
            return NULL;
        return wrap_like(st, dt_binary(op, ta, tb), a);
    }
    if (at != bt) {
        PyObject *self = at ? a : b;
        dt_scalar s;
        int r = dtpy_parse_scalar(at ? b : a, &s);
        if (r < 0)
            return NULL;
        if (r == 1) {
            dt_tensor *t = ((dtpy_tensor *)self)->t;
            if (prepare_ex(st, op == DT_BINARY_DIV || s.kind == DT_SCALAR_FLOAT || not_floating(t)) < 0)
                return NULL;
            return wrap_like(st, dt_binary_scalar(op, t, s, !at), self);
        }
    }
    return binary_core(st, a, b, op, NULL, 0, CALL_SLOT);
}

PyObject *dtpy_ew_add(PyObject *a, PyObject *b) { return slot_arith(a, b, DT_BINARY_ADD); }
PyObject *dtpy_ew_sub(PyObject *a, PyObject *b) { return slot_arith(a, b, DT_BINARY_SUB); }
PyObject *dtpy_ew_mul(PyObject *a, PyObject *b) { return slot_arith(a, b, DT_BINARY_MUL); }
PyObject *dtpy_ew_truediv(PyObject *a, PyObject *b) { return slot_arith(a, b, DT_BINARY_DIV); }
PyObject *dtpy_ew_floor_divide(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_DIV_FLOOR, 0); }
PyObject *dtpy_ew_remainder(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_REMAINDER, 0); }
PyObject *dtpy_ew_and(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_BITWISE_AND, 0); }
PyObject *dtpy_ew_or(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_BITWISE_OR, 0); }
PyObject *dtpy_ew_xor(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_BITWISE_XOR, 0); }

PyObject *dtpy_ew_power(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None)
        return PyErr_Format(PyExc_TypeError, "pow(): a modulo argument is not supported");
    return slot_binary(a, b, DT_BINARY_POW, 0);
}

PyObject *dtpy_ew_iadd(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_ADD, 1); }
PyObject *dtpy_ew_isub(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_SUB, 1); }
PyObject *dtpy_ew_imul(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_MUL, 1); }
PyObject *dtpy_ew_itruediv(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_DIV, 1); }
PyObject *dtpy_ew_ifloordiv(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_DIV_FLOOR, 1); }
PyObject *dtpy_ew_iremainder(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_REMAINDER, 1); }
PyObject *dtpy_ew_iand(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_BITWISE_AND, 1); }
PyObject *dtpy_ew_ior(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_BITWISE_OR, 1); }
PyObject *dtpy_ew_ixor(PyObject *a, PyObject *b) { return slot_binary(a, b, DT_BINARY_BITWISE_XOR, 1); }

PyObject *dtpy_ew_ipower(PyObject *a, PyObject *b, PyObject *mod) {
    if (mod != Py_None)
        return PyErr_Format(PyExc_TypeError, "pow(): a modulo argument is not supported");
    return slot_binary(a, b, DT_BINARY_POW, 1);
}

/* x < y etc. Python calls the reflected form on the tensor (2 < x is
 * x > 2), so `self` is always a dtorch tensor. Foreign operands give
 * NotImplemented: == and != then fall back to identity, as for torch. */
PyObject *dtpy_ew_richcompare(PyObject *self, PyObject *other, int op) {
    static const dt_binary_op ops[] = {
        [Py_LT] = DT_BINARY_LT, [Py_LE] = DT_BINARY_LE, [Py_EQ] = DT_BINARY_EQ,
        [Py_NE] = DT_BINARY_NE, [Py_GT] = DT_BINARY_GT, [Py_GE] = DT_BINARY_GE};
    if (op < 0 || op > Py_GE)
        Py_RETURN_NOTIMPLEMENTED;
    return slot_binary(self, other, ops[op], 0);
}

/* Tensors hash by identity, as torch's do, although == is elementwise. */
Py_hash_t dtpy_ew_hash(PyObject *self) { return PyBaseObject_Type.tp_hash(self); }

static PyObject *unary_core(PyObject *self, dt_unary_op op, int inplace) {
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    if (st == NULL || prepare_ex(st, not_floating(((dtpy_tensor *)self)->t)) < 0)
        return NULL;
    dt_tensor *t = dt_unary_ex(op, ((dtpy_tensor *)self)->t, inplace ? DT_EW_INPLACE : 0);
    return finish(st, self, t, inplace);
}

PyObject *dtpy_ew_absolute(PyObject *self) { return unary_core(self, DT_UNARY_ABS, 0); }
PyObject *dtpy_ew_negative(PyObject *self) { return unary_core(self, DT_UNARY_NEG, 0); }

PyObject *dtpy_ew_invert(PyObject *self) {
    if (dt_dtype_is_floating(dt_tensor_dtype(((dtpy_tensor *)self)->t)))
        return PyErr_Format(PyExc_TypeError,
                            "~ (operator.invert) is only implemented on integer and Boolean-type "
                            "tensors");
    return unary_core(self, DT_UNARY_BITWISE_NOT, 0);
}

PyObject *dtpy_ew_positive(PyObject *self) {
    if (dt_tensor_dtype(((dtpy_tensor *)self)->t) == DT_BOOL)
        return PyErr_Format(PyExc_RuntimeError, "The `+` operator, on a bool tensor is not supported.");
    return Py_NewRef(self);
}

/* ------------------------------------------------------------ methods */

/* x.op(other) and x.op_(other), with alpha for add/sub and rounding_mode for
 * div. */
static PyObject *method_binary(PyObject *self, PyObject *args, PyObject *kwargs, dt_binary_op op,
                               int inplace) {
    static char *kw_other[] = {"other", NULL};
    static char *kw_exp[] = {"exponent", NULL};
    static char *kw_alpha[] = {"other", "alpha", NULL};
    static char *kw_div[] = {"other", "rounding_mode", NULL};
    PyObject *other, *alpha = NULL, *mode = Py_None;
    int ok;
    if (op == DT_BINARY_ADD || op == DT_BINARY_SUB)
        ok = PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O", kw_alpha, &other, &alpha);
    else if (op == DT_BINARY_DIV)
        ok = PyArg_ParseTupleAndKeywords(args, kwargs, "O|$O", kw_div, &other, &mode);
    else
        ok = PyArg_ParseTupleAndKeywords(args, kwargs, "O", op == DT_BINARY_POW ? kw_exp : kw_other, &other);
    if (!ok)
        return NULL;
    if (mode != Py_None) {
        const char *m = PyUnicode_Check(mode) ? PyUnicode_AsUTF8(mode) : NULL;
        if (m != NULL && strcmp(m, "trunc") == 0)
            op = DT_BINARY_DIV_TRUNC;
        else if (m != NULL && strcmp(m, "floor") == 0)
            op = DT_BINARY_DIV_FLOOR;
        else
            return PyErr_Format(
                PyExc_RuntimeError,
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found %R", mode);
    }
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    return binary_core(st, self, other, op, alpha, inplace, CALL_FUNCTION);
}

#define BINARY_METHOD(fname, OP, INPLACE)                                                                    \
    static PyObject *fname(PyObject *self, PyObject *args, PyObject *kwargs) {                               \
        return method_binary(self, args, kwargs, OP, INPLACE);                                               \
    }
/* Written by hand: their keywords differ (alpha, rounding_mode, exponent). */
BINARY_METHOD(m_add, DT_BINARY_ADD, 0)
BINARY_METHOD(m_add_, DT_BINARY_ADD, 1)
BINARY_METHOD(m_sub, DT_BINARY_SUB, 0)
BINARY_METHOD(m_sub_, DT_BINARY_SUB, 1)
BINARY_METHOD(m_div, DT_BINARY_DIV, 0)
BINARY_METHOD(m_div_, DT_BINARY_DIV, 1)
BINARY_METHOD(m_pow, DT_BINARY_POW, 0)
BINARY_METHOD(m_pow_, DT_BINARY_POW, 1)
/* The methods of every other binary row of include/dtorch/dtorch_ops.def
 * (its py column). */
#define BINARY_FNS_PAIR(E, name)                                                                             \
    BINARY_METHOD(m_##name, DT_BINARY_##E, 0) BINARY_METHOD(m_##name##_, DT_BINARY_##E, 1)
#define BINARY_FNS_ONE(E, name) BINARY_METHOD(m_##name, DT_BINARY_##E, 0)
#define BINARY_FNS_NONE(E, name)
#define DT_BINARY_OP(E, name, tensors, scalar, row, note, result, bool_kernel, call, into, py)               \
    BINARY_FNS_##py(E, name)
#include "dtorch/dtorch_ops.def"

#define UNARY_METHOD(fname, OP, INPLACE)                                                                     \
    static PyObject *fname(PyObject *self, PyObject *unused) {                                               \
        (void)unused;                                                                                        \
        return unary_core(self, OP, INPLACE);                                                                \
    }
#define UNARY_PAIR(name, OP) UNARY_METHOD(m_##name, OP, 0) UNARY_METHOD(m_##name##_, OP, 1)
#define UNARY_FNS_PAIR(E, name) UNARY_PAIR(name, DT_UNARY_##E)
#define UNARY_FNS_ONE(E, name) UNARY_METHOD(m_##name, DT_UNARY_##E, 0)
#define UNARY_FNS_NONE(E, name)
/* The methods of every unary row of include/dtorch/dtorch_ops.def (its py
 * column; round is written by hand below). */
#define DT_UNARY_OP(E, name, result, bool_kernel, into, py, ...) UNARY_FNS_##py(E, name)
#include "dtorch/dtorch_ops.def"

static PyObject *round_core(PyObject *self, PyObject *args, PyObject *kwargs, int inplace) {
    static char *kwlist[] = {"decimals", NULL};
    long long decimals = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$L", kwlist, &decimals))
        return NULL;
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    if (st == NULL || prepare(st) < 0)
        return NULL;
    dt_tensor *t = dt_round(((dtpy_tensor *)self)->t, decimals, inplace ? DT_EW_INPLACE : 0);
    return finish(st, self, t, inplace);
}
static PyObject *m_round(PyObject *s, PyObject *a, PyObject *k) { return round_core(s, a, k, 0); }
static PyObject *m_round_(PyObject *s, PyObject *a, PyObject *k) { return round_core(s, a, k, 1); }

/* x.to(dtype) core: self itself when the dtype is already right. */
static PyObject *cast_core(PyObject *self, dt_dtype dtype) {
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    dtpy_tensor *o = (dtpy_tensor *)self;
    if (st == NULL)
        return NULL;
    if (dt_tensor_dtype(o->t) == dtype)
        return Py_NewRef(self);
    dtpy_record_call_site(st);
    return wrap_like(st, dt_cast(o->t, dtype), self);
}

static PyObject *m_cast(PyObject *self, PyObject *dtype_obj) {
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    int dt = dtpy_dtype_from_torch(st, dtype_obj);
    return dt < 0 ? NULL : cast_core(self, (dt_dtype)dt);
}

/* _alias(): a new Python object for the same value (to(copy=True)): it keeps
 * this value when the original is later rebound by an in-place op. */
static PyObject *m_alias(PyObject *self, PyObject *unused) {
    (void)unused;
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    dtpy_tensor *o = (dtpy_tensor *)self;
    if (st == NULL)
        return NULL;
    dt_tensor_retain(o->t);
    return wrap_like(st, o->t, self);
}

#define CAST_METHOD(name, DT)                                                                                \
    static PyObject *m_##name(PyObject *self, PyObject *unused) {                                            \
        (void)unused;                                                                                        \
        return cast_core(self, DT);                                                                          \
    }
CAST_METHOD(half, DT_FLOAT16)
CAST_METHOD(float, DT_FLOAT32)
CAST_METHOD(double, DT_FLOAT64)
CAST_METHOD(bfloat16, DT_BFLOAT16)
CAST_METHOD(int, DT_INT32)
CAST_METHOD(long, DT_INT64)
CAST_METHOD(bool, DT_BOOL)
CAST_METHOD(short, DT_INT16)
CAST_METHOD(char, DT_INT8)
CAST_METHOD(byte, DT_UINT8)

/* A tensor-or-number argument of where/masked_fill/clamp: 1 tensor, 2
 * number, -1 with TypeError naming the argument. */
static int tensor_or_number(dtpy_state *st, PyObject *o, const char *op, const char *arg, dt_tensor **t,
                            dt_scalar *s) {
    *t = NULL;
    int k = operand(st, o, t, s);
    if (k < 0)
        return -1;
    if (k == 0) {
        if (is_torch_tensor(st, o))
            torch_operand_error(op);
        else
            PyErr_Format(PyExc_TypeError,
                         "%s(): argument '%s' must be a dtorch.Tensor or a number, not %.100s", op, arg,
                         type_name(o));
        return -1;
    }
    return k;
}

static int check_graphs(dt_tensor *const *ts, int n, const char *op) {
    for (int i = 1; i < n; i++)
        if (ts[i] && ts[0] && dtpy_same_graph(ts[0], ts[i], op) < 0)
            return -1;
    return 0;
}

static PyObject *where_core(dtpy_state *st, PyObject *cond, PyObject *x, PyObject *y, PyObject *like) {
    dt_tensor *tc, *tx, *ty;
    dt_scalar sc, sx, sy;
    if (tensor_or_number(st, cond, "where", "condition", &tc, &sc) != 1) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "where(): argument 'condition' must be a dtorch.Tensor, not %.100s",
                         type_name(cond));
        return NULL;
    }
    if (tensor_or_number(st, x, "where", "input", &tx, &sx) < 0 ||
        tensor_or_number(st, y, "where", "other", &ty, &sy) < 0)
        return NULL;
    dt_tensor *all[3] = {tc, tx, ty};
    if (check_graphs(all, 3, "where") < 0 || prepare(st) < 0)
        return NULL;
    PyObject *base = like != NULL ? like : tx ? x : ty ? y : cond;
    return wrap_like(st, dt_where(tc, tx, sx, ty, sy), base);
}

/* x.where(condition, y) is torch.where(condition, x, y). */
static PyObject *m_where(PyObject *self, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"condition", "other", NULL};
    PyObject *cond, *other;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", kwlist, &cond, &other))
        return NULL;
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    return st ? where_core(st, cond, self, other, self) : NULL;
}

static PyObject *masked_fill_core(PyObject *self, PyObject *args, PyObject *kwargs, int inplace) {
    static char *kwlist[] = {"mask", "value", NULL};
    PyObject *mask, *value;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO", kwlist, &mask, &value))
        return NULL;
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    if (!DTPY_IS_TENSOR(st, mask)) {
        if (is_torch_tensor(st, mask))
            return torch_operand_error("masked_fill");
        return PyErr_Format(PyExc_TypeError,
                            "masked_fill(): argument 'mask' must be a dtorch.Tensor, not %.100s",
                            type_name(mask));
    }
    dt_tensor *tv;
    dt_scalar sv;
    if (tensor_or_number(st, value, "masked_fill", "value", &tv, &sv) < 0)
        return NULL;
    dt_tensor *all[3] = {((dtpy_tensor *)self)->t, ((dtpy_tensor *)mask)->t, tv};
    if (check_graphs(all, 3, "masked_fill") < 0 || prepare(st) < 0)
        return NULL;
    dt_tensor *t = dt_masked_fill(all[0], all[1], tv, sv, inplace ? DT_EW_INPLACE : 0);
    return finish(st, self, t, inplace);
}
static PyObject *m_masked_fill(PyObject *s, PyObject *a, PyObject *k) { return masked_fill_core(s, a, k, 0); }
static PyObject *m_masked_fill_(PyObject *s, PyObject *a, PyObject *k) {
    return masked_fill_core(s, a, k, 1);
}

/* clamp(min=None, max=None), clamp_min(min), clamp_max(max). */
static PyObject *clamp_core(PyObject *self, PyObject *lo, PyObject *hi, int inplace) {
    dtpy_state *st = dtpy_find_state(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    dt_tensor *tl = NULL, *th = NULL;
    dt_scalar sl = dt_scalar_int(0), sh = dt_scalar_int(0);
    int flags = inplace ? DT_EW_INPLACE : 0;
    if (lo != Py_None) {
        if (tensor_or_number(st, lo, "clamp", "min", &tl, &sl) < 0)
            return NULL;
        flags |= DT_CLAMP_MIN;
    }
    if (hi != Py_None) {
        if (tensor_or_number(st, hi, "clamp", "max", &th, &sh) < 0)
            return NULL;
        flags |= DT_CLAMP_MAX;
    }
    dt_tensor *all[3] = {((dtpy_tensor *)self)->t, tl, th};
    if (check_graphs(all, 3, "clamp") < 0 || prepare(st) < 0)
        return NULL;
    return finish(st, self, dt_clamp(all[0], tl, sl, th, sh, flags), inplace);
}

static PyObject *clamp_args(PyObject *self, PyObject *args, PyObject *kwargs, int inplace) {
    static char *kwlist[] = {"min", "max", NULL};
    PyObject *lo = Py_None, *hi = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO", kwlist, &lo, &hi))
        return NULL;
    return clamp_core(self, lo, hi, inplace);
}
static PyObject *m_clamp(PyObject *s, PyObject *a, PyObject *k) { return clamp_args(s, a, k, 0); }
static PyObject *m_clamp_(PyObject *s, PyObject *a, PyObject *k) { return clamp_args(s, a, k, 1); }
static PyObject *m_clamp_min(PyObject *s, PyObject *lo) { return clamp_core(s, lo, Py_None, 0); }
static PyObject *m_clamp_max(PyObject *s, PyObject *hi) { return clamp_core(s, Py_None, hi, 0); }

/* ------------------------------------------------------- module functions */

/* ew_binary(op, input, other, alpha=None, rounding_mode=None,
 * inplace=False): torch.<op>(input, other) where either may be a number; op
 * is a dt_binary_op (the module's BINARY_* constants). */
static PyObject *mod_ew_binary(PyObject *module, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"op", "input", "other", "alpha", "rounding_mode", "inplace", NULL};
    int op;
    PyObject *a, *b, *alpha = Py_None, *mode = Py_None;
    int inplace = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iOO|OOp:ew_binary", kwlist, &op, &a, &b, &alpha, &mode,
                                     &inplace))
        return NULL;
    if (op < 0 || op >= DT_BINARY_COUNT)
        return PyErr_Format(PyExc_ValueError, "ew_binary: unknown op %d", op);
    if (mode != Py_None) {
        const char *m = PyUnicode_Check(mode) ? PyUnicode_AsUTF8(mode) : NULL;
        if (op == DT_BINARY_DIV && m != NULL && strcmp(m, "trunc") == 0)
            op = DT_BINARY_DIV_TRUNC;
        else if (op == DT_BINARY_DIV && m != NULL && strcmp(m, "floor") == 0)
            op = DT_BINARY_DIV_FLOOR;
        else
            return PyErr_Format(
                PyExc_RuntimeError,
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found %R", mode);
    }
    dtpy_state *st = dtpy_state_of(module);
    return binary_core(st, a, b, (dt_binary_op)op, alpha, inplace, CALL_FUNCTION);
}

/* ew_where(condition, input, other) */
static PyObject *mod_ew_where(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    DTPY_NARGS(3, "ew_where");
    dtpy_state *st = dtpy_state_of(module);
    return where_core(st, args[0], args[1], args[2], NULL);
}

static PyMethodDef module_functions[] = {
    {"ew_binary", (PyCFunction)(void (*)(void))mod_ew_binary, METH_VARARGS | METH_KEYWORDS,
     "ew_binary(op, input, other, alpha=None, rounding_mode=None, inplace=False) -> Tensor"},
    {"ew_where", (PyCFunction)(void (*)(void))mod_ew_where, METH_FASTCALL,
     "ew_where(condition, input, other) -> Tensor"},
    {NULL, NULL, 0, NULL},
};

/* ------------------------------------------------------------ method table */

#define KW(name, fn, doc)                                                                                    \
    { name, (PyCFunction)(void (*)(void))fn, METH_VARARGS | METH_KEYWORDS, doc }
#define NOARGS(name, fn, doc)                                                                                \
    { name, (PyCFunction)fn, METH_NOARGS, doc }
#define UNARY_DEFS(name)                                                                                     \
    NOARGS(#name, m_##name, #name "() -> Tensor: torch." #name " elementwise."),                             \
        NOARGS(#name "_", m_##name##_, #name "_() -> self: in place (rebinds self, see docs/decisions.md).")

PyMethodDef dtpy_ew_methods[] = {
    KW("add", m_add, "add(other, *, alpha=1) -> Tensor: self + alpha * other."),
    KW("add_", m_add_, "add_(other, *, alpha=1) -> self: in place."),
    KW("sub", m_sub, "sub(other, *, alpha=1) -> Tensor: self - alpha * other."),
    KW("sub_", m_sub_, "sub_(other, *, alpha=1) -> self: in place."),
    KW("subtract", m_sub, "Alias of sub."),
    KW("multiply", m_mul, "Alias of mul."),
    KW("div", m_div,
       "div(other, *, rounding_mode=None) -> Tensor: true division, or 'trunc'/'floor' rounding."),
    KW("div_", m_div_, "div_(other, *, rounding_mode=None) -> self: in place."),
    KW("divide", m_div, "Alias of div."),
    KW("true_divide", m_div, "true_divide(other) -> Tensor: self / other."),
    KW("pow", m_pow, "pow(exponent) -> Tensor: self ** exponent."),
    KW("pow_", m_pow_, "pow_(exponent) -> self: in place."),
    KW("not_equal", m_ne, "Alias of ne."),
    KW("less", m_lt, "Alias of lt."),
    KW("less_equal", m_le, "Alias of le."),
    KW("greater", m_gt, "Alias of gt."),
    KW("greater_equal", m_ge, "Alias of ge."),
#define BINARY_ROWS_PAIR(name)                                                                               \
    KW(#name, m_##name, #name "(other) -> Tensor: torch." #name " elementwise."),                            \
        KW(#name "_", m_##name##_,                                                                           \
           #name "_(other) -> self: in place (rebinds self, see docs/decisions.md)."),
#define BINARY_ROWS_ONE(name) KW(#name, m_##name, #name "(other) -> Tensor: torch." #name " elementwise."),
#define BINARY_ROWS_NONE(name)
#define DT_BINARY_OP(E, name, tensors, scalar, row, note, result, bool_kernel, call, into, py)               \
    BINARY_ROWS_##py(name)
#include "dtorch/dtorch_ops.def"
#define UNARY_ROWS_PAIR(name) UNARY_DEFS(name),
#define UNARY_ROWS_ONE(name) NOARGS(#name, m_##name, #name "() -> Tensor: torch." #name " elementwise."),
#define UNARY_ROWS_NONE(name)
#define DT_UNARY_OP(E, name, result, bool_kernel, into, py, ...) UNARY_ROWS_##py(name)
#include "dtorch/dtorch_ops.def"
    NOARGS("negative", m_neg, "Alias of neg."),
    NOARGS("absolute", m_abs, "Alias of abs."),
    NOARGS("fix", m_trunc, "Alias of trunc."),
    KW("round", m_round, "round(*, decimals=0) -> Tensor: round half to even."),
    KW("round_", m_round_, "round_(*, decimals=0) -> self: in place."),
    {"_cast", m_cast, METH_O,
     "_cast(dtype) -> Tensor: self.to(dtype); self when the dtype is already dtype."},
    NOARGS("_alias", m_alias, "_alias() -> Tensor: a new object for the same value."),
    NOARGS("half", m_half, "half() -> Tensor: self.to(torch.float16)."),
    NOARGS("float", m_float, "float() -> Tensor: self.to(torch.float32)."),
    NOARGS("double", m_double, "double() -> Tensor: self.to(torch.float64)."),
    NOARGS("bfloat16", m_bfloat16, "bfloat16() -> Tensor: self.to(torch.bfloat16)."),
    NOARGS("int", m_int, "int() -> Tensor: self.to(torch.int32)."),
    NOARGS("long", m_long, "long() -> Tensor: self.to(torch.int64)."),
    NOARGS("bool", m_bool, "bool() -> Tensor: self.to(torch.bool)."),
    NOARGS("short", m_short, "short() -> Tensor: self.to(torch.int16)."),
    NOARGS("char", m_char, "char() -> Tensor: self.to(torch.int8)."),
    NOARGS("byte", m_byte, "byte() -> Tensor: self.to(torch.uint8)."),
    KW("where", m_where, "where(condition, other) -> Tensor: torch.where(condition, self, other)."),
    KW("masked_fill", m_masked_fill, "masked_fill(mask, value) -> Tensor: value where mask is True."),
    KW("masked_fill_", m_masked_fill_, "masked_fill_(mask, value) -> self: in place."),
    KW("clamp", m_clamp, "clamp(min=None, max=None) -> Tensor"),
    KW("clamp_", m_clamp_, "clamp_(min=None, max=None) -> self: in place."),
    KW("clip", m_clamp, "Alias of clamp."),
    KW("clip_", m_clamp_, "Alias of clamp_."),
    {"clamp_min", m_clamp_min, METH_O, "clamp_min(min) -> Tensor"},
    {"clamp_max", m_clamp_max, METH_O, "clamp_max(max) -> Tensor"},
    {NULL, NULL, 0, NULL},
};

/* The function forms Python makes from the table: a row with a registry row
 * and generated methods (its py column) gets dtorch.<name>(...). */
typedef struct fn_row {
    const char *name;
    int code;
    int function;
} fn_row;
#define FN_ROW 1
#define FN_NOROW 0
#define FN_PAIR 1
#define FN_ONE 1
#define FN_NONE 0
static const fn_row binary_rows[] = {
#define DT_BINARY_OP(E, name, tensors, scalar, row, note, result, bool_kernel, call, into, py)               \
    {#name, DT_BINARY_##E, FN_##row && FN_##py},
#include "dtorch/dtorch_ops.def"
};
static const fn_row unary_rows[] = {
#define DT_UNARY_OP(E, name, result, bool_kernel, into, py, partial, row)                                    \
    {#name, DT_UNARY_##E, FN_##row && FN_##py},
#include "dtorch/dtorch_ops.def"
};

/* module.<attr> = {name: code} of the rows with a function form. */
static int add_functions(PyObject *module, const char *attr, const fn_row *rows, size_t n) {
    PyObject *d = PyDict_New();
    if (d == NULL)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (!rows[i].function)
            continue;
        PyObject *code = PyLong_FromLong(rows[i].code);
        int rc = code ? PyDict_SetItemString(d, rows[i].name, code) : -1;
        Py_XDECREF(code);
        if (rc < 0) {
            Py_DECREF(d);
            return -1;
        }
    }
    int rc = PyModule_AddObjectRef(module, attr, d);
    Py_DECREF(d);
    return rc;
}

/* The module functions, the BINARY_<op> constants that Python passes to
 * ew_binary and the BINARY_FUNCTIONS / UNARY_FUNCTIONS tables (generated
 * from dtorch_ops.def). */
int dtpy_add_elementwise_methods(PyObject *module) {
    if (PyModule_AddFunctions(module, module_functions) < 0)
        return -1;
#define DT_BINARY_OP(E, ...)                                                                                 \
    if (PyModule_AddIntConstant(module, "BINARY_" #E, DT_BINARY_##E) < 0)                                    \
        return -1;
#include "dtorch/dtorch_ops.def"
    if (add_functions(module, "BINARY_FUNCTIONS", binary_rows, sizeof binary_rows / sizeof *binary_rows) <
            0 ||
        add_functions(module, "UNARY_FUNCTIONS", unary_rows, sizeof unary_rows / sizeof *unary_rows) < 0)
        return -1;
    return 0;
}
