/*
 * The views and shape family, part 3: cat and stack, tril/triu, flip, roll,
 * repeat and repeat_interleave.
 *
 * cat and stack of n inputs are a balanced tree of two-input nodes (kernels
 * take at most two inputs): each level casts its inputs to the final dtype
 * before concatenating, exactly as torch.cat copies every input into a
 * result of the promoted dtype, so the values are those of one torch.cat.
 * The intermediate symbols are released at once; the controller frees their
 * blocks after the next level has read them.
 *
 * Placements: see dtorch.h. tril/triu take every placement: the device that
 * holds rows r0.. and columns c0.. of the last two dims applies the local
 * diagonal `diagonal + r0 - c0`, which selects exactly the global triangle.
 *
 * Threads: dt_* functions on client threads; dt__vlower_* on the controller.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/segment.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/ops.h"
#include "ops/views_int.h"

/* ------------------------------------------------------------ cat / stack */

/* Appends x's segments along dim (its descriptor's, or the whole dim as one)
 * to g, dropping empty ones; 0 when more than DT_MAX_SEGMENTS. */
static int seg_append(dt__seg *g, const dt__meta *x, int dim) {
    int n = x->seg.n ? x->seg.n : 1;
    for (int s = 0; s < n; s++) {
        int64_t len = x->seg.n ? x->seg.len[s] : x->shape[dim];
        if (len == 0)
            continue;
        if (g->n == DT_MAX_SEGMENTS)
            return 0;
        g->len[g->n++] = len;
    }
    return 1;
}

/* One level of the tree: a node concatenating l (and r when not NULL). lmd
 * > 0: the local cat along a dim all inputs shard on the mesh dims of the
 * bit mask lmd, whose result is segmented (core/records/seg.h, dt__seg). */
static dt_tensor *cat_node(dt_tensor *l, dt_tensor *r, const dt__meta *final, int dim, int stack, int lmd) {
    dt__meta out = *final;
    int64_t nl = stack && l->v->meta.ndim < final->ndim ? 1 : l->v->meta.shape[dim];
    int64_t nr = !r ? 0 : stack && r->v->meta.ndim < final->ndim ? 1 : r->v->meta.shape[dim];
    out.shape[dim] = nl + nr;
    memset(&out.seg, 0, sizeof out.seg);
    if (lmd > 0) {
        seg_append(&out.seg, &l->v->meta, dim);
        if (r)
            seg_append(&out.seg, &r->v->meta, dim);
        if (out.seg.n < 2)
            memset(&out.seg, 0, sizeof out.seg);
        out.seg.dim = (int8_t)(out.seg.n ? dim : 0);
        for (int md = 0; md < out.mesh->ndim && out.seg.n; md++) /* all shard: ascending */
            if ((lmd >> md) & 1)
                out.seg.mds[out.seg.nmd++] = (int8_t)md;
    }
    dt__node *n;
    dt_tensor *t = dt__view_begin(l, r, &out, DT_V_CAT, &n);
    if (!t)
        return NULL;
    if (n) {
        n->a.v_dim = dim;
        n->a.v_nints = stack;
        n->a.v_mask = lmd > 0;
    }
    return dt__client_submit(t, n);
}

/* The cat of ts[lo..hi) as a new reference (a leaf is retained as is unless
 * it is the whole list). */
static dt_tensor *cat_tree(dt_tensor *const *ts, int lo, int hi, int n, const dt__meta *final, int dim,
                           int stack, int lmd) {
    if (hi - lo == 1) {
        if (n == 1)
            return cat_node(ts[lo], NULL, final, dim, stack, lmd);
        dt_tensor_retain(ts[lo]);
        return ts[lo];
    }
    int mid = lo + (hi - lo) / 2;
    dt_tensor *l = cat_tree(ts, lo, mid, n, final, dim, stack, lmd);
    if (!l)
        return NULL;
    dt_tensor *r = cat_tree(ts, mid, hi, n, final, dim, stack, lmd);
    if (!r) {
        dt_tensor_release(l);
        return NULL;
    }
    dt_tensor *t = cat_node(l, r, final, dim, stack, lmd);
    dt_tensor_release(l);
    dt_tensor_release(r);
    return t;
}

/* The region of input `in` a device needs for its output block (os, ol). */
static void cat_needed(const dt__meta *in, const dt__meta *out, int dim, int stack, const int64_t *os,
                       const int64_t *ol, int64_t *s, int64_t *l) {
    if (stack && in->ndim < out->ndim) {
        for (int d = 0, j = 0; d < out->ndim; d++)
            if (d != dim) {
                s[j] = os[d];
                l[j++] = ol[d];
            }
        return;
    }
    memcpy(s, os, sizeof(int64_t) * (size_t)out->ndim);
    memcpy(l, ol, sizeof(int64_t) * (size_t)out->ndim);
    s[dim] = 0;
    l[dim] = in->shape[dim];
}

static dt_tensor *cat_impl(const char *op, int n, dt_tensor *const *ts, int64_t dim, int stack);

static const dt__ps_row cat_rows[] = DT__PS_ROWS(DT__VIEW_CAT_ROWS),
                        stack_rows[] = DT__PS_ROWS(DT__VIEW_STACK_ROWS);
typedef struct cat_fam {
    int dim, stack;
} cat_fam;
/* A Shard(d) of an input: stack's result dim, or cat's own gather of dim. */
static int cat_row(const dt__pctx *c, int j, int d, int *od) {
    const cat_fam *f = c->fam;
    (void)j;
    *od = f->stack && d >= f->dim ? d + 1 : d;
    return !f->stack && d == f->dim ? DT__VR_OP : DT__VR_KEEP;
}

static int same_placement(dt_placement a, dt_placement b) {
    return a.kind == b.kind && (a.kind != DT_PLACEMENT_SHARD || a.dim == b.dim);
}

/* out->pl of the cat (stack) of ins[0..nk) along dim, from the rows, and
 * *gathered: the mesh dims where cat gathers its Shard(dim) inputs (S(dim)
 * there unless another input gives S(j)). Per mesh dim the engine sees the
 * first input of each placement: six distinct ones hold Shards of two kept
 * dims, rejected whatever the rest are. A PlacementError otherwise. */
static dt_status cat_place(const char *op, const dt__meta *const *ins, int nk, int dim, int stack,
                           dt__meta *out, uint32_t *gathered) {
    const cat_fam fam = {dim, stack};
    int pos[DT_MAX_OP_INPUTS];
    dt__pctx c = {.out = out, .fam = &fam, .err_in = ins, .err_nin = nk, .err_pos = pos};
    *gathered = 0;
    for (int md = 0; md < out->mesh->ndim; md++) {
        c.nin = 0;
        for (int i = 0; i < nk && c.nin < DT_MAX_OP_INPUTS; i++) {
            int seen = 0;
            for (int r = 0; r < c.nin; r++)
                seen |= same_placement(c.in[r]->pl[md], ins[i]->pl[md]);
            if (!seen) {
                pos[c.nin] = i;
                c.in[c.nin++] = ins[i];
            }
        }
        const uint32_t all_p[] = {(1u << c.nin) - 1, 0};
        const dt__psig sig = {.partial = all_p,
                              .accepted = stack ? DT__VIEW_STACK_TEXT : DT__VIEW_CAT_TEXT,
                              .rows = stack ? stack_rows : cat_rows,
                              .shard_row = cat_row,
                              .own_regions = 1}; /* checked in cat_impl */
        if (dt__ps_rule_md(op, &sig, &c, md, &out->pl[md]) != DT_OK)
            return DT_EPLACEMENT;
        for (int r = 0; r < c.nin; r++) {
            int key;
            dt_placement p = c.in[r]->pl[md];
            if (p.kind == DT_PLACEMENT_SHARD &&
                dt__ps_shard_outcome(&sig, &c, r, p.dim, &key) == DT__PS_GATHER)
                *gathered |= 1u << md;
        }
        if ((*gathered >> md & 1) && out->pl[md].kind == DT_PLACEMENT_REPLICATE)
            out->pl[md] = (dt_placement){DT_PLACEMENT_SHARD, dim};
    }
    return DT_OK;
}

/* The mesh dims (a bit mask) of a communication-free cat along `dim`
 * (docs/decisions.md, "segmented cat"): every input has the same
 * placements, Shard(dim) on one or more mesh dims (nested shards: device
 * c's pieces are its nested chunks), and is regular or segmented over
 * exactly those; 0 otherwise. */
static int local_cat_md(const dt__meta *const *ins, int nk, int dim) {
    const dt__meta *m0 = ins[0];
    int lmd = 0;
    for (int md = 0; md < m0->mesh->ndim; md++) {
        for (int i = 1; i < nk; i++)
            if (ins[i]->pl[md].kind != m0->pl[md].kind || ins[i]->pl[md].dim != m0->pl[md].dim)
                return 0;
        if (m0->pl[md].kind == DT_PLACEMENT_SHARD && m0->pl[md].dim == dim)
            lmd |= 1 << md;
    }
    if (!lmd)
        return 0;
    dt__seg g = {0};
    for (int i = 0; i < nk; i++) {
        if (ins[i]->seg.n && (ins[i]->seg.dim != dim || dt__seg_mask(&ins[i]->seg) != (unsigned)lmd))
            return 0;
        if (!seg_append(&g, ins[i], dim))
            return 0;
    }
    return lmd;
}

/* cat of the inputs in the regular layout (segmented ones converted). */
static dt_tensor *cat_regular(const char *op, int n, dt_tensor *const *ts, int64_t dim, int stack) {
    dt_tensor **reg = dt__calloc((size_t)n, sizeof *reg);
    if (!reg)
        return dt__error(DT_ENOMEM, "%s: out of memory", op), NULL;
    dt_tensor *result = NULL;
    int i = 0;
    for (; i < n; i++) {
        reg[i] = ts[i]->v->meta.seg.n ? dt__seg_regular(ts[i]) : (dt_tensor_retain(ts[i]), ts[i]);
        if (!reg[i])
            break;
    }
    if (i == n)
        result = cat_impl(op, n, reg, dim, stack);
    for (int j = 0; j < i; j++)
        dt_tensor_release(reg[j]);
    dt__free(reg);
    return result;
}

/* cat along a dim that inputs shard where local_cat_md does not apply (mixed
 * placements, nested shards, too many segments): on each mesh dim of
 * `gather` (cat_place) the inputs are all-gathered (Replicate), the cat
 * runs on whole blocks and the result is sliced back to Shard(dim) locally
 * (or keeps the other inputs' Shard(j) when some are Shard(j)).
 * Values are exact; the cost is one all-gather of the sharded inputs. */
static dt_tensor *cat_gathered(const char *op, int n, dt_tensor *const *ts, int dim, uint32_t gathered) {
    int nmd = ts[0]->v->meta.mesh->ndim;
    dt_tensor **whole = dt__calloc((size_t)n, sizeof *whole);
    if (!whole)
        return dt__error(DT_ENOMEM, "%s: out of memory", op), NULL;
    dt_tensor *result = NULL;
    for (int i = 0; i < n; i++) {
        const dt__meta *m = &ts[i]->v->meta;
        dt_placement want[DT_MAX_MESH_NDIM];
        int move = 0;
        for (int md = 0; md < nmd; md++) {
            want[md] = m->pl[md];
            if ((gathered >> md & 1) && want[md].kind == DT_PLACEMENT_SHARD && want[md].dim == dim) {
                want[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
                move = 1;
            }
        }
        if (move) {
            if (!(whole[i] = dt_redistribute(ts[i], NULL, want)))
                goto out;
        } else {
            dt_tensor_retain(ts[i]);
            whole[i] = ts[i];
        }
    }
    dt_tensor *c = cat_impl(op, n, whole, dim, 0);
    if (c) {
        dt_placement back[DT_MAX_MESH_NDIM];
        for (int md = 0; md < nmd; md++)
            back[md] = (gathered >> md & 1) && c->v->meta.pl[md].kind == DT_PLACEMENT_REPLICATE
                           ? (dt_placement){DT_PLACEMENT_SHARD, dim}
                           : c->v->meta.pl[md];
        result = dt_redistribute(c, NULL, back);
        dt_tensor_release(c);
    }
out:
    for (int i = 0; i < n; i++)
        dt_tensor_release(whole[i]);
    dt__free(whole);
    return result;
}

static dt_tensor *cat_impl(const char *op, int n, dt_tensor *const *ts, int64_t dim, int stack) {
    dt_clear_error();
    if (n > 0 && !ts)
        return dt__error(DT_EINVAL, "%s: the tensor list is NULL", op), NULL;
    if (n < 1) {
        dt__error(DT_EOP, "%s: expected a non-empty list of Tensors", op);
        return NULL;
    }
    for (int i = 0; i < n; i++)
        if (dt__view_check_pair(op, ts[0], ts[i]) != DT_OK)
            return NULL;
    /* torch.cat skips 1-D empty inputs (legacy), but they still take part in
     * type promotion. */
    dt_tensor **keep = dt__malloc(sizeof *keep * (size_t)n);
    const dt__meta **ins = dt__malloc(sizeof *ins * (size_t)n);
    if (!keep || !ins) {
        dt__free(keep);
        dt__free(ins);
        dt__error(DT_ENOMEM, "%s: out of memory", op);
        return NULL;
    }
    dt_tensor *result = NULL;
    int nk = 0;
    dt_dtype dtype = ts[0]->v->meta.dtype;
    for (int i = 0; i < n; i++) {
        const dt__meta *m = &ts[i]->v->meta;
        dtype = dt__promote_types(dtype, m->dtype);
        if (stack || !(m->ndim == 1 && m->shape[0] == 0))
            keep[nk++] = ts[i];
    }
    if (nk == 0)
        keep[nk++] = ts[0];
    for (int i = 0; i < nk; i++)
        ins[i] = &keep[i]->v->meta;
    const dt__meta *ref = ins[0];
    dt__meta out = *ref;
    out.dtype = dtype;
    int d;
    if (stack) {
        for (int i = 1; i < nk; i++) {
            int same = ins[i]->ndim == ref->ndim;
            for (int j = 0; same && j < ref->ndim; j++)
                same = ins[i]->shape[j] == ref->shape[j];
            if (!same) {
                dt__strbuf a, b;
                dt__sb_init(&a);
                dt__sb_init(&b);
                dt__sb_printf(&a, "[");
                for (int j = 0; j < ref->ndim; j++)
                    dt__sb_printf(&a, "%s%lld", j ? ", " : "", (long long)ref->shape[j]);
                dt__sb_printf(&a, "]");
                dt__sb_printf(&b, "[");
                for (int j = 0; j < ins[i]->ndim; j++)
                    dt__sb_printf(&b, "%s%lld", j ? ", " : "", (long long)ins[i]->shape[j]);
                dt__sb_printf(&b, "]");
                dt__error(
                    DT_EOP,
                    "stack expects each tensor to be equal size, but got %s at entry 0 and %s at entry %d",
                    a.buf, b.buf, i);
                goto done;
            }
        }
        if (ref->ndim >= DT_MAX_NDIM) {
            dt__error(DT_EINVAL, "stack: the result would have more than %d dimensions", DT_MAX_NDIM);
            goto done;
        }
        if (dt__view_wrap_dim(op, dim, ref->ndim + 1, 0, &d) != DT_OK)
            goto done;
        out.ndim = ref->ndim + 1;
        for (int j = 0, k = 0; j < out.ndim; j++)
            out.shape[j] = j == d ? nk : ref->shape[k++];
    } else {
        for (int i = 0; i < nk; i++)
            if (ins[i]->ndim == 0) {
                dt__error(DT_EOP, "%s: zero-dimensional tensor (at position %d) cannot be concatenated", op,
                          i);
                goto done;
            }
        if (dt__view_wrap_dim(op, dim, ref->ndim, 0, &d) != DT_OK)
            goto done;
        int64_t total = 0;
        for (int i = 0; i < nk; i++) {
            if (ins[i]->ndim != ref->ndim) {
                dt__error(DT_EOP, "%s: Tensors must have same number of dimensions: got %d and %d", op,
                          ref->ndim, ins[i]->ndim);
                goto done;
            }
            for (int j = 0; j < ref->ndim; j++)
                if (j != d && ins[i]->shape[j] != ref->shape[j]) {
                    dt__error(
                        DT_EOP,
                        "%s: Sizes of tensors must match except in dimension %d. Expected size %lld but got "
                        "size %lld for tensor number %d in the list.",
                        op, d, (long long)ref->shape[j], (long long)ins[i]->shape[j], i);
                    goto done;
                }
            total += ins[i]->shape[d];
        }
        out.shape[d] = total;
    }
    /* The rows decide: a PlacementError, a gather of cat's Shard(dim)
     * inputs (a local cat where local_cat_md applies), or Shards that stay. */
    uint32_t gathered;
    if (cat_place(op, ins, nk, d, stack, &out, &gathered) != DT_OK)
        goto done;
    int lmd = gathered ? local_cat_md(ins, nk, d) : 0, segmented = 0;
    for (int i = 0; i < n; i++)
        segmented |= ts[i]->v->meta.seg.n != 0;
    if (lmd > 0) {
        result = cat_tree(keep, 0, nk, nk, &out, d, 0, lmd);
        goto done;
    }
    if (segmented) {
        result = cat_regular(op, n, ts, dim, stack);
        goto done;
    }
    if (gathered) {
        result = cat_gathered(op, n, ts, d, gathered);
        goto done;
    }
    /* Nested shards: every device must hold what it concatenates. */
    if (out.mesh->ndim > 1) {
        int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
        for (int64_t i = 0; i < out.mesh->ndev; i++) {
            dt__mesh_coord(out.mesh, i, coord);
            dt__local_region(&out, coord, os, ol);
            for (int j = 0; j < nk; j++) {
                dt__meta whole = out;
                whole.shape[d] = stack ? 1 : ins[j]->shape[d];
                cat_needed(ins[j], &whole, d, stack, os, ol, s, l);
                if (!dt__view_within(ins[j], coord, s, l)) {
                    dt__placement_error(op, ins, nk, 0, stack ? DT__VIEW_STACK_TEXT : DT__VIEW_CAT_TEXT, -1,
                                        NULL);
                    dt__error_append(" (nested shards do not line up)");
                    goto done;
                }
            }
        }
    }
    result = cat_tree(keep, 0, nk, nk, &out, d, stack, 0);
done:
    dt__free(keep);
    dt__free(ins);
    return result;
}

dt_tensor *dt_cat(int n, dt_tensor *const *ts, int64_t dim) { return cat_impl("cat", n, ts, dim, 0); }

dt_tensor *dt_stack(int n, dt_tensor *const *ts, int64_t dim) { return cat_impl("stack", n, ts, dim, 1); }

void dt__vlower_cat(dt__lower *L, dt__node *n) {
    dt__tval *o = n->out;
    const dt_mesh *mesh = o->meta.mesh;
    int dim = n->a.v_dim, stack = n->a.v_nints;
    if (dt__lw_alloc_blobs(L, o) != DT_OK)
        return;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&o->meta, coord, os, ol);
        dt__kernel *k = dt__view_kernel(L, n, DT_KV_CAT);
        if (!k)
            break;
        k->n_in = n->n_in;
        for (int j = 0; j < n->n_in; j++) {
            /* The local cat (segmented result) takes each input's block. */
            if (n->a.v_mask)
                dt__local_region(&n->in[j]->meta, coord, s, l);
            else
                cat_needed(&n->in[j]->meta, &o->meta, dim, stack, os, ol, s, l);
            k->in[j] = dt__lw_region(L, n->in[j], i, coord, s, l);
        }
        k->attr.dim = dim;
        k->attr.ndim = o->meta.ndim;
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
}

/* -------------------------------------------------- one kernel per device */

/* A node of `kind` on a with output meta `out`. */
static dt_tensor *unary_node(dt_tensor *a, const dt__meta *out, int kind, dt__node **n) {
    dt_tensor *t = dt__view_begin(a, NULL, out, kind, n);
    return t;
}

/* ---------------------------------------------------------------- tril/triu */

dt_tensor *dt_tril(dt_tensor *a, int64_t diagonal, int upper) {
    dt_clear_error();
    const char *op = upper ? "triu" : "tril";
    if (dt__view_check(op, a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (m->ndim < 2) {
        int dummy;
        dt__view_wrap_dim(op, -2, m->ndim, 1, &dummy);
        return NULL;
    }
    dt__node *n;
    dt_tensor *t = unary_node(a, m, DT_V_TRIL, &n);
    if (!t)
        return NULL;
    if (n) {
        n->a.v_ints[0] = diagonal;
        n->a.v_nints = upper != 0;
    }
    return dt__client_submit(t, n);
}

void dt__vlower_tril(dt__lower *L, dt__node *n) {
    dt__tval *in = n->in[0], *o = n->out;
    const dt_mesh *mesh = o->meta.mesh;
    int nd = o->meta.ndim;
    if (dt__lw_alloc_blobs(L, o) != DT_OK)
        return;
    int64_t coord[DT_MAX_MESH_NDIM], ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&o->meta, coord, ls, ll);
        dt__kernel *k = dt__view_kernel(L, n, n->a.v_nints ? DT_KV_TRIU : DT_KV_TRIL);
        if (!k)
            break;
        if (n->a.v_nints)
            k->opname = "triu";
        k->n_in = 1;
        k->in[0] = dt__blob_retain(in->blobs[i]);
        k->attr.ints[0] = n->a.v_ints[0] + ls[nd - 2] - ls[nd - 1];
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
}

/* -------------------------------------------------------------------- flip */

static const dt__ps_row flip_rows[] = DT__PS_ROWS(DT__VIEW_FLIP_ROWS),
                        roll_rows[] = DT__PS_ROWS(DT__VIEW_ROLL_ROWS);
/* fam: the mask of the dims the op works along (they cannot stay shards). */
static int masked_row(const dt__pctx *c, int j, int d, int *od) {
    (void)j;
    *od = d;
    return *(const uint64_t *)c->fam & (1ull << d) ? DT__VR_OP : DT__VR_KEEP;
}

/* The placements of flip or roll (`mask` the dims it works along) from its
 * rows; the error names the first sharded dim it works along. */
static dt_status place_masked(const char *op, const dt__meta *m, dt__meta *out, uint64_t mask,
                              const dt__ps_row *rows, const char *accepts, const char *what) {
    if (dt__view_place(op, &m, 1, out, rows, masked_row, NULL, &mask, accepts) == DT_OK)
        return DT_OK;
    for (int md = 0; md < m->mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_SHARD && (mask & (1ull << m->pl[md].dim))) {
            dt__error_append(" (dim %d is sharded and %s)", m->pl[md].dim, what);
            break;
        }
    return DT_EPLACEMENT;
}

dt_tensor *dt_flip(dt_tensor *a, int ndims, const int64_t *dims) {
    dt_clear_error();
    if (dt__view_check("flip", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (ndims < 0 || (ndims > 0 && !dims)) {
        dt__error(DT_EINVAL, "flip: dims is NULL");
        return NULL;
    }
    uint64_t mask = 0;
    for (int i = 0; i < ndims; i++) {
        int d;
        if (dt__view_wrap_dim("flip", dims[i], m->ndim, 1, &d) != DT_OK)
            return NULL;
        if (mask & (1ull << d)) {
            dt__error(DT_EOP, "flip: dim %d appears multiple times in the list of dims", d);
            return NULL;
        }
        mask |= 1ull << d;
    }
    if (m->ndim == 0)
        mask = 0;
    dt__meta out = *m;
    if (place_masked("flip", m, &out, mask, flip_rows, DT__VIEW_TEXT(DT__VIEW_FLIP_ROWS), "flipped") != DT_OK)
        return NULL;
    dt__node *n;
    dt_tensor *t = unary_node(a, &out, DT_V_FLIP, &n);
    if (!t)
        return NULL;
    if (n)
        n->a.v_mask = mask;
    return dt__client_submit(t, n);
}

void dt__vlower_flip(dt__lower *L, dt__node *n) {
    dt__kattr a = {.dims_mask = n->a.v_mask};
    dt__view_lower_each(L, n, DT_KV_FLIP, &a);
}

/* -------------------------------------------------------------------- roll */

dt_tensor *dt_roll(dt_tensor *a, int n, const int64_t *shifts, const int64_t *dims) {
    dt_clear_error();
    if (dt__view_check("roll", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (n < 1 || !shifts || (!dims && n != 1)) {
        dt__error(DT_EOP, "roll: shifts and dimensions must align. shifts: %d, dims:%d", n < 0 ? 0 : n,
                  dims ? n : 0);
        return NULL;
    }
    /* Rolls along one dim compose by adding their shifts. */
    int64_t total[DT_MAX_NDIM] = {0};
    uint64_t mask = 0;
    if (dims) {
        for (int i = 0; i < n; i++) {
            int d;
            if (dt__view_wrap_dim("roll", dims[i], m->ndim, 1, &d) != DT_OK)
                return NULL;
            if (m->ndim == 0)
                continue;
            total[d] += shifts[i];
            mask |= 1ull << d;
        }
    } else {
        mask = m->ndim > 0 ? (1ull << m->ndim) - 1 : 0;
    }
    dt__meta out = *m;
    if (place_masked("roll", m, &out, mask, roll_rows, DT__VIEW_TEXT(DT__VIEW_ROLL_ROWS), "rolled") != DT_OK)
        return NULL;
    dt__node *nd;
    dt_tensor *t = unary_node(a, &out, DT_V_ROLL, &nd);
    if (!t)
        return NULL;
    if (nd) {
        if (!dims) {
            nd->a.v_nints = 0;
            nd->a.v_ints[0] = shifts[0];
        } else {
            for (int d = 0; d < m->ndim; d++)
                if (mask & (1ull << d)) {
                    nd->a.v_start[nd->a.v_nints] = d;
                    nd->a.v_ints[nd->a.v_nints++] = total[d];
                }
            if (nd->a.v_nints == 0) {
                /* A 0-d tensor: roll of nothing. */
                nd->a.v_ints[0] = 0;
            }
        }
    }
    return dt__client_submit(t, nd);
}

void dt__vlower_roll(dt__lower *L, dt__node *n) {
    dt__kattr a = {.nints = n->a.v_nints};
    for (int j = 0; j < DT_MAX_NDIM; j++) {
        a.ints[j] = n->a.v_ints[j];
        a.start[j] = n->a.v_start[j];
    }
    dt__view_lower_each(L, n, DT_KV_ROLL, &a);
}

/* ------------------------------------------------------------------ repeat */

static const dt__ps_row repeat_rows[] = DT__PS_ROWS(DT__VIEW_REPEAT_ROWS);
/* fam: the repeats, one per result dim; dim d is result dim d + new dims. */
static int repeat_row(const dt__pctx *c, int j, int d, int *od) {
    *od = d + c->out->ndim - c->in[j]->ndim;
    return ((const int64_t *)c->fam)[*od] == 1 ? DT__VR_KEEP : DT__VR_OP;
}

dt_tensor *dt_repeat(dt_tensor *a, int n, const int64_t *repeats) {
    dt_clear_error();
    if (dt__view_check("repeat", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (n < m->ndim || (n > 0 && !repeats)) {
        dt__error(DT_EOP,
                  "repeat: Number of dimensions of repeat dims can not be smaller than number of dimensions "
                  "of tensor");
        return NULL;
    }
    if (n > DT_MAX_NDIM) {
        dt__error(DT_EINVAL, "repeat: the result would have %d dimensions (at most %d)", n, DT_MAX_NDIM);
        return NULL;
    }
    dt__meta out = *m;
    out.ndim = n;
    int off = n - m->ndim;
    for (int o = 0; o < n; o++) {
        out.shape[o] = repeats[o] * (o < off ? 1 : m->shape[o - off]);
        if (repeats[o] < 0) {
            dt__error(DT_EOP, "repeat: Trying to create tensor with negative dimension %lld",
                      (long long)out.shape[o]);
            return NULL;
        }
    }
    if (dt__view_place("repeat", &m, 1, &out, repeat_rows, repeat_row, NULL, repeats,
                       DT__VIEW_TEXT(DT__VIEW_REPEAT_ROWS)) != DT_OK)
        return NULL;
    dt__node *nd;
    dt_tensor *t = unary_node(a, &out, DT_V_REPEAT, &nd);
    if (!t)
        return NULL;
    if (nd) {
        nd->a.v_nints = n;
        for (int o = 0; o < n; o++)
            nd->a.v_ints[o] = repeats[o];
    }
    return dt__client_submit(t, nd);
}

void dt__vlower_repeat(dt__lower *L, dt__node *n) {
    dt__kattr a = {.nints = n->a.v_nints};
    memcpy(a.ints, n->a.v_ints, sizeof n->a.v_ints);
    dt__view_lower_each(L, n, DT_KV_REPEAT, &a);
}

/* ------------------------------------------------------- repeat_interleave */

static const dt__ps_row ri_rows[] = DT__PS_ROWS(DT__VIEW_RI_ROWS);
/* fam: the repeated dim. Every shard stays; one of the repeated dim only
 * when the blocks line up (checked over the devices after the rows). */
static int ri_row(const dt__pctx *c, int j, int d, int *od) {
    (void)j;
    *od = d;
    return d == *(const int *)c->fam ? DT__VR_IDX : DT__VR_KEEP;
}

dt_tensor *dt_repeat_interleave(dt_tensor *a, int64_t repeats, int64_t dim) {
    dt_clear_error();
    if (dt__view_check("repeat_interleave", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (repeats < 0) {
        dt__error(DT_EOP, "repeat_interleave: repeats can not be negative");
        return NULL;
    }
    int d;
    if (dt__view_wrap_dim("repeat_interleave", dim, m->ndim, 0, &d) != DT_OK)
        return NULL;
    dt__meta out = *m;
    out.shape[d] = m->shape[d] * repeats;
    if (dt__view_place("repeat_interleave", &m, 1, &out, ri_rows, ri_row, NULL, &d,
                       DT__VIEW_TEXT(DT__VIEW_RI_ROWS)) != DT_OK)
        return NULL;
    int64_t coord[DT_MAX_MESH_NDIM], is[DT_MAX_NDIM], il[DT_MAX_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
    for (int64_t i = 0; i < m->mesh->ndev; i++) {
        dt__mesh_coord(m->mesh, i, coord);
        dt__local_region(m, coord, is, il);
        dt__local_region(&out, coord, os, ol);
        if (os[d] != is[d] * repeats || ol[d] != il[d] * repeats) {
            int md = 0;
            while (!(m->pl[md].kind == DT_PLACEMENT_SHARD && m->pl[md].dim == d))
                md++;
            dt__view_reject("repeat_interleave", &m, 1, 0, md, DT__VIEW_TEXT(DT__VIEW_RI_ROWS));
            return NULL;
        }
    }
    dt__node *nd;
    dt_tensor *t = unary_node(a, &out, DT_V_REPEAT_INTERLEAVE, &nd);
    if (!t)
        return NULL;
    if (nd) {
        nd->a.v_dim = d;
        nd->a.v_ints[0] = repeats;
    }
    return dt__client_submit(t, nd);
}

static const dt__ps_row ri_tensor_rows[] = DT__PS_ROWS(DT__VIEW_RI_TENSOR_ROWS);
/* fam: the repeated dim. The repeats tensor has no row (Replicate only). */
static int ri_tensor_row(const dt__pctx *c, int j, int d, int *od) {
    *od = d;
    return j != 0 ? -1 : d == *(const int *)c->fam ? DT__VR_OP : DT__VR_KEEP;
}
/* The repeats first: every device reads all of them. */
static int repeats_replicate(const dt__pctx *c, int md) {
    return c->in[1]->pl[md].kind != DT_PLACEMENT_REPLICATE ? 1 : -1;
}

dt_tensor *dt_repeat_interleave_tensor(dt_tensor *a, dt_tensor *repeats, int64_t dim, int64_t output_size) {
    dt_clear_error();
    if (dt__view_check_pair("repeat_interleave", a, repeats) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta, *mr = &repeats->v->meta;
    if (mr->dtype != DT_INT64 || mr->ndim != 1) {
        dt__error(DT_EOP, "repeat_interleave: repeats must be a 1-D int64 tensor (got %d-D %s)", mr->ndim,
                  dt_dtype_name(mr->dtype));
        return NULL;
    }
    int d;
    if (dt__view_wrap_dim("repeat_interleave", dim, m->ndim, 0, &d) != DT_OK)
        return NULL;
    if (mr->shape[0] != m->shape[d] && mr->shape[0] != 1) {
        dt__error(DT_EOP, "repeat_interleave: repeats must have the same size as input along dim");
        return NULL;
    }
    if (output_size < 0) {
        dt__error(DT_EOP, "repeat_interleave: output_size must be non-negative");
        return NULL;
    }
    const dt__meta *ins[2] = {m, mr};
    dt__meta out = *m;
    out.shape[d] = output_size;
    if (dt__view_place("repeat_interleave", ins, 2, &out, ri_tensor_rows, ri_tensor_row, repeats_replicate,
                       &d, DT__VIEW_TEXT(DT__VIEW_RI_TENSOR_ROWS)) != DT_OK)
        return NULL;
    dt__node *nd;
    dt_tensor *t = dt__view_begin(a, repeats, &out, DT_V_REPEAT_INTERLEAVE, &nd);
    if (!t)
        return NULL;
    if (nd) {
        nd->a.v_dim = d;
        nd->a.v_ints[1] = output_size;
    }
    return dt__client_submit(t, nd);
}

void dt__vlower_repeat_interleave(dt__lower *L, dt__node *n) {
    dt__kattr a = {.dim = n->a.v_dim};
    a.ints[0] = n->a.v_ints[0];
    a.ints[1] = n->a.v_ints[1];
    dt__view_lower_each(L, n, DT_KV_REPEAT_INTERLEAVE, &a);
}
