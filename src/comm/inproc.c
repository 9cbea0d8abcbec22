/*
 * The communication interface's in-process back end (comm.h).
 *
 * A collective kernel carries no pointer: its attributes name a group of the
 * comm, its sequence number in that group, the kind, dims, dtype and every
 * rank's input shape and range (dt__collattr). Every rank's worker calls
 * comm->run with its own input; the in-process back end meets the ranks in
 * the group's rendezvous for that sequence number, where each rank publishes
 * its input blob, waits until all have, computes its own output from the
 * peers' blobs (read directly: blobs are immutable once produced), then
 * departs; the last to depart empties the rendezvous. Peers' blobs are
 * shared there, inside the comm, never through a kernel. A point-to-point
 * copy (a move between meshes) is a 2-rank collective of kind SENDRECV: the
 * sender publishes its piece, the receiver copies it into a blob of its own
 * backend (through host memory between device types).
 *
 * Deadlock freedom: the controller queues every collective on all of its
 * ranks' streams (all of one kind) in one global order, and each stream runs
 * in order, so the earliest unfinished collective always has all its ranks
 * either waiting in it or running local work before it. A group keeps two
 * rendezvous, for even and odd sequence numbers: a rank reaches collective
 * s + 2 of a group only after every rank has arrived at s + 1, hence left s,
 * so s's rendezvous is free again; a rank that finds its rendezvous still
 * held by an earlier number waits for peers that have all arrived there.
 *
 * Determinism: reductions add the ranks' blobs in rank order on every rank,
 * so all ranks get bit-identical sums, run after run.
 *
 * Groups spanning nodes: a group some of whose devices are another
 * process's (dt__comm_group_span) meets only this process's ranks in the
 * rendezvous and exchanges parts with the others by messages (span.c), then
 * computes as here.
 *
 * Threads: group_create/destroy on any thread (the comm's lock); run on the
 * ranks' workers. Lock order: comm lock (only to find a group, then
 * dropped) -> nothing; a group's lock is a leaf.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/inproc_int.h"
#include "comm/xfer.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/mesh.h"

/* ------------------------------------------------ the in-process back end */

typedef struct inproc {
    dt__comm base;
    pthread_mutex_t lock; /* guards groups */
    group *groups;
} inproc;

/* Group ids are unique in the process, across comms and device types. */
static _Atomic uint64_t group_ids;

static dt__comm *inproc_create(dt_device_type type) {
    inproc *c = dt__calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base.ops = &dt__comm_inproc;
    c->base.type = type;
    pthread_mutex_init(&c->lock, NULL);
    return &c->base;
}

static void group_free(group *gr) {
    for (int j = 0; j < 2; j++) {
        for (int i = 0; gr->rv[j].slots && i < gr->n; i++)
            dt__blob_release(gr->rv[j].slots[i]);
        dt__free(gr->rv[j].slots);
        if (gr->rv[j].pub)
            dt__coll_span_clear(&gr->rv[j], gr->n);
        dt__free(gr->rv[j].pub);
    }
    pthread_cond_destroy(&gr->cond);
    pthread_mutex_destroy(&gr->lock);
    dt__free(gr->ids);
    dt__free(gr->local);
    dt__free(gr);
}

static void inproc_destroy(dt__comm *base) {
    inproc *c = (inproc *)base;
    for (group *gr = c->groups, *next; gr; gr = next) {
        next = gr->next;
        group_free(gr);
    }
    pthread_mutex_destroy(&c->lock);
    dt__free(c);
}

static dt_status inproc_group_create(dt__comm *base, int n, const int64_t *device_ids, uint64_t *out) {
    inproc *c = (inproc *)base;
    group *gr = dt__calloc(1, sizeof *gr);
    if (gr) {
        gr->n = n;
        gr->ids = dt__calloc((size_t)n, sizeof *gr->ids);
        gr->rv[0].slots = dt__calloc((size_t)n, sizeof *gr->rv[0].slots);
        gr->rv[1].slots = dt__calloc((size_t)n, sizeof *gr->rv[1].slots);
    }
    if (!gr || !gr->ids || !gr->rv[0].slots || !gr->rv[1].slots) {
        if (gr) {
            dt__free(gr->ids);
            dt__free(gr->rv[0].slots);
            dt__free(gr->rv[1].slots);
            dt__free(gr);
        }
        return dt__error(DT_ENOMEM, "collectives: out of memory (group)");
    }
    memcpy(gr->ids, device_ids, (size_t)n * sizeof *gr->ids);
    pthread_mutex_init(&gr->lock, NULL);
    pthread_cond_init(&gr->cond, NULL);
    pthread_mutex_lock(&c->lock);
    gr->id = atomic_fetch_add(&group_ids, 1) + 1;
    gr->next = c->groups;
    c->groups = gr;
    pthread_mutex_unlock(&c->lock);
    *out = gr->id;
    return DT_OK;
}

static void inproc_group_destroy(dt__comm *base, uint64_t id) {
    inproc *c = (inproc *)base;
    pthread_mutex_lock(&c->lock);
    group **pp = &c->groups;
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    group *gr = *pp;
    if (gr)
        *pp = gr->next;
    pthread_mutex_unlock(&c->lock);
    if (gr)
        group_free(gr);
}

static group *find_group(inproc *c, uint64_t id);

dt_status dt__comm_group_span(dt__comm *base, uint64_t id, uint32_t tag, uint64_t key, int t0, int t1) {
    if (base->ops == &dt__comm_nccl)
        return dt__comm_nccl_span(base, id, tag, key, t0, t1);
    if (base->ops != &dt__comm_inproc)
        return DT_OK;
    group *gr = find_group((inproc *)base, id);
    if (!gr)
        return dt__error(DT_EINVAL, "collectives: no group %llu", (unsigned long long)id);
    unsigned char *local = dt__calloc((size_t)gr->n, 1);
    if (!local)
        return dt__error(DT_ENOMEM, "collectives: out of memory (group)");
    int nlocal = 0;
    for (int i = 0; i < gr->n; i++)
        nlocal += local[i] =
            (unsigned char)dt__xfer_is_local(dt__xfer_key(i == gr->n - 1 ? t1 : t0, gr->ids[i]));
    if (nlocal == gr->n) {
        dt__free(local);
        return DT_OK;
    }
    for (int j = 0; j < 2; j++)
        if (!gr->rv[j].pub && !(gr->rv[j].pub = dt__calloc(2 * (size_t)gr->n, sizeof *gr->rv[j].pub))) {
            dt__free(local);
            return dt__error(DT_ENOMEM, "collectives: out of memory (group)");
        }
    /* From here on the group's ids are its devices' keys: the messages
     * (span.c) name devices by key, whatever their type. */
    for (int i = 0; i < gr->n; i++)
        gr->ids[i] = dt__xfer_key(i == gr->n - 1 ? t1 : t0, gr->ids[i]);
    dt__free(gr->local);
    gr->local = local;
    gr->nlocal = nlocal;
    gr->tag = tag;
    gr->key = key;
    gr->span = 1;
    return DT_OK;
}

static group *find_group(inproc *c, uint64_t id) {
    pthread_mutex_lock(&c->lock);
    group *gr = c->groups;
    while (gr && gr->id != id)
        gr = gr->next;
    pthread_mutex_unlock(&c->lock);
    return gr;
}

/* Peer p's input sliced along dim_b to rank r's range, or whole (a ring
 * step's copy). */
dt_status dt__coll_slice_peer(const coll_view *c, int p, int r, int whole, void **out, char *err,
                              size_t errlen) {
    const dt__collattr *ca = c->a;
    dt__kattr a;
    memset(&a, 0, sizeof a);
    a.dtype = ca->dtype;
    a.ndim = ca->ndim;
    for (int d = 0; d < ca->ndim; d++)
        a.shape[d] = dt__collattr_at(ca->shapes, (size_t)p * (size_t)ca->ndim + (size_t)d);
    if (!whole) {
        a.start[ca->dim_b] = dt__collattr_at(ca->starts, (size_t)r);
        a.shape[ca->dim_b] = dt__collattr_at(ca->lens, (size_t)r);
    }
    void *in = c->slots[p]->impl;
    return c->slots[p]->be->run(DT_K_SLICE, &a, &in, 1, out, err, errlen);
}

/* A point-to-point receive: rank 0's input copied into a new impl of `be`,
 * staged through host memory when another backend made it (a move between
 * device types). */
static dt_status receive(const coll_view *c, const dt__backend *be, void **out, char *err, size_t errlen) {
    const dt__blob *src = c->slots[0];
    if (!src || !src->impl) {
        snprintf(err, errlen, "point-to-point copy without a sent value");
        return DT_EINVAL;
    }
    if (src->be == be)
        return dt__coll_slice_peer(c, 0, 1, 1, out, err, errlen);
    int64_t shape[DT_MAX_NDIM];
    for (int d = 0; d < c->a->ndim; d++)
        shape[d] = dt__collattr_at(c->a->shapes, (size_t)c->a->ndim + (size_t)d);
    size_t nbytes = src->be->nbytes(src->impl);
    void *buf = dt__malloc(nbytes ? nbytes : 1);
    if (!buf) {
        snprintf(err, errlen, "out of memory staging a copy through host memory");
        return DT_ENOMEM;
    }
    dt_status st = src->be->to_host(src->impl, buf, nbytes, err, errlen);
    if (st == DT_OK)
        st = be->from_host(c->a->dtype, c->a->ndim, shape, buf, out, err, errlen);
    dt__free(buf);
    return st;
}

/* Computes rank r's output from the published peers; pre[p], when pre and
 * it are not NULL, is peer p's input as rank r needs it (sliced already:
 * a remote peer's message, span.c), used in its place. */
dt_status dt__coll_compute(const coll_view *c, int r, void *const *pre, void **out, char *err,
                           size_t errlen) {
    if (c->kind == DT_COLL_SHIFT) /* a ring step: rank r gets rank r-1's input */
        return dt__coll_slice_peer(c, (r + c->n - 1) % c->n, r, 1, out, err, errlen);
    const dt__backend *be = c->be;
    void **impls = dt__calloc((size_t)c->n, sizeof *impls);
    char *made = dt__calloc((size_t)c->n, 1);
    if (!impls || !made) {
        dt__free(impls);
        dt__free(made);
        return DT_ENOMEM;
    }
    dt_status st = DT_OK;
    dt__kattr a;
    memset(&a, 0, sizeof a);
    a.dtype = c->a->dtype;
    a.dim = c->a->dim_a;
    int sliced = c->kind == DT_COLL_REDUCESCATTER || c->kind == DT_COLL_ALLTOALL;
    for (int p = 0; p < c->n && st == DT_OK; p++) {
        if (pre && pre[p])
            impls[p] = pre[p];
        else if (sliced && (st = dt__coll_slice_peer(c, p, r, 0, &impls[p], err, errlen)) == DT_OK)
            made[p] = 1;
        else if (!sliced)
            impls[p] = c->slots[p]->impl;
    }
    if (st == DT_OK) {
        int kop = c->kind == DT_COLL_ALLGATHER || c->kind == DT_COLL_ALLTOALL ? DT_K_CAT : DT_K_SUM_N;
        st = be->run(kop, &a, impls, c->n, out, err, errlen);
    }
    for (int p = 0; p < c->n; p++)
        if (made[p])
            be->free(impls[p]);
    dt__free(impls);
    dt__free(made);
    return st;
}

rendezvous *dt__coll_arrive(group *gr, const dt__collattr *a, int r, dt__blob *in, int expect) {
    rendezvous *rv = &gr->rv[a->seq & 1];
    pthread_mutex_lock(&gr->lock);
    /* Held by an earlier number whose ranks have all arrived: it frees. */
    while (rv->busy && rv->seq != a->seq)
        pthread_cond_wait(&gr->cond, &gr->lock);
    if (!rv->busy) {
        rv->busy = 1;
        rv->seq = a->seq;
        rv->arrived = rv->departed = 0;
        rv->staged[0] = rv->staged[1] = 0;
    }
    rv->slots[r] = dt__blob_retain(in);
    if (++rv->arrived == expect)
        pthread_cond_broadcast(&gr->cond);
    while (rv->arrived < expect)
        pthread_cond_wait(&gr->cond, &gr->lock);
    pthread_mutex_unlock(&gr->lock);
    return rv;
}

void dt__coll_depart(group *gr, rendezvous *rv, int n, int expect) {
    pthread_mutex_lock(&gr->lock);
    if (++rv->departed == expect) {
        for (int p = 0; p < n; p++) {
            dt__blob_release(rv->slots[p]);
            rv->slots[p] = NULL;
        }
        if (rv->pub)
            dt__coll_span_clear(rv, n);
        rv->busy = 0;
        pthread_cond_broadcast(&gr->cond);
    }
    pthread_mutex_unlock(&gr->lock);
}

void dt__coll_fail(dt__blob *out, const char *opname, const char *err) {
    char buf[700];
    snprintf(buf, sizeof buf, "%s failed in a collective: %s", opname, err[0] ? err : "backend error");
    out->error = dt__strdup(buf);
}

static void inproc_run(dt__comm *base, const dt__collattr *a, int r, dt__blob *in, dt__blob *out,
                       const char *opname) {
    group *gr = find_group((inproc *)base, a->group);
    int p2p = a->kind == DT_COLL_SENDRECV;
    /* A send has no output; every other rank has one and an input, but a
     * receive, which has no input. */
    if (!gr || gr->n != a->n || r < 0 || r >= a->n || (p2p && a->n != 2) || (!out && !(p2p && r == 0)) ||
        (!in && !(p2p && r == 1))) {
        if (out && !out->error)
            out->error = dt__strdup("collective: the kernel names a group this comm does not have");
        return;
    }
    if (gr->span) { /* ranks on other nodes (span.c) */
        dt__coll_span_run(gr, a, r, in, out, opname);
        return;
    }
    rendezvous *rv = dt__coll_arrive(gr, a, r, in, a->n);

    coll_view c = {.a = a, .kind = a->kind, .n = a->n, .slots = rv->slots, .be = in ? in->be : NULL};
    const char *failed = NULL;
    for (int p = 0; p < c.n && !failed; p++)
        failed = c.slots[p] ? c.slots[p]->error : NULL;
    if (!out) {
        /* A send: the receiver reads the published input. */
    } else if (out->error) {
        /* Dropped by dt_graph_cancel (kernel_run.c): it only met its peers. */
    } else if (failed) {
        out->error = dt__strdup(failed);
    } else {
        char err[512] = "";
        void *impl = NULL;
        if ((p2p ? receive(&c, out->be, &impl, err, sizeof err)
                 : dt__coll_compute(&c, r, NULL, &impl, err, sizeof err)) == DT_OK) {
            out->impl = impl;
        } else {
            dt__coll_fail(out, opname, err);
        }
    }
    dt__coll_depart(gr, rv, a->n, a->n);
}

const dt__comm_ops dt__comm_inproc = {
    "inproc", inproc_create, inproc_destroy, inproc_group_create, inproc_group_destroy, inproc_run,
};

const dt__comm_ops *dt__comm_for(dt_device_type type) {
    /* NCCL for cuda meshes when it can serve them (nccl.c says when);
     * in-process collectives otherwise, logical devices sharing a GPU too. */
    return type == DT_DEVICE_CUDA && dt__comm_nccl_usable() ? &dt__comm_nccl : &dt__comm_inproc;
}
