/*
 * The views and shape family, part 2: indexing. Basic indexing (ints,
 * slices with positive steps, None, ...) as one strided selection; indexing
 * along one dim by an int64 tensor; and the assignments behind __setitem__
 * (copy_'s too: views_join.c), which compute the new value of the whole
 * tensor (values are immutable; the Python layer rebinds the assigned-to
 * object to it).
 *
 * Placements:
 *  - getitem: a Shard on a dim taken whole follows the dim; a Shard on a dim
 *    that is sliced or integer-indexed is rejected (the shards would no
 *    longer be torch.chunk blocks of the result).
 *  - tensor index along `dim`: (R,R)->R, (S(j),R)->S(j') for j != dim,
 *    (R,S(k))->S(dim+k), (P,R)->P.
 *  - setitem keeps the target's placements. Each device writes the part of
 *    the selected region inside its own block, taking that part of the value
 *    from what it holds: (R,R), (S(d),R) (the value is sliced locally),
 *    (S(d),S(e)) when every device holds the part it needs (checked per
 *    device), (P,P); and (P,R) / (P,scalar), where the device at coordinate
 *    0 of the Partial mesh dim writes the value and the others write zeros,
 *    so that the sum is the assigned value.
 *    The placement engine decides (views_int.h's DT__VIEW_SETITEM_*_ROWS):
 *    the value follows the target's placement on each mesh dim, and the
 *    region check is the engine's (setitem_needed).
 *
 * Threads: dt_* functions on client threads; dt__vlower_* on the controller.
 */
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/ops.h"
#include "ops/views_int.h"

/* -------------------------------------------------------------- selections */

/* Validates a basic-index spec against a's shape. */
static dt_status check_spec(const char *op, const dt__meta *m, const dt_slice *dims) {
    if (m->ndim > 0 && !dims)
        return dt__error(DT_EINVAL, "%s: dims is NULL", op);
    for (int d = 0; d < m->ndim; d++) {
        dt_slice s = dims[d];
        if (s.step < 1)
            return dt__error(DT_EINVAL, "%s: step must be greater than zero (dim %d has step %lld)", op, d,
                             (long long)s.step);
        if (s.drop && (s.len != 1 || s.start < 0 || s.start >= m->shape[d]))
            return dt__error(DT_EINDEX, "%s: index %lld is out of bounds for dimension %d with size %lld", op,
                             (long long)s.start, d, (long long)m->shape[d]);
        if (s.len < 0 || s.start < 0 || s.start > m->shape[d] ||
            (s.len > 0 && s.start + (s.len - 1) * s.step >= m->shape[d]))
            return dt__error(DT_EINDEX,
                             "%s: the selection start=%lld step=%lld len=%lld does not fit dimension %d "
                             "of size %lld",
                             op, (long long)s.start, (long long)s.step, (long long)s.len, d,
                             (long long)m->shape[d]);
    }
    return DT_OK;
}

/* 1 when the selection takes the whole dim in order. */
static int takes_whole(const dt_slice *s, int64_t size) {
    return !s->drop && s->start == 0 && s->len == size && (s->step == 1 || size <= 1);
}

static void store_spec(dt__node *n, int ndim, const dt_slice *dims) {
    for (int d = 0; d < ndim; d++) {
        n->a.v_start[d] = dims[d].start;
        n->a.v_step[d] = dims[d].len <= 1 ? 1 : dims[d].step;
        n->a.v_len[d] = dims[d].len;
        if (dims[d].drop)
            n->a.v_mask |= 1ull << d;
    }
}

static int64_t ceil_div0(int64_t x, int64_t s) { return x <= 0 ? 0 : (x + s - 1) / s; }

/* The part of a node's selection inside the block (bs, bl) of dim d: the
 * selected positions k in [k0, k1), and where the first one lies in the block.
 * Returns the count. */
static int64_t part_in_block(const dt__nattr *a, int d, int64_t bs, int64_t bl, int64_t *k0, int64_t *k1,
                             int64_t *local_start) {
    int64_t st = a->v_start[d], step = a->v_step[d], len = a->v_len[d];
    int64_t lo = ceil_div0(bs - st, step), hi = ceil_div0(bs + bl - st, step);
    *k0 = lo < len ? lo : len;
    *k1 = hi < len ? hi : len;
    if (*k1 < *k0)
        *k1 = *k0;
    *local_start = st + *k0 * step - bs;
    return *k1 - *k0;
}

/* 1 when the device at coord holds a Partial input part that is not the
 * value's: some mesh dim where `a` is Partial but the value is not, at a
 * nonzero coordinate. Such a device writes zeros into the region. */
static int writes_zero(const dt__meta *a, const dt__meta *value, const int64_t *coord) {
    for (int md = 0; md < a->mesh->ndim; md++)
        if (a->pl[md].kind == DT_PLACEMENT_PARTIAL && coord[md] != 0 &&
            (!value || value->pl[md].kind != DT_PLACEMENT_PARTIAL))
            return 1;
    return 0;
}

/* ---------------------------------------------------------------- getitem */

static const dt__ps_row index_rows[] = DT__PS_ROWS(DT__VIEW_INDEX_ROWS);
/* What a basic index does to each dim of its input. */
typedef struct index_fam {
    const dt_slice *dims;
    const int *pos; /* the result dim of each input dim (-1: dropped) */
    int seg_dim;    /* a segmented dim sliced at segment boundaries (-1: none) */
} index_fam;
/* A dim taken whole stays sharded (at its result position). */
static int index_row(const dt__pctx *c, int j, int d, int *od) {
    const index_fam *f = c->fam;
    *od = f->pos[d];
    if (d == f->seg_dim)
        return DT__VR_IDX; /* a local narrow of each device's segments */
    return takes_whole(&f->dims[d], c->in[j]->shape[d]) ? DT__VR_KEEP : DT__VR_OP;
}

/* When sel (a slice of m's segmented dim) takes segments [*s0, *s1) whole,
 * in order: sets them; otherwise leaves *s0 = -1. Only while the dim is
 * Shard on all its mesh dims (each device holds one block): otherwise the
 * slice takes the fallback. */
static void seg_range(const dt__meta *m, const dt_slice *sel, int *s0, int *s1) {
    const dt__seg *g = &m->seg;
    if (sel->drop || (sel->step != 1 && sel->len > 1) || sel->len == 0 ||
        dt__seg_sharding(m) != dt__seg_mask(g))
        return;
    int64_t at = 0;
    int a = -1;
    for (int q = 0; q < g->n; q++) {
        if (at == sel->start)
            a = q;
        at += g->len[q];
        if (a >= 0 && at == sel->start + sel->len) {
            *s0 = a;
            *s1 = q + 1;
            return;
        }
    }
}

dt_tensor *dt_index(dt_tensor *a, const dt_slice *dims, uint64_t new_axes) {
    dt_clear_error();
    if (dt__view_check("getitem", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (check_spec("getitem", m, dims) != DT_OK)
        return NULL;
    int kept = 0;
    for (int d = 0; d < m->ndim; d++)
        kept += !dims[d].drop;
    int out_ndim = kept + __builtin_popcountll(new_axes);
    if (out_ndim > DT_MAX_NDIM || (out_ndim < 64 && (new_axes >> out_ndim) != 0)) {
        dt__error(DT_EINVAL, "getitem: the result would have %d dimensions (at most %d)", out_ndim,
                  DT_MAX_NDIM);
        return NULL;
    }
    dt__meta out = *m;
    out.ndim = out_ndim;
    int pos[DT_MAX_NDIM];
    for (int o = 0, d = 0; o < out_ndim; o++) {
        if (new_axes & (1ull << o)) {
            out.shape[o] = 1;
            continue;
        }
        while (dims[d].drop)
            pos[d++] = -1;
        pos[d] = o;
        out.shape[o] = dims[d].len;
        d++;
    }
    for (int d = 0; d < m->ndim; d++)
        if (dims[d].drop)
            pos[d] = -1;
    /* A slice of a segmented dim at segment boundaries: a local narrow. */
    int s0 = -1, s1 = -1, keep = 0;
    if (m->seg.n && takes_whole(&dims[m->seg.dim], m->shape[m->seg.dim]))
        s0 = 0, s1 = m->seg.n, keep = 1; /* the dim untouched: the layout too */
    else if (m->seg.n)
        seg_range(m, &dims[m->seg.dim], &s0, &s1);
    if (s0 >= 0) {
        dt__seg g = m->seg;
        out.seg.n = (int8_t)(s1 - s0 > 1 ? s1 - s0 : 0);
        out.seg.dim = (int8_t)(out.seg.n ? pos[g.dim] : 0);
        out.seg.nmd = (int8_t)(out.seg.n ? g.nmd : 0);
        memset(out.seg.mds, 0, sizeof out.seg.mds);
        memcpy(out.seg.mds, g.mds, (size_t)out.seg.nmd);
        memset(out.seg.len, 0, sizeof out.seg.len);
        for (int q = s0; q < s1 && out.seg.n; q++)
            out.seg.len[q - s0] = g.len[q];
    }
    const index_fam fam = {dims, pos, s0 >= 0 ? m->seg.dim : -1};
    if (dt__view_place("getitem", &m, 1, &out, index_rows, index_row, NULL, &fam,
                       DT__VIEW_TEXT(DT__VIEW_INDEX_ROWS)) != DT_OK) {
        for (int md = 0; md < m->mesh->ndim; md++) {
            dt_placement p = m->pl[md];
            if (p.kind == DT_PLACEMENT_SHARD && !takes_whole(&dims[p.dim], m->shape[p.dim])) {
                dt__error_append(" (dim %d is sharded and the index %s it)", p.dim,
                                 dims[p.dim].drop ? "selects one element of" : "slices");
                break;
            }
        }
        return NULL;
    }
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, NULL, &out, DT_V_INDEX, &n);
    if (!t)
        return NULL;
    if (n) {
        store_spec(n, m->ndim, dims);
        if (s0 >= 0) {
            /* Sets its own output layout (the views' seg rule); 1: the segment narrow. */
            n->a.v_nints = keep ? 2 : 1;
            n->a.v_dim = s0;
            n->a.v_ints[0] = s1;
        }
    }
    return dt__client_submit(t, n);
}

/* The strided selection's attributes on the device at `coord` (output
 * block length ol); 1 when its block is the result as it is (x[:]). */
static int index_device(const dt__node *n, const int64_t *coord, const int64_t *ol, dt__kattr *ka) {
    const dt__meta *im = &n->in[0]->meta, *om = &n->out->meta;
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    dt__local_region(im, coord, ls, ll);
    int whole = im->ndim == om->ndim;
    ka->ndim = im->ndim;
    for (int d = 0; d < im->ndim; d++) {
        int64_t k0, k1;
        /* A sharded dim is taken whole, so this is the whole block. */
        ka->shape[d] = part_in_block(&n->a, d, ls[d], ll[d], &k0, &k1, &ka->start[d]);
        ka->step[d] = n->a.v_step[d];
        if (ka->start[d] != 0 || ka->shape[d] != ll[d] || (ka->step[d] != 1 && ll[d] > 1))
            whole = 0;
    }
    if (n->a.v_nints == 1) {
        /* The segment narrow: this device's pieces of segments [s0, s1). */
        const dt__seg *g = &im->seg;
        int64_t st = 0, len = 0;
        for (int q = 0; q < (int)n->a.v_ints[0]; q++)
            *(q < n->a.v_dim ? &st : &len) += dt__seg_piece(im, q, coord);
        ka->start[g->dim] = st;
        ka->shape[g->dim] = len;
        ka->step[g->dim] = 1;
        whole = whole && st == 0 && len == ll[g->dim];
    }
    ka->gndim = om->ndim;
    for (int d = 0; d < om->ndim; d++) {
        ka->gshape[d] = ol[d];
        if (whole && ol[d] != ll[d])
            whole = 0;
    }
    return whole;
}

/* 1 when the selection of node n takes whole every dim of `m` (its target)
 * that a mesh dim shards: then part_in_block gives each device its whole
 * block of those dims (k0, k1 = the block's bounds, from 0 in it) and the
 * selection's clamps act on the unsharded dims alone, which every device
 * holds whole, so the device's parts and attributes copy offsets and
 * lengths of local regions (dt__lw_probes' condition). */
static int sharded_dims_whole(const dt__node *n, const dt__meta *m) {
    for (int md = 0; md < m->mesh->ndim; md++) {
        int d = m->pl[md].dim;
        if (m->pl[md].kind == DT_PLACEMENT_SHARD && ((n->a.v_mask >> d & 1) || n->a.v_start[d] != 0 ||
                                                     n->a.v_step[d] != 1 || n->a.v_len[d] != m->shape[d]))
            return 0;
    }
    return 1;
}

/* A selection as one shared record (lower_bcast.c) when every device takes
 * the same part of its own block (a slice of a dim no mesh dim shards, on
 * even blocks); checked on dt__lw_probes' devices. 1 when taken. */
static int index_shared(dt__lower *L, dt__node *n) {
    const dt__meta *om = &n->out->meta;
    if (!dt__lw_bcast_wanted(L, n->out))
        return 0;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
    dt__kattr a[2]; /* device 0's, another's */
    dt__lw_same same;
    int64_t devs[DT__LW_BCAST_MAX_DEV];
    int np = dt__lw_probes(L, n, sharded_dims_whole(n, &n->in[0]->meta), devs);
    for (int i = 0; i < np; i++) {
        dt__kattr *ai = &a[i > 0];
        dt__mesh_coord(om->mesh, devs[i], coord);
        dt__local_region(om, coord, os, ol);
        *ai = (dt__kattr){.sub = DT_KV_STRIDED, .dtype = om->dtype};
        if (index_device(n, coord, ol, ai) || !dt__lw_same_attr(&same, i, ai))
            return 0;
    }
    return dt__lw_bcast(L, n->out, DT_K_VIEW, &a[0], dt__view_names[n->a.sub], n->in, 1, 1);
}

void dt__vlower_index(dt__lower *L, dt__node *n) {
    dt__tval *in = n->in[0], *o = n->out;
    if (index_shared(L, n))
        return;
    for (dt__lw_dev dev = DT__LW_EACH(o, DT_K_VIEW); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        dt__view_kernel_set(k, n, DT_KV_STRIDED);
        if (index_device(n, dev.coord, dev.len, &k->attr)) {
            /* x[:] and friends: the block is the result. */
            dt__kernel_free(k);
            o->blobs[dev.idx] = dt__blob_retain(in->blobs[dev.idx]);
            continue;
        }
        k->n_in = 1;
        k->in[0] = dt__blob_retain(in->blobs[dev.idx]);
        dt__lw_each_push(L, &dev);
    }
}

/* ----------------------------------------------------------- tensor index */

static const dt__ps_row index_tensor_rows[] = DT__PS_ROWS(DT__VIEW_INDEX_TENSOR_ROWS);
static const uint32_t index_tensor_partial[] = DT__PS_MASKS(PR);
/* fam: the indexed dim. The input keeps its other dims' shards (renumbered
 * around the index's dims); a shard of the index is one of the result's. */
static int index_tensor_row(const dt__pctx *c, int j, int d, int *od) {
    int dim = *(const int *)c->fam;
    if (j == 1) {
        *od = dim + d;
        return DT__VR_IDX;
    }
    *od = d < dim ? d : d + c->in[1]->ndim - 1;
    return d == dim ? DT__VR_OP : DT__VR_KEEP;
}
/* A Partial index is never accepted (an index is not a sum). */
static int index_not_partial(const dt__pctx *c, int md) {
    return c->in[1]->pl[md].kind == DT_PLACEMENT_PARTIAL ? 1 : -1;
}

dt_tensor *dt_index_tensor(dt_tensor *a, int64_t dim, dt_tensor *index) {
    dt_clear_error();
    if (dt__view_check_pair("getitem", a, index) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta, *mi = &index->v->meta;
    if (mi->dtype != DT_INT64) {
        dt__error(DT_EINDEX, "getitem: tensors used as indices must be long, byte or bool tensors (got %s)",
                  dt_dtype_name(mi->dtype));
        return NULL;
    }
    if (m->ndim == 0) {
        dt__error(DT_EINDEX, "getitem: too many indices for tensor of dimension 0");
        return NULL;
    }
    int d;
    if (dt__view_wrap_dim("getitem", dim, m->ndim, 0, &d) != DT_OK)
        return NULL;
    int out_ndim = m->ndim - 1 + mi->ndim;
    if (out_ndim > DT_MAX_NDIM) {
        dt__error(DT_EINVAL, "getitem: the result would have %d dimensions (at most %d)", out_ndim,
                  DT_MAX_NDIM);
        return NULL;
    }
    dt__meta out = *m;
    out.ndim = out_ndim;
    for (int o = 0; o < out_ndim; o++)
        out.shape[o] = o < d ? m->shape[o] : o < d + mi->ndim ? mi->shape[o - d] : m->shape[o - mi->ndim + 1];
    dt__pctx c = {.nin = 2, .in = {m, mi}, .out = &out, .fam = &d};
    const dt__psig sig = {.partial = index_tensor_partial,
                          .accepted = DT__VIEW_INDEX_TENSOR_TEXT,
                          .rows = index_tensor_rows,
                          .shard_row = index_tensor_row,
                          .mesh_dim_check = index_not_partial,
                          .own_regions = 1};
    int bad;
    if (dt__ps_apply("getitem", &sig, &c, 0, out.pl, &bad) != DT_OK)
        return NULL;
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, index, &out, DT_V_INDEX_TENSOR, &n);
    if (!t)
        return NULL;
    if (n)
        n->a.v_dim = d;
    return dt__client_submit(t, n);
}

void dt__vlower_index_tensor(dt__lower *L, dt__node *n) {
    dt__kattr a = {.dim = n->a.v_dim};
    dt__view_lower_each(L, n, DT_KV_INDEX, &a);
}

/* ---------------------------------------------------------------- setitem */

/* The region of `value` the device at coord needs for a setitem node whose
 * selection has positions [k0[d], k1[d]) of each target dim. */
static void value_needed(const dt__meta *am, const dt__nattr *na, const dt__meta *vm, const int64_t *k0,
                         const int64_t *k1, int64_t *vs, int64_t *vl) {
    int kept[DT_MAX_NDIM], nk = 0;
    for (int d = 0; d < am->ndim; d++)
        if (!(na->v_mask & (1ull << d)))
            kept[nk++] = d;
    for (int j = 0; j < vm->ndim; j++) {
        int r = j - (vm->ndim - nk);
        if (r < 0 || vm->shape[j] == 1) {
            vs[j] = 0;
            vl[j] = vm->shape[j];
        } else {
            vs[j] = k0[kept[r]];
            vl[j] = k1[kept[r]] - k0[kept[r]];
        }
    }
}

/* The selection positions of every target dim inside the device's block.
 * Returns 0 when the device has nothing of the region. */
static int device_part(const dt__meta *am, const dt__nattr *na, const int64_t *coord, int64_t *k0,
                       int64_t *k1, int64_t *lstart) {
    int64_t bs[DT_MAX_NDIM], bl[DT_MAX_NDIM];
    dt__local_region(am, coord, bs, bl);
    int nonempty = 1;
    for (int d = 0; d < am->ndim; d++)
        if (part_in_block(na, d, bs[d], bl[d], &k0[d], &k1[d], &lstart[d]) == 0)
            nonempty = 0;
    return nonempty;
}

/* The placement rule of the setitem forms (views_int.h's rows): the target
 * keeps its placements; the other input (value, mask) may be a Shard only
 * where the target is one, and then counts as the target's dim. */
static int setitem_row_at(const dt__pctx *c, int j, int md, int d, int *od) {
    dt_placement t = c->in[0]->pl[md];
    *od = j == 0 ? d : t.dim;
    return j == 0 ? DT__VR_KEEP : t.kind == DT_PLACEMENT_SHARD ? DT__VR_IDX : DT__VR_OP;
}

/* The region input j reads for the output region (os, ol): the target its
 * own; the value the part of the selection inside the device's block, or,
 * when the device writes nothing, nothing (its own block stands for it). */
static void setitem_needed(const dt__pctx *c, int j, const int64_t *coord, const int64_t *os,
                           const int64_t *ol, int64_t *s, int64_t *l) {
    int64_t k0[DT_MAX_NDIM], k1[DT_MAX_NDIM], ls[DT_MAX_NDIM];
    if (j == 0) {
        memcpy(s, os, sizeof(int64_t) * (size_t)c->out->ndim);
        memcpy(l, ol, sizeof(int64_t) * (size_t)c->out->ndim);
    } else if (!device_part(c->in[0], c->a, coord, k0, k1, ls)) {
        dt__local_region(c->in[j], coord, s, l);
    } else {
        value_needed(c->in[0], c->a, c->in[j], k0, k1, s, l);
    }
}

/* The mask reads the target block's masked dims (nothing when that block
 * is empty). */
static void mask_needed(const dt__pctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                        int64_t *s, int64_t *l) {
    int empty = 0, nd = c->in[j]->ndim, dim = j == 0 ? 0 : c->a->v_dim;
    for (int d = 0; d < c->out->ndim; d++)
        empty |= ol[d] == 0;
    if (j != 0 && empty) {
        dt__local_region(c->in[j], coord, s, l);
        return;
    }
    memcpy(s, os + dim, sizeof(int64_t) * (size_t)nd);
    memcpy(l, ol + dim, sizeof(int64_t) * (size_t)nd);
}

/* A Partial mask, or an index that is not Replicate, is the one to fix. */
static int mask_not_partial(const dt__pctx *c, int md) {
    return c->in[1]->pl[md].kind == DT_PLACEMENT_PARTIAL ? 1 : -1;
}
static int index_replicate(const dt__pctx *c, int md) {
    return c->in[1]->pl[md].kind != DT_PLACEMENT_REPLICATE ? 1 : -1;
}
/* The target's Shard(dim) is the indexed dim's. */
static int setitem_index_row(const dt__pctx *c, int j, int d, int *od) {
    *od = d;
    return j != 0 ? -1 : d == c->a->v_dim ? DT__VR_OP : DT__VR_KEEP;
}

static const dt__ps_row setitem_rows[] = DT__PS_ROWS(DT__VIEW_SETITEM_ROWS),
                        setitem_mask_rows[] = DT__PS_ROWS(DT__VIEW_SETITEM_MASK_ROWS),
                        setitem_index_rows[] = DT__PS_ROWS(DT__VIEW_SETITEM_INDEX_ROWS);
static const uint32_t setitem_partial[] = DT__PS_MASKS(SETITEM), setitem_pr[] = DT__PS_MASKS(PR);

/* Places a setitem of a (and `other`: value, mask, index or NULL) through
 * the engine into *out (a's meta with the placements the rule gives).
 * A region that does not line up is rejected on the first mesh dim where
 * `other` shards, with `why` appended (NULL: nothing). */
static dt_status setitem_place(const dt__psig *sig, dt_tensor *a, dt_tensor *other, const dt__nattr *na,
                               const char *why, dt__meta *out) {
    const dt__meta *m = &a->v->meta, *om = other ? &other->v->meta : NULL;
    *out = *m;
    dt__pctx c = {.op = DT_OP_VIEW, .a = na, .nin = other ? 2 : 1, .in = {m, om}, .out = out};
    int bad;
    dt_status st = dt__ps_apply("setitem", sig, &c, 1, out->pl, &bad);
    if (st == DT_OK || bad < 0)
        return st;
    int md = 0;
    while (md < m->mesh->ndim - 1 && c.in[bad]->pl[md].kind != DT_PLACEMENT_SHARD)
        md++;
    dt__view_reject("setitem", c.in, c.nin, bad, md, sig->accepted);
    if (why)
        dt__error_append("%s", why);
    return DT_EPLACEMENT;
}

/* Builds a setitem node of kind `kind` with output meta `out`; `other` is
 * the value, mask or index tensor (may be NULL for a scalar value). */
static dt_tensor *setitem_submit(dt_tensor *a, dt_tensor *other, const dt__meta *out, int kind,
                                 dt__node *proto) {
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, other, out, kind, &n);
    if (!t)
        return NULL;
    if (n) {
        int32_t sub = n->a.sub;
        n->a = proto->a;
        n->a.sub = sub;
    }
    return dt__client_submit(t, n);
}

dt_tensor *dt_setitem(dt_tensor *a, const dt_slice *dims, dt_tensor *value, dt_scalar s) {
    dt_clear_error();
    if (value ? dt__view_check_pair("setitem", a, value) != DT_OK : dt__view_check("setitem", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (check_spec("setitem", m, dims) != DT_OK)
        return NULL;
    if (!value && s.kind != DT_SCALAR_BOOL && s.kind != DT_SCALAR_INT && s.kind != DT_SCALAR_FLOAT) {
        dt__error(DT_ETYPE, "setitem: unknown scalar kind %d", s.kind);
        return NULL;
    }
    /* A node on the stack carries the spec into the checks and the record. */
    dt__node proto;
    memset(&proto, 0, sizeof proto);
    store_spec(&proto, m->ndim, dims);
    proto.a.scalar = s;
    if (value) {
        const dt__meta *vm = &value->v->meta;
        int64_t rshape[DT_MAX_NDIM];
        int nk = 0;
        for (int d = 0; d < m->ndim; d++)
            if (!dims[d].drop)
                rshape[nk++] = dims[d].len;
        int ok = 1;
        for (int j = 0; j < vm->ndim; j++) {
            int r = j - (vm->ndim - nk);
            if (r < 0 ? vm->shape[j] != 1 : vm->shape[j] != 1 && vm->shape[j] != rshape[r])
                ok = 0;
        }
        if (!ok) {
            dt__strbuf sv, sr;
            dt__sb_init(&sv);
            dt__sb_init(&sr);
            dt__sb_printf(&sv, "[");
            for (int j = 0; j < vm->ndim; j++)
                dt__sb_printf(&sv, "%s%lld", j ? ", " : "", (long long)vm->shape[j]);
            dt__sb_printf(&sv, "]");
            dt__sb_printf(&sr, "[");
            for (int r = 0; r < nk; r++)
                dt__sb_printf(&sr, "%s%lld", r ? ", " : "", (long long)rshape[r]);
            dt__sb_printf(&sr, "]");
            dt__error(DT_ESHAPE,
                      "setitem: shape mismatch: value tensor of shape %s cannot be broadcast to indexing "
                      "result of shape %s",
                      sv.buf, sr.buf);
            return NULL;
        }
    }
    const dt__psig sig = {.partial = setitem_partial,
                          .accepted = DT__VIEW_SETITEM_TEXT,
                          .rows = setitem_rows,
                          .shard_row_at = setitem_row_at,
                          .needed = setitem_needed};
    dt__meta out;
    if (setitem_place(&sig, a, value, &proto.a, " (the value's shards do not line up with the target's)",
                      &out) != DT_OK)
        return NULL;
    return setitem_submit(a, value, &out, DT_V_SETITEM, &proto);
}

/* The kernel of the device at `coord` writing its part of a setitem: its
 * kind (DT_KV_SET_TENSOR / _SCALAR) and attributes, and the value's region
 * it reads (vs, vl); -1 when the device holds nothing of the selection. */
static int setitem_device(const dt__node *n, const int64_t *coord, dt__kattr *ka, int64_t *vs, int64_t *vl) {
    const dt__tval *a = n->in[0], *v = n->n_in > 1 ? n->in[1] : NULL;
    const dt__meta *am = &a->meta;
    int64_t k0[DT_MAX_NDIM], k1[DT_MAX_NDIM], ls[DT_MAX_NDIM];
    if (!device_part(am, &n->a, coord, k0, k1, ls))
        return -1;
    int zero = writes_zero(am, v ? &v->meta : NULL, coord);
    ka->ndim = am->ndim;
    for (int d = 0; d < am->ndim; d++) {
        ka->start[d] = ls[d];
        ka->step[d] = n->a.v_step[d];
        ka->shape[d] = k1[d] - k0[d];
    }
    ka->scalar = zero ? dt_scalar_int(0) : n->a.scalar;
    if (!v || zero)
        return DT_KV_SET_SCALAR;
    value_needed(am, &n->a, &v->meta, k0, k1, vs, vl);
    /* The value part seen in the target's dims: 1 where it is broadcast or
     * the dim is integer-indexed. */
    int nk = 0;
    for (int d = 0; d < am->ndim; d++)
        nk += !(n->a.v_mask & (1ull << d));
    ka->gndim = am->ndim;
    for (int d = 0, r = 0; d < am->ndim; d++) {
        ka->gshape[d] = 1;
        if (n->a.v_mask & (1ull << d))
            continue;
        int j = r++ + v->meta.ndim - nk;
        if (j >= 0 && v->meta.shape[j] != 1)
            ka->gshape[d] = k1[d] - k0[d];
    }
    return DT_KV_SET_TENSOR;
}

/* A setitem as one shared record (lower_bcast.c) when every device writes
 * the same part of its own block from its own block of the value (a KV
 * cache written at a position, heads sharded); checked on dt__lw_probes'
 * devices (writes_zero tests coord[md] != 0 on Partial mesh dims only).
 * 1 when taken. */
static int setitem_shared(dt__lower *L, dt__node *n) {
    if (!dt__lw_bcast_wanted(L, n->out))
        return 0;
    const dt__meta *om = &n->out->meta;
    int64_t coord[DT_MAX_MESH_NDIM], vs[DT_MAX_NDIM], vl[DT_MAX_NDIM];
    dt__kattr ka[2]; /* device 0's, another's */
    dt__lw_same same;
    int sub = -1;
    int64_t devs[DT__LW_BCAST_MAX_DEV];
    int np = dt__lw_probes(L, n, sharded_dims_whole(n, &n->in[0]->meta), devs);
    for (int i = 0; i < np; i++) {
        dt__kattr *ki = &ka[i > 0];
        dt__mesh_coord(om->mesh, devs[i], coord);
        *ki = (dt__kattr){0};
        int s = setitem_device(n, coord, ki, vs, vl);
        if (s < 0 || (i && s != sub) ||
            (s == DT_KV_SET_TENSOR && !dt__lw_own_block(&n->in[1]->meta, coord, vs, vl)))
            return 0;
        ki->sub = s;
        if (!dt__lw_same_attr(&same, i, ki))
            return 0;
        if (i == 0)
            sub = s;
    }
    ka[0].dtype = om->dtype;
    return dt__lw_bcast(L, n->out, DT_K_VIEW, &ka[0], dt__view_names[n->a.sub], n->in,
                        sub == DT_KV_SET_TENSOR ? 2 : 1, 1);
}

void dt__vlower_setitem(dt__lower *L, dt__node *n) {
    dt__tval *a = n->in[0], *v = n->n_in > 1 ? n->in[1] : NULL;
    int64_t vs[DT_MAX_NDIM], vl[DT_MAX_NDIM];
    if (setitem_shared(L, n))
        return;
    /* A device that holds nothing of the selection gets no kernel. */
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT__LW_NO_KERNEL); dt__lw_each(L, &dev);) {
        int64_t i = dev.idx;
        dt__kattr ka = {0};
        int sub = setitem_device(n, dev.coord, &ka, vs, vl);
        if (sub < 0) {
            n->out->blobs[i] = dt__blob_retain(a->blobs[i]);
            continue;
        }
        dt__kernel *k = dev.k = dt__view_kernel(L, n, sub);
        if (!k)
            break;
        ka.sub = k->attr.sub;
        ka.dtype = k->attr.dtype;
        k->attr = ka;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(a->blobs[i]);
        if (sub == DT_KV_SET_TENSOR) {
            k->n_in = 2;
            k->in[1] = dt__lw_region(L, v, i, dev.coord, vs, vl);
        }
        dt__lw_each_push(L, &dev);
    }
}

/* ------------------------------------------------------ setitem with mask */

dt_tensor *dt_setitem_mask(dt_tensor *a, int64_t dim, dt_tensor *mask, dt_scalar s) {
    dt_clear_error();
    if (dt__view_check_pair("setitem", a, mask) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta, *mm = &mask->v->meta;
    if (mm->dtype != DT_BOOL) {
        dt__error(DT_EINDEX, "setitem: a mask must be a bool tensor (got %s)", dt_dtype_name(mm->dtype));
        return NULL;
    }
    if (dim < 0 || dim + mm->ndim > m->ndim) {
        dt__error(DT_EINDEX, "setitem: too many indices for tensor of dimension %d", m->ndim);
        return NULL;
    }
    for (int j = 0; j < mm->ndim; j++) {
        if (mm->shape[j] != m->shape[dim + j]) {
            dt__error(
                DT_EINDEX,
                "setitem: The shape of the mask [%lld] at index %d does not match the shape of the indexed "
                "tensor [%lld] at index %lld",
                (long long)mm->shape[j], j, (long long)m->shape[dim + j], (long long)(dim + j));
            return NULL;
        }
    }
    dt__node proto;
    memset(&proto, 0, sizeof proto);
    proto.a.v_dim = (int32_t)dim;
    proto.a.scalar = s;
    const dt__psig sig = {.partial = setitem_pr,
                          .accepted = DT__VIEW_SETITEM_MASK_TEXT,
                          .rows = setitem_mask_rows,
                          .shard_row_at = setitem_row_at,
                          .needed = mask_needed,
                          .mesh_dim_check = mask_not_partial};
    dt__meta out;
    if (setitem_place(&sig, a, mask, &proto.a, NULL, &out) != DT_OK)
        return NULL;
    return setitem_submit(a, mask, &out, DT_V_SETITEM_MASK, &proto);
}

void dt__vlower_setitem_mask(dt__lower *L, dt__node *n) {
    dt__tval *a = n->in[0], *mask = n->in[1];
    const dt__meta *am = &a->meta;
    int dim = n->a.v_dim, k_nd = mask->meta.ndim;
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_K_VIEW); dt__lw_each(L, &dev);) {
        int64_t i = dev.idx, *coord = dev.coord;
        dt__local_region(am, coord, ls, ll); /* the block of the target it fills */
        dt__kernel *k = dev.k;
        dt__view_kernel_set(k, n, DT_KV_MASKED_FILL);
        k->n_in = 2;
        k->in[0] = dt__blob_retain(a->blobs[i]);
        k->in[1] = dt__lw_region(L, mask, i, coord, ls + dim, ll + dim);
        k->attr.scalar = writes_zero(am, NULL, coord) ? dt_scalar_int(0) : n->a.scalar;
        k->attr.gndim = am->ndim;
        for (int d = 0; d < am->ndim; d++)
            k->attr.gshape[d] = d >= dim && d < dim + k_nd ? ll[d] : 1;
        dt__lw_each_push(L, &dev);
    }
}

/* ----------------------------------------------------- setitem with index */

dt_tensor *dt_setitem_index(dt_tensor *a, int64_t dim, dt_tensor *index, dt_scalar s) {
    dt_clear_error();
    if (dt__view_check_pair("setitem", a, index) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta, *mi = &index->v->meta;
    if (mi->dtype != DT_INT64) {
        dt__error(DT_EINDEX, "setitem: tensors used as indices must be long, byte or bool tensors (got %s)",
                  dt_dtype_name(mi->dtype));
        return NULL;
    }
    if (m->ndim == 0) {
        dt__error(DT_EINDEX, "setitem: too many indices for tensor of dimension 0");
        return NULL;
    }
    int d;
    if (dt__view_wrap_dim("setitem", dim, m->ndim, 0, &d) != DT_OK)
        return NULL;
    dt__node proto;
    memset(&proto, 0, sizeof proto);
    proto.a.v_dim = d;
    proto.a.scalar = s;
    /* The index is Replicate: every device holds it whole. */
    const dt__psig sig = {.partial = setitem_pr,
                          .accepted = DT__VIEW_SETITEM_INDEX_TEXT,
                          .rows = setitem_index_rows,
                          .shard_row = setitem_index_row,
                          .mesh_dim_check = index_replicate,
                          .own_regions = 1};
    dt__meta out;
    if (setitem_place(&sig, a, index, &proto.a, NULL, &out) != DT_OK)
        return NULL;
    return setitem_submit(a, index, &out, DT_V_SETITEM_INDEX, &proto);
}

void dt__vlower_setitem_index(dt__lower *L, dt__node *n) {
    dt__tval *a = n->in[0];
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_K_VIEW); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        dt__view_kernel_set(k, n, DT_KV_INDEX_FILL);
        k->n_in = 2;
        k->in[0] = dt__blob_retain(a->blobs[dev.idx]);
        k->in[1] = dt__blob_retain(n->in[1]->blobs[dev.idx]);
        k->attr.dim = n->a.v_dim;
        k->attr.scalar = writes_zero(&a->meta, NULL, dev.coord) ? dt_scalar_int(0) : n->a.scalar;
        dt__lw_each_push(L, &dev);
    }
}
