/*
 * KernelStream: one worker thread per (device type, id, kind) with an
 * in-order kernel queue (their events: events.c; the map of them: core/controller/stream_map.c). This
 * file holds the worker loop and the stream's start/submit/stop/free;
 * running and dropping one kernel is core/worker/kernel_run.c, blob lifetime
 * core/records/blob.c.
 *
 * Threads: dt__stream_start/submit/stop run on the controller thread;
 * worker_main runs on the stream's own thread. A kernel whose input comes
 * from another stream (a collective on the communication stream, a piece of
 * a cross-mesh copy) first waits on that blob's event (dt__event_wait),
 * which sleeps on the producing stream's ev_lock, never on a graph-wide one.
 * The queue is guarded by the stream's lock (a leaf lock besides
 * collective/future/event locks, which the worker takes only while it holds
 * no stream lock). The worker takes the whole list at once and sleeps on
 * the condition variable when it is empty; the controller signals only when
 * the worker sleeps. A worker idle for DT_WORKER_REST_MS first gives its
 * backend's per-thread resources back (thread_rest: its OpenMP team).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/cluster_port.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/memstats.h"
#include "core/worker/graph_run.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

/* How long a worker waits for kernels before it gives its backend's
 * per-thread resources back (dt__backend.thread_rest): long enough that a
 * pipeline's gaps do not pay the ~100 us of making an OpenMP team again
 * (at most a few percent of an idle stretch), short enough that eager work
 * the client runs meanwhile soon has the cores to itself. */
#ifndef DT_WORKER_REST_MS
#define DT_WORKER_REST_MS 2
#endif

/* Worker threads alive in the process, and a generation bumped whenever that
 * count changes, so each worker re-bounds its backend's intra-op threads:
 * the sum over workers must not exceed the machine's cores. */
static atomic_int live_workers;

static atomic_int workers_gen;

void dt__stream_forked(void) {
    /* The parent's workers do not exist in a fork child. */
    atomic_store(&live_workers, 0);
    atomic_fetch_add(&workers_gen, 1);
}

int dt__streams_running(void) { return atomic_load(&live_workers) > 0; }

/* ---------------------------------------------------------------- spins */

int dt__spin_until_changed(atomic_uint *counter, unsigned seen) {
    for (int i = 0; i < DT_SPIN_PROBES; i++) {
        if (atomic_load_explicit(counter, memory_order_acquire) != seen)
            return 1;
        sched_yield();
    }
    return 0;
}

/* ---------------------------------------------------------------- worker */

static void *worker_main(void *arg) {
    dt__stream *s = arg;
    /* dt-cpu0, dt-cuda1; a communication stream's ends in c (dt-cpu0c). */
    dt__thread_name("dt-%s%lld%s", s->type == DT_DEVICE_CUDA ? "cuda" : "cpu", (long long)s->device_id,
                    s->kind == DT_STREAM_COMM ? "c" : "");
    atomic_fetch_add(&live_workers, 1);
    atomic_fetch_add(&workers_gen, 1);
    if (s->ctx && s->be->stream_enter)
        s->be->stream_enter(s->ctx);
    int seen_gen = -1;
    int stop = 0;
    int rested = 0;
    while (!stop) {
        int gen = atomic_load_explicit(&workers_gen, memory_order_relaxed);
        if (gen != seen_gen && s->be->worker_init) {
            seen_gen = gen;
            s->be->worker_init(s->type, s->device_id - s->g->first_id[s->type], atomic_load(&live_workers));
        }
        unsigned seen = atomic_load_explicit(&s->pushed, memory_order_acquire);
        pthread_mutex_lock(&s->lock);
        if (!s->head) {
            pthread_mutex_unlock(&s->lock);
            dt__spin_until_changed(&s->pushed, seen);
            pthread_mutex_lock(&s->lock);
        }
        while (!s->head) {
            s->sleeping = 1;
            if (rested || !s->be->thread_rest || !dt__thread_rest_on()) {
                pthread_cond_wait(&s->cond, &s->lock);
                s->sleeping = 0;
                continue;
            }
            struct timespec ts = dt__deadline_after_ms(DT_WORKER_REST_MS);
            int idle = pthread_cond_timedwait(&s->cond, &s->lock, &ts) == ETIMEDOUT;
            s->sleeping = 0;
            if (idle && !s->head) {
                /* Idle a while: the backend's threads for this worker stop
                 * counting against the cores the client's eager work (or
                 * another worker) uses. Unlocked: it joins threads. */
                pthread_mutex_unlock(&s->lock);
                s->be->thread_rest();
                rested = 1;
                pthread_mutex_lock(&s->lock);
            }
        }
        rested = 0;
        dt__krec *k = s->head;
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        long ran = 0;
        while (k) {
            dt__krec *next = k->next;
            /* A run's slot counts its kernels (core/records/step.h). */
            long kernels = k->kop == DT_KC_STEP ? k->rank : 1;
            if (k->kop == DT_KC_STOP) {
                stop = 1;
                dt__krec_free(k);
            } else if (k->kop == DT_KC_RELEASE) {
                dt__blob_free_dead(k->handle); /* cancelled or not */
                dt__krec_free(k);
            } else {
                if (atomic_load_explicit(&s->g->cancelled, memory_order_relaxed))
                    dt__kernel_drop(k, s);
                else
                    dt__kernel_run(k, s);
                /* Report progress every so often, so a client waiting on
                 * the backlog does not wait for a whole long batch. */
                if ((ran += kernels) >= 256) {
                    dt__backlog_done(s->g, ran);
                    ran = 0;
                }
            }
            k = next;
        }
        if (ran)
            dt__backlog_done(s->g, ran);
    }
    atomic_fetch_sub(&live_workers, 1);
    atomic_fetch_add(&workers_gen, 1);
    return NULL;
}

dt__stream *dt__stream_start(dt_graph *g, dt_device_type type, int64_t device_id, int kind) {
    dt__stream *s = dt__calloc(1, sizeof *s);
    if (!s) {
        dt__error(DT_ENOMEM, "streams: out of memory");
        return NULL;
    }
    /* The stop kernel is made with the stream, so stopping cannot fail. */
    s->stop_k = dt__krec_alloc(0);
    if (!s->stop_k) {
        dt__free(s);
        dt__error(DT_ENOMEM, "streams: out of memory");
        return NULL;
    }
    s->g = g;
    s->kind = kind;
    s->be = dt__graph_be(g, type);
    s->type = type;
    s->device_id = device_id;
    s->mem = dt__memdev_get(type, device_id);
    if (!s->mem) {
        dt__krec_free(s->stop_k);
        dt__free(s);
        return NULL;
    }
    const dt__backend *be = s->be;
    int node = dt__graph_local(g) ? -1 : dt__port_node_of(type, device_id);
    if (node >= 0) {
        /* A worker node's device (core/controller/remote.c): no thread; its kernels
         * leave at the flush. Local readers find its values at once (they
         * carry the error that says they are elsewhere). */
        s->remote = node + 1;
        atomic_store(&s->done, UINT64_MAX);
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->cond, NULL);
        pthread_mutex_init(&s->ev_lock, NULL);
        pthread_cond_init(&s->ev_cond, NULL);
        g->has_remote = 1;
        return s;
    }
    if (be->api_version >= 2 && be->stream_new) {
        char err[512] = "";
        /* The backend numbers this process's devices from 0 (a worker
         * node's CUDA devices are global ids from its first). */
        dt_status st = be->stream_new(type, device_id - g->first_id[type], kind, &s->ctx, err, sizeof err);
        if (st != DT_OK) {
            dt__error(st, "streams: the '%s' backend could not make a stream for device %lld: %s", be->name,
                      (long long)device_id, err[0] ? err : dt_status_str(st));
            dt__krec_free(s->stop_k);
            dt__free(s);
            return NULL;
        }
    }
    s->record_events = be->api_version >= 2 && be->event_new && be->event_record && be->event_free;
    pthread_mutex_init(&s->lock, NULL);
    dt__cond_init_monotonic(&s->cond);
    pthread_mutex_init(&s->ev_lock, NULL);
    pthread_cond_init(&s->ev_cond, NULL);
    if (pthread_create(&s->thread, NULL, worker_main, s) != 0) {
        pthread_cond_destroy(&s->ev_cond);
        pthread_mutex_destroy(&s->ev_lock);
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->lock);
        if (s->ctx && be->stream_free)
            be->stream_free(s->ctx);
        dt__krec_free(s->stop_k);
        dt__free(s);
        dt__error(DT_EINTERNAL, "streams: could not start a worker thread");
        return NULL;
    }
    return s;
}

void dt__stream_submit(dt__stream *s, dt__krec *head, dt__krec *tail) {
    if (!head)
        return;
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = head;
    else
        s->head = head;
    s->tail = tail;
    atomic_fetch_add_explicit(&s->pushed, 1, memory_order_release);
    if (s->sleeping)
        pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void dt__stream_send_stop(dt__stream *s) {
    dt__krec *k = s->stop_k; /* made with the stream: stopping cannot fail */
    s->stop_k = NULL;
    k->kop = DT_KC_STOP;
    dt__stream_submit(s, k, k);
}

void dt__stream_free(dt__stream *s) {
    dt__graphs_free(s);
    if (s->stop_k)
        dt__krec_free(s->stop_k); /* a remote stream's: never sent */
    pthread_cond_destroy(&s->ev_cond);
    pthread_mutex_destroy(&s->ev_lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    if (s->ctx && s->be->stream_free)
        s->be->stream_free(s->ctx);
    dt__free(s);
}

void dt__blob_release_ctl(dt_graph *g, dt__blob *b, dt__pool_lists *mine) {
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    uint64_t seq;
    dt__stream *s = dt__blob_event(b, &seq);
    if (s && !s->remote && !b->remote && b->impl) {
        b->next_dead = s->dead;
        s->dead = b;
        if (!s->dead_queued) {
            s->dead_queued = 1;
            s->next_dead_q = g->dead_q;
            g->dead_q = s;
        }
        return;
    }
    dt__blob_free_last(b, mine);
}
