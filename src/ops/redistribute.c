/*
 * redistribute: moving a tensor between placements on its mesh.
 *
 * The planner works one mesh dim at a time over groups of devices that
 * differ only in that dim's coordinate. Phase 1 removes what must be
 * communicated: Partial -> Shard reduce-scatter, Shard(i) -> Shard(j)
 * all-to-all (when j is not sharded by another mesh dim at that moment),
 * otherwise Partial -> Replicate all-reduce and Shard -> Replicate
 * all-gather. Phase 2 adds what is local: Replicate -> Shard slices and
 * Replicate -> Partial (the first coordinate keeps the value, the others
 * hold zeros). Gathering before slicing keeps every intermediate free of
 * nested shards, so each collective sees plain torch.chunk pieces.
 *
 * Nested shards (several mesh dims on one tensor dim, split in mesh-dim
 * order) are undone innermost first and redone outermost first.
 *
 * A move to another mesh (pipeline stages) first finishes Partial sums on
 * the source mesh, then builds each destination device's region from the
 * source pieces that overlap it: slices on the source devices, a
 * point-to-point copy through the comm (a send on the source's
 * communication stream, the matching receive on the destination's) for
 * each piece that lives on another device, and a local assembly of the
 * pieces on the destination device (no gather through one device). A
 * destination piece that is exactly a source blob on the same device is
 * shared, not copied; one received piece that is the whole region is used
 * as it is.
 *
 * Threads: dt_redistribute on client threads; dt__lower_redistribute on the
 * controller.
 */
#include <string.h>

#include "comm/comm.h"
#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_comm.h"
#include "core/controller/trace_lower.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"
#include "ops/ops.h"

dt_tensor *dt_redistribute(dt_tensor *a, dt_mesh *mesh, const dt_placement *placements) {
    dt_clear_error();
    if (!dt__tensor_ok(a)) {
        dt__error(DT_EINVAL, "redistribute: tensor argument is %s", dt__handle_bad(a));
        return NULL;
    }
    if (mesh && !dt__mesh_ok(mesh)) {
        dt__error(DT_EINVAL, "redistribute: the mesh is a released handle");
        return NULL;
    }
    const dt__meta *m = &a->v->meta;
    if (mesh && mesh != m->mesh && dt__graph_check_mesh(a->graph, mesh) != DT_OK)
        return NULL;
    /* Between device types the pieces are staged through host memory when
     * the types' backends differ (the point-to-point receive, comm/inproc.c). */
    dt__meta out = *m;
    if (mesh)
        out.mesh = mesh;
    if (dt__placements_normalize(out.mesh, m->ndim, placements, out.pl) != DT_OK) {
        dt__error_append(" (redistribute)");
        return NULL;
    }
    dt_tensor *t = dt__tensor_new(a->graph, &out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_REDISTRIBUTE);
    if (n) {
        n->n_in = 1;
        n->in[0] = a->v;
        n->out = t->v;
    }
    return dt__client_submit(t, n);
}

/* ------------------------------------------------------------ lowering */

/* The state between steps: placements and one blob per device. cur.blobs
 * is owned, one reference each; or, while cur.grp is set, it is that blob
 * group's members and the plan holds the group once (a shared collective's
 * input and output, core/controller/lower_coll.c). */
typedef struct plan {
    dt__lower *L;
    dt__tval cur; /* cur.meta.pl changes step by step */
} plan;

/* Lets go of the plan's blobs. */
static void plan_drop(plan *p) {
    if (p->cur.grp)
        dt__lw_group_drop(p->L->g, p->cur.grp);
    else if (p->cur.blobs)
        for (int64_t i = 0; i < p->cur.meta.mesh->ndev; i++)
            dt__blob_release(p->cur.blobs[i]);
    if (!p->cur.grp)
        dt__free(p->cur.blobs);
    p->cur.grp = NULL;
    p->cur.blobs = NULL;
}

/* Makes the plan's blobs one reference each (a collective lowered per rank
 * moves them into its kernels). */
static dt_status plan_own(plan *p) {
    if (!p->cur.grp)
        return DT_OK;
    int64_t n = p->cur.meta.mesh->ndev;
    dt__blob **b = dt__calloc((size_t)n, sizeof *b);
    if (!b)
        return dt__lw_fail(p->L, DT_ENOMEM, "out of memory (redistribute plan)");
    for (int64_t i = 0; i < n; i++)
        b[i] = dt__blob_retain(p->cur.blobs[i]);
    plan_drop(p);
    p->cur.blobs = b;
    return DT_OK;
}

/* Runs one collective on every group along mesh dim `md`; `to` is the
 * placement after it. */
/* Group `base`'s description of a collective of `kind` along mesh dim md
 * (its ranks' input shapes and, for a sliced kind, ranges along dim_b), in
 * `buf` when given (at most DT__COLL_BUF ranks) else a new one; NULL when
 * out of memory. */
static dt__coll *describe(const plan *p, int md, int64_t base, int kind, int dim_a, int dim_b,
                          dt_placement to, dt__coll_buf *buf) {
    const dt__meta *m = &p->cur.meta;
    const dt_mesh *mesh = m->mesh;
    int64_t size = mesh->shape[md];
    int64_t coord[DT_MAX_MESH_NDIM], ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    dt__coll *c = buf ? dt__coll_on(buf, mesh->type, kind, (int)size, m->ndim, m->dtype)
                      : dt__coll_new(mesh->type, kind, (int)size, m->ndim, m->dtype);
    if (!c)
        return NULL;
    c->dim_a = dim_a;
    c->dim_b = dim_b;
    /* Even blocks all have one shape (dt__lw_even): found once. */
    int one_shape = dt__lw_even(m);
    dt__mesh_coord(mesh, base, coord);
    for (int64_t r = 0; r < size; r++) {
        coord[md] = r;
        if (r == 0 || !one_shape)
            dt__local_region(m, coord, ls, ll);
        memcpy(c->shapes[r], ll, sizeof c->shapes[r]);
        if ((kind == DT_COLL_REDUCESCATTER || kind == DT_COLL_ALLTOALL) && m->seg.n && m->seg.dim == dim_b &&
            ((dt__seg_mask(&m->seg) >> md) & 1)) {
            /* Rank r's range of the held one, in storage order (seg.h;
             * the descriptor's order as it is: the same positions). */
            dt__meta after = *m;
            int64_t at;
            after.pl[md] = to;
            dt__seg_range(&after, coord, &at, &c->lens[r]);
            c->starts[r] = at - ls[dim_b];
        } else if (kind == DT_COLL_REDUCESCATTER || kind == DT_COLL_ALLTOALL)
            dt__chunk(m->shape[dim_b], size, r, &c->starts[r], &c->lens[r]);
    }
    return c;
}

/* Runs the collective on every group along mesh dim md as one shared
 * record (dt__lw_coll_groups) when the plan holds its blobs as a group and
 * every group's kernels are alike; 1 when it did (L->status set on a
 * failure), 0 when the caller lowers it per group. */
static int collective_shared(plan *p, int md, int kind, int dim_a, int dim_b, dt_placement to) {
    const dt__meta *m = &p->cur.meta;
    const dt_mesh *mesh = m->mesh;
    if (mesh->shape[md] > DT__COLL_BUF || mesh->ndev < 2 || !dt__lw_bcast_mesh(p->L, mesh))
        return 0;
    if (!p->cur.grp && (p->cur.grp = dt__lw_adopt(p->L->g, p->cur.blobs, (int)mesh->ndev))) {
        /* After a step made per device: its blobs as one group again (the
         * plan's references move into it). */
        dt__free(p->cur.blobs);
        p->cur.blobs = dt__bgroup_ptrs(p->cur.grp);
    }
    if (!p->cur.grp)
        return 0;
    dt__coll_buf b0, bi;
    const dt__coll *c = describe(p, md, 0, kind, dim_a, dim_b, to, &b0);
    /* Even blocks: every group's the same. Else each compared with group 0's. */
    int64_t coord[DT_MAX_MESH_NDIM];
    for (int64_t base = 1; !dt__lw_even(m) && base < mesh->ndev; base++) {
        dt__mesh_coord(mesh, base, coord);
        if (coord[md] == 0 && !dt__coll_same(c, describe(p, md, base, kind, dim_a, dim_b, to, &bi)))
            return 0;
    }
    dt__bgroup *out = NULL;
    if (!dt__lw_coll_groups(p->L, mesh, md, DT_STREAM_COMM, c, p->cur.grp, &out, NULL))
        return 0;
    if (out) {
        p->cur.grp = out; /* the plan's hold on the input went into the record */
        p->cur.blobs = dt__bgroup_ptrs(out);
        dt__seg_step(&p->cur.meta, md, to); /* pl[md] = to; a segmented dim's order with it */
    }
    return 1;
}

/* Runs one collective on every group along mesh dim `md`; `to` is the
 * placement after it. */
static dt_status collective(plan *p, int md, int kind, int dim_a, int dim_b, dt_placement to) {
    const dt__meta *m = &p->cur.meta;
    const dt_mesh *mesh = m->mesh;
    int64_t stride = mesh->strides[md];
    int64_t coord[DT_MAX_MESH_NDIM];
    if (collective_shared(p, md, kind, dim_a, dim_b, to))
        return p->L->status;
    if (plan_own(p) != DT_OK)
        return p->L->status;
    dt__blob **next = dt__calloc((size_t)mesh->ndev, sizeof *next);
    if (!next)
        return dt__lw_fail(p->L, DT_ENOMEM, "out of memory (redistribute plan)");
    for (int64_t base = 0; base < mesh->ndev; base++) {
        dt__mesh_coord(mesh, base, coord);
        if (coord[md] != 0)
            continue;
        dt__coll *c = describe(p, md, base, kind, dim_a, dim_b, to, NULL);
        /* The plan's references move into the kernels. */
        if (dt__lw_collective(p->L, mesh, DT_STREAM_COMM, c, base, stride, p->cur.blobs, next, m->dtype,
                              NULL) != DT_OK) {
            /* Groups already queued run; the plan keeps what is left. */
            for (int64_t i = 0; i < mesh->ndev; i++) {
                if (!p->cur.blobs[i])
                    p->cur.blobs[i] = next[i];
                else
                    dt__blob_release(next[i]);
            }
            dt__free(next);
            return p->L->status;
        }
    }
    dt__free(p->cur.blobs);
    p->cur.blobs = next;
    dt__seg_step(&p->cur.meta, md, to); /* pl[md] = to; a segmented dim's order with it */
    return DT_OK;
}

/* Replicate -> Shard(dim) or Partial on mesh dim md, without communication. */
static dt_status local_step(plan *p, int md, dt_placement to) {
    const dt_mesh *mesh = p->cur.meta.mesh;
    dt__meta after = p->cur.meta;
    after.pl[md] = to;
    int64_t coord[DT_MAX_MESH_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    dt__blob **next = dt__calloc((size_t)mesh->ndev, sizeof *next);
    if (!next)
        return dt__lw_fail(p->L, DT_ENOMEM, "out of memory (redistribute plan)");
    /* Not dt__lw_each: the blocks are of the placements after the step (a
     * meta only, no value yet) and go to the plan's next state. */
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        if (to.kind == DT_PLACEMENT_SHARD) {
            dt__local_region(&after, coord, s, l);
            next[i] = dt__lw_region(p->L, &p->cur, i, coord, s, l);
        } else if (coord[md] == 0) {
            next[i] = dt__blob_retain(p->cur.blobs[i]);
        } else {
            dt__kernel *k = dt__lw_kernel(p->L, DT_K_ZEROS_LIKE);
            if (!k)
                break;
            k->n_in = 1;
            k->in[0] = dt__blob_retain(p->cur.blobs[i]);
            k->attr.dtype = after.dtype;
            next[i] = dt__lw_push(p->L, mesh, i, k);
        }
    }
    /* On failure next holds NULLs where nothing was made: the plan's old
     * blobs are released either way, and the caller frees next. */
    plan_drop(p);
    p->cur.blobs = next;
    dt__seg_step(&p->cur.meta, md, to); /* pl[md] = to; a segmented dim's order with it */
    return p->L->status;
}

static int same(dt_placement a, dt_placement b) { return a.kind == b.kind && a.dim == b.dim; }
/* Tensor dim d of m is segmented over a grid that mesh dim md is part of. */
static int seg_grid(const dt__meta *m, int md, int d) {
    return m->seg.n && m->seg.dim == d && ((dt__seg_mask(&m->seg) >> md) & 1);
}
static int shards(const dt__meta *m, int md, int dim) {
    return m->pl[md].kind == DT_PLACEMENT_SHARD && m->pl[md].dim == dim;
}

/* Mesh dim md must go back to Replicate (or move straight to its target)
 * when its placement changes, or when it shards a tensor dim whose outer
 * shards (mesh dims before md on the same tensor dim) differ between now and
 * the target: then md's pieces are pieces of different chunks. */
static int must_undo(const dt__meta *cur, const dt__meta *dst, int md) {
    if (!same(cur->pl[md], dst->pl[md]))
        return 1;
    if (cur->pl[md].kind != DT_PLACEMENT_SHARD)
        return 0;
    int d = cur->pl[md].dim;
    if (seg_grid(cur, md, d))
        return 0; /* a segmented dim's blocks do not depend on the outer shards */
    for (int e = 0; e < md; e++)
        if (shards(cur, e, d) != shards(dst, e, d))
            return 1;
    return 0;
}

/* Tensor dim `dim` is sharded by no mesh dim but md now, and the target
 * does not nest it inside an outer mesh dim: a direct collective into
 * Shard(dim) then splits the full dim, as the target wants. */
static int direct_ok(const dt__meta *cur, const dt__meta *dst, int md, int dim) {
    if (seg_grid(cur, md, dim))
        return 1; /* the gate let only a one-step change through (core/records/seg.h) */
    for (int e = 0; e < cur->mesh->ndim; e++)
        if (e != md && shards(cur, e, dim))
            return 0;
    for (int e = 0; e < md; e++)
        if (shards(dst, e, dim))
            return 0;
    return 1;
}

/* Source device `i` or the replica of it (same coordinates on every
 * non-Replicate mesh dim) that lives on device `want_id`, if any. */
static int64_t pick_replica(const dt__meta *m, int64_t i, int64_t want_id) {
    const dt_mesh *mesh = m->mesh;
    int64_t ci[DT_MAX_MESH_NDIM], cj[DT_MAX_MESH_NDIM];
    dt__mesh_coord(mesh, i, ci);
    for (int64_t j = 0; j < mesh->ndev; j++) {
        if (mesh->ids[j] != want_id)
            continue;
        dt__mesh_coord(mesh, j, cj);
        int same_piece = 1;
        for (int md = 0; md < mesh->ndim; md++)
            if (m->pl[md].kind != DT_PLACEMENT_REPLICATE && cj[md] != ci[md])
                same_piece = 0;
        if (same_piece)
            return j;
    }
    return i;
}

/* Device j's region of dst (shape tl) from its n local pieces (references
 * move in) placed at starts[n * nd]: local ASSEMBLE kernels on j's compute
 * stream, each of at most DT_MAX_OP_INPUTS inputs; past that many pieces
 * each next kernel takes the previous result (at offset 0) and the next
 * pieces (decisions.md). NULL with L->status set on failure. */
static dt__blob *assemble(dt__lower *L, const dt_mesh *dmesh, int64_t j, dt_dtype dtype, int nd,
                          const int64_t *tl, int n, dt__blob **pieces, const int64_t *starts) {
    dt__stream *s = dt__lw_stream(L, dmesh, j);
    dt__blob *acc = NULL;
    int64_t at[DT_MAX_OP_INPUTS * DT_MAX_NDIM];
    int i = 0;
    /* No pieces (an empty region): one kernel makes the empty tensor. */
    while ((i < n || !acc) && s && L->status == DT_OK) {
        int first = acc ? 1 : 0, take = n - i < DT_MAX_OP_INPUTS - first ? n - i : DT_MAX_OP_INPUTS - first;
        memset(at, 0, sizeof at);
        memcpy(at + (size_t)first * (size_t)nd, starts + (size_t)i * (size_t)nd,
               (size_t)take * (size_t)nd * sizeof *at);
        dt__krec *k = dt__asm_krec(dtype, nd, tl, first + take, at);
        if (k && !(k->out = dt__blob_new(s->be))) {
            dt__krec_free(k);
            k = NULL;
        }
        if (!k) {
            dt__lw_fail(L, DT_ENOMEM, "out of memory (assembly)");
            break;
        }
        k->opname = dt__ops[L->node->op].name;
        k->site_file = L->node->site_file;
        k->site_line = L->node->site_line;
        if (acc)
            k->in[k->n_in++] = acc;
        for (int t = 0; t < take; t++, i++) {
            k->in[k->n_in++] = pieces[i];
            pieces[i] = NULL;
        }
        dt__lw_push_krec(L->g, s, k);
        acc = dt__blob_retain(k->out);
    }
    for (; i < n; i++)
        dt__blob_release(pieces[i]);
    if (L->status != DT_OK || !s) {
        dt__blob_release(acc);
        return NULL;
    }
    return acc;
}

/* Builds dst's blobs on its own mesh from p's (Partial-free) source state:
 * each destination device gets the overlapping part of each source piece,
 * sliced where it lives, copied point to point when that is another device
 * (dt__lw_send_recv), then assembled locally. */
static dt_status copy_across(plan *p, dt__tval *dst) {
    const dt__meta *sm = &p->cur.meta, *dm = &dst->meta;
    const dt_mesh *smesh = sm->mesh, *dmesh = dm->mesh;
    int nd = sm->ndim;
    int64_t sc[DT_MAX_MESH_NDIM], qs[DT_MAX_NDIM], ql[DT_MAX_NDIM];
    if (dt__lw_alloc_blobs(p->L, dst) != DT_OK)
        return p->L->status;
    dt__blob **pieces = dt__calloc((size_t)smesh->ndev, sizeof *pieces);
    int64_t *starts = dt__calloc((size_t)smesh->ndev * (size_t)(nd ? nd : 1), sizeof *starts);
    if (!pieces || !starts) {
        dt__free(pieces);
        dt__free(starts);
        return dt__lw_fail(p->L, DT_ENOMEM, "out of memory (assembly)");
    }
    int64_t most = 0, es = (int64_t)dt_dtype_size(dm->dtype); /* for explain: bytes a device receives */
    /* Destination device j's block (ts, tl): zeros, a source block as it
     * is, or pieces assembled; the body makes the kernels it needs. */
    for (dt__lw_dev dev = DT__LW_EACH(dst, DT__LW_NO_KERNEL); dt__lw_each(p->L, &dev);) {
        int64_t j = dev.idx, received = 0, *ts = dev.start, *tl = dev.len;
        if (dt__partial_zero(dm, dev.coord)) {
            dt__kernel *k = dev.k = dt__lw_kernel(p->L, DT_K_FULL);
            if (!k)
                break;
            k->attr.dtype = dm->dtype;
            k->attr.ndim = nd;
            memcpy(k->attr.shape, tl, sizeof dev.len);
            k->attr.scalar = dt_scalar_int(0);
            dt__lw_each_push(p->L, &dev);
            continue;
        }
        int n = 0, shared = 0, whole = 0;
        for (int64_t i = 0; i < smesh->ndev; i++) {
            dt__mesh_coord(smesh, i, sc);
            int representative = 1;
            for (int md = 0; md < smesh->ndim; md++)
                if (sm->pl[md].kind == DT_PLACEMENT_REPLICATE && sc[md] != 0)
                    representative = 0;
            if (!representative)
                continue;
            int64_t src = pick_replica(sm, i, dmesh->ids[j]);
            dt__mesh_coord(smesh, src, sc);
            dt__local_region(sm, sc, qs, ql);
            /* The overlap of the source piece with the destination region. */
            int64_t os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
            int empty = 0, whole_piece = 1, whole_target = 1;
            for (int d = 0; d < nd; d++) {
                int64_t lo = qs[d] > ts[d] ? qs[d] : ts[d];
                int64_t hi = qs[d] + ql[d] < ts[d] + tl[d] ? qs[d] + ql[d] : ts[d] + tl[d];
                if (hi <= lo)
                    empty = 1;
                os[d] = lo;
                ol[d] = hi - lo;
                whole_piece &= os[d] == qs[d] && ol[d] == ql[d];
                whole_target &= os[d] == ts[d] && ol[d] == tl[d];
            }
            if (empty && nd > 0)
                continue;
            int local = smesh->type == dmesh->type && smesh->ids[src] == dmesh->ids[j];
            if (whole_piece && whole_target && local) {
                dst->blobs[j] = dt__blob_retain(p->cur.blobs[src]);
                shared = 1;
                break;
            }
            dt__blob *piece = dt__lw_region(p->L, &p->cur, src, sc, os, ol);
            if (piece && !local) {
                int64_t numel = 1;
                for (int d = 0; d < nd; d++)
                    numel *= ol[d];
                received += numel * es;
                piece = dt__lw_send_recv(p->L, smesh, src, dmesh, j, piece, nd, ol, dm->dtype);
            }
            if (!piece)
                break;
            for (int d = 0; d < nd; d++)
                starts[(size_t)n * (size_t)nd + (size_t)d] = os[d] - ts[d];
            pieces[n++] = piece;
            whole = whole_target;
        }
        if (shared || p->L->status != DT_OK) {
            for (int i = 0; i < n; i++)
                dt__blob_release(pieces[i]);
            continue;
        }
        if (n == 1 && whole) /* one piece is the whole region: the received copy */
            dst->blobs[j] = pieces[0];
        else
            dst->blobs[j] = assemble(p->L, dmesh, j, dm->dtype, nd, tl, n, pieces, starts);
        if (received > most)
            most = received;
    }
    dt__free(pieces);
    dt__free(starts);
    if (most > 0 && p->L->status == DT_OK && dt__rec_enabled(DT__REC_EXPLAIN))
        dt__rec_send_recv(p->L, most);
    return p->L->status;
}

/* Releases the plan's blobs. */
static dt_status plan_free(plan *p, dt_status st) {
    plan_drop(p);
    return st;
}

dt_status dt__lower_redistribute(dt__lower *L, dt__node *n) {
    dt__tval *src = n->in[0], *dst = n->out;
    const dt_mesh *mesh = src->meta.mesh;
    plan p = {.L = L, .cur = {.meta = src->meta}};
    /* src's blobs as one group, held once, where a collective may be one
     * shared record; else one reference each. */
    if (mesh->ndev >= 2 && dt__lw_bcast_mesh(L, mesh) && (p.cur.grp = dt__lw_group_of_all(L->g, src))) {
        dt__bgroup_hold(p.cur.grp);
        p.cur.blobs = src->blobs;
    } else {
        p.cur.blobs = dt__calloc((size_t)mesh->ndev, sizeof *p.cur.blobs);
        if (!p.cur.blobs)
            return dt__lw_fail(L, DT_ENOMEM, "out of memory (redistribute plan)");
        for (int64_t i = 0; i < mesh->ndev; i++)
            p.cur.blobs[i] = dt__blob_retain(src->blobs[i]);
    }
    const dt_placement R = {DT_PLACEMENT_REPLICATE, 0};
    const dt__meta *to = &dst->meta;

    if (!dt_mesh_equal(mesh, to->mesh)) {
        /* Finish pending sums where they are, then copy across. */
        for (int md = mesh->ndim - 1; md >= 0; md--)
            if (p.cur.meta.pl[md].kind == DT_PLACEMENT_PARTIAL &&
                collective(&p, md, DT_COLL_ALLREDUCE, 0, 0, R) != DT_OK)
                return plan_free(&p, L->status);
        return plan_free(&p, copy_across(&p, dst));
    }

    /* Phase 1, innermost mesh dim first, so that a shard is gathered only
     * after every shard nested inside it on the same tensor dim. */
    for (int md = mesh->ndim - 1; md >= 0; md--) {
        dt__meta *cur = &p.cur.meta;
        if (!must_undo(cur, to, md))
            continue;
        dt_placement s = cur->pl[md], t = to->pl[md];
        int t_shard = t.kind == DT_PLACEMENT_SHARD && !same(s, t);
        dt_status st = DT_OK;
        if (s.kind == DT_PLACEMENT_PARTIAL) {
            if (t_shard && direct_ok(cur, to, md, t.dim))
                st = collective(&p, md, DT_COLL_REDUCESCATTER, 0, t.dim, t);
            else
                st = collective(&p, md, DT_COLL_ALLREDUCE, 0, 0, R);
        } else if (s.kind == DT_PLACEMENT_SHARD) {
            if (t_shard && direct_ok(cur, to, md, t.dim) && direct_ok(cur, to, md, s.dim))
                st = collective(&p, md, DT_COLL_ALLTOALL, s.dim, t.dim, t);
            else
                st = collective(&p, md, DT_COLL_ALLGATHER, s.dim, 0, R);
        }
        if (st != DT_OK)
            return plan_free(&p, st);
    }
    /* Phase 2, outermost first, so nested slices split the right chunk. */
    for (int md = 0; md < mesh->ndim; md++) {
        dt_placement s = p.cur.meta.pl[md], t = to->pl[md];
        if (same(s, t))
            continue;
        /* Invariant: phase 1 left every changing mesh dim Replicate. */
        DT_ASSERT(s.kind == DT_PLACEMENT_REPLICATE);
        if (local_step(&p, md, t) != DT_OK)
            return plan_free(&p, L->status);
    }
    /* A lowering that redistributes a value of its own (sort_scan.c's
     * gather, a node of another op) gets one reference per blob. */
    if (n->op != DT_OP_REDISTRIBUTE && plan_own(&p) != DT_OK)
        return plan_free(&p, L->status);
    dst->grp = p.cur.grp; /* the plan's hold becomes the value's */
    dst->blobs = p.cur.blobs;
    return DT_OK;
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_dist[] = {
    {"redistribute", "distribution",
     "any -> any on the same mesh: S->R all-gather, P->R all-reduce, P->S reduce-scatter, S(i)->S(j) "
     "all-to-all, "
     "R->S local slice, R->P first coordinate keeps",
     1},
    {NULL, NULL, NULL, 0},
};

/* ------------------------------------------------------ segmented dims */

/* redistribute's seg rule (the REDISTRIBUTE row's; core/records/seg.h): on
 * the same mesh, when the plan keeps the dim (dt__seg_redistributes), the
 * one mesh dim that changes moves as the plan's step does. */
int dt__seg_rule_redistribute(const dt__node *n, dt__meta *out) {
    const dt__meta *in = &n->in[0]->meta;
    if (!in->seg.n || out->mesh != in->mesh || !dt__seg_redistributes(in, out))
        return DT__SEG_REGULAR;
    dt__meta step = *in;
    for (int md = 0; md < in->mesh->ndim; md++)
        dt__seg_step(&step, md, out->pl[md]);
    out->seg = step.seg;
    return DT__SEG_PASS;
}
