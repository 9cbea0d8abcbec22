/*
 * The views and shape family, part 1: reshape (view, flatten, unflatten),
 * squeeze, unsqueeze, permute (transpose), expand and clone; the helpers the
 * family shares; the dispatch of DT_OP_VIEW lowering; the registry rows.
 * Indexing lives in index.c (part 2), cat and stack in views_join.c (part 3),
 * tril/flip/roll/repeat in views_rearrange.c (part 4).
 *
 * dtorch values are immutable, so a "view" is simply a new symbol: each
 * device runs the same torch op on its own block, and the backend hands on
 * the view torch returns (strided or not, sharing its input's storage) where
 * torch returns one; an unchanged block is handed on without any kernel.
 * Blobs are never mutated while shared, so sharing is always safe.
 *
 * Placements of reshape: a Shard(d) goes to the result dim that holds the
 * most significant digits of d (the dim o with stride(o) < stride(d)*size(d)
 * <= stride(o)*size(o)), and the result is accepted only when, for every
 * device, the flat indices of its input block equal those of its output
 * block. Both blocks are boxes enumerated in increasing flat order, so equal
 * sets mean equal sequences and the local op is a plain reshape. The sets are
 * compared through a canonical form of each box (adjacent dims merged while
 * the set is unchanged); equal forms imply equal sets, so nothing wrong is
 * ever accepted.
 * The search decides all mesh dims jointly; the placement engine
 * (core/client/placement.h) then applies its result as one row per mesh dim
 * (shard_row_at), so the decision and the accepted text come from the
 * rows (RESHAPE_ROWS, SQUEEZE_ROWS, UNSQUEEZE_ROWS).
 *
 * Threads: dt_* functions on client threads; lowering on the controller.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/placement.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/ops.h"
#include "ops/views_int.h"

const char *const dt__view_names[DT_V_COUNT] = {
    [DT_V_RESHAPE] = "reshape",
    [DT_V_PERMUTE] = "permute",
    [DT_V_EXPAND] = "expand",
    [DT_V_INDEX] = "getitem",
    [DT_V_INDEX_TENSOR] = "getitem",
    [DT_V_SETITEM] = "setitem",
    [DT_V_SETITEM_MASK] = "setitem",
    [DT_V_SETITEM_INDEX] = "setitem",
    [DT_V_CAT] = "cat",
    [DT_V_TRIL] = "tril",
    [DT_V_FLIP] = "flip",
    [DT_V_ROLL] = "roll",
    [DT_V_REPEAT] = "repeat",
    [DT_V_REPEAT_INTERLEAVE] = "repeat_interleave",
    [DT_V_CLONE] = "clone",
    [DT_V_CONTIGUOUS] = "contiguous",
};

/* ---------------------------------------------------------- shared helpers */

dt_status dt__view_check(const char *op, const dt_tensor *a) {
    if (!dt__tensor_ok(a))
        return dt__error(DT_EINVAL, "%s: tensor argument is %s", op, dt__handle_bad(a));
    return DT_OK;
}

dt_status dt__view_check_pair(const char *op, const dt_tensor *a, const dt_tensor *b) {
    dt_tensor *const ins[2] = {(dt_tensor *)a, (dt_tensor *)b};
    return dt__check_operands(op, ins, 2);
}

dt_status dt__view_wrap_dim(const char *op, int64_t dim, int ndim, int scalar_ok, int *out) {
    int n = ndim == 0 && scalar_ok ? 1 : ndim;
    if (n == 0)
        return dt__error(DT_EINDEX, "%s: dimension specified as %lld but tensor has no dimensions", op,
                         (long long)dim);
    if (dim < -n || dim >= n)
        return dt__error(DT_EINDEX,
                         "%s: Dimension out of range (expected to be in range of [%d, %d], but got %lld)", op,
                         -n, n - 1, (long long)dim);
    *out = (int)(dim < 0 ? dim + n : dim);
    return DT_OK;
}

static const uint32_t view_partial[] = DT__PS_MASKS(P);

dt_status dt__view_place(const char *op, const dt__meta *const *ins, int nin, dt__meta *out,
                         const dt__ps_row *rows, int (*shard_row)(const dt__pctx *c, int j, int d, int *od),
                         int (*mesh_dim_check)(const dt__pctx *c, int md), const void *fam,
                         const char *accepted) {
    dt__pctx c = {.nin = nin, .out = out, .fam = fam};
    for (int j = 0; j < nin; j++)
        c.in[j] = ins[j];
    const dt__psig sig = {.partial = view_partial,
                          .accepted = accepted,
                          .rows = rows,
                          .shard_row = shard_row,
                          .mesh_dim_check = mesh_dim_check,
                          .own_regions = 1}; /* each device reshapes its own block */
    int bad;
    return dt__ps_apply(op, &sig, &c, 0, out->pl, &bad);
}

dt_status dt__view_reject(const char *op, const dt__meta *const *ins, int nin, int which, int md,
                          const char *accepted) {
    dt_placement fix[DT_MAX_MESH_NDIM];
    memcpy(fix, ins[which]->pl, sizeof fix);
    fix[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
    return dt__placement_error(op, ins, nin, md, accepted, which, fix);
}

int dt__view_within(const dt__meta *m, const int64_t *coord, const int64_t *s, const int64_t *l) {
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    for (int d = 0; d < m->ndim; d++)
        if (l[d] == 0)
            return 1;
    dt__local_region(m, coord, ls, ll);
    for (int d = 0; d < m->ndim; d++)
        if (s[d] < ls[d] || s[d] + l[d] > ls[d] + ll[d])
            return 0;
    return 1;
}

dt_tensor *dt__view_begin(dt_tensor *a, dt_tensor *b, const dt__meta *out, int kind, dt__node **node) {
    *node = NULL;
    dt_tensor *t = dt__tensor_new(a->graph, out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_VIEW);
    if (n) {
        n->n_in = b ? 2 : 1;
        n->in[0] = a->v;
        n->in[1] = b ? b->v : NULL;
        n->out = t->v;
        n->a.sub = kind;
    }
    *node = n;
    return t;
}

void dt__view_kernel_set(dt__kernel *k, const dt__node *n, int sub) {
    k->opname = dt__view_names[n->a.sub];
    k->attr.sub = sub;
    k->attr.dtype = n->out->meta.dtype;
}

dt__kernel *dt__view_kernel(dt__lower *L, const dt__node *n, int sub) {
    dt__kernel *k = dt__lw_kernel(L, DT_K_VIEW);
    if (k)
        dt__view_kernel_set(k, n, sub);
    return k;
}

void dt__view_lower_each(dt__lower *L, dt__node *n, int sub, const dt__kattr *attr) {
    /* The same kernel on every device's own blocks: one shared record (lower_bcast.c). */
    dt__kattr a = *attr;
    a.sub = sub;
    a.dtype = n->out->meta.dtype;
    if (dt__lw_bcast(L, n->out, DT_K_VIEW, &a, dt__view_names[n->a.sub], n->in, n->n_in, 1))
        return;
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_K_VIEW); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        k->attr = *attr;
        dt__view_kernel_set(k, n, sub);
        k->n_in = (int16_t)n->n_in;
        for (int j = 0; j < n->n_in; j++)
            k->in[j] = dt__blob_retain(n->in[j]->blobs[dev.idx]);
        dt__lw_each_push(L, &dev);
    }
}

/* ---------------------------------------------------------------- reshape */

typedef struct box_dim {
    int64_t n, s, l;
} box_dim;

/* The canonical form of the box (start, len) of a row-major tensor of
 * `shape`: size-1 dims dropped, then adjacent dims (a, b) merged while the
 * set of flat indices stays the same: when b is taken whole, or when a takes
 * one index. Returns the number of dims, or -1 for an empty box. */
static int canon_box(int ndim, const int64_t *shape, const int64_t *start, const int64_t *len, box_dim *out) {
    int k = 0;
    for (int d = 0; d < ndim; d++) {
        if (len[d] == 0)
            return -1;
        if (shape[d] == 1)
            continue;
        out[k++] = (box_dim){shape[d], start[d], len[d]};
        while (k >= 2) {
            box_dim *a = &out[k - 2], *b = &out[k - 1];
            if (b->s == 0 && b->l == b->n) {
                a->s *= b->n;
                a->l *= b->n;
            } else if (a->l == 1) {
                a->s = a->s * b->n + b->s;
                a->l = b->l;
            } else {
                break;
            }
            a->n *= b->n;
            k--;
        }
    }
    return k;
}

/* 1 when every device's block of `in` holds the same flat indices as its
 * block of `out` (same numel). */
static int blocks_match(const dt__meta *in, const dt__meta *out) {
    const dt_mesh *mesh = in->mesh;
    int64_t coord[DT_MAX_MESH_NDIM], is[DT_MAX_NDIM], il[DT_MAX_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
    box_dim bi[DT_MAX_NDIM], bo[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(in, coord, is, il);
        dt__local_region(out, coord, os, ol);
        int ki = canon_box(in->ndim, in->shape, is, il, bi);
        int ko = canon_box(out->ndim, out->shape, os, ol, bo);
        if (ki != ko)
            return 0;
        for (int d = 0; d < ki; d++)
            if (bi[d].n != bo[d].n || bi[d].s != bo[d].s || bi[d].l != bo[d].l)
                return 0;
    }
    return 1;
}

/* The result dim that holds the most significant digits of a block of
 * length `len` of input dim d (the whole dim, or the chunk an outer mesh dim
 * left when shards nest), or -1 when there is none. A block of one index
 * goes to the first size-1 result dim. */
static int leading_out_dim(const dt__meta *in, const dt__meta *out, int d, int64_t len) {
    if (len <= 1) {
        for (int o = 0; o < out->ndim; o++)
            if (out->shape[o] == 1)
                return o;
        return -1;
    }
    int64_t istride = 1;
    for (int j = in->ndim - 1; j > d; j--)
        istride *= in->shape[j];
    int64_t hi = istride * len, ostride = 1;
    for (int o = out->ndim - 1; o >= 0; o--) {
        if (out->shape[o] > 1 && ostride < hi && hi <= ostride * out->shape[o])
            return o;
        ostride *= out->shape[o];
    }
    return -1;
}

/* Tries every result dim for each sharding mesh dim (from mesh dim `md` on)
 * until the blocks match; bounded, and only reached when the leading-digit
 * choice failed. Returns 1 with out->pl set on success. */
static int search_placements(const dt__meta *in, dt__meta *out, int md, int *budget) {
    if (md == in->mesh->ndim)
        return --*budget >= 0 && blocks_match(in, out);
    if (in->pl[md].kind != DT_PLACEMENT_SHARD)
        return search_placements(in, out, md + 1, budget);
    for (int o = 0; o<out->ndim && * budget> 0; o++) {
        out->pl[md] = (dt_placement){DT_PLACEMENT_SHARD, o};
        if (search_placements(in, out, md + 1, budget))
            return 1;
    }
    return 0;
}

/* The Shard rows of reshape (view, flatten, unflatten), squeeze and
 * unsqueeze. The blocks decide all mesh dims jointly, so plan_reshape runs
 * the search once and each mesh dim's row is what it found (the engine's
 * shard_row_at); the registry rows print the same lists. */
#define RESHAPE_ROWS(X)                                                                                      \
    X(DT__VR_KEEP,                                                                                           \
      "S(d)->S(d') when every device's block of the input is, in row-major order, the block the result's "   \
      "torch.chunk split gives it (d' is the result dim holding d's leading part)",                          \
      SHARD)                                                                                                 \
    X(DT__VR_IDX, "S(d) of an empty tensor->R", GATHER)                                                      \
    X(DT__VR_OP, "no S(d) whose blocks would not stay contiguous chunk-sized blocks of the result", REJECT)
#define SQUEEZE_ROWS(X) DT__PS_ROWS2(X, "S(d)->S(d') for a kept dim", "no S(removed d)", REJECT)
#define UNSQUEEZE_ROWS(X) X(DT__VR_KEEP, "S(d)->S(d or d+1)", SHARD)
static const dt__ps_row reshape_rows[] = DT__PS_ROWS(RESHAPE_ROWS),
                        squeeze_rows[] = DT__PS_ROWS(SQUEEZE_ROWS),
                        unsqueeze_rows[] = DT__PS_ROWS(UNSQUEEZE_ROWS);

/* What the block search found: each sharding mesh dim's row and result dim,
 * and whether the blocks failed to line up. */
typedef struct reshape_plan {
    int row[DT_MAX_MESH_NDIM];
    int od[DT_MAX_MESH_NDIM];
    int mismatch;
} reshape_plan;

static int reshape_row_at(const dt__pctx *c, int j, int md, int d, int *od) {
    (void)j;
    (void)d;
    const reshape_plan *p = c->fam;
    *od = p->od[md];
    return p->row[md];
}

/* The block search for the reshape of m to out (its shape set; out->pl is
 * scratch). A Shard(d) goes to dim_map[d] when given (squeeze, unsqueeze),
 * else to leading_out_dim, else to the first placements search_placements
 * finds; an empty tensor's Shard with no such dim becomes Replicate. A mesh
 * dim with no result dim is the rejected one; when the blocks do not line
 * up, the first sharding mesh dim is (some mesh dim shards then: without a
 * Shard every block is the whole tensor). */
static void plan_reshape(const dt__meta *m, dt__meta *out, const int *dim_map, reshape_plan *plan) {
    int64_t numel = dt__numel(m->ndim, m->shape), cur[DT_MAX_NDIM];
    memcpy(cur, m->shape, sizeof cur);
    memset(plan, 0, sizeof *plan);
    int first = -1;
    for (int md = 0; md < m->mesh->ndim; md++) {
        dt_placement p = m->pl[md];
        if (p.kind != DT_PLACEMENT_SHARD)
            continue;
        if (first < 0)
            first = md;
        int o = dim_map ? dim_map[p.dim] : leading_out_dim(m, out, p.dim, cur[p.dim]);
        cur[p.dim] = (cur[p.dim] + m->mesh->shape[md] - 1) / m->mesh->shape[md];
        if (o < 0 && numel == 0 && !dim_map) {
            /* Every block is empty: any placement describes the result. */
            out->pl[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
            continue;
        }
        if (o < 0 && (dim_map || out->ndim == 0)) {
            plan->row[md] = DT__VR_OP;
            return;
        }
        /* No leading-digit dim: a placeholder that the search below replaces. */
        out->pl[md] = (dt_placement){DT_PLACEMENT_SHARD, o < 0 ? 0 : o};
    }
    int budget = 4096;
    if (!blocks_match(m, out) && (dim_map || !search_placements(m, out, 0, &budget))) {
        plan->mismatch = 1;
        plan->row[first < 0 ? 0 : first] = DT__VR_OP;
        return;
    }
    for (int md = 0; md < m->mesh->ndim; md++) {
        int shard = out->pl[md].kind == DT_PLACEMENT_SHARD;
        plan->row[md] = shard ? DT__VR_KEEP : DT__VR_IDX;
        plan->od[md] = shard ? out->pl[md].dim : 0;
    }
}

/* The reshape of `a` to `out_shape` (sizes already resolved), placed by the
 * engine from the rows (and text) of the op. `dim_map`, when given, names
 * the result dim of each input dim (-1: removed), as squeeze and unsqueeze
 * know it; otherwise the block search decides. */
static dt_tensor *reshape_to(const char *op, dt_tensor *a, int ndim, const int64_t *out_shape,
                             const int *dim_map, const dt__ps_row *rows, const char *accepted) {
    const dt__meta *m = &a->v->meta;
    dt__meta out = *m;
    out.ndim = ndim;
    memcpy(out.shape, out_shape, sizeof(int64_t) * (size_t)ndim);
    reshape_plan plan;
    plan_reshape(m, &out, dim_map, &plan);
    dt__pctx c = {.nin = 1, .in = {m}, .out = &out, .fam = &plan};
    const dt__psig sig = {.partial = view_partial,
                          .accepted = accepted,
                          .rows = rows,
                          .shard_row_at = reshape_row_at,
                          .own_regions = 1}; /* each device reshapes its own block */
    int bad;
    if (dt__ps_apply(op, &sig, &c, 0, out.pl, &bad) != DT_OK) {
        if (plan.mismatch) {
            dt__error_append(
                " (the shards would not stay contiguous chunk-sized blocks of the result of shape [");
            for (int d = 0; d < ndim; d++)
                dt__error_append("%s%lld", d ? ", " : "", (long long)out_shape[d]);
            dt__error_append("])");
        }
        return NULL;
    }
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, NULL, &out, DT_V_RESHAPE, &n);
    return t ? dt__client_submit(t, n) : NULL;
}

static void format_shape(dt__strbuf *sb, int ndim, const int64_t *shape) {
    dt__sb_printf(sb, "[");
    for (int d = 0; d < ndim; d++)
        dt__sb_printf(sb, "%s%lld", d ? ", " : "", (long long)shape[d]);
    dt__sb_printf(sb, "]");
}

dt_tensor *dt_reshape(dt_tensor *a, int ndim, const int64_t *shape) {
    dt_clear_error();
    if (dt__view_check("reshape", a) != DT_OK)
        return NULL;
    if (ndim < 0 || ndim > DT_MAX_NDIM || (ndim > 0 && !shape)) {
        dt__error(DT_EINVAL, "reshape: expected at most %d sizes, got %d", DT_MAX_NDIM, ndim);
        return NULL;
    }
    const dt__meta *m = &a->v->meta;
    int64_t numel = dt__numel(m->ndim, m->shape), known = 1, out_shape[DT_MAX_NDIM];
    int infer = -1;
    for (int d = 0; d < ndim; d++) {
        out_shape[d] = shape[d];
        if (shape[d] == -1) {
            if (infer >= 0) {
                dt__error(DT_ESHAPE, "reshape: only one dimension can be inferred");
                return NULL;
            }
            infer = d;
        } else if (shape[d] < 0) {
            dt__error(DT_ESHAPE, "reshape: invalid shape dimension %lld", (long long)shape[d]);
            return NULL;
        } else {
            known *= shape[d];
        }
    }
    int ok = infer >= 0 ? known != 0 && numel % known == 0 : known == numel;
    if (ok && infer >= 0)
        out_shape[infer] = numel / known;
    if (!ok) {
        dt__strbuf sb;
        dt__sb_init(&sb);
        format_shape(&sb, ndim, shape);
        dt__error(DT_ESHAPE, "reshape: shape '%s' is invalid for input of size %lld", sb.buf,
                  (long long)numel);
        return NULL;
    }
    return reshape_to("reshape", a, ndim, out_shape, NULL, reshape_rows, DT__VIEW_TEXT(RESHAPE_ROWS));
}

dt_tensor *dt_squeeze(dt_tensor *a, int ndims, const int64_t *dims) {
    dt_clear_error();
    if (dt__view_check("squeeze", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    int remove[DT_MAX_NDIM] = {0};
    if (ndims < 0) {
        for (int d = 0; d < m->ndim; d++)
            remove[d] = m->shape[d] == 1;
    } else {
        if (ndims > 0 && !dims) {
            dt__error(DT_EINVAL, "squeeze: dims is NULL");
            return NULL;
        }
        for (int i = 0; i < ndims; i++) {
            int d;
            if (dt__view_wrap_dim("squeeze", dims[i], m->ndim, 1, &d) != DT_OK)
                return NULL;
            if (m->ndim > 0 && m->shape[d] == 1)
                remove[d] = 1;
        }
    }
    int map[DT_MAX_NDIM], nd = 0;
    int64_t shape[DT_MAX_NDIM];
    for (int d = 0; d < m->ndim; d++) {
        map[d] = remove[d] ? -1 : nd;
        if (!remove[d])
            shape[nd++] = m->shape[d];
    }
    return reshape_to("squeeze", a, nd, shape, map, squeeze_rows, DT__VIEW_TEXT(SQUEEZE_ROWS));
}

dt_tensor *dt_unsqueeze(dt_tensor *a, int64_t dim) {
    dt_clear_error();
    if (dt__view_check("unsqueeze", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    int d;
    if (m->ndim >= DT_MAX_NDIM) {
        dt__error(DT_EINVAL, "unsqueeze: the result would have more than %d dimensions", DT_MAX_NDIM);
        return NULL;
    }
    if (dt__view_wrap_dim("unsqueeze", dim, m->ndim + 1, 0, &d) != DT_OK)
        return NULL;
    int map[DT_MAX_NDIM];
    int64_t shape[DT_MAX_NDIM];
    for (int i = 0, o = 0; o <= m->ndim; o++) {
        if (o == d) {
            shape[o] = 1;
            continue;
        }
        map[i] = o;
        shape[o] = m->shape[i++];
    }
    return reshape_to("unsqueeze", a, m->ndim + 1, shape, map, unsqueeze_rows, DT__VIEW_TEXT(UNSQUEEZE_ROWS));
}

/* ---------------------------------------------------------------- permute */

static const dt__ps_row permute_rows[] = DT__PS_ROWS(DT__VIEW_PERMUTE_ROWS);
/* fam: the inverse permutation. */
static int permute_row(const dt__pctx *c, int j, int d, int *od) {
    (void)j;
    *od = ((const int *)c->fam)[d];
    return DT__VR_KEEP;
}

dt_tensor *dt_permute(dt_tensor *a, int ndim, const int64_t *dims) {
    dt_clear_error();
    if (dt__view_check("permute", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (ndim != m->ndim || (ndim > 0 && !dims)) {
        dt__error(
            DT_EOP,
            "permute: number of dimensions in the tensor input does not match the length of the desired "
            "ordering of dimensions i.e. input.dim() = %d is not equal to len(dims) = %d",
            m->ndim, ndim);
        return NULL;
    }
    int perm[DT_MAX_NDIM], inv[DT_MAX_NDIM], seen[DT_MAX_NDIM] = {0};
    for (int o = 0; o < ndim; o++) {
        if (dt__view_wrap_dim("permute", dims[o], ndim, 0, &perm[o]) != DT_OK)
            return NULL;
        if (seen[perm[o]]++) {
            dt__error(DT_EOP, "permute(): duplicate dims are not allowed.");
            return NULL;
        }
        inv[perm[o]] = o;
    }
    dt__meta out = *m;
    for (int o = 0; o < ndim; o++)
        out.shape[o] = m->shape[perm[o]];
    if (dt__view_place("permute", &m, 1, &out, permute_rows, permute_row, NULL, inv,
                       DT__VIEW_TEXT(DT__VIEW_PERMUTE_ROWS)) != DT_OK)
        return NULL;
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, NULL, &out, DT_V_PERMUTE, &n);
    if (!t)
        return NULL;
    if (n)
        for (int o = 0; o < ndim; o++)
            n->a.v_ints[o] = perm[o];
    return dt__client_submit(t, n);
}

/* ----------------------------------------------------------------- expand */

static const dt__ps_row expand_rows[] = DT__PS_ROWS(DT__VIEW_EXPAND_ROWS);
/* Dim d is result dim d + (new dims); a dim that grows cannot stay a shard. */
static int expand_row(const dt__pctx *c, int j, int d, int *od) {
    *od = d + c->out->ndim - c->in[j]->ndim;
    return c->out->shape[*od] == c->in[j]->shape[d] ? DT__VR_KEEP : DT__VR_OP;
}

dt_tensor *dt_expand(dt_tensor *a, int ndim, const int64_t *sizes) {
    dt_clear_error();
    if (dt__view_check("expand", a) != DT_OK)
        return NULL;
    const dt__meta *m = &a->v->meta;
    if (ndim < m->ndim || ndim > DT_MAX_NDIM || (ndim > 0 && !sizes)) {
        dt__error(
            DT_EOP,
            "expand: the number of sizes provided (%d) must be greater or equal to the number of dimensions "
            "in the tensor (%d)",
            ndim, m->ndim);
        return NULL;
    }
    dt__meta out = *m;
    out.ndim = ndim;
    int off = ndim - m->ndim;
    for (int o = 0; o < ndim; o++) {
        int64_t want = sizes[o];
        if (o < off) {
            if (want < 0) {
                dt__error(
                    DT_EOP,
                    "expand: the expanded size of the tensor (%lld) isn't allowed in a leading, non-existing "
                    "dimension %d",
                    (long long)want, o);
                return NULL;
            }
            out.shape[o] = want;
            continue;
        }
        int64_t have = m->shape[o - off];
        if (want == -1)
            want = have;
        if (want != have && have != 1) {
            dt__strbuf sb, sa;
            dt__sb_init(&sb);
            dt__sb_init(&sa);
            format_shape(&sb, ndim, sizes);
            format_shape(&sa, m->ndim, m->shape);
            dt__error(DT_EOP,
                      "expand: the expanded size of the tensor (%lld) must match the existing size (%lld) at "
                      "non-singleton dimension %d.  Target sizes: %s.  Tensor sizes: %s",
                      (long long)want, (long long)have, o, sb.buf, sa.buf);
            return NULL;
        }
        if (want < 0) {
            dt__error(DT_EOP, "expand: invalid size %lld at dimension %d", (long long)want, o);
            return NULL;
        }
        out.shape[o] = want;
    }
    if (dt__view_place("expand", &m, 1, &out, expand_rows, expand_row, NULL, NULL,
                       DT__VIEW_TEXT(DT__VIEW_EXPAND_ROWS)) != DT_OK)
        return NULL;
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, NULL, &out, DT_V_EXPAND, &n);
    return t ? dt__client_submit(t, n) : NULL;
}

/* ------------------------------------------------------------------ clone */

/* A node of kind `sub` whose result has a's meta (clone, contiguous). */
static dt_tensor *same_meta(const char *op, dt_tensor *a, int sub) {
    dt_clear_error();
    if (dt__view_check(op, a) != DT_OK)
        return NULL;
    dt__node *n;
    dt_tensor *t = dt__view_begin(a, NULL, &a->v->meta, sub, &n);
    return t ? dt__client_submit(t, n) : NULL;
}

dt_tensor *dt_clone(dt_tensor *a) { return same_meta("clone", a, DT_V_CLONE); }

dt_tensor *dt_contiguous(dt_tensor *a) { return same_meta("contiguous", a, DT_V_CONTIGUOUS); }

/* --------------------------------------------------------------- lowering */

/* A clone shares the blobs: values are immutable. */
static void lower_clone(dt__lower *L, dt__node *n) {
    (void)L;
    dt__tval *o = n->out;
    if (dt__lw_alloc_blobs(L, o) != DT_OK)
        return;
    for (int64_t i = 0; i < o->meta.mesh->ndev; i++)
        o->blobs[i] = dt__blob_retain(n->in[0]->blobs[i]);
}

dt_status dt__lower_view(dt__lower *L, dt__node *n) {
    switch (n->a.sub) {
    case DT_V_RESHAPE:
    case DT_V_PERMUTE:
    case DT_V_EXPAND:
    case DT_V_CONTIGUOUS:
        dt__vlower_local(L, n);
        break;
    case DT_V_INDEX:
        dt__vlower_index(L, n);
        break;
    case DT_V_INDEX_TENSOR:
        dt__vlower_index_tensor(L, n);
        break;
    case DT_V_SETITEM:
        dt__vlower_setitem(L, n);
        break;
    case DT_V_SETITEM_MASK:
        dt__vlower_setitem_mask(L, n);
        break;
    case DT_V_SETITEM_INDEX:
        dt__vlower_setitem_index(L, n);
        break;
    case DT_V_CAT:
        dt__vlower_cat(L, n);
        break;
    case DT_V_TRIL:
        dt__vlower_tril(L, n);
        break;
    case DT_V_FLIP:
        dt__vlower_flip(L, n);
        break;
    case DT_V_ROLL:
        dt__vlower_roll(L, n);
        break;
    case DT_V_REPEAT:
        dt__vlower_repeat(L, n);
        break;
    case DT_V_REPEAT_INTERLEAVE:
        dt__vlower_repeat_interleave(L, n);
        break;
    case DT_V_CLONE:
        lower_clone(L, n);
        break;
    /* Invariant: the client makes only the kinds above. */
    default:
        DT_ASSERT(!"unknown view kind");
    }
    return L->status;
}

/* ---------------------------------------------------------------- registry */

#define KEEP "R->R, P->P"
const dt_op_doc dt__docs_views[] = {
    {"view", "views", DT__VIEW_TEXT(RESHAPE_ROWS), 0},
    {"reshape", "views", DT__VIEW_TEXT(RESHAPE_ROWS), 0},
    {"flatten", "views", DT__VIEW_TEXT(RESHAPE_ROWS), 0},
    {"unflatten", "views", DT__VIEW_TEXT(RESHAPE_ROWS), 0},
    {"transpose", "views", DT__VIEW_TEXT(DT__VIEW_PERMUTE_ROWS) " (transpose is a permute)", 0},
    {"permute", "views", DT__VIEW_TEXT(DT__VIEW_PERMUTE_ROWS), 0},
    {"squeeze", "views", DT__VIEW_TEXT(SQUEEZE_ROWS), 0},
    {"unsqueeze", "views", DT__VIEW_TEXT(UNSQUEEZE_ROWS), 0},
    {"expand", "views", DT__VIEW_TEXT(DT__VIEW_EXPAND_ROWS), 0},
    {"repeat", "views", DT__VIEW_TEXT(DT__VIEW_REPEAT_ROWS), 0},
    {"repeat_interleave", "views",
     "int repeats: " DT__VIEW_TEXT(DT__VIEW_RI_ROWS) "; tensor repeats: " DT__VIEW_TEXT(
         DT__VIEW_RI_TENSOR_ROWS),
     0},
    {"contiguous", "views", "any (placements kept; each block laid out row-major)", 0},
    {"clone", "views", "any (placements kept; shares the immutable blocks)", 0},
    {"copy_", "views", "dst keeps its placements; src is redistributed to line up when needed", 1},
    {"narrow", "views", DT__VIEW_TEXT(DT__VIEW_INDEX_ROWS) " (a slice of dim: getitem's rows)", 0},
    {"__getitem__", "views",
     DT__VIEW_TEXT(DT__VIEW_INDEX_ROWS) "; tensor index: " DT__VIEW_INDEX_TENSOR_TEXT
                                        "; boolean masks synchronise",
     0},
    {"__setitem__", "views",
     DT__VIEW_SETITEM_TEXT "; tensor index (scalar value): " DT__VIEW_SETITEM_INDEX_TEXT
                           "; mask (scalar value): " DT__VIEW_SETITEM_MASK_TEXT,
     0},
    {"cat", "views", DT__VIEW_CAT_TEXT, 1},
    {"concat", "views", DT__VIEW_CAT_TEXT, 1},
    {"stack", "views", DT__VIEW_STACK_TEXT, 0},
    {"chunk", "views", DT__VIEW_TEXT(DT__VIEW_INDEX_ROWS) " (a slice of dim: getitem's rows)", 0},
    {"split", "views", DT__VIEW_TEXT(DT__VIEW_INDEX_ROWS) " (a slice of dim: getitem's rows)", 0},
    {"unbind", "views", DT__VIEW_TEXT(DT__VIEW_INDEX_ROWS) " (an integer index of dim: getitem's rows)", 0},
    {"tril", "views", KEEP ", S(d)->S(d) (any dim: the local diagonal is offset)", 0},
    {"triu", "views", KEEP ", S(d)->S(d) (any dim: the local diagonal is offset)", 0},
    {"flip", "views", DT__VIEW_TEXT(DT__VIEW_FLIP_ROWS), 0},
    {"roll", "views", DT__VIEW_TEXT(DT__VIEW_ROLL_ROWS), 0},
    {NULL, NULL, NULL, 0},
};

/* ------------------------------------------------------ segmented dims */

/* The views' seg rule (the VIEW row's seg_rule; core/records/seg.h): cat
 * and getitem set their output's descriptor themselves (views_join.c,
 * index.c); clone and contiguous keep it; permute and a reshape that keeps
 * the dim whole move it with the dim and its Shards. */
int dt__seg_rule_view(const dt__node *n, dt__meta *out) {
    if (n->a.sub == DT_V_CAT || (n->a.sub == DT_V_INDEX && n->a.v_nints > 0))
        return DT__SEG_OWN;
    if (n->n_in != 1 || !n->in[0]->meta.seg.n)
        return DT__SEG_REGULAR;
    const dt__meta *in = &n->in[0]->meta;
    dt__seg g = in->seg;
    if (n->a.sub == DT_V_CLONE || n->a.sub == DT_V_CONTIGUOUS) {
        out->seg = g;
        return DT__SEG_PASS;
    }
    if (n->a.sub == DT_V_PERMUTE) {
        for (int o = 0; o < out->ndim; o++)
            if (n->a.v_ints[o] == g.dim)
                g.dim = (int8_t)o, o = out->ndim;
    } else if (n->a.sub == DT_V_RESHAPE) {
        int o = dt__seg_reshape_dim(in, out, g.dim);
        if (o < 0)
            return DT__SEG_REGULAR;
        g.dim = (int8_t)o;
    } else {
        return DT__SEG_REGULAR;
    }
    out->seg = g;
    /* the op moved the Shards with the dim */
    return dt__seg_same_sharding(in, out) ? DT__SEG_PASS : DT__SEG_REGULAR;
}
