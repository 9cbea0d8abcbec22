/*
 * The client's side of a graph: the client->controller queue (pushed here,
 * taken by the controller), flow control, and the checks a call makes of its
 * graph and meshes (the tensor handles are tensor.c; the graph's life,
 * core/api/graph_life.c).
 *
 * Threads: dt_graph_* run on client threads (any thread); dt__controller_main (executor.c) is the graph's
 * controller thread. Lock order: life_lock -> qlock; life_lock -> bl_lock. The queue is a lock-free stack
 * that the controller takes whole (and reverses); a push is one compare-and-swap, and the client takes qlock
 * only to wake a controller that sleeps.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/cuda_map.h"
#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/records/cluster_port.h"
#include "core/records/future.h"
#include "core/records/graph_int.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/records/trace.h"
#include "core/worker/stream.h"
#include "dtorch/dtorch_cluster.h"

/* seq_cst pairs with the controller's store of ctl_sleeping then load of
 * the stacks: either it sees the push or the pusher sees it sleeping. */
void dt__graph_wake(dt_graph *g) {
    if (atomic_load(&g->ctl_sleeping)) {
        pthread_mutex_lock(&g->qlock);
        pthread_cond_signal(&g->qcond);
        pthread_mutex_unlock(&g->qlock);
    }
}

/* Pushes n; DT_ESHUTDOWN once the queue is closed (the head is tagged). */
static dt_status queue_push(dt_graph *g, dt__node *n) {
    dt__node *h = atomic_load_explicit(&g->qhead, memory_order_relaxed);
    do {
        if (DT__Q_IS_CLOSED(h))
            return DT_ESHUTDOWN;
        n->next = h;
    } while (
        !atomic_compare_exchange_weak_explicit(&g->qhead, &h, n, memory_order_seq_cst, memory_order_relaxed));
    dt__graph_wake(g);
    return DT_OK;
}

dt__node *dt__graph_take(dt_graph *g) {
    dt__node *h = atomic_load_explicit(&g->qhead, memory_order_acquire);
    while (h && !DT__Q_IS_CLOSED(h) &&
           !atomic_compare_exchange_weak_explicit(&g->qhead, &h, NULL, memory_order_acquire,
                                                  memory_order_acquire))
        ;
    /* A closed queue keeps its tagged head, so pushes keep failing; the
     * controller takes it once, and STOP ends that batch. */
    h = (dt__node *)((uintptr_t)h & ~(uintptr_t)1);
    dt__node *rev = NULL;
    while (h) {
        dt__node *next = h->next;
        /* The node's other lines (its attributes, which lowering reads),
         * asked for now so their misses overlap this walk's, which waits
         * for each node's first line in turn. */
        for (size_t o = DT_CACHE_LINE; o < offsetof(dt__node, a) + offsetof(dt__nattr, ints);
             o += DT_CACHE_LINE)
            __builtin_prefetch((const uint8_t *)h + o, 0, 3);
        h->next = rev;
        rev = h;
        h = next;
    }
    return rev;
}

dt__tval *dt__graph_take_releases(dt_graph *g) {
    dt__tval *h = atomic_load_explicit(&g->rhead, memory_order_acquire);
    while (h && h != DT__R_CLOSED &&
           !atomic_compare_exchange_weak_explicit(&g->rhead, &h, NULL, memory_order_acquire,
                                                  memory_order_acquire))
        ;
    /* Once closed, what the stack held travels on the STOP node. */
    return h == DT__R_CLOSED ? NULL : h;
}

static int has_work(dt_graph *g) {
    dt__tval *r = atomic_load(&g->rhead);
    return atomic_load(&g->qhead) || (r && r != DT__R_CLOSED);
}

/* Waits (controller) until the queue holds a node or a dropped value: a
 * bounded spin first (see dt__spin_until_changed), then the condition.
 * The spin's length adapts (g->ctl_spin): each probe that finds nothing is
 * a yield, which costs the controller a context switch wherever other
 * threads (a mesh's workers) are runnable, so a spin that keeps ending
 * asleep is halved, down to one probe, and one that work ends is doubled,
 * up to DT_SPIN_PROBES. */
void dt__graph_wait_queue(dt_graph *g) {
    if (!g->ctl_spin)
        g->ctl_spin = DT_SPIN_PROBES; /* the first wait */
    int probes = g->spin_adapt ? g->ctl_spin : DT_SPIN_PROBES;
    for (int i = 0; i < probes; i++) {
        if (has_work(g)) {
            if (i && g->ctl_spin < DT_SPIN_PROBES)
                g->ctl_spin *= 2;
            return;
        }
        sched_yield();
    }
    if (g->ctl_spin > 1)
        g->ctl_spin /= 2;
    dt__graph_flush_releases(g);
    pthread_mutex_lock(&g->qlock);
    atomic_store(&g->ctl_sleeping, 1);
    while (!has_work(g))
        pthread_cond_wait(&g->qcond, &g->qlock);
    atomic_store(&g->ctl_sleeping, 0);
    pthread_mutex_unlock(&g->qlock);
}

/* Waits (client thread) until the pipeline has drained to half its bound,
 * the queue is closed, or the deadline (NULL: none) passes; 1 if capacity. */
static int wait_backlog(dt_graph *g, const struct timespec *deadline) {
    int timed_out = 0;
    dt__backends_thread_rest(); /* as a read's wait (dt_future_wait) */
    pthread_mutex_lock(&g->bl_lock);
    atomic_fetch_add_explicit(&g->flow_waits, 1, memory_order_relaxed);
    atomic_fetch_add(&g->bl_waiters, 1);
    /* A closed graph drains or is cancelled: nothing more is worth waiting for. */
    while (dt__backlog(g) > DT_BACKLOG_MAX / 2 && !DT__Q_IS_CLOSED(atomic_load(&g->qhead)) && !timed_out) {
        if (deadline)
            timed_out = pthread_cond_timedwait(&g->bl_cond, &g->bl_lock, deadline) == ETIMEDOUT;
        else
            pthread_cond_wait(&g->bl_cond, &g->bl_lock);
    }
    int ok = dt__backlog(g) <= DT_BACKLOG_MAX / 2 || DT__Q_IS_CLOSED(atomic_load(&g->qhead));
    atomic_fetch_sub(&g->bl_waiters, 1);
    pthread_mutex_unlock(&g->bl_lock);
    return ok;
}

dt_status dt_graph_wait_capacity(dt_graph *g, int64_t timeout_ms) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
    if (dt__graph_forked(g))
        return dt__submit_error(DT_EFORKED);
    if (dt__backlog(g) <= DT_BACKLOG_MAX / 2)
        return DT_OK;
    if (timeout_ms == 0)
        return DT_ETIMEDOUT;
    struct timespec ts = dt__deadline_after_ms(timeout_ms > 0 ? timeout_ms : 0);
    return wait_backlog(g, timeout_ms < 0 ? NULL : &ts) ? DT_OK : DT_ETIMEDOUT;
}

/* The graph an op of this thread found over its bound (deferred graphs
 * only), holding a reference; see dt_take_backpressure. */
static _Thread_local dt_graph *tls_pressure;

void dt_graph_set_deferred_backpressure(dt_graph *g, int on) {
    if (dt__graph_ok(g))
        g->defer_pressure = on != 0;
}

dt_graph *dt_take_backpressure(void) {
    dt_graph *g = tls_pressure;
    tls_pressure = NULL;
    return g;
}

/* The backlog is checked every DT_BACKLOG_STRIDE submissions of a thread:
 * reading the controller's and workers' counters costs a cache miss each. */
static _Thread_local unsigned tls_submits;

dt_status dt__graph_submit(dt_graph *g, dt__node *n) {
    /* A read-mostly line the submit reads anyway (g->be's); no syscall. */
    if (dt__graph_forked(g))
        return DT_EFORKED;
    if (dt__rec_enabled(DT__REC_TRACE))
        dt__rec_client_submit(n); /* before the push: the node is the controller's after it */
    /* Counted first: the controller may retire the node as soon as it is in. */
    atomic_fetch_add_explicit(&g->submitted, 1, memory_order_relaxed);
    if (queue_push(g, n) != DT_OK) {
        atomic_fetch_sub_explicit(&g->submitted, 1, memory_order_relaxed);
        return DT_ESHUTDOWN;
    }
    if (++tls_submits % DT_BACKLOG_STRIDE == 0 && dt__backlog(g) > DT_BACKLOG_MAX) {
        if (!g->defer_pressure) {
            wait_backlog(g, NULL);
        } else if (!tls_pressure) {
            /* The node is in: the caller waits after the op returns. */
            dt_graph_retain(g);
            tls_pressure = g;
        }
    }
    return DT_OK;
}

const char *dt_graph_backend(const dt_graph *g) {
    return dt__graph_ok(g) ? g->be[DT_DEVICE_CPU]->name : NULL;
}

/* The first device of `mesh` that g cannot run on: its flat index, or -1
 * when all are available; *count is the backend's device count. A device
 * past the backend's count may be a worker node's (its kernels run there,
 * core/controller/remote.c), unless g is a worker node's own graph. */
static int64_t first_missing_device(const dt_graph *g, const dt_mesh *mesh, int64_t *count) {
    const dt__backend *be = dt__graph_be(g, mesh->type);
    int64_t n = be->device_count ? be->device_count(mesh->type) : (mesh->type == DT_DEVICE_CPU ? -1 : 0);
    *count = n;
    if (n < 0 && !g->per_process)
        return -1;
    for (int64_t i = 0; i < mesh->ndev; i++)
        if ((g->per_process || mesh->ids[i] >= n) &&
            (dt__graph_local(g) || dt__port_node_of(mesh->type, mesh->ids[i]) < 0))
            return i;
    return -1;
}

int dt_graph_satisfy(const dt_graph *g, const dt_mesh *mesh) {
    int64_t count;
    return dt__graph_ok(g) && dt__mesh_ok(mesh) && first_missing_device(g, mesh, &count) < 0;
}

dt_status dt__graph_check_mesh(const dt_graph *g, const dt_mesh *mesh) {
    int64_t count;
    int64_t i = first_missing_device(g, mesh, &count);
    if (i < 0)
        return DT_OK; /* a mesh may span nodes: its collectives exchange messages (comm/span.c) */
    if (g->per_process && mesh->type == DT_DEVICE_CUDA)
        return dt__error(DT_EUNSUPPORTED,
                         "device_mesh: cuda:%lld: GraphOption(per_device_per_process=True) runs CPU devices "
                         "only; CUDA devices in a process each are not implemented",
                         (long long)mesh->ids[i]);
    if (g->per_process)
        return dt__error(
            DT_EINVAL,
            "device_mesh: cpu:%lld has no process of its own: a GraphOption(per_device_per_process="
            "True) graph runs CPU ids 0..num_devices-1, one process each; make it with a larger "
            "num_devices",
            (long long)mesh->ids[i]);
    const char *type = mesh->type == DT_DEVICE_CUDA ? "cuda" : "cpu";
    char envbuf[256];
    const char *enverr = mesh->type == DT_DEVICE_CUDA ? dt__cuda_map_env_error(envbuf, sizeof envbuf) : NULL;
    if (enverr)
        return dt__error(DT_EDEVICE, "device_mesh: %s:%lld is not available: %s", type,
                         (long long)mesh->ids[i], enverr);
    int64_t total = mesh->type == DT_DEVICE_CUDA ? dt__port_cuda_devices() : 0;
    if (total > (count > 0 ? count : 0))
        return dt__error(DT_EDEVICE,
                         "device_mesh: cuda:%lld does not exist in this cluster: the main node has %lld CUDA "
                         "device%s (ids 0..%lld) and its worker nodes add %lld (ids %lld..%lld; "
                         "dtorch.MainNode.nodes() lists each node's)",
                         (long long)mesh->ids[i], (long long)(count > 0 ? count : 0), count == 1 ? "" : "s",
                         (long long)(count > 0 ? count : 0) - 1, (long long)(total - (count > 0 ? count : 0)),
                         (long long)(count > 0 ? count : 0), (long long)total - 1);
    if (count == 0)
        return dt__error(DT_EDEVICE,
                         "device_mesh: %s:%lld is not available: the '%s' backend sees no %s device on "
                         "this machine (torch.cuda.is_available() is False); use a 'cpu' mesh",
                         type, (long long)mesh->ids[i], dt__graph_be(g, mesh->type)->name,
                         mesh->type == DT_DEVICE_CUDA ? "CUDA" : type);
    return dt__error(DT_EDEVICE,
                     "device_mesh: %s:%lld is not available: the '%s' backend sees %lld %s device%s "
                     "(ids 0 to %lld)",
                     type, (long long)mesh->ids[i], dt__graph_be(g, mesh->type)->name, (long long)count,
                     mesh->type == DT_DEVICE_CUDA ? "CUDA" : type, count == 1 ? "" : "s",
                     (long long)count - 1);
}

dt_future *dt_graph_sync_future(dt_graph *g) {
    if (!dt__graph_ok(g)) {
        dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
        return NULL;
    }
    dt_future *f = dt__future_new();
    dt__node *n = dt__node_new(DT_OP_SYNC);
    if (!f || !n) {
        dt_future_release(f);
        dt__node_free(n);
        dt__error(DT_ENOMEM, "sync: out of memory");
        return NULL;
    }
    /* The controller owns one reference until every stream has arrived. */
    atomic_fetch_add(&f->refs, 1);
    n->extra = f;
    dt_status st = dt__graph_submit(g, n);
    if (st == DT_EFORKED) {
        dt__node_free(n);
        dt_future_release(f);
        dt_future_release(f);
        dt__submit_error(st);
        return NULL;
    }
    if (st != DT_OK) {
        /* Nothing can be pending on a shut-down graph: the sync is complete. */
        dt__node_free(n);
        dt__future_expect(f, 1);
        dt__future_arrive(f, -1, NULL);
        dt_future_release(f);
    }
    return f;
}

dt_status dt_graph_sync(dt_graph *g) {
    dt_future *f = dt_graph_sync_future(g);
    if (!f)
        return dt_last_status();
    dt_status st = dt_future_wait(f, -1);
    dt_future_release(f);
    return st;
}

dt_status dt__client_check_graph(dt_graph *g) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
    return DT_OK;
}

/* --------------------------------------------------------------- errors */

dt_status dt__placement_error(const char *op, const dt__meta *const *ins, int nin, int mesh_dim,
                              const char *accepted, int fix_input, const dt_placement *fix) {
    dt__strbuf sb;
    dt__sb_init(&sb);
    dt__sb_printf(&sb, "%s: placements not accepted on mesh dim %d: ", op, mesh_dim);
    for (int i = 0; i < nin; i++) {
        dt__sb_printf(&sb, "%sinput %d has ", i ? ", " : "", i);
        dt__placements_format(&sb, ins[i]->pl, ins[i]->mesh->ndim);
    }
    dt__sb_printf(&sb, ". Accepted per mesh dim: %s.", accepted);
    if (fix && fix_input >= 0) {
        dt__sb_printf(&sb, " Fix: call input %d's .redistribute(placements=", fix_input);
        dt__placements_format(&sb, fix, ins[fix_input]->mesh->ndim);
        dt__sb_printf(&sb, ") first.");
    }
    return dt__error(DT_EPLACEMENT, "%s", sb.buf);
}
