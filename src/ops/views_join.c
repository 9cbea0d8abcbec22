/*
 * The views and shape family, part 3: the joining ops, cat and stack, and
 * copy_ (a whole-tensor setitem, index.c) (flip, roll, repeat and
 * tril/triu are part 4, views_rearrange.c).
 *
 * cat and stack of n inputs are a balanced tree of two-input nodes (kernels
 * take at most two inputs): each level casts its inputs to the final dtype
 * before concatenating, exactly as torch.cat copies every input into a
 * result of the promoted dtype, so the values are those of one torch.cat.
 * The intermediate symbols are released at once; the controller frees their
 * blocks after the next level has read them.
 *
 * Placements: see dtorch.h.
 *
 * Threads: dt_* functions on client threads; dt__vlower_cat on the
 * controller.
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

/* A shape as torch prints it, "[2, 3]". */
static void shape_text(dt__strbuf *sb, const dt__meta *m) {
    dt__sb_init(sb);
    dt__sb_printf(sb, "[");
    for (int j = 0; j < m->ndim; j++)
        dt__sb_printf(sb, "%s%lld", j ? ", " : "", (long long)m->shape[j]);
    dt__sb_printf(sb, "]");
}

/* stack's result shape into out (ins[0]'s meta): every input of ins[0]'s
 * shape, stacked along the new dim *d (dim wrapped). */
static dt_status stack_shape(const char *op, const dt__meta *const *ins, int nk, int64_t dim, dt__meta *out,
                             int *d) {
    const dt__meta *ref = ins[0];
    for (int i = 1; i < nk; i++) {
        int same = ins[i]->ndim == ref->ndim;
        for (int j = 0; same && j < ref->ndim; j++)
            same = ins[i]->shape[j] == ref->shape[j];
        if (!same) {
            dt__strbuf a, b;
            shape_text(&a, ref);
            shape_text(&b, ins[i]);
            return dt__error(
                DT_EOP,
                "stack expects each tensor to be equal size, but got %s at entry 0 and %s at entry %d", a.buf,
                b.buf, i);
        }
    }
    if (ref->ndim >= DT_MAX_NDIM)
        return dt__error(DT_EINVAL, "stack: the result would have more than %d dimensions", DT_MAX_NDIM);
    if (dt__view_wrap_dim(op, dim, ref->ndim + 1, 0, d) != DT_OK)
        return dt_last_status();
    out->ndim = ref->ndim + 1;
    for (int j = 0, k = 0; j < out->ndim; j++)
        out->shape[j] = j == *d ? nk : ref->shape[k++];
    return DT_OK;
}

/* cat's result shape into out (ins[0]'s meta): inputs of one rank whose
 * sizes agree but along *d (dim wrapped), where they add up. */
static dt_status cat_shape(const char *op, const dt__meta *const *ins, int nk, int64_t dim, dt__meta *out,
                           int *d) {
    const dt__meta *ref = ins[0];
    for (int i = 0; i < nk; i++)
        if (ins[i]->ndim == 0)
            return dt__error(DT_EOP, "%s: zero-dimensional tensor (at position %d) cannot be concatenated",
                             op, i);
    if (dt__view_wrap_dim(op, dim, ref->ndim, 0, d) != DT_OK)
        return dt_last_status();
    int64_t total = 0;
    for (int i = 0; i < nk; i++) {
        if (ins[i]->ndim != ref->ndim)
            return dt__error(DT_EOP, "%s: Tensors must have same number of dimensions: got %d and %d", op,
                             ref->ndim, ins[i]->ndim);
        for (int j = 0; j < ref->ndim; j++)
            if (j != *d && ins[i]->shape[j] != ref->shape[j])
                return dt__error(
                    DT_EOP,
                    "%s: Sizes of tensors must match except in dimension %d. Expected size %lld but got "
                    "size %lld for tensor number %d in the list.",
                    op, *d, (long long)ref->shape[j], (long long)ins[i]->shape[j], i);
        total += ins[i]->shape[*d];
    }
    out->shape[*d] = total;
    return DT_OK;
}

/* Nested shards: every device must hold what it concatenates (a
 * PlacementError if not). */
static dt_status nested_shards_line_up(const char *op, const dt__meta *const *ins, int nk,
                                       const dt__meta *out, int d, int stack) {
    if (out->mesh->ndim <= 1)
        return DT_OK;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    for (int64_t i = 0; i < out->mesh->ndev; i++) {
        dt__mesh_coord(out->mesh, i, coord);
        dt__local_region(out, coord, os, ol);
        for (int j = 0; j < nk; j++) {
            dt__meta whole = *out;
            whole.shape[d] = stack ? 1 : ins[j]->shape[d];
            cat_needed(ins[j], &whole, d, stack, os, ol, s, l);
            if (!dt__view_within(ins[j], coord, s, l)) {
                dt__placement_error(op, ins, nk, 0, stack ? DT__VIEW_STACK_TEXT : DT__VIEW_CAT_TEXT, -1,
                                    NULL);
                dt__error_append(" (nested shards do not line up)");
                return DT_EPLACEMENT;
            }
        }
    }
    return DT_OK;
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
    dt__meta out = *ins[0];
    out.dtype = dtype;
    int d;
    /* The rows decide: a PlacementError, a gather of cat's Shard(dim)
     * inputs (a local cat where local_cat_md applies), or Shards that stay. */
    uint32_t gathered;
    if ((stack ? stack_shape(op, ins, nk, dim, &out, &d) : cat_shape(op, ins, nk, dim, &out, &d)) != DT_OK ||
        cat_place(op, ins, nk, d, stack, &out, &gathered) != DT_OK)
        goto done;
    int lmd = gathered ? local_cat_md(ins, nk, d) : 0, segmented = 0;
    for (int i = 0; i < n; i++)
        segmented |= ts[i]->v->meta.seg.n != 0;
    if (lmd > 0)
        result = cat_tree(keep, 0, nk, nk, &out, d, 0, lmd);
    else if (segmented)
        result = cat_regular(op, n, ts, dim, stack);
    else if (gathered)
        result = cat_gathered(op, n, ts, d, gathered);
    else if (nested_shards_line_up(op, ins, nk, &out, d, stack) == DT_OK)
        result = cat_tree(keep, 0, nk, nk, &out, d, stack, 0);
done:
    dt__free(keep);
    dt__free(ins);
    return result;
}

dt_tensor *dt_cat(int n, dt_tensor *const *ts, int64_t dim) { return cat_impl("cat", n, ts, dim, 0); }

dt_tensor *dt_stack(int n, dt_tensor *const *ts, int64_t dim) { return cat_impl("stack", n, ts, dim, 1); }

/* The region of input j the device at `coord` (output block os, ol) reads. */
static void cat_region(const dt__node *n, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                       int64_t *s, int64_t *l) {
    /* The local cat (segmented result) takes each input's block. */
    if (n->a.v_mask)
        dt__local_region(&n->in[j]->meta, coord, s, l);
    else
        cat_needed(&n->in[j]->meta, &n->out->meta, n->a.v_dim, n->a.v_nints, os, ol, s, l);
}

/* A cat as one shared record (lower_bcast.c) when every device joins its
 * own blocks of the inputs (a dim no mesh dim shards): its kernel has no
 * per-device attributes. Checked on dt__lw_probes' devices (cat_region
 * copies the output region's offsets, or an input's local region). 1 when
 * taken. */
static int cat_shared(dt__lower *L, dt__node *n, const dt__kattr *a) {
    const dt__meta *om = &n->out->meta;
    if (!dt__lw_bcast_wanted(L, n->out))
        return 0;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    int64_t devs[DT__LW_BCAST_MAX_DEV];
    int np = dt__lw_probes(L, n, 1, devs);
    for (int i = 0; i < np; i++) {
        dt__mesh_coord(om->mesh, devs[i], coord);
        dt__local_region(om, coord, os, ol);
        for (int j = 0; j < n->n_in; j++) {
            cat_region(n, j, coord, os, ol, s, l);
            if (!dt__lw_own_block(&n->in[j]->meta, coord, s, l))
                return 0;
        }
    }
    dt__kattr b = *a;
    return dt__lw_bcast(L, n->out, DT_K_VIEW, &b, dt__view_names[n->a.sub], n->in, n->n_in, 1);
}

void dt__vlower_cat(dt__lower *L, dt__node *n) {
    dt__tval *o = n->out;
    int64_t s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    const dt__kattr a = {.sub = DT_KV_CAT, .dtype = o->meta.dtype, .dim = n->a.v_dim, .ndim = o->meta.ndim};
    if (cat_shared(L, n, &a))
        return;
    for (dt__lw_dev dev = DT__LW_EACH(o, DT_K_VIEW); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        dt__view_kernel_set(k, n, DT_KV_CAT);
        k->n_in = n->n_in;
        for (int j = 0; j < n->n_in; j++) {
            cat_region(n, j, dev.coord, dev.start, dev.len, s, l);
            k->in[j] = dt__lw_region(L, n->in[j], dev.idx, dev.coord, s, l);
        }
        k->attr.dim = a.dim;
        k->attr.ndim = a.ndim;
        dt__lw_each_push(L, &dev);
    }
}

/* ------------------------------------------------------------------ copy_ */

/* A setitem of the whole tensor (index.c), src first laid out to line up. */

dt_tensor *dt_copy(dt_tensor *dst, dt_tensor *src) {
    dt_clear_error();
    if (dt__view_check_pair("copy_", dst, src) != DT_OK)
        return NULL;
    const dt__meta *m = &dst->v->meta, *ms = &src->v->meta;
    if (ms->ndim > m->ndim) {
        dt__error(DT_ESHAPE,
                  "copy_: the source with %d dimensions cannot be broadcast to the destination's %d",
                  ms->ndim, m->ndim);
        return NULL;
    }
    int off = m->ndim - ms->ndim;
    for (int j = 0; j < ms->ndim; j++)
        if (ms->shape[j] != 1 && ms->shape[j] != m->shape[j + off]) {
            dt__error(
                DT_ESHAPE,
                "copy_: The size of tensor a (%lld) must match the size of tensor b (%lld) at non-singleton "
                "dimension %d",
                (long long)m->shape[j + off], (long long)ms->shape[j], j + off);
            return NULL;
        }
    /* The placements src needs: what it has when setitem takes it, else the
     * cheapest that lines up (the matching Shard, or Replicate). */
    dt_placement want[DT_MAX_MESH_NDIM];
    int move = 0;
    for (int md = 0; md < m->mesh->ndim; md++) {
        dt_placement pd = m->pl[md], ps = ms->pl[md];
        want[md] = ps;
        if (pd.kind == DT_PLACEMENT_REPLICATE) {
            want[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
        } else if (pd.kind == DT_PLACEMENT_SHARD) {
            int j = pd.dim - off;
            int aligned = j >= 0 && ms->shape[j] == m->shape[pd.dim];
            if (ps.kind == DT_PLACEMENT_PARTIAL ||
                (ps.kind == DT_PLACEMENT_SHARD && !(aligned && ps.dim == j)))
                want[md] = aligned ? (dt_placement){DT_PLACEMENT_SHARD, j}
                                   : (dt_placement){DT_PLACEMENT_REPLICATE, 0};
        } else if (ps.kind == DT_PLACEMENT_SHARD) {
            want[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
        }
        move |= want[md].kind != ps.kind || want[md].dim != ps.dim;
    }
    dt_slice dims[DT_MAX_NDIM];
    for (int d = 0; d < m->ndim; d++)
        dims[d] = (dt_slice){0, 1, m->shape[d], 0};
    dt_tensor *s = src;
    if (move && !(s = dt_redistribute(src, NULL, want)))
        return NULL;
    dt_tensor *t = dt_setitem(dst, dims, s, dt_scalar_int(0));
    if (!t && dt_last_status() == DT_EPLACEMENT) {
        /* Nested shards that do not line up: Replicate always does. */
        for (int md = 0; md < m->mesh->ndim; md++)
            if (want[md].kind == DT_PLACEMENT_SHARD)
                want[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
        dt_tensor *r = dt_redistribute(src, NULL, want);
        if (r) {
            t = dt_setitem(dst, dims, r, dt_scalar_int(0));
            dt_tensor_release(r);
        }
    }
    if (s != src)
        dt_tensor_release(s);
    return t;
}
