/*
 * KernelStream: one worker thread per (device type, id, kind) with an
 * in-order kernel queue (the map of them and their events: streams.c).
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
 * the worker sleeps.
 */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "dist/comm.h"

/* Worker threads alive in the process, and a generation bumped whenever that
 * count changes, so each worker re-bounds its backend's intra-op threads:
 * the sum over workers must not exceed the machine's cores. */
static atomic_int live_workers;

static atomic_int workers_gen;

/* ---------------------------------------------------------------- blobs */

dt__pool dt__kernel_pool = DT__POOL_INIT(sizeof(dt__kernel));
dt__pool dt__blob_pool = DT__POOL_INIT(sizeof(dt__blob));

dt__blob *dt__blob_new(const dt__backend *be) {
    dt__blob *b = dt__pool_alloc(&dt__blob_pool);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->be = be;
    return b;
}

void dt__blob_release(dt__blob *b) {
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->charged)
        dt__mem_charge(b->mem, -b->charged);
    if (b->impl)
        b->be->free(b->impl);
    if (b->bev && b->be->event_free)
        b->be->event_free(b->bev);
    dt__free(b->error);
    dt__pool_free(&dt__blob_pool, b);
}

/* ------------------------------------------------------------- kernels */

/* From backend/kernels.def: a name per kernel op. */
static const char *const kop_names[DT_K_COUNT] = {
#define DT_KOP(E, name) [DT_K_##E] = name,
#include "backend/kernels.def"
};

/* Poisons k->out with a message naming the op, the device and the call site. */
static void poison(dt__krec *k, const dt__stream *s, const char *what) {
    if (!k->out || k->out->error)
        return;
    char buf[1024];
    if (k->site_file)
        snprintf(buf, sizeof buf, "%s failed on %s:%lld (created at %s:%d): %s", k->opname,
                 s->type == DT_DEVICE_CUDA ? "cuda" : "cpu", (long long)s->device_id, k->site_file,
                 k->site_line, what);
    else
        snprintf(buf, sizeof buf, "%s failed on %s:%lld: %s", k->opname,
                 s->type == DT_DEVICE_CUDA ? "cuda" : "cpu", (long long)s->device_id, what);
    k->out->error = dt__strdup(buf);
}

/* Charges a new output to its device; an output written into its donated
 * input's buffer takes that input's charge over instead. */
static void account(dt__krec *k, const dt__stream *s, int inplace) {
    dt__blob *out = k->out;
    if (!out || !out->impl || out->charged)
        return;
    if (inplace && k->n_in > 0 && k->in[0]->impl && s->be->same_storage &&
        s->be->same_storage(out->impl, k->in[0]->impl)) {
        dt__blob *in = k->in[0];
        out->charged = in->charged;
        out->mem = in->mem;
        in->charged = 0;
        atomic_fetch_add_explicit(&s->g->kernels_in_place, 1, memory_order_relaxed);
        return;
    }
    if (!s->mem)
        return;
    out->mem = s->mem;
    out->charged = (int64_t)s->be->nbytes(out->impl);
    dt__mem_charge(out->mem, out->charged);
}

/* Runs a backend kernel; returns 1 when it was allowed to write into in[0]
 * (DT_KF_INPLACE). */
static int run_backend(dt__krec *k, const dt__stream *s) {
    void *in[DT_MAX_OP_INPUTS] = {NULL};
    for (int i = 0; i < k->n_in; i++) {
        if (k->in[i]->error) {
            /* Carry the first failure unchanged to everything downstream. */
            k->out->error = dt__strdup(k->in[i]->error);
            return 0;
        }
        in[i] = k->in[i]->impl;
    }
    dt__kattr attr; /* the record's packed attributes, for the backend */
    dt__kattr_unpack(k, &attr);
    /* The kernel holds the only reference left to in[0]: its tensor was
     * released and no other kernel will read it, so its buffer may be reused
     * (peak memory of a chain of ops stays at one buffer). Which kernels may
     * is the window's reuse pass's call (DT_KF_REUSE). */
    if ((attr.flags & DT_KF_REUSE) && k->n_in > 0 && atomic_load(&k->in[0]->refs) == 1)
        attr.flags |= DT_KF_INPLACE;
    char err[512] = "";
    void *out = NULL;
    dt_status st = s->be->run(k->kop, &attr, in, k->n_in, &out, err, sizeof err);
    if (st != DT_OK) {
        char what[600];
        snprintf(what, sizeof what, "%s (%s kernel: %s)", err[0] ? err : dt_status_str(st), kop_names[k->kop],
                 dt_status_str(st));
        poison(k, s, what);
        s->be->free(out);
        return 0;
    }
    k->out->impl = out;
    return (attr.flags & DT_KF_INPLACE) != 0;
}

void dt__assembly_free(dt__assembly *as) {
    for (int i = 0; i < as->n; i++)
        dt__blob_release(as->pieces[i]);
    dt__free(as->pieces);
    dt__free(as->starts);
    dt__free(as->lens);
    dt__free(as);
}

/* A copy of piece i made by s's backend: the piece is staged through host
 * memory (to_host on its backend, from_host on s's) when another backend
 * made it, as when a value moves between device types. *tmp is the new impl
 * to free after use (NULL when the piece's own impl serves). */
static dt_status stage_piece(const dt__assembly *as, int i, const dt__kattr *a, const dt__stream *s,
                             void **impl, void **tmp, char *err, size_t errlen) {
    dt__blob *p = as->pieces[i];
    *tmp = NULL;
    *impl = p->impl;
    if (p->be == s->be)
        return DT_OK;
    size_t nbytes = p->be->nbytes(p->impl);
    void *buf = dt__malloc(nbytes ? nbytes : 1);
    if (!buf) {
        snprintf(err, errlen, "out of memory staging a piece through host memory");
        return DT_ENOMEM;
    }
    dt_status st = p->be->to_host(p->impl, buf, nbytes, err, errlen);
    if (st == DT_OK)
        st = s->be->from_host(a->dtype, a->ndim, as->lens + (size_t)i * (size_t)a->ndim, buf, tmp, err,
                              errlen);
    dt__free(buf);
    *impl = st == DT_OK ? *tmp : NULL;
    return st;
}

/* Places pieces made on other devices (of any type) into one new local
 * tensor. */
static void run_assemble(dt__krec *k, dt__stream *s) {
    dt__assembly *as = k->handle;
    k->handle = NULL;
    dt__kattr a;
    dt__kattr_unpack(k, &a);
    void **impls = dt__calloc((size_t)as->n, sizeof *impls);
    void **tmps = dt__calloc((size_t)as->n, sizeof *tmps);
    char err[512] = "";
    if (!impls || !tmps)
        poison(k, s, "out of memory");
    for (int i = 0; i < as->n && impls && tmps; i++) {
        dt__event_wait(s, as->pieces[i]);
        if (as->pieces[i]->error && !k->out->error)
            k->out->error = dt__strdup(as->pieces[i]->error);
        if (!k->out->error) {
            dt_status st = stage_piece(as, i, &a, s, &impls[i], &tmps[i], err, sizeof err);
            if (st != DT_OK)
                poison(k, s, err[0] ? err : dt_status_str(st));
        }
    }
    if (!k->out->error) {
        void *out = NULL;
        dt_status st =
            s->be->assemble(a.dtype, a.ndim, a.shape, as->n, impls, as->starts, 0, &out, err, sizeof err);
        if (st == DT_OK)
            k->out->impl = out;
        else
            poison(k, s, err[0] ? err : dt_status_str(st));
    }
    for (int i = 0; tmps && i < as->n; i++)
        if (tmps[i])
            s->be->free(tmps[i]);
    dt__free(tmps);
    dt__free(impls);
    dt__assembly_free(as);
}

/* Runs a collective kernel's rank through the graph's comm. */
static void run_collective(dt__krec *k, dt__stream *s) {
    dt__collattr a;
    dt__collattr_read(k, &a);
    /* Made before the kernel was queued (dt__lw_group, or a decoder's
     * resolver); the queue's hand-over publishes it. */
    dt__comm *c = atomic_load_explicit(&s->g->comm[s->type], memory_order_acquire);
    if (c)
        c->ops->run(c, &a, k->rank, k->in[0], k->out, k->opname);
    else if (!k->out->error)
        poison(k, s, "no communication back end for this device type");
}

static void run_kernel(dt__krec *k, dt__stream *s) {
    if (k->wait)
        for (int i = 0; i < k->n_in; i++)
            dt__event_wait(s, k->in[i]);
    int inplace = 0;
    switch (k->kop) {
    case DT_KC_COLLECTIVE:
        atomic_fetch_add_explicit(&s->n_comm, 1, memory_order_relaxed);
        run_collective(k, s);
        if (k->out && !k->out->impl && !k->out->error)
            poison(k, s, "collective produced no value");
        break;
    case DT_KC_FETCH:
        dt__future_arrive(k->handle, k->rank, k->in[0]);
        dt_future_release(k->handle);
        break;
    case DT_KC_SYNC:
        dt__future_arrive(k->handle, -1, NULL);
        dt_future_release(k->handle);
        break;
    case DT_KC_ASSEMBLE:
        atomic_fetch_add_explicit(&s->n_comm, 1, memory_order_relaxed);
        run_assemble(k, s);
        break;
    case DT_KC_GATE:
        dt__debug_gate_run(k, s);
        break;
    default:
        inplace = run_backend(k, s);
        break;
    }
    if (k->out) {
        account(k, s, inplace);
        /* The backend's event (when it has events) is recorded before the
         * host count says the kernel completed: a consumer that sees the
         * count finds the event. */
        if (s->record_events && (k->out->impl || k->out->error) &&
            s->be->event_new(s->ctx, &k->out->bev) == DT_OK &&
            s->be->event_record(k->out->bev, s->ctx) != DT_OK) {
            s->be->event_free(k->out->bev);
            k->out->bev = NULL;
        }
    }
    /* Every kernel the controller appended counts, in order: this one's
     * number is its output's event (streams.c). */
    dt__event_complete(s, ++s->completed);
    atomic_fetch_add_explicit(&s->n_run, 1, memory_order_relaxed);
    for (int i = 0; i < k->n_in; i++)
        dt__blob_release(k->in[i]);
    dt__blob_release(k->out);
    dt__krec_free(k);
}

/* After dt_graph_cancel: k is released without running. Its output is
 * poisoned and made ready (a kernel waiting for it wakes), a read or sync
 * fails, and a collective still meets its peers, so ranks that do run are
 * not left waiting for this one. */
static void drop_kernel(dt__krec *k, dt__stream *s) {
    static const char msg[] = "cancelled: the graph was cancelled (dt_graph_cancel) before this ran";
    atomic_fetch_add_explicit(&s->g->dropped, 1, memory_order_relaxed);
    if (k->out)
        poison(k, s, msg);
    switch (k->kop) {
    case DT_KC_COLLECTIVE:
        /* Peers read the published input: it must be ready (producers
         * elsewhere run or drop, so this wait ends). The poisoned output
         * tells the collective to meet its peers and compute nothing. */
        if (k->wait)
            for (int i = 0; i < k->n_in; i++)
                dt__event_wait(s, k->in[i]);
        run_collective(k, s);
        break;
    case DT_KC_FETCH:
    case DT_KC_SYNC:
        dt__future_fail(k->handle, DT_ECANCELLED, msg);
        dt__future_arrive(k->handle, -1, NULL);
        dt_future_release(k->handle);
        break;
    case DT_KC_ASSEMBLE:
        dt__assembly_free(k->handle);
        break;
    case DT_KC_GATE:
        dt__debug_gate_drop(k);
        break;
    default:
        break;
    }
    /* A dropped kernel still completes its number: consumers on other
     * streams wait on it (streams.c). */
    dt__event_complete(s, ++s->completed);
    for (int i = 0; i < k->n_in; i++)
        dt__blob_release(k->in[i]);
    dt__blob_release(k->out);
    dt__krec_free(k);
}

void dt__stream_forked(void) {
    /* The parent's workers do not exist in a fork child. */
    atomic_store(&live_workers, 0);
    atomic_fetch_add(&workers_gen, 1);
}

int dt__pool_busy(void) { return atomic_load(&live_workers) > 0; }

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
    atomic_fetch_add(&live_workers, 1);
    atomic_fetch_add(&workers_gen, 1);
    if (s->ctx && s->be->stream_enter)
        s->be->stream_enter(s->ctx);
    int seen_gen = -1;
    int stop = 0;
    while (!stop) {
        int gen = atomic_load_explicit(&workers_gen, memory_order_relaxed);
        if (gen != seen_gen && s->be->worker_init) {
            seen_gen = gen;
            s->be->worker_init(s->type, s->device_id, atomic_load(&live_workers));
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
            pthread_cond_wait(&s->cond, &s->lock);
            s->sleeping = 0;
        }
        dt__krec *k = s->head;
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        long ran = 0;
        while (k) {
            dt__krec *next = k->next;
            if (k->kop == DT_KC_STOP) {
                stop = 1;
                dt__krec_free(k);
            } else {
                if (atomic_load_explicit(&s->g->cancelled, memory_order_relaxed))
                    drop_kernel(k, s);
                else
                    run_kernel(k, s);
                /* Report progress every so often, so a client waiting on
                 * the backlog does not wait for a whole long batch. */
                if (++ran == 256) {
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
    if (be->api_version >= 2 && be->stream_new) {
        char err[512] = "";
        dt_status st = be->stream_new(type, device_id, kind, &s->ctx, err, sizeof err);
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
    pthread_cond_init(&s->cond, NULL);
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
    pthread_cond_destroy(&s->ev_cond);
    pthread_mutex_destroy(&s->ev_lock);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    if (s->ctx && s->be->stream_free)
        s->be->stream_free(s->ctx);
    dt__free(s);
}
