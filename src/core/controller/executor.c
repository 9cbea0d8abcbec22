/*
 * The controller (EagerGraphExecutor): one thread per graph. It takes the
 * client's queue whole, lowers each node into per-device kernels, and hands
 * each stream its kernels once per batch. It never waits on a worker.
 *
 * This file holds the loop, the op table, failed lowering and cancel; the
 * dt__lw_* helpers are in core/controller/lower.c, fetch/sync lowering in core/controller/fetch.c.
 *
 * Threads: everything here runs on the controller thread.
 * Locks taken: graph qlock (only to sleep on an empty queue), stream locks
 * one at a time (inside dt__stream_submit); never two at once.
 */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/controller.h"
#include "core/controller/lower.h"
#include "core/controller/lower_comm.h"
#include "core/controller/lower_queue.h"
#include "core/controller/remote.h"
#include "core/controller/replay.h"
#include "core/controller/sched.h"
#include "core/controller/stream_map.h"
#include "core/controller/trace_lower.h"
#include "core/controller/window.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

/* ------------------------------------------------------ failed lowering */

/* A blob that is ready with an error (controller): it has no producer
 * stream, so its event has completed. */
static dt__blob *error_blob(const dt__backend *be, const char *msg) {
    dt__blob *b = dt__blob_new(be);
    if (!b)
        return NULL;
    b->error = dt__strdup(msg);
    if (!b->error) {
        dt__blob_release(b);
        return NULL;
    }
    return b;
}

/* After a failed lowering: every device blob of the node's output becomes an
 * error blob, so the next read raises it as it would a kernel failure and
 * everything downstream inherits it; a read or sync (DT_OPF_FUTURE)
 * completes its future with it. Kernels already queued for the node may
 * still run; their outputs are released here, not used. Allocation faults
 * are off meanwhile. */
static void lower_failed(dt__lower *L, dt__node *n, dt_status st) {
    char msg[1024];
    const char *why = dt_last_error()[0] ? dt_last_error() : dt_status_str(st);
    if (n->site_file)
        snprintf(msg, sizeof msg, "%s failed on the controller (created at %s:%d): %s", dt__ops[n->op].name,
                 n->site_file, n->site_line, why);
    else
        snprintf(msg, sizeof msg, "%s failed on the controller: %s", dt__ops[n->op].name, why);
    if (dt__ops[n->op].flags & DT_OPF_FUTURE) {
        dt__future_fail(n->extra, DT_EKERNEL, msg);
        dt_future_release(n->extra); /* the node's reference */
        return;
    }
    dt__tval *v = n->out;
    if (!v)
        return;
    if (v->grp) {
        /* Shared records made its blobs (core/records/bgroup.h): the value
         * lets go of the group and holds its error blobs one by one. */
        dt__bgroup_release(v->grp);
        v->grp = NULL;
        v->blobs = NULL;
    }
    if (!v->blobs)
        v->blobs = dt__calloc((size_t)v->meta.mesh->ndev, sizeof *v->blobs);
    if (!v->blobs)
        dt__fatal("out of memory while reporting a failed lowering", msg);
    for (int64_t i = 0; i < v->meta.mesh->ndev; i++) {
        dt__blob_release(v->blobs[i]);
        v->blobs[i] = error_blob(dt__graph_be(L->g, v->meta.mesh->type), msg);
        if (!v->blobs[i])
            dt__fatal("out of memory while reporting a failed lowering", msg);
    }
}

/* Lowers one node, or replays its kernels from the cache `rp` (NULL: off;
 * replay.h); a failure poisons its output (lower_failed). The one place the
 * controller loop handles a lowering's status. `how`: what the cache said
 * of n (dt__replay_begin), -1 when not asked yet. */
static __attribute__((noinline)) int lower_node_full(dt__lower *L, dt__node *n, int passes, dt__replay *rp,
                                                     int how) {
    if (n->op == DT_OP_STOP) {
        /* Last of the closing batch: the values dropped before the close
         * travel on it. */
        dt__tval_free_list_deferred(L->g, n->extra);
        return 1;
    }
    L->node = n;
    if (how < 0)
        L->status = DT_OK;
    /* Explain and traces (core/records/trace.h): one load when nothing is recorded (a
     * node the cache was asked about is not: the cache saw it unrecorded). */
    int rec = how < 0 && dt__rec_anything();
    int64_t t0 = rec ? dt__rec_node_begin(L, n) : 0;
    /* dt_debug_lowering_ns: the lowering step's time, when asked for. */
    int timed = atomic_load_explicit(&L->g->time_lowering, memory_order_relaxed);
    int64_t lt0 = timed ? dt__rec_now() : 0;
    /* Replay's own allocations are the node's: an injected fault fails it.
     * The scope is thread-local (a lookup each): only set while a fault is
     * armed. */
    int faults = dt__fault_armed();
    if (faults)
        dt__fault_scope(1);
    if (how < 0)
        how = rp && !rec ? dt__replay_begin(rp, L, n, passes) : 0;
    dt_status st = L->status;
    if (how != 1) {
        /* The reuse mark, once the passes ran (a replay needs none: its
         * signature holds what the mark follows from). */
        L->kflags = passes && dt__reuse_mark(n) ? DT_KF_REUSE : 0;
        /* A replay that fails says why itself (dt__lw_fail); a lowering's
         * message must not be an earlier one. */
        dt_clear_error();
        st = dt__ops[n->op].lower(L, n);
    }
    if (faults)
        dt__fault_scope(0);
    if (st == DT_OK)
        st = L->status; /* a helper failed and the function missed it */
    if (how == 2)
        dt__replay_end(rp, L, n, st);
    if (timed)
        atomic_fetch_add_explicit(&L->g->lowering_ns, dt__rec_now() - lt0, memory_order_relaxed);
    if (st != DT_OK)
        lower_failed(L, n, st);
    if (rec)
        dt__rec_node_end(L, n, t0);
    return 0;
}

/* lower_node's path for a replayed node (the loop body of a warm run):
 * nothing recorded, timed or armed to fail, so a hit needs none of the
 * rest; anything else goes on to lower_node_full with the cache's answer.
 * Inlined into the controller's loops (no call, no register saves a node). */
static inline __attribute__((always_inline)) int lower_node(dt__lower *L, dt__node *n, int passes,
                                                            dt__replay *rp) {
    if (!rp || n->op == DT_OP_STOP || dt__rec_anything() ||
        atomic_load_explicit(&L->g->time_lowering, memory_order_relaxed) || dt__fault_armed())
        return lower_node_full(L, n, passes, rp, -1);
    L->node = n;
    L->status = DT_OK;
    int how = dt__replay_begin(rp, L, n, passes);
    if (how != 1)
        return lower_node_full(L, n, passes, rp, how);
    if (L->status != DT_OK)
        lower_failed(L, n, L->status);
    return 0;
}

/* ------------------------------------------------------ nodes and flush */

/* After dt_graph_cancel: frees what node n owns without lowering it (its
 * op's discard, src/ops/ops.def). Its outputs get no blobs (nothing can read
 * them: the graph is closed); a read or sync fails with DT_ECANCELLED. */
static void discard(dt_graph *g, dt__node *n) {
    atomic_fetch_add_explicit(&g->dropped, 1, memory_order_relaxed);
    if (dt__ops[n->op].discard)
        dt__ops[n->op].discard(g, n);
}

/* Test-only: the round's kernels, encoded, to the tap. */
static void tap(dt_graph *g) {
    int n = 0;
    for (dt__stream *s = g->dirty; s; s = s->next_dirty)
        n++;
    dt__kbatch b = {.n = n, .s = dt__calloc((size_t)(n ? n : 1), sizeof *b.s)};
    dt__bytes bytes = {0};
    dt_status st = b.s ? DT_OK : DT_ENOMEM;
    int i = n;
    for (dt__stream *s = g->dirty; s && b.s; s = s->next_dirty)
        b.s[--i] = (dt__kbatch_stream){s->type, s->device_id, s->kind, s->bhead, s->btail};
    if (st == DT_OK)
        st = dt__kernel_encode(&b, dt__graph_group_lookup, g, &bytes);
    g->ktap(g->ktap_arg, st == DT_OK ? bytes.p : NULL, st == DT_OK ? bytes.len : 0, st);
    dt__bytes_free(&bytes);
    dt__free(b.s); /* a view: the kernels stay on their streams */
}

void dt__graph_set_kernel_tap_for_test(dt_graph *g, dt__ktap_fn fn, void *arg) {
    g->ktap_arg = arg;
    g->ktap = fn;
}

/* The round's dead blobs (dt__blob_release_ctl): one DT_KC_RELEASE record at
 * the head of each stream's batch, so its worker frees them before it runs
 * the batch (a sync in it then finds them freed). Not an appended kernel:
 * no number, not in kqueued. Out of memory, they are freed here. */
static void hand_dead(dt_graph *g) {
    for (dt__stream *s = g->dead_q, *next; s; s = next) {
        next = s->next_dead_q;
        s->next_dead_q = NULL;
        s->dead_queued = 0;
        dt__blob *dead = s->dead;
        s->dead = NULL;
        dt__krec *k = dt__krec_alloc_in(g->ctl_pools, 0);
        if (!k) {
            dt__blob_free_dead(dead);
            continue;
        }
        k->kop = DT_KC_RELEASE;
        k->handle = dead;
        k->next = s->bhead;
        s->bhead = k;
        if (!s->btail)
            s->btail = k;
        dt__lw_stream_dirty(g, s);
    }
    g->dead_q = NULL;
}

static void flush(dt_graph *g) {
    if (g->ktap && g->dirty)
        tap(g);
    if (g->dead_q)
        hand_dead(g);
    /* Worker nodes' streams first: their values' marks (core/controller/remote.c) are
     * set before a local stream can read one. */
    if (g->has_remote)
        dt__remote_flush(g);
    dt__lw_step_close(g); /* the open run's slots (core/controller/lower_step.h) */
    while (g->dirty) {
        dt__stream *s = g->dirty;
        g->dirty = s->next_dirty;
        s->dirty = 0;
        s->next_dirty = NULL;
        dt__stream_submit(s, s->bhead, s->btail);
        s->bhead = s->btail = NULL;
    }
}

dt_status dt__kbatch_push(dt_graph *g, dt__kbatch *b) {
    dt__stream **ss = dt__calloc((size_t)(b->n ? b->n : 1), sizeof *ss);
    if (!ss)
        return dt__error(DT_ENOMEM, "kernel batch: out of memory");
    /* Every stream first: a failure queues nothing. */
    for (int i = 0; i < b->n; i++) {
        ss[i] = dt__graph_stream(g, (dt_device_type)b->s[i].type, b->s[i].device_id, b->s[i].kind);
        if (!ss[i]) {
            dt__free(ss);
            return dt_last_status() != DT_OK ? dt_last_status() : DT_ENOMEM;
        }
    }
    /* Every output's event before any input is bound: a kernel may read
     * what a later stream of the batch makes, and must wait for it. (An
     * open run's kernels are numbered on their streams first.) */
    dt__lw_step_close(g);
    for (int i = 0; i < b->n; i++) {
        uint64_t seq = ss[i]->appended;
        for (dt__krec *k = b->s[i].head; k; k = k->next)
            if (k->out) {
                k->out->producer = ss[i];
                k->out->seq = ++seq;
            }
    }
    for (int i = 0; i < b->n; i++) {
        for (dt__krec *k = b->s[i].head, *next; k; k = next) {
            next = k->next;
            dt__lw_bind(g, ss[i], k);
            dt__lw_stream_append(g, ss[i], k);
        }
        b->s[i].head = b->s[i].tail = NULL;
    }
    dt__free(ss);
    atomic_store_explicit(&g->kqueued, g->kqueued_local, memory_order_relaxed);
    flush(g);
    return DT_OK;
}

/* Whether node n's output comes off a communication stream: a collective's
 * result, which the schedule lowers its readers after other compute for. */
static int output_on_comm(const dt__node *n) {
    const dt__tval *v = n->out;
    if (!v || !v->blobs)
        return 0;
    for (int64_t i = 0; i < v->meta.mesh->ndev; i++) {
        const dt__blob *b = v->blobs[i];
        uint64_t seq;
        const dt__stream *p = b ? dt__blob_event(b, &seq) : NULL;
        if (p && p->kind == DT_STREAM_COMM)
            return 1;
    }
    return 0;
}

/* Lowers (or frees) every slot of the filled window w in the order the
 * schedule S gives (sched.h; `on`: the graph's setting) and frees the
 * records taken; returns 1 after STOP. */
static int lower_window(dt__lower *L, dt__window *w, dt__sched *S, int on, int passes, dt__replay *rp) {
    dt_graph *g = L->g;
    int stop = 0;
    dt__sched_begin(S, w, on);
    for (int i; (i = dt__sched_next(S, w)) >= 0;) {
        dt__node *orig = w->orig[i], *n = w->nodes[i]; /* a pass may have put another node in the slot */
        uint8_t f = w->flags[i];
        long comm0 = g->comm_queued;
        if (n->op != DT_OP_STOP && atomic_load_explicit(&g->cancelled, memory_order_relaxed))
            discard(g, n); /* dt_graph_cancel: freed unlowered */
        else if (!(f & (DT__WS_DEAD | DT__WS_FUSED)))
            stop |= lower_node(L, n, passes, rp);
        dt__sched_done(S, w, i, g->comm_queued != comm0 && output_on_comm(n));
        /* A substitute is a node_pool record the window hands over. */
        if (n != orig)
            dt__node_free_in(g->ctl_pools, n);
        /* A chain's step: its chain, lowered at a later slot, reads it. */
        if (!(f & DT__WS_FUSED))
            dt__node_free_in(g->ctl_pools, orig);
    }
    if (S->reordered)
        atomic_fetch_add_explicit(&g->nodes_reordered, S->reordered, memory_order_relaxed);
    return stop;
}

/* ------------------------------------------------------------ the loop */

/* The controller's state: what lasts across rounds, then the round's. */
typedef struct ctl_loop {
    dt_graph *g;
    dt__lower L;
    /* The round's window (window.h); its arrays are kept across rounds. */
    dt__window w;
    /* The replay cache (replay.h); NULL when out of memory: nodes are
     * lowered. */
    dt__replay *cache;
    /* The order each round's slots are lowered in (sched.h). */
    dt__sched sched;
    /* The round: the values dropped and the nodes taken, the cache when
     * replay is on, whether the window was made and its passes ran, how
     * many nodes were taken, and whether STOP was among them. */
    dt__tval *released;
    dt__node *batch;
    dt__replay *rp;
    int windowed, passes, stop;
    long taken;
} ctl_loop;

static void controller_start(ctl_loop *c, dt_graph *g) {
    *c = (ctl_loop){.g = g, .L = {.g = g, .node = NULL}};
    dt__thread_name("dt-controller");
    /* Its only backend work is slicing host values a batch ships to a
     * worker node: on itself, so it never keeps a team beside the client's
     * and the workers' (backend.h thread_serial). */
    dt__backends_thread_serial();
    dt__seg_regions = 1; /* lowering sees segmented layouts (meta.c) */
    g->ctl_pools = dt__pool_my_lists();
    c->cache = dt__replay_new();
}

/* Take: waits for work, then takes the dropped values and the nodes. */
static void take(ctl_loop *c) {
    dt_graph *g = c->g;
    dt__graph_wait_queue(g);
    if (atomic_load_explicit(&g->held, memory_order_relaxed))
        dt__debug_wait_held(g); /* tests only */
    c->released = dt__graph_take_releases(g);
    c->batch = dt__graph_take(g);
}

/* Cluster recheck, after the take: a node recorded once a worker node
 * registered is lowered with its devices on that node. */
static void cluster_recheck(ctl_loop *c) {
    dt_graph *g = c->g;
    uint64_t gen = dt__port_generation();
    if (gen == g->cluster_gen)
        return;
    g->cluster_gen = gen;
    if (!dt__graph_local(g) && dt__graph_streams_recheck(g) && c->cache)
        dt__replay_clear(c->cache); /* its templates name the retired streams */
}

/* Window and passes. Without a window (out of memory) or after a failed
 * pass, the nodes are lowered as the passes before left the marks. */
static void window(ctl_loop *c) {
    dt_graph *g = c->g;
    c->w.chains = atomic_load_explicit(&g->chains, memory_order_relaxed);
    c->rp = atomic_load_explicit(&g->replay, memory_order_relaxed) ? c->cache : NULL;
    if (!c->rp && c->cache)
        dt__replay_clear(c->cache); /* off drops the templates */
    c->windowed = dt__window_fill(&c->w, c->batch, c->released) == DT_OK;
    c->passes = c->windowed && dt__window_run_passes(&c->w) == DT_OK;
}

/* Lower: the window's slots in the schedule's order, or the batch's nodes
 * in program order when there is no window. */
static void lower(ctl_loop *c) {
    dt_graph *g = c->g;
    c->taken = 0;
    c->stop = 0;
    dt__lw_bcast_round(&c->L);
    if (c->windowed) {
        int on = atomic_load_explicit(&g->schedule, memory_order_relaxed);
        c->stop = lower_window(&c->L, &c->w, &c->sched, on, c->passes, c->rp);
        c->taken = c->w.n;
        return;
    }
    for (dt__node *n = c->batch, *next; n; n = next) {
        next = n->next;
        c->taken++;
        if (n->op != DT_OP_STOP && atomic_load_explicit(&g->cancelled, memory_order_relaxed))
            discard(g, n); /* dt_graph_cancel: freed unlowered */
        else
            c->stop |= lower_node(&c->L, n, 0, c->rp);
        dt__node_free(n);
    }
}

/* Flush: the passes' counts, the fused nodes and the dropped values freed,
 * then the round's kernels handed to their streams. */
static void flush_round(ctl_loop *c) {
    dt_graph *g = c->g;
    dt__window *w = &c->w;
    if (c->windowed && w->eliminated)
        atomic_fetch_add_explicit(&g->nodes_eliminated, w->eliminated, memory_order_relaxed);
    if (c->windowed && w->fused) {
        for (int i = 0; i < w->n; i++)
            if (w->flags[i] & DT__WS_FUSED)
                dt__node_free(w->nodes[i]);
        atomic_fetch_add_explicit(&g->nodes_fused, w->fused, memory_order_relaxed);
    }
    if (c->cache)
        dt__replay_publish(c->cache, g);
    dt__tval_free_list_deferred(g, c->released);
    /* Published before the kernels can run and retire. */
    atomic_store_explicit(&g->kqueued, g->kqueued_local, memory_order_relaxed);
    flush(g);
}

/* Account: every node taken leaves the backlog, lowered or not (STOP was
 * never counted: it does not go through dt__graph_submit); once per round,
 * for dt_graph_get_stats, the peak of what flow control bounds (the round's
 * nodes now count as their kernels only). */
static void account(ctl_loop *c) {
    dt_graph *g = c->g;
    dt__backlog_done(g, c->taken - c->stop);
    long in_flight = dt__backlog(g);
    if (in_flight > atomic_load_explicit(&g->peak_backlog, memory_order_relaxed))
        atomic_store_explicit(&g->peak_backlog, in_flight, memory_order_relaxed);
}

/* One round, as its phases; 1 once STOP was lowered. */
static int controller_round(ctl_loop *c) {
    take(c);
    cluster_recheck(c);
    window(c);
    lower(c);
    flush_round(c);
    account(c);
    return c->stop;
}

static void controller_end(ctl_loop *c) {
    dt_graph *g = c->g;
    dt__window_free(&c->w);
    dt__sched_free(&c->sched);
    dt__replay_free(c->cache); /* its templates name streams, freed below */
    dt__graph_flush_releases(g);
    /* Nodes after STOP cannot exist: the queue is closed before STOP goes in. */
    dt__graph_streams_stop(g);
    dt__graph_comm_free(g); /* after every worker: none runs a collective now */
    g->ctl_pools = NULL;    /* this thread's lists go back to the pools as it exits */
    dt__graph_controller_exited(g);
}

void *dt__controller_main(void *arg) {
    ctl_loop c;
    controller_start(&c, arg);
    while (!controller_round(&c)) {
    }
    controller_end(&c);
    return NULL;
}
