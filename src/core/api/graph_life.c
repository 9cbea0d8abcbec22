/*
 * A graph's life: dt_graph_create starts its controller thread (which
 * starts the worker threads as devices are used), dt_graph_shutdown and
 * dt_graph_cancel close its queue and join them, dt_graph_release frees it.
 * This is the one place above all three roles (core/api): it may call each.
 *
 * Threads: client threads (any). Lock order: life_lock -> qlock;
 * life_lock -> bl_lock.
 */
#include <errno.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "core/client/graph.h"
#include "core/controller/controller.h"
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/node.h"
#include "core/records/trace.h"

/* ---------------------------------------------------------------- graph */

/* Type-stable: a released graph's magic stays readable (core.h, handles). */
static dt__pool graph_pool = DT__POOL_INIT_STABLE(sizeof(dt_graph), 0);

static void graph_free(dt_graph *g);

/* Frees what dt_graph_create made, once no thread of the graph runs: its
 * recorder, its locks, the record itself. */
static void graph_destroy(dt_graph *g) {
    for (int i = 0; i < DT__STEP_SPARES; i++)
        dt__free(atomic_load(&g->step_spare[i])); /* runs' allocations kept for reuse (lower_step.c) */
    dt__free(g->coll_log);                        /* dt_debug_coll_log's notes */
    dt__rec_free(g->rec);
    g->rec = NULL;
    pthread_cond_destroy(&g->bl_cond);
    pthread_mutex_destroy(&g->bl_lock);
    pthread_cond_destroy(&g->qcond);
    pthread_mutex_destroy(&g->qlock);
    pthread_mutex_destroy(&g->life_lock);
    g->magic = DT__HANDLE_DEAD;
    dt__pool_free(&graph_pool, g);
}

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
    g->per_process = options && options->per_device_per_process;
    g->finalize = graph_free;
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
    /* Capture and replay (core/controller/replay.h) are on; DTORCH_REPLAY=0
     * turns them off (docs/decisions.md, "Replay of run images, on by
     * default"). */
    const char *rp = getenv("DTORCH_REPLAY");
    atomic_init(&g->replay, !(rp && rp[0] == '0' && rp[1] == 0));
    /* Eligible nodes are lowered as one device-independent record each
     * (core/records/bcast.h; docs/decisions.md, "Lower once, instantiate
     * per device"); DTORCH_BCAST=0 keeps one record per device. */
    const char *bc = getenv("DTORCH_BCAST");
    atomic_init(&g->bcast, !(bc && bc[0] == '0' && bc[1] == 0));
    /* Eligibility decided on a few devices where dt__lw_probes proves the
     * others the same (docs/decisions.md, "Eligibility on probe devices");
     * DTORCH_BCAST_PROOF=0 checks every device, to measure what it buys. */
    const char *bp = getenv("DTORCH_BCAST_PROOF");
    g->bcast_proof = !(bp && bp[0] == '0' && bp[1] == 0);
    /* The controller's spin for work adapts to how often it pays
     * (docs/decisions.md, "An adaptive spin"); DTORCH_SPIN_ADAPT=0 spins
     * DT_SPIN_PROBES yields before every sleep, as before. */
    const char *sa = getenv("DTORCH_SPIN_ADAPT");
    g->spin_adapt = !(sa && sa[0] == '0' && sa[1] == 0);
    /* Their outputs' blobs as one group per value (core/records/bgroup.h;
     * docs/decisions.md, "Blob groups"); DTORCH_BGROUP=0 makes one blob each. */
    const char *bgr = getenv("DTORCH_BGROUP");
    atomic_init(&g->bgroup, !(bgr && bgr[0] == '0' && bgr[1] == 0));
    /* Runs of them as one record per mesh (core/records/step.h;
     * docs/decisions.md, "One message per mesh per run"); DTORCH_STEP=0 links
     * a slot per node. */
    const char *stp = getenv("DTORCH_STEP");
    atomic_init(&g->step, !(stp && stp[0] == '0' && stp[1] == 0));
    /* CUDA graphs of repeated run slots (core/worker/graph_run.c; docs/decisions.md,
     * "CUDA graphs of repeated run slots"): opt-in until a GPU run verifies them. */
    const char *cg = getenv("DTORCH_CUDA_GRAPH");
    atomic_init(&g->cuda_graph, cg && cg[0] == '1' && cg[1] == 0);
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
    g->rec = dt__rec_new(); /* NULL: this graph records nothing (core/records/trace.h) */
    if (pthread_create(&g->ctl, NULL, dt__controller_main, g) != 0) {
        graph_destroy(g);
        return dt__error(DT_EINTERNAL, "graph: could not start the controller thread");
    }
    if (be->default_dtype)
        dt_set_default_dtype(be->default_dtype());
    *out = g;
    return DT_OK;
}

/* The graph's finalizer (g->finalize): dt_graph_release (graph_state.c) calls
 * it when the last reference goes, which may be a client's tensor. */
static void graph_free(dt_graph *g) {
    dt_graph_shutdown(g);
    graph_destroy(g); /* every thread that wrote into it has exited */
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
