/*
 * The controller's side of collectives: a graph's comm per device type, its
 * cache of groups and their sequence numbers, and the lowering helpers that
 * queue a collective's or a point-to-point copy's kernels (lower_comm.h).
 *
 * Groups: the controller makes one group per ordered set of devices and
 * stream kind (a mesh dim's ranks around one coordinate of the others, as
 * NCCL communicators are per (mesh, mesh dim)), caches it for the graph's
 * life and destroys it with the graph (dt__graph_comm_free). Each group's
 * collectives are numbered in the order the controller queues them, on all
 * their ranks' streams in one global order (comm/inproc.c says why that is
 * deadlock-free).
 *
 * Threads: the controller (dt__graph_comm also on a worker node's serving
 * thread, net/subctl.c: the comm is made once, by compare-and-swap).
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/xfer.h"
#include "core/controller/lower.h"
#include "core/controller/lower_comm.h"
#include "core/controller/remote.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/records/mesh.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

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
 * use. NULL with L->status set on failure. */
static struct dt__group_ref *group_get(dt__lower *L, dt_device_type type, int t0, int t1, int n,
                                       const int64_t *ids, int stream_kind) {
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
            return ref;
    }
    dt__comm *c = dt__graph_comm(g, type);
    ref = c ? dt__calloc(1, sizeof *ref) : NULL;
    if (ref)
        ref->ids = dt__calloc((size_t)n, sizeof *ref->ids);
    if (!ref || !ref->ids) {
        if (ref)
            dt__free(ref);
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
        return NULL;
    }
    memcpy(ref->ids, ids, (size_t)n * sizeof *ids);
    if (c->ops->group_create(c, n, ref->ids, &ref->id) != DT_OK) {
        dt__free(ref->ids);
        dt__free(ref);
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
        return NULL;
    }
    /* Devices on other nodes: the group exchanges data with them by
     * messages, under the name its kernels carry (comm/span.c), or
     * through NCCL across the nodes when the cluster chooses that for
     * a cuda group (it ships the unique id first; span_nccl.h). */
    if (!dt__graph_local(g) && type == DT_DEVICE_CUDA && t0 == t1)
        dt__port_span_nccl(dt__remote_tag(g), ref->id, n, ref->ids);
    if (!dt__graph_local(g) && dt__comm_group_span(c, ref->id, dt__remote_tag(g), ref->id, t0, t1) != DT_OK) {
        c->ops->group_destroy(c, ref->id);
        dt__free(ref->ids);
        dt__free(ref);
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
        return NULL;
    }
    ref->type = (int)type;
    ref->t0 = t0;
    ref->t1 = t1;
    ref->kind = stream_kind;
    ref->n = n;
    ref->next = g->groups;
    g->groups = ref;
    return ref;
}

/* group_get, taking the group's next sequence number into *seq; its id, 0
 * with L->status set on failure. */
static uint64_t group_for(dt__lower *L, dt_device_type type, int t0, int t1, int n, const int64_t *ids,
                          int stream_kind, uint64_t *seq) {
    struct dt__group_ref *ref = group_get(L, type, t0, t1, n, ids, stream_kind);
    if (!ref)
        return 0;
    *seq = ++ref->seq;
    return ref->id;
}

/* The group of mesh devices base + r * stride (r < n) on `stream_kind`
 * streams (group_get). */
static struct dt__group_ref *mesh_group(dt__lower *L, const dt_mesh *mesh, int64_t base, int64_t stride,
                                        int n, int stream_kind) {
    int64_t *ids = dt__calloc((size_t)n, sizeof *ids);
    if (!ids) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
        return NULL;
    }
    for (int r = 0; r < n; r++)
        ids[r] = mesh->ids[base + r * stride];
    struct dt__group_ref *ref =
        group_get(L, mesh->type, (int)mesh->type, (int)mesh->type, n, ids, stream_kind);
    dt__free(ids);
    return ref;
}

uint64_t dt__lw_group(dt__lower *L, const dt_mesh *mesh, int64_t base, int64_t stride, int n, int stream_kind,
                      uint64_t *seq) {
    struct dt__group_ref *ref = mesh_group(L, mesh, base, stride, n, stream_kind);
    if (!ref)
        return 0;
    *seq = ++ref->seq;
    return ref->id;
}

/* ------------------------------------------------ mesh dims, cached */

/* One cached mesh dim (controller-only): dt__lw_coll_dim's view, then its
 * arrays in the same allocation. */
struct dt__coll_dim {
    dt__lw_cdim v;
    uint64_t uid;
    int md;
    struct dt__coll_dim *next;
};

/* Makes mesh dim md's entry (its streams of `kind`, already folded by
 * DTORCH_OVERLAP): NULL as dt__lw_coll_dim says. */
static struct dt__coll_dim *coll_dim_make(dt__lower *L, const dt_mesh *mesh, int md, int kind) {
    int n = (int)mesh->ndev, size = (int)mesh->shape[md], ng = n / size;
    int64_t stride = mesh->strides[md];
    size_t hdr = (sizeof(struct dt__coll_dim) + 7) / 8 * 8;
    struct dt__coll_dim *e = dt__calloc(1, hdr + (size_t)n * (2 * sizeof(void *) + 2 * sizeof(int)) +
                                               (size_t)ng * (sizeof(uint64_t) + sizeof(void *)));
    if (!e) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective group)");
        return NULL;
    }
    dt__lw_cdim *v = &e->v;
    v->n = n;
    v->ng = ng;
    v->ss = (dt__stream **)((uint8_t *)e + hdr);
    v->be = (const dt__backend **)(v->ss + n);
    v->id = (uint64_t *)(v->be + n);
    v->seq = (uint64_t **)(v->id + ng);
    v->rank = (int *)(v->seq + ng);
    v->gi = v->rank + n;
    e->uid = mesh->uid;
    e->md = md;
    for (int d = 0; d < n; d++) {
        v->ss[d] = dt__lw_stream_kind(L, mesh, d, kind);
        if (!v->ss[d] || v->ss[d]->remote) {
            dt__free(e);
            return NULL; /* L->status set, or a worker node's device */
        }
        v->be[d] = v->ss[d]->be;
    }
    v->kind = v->ss[0]->kind;
    /* The groups in the order of their first devices (coordinate 0 on md). */
    int64_t coord[DT_MAX_MESH_NDIM];
    for (int d = 0, k = 0; d < n; d++) {
        dt__mesh_coord(mesh, d, coord);
        v->rank[d] = (int)coord[md];
        if (coord[md])
            continue;
        struct dt__group_ref *ref = mesh_group(L, mesh, d, stride, size, v->kind);
        if (!ref) {
            dt__free(e);
            return NULL;
        }
        v->id[k] = ref->id;
        v->seq[k] = &ref->seq;
        for (int r = 0; r < size; r++)
            v->gi[d + r * stride] = k;
        k++;
    }
    return e;
}

const dt__lw_cdim *dt__lw_coll_dim(dt__lower *L, const dt_mesh *mesh, int md, int stream_kind) {
    int kind = L->g->overlap ? stream_kind : DT_STREAM_COMPUTE;
    struct dt__coll_dim **at = &L->g->coll_dims, *e;
    for (; (e = *at); at = &e->next)
        if (e->uid == mesh->uid && e->md == md && e->v.kind == kind) {
            if (at != &L->g->coll_dims) { /* the most recent first */
                *at = e->next;
                e->next = L->g->coll_dims;
                L->g->coll_dims = e;
            }
            return &e->v;
        }
    if (L->status != DT_OK || !(e = coll_dim_make(L, mesh, md, kind)))
        return NULL;
    e->next = L->g->coll_dims;
    L->g->coll_dims = e;
    return &e->v;
}

/* Forgets the cached mesh dims (their groups retired, or the graph ending). */
static void coll_dims_free(dt_graph *g) {
    for (struct dt__coll_dim *e = g->coll_dims, *next; e; e = next) {
        next = e->next;
        dt__free(e);
    }
    g->coll_dims = NULL;
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
    coll_dims_free(g);
    for (struct dt__group_ref *ref = g->groups; ref; ref = ref->next)
        ref->retired = 1;
}

void dt__graph_comm_free(dt_graph *g) {
    coll_dims_free(g);
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

int dt__graph_group_lookup(void *g, uint64_t id, int *type, int *n, const int64_t **device_ids, int *t0,
                           int *t1) {
    return dt__graph_group_info(g, id, type, n, device_ids) && dt__graph_group_types(g, id, t0, t1);
}
