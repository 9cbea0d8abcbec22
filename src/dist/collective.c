/*
 * In-process collectives among CPU workers. Every rank's worker runs one
 * collective kernel: it publishes its input blob in the shared dt__coll,
 * waits until all ranks have published, computes its own output from the
 * peers' blobs (read directly: blobs are immutable once produced), then
 * departs; the last rank to depart frees the collective.
 *
 * Deadlock freedom: the controller enqueues every collective on all of its
 * ranks' streams in one global order, and each stream runs in order, so the
 * earliest unfinished collective always has all its ranks either waiting in
 * it or running local work before it.
 *
 * Determinism: reductions add the ranks' blobs in rank order on every rank,
 * so all ranks get bit-identical sums, run after run.
 *
 * Threads: dt__coll_new on the controller; dt__coll_run on the ranks'
 * workers. The collective's lock is a leaf lock.
 */
#include <stdio.h>
#include <string.h>

#include "core/core.h"

static void inproc_run(dt__kernel *k);

const dt__comm_ops dt__comm_inproc = {"inproc", inproc_run};

const dt__comm_ops *dt__comm_for(dt_device_type type) {
    /* CUDA devices are still driven by CPU-style workers, so in-process
     * collectives serve them too until the NCCL back end lands. */
    (void)type;
    return &dt__comm_inproc;
}

dt__coll *dt__coll_new(dt_device_type type, int kind, int n, int ndim, dt_dtype dtype) {
    dt__coll *c = dt__calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->slots = dt__calloc((size_t)n, sizeof *c->slots);
    c->shapes = dt__calloc((size_t)n, sizeof *c->shapes);
    c->starts = dt__calloc((size_t)n, sizeof *c->starts);
    c->lens = dt__calloc((size_t)n, sizeof *c->lens);
    if (!c->slots || !c->shapes || !c->starts || !c->lens) {
        dt__free(c->slots);
        dt__free(c->shapes);
        dt__free(c->starts);
        dt__free(c->lens);
        dt__free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    c->ops = dt__comm_for(type);
    c->kind = kind;
    c->n = n;
    c->ndim = ndim;
    c->dtype = dtype;
    return c;
}

static void coll_free(dt__coll *c) {
    for (int i = 0; i < c->n; i++)
        dt__blob_release(c->slots[i]);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    dt__free(c->slots);
    dt__free(c->shapes);
    dt__free(c->starts);
    dt__free(c->lens);
    dt__free(c);
}

void dt__coll_free(dt__coll *c) { coll_free(c); }

/* Slices peer p's input along dim_b to rank r's range. */
static dt_status slice_peer(const dt__kernel *k, const dt__coll *c, int p, int r, void **out, char *err,
                            size_t errlen) {
    dt__kattr a;
    memset(&a, 0, sizeof a);
    a.dtype = c->dtype;
    a.ndim = c->ndim;
    for (int d = 0; d < c->ndim; d++)
        a.shape[d] = c->shapes[p][d];
    a.start[c->dim_b] = c->starts[r];
    a.shape[c->dim_b] = c->lens[r];
    void *in = c->slots[p]->impl;
    (void)k;
    return c->slots[p]->be->run(DT_K_SLICE, &a, &in, 1, out, err, errlen);
}

/* A ring step: rank r's output is a copy of rank r-1's input, whole. */
static dt_status shift(const dt__coll *c, int r, void **out, char *err, size_t errlen) {
    int p = (r + c->n - 1) % c->n;
    dt__kattr a;
    memset(&a, 0, sizeof a);
    a.dtype = c->dtype;
    a.ndim = c->ndim;
    for (int d = 0; d < c->ndim; d++)
        a.shape[d] = c->shapes[p][d];
    void *in = c->slots[p]->impl;
    return c->slots[p]->be->run(DT_K_SLICE, &a, &in, 1, out, err, errlen);
}

/* Computes rank r's output from the published peers. */
static dt_status compute(dt__kernel *k, dt__coll *c, int r, void **out, char *err, size_t errlen) {
    if (c->kind == DT_COLL_SHIFT)
        return shift(c, r, out, err, errlen);
    const dt__backend *be = c->slots[r]->be;
    void **impls = dt__calloc((size_t)c->n, sizeof *impls);
    if (!impls)
        return DT_ENOMEM;
    dt_status st = DT_OK;
    dt__kattr a;
    memset(&a, 0, sizeof a);
    a.dtype = c->dtype;
    a.dim = c->dim_a;
    int sliced = c->kind == DT_COLL_REDUCESCATTER || c->kind == DT_COLL_ALLTOALL;
    for (int p = 0; p < c->n && st == DT_OK; p++)
        st = sliced ? slice_peer(k, c, p, r, &impls[p], err, errlen) : (impls[p] = c->slots[p]->impl, DT_OK);
    if (st == DT_OK) {
        int kop = c->kind == DT_COLL_ALLGATHER || c->kind == DT_COLL_ALLTOALL ? DT_K_CAT : DT_K_SUM_N;
        st = be->run(kop, &a, impls, c->n, out, err, errlen);
    }
    if (sliced)
        for (int p = 0; p < c->n; p++)
            be->free(impls[p]);
    dt__free(impls);
    return st;
}

static void inproc_run(dt__kernel *k) {
    dt__coll *c = k->extra;
    int r = k->rank;
    pthread_mutex_lock(&c->lock);
    c->slots[r] = dt__blob_retain(k->in[0]);
    if (++c->arrived == c->n)
        pthread_cond_broadcast(&c->cond);
    while (c->arrived < c->n)
        pthread_cond_wait(&c->cond, &c->lock);
    pthread_mutex_unlock(&c->lock);

    const char *failed = NULL;
    for (int p = 0; p < c->n && !failed; p++)
        failed = c->slots[p]->error;
    if (k->out->error) {
        /* Dropped by dt_graph_cancel (kernel_stream.c): it only met its peers. */
    } else if (failed) {
        k->out->error = dt__strdup(failed);
    } else {
        char err[512] = "";
        void *out = NULL;
        if (compute(k, c, r, &out, err, sizeof err) == DT_OK) {
            k->out->impl = out;
        } else {
            char buf[700];
            snprintf(buf, sizeof buf, "%s failed in a collective: %s", k->opname,
                     err[0] ? err : "backend error");
            k->out->error = dt__strdup(buf);
        }
    }

    pthread_mutex_lock(&c->lock);
    int last = ++c->departed == c->n;
    pthread_mutex_unlock(&c->lock);
    if (last)
        coll_free(c);
}
