/*
 * KernelStream: one worker thread per device with an in-order kernel queue.
 *
 * Threads: dt__stream_start/submit/stop run on the controller thread;
 * worker_main runs on the stream's own thread. The queue is guarded by the
 * stream's lock (a leaf lock besides collective/future locks, which the worker
 * takes only while it holds no stream lock). The worker takes the whole list
 * at once and sleeps on the condition variable when it is empty; the
 * controller signals only when the worker sleeps.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* Worker threads alive in the process, and a generation bumped whenever that
 * count changes, so each worker re-bounds its backend's intra-op threads:
 * the sum over workers must not exceed the machine's cores. */
static atomic_int live_workers;
static atomic_int workers_gen;

/* ---------------------------------------------------------------- blobs */

dt__blob *dt__blob_new(const dt__backend *be) {
    dt__blob *b = dt__calloc(1, sizeof *b);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->be = be;
    return b;
}

void dt__blob_release(dt__blob *b) {
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->impl)
        b->be->free(b->impl);
    dt__free(b->error);
    dt__free(b);
}

/* ------------------------------------------------------------- kernels */

static const char *const kop_names[DT_K_COUNT] = {
    [DT_K_SLICE] = "slice",   [DT_K_FULL] = "full",     [DT_K_EMPTY] = "empty",
    [DT_K_ARANGE] = "arange", [DT_K_RAND] = "rand",     [DT_K_RANDN] = "randn",
    [DT_K_BINARY] = "binary", [DT_K_BINARY_SCALAR] = "binary_scalar",
    [DT_K_NEG] = "neg",       [DT_K_MATMUL] = "matmul", [DT_K_SUM] = "sum",
    [DT_K_CAT] = "cat",       [DT_K_SUM_N] = "sum_n",   [DT_K_ZEROS_LIKE] = "zeros_like",
    /* nn functional family */
    [DT_K_ACTIVATION] = "activation", [DT_K_SOFTMAX] = "softmax", [DT_K_NORM] = "norm",
    [DT_K_EMBEDDING] = "embedding",   [DT_K_CONV2D] = "conv2d",   [DT_K_INTERPOLATE] = "interpolate",
    [DT_K_PAD] = "pad",               [DT_K_DROPOUT] = "dropout", [DT_K_SDPA] = "sdpa",
};
_Static_assert(DT_K_COUNT == 23, "update kop_names when adding a kernel op");

/* Poisons k->out with a message naming the op, the device and the call site. */
static void poison(dt__kernel *k, const dt__stream *s, const char *what) {
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

static void run_backend(dt__kernel *k, const dt__stream *s) {
    void *in[DT_MAX_OP_INPUTS] = {NULL};
    for (int i = 0; i < k->n_in; i++) {
        if (k->in[i]->error) {
            /* Carry the first failure unchanged to everything downstream. */
            k->out->error = dt__strdup(k->in[i]->error);
            return;
        }
        in[i] = k->in[i]->impl;
    }
    char err[512] = "";
    void *out = NULL;
    dt_status st = s->be->run(k->kop, &k->attr, in, k->n_in, &out, err, sizeof err);
    if (st != DT_OK) {
        char what[600];
        snprintf(what, sizeof what, "%s (%s kernel: %s)", err[0] ? err : dt_status_str(st),
                 kop_names[k->kop], dt_status_str(st));
        poison(k, s, what);
        s->be->free(out);
        return;
    }
    k->out->impl = out;
}

static void run_kernel(dt__kernel *k, dt__stream *s) {
    switch (k->kop) {
    case DT_KC_COLLECTIVE:
        dt__coll_run(k);
        if (k->out && !k->out->impl && !k->out->error)
            poison(k, s, "collective produced no value");
        break;
    case DT_KC_FETCH:
        dt__future_arrive(k->extra, k->rank, k->in[0]);
        dt_future_release(k->extra);
        break;
    case DT_KC_SYNC:
        dt__future_arrive(k->extra, -1, NULL);
        dt_future_release(k->extra);
        break;
    default:
        run_backend(k, s);
        break;
    }
    for (int i = 0; i < k->n_in; i++)
        dt__blob_release(k->in[i]);
    dt__blob_release(k->out);
    dt__free(k);
}

/* ---------------------------------------------------------------- worker */

static void *worker_main(void *arg) {
    dt__stream *s = arg;
    atomic_fetch_add(&live_workers, 1);
    atomic_fetch_add(&workers_gen, 1);
    int seen_gen = -1;
    int stop = 0;
    while (!stop) {
        int gen = atomic_load_explicit(&workers_gen, memory_order_relaxed);
        if (gen != seen_gen && s->be->worker_init) {
            seen_gen = gen;
            s->be->worker_init(s->type, s->device_id, atomic_load(&live_workers));
        }
        pthread_mutex_lock(&s->lock);
        while (!s->head) {
            s->sleeping = 1;
            pthread_cond_wait(&s->cond, &s->lock);
            s->sleeping = 0;
        }
        dt__kernel *k = s->head;
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->lock);
        while (k) {
            dt__kernel *next = k->next;
            if (k->kop == DT_KC_STOP) {
                stop = 1;
                dt__free(k);
            } else {
                run_kernel(k, s);
            }
            k = next;
        }
    }
    atomic_fetch_sub(&live_workers, 1);
    atomic_fetch_add(&workers_gen, 1);
    return NULL;
}

dt__stream *dt__stream_start(const dt__backend *be, dt_device_type type, int64_t device_id) {
    dt__stream *s = dt__calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->be = be;
    s->type = type;
    s->device_id = device_id;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    if (pthread_create(&s->thread, NULL, worker_main, s) != 0) {
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->lock);
        dt__free(s);
        return NULL;
    }
    return s;
}

void dt__stream_submit(dt__stream *s, dt__kernel *head, dt__kernel *tail) {
    if (!head)
        return;
    pthread_mutex_lock(&s->lock);
    if (s->tail)
        s->tail->next = head;
    else
        s->head = head;
    s->tail = tail;
    if (s->sleeping)
        pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
}

void dt__stream_stop(dt__stream *s) {
    dt__kernel *k = dt__calloc(1, sizeof *k);
    DT_ASSERT(k);
    k->kop = DT_KC_STOP;
    dt__stream_submit(s, k, k);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    dt__free(s);
}
