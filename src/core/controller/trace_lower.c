/*
 * The controller's records for explain and traces (core/records/trace.h):
 * a node record per node it lowers, an explain record per collective (the
 * groups of one collective merged) or point-to-point move, and the map from
 * each queued kernel to its node.
 *
 * Threads: controller only.
 */
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/trace_lower.h"
#include "core/records/coll.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream_int.h"

/* Appends the collective being merged, if any. */
static void flush_pending(dt__rec *r) {
    if (!r->pend_valid)
        return;
    r->pend_valid = 0;
    if (dt__recbuf_count(&r->explain) >= r->explain.cap)
        dt__recbuf_rewind_taken(&r->explain, &r->lock);
    dt_explain_record *e = dt__recbuf_slot(&r->explain);
    if (!e)
        return;
    *e = r->pend;
    dt__recbuf_commit(&r->explain);
}

int64_t dt__rec_node_begin(dt__lower *L, dt__node *n) {
    dt__rec *r = L->g->rec;
    if (!r || !dt__rec_enabled(DT__REC_TRACE))
        return 0;
    /* Reads and syncs are the take's own synchronisation: not traced, so
     * nothing is written after a sync completes (STOP never comes here: the
     * controller handles it before). */
    if (dt__ops[n->op].flags & DT_OPF_FUTURE)
        return 0;
    r->cur_node = ++r->node_seq;
    r->cur_op = NULL;
    return dt__rec_now();
}

void dt__rec_node_end(dt__lower *L, dt__node *n, int64_t t0) {
    dt__rec *r = L->g->rec;
    if (!r)
        return;
    flush_pending(r);
    if (!r->cur_node)
        return;
    dt__rec_node *rec = dt__recbuf_slot(&r->nodes);
    if (rec) {
        dt_trace_node *p = &rec->pub;
        p->id = r->cur_node;
        /* The family's name ("binary", "reduce") says less than its kernels'. */
        p->op = r->cur_op ? r->cur_op : dt__ops[n->op].name;
        p->file = n->site_file;
        p->line = n->site_line;
        p->client_thread = n->rec_tid;
        p->client_begin_ns = n->rec_t0;
        p->client_end_ns = n->rec_t1;
        p->lower_begin_ns = t0;
        p->lower_end_ns = dt__rec_now();
        p->dtype = n->out ? (int32_t)n->out->meta.dtype : -1;
        const dt__tval *vs[DT_TRACE_SHAPES];
        int nv = 0;
        if (n->out)
            vs[nv++] = n->out;
        for (int i = 0; i < n->n_in && nv < DT_TRACE_SHAPES; i++)
            if (n->in[i])
                vs[nv++] = n->in[i];
        p->n_shapes = nv;
        for (int i = 0; i < nv; i++) {
            p->ndim[i] = vs[i]->meta.ndim;
            memcpy(p->shape[i], vs[i]->meta.shape, sizeof p->shape[i]);
        }
        dt__recbuf_commit(&r->nodes);
    }
    r->cur_node = 0;
}

/* Flushes the pending explain record and starts the next one for the
 * node being lowered: op defaults to the node's. */
static dt_explain_record *begin_pending(dt__rec *r, dt__lower *L, int kind, int md, const char *op,
                                        int64_t bytes) {
    flush_pending(r);
    dt_explain_record *e = &r->pend;
    memset(e, 0, sizeof *e);
    e->file = L->node->site_file;
    e->line = L->node->site_line;
    e->kind = kind;
    e->mesh_dim = md;
    e->op = op ? op : dt__ops[L->node->op].name;
    e->bytes = bytes;
    r->pend_valid = 1;
    return e;
}

void dt__rec_collective(dt__lower *L, const dt_mesh *mesh, const dt__coll *c, int64_t base, int64_t stride,
                        const char *opname) {
    dt__rec *r = L->g->rec;
    if (!r || !dt__rec_enabled(DT__REC_EXPLAIN))
        return;
    int md = -1;
    for (int d = 0; d < mesh->ndim; d++)
        if (mesh->strides[d] == stride && mesh->shape[d] == c->n) {
            md = d;
            break;
        }
    int64_t most = 0, es = (int64_t)dt_dtype_size(c->dtype);
    for (int k = 0; k < c->n; k++) {
        int64_t numel = 1;
        for (int d = 0; d < c->ndim; d++)
            numel *= c->shapes[k][d];
        if (numel * es > most)
            most = numel * es;
    }
    /* The other groups of the same collective (the caller queues them one
     * after another, base 0 first): one record, the most over them. */
    if (base != 0 && r->pend_valid && r->pend.kind == c->kind && r->pend.mesh_dim == md) {
        if (most > r->pend.bytes)
            r->pend.bytes = most;
        return;
    }
    /* dt__coll_kind and dt_comm_kind agree (static assert below). */
    dt_explain_record *e = begin_pending(r, L, (int)c->kind, md, opname, most);
    if (md >= 0 && mesh->names_given)
        memcpy(e->mesh_dim_name, mesh->names[md], sizeof e->mesh_dim_name);
}

_Static_assert((int)DT_COLL_ALLGATHER == (int)DT_COMM_ALL_GATHER &&
                   (int)DT_COLL_ALLREDUCE == (int)DT_COMM_ALL_REDUCE &&
                   (int)DT_COLL_REDUCESCATTER == (int)DT_COMM_REDUCE_SCATTER &&
                   (int)DT_COLL_ALLTOALL == (int)DT_COMM_ALL_TO_ALL &&
                   (int)DT_COLL_SHIFT == (int)DT_COMM_SHIFT,
               "the collective kinds are the comm kinds");

void dt__rec_send_recv(dt__lower *L, int64_t bytes) {
    dt__rec *r = L->g->rec;
    if (!r || !dt__rec_enabled(DT__REC_EXPLAIN))
        return;
    begin_pending(r, L, DT_COMM_SEND_RECV, -1, NULL, bytes);
}

void dt__rec_kernel_queued(dt_graph *g, const dt__stream *s, const dt__krec *k, uint64_t seq) {
    dt__rec *r = g->rec;
    if (!r->cur_op)
        r->cur_op = k->opname;
    dt__rec_kmap *m = dt__recbuf_slot(&r->kmap);
    if (!m)
        return;
    m->key = dt__rec_stream_key(s->type, s->kind, s->device_id);
    m->seq = seq;
    m->node = r->cur_node;
    dt__recbuf_commit(&r->kmap);
}
