/*
 * Test and debugging aids: a graph's pipeline counters (dt_graph_get_stats),
 * the switches of its opt-in mechanisms, holding its controller, and gated
 * values (dt_debug_gated; the gates themselves are core/records/gate.c).
 *
 * Threads: client threads (any).
 */
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/records/bgroup.h"
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/mesh.h"
#include "core/records/node.h"
#include "core/worker/stream_int.h"
#include "dtorch/dtorch_replay.h"
#include "dtorch/dtorch_schedule.h"

/* ------------------------------------------------------------ stats */

dt_status dt_graph_get_stats(dt_graph *g, dt_graph_stats *out, int reset_peak) {
    if (!dt__graph_ok(g) || !out)
        return dt__error(DT_EINVAL, "graph_get_stats: %s is %s", dt__graph_ok(g) ? "out" : "graph",
                         dt__handle_bad(dt__graph_ok(g) ? (const void *)out : (const void *)g));
    memset(out, 0, sizeof *out);
    out->submitted = atomic_load(&g->submitted);
    out->in_flight = dt__backlog(g);
    out->peak_in_flight = atomic_load(&g->peak_backlog);
    out->in_flight_limit = DT_BACKLOG_MAX;
    out->check_interval = DT_BACKLOG_STRIDE;
    out->flow_waits = atomic_load(&g->flow_waits);
    out->nodes_eliminated = atomic_load(&g->nodes_eliminated);
    out->kernels_in_place = atomic_load(&g->kernels_in_place);
    out->nodes_fused = atomic_load(&g->nodes_fused);
    out->cancelled = atomic_load(&g->dropped);
    if (reset_peak)
        atomic_store(&g->peak_backlog, out->in_flight);
    return DT_OK;
}

/* The switches below: one atomic_int field of the graph, at `at`. */
static dt_status set_switch(dt_graph *g, size_t at, const char *name, int on) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph_set_%s: graph is %s", name, dt__handle_bad(g));
    atomic_store((atomic_int *)((char *)g + at), on != 0);
    return DT_OK;
}

dt_status dt_graph_set_chains(dt_graph *g, int on) {
    return set_switch(g, offsetof(dt_graph, chains), "chains", on);
}

dt_status dt_graph_set_replay(dt_graph *g, int on) {
    return set_switch(g, offsetof(dt_graph, replay), "replay", on);
}

dt_status dt_graph_set_bcast(dt_graph *g, int on) {
    return set_switch(g, offsetof(dt_graph, bcast), "bcast", on);
}

dt_status dt_graph_set_bgroup(dt_graph *g, int on) {
    return set_switch(g, offsetof(dt_graph, bgroup), "bgroup", on);
}

dt_status dt_graph_set_step(dt_graph *g, int on) {
    return set_switch(g, offsetof(dt_graph, step), "step", on);
}

int64_t dt_debug_step_runs(dt_graph *g) { return dt__graph_ok(g) ? atomic_load(&g->step_runs) : -1; }

dt_status dt_graph_set_cuda_graph(dt_graph *g, int on) {
    return set_switch(g, offsetof(dt_graph, cuda_graph), "cuda_graph", on);
}

dt_status dt_debug_graph_stats(dt_graph *g, int64_t *captured, int64_t *launched, int64_t *eager) {
    if (!dt__graph_ok(g) || !captured || !launched || !eager)
        return dt__error(DT_EINVAL, "debug_graph_stats: %s", dt__graph_ok(g) ? "NULL argument" : "bad graph");
    *captured = atomic_load(&g->graph_captured);
    *launched = atomic_load(&g->graph_launched);
    *eager = atomic_load(&g->graph_eager);
    return DT_OK;
}

dt_status dt_debug_event(dt_tensor *t, int64_t device, int *kind, int64_t *device_id, uint64_t *seq) {
    if (!dt__tensor_ok(t) || !kind || !device_id || !seq)
        return dt__error(DT_EINVAL, "debug_event: %s", dt__tensor_ok(t) ? "NULL argument" : "bad tensor");
    dt_status st = dt_graph_sync(t->graph);
    if (st != DT_OK)
        return st;
    const dt__tval *v = t->v;
    if (device < 0 || device >= v->meta.mesh->ndev || !v->blobs || !v->blobs[device])
        return dt__error(DT_EINVAL, "debug_event: no blob on device %lld", (long long)device);
    const dt__stream *p = dt__blob_event(v->blobs[device], seq);
    *kind = p ? p->kind : -1;
    *device_id = p ? p->device_id : -1;
    if (!p)
        *seq = 0;
    return DT_OK;
}

int64_t dt_debug_chain_blocks(dt_graph *g) { return dt__graph_ok(g) ? atomic_load(&g->chain_blocks) : -1; }

int64_t dt_debug_bcast_nodes(dt_graph *g) { return dt__graph_ok(g) ? atomic_load(&g->bcast_nodes) : -1; }

dt_status dt_debug_coll_log(dt_graph *g, int cap) {
    if (!dt__graph_ok(g) || cap < 1)
        return dt__error(DT_EINVAL, "debug_coll_log: %s", cap < 1 ? "cap < 1" : "bad graph");
    dt__coll_logent *log = dt__calloc((size_t)cap, sizeof *log);
    if (!log)
        return dt__error(DT_ENOMEM, "debug_coll_log: out of memory");
    dt__free(g->coll_log);
    g->coll_log_cap = cap;
    atomic_store(&g->coll_log_n, 0);
    g->coll_log = log;
    return DT_OK;
}

int64_t dt_debug_coll_noted(dt_graph *g, int64_t i, int64_t *device_id, int *stream_kind, uint64_t *group,
                            uint64_t *seq, int *rank) {
    if (!dt__graph_ok(g) || !g->coll_log)
        return -1;
    int64_t n = atomic_load(&g->coll_log_n);
    n = n < g->coll_log_cap ? n : g->coll_log_cap;
    if (i >= 0 && i < n && device_id && stream_kind && group && seq && rank) {
        const dt__coll_logent *e = &g->coll_log[i];
        *device_id = e->device_id;
        *stream_kind = e->stream_kind;
        *group = e->group;
        *seq = e->seq;
        *rank = e->rank;
    }
    return n;
}

int64_t dt_debug_bcast_collectives(dt_graph *g) {
    return dt__graph_ok(g) ? atomic_load(&g->bcast_colls) : -1;
}

dt_status dt_graph_set_schedule(dt_graph *g, int on) {
    return set_switch(g, offsetof(dt_graph, schedule), "schedule", on);
}

int64_t dt_debug_nodes_reordered(dt_graph *g) {
    if (!dt__graph_ok(g))
        return -1;
    return atomic_load(&g->nodes_reordered);
}

dt_status dt_graph_get_replay_stats(dt_graph *g, int64_t *hits, int64_t *misses) {
    if (!dt__graph_ok(g) || !hits || !misses)
        return dt__error(DT_EINVAL, "graph_get_replay_stats: %s",
                         dt__graph_ok(g) ? "NULL counter" : "bad graph");
    *hits = atomic_load(&g->replay_hits);
    *misses = atomic_load(&g->replay_misses);
    return DT_OK;
}

int64_t dt_debug_replay_run_hits(dt_graph *g) {
    return dt__graph_ok(g) ? atomic_load(&g->replay_run_hits) : -1;
}

int64_t dt_debug_lowering_ns(dt_graph *g, int on) {
    if (!dt__graph_ok(g))
        return -1;
    atomic_store(&g->time_lowering, on != 0);
    return atomic_load(&g->lowering_ns);
}

int64_t dt_debug_controller_cpu_ns(dt_graph *g) {
    if (!dt__graph_ok(g))
        return -1;
    /* life_lock: the controller is not joined (its thread id is valid) meanwhile. */
    pthread_mutex_lock(&g->life_lock);
    int64_t ns = -1;
    clockid_t cid;
    struct timespec ts;
    if (!g->shut_down && pthread_getcpuclockid(g->ctl, &cid) == 0 && clock_gettime(cid, &ts) == 0)
        ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    pthread_mutex_unlock(&g->life_lock);
    return ns;
}

/* ------------------------------------------------------------ hold */

/* The controller sleeps on the queue's condition (qlock/qcond), which both
 * the release here and dt_graph_shutdown signal. */
dt_status dt_debug_hold_controller(dt_graph *g, int hold) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "debug_hold_controller: graph is %s", dt__handle_bad(g));
    pthread_mutex_lock(&g->qlock);
    atomic_store(&g->held, hold ? 1 : 0);
    pthread_cond_broadcast(&g->qcond);
    pthread_mutex_unlock(&g->qlock);
    return DT_OK;
}

dt_tensor *dt_debug_gated(dt_tensor *x, dt_debug_gate *gate) {
    dt_clear_error();
    if (!dt__tensor_ok(x) || !dt__debug_gate_ok(gate)) {
        dt__error(DT_EINVAL, "debug_gated: %s is %s", dt__tensor_ok(x) ? "gate" : "tensor",
                  dt__handle_bad(dt__tensor_ok(x) ? (const void *)gate : (const void *)x));
        return NULL;
    }
    dt_tensor *t = dt__tensor_new(x->graph, &x->v->meta);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_DEBUG_GATE);
    if (!n) {
        dt__error(DT_ENOMEM, "debug_gated: out of memory");
    } else {
        n->n_in = 1;
        n->in[0] = x->v;
        n->out = t->v;
        n->extra = dt__debug_gate_retain(gate);
        dt_status st = dt__graph_submit(t->graph, n);
        if (st == DT_OK)
            return t;
        dt__debug_gate_unref(gate);
        dt__node_free(n);
        dt__submit_error(st);
    }
    dt_graph *g = t->graph;
    t->magic = DT__HANDLE_DEAD;
    dt__tval_free(t->v); /* the symbol's record too */
    dt_graph_release(g);
    return NULL;
}
