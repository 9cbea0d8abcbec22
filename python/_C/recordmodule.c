/*
 * dtorch._C entry points for dtorch.explain() and dtorch.profiler.trace()
 * (private; python/dtorch/_explain.py and profiler.py wrap them):
 *   _record_enable(kind, on)        dt_record_enable (RECORD_EXPLAIN, RECORD_TRACE)
 *   _record_enabled(kind) -> bool
 *   _graph_take_explain(graph) -> ([(file, line, collective, mesh_dim, mesh_dim_name, op, bytes)], dropped)
 *   _graph_take_trace(graph) -> ([node tuples], [kernel tuples], dropped): a node is
 *       (id, op, file, line, client_thread, client_begin_ns, client_end_ns, lower_begin_ns,
 *        lower_end_ns, dtype or None, [shape lists]); a kernel is (node, device_type,
 *        device_id, stream_kind, seq, op, kernel, file, line, begin_ns, end_ns, bytes)
 * The take functions wait (GIL released) for the graph's work issued so far.
 */
#include "dtorch/dtorch_record.h"
#include "dtorch_py.h"

static PyObject *mod_record_enable(PyObject *module, PyObject *args) {
    int kind, on;
    if (!PyArg_ParseTuple(args, "ip", &kind, &on))
        return NULL;
    if (dt_record_enable((dt_record_kind)kind, on) != DT_OK)
        return dtpy_raise_last(dtpy_state_of(module));
    Py_RETURN_NONE;
}

static PyObject *mod_record_enabled(PyObject *module, PyObject *arg) {
    (void)module;
    long kind = PyLong_AsLong(arg);
    if (kind == -1 && PyErr_Occurred())
        return NULL;
    return PyBool_FromLong(dt_record_enabled((dt_record_kind)kind));
}

static PyObject *str_or_none(const char *s) {
    if (!s)
        Py_RETURN_NONE;
    return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace");
}

static PyObject *mod_take_explain(PyObject *module, PyObject *graph) {
    dtpy_state *st = dtpy_state_of(module);
    dt_graph *g = dtpy_graph_arg(st, graph);
    if (!g)
        return NULL;
    dt_explain_record *recs = NULL;
    size_t n = 0;
    int64_t dropped = 0;
    dt_status s;
    Py_BEGIN_ALLOW_THREADS s = dt_graph_take_explain(g, &recs, &n, &dropped);
    Py_END_ALLOW_THREADS if (s != DT_OK) return dtpy_raise_last(st);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        const dt_explain_record *e = &recs[i];
        PyObject *file = str_or_none(e->file);
        PyObject *t =
            file ? Py_BuildValue("(NisisNL)", file, (int)e->line, dt_comm_kind_name(e->kind),
                                 (int)e->mesh_dim, e->mesh_dim_name, str_or_none(e->op), (long long)e->bytes)
                 : NULL;
        if (!t) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, t);
    }
    dt_record_free(recs);
    if (!list)
        return NULL;
    return Py_BuildValue("(NL)", list, (long long)dropped);
}

static PyObject *node_tuple(dtpy_state *st, const dt_trace_node *nd) {
    PyObject *shapes = PyList_New(nd->n_shapes);
    for (int i = 0; shapes && i < nd->n_shapes; i++) {
        PyObject *sh = PyList_New(nd->ndim[i]);
        for (int d = 0; sh && d < nd->ndim[i]; d++) {
            PyObject *v = PyLong_FromLongLong((long long)nd->shape[i][d]);
            if (!v) {
                Py_CLEAR(sh);
                break;
            }
            PyList_SET_ITEM(sh, d, v);
        }
        if (!sh) {
            Py_CLEAR(shapes);
            break;
        }
        PyList_SET_ITEM(shapes, i, sh);
    }
    if (!shapes)
        return NULL;
    PyObject *dtype = nd->dtype >= 0 && nd->dtype < DT_DTYPE_COUNT && st->torch_dtypes[nd->dtype]
                          ? st->torch_dtypes[nd->dtype]
                          : Py_None;
    Py_INCREF(dtype);
    return Py_BuildValue("(KNNiILLLLNN)", (unsigned long long)nd->id, str_or_none(nd->op),
                         str_or_none(nd->file), (int)nd->line, (unsigned int)nd->client_thread,
                         (long long)nd->client_begin_ns, (long long)nd->client_end_ns,
                         (long long)nd->lower_begin_ns, (long long)nd->lower_end_ns, dtype, shapes);
}

static PyObject *mod_take_trace(PyObject *module, PyObject *graph) {
    dtpy_state *st = dtpy_state_of(module);
    dt_graph *g = dtpy_graph_arg(st, graph);
    if (!g)
        return NULL;
    dt_trace_node *nodes = NULL;
    dt_trace_kernel *ks = NULL;
    size_t nn = 0, nk = 0;
    int64_t dropped = 0;
    dt_status s;
    Py_BEGIN_ALLOW_THREADS s = dt_graph_take_trace(g, &nodes, &nn, &ks, &nk, &dropped);
    Py_END_ALLOW_THREADS if (s != DT_OK) return dtpy_raise_last(st);
    PyObject *ln = PyList_New((Py_ssize_t)nn), *lk = PyList_New((Py_ssize_t)nk);
    for (size_t i = 0; ln && lk && i < nn; i++) {
        PyObject *t = node_tuple(st, &nodes[i]);
        if (!t) {
            Py_CLEAR(ln);
            break;
        }
        PyList_SET_ITEM(ln, (Py_ssize_t)i, t);
    }
    for (size_t i = 0; ln && lk && i < nk; i++) {
        const dt_trace_kernel *k = &ks[i];
        PyObject *t =
            Py_BuildValue("(KiLiKNNNiLLL)", (unsigned long long)k->node, (int)k->device_type,
                          (long long)k->device_id, (int)k->stream_kind, (unsigned long long)k->seq,
                          str_or_none(k->op), str_or_none(k->kernel), str_or_none(k->file), (int)k->line,
                          (long long)k->begin_ns, (long long)k->end_ns, (long long)k->bytes);
        if (!t) {
            Py_CLEAR(lk);
            break;
        }
        PyList_SET_ITEM(lk, (Py_ssize_t)i, t);
    }
    dt_record_free(nodes);
    dt_record_free(ks);
    if (!ln || !lk) {
        Py_XDECREF(ln);
        Py_XDECREF(lk);
        return NULL;
    }
    return Py_BuildValue("(NNL)", ln, lk, (long long)dropped);
}

static PyMethodDef record_methods[] = {
    {"_record_enable", mod_record_enable, METH_VARARGS,
     "_record_enable(kind, on): 0 explain, 1 trace (nests)"},
    {"_record_enabled", mod_record_enabled, METH_O, "_record_enabled(kind) -> bool"},
    {"_graph_take_explain", mod_take_explain, METH_O,
     "_graph_take_explain(graph) -> (records, dropped): waits for the graph, then its explain records"},
    {"_graph_take_trace", mod_take_trace, METH_O,
     "_graph_take_trace(graph) -> (nodes, kernels, dropped): waits for the graph, then its trace records"},
    {NULL, NULL, 0, NULL},
};

int dtpy_add_record_methods(PyObject *module) {
    static const dtpy_constant kinds[] = {{"RECORD_EXPLAIN", DT_RECORD_EXPLAIN},
                                          {"RECORD_TRACE", DT_RECORD_TRACE}};
    if (PyModule_AddFunctions(module, record_methods) < 0)
        return -1;
    return DTPY_ADD_CONSTANTS(module, kinds);
}
