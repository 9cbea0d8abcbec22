/*
 * The call-site recorder: before an op, the innermost Python frame outside
 * the dtorch package becomes the calling thread's call site
 * (dt_set_call_site), so a kernel error or an explain record names the
 * user's file:line.
 *
 * Every function runs on a Python thread holding the GIL.
 */
#include "dtorch_py.h"

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
