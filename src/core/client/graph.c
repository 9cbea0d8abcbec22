/*
 * The graph object and the client side of the client->controller queue
 * (the tensor handles are tensor.c).
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
#include "core/client/graph_int.h"
#include "core/client/tensor.h"
#include "core/diag/debug.h"
#include "core/diag/record.h"
#include "core/records/cluster_port.h"
#include "core/records/future.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "dtorch/dtorch_cluster.h"

/* ----------------------------------------------------------------- fork */

/* A forked child has one thread, the one that called fork(). Every global
 * lock of the library is taken before the fork and dropped on both sides
 * after it, so the child never inherits one held by a thread it lacks
 * (order: gates, interned strings, pools; all leaves otherwise). Graphs are
 * not locked: the child never touches a graph of its parent (fork_gen).
 * Registered when the library is loaded, so a fork before the first graph
 * is seen too (the forking thread's OpenMP team, dt__backends_thread_forked). */
_Atomic unsigned dt__fork_gen;

static void fork_prepare(void) {
    dt__debug_fork_lock(1);
    dt__intern_fork_lock(1);
    dt__pool_fork_lock(1);
}

static void fork_parent(void) {
    dt__pool_fork_lock(0);
    dt__intern_fork_lock(0);
    dt__debug_fork_lock(0);
}

static void fork_child(void) {
    fork_parent();
    atomic_fetch_add(&dt__fork_gen, 1);
    dt__stream_forked();
    dt__backends_thread_forked();
}

__attribute__((constructor)) static void atfork_register(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

dt_status dt__submit_error(dt_status st) {
    if (st == DT_EFORKED)
        return dt__error(st,
                         "this graph was created before os.fork() in the parent process: its threads do not "
                         "exist in this child; create a new dtorch.Graph in the child (the default graph is "
                         "replaced automatically)");
    return dt__error(st, "the graph is shut down");
}

/* ---------------------------------------------------------------- graph */

/* Type-stable: a released graph's magic stays readable (core.h, handles). */
static dt__pool graph_pool = DT__POOL_INIT_STABLE(sizeof(dt_graph), 0);

dt_status dt_graph_create(const dt_graph_options *options, dt_graph **out) {
    if (!out)
        return dt__error(DT_EINVAL, "dt_graph_create: out is NULL");
    *out = NULL;
    const char *name = options ? options->backend : NULL;
    const dt__backend *be = dt__backend_find(name);
    if (!be)
        return dt__error(DT_EINVAL, "backend: unknown backend '%s' (expected 'torch' or 'ref')", name);
    /* Zeroed and cache-line aligned (pool records are), so the cache-line
     * groups of struct dt_graph are real. */
    dt_graph *g = dt__pool_alloc(&graph_pool);
    if (!g)
        return dt__error(DT_ENOMEM, "graph: out of memory");
    g->magic = DT__GRAPH_LIVE;
    atomic_init(&g->refs, 1);
    /* The named backend serves every device type, except that CUDA devices
     * get its CUDA variant when one is registered and sees a GPU
     * (dt__backend_for_device); a type it cannot run (device_count) is
     * refused at the call (dt__graph_check_mesh). */
    for (int t = 0; t < DT_DEVICE_TYPES; t++)
        g->be[t] = dt__backend_for_device(be, (dt_device_type)t);
    /* DTORCH_OVERLAP=0 puts collectives on the compute stream (to measure
     * what the communication stream's overlap buys). */
    const char *ov = getenv("DTORCH_OVERLAP");
    g->overlap = !(ov && ov[0] == '0' && ov[1] == 0);
    /* DTORCH_CHAINS=1 turns the chain pass on. Off by default: on a quiet
     * machine the unfused in-place kernels were faster (docs/benchmarks.md). */
    const char *ch = getenv("DTORCH_CHAINS");
    atomic_init(&g->chains, ch && ch[0] == '1' && ch[1] == 0);
    /* DTORCH_REPLAY=1 turns capture and replay on (core/controller/replay.h). Off by
     * default for now: docs/decisions.md, "Replay". */
    const char *rp = getenv("DTORCH_REPLAY");
    atomic_init(&g->replay, rp && rp[0] == '1' && rp[1] == 0);
    /* DTORCH_SCHEDULE=0 lowers every round in program order (core/controller/sched.h),
     * so bench/overlap.py can compare the two in one process. */
    const char *sc = getenv("DTORCH_SCHEDULE");
    atomic_init(&g->schedule, !(sc && sc[0] == '0' && sc[1] == 0));
    g->fork_gen = atomic_load(&dt__fork_gen);
    pthread_mutex_init(&g->life_lock, NULL);
    pthread_mutex_init(&g->qlock, NULL);
    pthread_cond_init(&g->qcond, NULL);
    pthread_mutex_init(&g->bl_lock, NULL);
    /* Monotonic: dt_graph_wait_capacity and dt_graph_cancel time out on it. */
    dt__cond_init_monotonic(&g->bl_cond);
    g->rec = dt__rec_new(); /* NULL: this graph records nothing (record.h) */
    if (pthread_create(&g->ctl, NULL, dt__controller_main, g) != 0) {
        dt__rec_free(g->rec);
        g->rec = NULL;
        pthread_cond_destroy(&g->bl_cond);
        pthread_mutex_destroy(&g->bl_lock);
        pthread_cond_destroy(&g->qcond);
        pthread_mutex_destroy(&g->qlock);
        pthread_mutex_destroy(&g->life_lock);
        g->magic = DT__HANDLE_DEAD;
        dt__pool_free(&graph_pool, g);
        return dt__error(DT_EINTERNAL, "graph: could not start the controller thread");
    }
    if (be->default_dtype)
        dt_set_default_dtype(be->default_dtype());
    *out = g;
    return DT_OK;
}

void dt_graph_retain(dt_graph *g) {
    if (dt__graph_ok(g))
        atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void dt_graph_release(dt_graph *g) {
    if (!dt__graph_ok(g) || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (dt__graph_forked(g))
        return; /* a parent's graph: its threads are not here to join; leaked */
    dt_graph_shutdown(g);
    dt__rec_free(g->rec); /* every thread that wrote into it has exited */
    g->rec = NULL;
    pthread_cond_destroy(&g->bl_cond);
    pthread_mutex_destroy(&g->bl_lock);
    pthread_cond_destroy(&g->qcond);
    pthread_mutex_destroy(&g->qlock);
    pthread_mutex_destroy(&g->life_lock);
    g->magic = DT__HANDLE_DEAD;
    dt__pool_free(&graph_pool, g);
}

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
 * bounded spin first (see dt__spin_until_changed), then the condition. */
void dt__graph_wait_queue(dt_graph *g) {
    for (int i = 0; i < DT_SPIN_PROBES; i++) {
        if (has_work(g))
            return;
        sched_yield();
    }
    dt__graph_flush_releases(g);
    pthread_mutex_lock(&g->qlock);
    atomic_store(&g->ctl_sleeping, 1);
    while (!has_work(g))
        pthread_cond_wait(&g->qcond, &g->qlock);
    atomic_store(&g->ctl_sleeping, 0);
    pthread_mutex_unlock(&g->qlock);
}

/* Closes the queue with a STOP node and lets gated kernels through; the
 * caller holds life_lock and the graph is not yet closed. */
static dt_status close_queue(dt_graph *g) {
    dt__node *stop = dt__node_new(DT_OP_STOP);
    if (!stop)
        return dt__error(DT_ENOMEM, "shutdown: out of memory (try again)");
    /* Close the release stack, then the queue: STOP carries the dropped
     * values and goes in last, with the closed tag, in one step, so no
     * push succeeds afterwards and the controller finds everything on
     * the tagged list. */
    stop->extra = atomic_exchange(&g->rhead, DT__R_CLOSED);
    dt__node *h = atomic_load(&g->qhead);
    do {
        DT_ASSERT(!DT__Q_IS_CLOSED(h)); /* invariant: only this, under life_lock, closes it */
        stop->next = h;
    } while (!atomic_compare_exchange_weak(&g->qhead, &h, (dt__node *)((uintptr_t)stop | 1)));
    /* A worker held at a test gate would never reach its stop kernel. */
    dt__debug_gates_bypass(g);
    pthread_mutex_lock(&g->qlock);
    pthread_cond_signal(&g->qcond);
    pthread_mutex_unlock(&g->qlock);
    g->closed = 1;
    return DT_OK;
}

/* Waits (life_lock held) up to timeout_ms (< 0: no limit) for the
 * controller to return, then joins it. The controller stops its workers
 * before it returns, so a joined controller means no thread is left. */
static dt_status join_controller(dt_graph *g, int64_t timeout_ms) {
    if (g->shut_down)
        return DT_OK;
    struct timespec ts = dt__deadline_after_ms(timeout_ms < 0 ? 0 : timeout_ms);
    int timed_out = 0;
    pthread_mutex_lock(&g->bl_lock);
    while (!g->ctl_exited && !timed_out) {
        if (timeout_ms < 0)
            pthread_cond_wait(&g->bl_cond, &g->bl_lock);
        else
            timed_out = pthread_cond_timedwait(&g->bl_cond, &g->bl_lock, &ts) == ETIMEDOUT;
    }
    int exited = g->ctl_exited;
    pthread_mutex_unlock(&g->bl_lock);
    if (!exited)
        return DT_ETIMEDOUT;
    pthread_join(g->ctl, NULL);
    g->shut_down = 1;
    return DT_OK;
}

dt_status dt_graph_shutdown(dt_graph *g) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
    if (dt__graph_forked(g))
        return DT_OK; /* nothing of it runs in this process */
    pthread_mutex_lock(&g->life_lock);
    if (!g->closed && close_queue(g) != DT_OK) {
        pthread_mutex_unlock(&g->life_lock);
        return DT_ENOMEM; /* the message is set; the caller may try again */
    }
    join_controller(g, -1);
    pthread_mutex_unlock(&g->life_lock);
    return DT_OK;
}

dt_status dt_graph_cancel(dt_graph *g, int64_t timeout_ms) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
    if (dt__graph_forked(g))
        return DT_OK;
    /* Set before the lock and the close: the controller sees it when it
     * takes the closing batch, and a shutdown under way (holding life_lock
     * while it joins) has its remaining work dropped too. */
    atomic_store(&g->cancelled, 1);
    pthread_mutex_lock(&g->life_lock);
    if (g->closed)
        dt__debug_gates_bypass(g);
    else if (close_queue(g) != DT_OK) {
        pthread_mutex_unlock(&g->life_lock);
        return DT_ENOMEM; /* the message is set; the caller may try again */
    }
    /* A client waiting for capacity re-checks and finds the queue closed. */
    pthread_mutex_lock(&g->bl_lock);
    pthread_cond_broadcast(&g->bl_cond);
    pthread_mutex_unlock(&g->bl_lock);
    dt_status st = join_controller(g, timeout_ms);
    pthread_mutex_unlock(&g->life_lock);
    return st == DT_OK ? DT_OK : dt__error(st, "graph cancel: the threads are still stopping");
}

void dt__graph_controller_exited(dt_graph *g) {
    pthread_mutex_lock(&g->bl_lock);
    g->ctl_exited = 1;
    pthread_cond_broadcast(&g->bl_cond);
    pthread_mutex_unlock(&g->bl_lock);
}

static long backlog(dt_graph *g) {
    return atomic_load(&g->submitted) + atomic_load(&g->kqueued) - atomic_load(&g->retired);
}

void dt__backlog_done(dt_graph *g, long n) {
    /* seq_cst pairs with the waiter's increment of bl_waiters then load of
     * the counts: either it sees the retired count or we see the waiter. */
    atomic_fetch_add(&g->retired, n);
    if (atomic_load(&g->bl_waiters) > 0 && backlog(g) <= DT_BACKLOG_MAX / 2) {
        pthread_mutex_lock(&g->bl_lock);
        pthread_cond_broadcast(&g->bl_cond);
        pthread_mutex_unlock(&g->bl_lock);
    }
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
    while (backlog(g) > DT_BACKLOG_MAX / 2 && !DT__Q_IS_CLOSED(atomic_load(&g->qhead)) && !timed_out) {
        if (deadline)
            timed_out = pthread_cond_timedwait(&g->bl_cond, &g->bl_lock, deadline) == ETIMEDOUT;
        else
            pthread_cond_wait(&g->bl_cond, &g->bl_lock);
    }
    int ok = backlog(g) <= DT_BACKLOG_MAX / 2 || DT__Q_IS_CLOSED(atomic_load(&g->qhead));
    atomic_fetch_sub(&g->bl_waiters, 1);
    pthread_mutex_unlock(&g->bl_lock);
    return ok;
}

dt_status dt_graph_wait_capacity(dt_graph *g, int64_t timeout_ms) {
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
    if (dt__graph_forked(g))
        return dt__submit_error(DT_EFORKED);
    if (backlog(g) <= DT_BACKLOG_MAX / 2)
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
    if (++tls_submits % DT_BACKLOG_STRIDE == 0 && backlog(g) > DT_BACKLOG_MAX) {
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

long dt__backlog(dt_graph *g) { return backlog(g); }

const dt__backend *dt__graph_be(const dt_graph *g, dt_device_type t) { return g->be[t]; }

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
    if (n < 0)
        return -1;
    for (int64_t i = 0; i < mesh->ndev; i++)
        if (mesh->ids[i] >= n && (g->local_only || dt__port_node_of(mesh->type, mesh->ids[i]) < 0))
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
