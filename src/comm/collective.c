/*
 * Collectives: the communication interface's in-process back end, and the
 * controller's cache of groups.
 *
 * A collective kernel carries no pointer: its attributes name a group of the
 * comm, its sequence number in that group, the kind, dims, dtype and every
 * rank's input shape and range (dt__collattr). Every rank's worker calls
 * comm->run with its own input; the in-process back end meets the ranks in
 * the group's rendezvous for that sequence number, where each rank publishes
 * its input blob, waits until all have, computes its own output from the
 * peers' blobs (read directly: blobs are immutable once produced), then
 * departs; the last to depart empties the rendezvous. Peers' blobs are
 * shared there, inside the comm, never through a kernel.
 *
 * Point-to-point copies (a move between meshes, redistribute.c) are
 * 2-rank collectives of kind SENDRECV: the sender publishes its piece, the
 * receiver copies it into a blob of its own backend (through host memory
 * between device types), both under one (group, seq) as any collective.
 *
 * Groups: the controller makes one group per ordered set of devices and
 * stream kind (a mesh dim's ranks around one coordinate of the others, as
 * NCCL communicators will be per (mesh, mesh dim), issue 12), caches it for
 * the graph's life and destroys it with the graph (dt__graph_comm_free).
 * Each group's collectives are numbered in the order the controller queues
 * them.
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
 * Groups spanning nodes (issue 13 item 3): a group some of whose devices
 * are another process's (dt__comm_group_span) meets only this process's
 * ranks in the rendezvous and exchanges parts with the others by messages
 * (coll_span.c), then computes as here.
 *
 * Threads: dt__coll_new, dt__lw_group and the cache on the controller;
 * group_create/destroy on any thread (the comm's lock); run on the ranks'
 * workers. Lock order: comm lock (only to find a group, then dropped) ->
 * nothing; a group's lock is a leaf.
 */
#include <stdio.h>
#include <string.h>

#include "comm/coll.h"
#include "comm/comm.h"
#include "comm/inproc_int.h"
#include "comm/xfer.h"
#include "core/controller/lower.h"
#include "core/controller/remote.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/mesh.h"
#include "core/worker/stream_int.h"

/* ---------------------------------------------------------- the planner */

dt__coll *dt__coll_new(dt_device_type type, int kind, int n, int ndim, dt_dtype dtype) {
    dt__coll *c = dt__calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->shapes = dt__calloc((size_t)n, sizeof *c->shapes);
    c->starts = dt__calloc((size_t)n, sizeof *c->starts);
    c->lens = dt__calloc((size_t)n, sizeof *c->lens);
    if (!c->shapes || !c->starts || !c->lens) {
        dt__coll_free(c);
        return NULL;
    }
    c->type = type;
    c->kind = kind;
    c->n = n;
    c->ndim = ndim;
    c->dtype = dtype;
    return c;
}

void dt__coll_free(dt__coll *c) {
    if (!c)
        return;
    dt__free(c->shapes);
    dt__free(c->starts);
    dt__free(c->lens);
    dt__free(c);
}

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
     * (coll_span.c) name devices by key, whatever their type. */
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
 * a remote peer's message, coll_span.c), used in its place. */
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
    if (gr->span) { /* ranks on other nodes (coll_span.c) */
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
    /* NCCL for cuda meshes when it can serve them (comm_nccl.c says when);
     * in-process collectives otherwise, logical devices sharing a GPU too. */
    return type == DT_DEVICE_CUDA && dt__comm_nccl_usable() ? &dt__comm_nccl : &dt__comm_inproc;
}

dt__comm *dt__graph_comm(dt_graph *g, dt_device_type type) {
    dt__comm *c = atomic_load_explicit(&g->comm[type], memory_order_acquire);
    if (c)
        return c;
    const dt__comm_ops *ops = dt__comm_for(type);
    dt__comm *made = ops->create(type);
    if (!made)
        return NULL;
    made->first_id = g->first_id[type];
    if (!atomic_compare_exchange_strong_explicit(&g->comm[type], &c, made, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        ops->destroy(made); /* another thread made it first */
        return c;
    }
    return made;
}

/* ------------------------------------------------------ the group cache */

/* One cached group (controller-only): its devices, stream kind and the next
 * sequence number. `type` is the comm that holds it; t0 and t1 its first
 * and last rank's device types (they differ only for a point-to-point pair
 * between device types, which the CPU comm holds). */
struct dt__group_ref {
    uint64_t id, seq;
    int type, t0, t1, kind, n;
    int retired; /* dt__graph_groups_retire: found by id, never reused */
    int64_t *ids;
    struct dt__group_ref *next;
};

/* The cached group of devices ids[n] (first of type t0, last of t1, the
 * others of t0) on `stream_kind` streams, held by comm `type`; made on first
 * use. *seq gets its next sequence number; 0 with L->status set on failure. */
static uint64_t group_for(dt__lower *L, dt_device_type type, int t0, int t1, int n, const int64_t *ids,
                          int stream_kind, uint64_t *seq) {
    dt_graph *g = L->g;
    struct dt__group_ref *ref = g->groups;
    for (; ref; ref = ref->next) {
        if (ref->retired || ref->type != (int)type || ref->t0 != t0 || ref->t1 != t1 ||
            ref->kind != stream_kind || ref->n != n)
            continue;
        int r = 0;
        while (r < n && ref->ids[r] == ids[r])
            r++;
        if (r == n)
            break;
    }
    if (!ref) {
        dt__comm *c = dt__graph_comm(g, type);
        ref = c ? dt__calloc(1, sizeof *ref) : NULL;
        if (ref)
            ref->ids = dt__calloc((size_t)n, sizeof *ref->ids);
        if (!ref || !ref->ids) {
            if (ref)
                dt__free(ref);
            dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
            return 0;
        }
        memcpy(ref->ids, ids, (size_t)n * sizeof *ids);
        if (c->ops->group_create(c, n, ref->ids, &ref->id) != DT_OK) {
            dt__free(ref->ids);
            dt__free(ref);
            dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
            return 0;
        }
        /* Devices on other nodes: the group exchanges data with them by
         * messages, under the name its kernels carry (coll_span.c), or
         * through NCCL across the nodes when the cluster chooses that for
         * a cuda group (it ships the unique id first; span_nccl.h). */
        if (!g->local_only && type == DT_DEVICE_CUDA && t0 == t1)
            dt__port_span_nccl(dt__remote_tag(g), ref->id, n, ref->ids);
        if (!g->local_only && dt__comm_group_span(c, ref->id, dt__remote_tag(g), ref->id, t0, t1) != DT_OK) {
            c->ops->group_destroy(c, ref->id);
            dt__free(ref->ids);
            dt__free(ref);
            dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
            return 0;
        }
        ref->type = (int)type;
        ref->t0 = t0;
        ref->t1 = t1;
        ref->kind = stream_kind;
        ref->n = n;
        ref->next = g->groups;
        g->groups = ref;
    }
    *seq = ++ref->seq;
    return ref->id;
}

uint64_t dt__lw_group(dt__lower *L, const dt_mesh *mesh, int64_t base, int64_t stride, int n, int stream_kind,
                      uint64_t *seq) {
    int64_t *ids = dt__calloc((size_t)n, sizeof *ids);
    if (!ids) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
        return 0;
    }
    for (int r = 0; r < n; r++)
        ids[r] = mesh->ids[base + r * stride];
    uint64_t id = group_for(L, mesh->type, (int)mesh->type, (int)mesh->type, n, ids, stream_kind, seq);
    dt__free(ids);
    return id;
}

/* ------------------------------------------------- point-to-point copies */

/* The kernel of one side of a copy: rank 0 sends `piece`, rank 1 receives
 * into a new blob of s's backend. NULL when out of memory. */
static dt__krec *p2p_krec(dt__lower *L, const dt__coll *c, uint64_t group, uint64_t seq, int rank,
                          dt__stream *s) {
    dt__krec *k = dt__coll_krec(c, group, seq, rank);
    if (!k)
        return NULL;
    if (rank == 1 && !(k->out = dt__blob_new(s->be))) {
        dt__krec_free(k);
        return NULL;
    }
    k->opname = dt__ops[L->node->op].name;
    k->site_file = L->node->site_file;
    k->site_line = L->node->site_line;
    return k;
}

dt__blob *dt__lw_send_recv(dt__lower *L, const dt_mesh *smesh, int64_t sidx, const dt_mesh *dmesh,
                           int64_t didx, dt__blob *piece, int ndim, const int64_t *shape, dt_dtype dtype) {
    dt__stream *ss = piece ? dt__lw_stream_kind(L, smesh, sidx, DT_STREAM_COMM) : NULL;
    dt__stream *ds = ss ? dt__lw_stream_kind(L, dmesh, didx, DT_STREAM_COMM) : NULL;
    if (!ds) {
        dt__blob_release(piece);
        dt__lw_fail(L, DT_ENOMEM, "out of memory (copy between meshes)");
        return NULL;
    }
    /* Between device types the copy stages through host memory: the CPU
     * comm holds the pair (decisions.md). */
    dt_device_type type = smesh->type == dmesh->type ? smesh->type : DT_DEVICE_CPU;
    const int64_t ids[2] = {smesh->ids[sidx], dmesh->ids[didx]};
    uint64_t seq = 0;
    /* The streams' actual kind (DTORCH_OVERLAP=0 folds communication into
     * compute): a group's kernels share one stream per rank. */
    uint64_t group = group_for(L, type, (int)smesh->type, (int)dmesh->type, 2, ids, ss->kind, &seq);
    dt__coll *c = group ? dt__coll_new(type, DT_COLL_SENDRECV, 2, ndim, dtype) : NULL;
    for (int r = 0; c && r < 2; r++)
        memcpy(c->shapes[r], shape, (size_t)ndim * sizeof *shape);
    dt__krec *send = c ? p2p_krec(L, c, group, seq, 0, ss) : NULL;
    dt__krec *recv = send ? p2p_krec(L, c, group, seq, 1, ds) : NULL;
    dt__coll_free(c);
    if (!recv) {
        dt__krec_free(send);
        dt__blob_release(piece);
        dt__lw_fail(L, DT_ENOMEM, "out of memory (copy between meshes)");
        return NULL;
    }
    send->n_in = 1;
    send->in[0] = piece; /* the caller's reference moves in */
    dt__lw_push_krec(L->g, ss, send);
    dt__lw_push_krec(L->g, ds, recv);
    return dt__blob_retain(recv->out);
}

uint64_t dt__graph_group_next_seq(dt_graph *g, uint64_t id) {
    for (struct dt__group_ref *ref = g->groups; ref; ref = ref->next)
        if (ref->id == id)
            return ++ref->seq;
    return 0;
}

int dt__graph_group_info(dt_graph *g, uint64_t id, int *type, int *n, const int64_t **device_ids) {
    for (struct dt__group_ref *ref = g->groups; ref; ref = ref->next)
        if (ref->id == id) {
            *type = ref->type;
            *n = ref->n;
            *device_ids = ref->ids;
            return 1;
        }
    return 0;
}

int dt__graph_group_types(dt_graph *g, uint64_t id, int *t0, int *t1) {
    for (struct dt__group_ref *ref = g->groups; ref; ref = ref->next)
        if (ref->id == id) {
            *t0 = ref->t0;
            *t1 = ref->t1;
            return 1;
        }
    return 0;
}

void dt__graph_groups_retire(dt_graph *g) {
    for (struct dt__group_ref *ref = g->groups; ref; ref = ref->next)
        ref->retired = 1;
}

void dt__graph_comm_free(dt_graph *g) {
    for (struct dt__group_ref *ref = g->groups, *next; ref; ref = next) {
        next = ref->next;
        dt__comm *c = atomic_load(&g->comm[ref->type]);
        if (c)
            c->ops->group_destroy(c, ref->id);
        dt__free(ref->ids);
        dt__free(ref);
    }
    g->groups = NULL;
    for (int t = 0; t < DT_DEVICE_TYPES; t++) {
        dt__comm *c = atomic_exchange(&g->comm[t], NULL);
        if (c)
            c->ops->destroy(c);
    }
}
