/*
 * The one map from a libdtorch status to a Python exception (as
 * Modules/_sqlite's util.c): every _C function that sees a failed dtorch call
 * raises through dtpy_raise or dtpy_raise_last, with dt_last_error() as the
 * message. The two dtorch exception types (PlacementError, KernelError) are
 * created by module.c's init and kept in the module state.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

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
