/*
 * The GIL-free waits of the extension: every wait on a dtorch future, on a
 * graph's pipeline capacity or on a cancelled graph's threads releases the
 * GIL and runs as a loop of timed waits of WAIT_SLICE_MS, with
 * PyErr_CheckSignals() between them so Ctrl-C interrupts it (as
 * Modules/_queuemodule.c waits).
 *
 * Every function runs on a Python thread holding the GIL, which it releases
 * around each slice.
 */
#include "dtorch_py.h"

#include <time.h>

/* How long one GIL-released wait lasts before signals are checked. */
#define WAIT_SLICE_MS 50

static int64_t monotonic_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int dtpy_wait_future(dtpy_state *st, dt_future *f) {
    if (dt_future_is_ready(f))
        return 0;
    for (;;) {
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_future_wait(f, WAIT_SLICE_MS);
        Py_END_ALLOW_THREADS if (s == DT_OK) return 0;
        if (s != DT_ETIMEDOUT) {
            dtpy_raise(st, s);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
    }
}

int dtpy_wait_capacity_slow(void) {
    dt_graph *g = dt_take_backpressure();
    if (g == NULL)
        return 0;
    int rc = 0;
    for (;;) {
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_graph_wait_capacity(g, WAIT_SLICE_MS);
        Py_END_ALLOW_THREADS if (s != DT_ETIMEDOUT) break; /* capacity, or a forked graph whose op already
                                                              failed */
        if (PyErr_CheckSignals() < 0) {
            rc = -1;
            break;
        }
    }
    /* The last reference may join the graph's threads. */
    Py_BEGIN_ALLOW_THREADS dt_graph_release(g);
    Py_END_ALLOW_THREADS return rc;
}

int dtpy_wait_for(dtpy_state *st, dt_future *f, long long timeout_ms) {
    if (timeout_ms < 0)
        return dtpy_wait_future(st, f) < 0 ? -1 : 1;
    if (dt_future_is_ready(f))
        return 1;
    int64_t deadline = monotonic_ms() + timeout_ms;
    for (;;) {
        long long slice = (long long)(deadline - monotonic_ms());
        if (slice > WAIT_SLICE_MS)
            slice = WAIT_SLICE_MS;
        if (slice < 0)
            slice = 0;
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_future_wait(f, slice);
        Py_END_ALLOW_THREADS if (s == DT_OK) return 1;
        if (s != DT_ETIMEDOUT) {
            dtpy_raise(st, s);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
        if (slice == 0 || monotonic_ms() >= deadline)
            return dt_future_is_ready(f) ? 1 : 0;
    }
}

int dtpy_wait_cancel(dtpy_state *st, dt_graph *g, double timeout) {
    int64_t deadline = timeout < 0 ? -1 : monotonic_ms() + (int64_t)(timeout * 1000.0);
    for (;;) {
        int64_t slice = WAIT_SLICE_MS;
        if (deadline >= 0 && deadline - monotonic_ms() < slice)
            slice = deadline - monotonic_ms() > 0 ? deadline - monotonic_ms() : 0;
        dt_status s;
        Py_BEGIN_ALLOW_THREADS s = dt_graph_cancel(g, slice);
        Py_END_ALLOW_THREADS if (s == DT_OK) return 1;
        if (s != DT_ETIMEDOUT) {
            dtpy_raise(st, s);
            return -1;
        }
        if (PyErr_CheckSignals() < 0)
            return -1;
        if (deadline >= 0 && monotonic_ms() >= deadline)
            return 0;
    }
}
