/*
 * Lowering of value reads and graph-wide barriers (the FETCH and SYNC rows of
 * src/ops/ops.def): dt__lower_fetch sends one kernel per device holding a
 * distinct piece, dt__lower_sync one kernel per live stream, each arriving at
 * the node's future.
 *
 * Threads: the controller thread only. Locks: the future's lock inside
 * dt__future_arrive; the stream list is controller-only.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_queue.h"
#include "core/controller/window.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream_int.h"

/* -------------------------------------------------------- reads, syncs */

/* A fetch sends one kernel per device holding a distinct piece: devices at
 * coordinate 0 of every Replicate mesh dim. Partial pieces are summed. Every
 * piece's stream and kernel are made before any is queued: on failure no
 * kernel holds the future and the controller completes it with the error. */
dt_status dt__lower_fetch(dt__lower *L, dt__node *n) {
    dt__tval *v = n->in[0];
    dt_future *f = n->extra;
    const dt__meta *m = &v->meta;
    const dt_mesh *mesh = m->mesh;
    int accumulate = 0;
    for (int md = 0; md < mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_PARTIAL)
            accumulate = 1;
    int64_t coord[DT_MAX_MESH_NDIM], len[DT_MAX_NDIM];
    int64_t nslots = f->local >= 0 ? 1 : mesh->ndev;
    f->pieces = dt__calloc((size_t)nslots, sizeof *f->pieces);
    f->starts = dt__calloc((size_t)nslots * (size_t)(m->ndim ? m->ndim : 1), sizeof *f->starts);
    /* A small mesh's records and streams on the stack (a loop's read each step). */
    dt__krec *ks_small[8] = {0};
    dt__stream *ss_small[8];
    int small = nslots <= 8;
    dt__krec **ks = small ? ks_small : dt__calloc((size_t)nslots, sizeof *ks);
    dt__stream **ss = small ? ss_small : dt__calloc((size_t)nslots, sizeof *ss);
    if (!f->pieces || !f->starts || !ks || !ss) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (fetch pieces)");
        goto fail;
    }
    /* f->local: one device's block as stored, no sum, the piece starts at 0. */
    f->accumulate = f->local >= 0 ? 0 : accumulate;
    int npieces = 0;
    /* Not dt__lw_each: one piece per distinct block (Replicate copies are
     * skipped, f->local reads one device), each a core record queued only
     * once all are made. */
    for (int64_t i = f->local >= 0 ? f->local : 0; i < (f->local >= 0 ? f->local + 1 : mesh->ndev); i++) {
        if (f->local < 0) {
            dt__mesh_coord(mesh, i, coord);
            int skip = 0;
            for (int md = 0; md < mesh->ndim; md++)
                if (m->pl[md].kind == DT_PLACEMENT_REPLICATE && coord[md] != 0)
                    skip = 1;
            if (skip)
                continue;
            dt__local_region(m, coord, f->starts + (size_t)npieces * (size_t)m->ndim, len);
        }
        ss[npieces] = dt__lw_stream(L, mesh, i);
        const dt__blob *b = v->blobs[i];
        uint64_t seq;
        dt__stream *p = b ? dt__blob_event(b, &seq) : NULL;
        if (ss[npieces] && p && p->remote != ss[npieces]->remote)
            ss[npieces] = p; /* made before the device moved (core/controller/stream_map.c): read
                                          where it is */
        dt__krec *k = ss[npieces] ? dt__lw_core_krec(L, DT_KC_FETCH) : NULL;
        if (!k)
            goto fail;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(v->blobs[i]);
        k->rank = npieces;
        ks[npieces++] = k;
    }
    for (int r = 0; r < npieces; r++) {
        ks[r]->handle = f;
        atomic_fetch_add(&f->refs, 1);
        dt__lw_push_krec(L->g, ss[r], ks[r]);
    }
    f->npieces = npieces;
    dt__future_expect(f, npieces);
    if (!small) {
        dt__free(ks);
        dt__free(ss);
    }
    dt_future_release(f); /* the node's reference */
    return DT_OK;
fail:
    for (int64_t r = 0; ks && r < nslots; r++)
        dt__krec_discard(ks[r]);
    if (!small) {
        dt__free(ks);
        dt__free(ss);
    }
    dt__free(f->pieces);
    dt__free(f->starts);
    f->pieces = NULL;
    f->starts = NULL;
    return L->status;
}

dt_status dt__lower_sync(dt__lower *L, dt__node *n) {
    dt_graph *g = L->g;
    dt_future *f = n->extra;
    int count = 0;
    for (dt__stream *s = g->streams; s; s = s->next_all)
        count++;
    /* Every kernel first: a sync with some streams missing would complete
     * before their work. */
    dt__krec **ks = dt__calloc((size_t)(count ? count : 1), sizeof *ks);
    if (!ks)
        return dt__lw_fail(L, DT_ENOMEM, "out of memory (sync)");
    for (int i = 0; i < count; i++) {
        ks[i] = dt__lw_core_krec(L, DT_KC_SYNC);
        if (!ks[i]) {
            for (int j = 0; j < i; j++)
                dt__krec_discard(ks[j]);
            dt__free(ks);
            return L->status;
        }
    }
    dt__future_expect(f, count + 1);
    int i = 0;
    for (dt__stream *s = g->streams; s; s = s->next_all) {
        dt__krec *k = ks[i++];
        k->handle = f;
        atomic_fetch_add(&f->refs, 1);
        dt__lw_stream_append(g, s, k);
    }
    dt__free(ks);
    /* The controller's own arrival: covers a graph with no streams yet. */
    dt__future_arrive(f, -1, NULL);
    dt_future_release(f);
    return DT_OK;
}

void dt__fetch_discard(dt_graph *g, dt__node *n) {
    (void)g;
    dt__future_fail(n->extra, DT_ECANCELLED, "cancelled: the graph was cancelled before this read ran");
    dt_future_release(n->extra); /* the node's reference */
    n->extra = NULL;
}
