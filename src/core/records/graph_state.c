/*
 * The graph record's shared state (records/graph_int.h): what all three
 * roles touch on a graph — its backend per device type, the backlog that
 * flow control bounds, the error of a submit the graph cannot take, and the
 * controller's exit. The fork generation lives here too: a graph, a future
 * or a worker made before a fork() is not the child's.
 *
 * Threads: any (each function says which); lock order as core.h's.
 */
#include "core/records/graph_int.h"

/* Moved by the fork handler (src/init.c) in a forked child. */
_Atomic unsigned dt__fork_gen;

dt_status dt__submit_error(dt_status st) {
    if (st == DT_EFORKED)
        return dt__error(st,
                         "this graph was created before os.fork() in the parent process: its threads do not "
                         "exist in this child; create a new dtorch.Graph in the child (the default graph is "
                         "replaced automatically)");
    return dt__error(st, "the graph is shut down");
}

void dt__graph_controller_exited(dt_graph *g) {
    pthread_mutex_lock(&g->bl_lock);
    g->ctl_exited = 1;
    pthread_cond_broadcast(&g->bl_cond);
    pthread_mutex_unlock(&g->bl_lock);
}

long dt__backlog(dt_graph *g) {
    return atomic_load(&g->submitted) + atomic_load(&g->kqueued) - atomic_load(&g->retired);
}

void dt__backlog_done(dt_graph *g, long n) {
    /* seq_cst pairs with the waiter's increment of bl_waiters then load of
     * the counts: either it sees the retired count or we see the waiter. */
    atomic_fetch_add(&g->retired, n);
    if (atomic_load(&g->bl_waiters) > 0 && dt__backlog(g) <= DT_BACKLOG_MAX / 2) {
        pthread_mutex_lock(&g->bl_lock);
        pthread_cond_broadcast(&g->bl_cond);
        pthread_mutex_unlock(&g->bl_lock);
    }
}

const dt__backend *dt__graph_be(const dt_graph *g, dt_device_type t) { return g->be[t]; }

void dt_graph_retain(dt_graph *g) {
    if (dt__graph_ok(g))
        atomic_fetch_add_explicit(&g->refs, 1, memory_order_relaxed);
}

void dt_graph_release(dt_graph *g) {
    if (!dt__graph_ok(g) || atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (dt__graph_forked(g))
        return; /* a parent's graph: its threads are not here to join; leaked */
    g->finalize(g);
}
