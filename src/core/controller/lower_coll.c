/*
 * Collectives as one device-independent record (docs/decisions.md,
 * "Collectives as one device-independent record" and "A collective's cost
 * per mesh, not per rank"): an all-reduce, all-gather or reduce-scatter
 * whose ranks' kernels are the same bytes but for their rank, group and
 * sequence number is one shared record (core/records/bcast.h): its image is
 * the collective kernel (dt__coll_pack, packed once), each device's slot
 * carries its comm rank, and where the mesh dim is not the whole mesh (a
 * 2-D mesh: each coordinate of the other dims its own group) the record
 * keeps each slot's group id and sequence number after the image's
 * attributes, which the worker puts into its instance (core/worker/
 * kernel_run.c). The streams and groups come from the mesh dim's cache
 * (dt__lw_coll_dim, lower_comm.c): one look-up per collective.
 *
 * Two forms. dt__lw_coll_groups (redistribute.c) reads its input as a blob
 * group (core/records/bgroup.h) that the record holds once, its slots
 * borrowing their members, and makes its output as one group whose events
 * are by number (the group names the collective's event bases: each
 * stream's count before it, kidx 0), so the controller writes no blob per
 * device: per device only the slot and its link. dt__lw_coll_bcast (reduce.c's
 * gathers, and redistribute with blob groups off) reads and makes per-device
 * blobs, bound per slot as before.
 *
 * Under replay, a node whose lowering was one dt__lw_coll_groups record has
 * it as its template (dt__replay_note_coll): dt__lw_coll_replay makes the
 * record again from the template's attributes, renumbered (coll_emit is
 * both paths').
 *
 * Either way every rank's group, sequence number, stream, input, output,
 * wait and event number is the one the per-rank path (dt__lw_collective,
 * lower.c) gives it, so the rendezvous, the reduction order and every
 * consumer's view are unchanged.
 *
 * Threads: the controller thread only.
 */
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_comm.h"
#include "core/controller/lower_queue.h"
#include "core/records/bcast.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/records/mesh.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

/* Bytes a slot's group id and sequence number take after the image's
 * attributes (little-endian, as the attributes' first 16 bytes). */
#define IDS_BYTES 16

/* 1 when collective c (the first group's) may be one shared record on
 * mesh: a mesh dt__lw_bcast would share, the in-process comm, a kind whose
 * ranks differ only by rank. */
static int coll_wanted(const dt__lower *L, const dt_mesh *mesh, const dt__coll *c) {
    return c && mesh->ndev >= 2 && dt__lw_bcast_on(L, mesh) && mesh->ndev <= DT__BCAST_POOLED &&
           mesh->type == DT_DEVICE_CPU && c->type == DT_DEVICE_CPU &&
           (c->kind == DT_COLL_ALLREDUCE || c->kind == DT_COLL_ALLGATHER || c->kind == DT_COLL_REDUCESCATTER);
}

/* A shared record of the collective's n slots, alen bytes of attributes
 * (and `ids` bytes of slots' ids after them): its image's kernel, op name
 * and call site set, each slot's header naming the record, its rank and
 * one input. NULL when out of memory. */
static dt__bcast *coll_record(dt__lower *L, const dt__lw_cdim *cd, size_t alen, size_t ids,
                              const char *opname) {
    dt__bcast *b = dt__bcast_new(L->g->ctl_pools, cd->n, alen + ids);
    if (!b)
        return NULL;
    dt__lw_bcast_init(L, b, DT_KC_COLLECTIVE, opname, 1)->alen = (uint32_t)alen;
    b->coll_ids = ids != 0;
    for (int d = 0; d < cd->n; d++)
        dt__bcast_slot(b, d)->rank = cd->rank[d];
    return b;
}

/* A record made but not queued. */
static void record_drop(dt__bcast *b) {
    atomic_store_explicit(&b->left, 1, memory_order_relaxed);
    dt__bcast_unref(b);
}

/* The image's attributes, numbered: one sequence number of each group, the
 * first group's id and number packed from c, or (c NULL) a template's
 * attributes `tattr` copied with them in its first 16 bytes (where
 * dt__coll_pack puts them), and, with several groups, each slot's in the
 * ids after the attributes. */
static void coll_number(const dt__lw_cdim *cd, const dt__coll *c, const uint8_t *tattr, dt__bcast *b) {
    uint64_t id0 = 0, seq0 = dt__lw_coll_seq(cd, 0, &id0);
    if (c) {
        dt__coll_pack(c, id0, seq0, b->img->attr);
    } else {
        memcpy(b->img->attr, tattr, b->img->alen);
        uint8_t *p = b->img->attr;
        dt__le_put(&p, id0, 8);
        dt__le_put(&p, seq0, 8);
    }
    if (!b->coll_ids)
        return;
    uint8_t *ids = b->img->attr + b->img->alen;
    uint64_t seq[DT__BCAST_POOLED], id[DT__BCAST_POOLED];
    seq[0] = seq0;
    id[0] = id0;
    for (int gi = 1; gi < cd->ng; gi++)
        seq[gi] = dt__lw_coll_seq(cd, gi, &id[gi]);
    for (int d = 0; d < cd->n; d++) {
        uint8_t *p = ids + (size_t)d * IDS_BYTES;
        dt__le_put(&p, id[cd->gi[d]], 8);
        dt__le_put(&p, seq[cd->gi[d]], 8);
    }
}

/* Closes the open run of shared records when it is on these streams (a
 * collective on the compute streams, DTORCH_OVERLAP=0): its kernels are
 * numbered there first. */
static void close_run_on(dt_graph *g, const dt__lw_cdim *cd) {
    for (int d = 0; d < cd->n; d++)
        if (cd->ss[d]->in_run) {
            dt__lw_step_close(g);
            return;
        }
}

/* The shared record of a collective over mesh dim md (cd its streams and
 * groups, ng groups), alen bytes of attributes packed from c or (c NULL)
 * copied from a template's `tattr` (coll_number), reading group `in` (the
 * caller's hold moves into it), making *out. 1; on a failure L->status is
 * set and *out untouched (the caller keeps its hold). */
static int coll_emit(dt__lower *L, const dt__lw_cdim *cd, int ng, int md, int stream_kind, const dt__coll *c,
                     const uint8_t *tattr, size_t alen, dt__bgroup *in, dt__bgroup **out,
                     const char *opname) {
    dt_graph *g = L->g;
    int n = cd->n;
    size_t ids = ng > 1 ? (size_t)n * IDS_BYTES : 0;
    dt__bcast *b = coll_record(L, cd, alen, ids, opname);
    dt__runev *ev = b ? dt__runev_new(g->ctl_pools, n) : NULL;
    dt__bgroup *gr = ev ? dt__bgroup_new(g->ctl_pools, n, cd->be, DT__BGROUP_REFS) : NULL;
    if (!gr) {
        if (ev) {
            atomic_init(&ev->refs, 1);
            dt__runev_unref(ev, g->ctl_pools);
        }
        if (b)
            record_drop(b);
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective)");
        return 1;
    }
    close_run_on(g, cd);
    coll_number(cd, c, tattr, b);
    b->gin[0] = in; /* the caller's hold moves into the record */
    /* The output's events by number: kernel 0 after each stream's count. */
    atomic_init(&ev->refs, 1);
    gr->ev = ev;
    gr->kidx = 0;
    dt__blob **pin = dt__bgroup_ptrs(in), **pout = dt__bgroup_ptrs(gr);
    if (g->replay_cap && c) /* a node being captured: the record may be its template */
        dt__replay_note_coll(g->replay_cap, md, stream_kind, b->img->attr, (uint32_t)alen, in, gr);
    for (int d = 0; d < n; d++) {
        dt__stream *s = cd->ss[d];
        dt__krec *slot = dt__bcast_slot(b, d);
        slot->in[0] = pin[d]; /* borrowed from the group the record holds */
        slot->out = pout[d];  /* the kernel's reference */
        slot->wait = 1;       /* the worker tells its own stream's events by a comparison */
        ev->ss[d] = s;
        ev->base[d] = s->appended;
        dt__lw_stream_link(g, s, slot);
    }
    *out = gr;
    /* One per group, as the per-rank path counts (dt_debug_collectives_lowered). */
    atomic_fetch_add_explicit(&dt__collectives_lowered, ng, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->bcast_colls, 1, memory_order_relaxed);
    return 1;
}

int dt__lw_coll_groups(dt__lower *L, const dt_mesh *mesh, int md, int stream_kind, const dt__coll *c,
                       dt__bgroup *in, dt__bgroup **out, const char *opname) {
    dt_graph *g = L->g;
    int ng = (int)(mesh->ndev / mesh->shape[md]);
    if (!in || !coll_wanted(L, mesh, c) || c->n != mesh->shape[md] ||
        !atomic_load_explicit(&g->bgroup, memory_order_relaxed))
        return 0;
    size_t alen = dt__coll_attr_size(c), ids = ng > 1 ? (size_t)mesh->ndev * IDS_BYTES : 0;
    if (alen + ids > DT__KATTR_PACK_MAX)
        return 0; /* more than a worker instantiates on its stack */
    const dt__lw_cdim *cd = dt__lw_coll_dim(L, mesh, md, stream_kind);
    if (!cd)
        return 0; /* L->status set, or a worker node's device: the per-rank path */
    return coll_emit(L, cd, ng, md, stream_kind, c, NULL, alen, in, out, opname);
}

int dt__lw_coll_replay(dt__lower *L, const dt__node *n, const dt__coll_tpl *t) {
    dt_graph *g = L->g;
    dt__tval *src = n->in[0], *dst = n->out;
    const dt_mesh *mesh = src->meta.mesh;
    /* What the capture's lowering asked that the signature does not hold:
     * the switches (coll_wanted, dt__lw_coll_groups), and blobs on every
     * device of the input (dt__lower_redistribute, src/ops/redistribute.c). */
    if (!dt__lw_bcast_on(L, mesh) || !atomic_load_explicit(&g->bgroup, memory_order_relaxed) || dst->blobs)
        return 0;
    dt__bgroup *in = dt__lw_group_of_all(g, src);
    if (!in)
        return 0;
    const dt__lw_cdim *cd = dt__lw_coll_dim(L, mesh, t->md, t->stream_kind);
    if (!cd)
        return 0;        /* L->status set (the lowering reports it again), or a worker node's device */
    dt__bgroup_hold(in); /* the record's, as the plan's was */
    dt__bgroup *out = NULL;
    int ng = (int)(mesh->ndev / mesh->shape[t->md]);
    coll_emit(L, cd, ng, t->md, t->stream_kind, NULL, t->attr, t->alen, in, &out, NULL);
    if (!out) {
        dt__lw_group_drop(g, in); /* failed: the record's hold goes */
        return 1;
    }
    dst->grp = out; /* its one hold, the value's */
    dst->blobs = dt__bgroup_ptrs(out);
    return 1;
}

int dt__lw_coll_bcast(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c, int64_t base,
                      int64_t stride, dt__blob **blobs, dt__blob **next, const char *opname) {
    dt_graph *g = L->g;
    int n = (int)mesh->ndev;
    /* The whole mesh in device order: one mesh dim, the others of one device. */
    if (!coll_wanted(L, mesh, c) || base != 0 || stride != 1 || c->n != n)
        return 0;
    size_t alen = dt__coll_attr_size(c);
    if (alen > DT__KATTR_PACK_MAX)
        return 0; /* more than a worker instantiates on its stack */
    for (int d = 0; d < n; d++)
        if (!blobs[d])
            return 0; /* an earlier failure: the per-rank path reports it */
    int md = 0;       /* the mesh dim that is the whole mesh */
    while (mesh->shape[md] != n)
        md++;
    const dt__lw_cdim *cd = dt__lw_coll_dim(L, mesh, md, stream_kind);
    if (!cd)
        return 0; /* L->status set, or a worker node's device: the per-rank path */
    dt__bcast *b = coll_record(L, cd, alen, 0, opname);
    dt__blob *outs[DT__BCAST_POOLED];
    int made = 0;
    while (b && made < n && (outs[made] = dt__blob_new_in(g->ctl_pools, cd->be[made]))) {
        atomic_init(&outs[made]->refs, 2); /* the kernel's and the caller's (next) */
        made++;
    }
    if (made < n) {
        for (int d = 0; d < made; d++) {
            dt__blob_release(outs[d]);
            dt__blob_release(outs[d]);
        }
        if (b)
            record_drop(b);
        dt__lw_fail(L, DT_ENOMEM, "out of memory (collective)");
        dt__coll_free(c);
        return 1;
    }
    close_run_on(g, cd);
    coll_number(cd, c, NULL, b);
    dt__coll_free(c);
    if (g->replay_cap)
        dt__replay_uncapturable(g->replay_cap);
    for (int d = 0; d < n; d++) {
        dt__krec *slot = dt__bcast_slot(b, d);
        slot->in[0] = blobs[d]; /* the caller's reference moves into the slot */
        blobs[d] = NULL;
        slot->out = outs[d];
        dt__lw_bind(g, cd->ss[d], slot);
        dt__lw_stream_link(g, cd->ss[d], slot);
        next[d] = outs[d];
    }
    atomic_fetch_add_explicit(&g->bcast_colls, 1, memory_order_relaxed);
    return 1;
}

dt__bgroup *dt__lw_group_of_all(dt_graph *g, dt__tval *v) {
    if (v->grp || !v->blobs)
        return v->grp;
    for (int64_t d = 0; d < v->meta.mesh->ndev; d++)
        if (!v->blobs[d])
            return NULL; /* an earlier failure: per device, which reports it */
    return dt__lw_group_of(g, v, (int)v->meta.mesh->ndev);
}

dt__bgroup *dt__lw_adopt(dt_graph *g, dt__blob *const *blobs, int n) {
    if (!atomic_load_explicit(&g->bgroup, memory_order_relaxed))
        return NULL;
    for (int d = 0; d < n; d++)
        if (!blobs[d])
            return NULL;
    return dt__bgroup_adopt(g->ctl_pools, n, blobs);
}

void dt__lw_group_drop(dt_graph *g, dt__bgroup *gr) {
    if (!dt__bgroup_unhold(gr))
        return;
    dt__blob **m = dt__bgroup_ptrs(gr);
    for (int d = 0; d < gr->n; d++)
        if (!dt__bgroup_taken(gr, d))
            dt__blob_release_ctl(g, m[d], g->ctl_pools);
    dt__bgroup_member_gone(gr, g->ctl_pools);
}
