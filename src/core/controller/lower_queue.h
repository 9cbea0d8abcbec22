/*
 * Queuing a kernel record on a stream's batch (dt__lw_bind, then
 * dt__lw_stream_append): every kernel the controller makes or replays
 * passes here, so they are inline. Shared by core/controller/lower.c, core/controller/fetch.c,
 * core/controller/replay.c and the controller loop (core/controller/executor.c).
 *
 * Threads: the controller thread only. Nothing here locks: the batch is
 * handed over by the controller's flush (core/controller/executor.c).
 */
#ifndef DT_CORE_LOWER_QUEUE_H
#define DT_CORE_LOWER_QUEUE_H

#include "core/client/tensor.h"
#include "core/controller/lower_step.h"
#include "core/controller/replay.h"
#include "core/controller/trace_lower.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/worker/stream_int.h"

/* dt__lw_bcast_mesh (lower.h), inline: this round takes shared records
 * (L->bc_least), the node has not failed, nothing is recorded (explain,
 * traces), no worker node's device has a stream (a stream made in this
 * round may be one), and the mesh has between L->bc_least and
 * DT__LW_BCAST_MAX_DEV devices. */
static inline int dt__lw_bcast_on(const dt__lower *L, const dt_mesh *mesh) {
    return L->bc_least && L->status == DT_OK && !L->g->has_remote && !dt__rec_anything() &&
           mesh->ndev >= L->bc_least && mesh->ndev <= DT__LW_BCAST_MAX_DEV;
}

/* dt__lw_bcast_wanted (lower.h), inline: the mesh as above, a layout
 * that is not segmented. */
static inline int dt__lw_bcast_out(const dt__lower *L, const dt__tval *out) {
    return dt__lw_bcast_on(L, out->meta.mesh) && !out->meta.seg.n;
}

/* 1 when value v has a blob on every device of its mesh (a group's members
 * are all there); 0 where an earlier failure left it without. */
static inline int dt__lw_blobs_there(const dt__tval *v) {
    if (!v->blobs)
        return 0;
    for (int64_t d = 0; !v->grp && d < v->meta.mesh->ndev; d++)
        if (!v->blobs[d])
            return 0;
    return 1;
}

/* Puts s on the round's list of streams the flush hands over. */
static inline void dt__lw_stream_dirty(dt_graph *g, dt__stream *s) {
    if (!s->dirty) {
        s->dirty = 1;
        s->next_dirty = g->dirty;
        g->dirty = s;
    }
}

/* Links k (k->next NULL) at the end of the stream's batch, uncounted. */
static inline void dt__lw_stream_put(dt_graph *g, dt__stream *s, dt__krec *k) {
    if (s->btail)
        s->btail->next = k;
    else
        s->bhead = k;
    s->btail = k;
    dt__lw_stream_dirty(g, s);
}

/* Links k (k->next NULL) into the stream's batch and counts it, with no
 * capture or trace: a replayed record's path (core/controller/replay.c: the cache
 * answers only for a node that is not recorded, and a replay captures
 * nothing). Everything else appends with dt__lw_stream_append. */
static inline void dt__lw_stream_link(dt_graph *g, dt__stream *s, dt__krec *k) {
    if (s->in_run) /* its kernels come first on its streams (lower_step.h) */
        dt__lw_step_close(g);
    g->kqueued_local++;
    s->appended++;
    if (s->kind == DT_STREAM_COMM)
        g->comm_queued++; /* the schedule's cue (core/controller/sched.h) */
    dt__lw_stream_put(g, s, k);
}

/* Adds k to the stream's batch; the batch is handed over by flush()
 * (core/controller/executor.c). */
static inline void dt__lw_stream_append(dt_graph *g, dt__stream *s, dt__krec *k) {
    if (s->in_run) /* the run's kernels are counted first: a trace numbers k below */
        dt__lw_step_close(g);
    if (g->replay_cap) /* capturing this node's kernels (replay.h) */
        dt__replay_note(g->replay_cap, s, k);
    /* Tracing this node (core/records/trace.h): the record numbers it as the kernel
     * about to be appended. */
    if (dt__rec_enabled(DT__REC_TRACE) && g->rec && g->rec->cur_node)
        dt__rec_kernel_queued(g, s, k, s->appended + 1);
    k->next = NULL;
    dt__lw_stream_link(g, s, k);
}

/* Binds a queued kernel to stream s: names its blobs (dt__blob.id), makes
 * its output's event this kernel's number on s, and marks it to wait when
 * an input comes from another stream. */
static inline void dt__lw_bind(dt_graph *g, dt__stream *s, dt__krec *k) {
    if (s->in_run) /* the run's kernels are numbered on its streams first */
        dt__lw_step_close(g);
    if (k->out) {
        if (!k->out->id)
            k->out->id = ++g->blob_ids;
        k->out->producer = s;
        k->out->seq = s->appended + 1;
    }
    for (int i = 0; i < k->n_in; i++) {
        if (!k->in[i]->id)
            k->in[i]->id = ++g->blob_ids; /* a source the controller made */
        uint64_t seq;
        if (dt__blob_event(k->in[i], &seq) != s)
            k->wait = 1;
    }
}

#endif /* DT_CORE_LOWER_QUEUE_H */
