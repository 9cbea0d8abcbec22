/*
 * dtorch._C entry points for tests and debugging (private; not part of the
 * dtorch API):
 *   _test_gate() -> gate            a closed dt_debug_gate in a capsule; the
 *                                   capsule's destructor opens it, so a
 *                                   forgotten gate cannot hold a worker
 *   _test_gate_open(gate)           opens it (idempotent)
 *   _test_gate_is_open(gate) -> bool
 *   _test_gated(x, gate) -> Tensor  a copy of x made once the gate opens
 *   _graph_stats(graph, reset_peak) -> dict of dt_graph_stats' fields
 *   _cached_bytes() -> int          dt_memory_cached_bytes()
 *   _fail_allocs(n)                 dt_debug_fail_allocs(n): the controller's
 *                                   (n+1)-th allocation while lowering fails
 *                                   once (negative disarms)
 *   _fail_allocs_pending() -> bool  dt_debug_fail_allocs_pending()
 *   _test_corrupt_next_batch(node)  dt_debug_cluster_corrupt_batch(node): the
 *                                   next batch shipped to worker node `node`
 *                                   cannot be decoded there
 *   _test_fake_cuda(n)              dt_debug_fake_cuda(n): this process sees n
 *                                   stand-in GPUs (CPU kernels) for graphs made
 *                                   afterwards
 * dtorch.test.test_util wraps the gate in a context manager.
 *
 * Every function runs on a Python thread holding the GIL; none waits.
 */
#include <limits.h>

#include "dtorch/dtorch_cluster.h"
#include "dtorch/dtorch_replay.h"
#include "dtorch/dtorch_schedule.h"
#include "dtorch_py.h"

#define GATE_CAPSULE "dtorch._test_gate"

static void gate_capsule_destructor(PyObject *cap) {
    dt_debug_gate_release(PyCapsule_GetPointer(cap, GATE_CAPSULE));
}

static dt_debug_gate *gate_arg(PyObject *o) {
    if (!PyCapsule_IsValid(o, GATE_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError, "expected a gate made by dtorch._C._test_gate()");
        return NULL;
    }
    return PyCapsule_GetPointer(o, GATE_CAPSULE);
}

static PyObject *mod_test_gate(PyObject *module, PyObject *unused) {
    (void)unused;
    dt_debug_gate *gate = NULL;
    if (dt_debug_gate_create(&gate) != DT_OK)
        return dtpy_raise_last(dtpy_state_of(module));
    PyObject *cap = PyCapsule_New(gate, GATE_CAPSULE, gate_capsule_destructor);
    if (cap == NULL)
        dt_debug_gate_release(gate);
    return cap;
}

static PyObject *mod_test_gate_open(PyObject *module, PyObject *arg) {
    (void)module;
    dt_debug_gate *gate = gate_arg(arg);
    if (gate == NULL)
        return NULL;
    dt_debug_gate_open(gate);
    Py_RETURN_NONE;
}

static PyObject *mod_test_gate_is_open(PyObject *module, PyObject *arg) {
    (void)module;
    dt_debug_gate *gate = gate_arg(arg);
    if (gate == NULL)
        return NULL;
    return PyBool_FromLong(dt_debug_gate_is_open(gate));
}

static PyObject *mod_test_gated(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    dtpy_state *st = dtpy_state_of(module);
    if (nargs != 2 || !DTPY_IS_TENSOR(st, args[0]))
        return PyErr_Format(PyExc_TypeError, "_test_gated(x, gate) takes a dtorch.Tensor and a gate");
    dt_debug_gate *gate = gate_arg(args[1]);
    if (gate == NULL)
        return NULL;
    dtpy_tensor *x = (dtpy_tensor *)args[0];
    dtpy_record_call_site(st);
    return dtpy_tensor_wrap_like(st, dt_debug_gated(x->t, gate), x);
}

static PyObject *mod_graph_stats(PyObject *module, PyObject *args) {
    dtpy_state *st = dtpy_state_of(module);
    PyObject *graph;
    int reset_peak = 0;
    if (!PyArg_ParseTuple(args, "O|p", &graph, &reset_peak))
        return NULL;
    dt_graph *g = dtpy_graph_arg(st, graph);
    if (g == NULL)
        return NULL;
    dt_graph_stats s;
    int64_t hits, misses;
    int64_t cap, lau, eag;
    if (dt_graph_get_stats(g, &s, reset_peak) != DT_OK ||
        dt_graph_get_replay_stats(g, &hits, &misses) != DT_OK ||
        dt_debug_graph_stats(g, &cap, &lau, &eag) != DT_OK)
        return dtpy_raise_last(st);
    return Py_BuildValue(
        "{sLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsLsL}", "submitted", (long long)s.submitted, "in_flight",
        (long long)s.in_flight, "peak_in_flight", (long long)s.peak_in_flight, "in_flight_limit",
        (long long)s.in_flight_limit, "check_interval", (long long)s.check_interval, "flow_waits",
        (long long)s.flow_waits, "nodes_eliminated", (long long)s.nodes_eliminated, "kernels_in_place",
        (long long)s.kernels_in_place, "nodes_fused", (long long)s.nodes_fused, "cancelled",
        (long long)s.cancelled, "replay_hits", (long long)hits, "replay_misses", (long long)misses,
        "replay_run_hits", (long long)dt_debug_replay_run_hits(g), "nodes_reordered",
        (long long)dt_debug_nodes_reordered(g), "bcast_nodes", (long long)dt_debug_bcast_nodes(g),
        "step_runs", (long long)dt_debug_step_runs(g), "chain_blocks", (long long)dt_debug_chain_blocks(g),
        "bcast_collectives", (long long)dt_debug_bcast_collectives(g), "graph_captured", (long long)cap,
        "graph_launched", (long long)lau, "graph_eager", (long long)eag);
}

/* Parses (graph, flag): 0 with *g and *on set, else -1 with an exception. */
static int graph_and_flag(PyObject *module, PyObject *args, dt_graph **g, int *on) {
    dtpy_state *st = dtpy_state_of(module);
    PyObject *graph;
    if (!PyArg_ParseTuple(args, "Op", &graph, on))
        return -1;
    *g = dtpy_graph_arg(st, graph);
    return *g == NULL ? -1 : 0;
}

/* A graph's on/off switch: (graph, on) -> None. */
static PyObject *set_switch(PyObject *module, PyObject *args, dt_status (*set)(dt_graph *, int)) {
    dt_graph *g;
    int on;
    if (graph_and_flag(module, args, &g, &on) < 0)
        return NULL;
    if (set(g, on) != DT_OK)
        return dtpy_raise_last(dtpy_state_of(module));
    Py_RETURN_NONE;
}

static PyObject *mod_set_chains(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_graph_set_chains);
}

static PyObject *mod_set_replay(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_graph_set_replay);
}

static PyObject *mod_set_bcast(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_graph_set_bcast);
}

static PyObject *mod_set_bgroup(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_graph_set_bgroup);
}

static PyObject *mod_set_step(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_graph_set_step);
}

static PyObject *mod_set_cuda_graph(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_graph_set_cuda_graph);
}

static PyObject *mod_set_schedule(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_graph_set_schedule);
}

static PyObject *mod_controller_cpu_ns(PyObject *module, PyObject *graph) {
    dtpy_state *st = dtpy_state_of(module);
    dt_graph *g = dtpy_graph_arg(st, graph);
    return g == NULL ? NULL : PyLong_FromLongLong((long long)dt_debug_controller_cpu_ns(g));
}

static PyObject *mod_lowering_ns(PyObject *module, PyObject *args) {
    dt_graph *g;
    int on;
    if (graph_and_flag(module, args, &g, &on) < 0)
        return NULL;
    return PyLong_FromLongLong((long long)dt_debug_lowering_ns(g, on));
}

/* Collective groups lowered so far in the process (core.h). */
static PyObject *mod_collectives_lowered(PyObject *module, PyObject *unused) {
    (void)module, (void)unused;
    return PyLong_FromLong(dt_debug_collectives_lowered());
}

/* x's segmented-dim descriptor (segment.h, dt__seg): None for a regular
 * layout, else (dim, mesh_dim, [lengths in user order]), mesh_dim a tuple
 * (most major first) when the dim was cut over several mesh dims. */
static PyObject *mod_segments(PyObject *module, PyObject *arg) {
    dtpy_state *st = dtpy_state_of(module);
    if (!DTPY_IS_TENSOR(st, arg))
        return PyErr_Format(PyExc_TypeError, "_segments: expected a dtorch tensor");
    int dim = 0, md = 0;
    int64_t len[8];
    int n = dt_debug_segments(((dtpy_tensor *)arg)->t, &dim, &md, len);
    if (n <= 0)
        Py_RETURN_NONE;
    PyObject *lens = PyList_New(n);
    if (!lens)
        return NULL;
    for (int i = 0; i < n; i++)
        PyList_SET_ITEM(lens, i, PyLong_FromLongLong((long long)len[i]));
    int mds[8];
    int nmd = dt_debug_segment_mesh_dims(((dtpy_tensor *)arg)->t, mds);
    if (nmd <= 1)
        return Py_BuildValue("(iiN)", dim, md, lens);
    PyObject *grid = PyTuple_New(nmd);
    if (!grid) {
        Py_DECREF(lens);
        return NULL;
    }
    for (int i = 0; i < nmd; i++)
        PyTuple_SET_ITEM(grid, i, PyLong_FromLong(mds[i]));
    return Py_BuildValue("(iNN)", dim, grid, lens);
}

static PyObject *mod_hold_controller(PyObject *module, PyObject *args) {
    return set_switch(module, args, dt_debug_hold_controller);
}

static PyObject *mod_cached_bytes(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyLong_FromLongLong((long long)dt_memory_cached_bytes());
}

static PyObject *mod_fail_allocs(PyObject *module, PyObject *arg) {
    (void)module;
    long long n = PyLong_AsLongLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    dt_debug_fail_allocs((int64_t)n);
    Py_RETURN_NONE;
}

static PyObject *mod_fail_allocs_pending(PyObject *module, PyObject *unused) {
    (void)module;
    (void)unused;
    return PyBool_FromLong(dt_debug_fail_allocs_pending());
}

static PyObject *mod_corrupt_next_batch(PyObject *module, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (dt_debug_cluster_corrupt_batch((int)n) != DT_OK)
        return dtpy_raise_last(dtpy_state_of(module));
    Py_RETURN_NONE;
}

static PyObject *mod_fake_cuda(PyObject *module, PyObject *arg) {
    long n = PyLong_AsLong(arg);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < INT_MIN || n > INT_MAX || dt_debug_fake_cuda((int)n) != DT_OK)
        return n < INT_MIN || n > INT_MAX ? PyErr_Format(PyExc_ValueError, "_test_fake_cuda: %ld GPUs", n)
                                          : dtpy_raise_last(dtpy_state_of(module));
    Py_RETURN_NONE;
}

static PyMethodDef testing_methods[] = {
    {"_test_fake_cuda", mod_fake_cuda, METH_O,
     "_test_fake_cuda(n): graphs made afterwards see n stand-in GPUs served by CPU kernels (tests only)"},
    {"_test_corrupt_next_batch", mod_corrupt_next_batch, METH_O,
     "_test_corrupt_next_batch(node): the next batch shipped to worker node `node` cannot be decoded there "
     "(tests only)"},
    {"_test_gate", mod_test_gate, METH_NOARGS, "_test_gate() -> a closed gate (tests only)"},
    {"_test_gate_open", mod_test_gate_open, METH_O, "_test_gate_open(gate): opens it"},
    {"_test_gate_is_open", mod_test_gate_is_open, METH_O, "_test_gate_is_open(gate) -> bool"},
    {"_test_gated", (PyCFunction)(void (*)(void))mod_test_gated, METH_FASTCALL,
     "_test_gated(x, gate) -> a copy of x produced once the gate is open"},
    {"_graph_stats", mod_graph_stats, METH_VARARGS,
     "_graph_stats(graph, reset_peak=False) -> {submitted, in_flight, peak_in_flight, in_flight_limit, "
     "check_interval, flow_waits, nodes_eliminated, kernels_in_place, nodes_fused, cancelled, replay_hits, "
     "replay_misses, replay_run_hits, nodes_reordered, bcast_nodes, step_runs, chain_blocks, "
     "bcast_collectives}"},
    {"_set_chains", mod_set_chains, METH_VARARGS,
     "_set_chains(graph, on): turns the blocked elementwise chains on or off"},
    {"_set_replay", mod_set_replay, METH_VARARGS,
     "_set_replay(graph, on): turns capture and replay on or off"},
    {"_set_bcast", mod_set_bcast, METH_VARARGS,
     "_set_bcast(graph, on): turns the device-independent records on or off"},
    {"_set_bgroup", mod_set_bgroup, METH_VARARGS, "_set_bgroup(graph, on): turns blob groups on or off"},
    {"_set_step", mod_set_step, METH_VARARGS, "_set_step(graph, on): turns runs of shared records on or off"},
    {"_set_cuda_graph", mod_set_cuda_graph, METH_VARARGS,
     "_set_cuda_graph(graph, on): turns CUDA graphs of repeated run slots on or off"},
    {"_set_schedule", mod_set_schedule, METH_VARARGS,
     "_set_schedule(graph, on): turns the overlap schedule on or off"},
    {"_lowering_ns", mod_lowering_ns, METH_VARARGS,
     "_lowering_ns(graph, on) -> ns the controller's lowering step took while timed; turns timing on/off"},
    {"_controller_cpu_ns", mod_controller_cpu_ns, METH_O,
     "_controller_cpu_ns(graph) -> CPU ns the graph's controller thread has used (-1: unknown)"},
    {"_hold_controller", mod_hold_controller, METH_VARARGS,
     "_hold_controller(graph, hold): the controller takes nothing while held (tests only)"},
    {"_collectives_lowered", mod_collectives_lowered, METH_NOARGS,
     "_collectives_lowered() -> collective groups lowered so far (tests only)"},
    {"_segments", mod_segments, METH_O,
     "_segments(x) -> None or (dim, mesh_dim or (mesh dims), [segment lengths])"},
    {"_cached_bytes", mod_cached_bytes, METH_NOARGS, "_cached_bytes() -> bytes the backends keep cached"},
    {"_fail_allocs", mod_fail_allocs, METH_O,
     "_fail_allocs(n): the controller's (n+1)-th lowering allocation fails"},
    {"_fail_allocs_pending", mod_fail_allocs_pending, METH_NOARGS, "_fail_allocs_pending() -> bool"},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_testing_methods(PyObject *module) { return PyModule_AddFunctions(module, testing_methods); }
