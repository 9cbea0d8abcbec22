/*
 * Test and debugging aids: a graph's pipeline counters (dt_graph_get_stats)
 * and test-controlled gates (dt_debug_gate, dt_debug_gated).
 *
 * Why gates: the runtime's promises about pending values (a timed wait says
 * "not yet", metadata does not wait, flow control bounds what is queued
 * behind a busy device, Ctrl-C interrupts a read) can only be tested without
 * wall-clock bounds if the test decides when a value becomes ready. A gated
 * tensor's kernels sleep on the gate's condition variable, on their
 * device's worker, until the test opens it; nothing spins. Nothing here is
 * on the path of ordinary ops: the only costs outside this file are one
 * switch case in the worker and one call in dt_graph_shutdown (and
 * dt_graph_cancel, whose dropped gate kernels only drop their reference).
 *
 * Threads: gates are created, opened and released on any thread; the gate
 * kernel runs on a worker (dt__debug_gate_run); dt__lower_debug_gate on the
 * controller. Lock order: gates_lock (the list of live gates) -> a gate's
 * lock; both are leaves with respect to the runtime's other locks (a worker
 * takes a gate's lock holding none of its own).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/client/graph.h"
#include "core/client/graph_int.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/diag/debug.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
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

dt_status dt_graph_set_chains(dt_graph *g, int on) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph_set_chains: graph is %s", dt__handle_bad(g));
    atomic_store(&g->chains, on != 0);
    return DT_OK;
}

dt_status dt_graph_set_replay(dt_graph *g, int on) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph_set_replay: graph is %s", dt__handle_bad(g));
    atomic_store(&g->replay, on != 0);
    return DT_OK;
}

dt_status dt_graph_set_schedule(dt_graph *g, int on) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph_set_schedule: graph is %s", dt__handle_bad(g));
    atomic_store(&g->schedule, on != 0);
    return DT_OK;
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

void dt__debug_wait_held(dt_graph *g) {
    pthread_mutex_lock(&g->qlock);
    while (atomic_load(&g->held) && !atomic_load(&g->gates_bypassed))
        pthread_cond_wait(&g->qcond, &g->qlock);
    pthread_mutex_unlock(&g->qlock);
}

/* ------------------------------------------------------------ gates */

struct dt_debug_gate {
    uint32_t magic;  /* DT__GATE_LIVE until the creator's release (core.h, handles) */
    atomic_int refs; /* the creator's, one per node and kernel that uses it */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int open;                          /* guarded by lock */
    struct dt_debug_gate *prev, *next; /* guarded by gates_lock */
};

/* Every gate alive, so dt_graph_shutdown can wake their waiters. */
static pthread_mutex_t gates_lock = PTHREAD_MUTEX_INITIALIZER;
static dt_debug_gate *gates;
/* Type-stable: a released gate's magic stays readable. */
static dt__pool gate_pool = DT__POOL_INIT_STABLE(sizeof(dt_debug_gate), 0);

static int gate_ok(const dt_debug_gate *gate) { return gate && gate->magic == DT__GATE_LIVE; }

dt_status dt_debug_gate_create(dt_debug_gate **out) {
    if (!out)
        return dt__error(DT_EINVAL, "debug_gate_create: out is NULL");
    *out = NULL;
    dt_debug_gate *gate = dt__pool_alloc(&gate_pool);
    if (!gate)
        return dt__error(DT_ENOMEM, "debug_gate_create: out of memory");
    gate->magic = DT__GATE_LIVE;
    atomic_init(&gate->refs, 1);
    pthread_mutex_init(&gate->lock, NULL);
    pthread_cond_init(&gate->cond, NULL);
    pthread_mutex_lock(&gates_lock);
    gate->next = gates;
    if (gates)
        gates->prev = gate;
    gates = gate;
    pthread_mutex_unlock(&gates_lock);
    *out = gate;
    return DT_OK;
}

static dt_debug_gate *gate_retain(dt_debug_gate *gate) {
    atomic_fetch_add_explicit(&gate->refs, 1, memory_order_relaxed);
    return gate;
}

static void gate_unref(dt_debug_gate *gate) {
    if (atomic_fetch_sub_explicit(&gate->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&gates_lock);
    if (gate->prev)
        gate->prev->next = gate->next;
    else
        gates = gate->next;
    if (gate->next)
        gate->next->prev = gate->prev;
    pthread_mutex_unlock(&gates_lock);
    pthread_cond_destroy(&gate->cond);
    pthread_mutex_destroy(&gate->lock);
    dt__pool_free(&gate_pool, gate);
}

/* The caller holds a reference (the gate is alive). */
static void gate_open(dt_debug_gate *gate) {
    pthread_mutex_lock(&gate->lock);
    gate->open = 1;
    pthread_cond_broadcast(&gate->cond);
    pthread_mutex_unlock(&gate->lock);
}

void dt_debug_gate_open(dt_debug_gate *gate) {
    if (gate_ok(gate))
        gate_open(gate);
}

int dt_debug_gate_is_open(const dt_debug_gate *gate) {
    if (!gate_ok(gate))
        return 0;
    dt_debug_gate *g = (dt_debug_gate *)gate;
    pthread_mutex_lock(&g->lock);
    int open = g->open;
    pthread_mutex_unlock(&g->lock);
    return open;
}

void dt_debug_gate_release(dt_debug_gate *gate) {
    if (!gate_ok(gate))
        return;
    /* The creator's handle is dead now, though nodes and kernels may still
     * hold the record (their references are internal). */
    gate->magic = DT__HANDLE_DEAD;
    /* Nobody could open it after this: kernels still waiting would hold
     * their worker forever. */
    gate_open(gate);
    gate_unref(gate);
}

void dt__debug_fork_lock(int lock) {
    if (lock)
        pthread_mutex_lock(&gates_lock);
    else
        pthread_mutex_unlock(&gates_lock);
}

void dt__debug_gate_drop(dt__krec *k) {
    if (k->handle)
        gate_unref(k->handle);
    k->handle = NULL;
}

void dt__debug_node_drop(dt_graph *g, dt__node *n) {
    (void)g;
    if (n->extra)
        gate_unref(n->extra);
    n->extra = NULL;
}

void dt__debug_gates_bypass(dt_graph *g) {
    /* Set before the broadcasts: a gate kernel checks the flag holding its
     * gate's lock, so it either sees the flag or is asleep when woken. */
    atomic_store(&g->gates_bypassed, 1);
    pthread_mutex_lock(&gates_lock);
    for (dt_debug_gate *gate = gates; gate; gate = gate->next) {
        pthread_mutex_lock(&gate->lock);
        pthread_cond_broadcast(&gate->cond);
        pthread_mutex_unlock(&gate->lock);
    }
    pthread_mutex_unlock(&gates_lock);
}

dt_tensor *dt_debug_gated(dt_tensor *x, dt_debug_gate *gate) {
    dt_clear_error();
    if (!dt__tensor_ok(x) || !gate_ok(gate)) {
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
        n->extra = gate_retain(gate);
        dt_status st = dt__graph_submit(t->graph, n);
        if (st == DT_OK)
            return t;
        gate_unref(gate);
        dt__node_free(n);
        dt__submit_error(st);
    }
    dt_graph *g = t->graph;
    t->magic = DT__HANDLE_DEAD;
    dt__tval_free(t->v); /* the symbol's record too */
    dt_graph_release(g);
    return NULL;
}

void dt__debug_gate_unref(void *gate) { gate_unref(gate); }

dt_status dt__lower_debug_gate(dt__lower *L, dt__node *n) {
    dt__tval *x = n->in[0], *y = n->out;
    dt_debug_gate *gate = n->extra;
    const dt_mesh *mesh = x->meta.mesh;
    if (dt__lw_alloc_blobs(L, y) != DT_OK) {
        gate_unref(gate);
        return L->status;
    }
    int64_t coord[DT_MAX_MESH_NDIM], start[DT_MAX_NDIM], len[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&x->meta, coord, start, len);
        dt__kernel *k = dt__lw_kernel(L, DT_KC_GATE);
        if (!k)
            break;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(x->blobs[i]);
        k->attr.dtype = x->meta.dtype;
        k->attr.ndim = x->meta.ndim;
        memcpy(k->attr.shape, len, sizeof len);
        k->extra = gate_retain(gate);
        y->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
    gate_unref(gate); /* the node's reference */
    return L->status;
}

void dt__debug_gate_run(dt__krec *k, dt__stream *s) {
    dt_debug_gate *gate = k->handle;
    pthread_mutex_lock(&gate->lock);
    while (!gate->open && !atomic_load(&s->g->gates_bypassed))
        pthread_cond_wait(&gate->cond, &gate->lock);
    pthread_mutex_unlock(&gate->lock);
    gate_unref(gate);
    k->handle = NULL;
    const dt__blob *in = k->in[0];
    if (in->error) {
        k->out->error = dt__strdup(in->error);
        return;
    }
    /* A fresh copy (assemble of one piece covering the whole block), so the
     * gated value shares no storage with its input. */
    static const int64_t zero[DT_MAX_NDIM];
    void *impl = in->impl, *out = NULL;
    char err[512] = "";
    dt__kattr a;
    dt__kattr_unpack(k, &a);
    dt_status st = s->be->assemble(a.dtype, a.ndim, a.shape, 1, &impl, zero, 0, &out, err, sizeof err);
    if (st == DT_OK) {
        k->out->impl = out;
    } else {
        char buf[700];
        snprintf(buf, sizeof buf, "%s failed on device %lld: %s", k->opname, (long long)s->device_id,
                 err[0] ? err : dt_status_str(st));
        k->out->error = dt__strdup(buf);
    }
}
