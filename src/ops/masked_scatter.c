/*
 * The views and shape family, part 4: masked_scatter (DT_OP_MASKED_SCATTER,
 * kernel DT_K_MASKED_SCATTER).
 *
 * torch.masked_scatter(a, mask, source) gives the k-th True position of the
 * broadcast mask, counted in row-major order, source.flatten()[k]. Which
 * source elements a block of the result takes therefore depends on how many
 * True elements precede the block: a data-dependent prefix. dtorch computes
 * it without communication by giving every device the whole mask (and the
 * whole source): each device ranks the True elements of the whole mask and
 * keeps those of its own block. So the mask must be Replicate, and the
 * source Replicate or Partial (every device holds a full-size part), while
 * the input may be Shard on any dim that does not broadcast, Replicate or
 * Partial. A sharded mask would need an exchange of per-device counts (an
 * all-gather of one number per device); that is left to the user's
 * redistribute() rather than done behind their back. Partial results are
 * exact: a device whose Partial part is not the input's (or the source's)
 * writes zeros in its place, as setitem does.
 *
 * On a one-device mesh (or with everything Replicate) the kernel is
 * at::masked_scatter itself, so results and failures are eager torch's.
 *
 * Threads: dt_masked_scatter on client threads; dt__lower_masked_scatter on
 * the controller.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/elementwise.h"
#include "ops/ops.h"
#include "ops/views_int.h"

#define R_ DT_PLACEMENT_REPLICATE
#define S_ DT_PLACEMENT_SHARD
#define P_ DT_PLACEMENT_PARTIAL

/* The placement rule (core/client/placement.h): only the input has a Shard row;
 * the mask is Replicate and the source Replicate or Partial (checked per
 * mesh dim before the rows); Partial input and source pass through. */
enum { ROW_INPUT };
#define ROWS(X) X(ROW_INPUT, "(S(d),R,R)->S(d) for a dim d of input that does not broadcast", SHARD)
#define DT__PS_SET_MSCATTER(X1, X2, X3) X3(P, R, R) X3(R, R, P) X3(P, R, P)
#define DT__PS_EMPTY_MSCATTER ""
#define ACCEPTS                                                                                              \
    DT__PS_ROWS_TEXT("(input, mask, source): (R,R,R)->R", ROWS, MSCATTER)                                    \
    " (the mask and source are read whole on every device)"
static const dt__ps_row rows[] = DT__PS_ROWS(ROWS);
static const uint32_t partial_sets[] = DT__PS_MASKS(MSCATTER);

/* Writes "[3, 4]" into sb. */
static void format_shape(dt__strbuf *sb, int nd, const int64_t *shape) {
    dt__sb_printf(sb, "[");
    for (int d = 0; d < nd; d++)
        dt__sb_printf(sb, "%s%lld", d ? ", " : "", (long long)shape[d]);
    dt__sb_printf(sb, "]");
}

/* torch's expand_outplace(mask, a): the broadcast shape into out. */
static dt_status broadcast(const dt__meta *mm, const dt__meta *ma, dt__meta *out) {
    int nd = mm->ndim > ma->ndim ? mm->ndim : ma->ndim;
    for (int d = 0; d < nd; d++) {
        int dm = d - (nd - mm->ndim), da = d - (nd - ma->ndim);
        int64_t sm = dm >= 0 ? mm->shape[dm] : 1, sa = da >= 0 ? ma->shape[da] : 1;
        if (sm != sa && sm != 1 && sa != 1)
            return dt__error(
                DT_ESHAPE,
                "masked_scatter: The size of tensor a (%lld) must match the size of tensor b (%lld) "
                "at non-singleton dimension %d",
                (long long)sm, (long long)sa, d);
        out->shape[d] = sm == 1 ? sa : sm;
    }
    out->ndim = nd;
    return DT_OK;
}

/* masked_scatter_'s expand_inplace(a, mask): the mask must expand to a. */
static dt_status expands_to(const dt__meta *mm, const dt__meta *ma) {
    dt__strbuf sb;
    dt__sb_init(&sb);
    if (mm->ndim > ma->ndim) {
        format_shape(&sb, mm->ndim, mm->shape);
        return dt__error(
            DT_EOP,
            "masked_scatter_: expand(mask %s, size=[...]): the number of sizes provided (%d) must be "
            "greater or equal to the number of dimensions in the tensor (%d)",
            sb.buf, ma->ndim, mm->ndim);
    }
    int off = ma->ndim - mm->ndim;
    for (int j = mm->ndim - 1; j >= 0; j--)
        if (mm->shape[j] != 1 && mm->shape[j] != ma->shape[j + off]) {
            dt__sb_printf(&sb,
                          "masked_scatter_: The expanded size of the tensor (%lld) must match the existing "
                          "size (%lld) at non-singleton dimension %d.  Target sizes: ",
                          (long long)ma->shape[j + off], (long long)mm->shape[j], j + off);
            format_shape(&sb, ma->ndim, ma->shape);
            dt__sb_printf(&sb, ".  Tensor sizes: ");
            format_shape(&sb, mm->ndim, mm->shape);
            return dt__error(DT_EOP, "%s", sb.buf);
        }
    return DT_OK;
}

/* A Shard of a dim of the input that does not broadcast is a block of the
 * result; the mask and source have no row. */
static int shard_row(const dt__pctx *c, int j, int d, int *od) {
    int off = c->out->ndim - c->in[0]->ndim;
    if (j != 0 || c->in[0]->shape[d] != c->out->shape[d + off])
        return -1;
    *od = d + off;
    return ROW_INPUT;
}

/* The mask first, then a sharded source, then a Partial source next to a
 * sharded input (a Partial cannot sit next to a Shard on one mesh dim); an
 * input sharded on a broadcast dim is named before the source. */
static int mesh_dim_check(const dt__pctx *c, int md) {
    dt_placement pa = c->in[0]->pl[md], pm = c->in[1]->pl[md], ps = c->in[2]->pl[md];
    int od;
    if (pm.kind != R_)
        return 1;
    if (ps.kind == S_)
        return 2;
    if (ps.kind == P_ && pa.kind == S_)
        return shard_row(c, 0, pa.dim, &od) < 0 ? 0 : 2;
    return -1;
}

/* The part of input `a` that broadcasts to the output region (os, ol). */
static void input_region(const dt__meta *a, const dt__meta *out, const int64_t *os, const int64_t *ol,
                         int64_t *s, int64_t *l) {
    int off = out->ndim - a->ndim;
    for (int j = 0; j < a->ndim; j++) {
        int d = j + off;
        if (a->shape[j] != out->shape[d]) {
            s[j] = 0;
            l[j] = a->shape[j];
        } else {
            s[j] = os[d];
            l[j] = ol[d];
        }
    }
}

/* The engine's needed region: the input's part of the output region, the
 * whole mask and source. */
static void needed(const dt__pctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                   int64_t *s, int64_t *l) {
    (void)coord;
    if (j == 0) {
        input_region(c->in[0], c->out, os, ol, s, l);
        return;
    }
    for (int d = 0; d < c->in[j]->ndim; d++) {
        s[d] = 0;
        l[d] = c->in[j]->shape[d];
    }
}

dt_tensor *dt_masked_scatter(dt_tensor *a, dt_tensor *mask, dt_tensor *source, int flags) {
    dt_clear_error();
    const char *op = flags & DT_EW_INPLACE ? "masked_scatter_" : "masked_scatter";
    if (dt__view_check_pair(op, a, mask) != DT_OK || dt__view_check_pair(op, a, source) != DT_OK)
        return NULL;
    const dt__meta *ma = &a->v->meta, *mm = &mask->v->meta, *ms = &source->v->meta;
    dt__meta out;
    memset(&out, 0, sizeof out);
    /* torch's order: the out-of-place form broadcasts first; the in-place
     * one checks the source dtype before expanding the mask. */
    int inplace = (flags & DT_EW_INPLACE) != 0;
    if (!inplace && broadcast(mm, ma, &out) != DT_OK)
        return NULL;
    if (ms->dtype != ma->dtype) {
        dt__error(DT_EOP, "%s: expected self and source to have same dtypes but got %s and %s", op,
                  dt__ew_torch_name(ma->dtype), dt__ew_torch_name(ms->dtype));
        return NULL;
    }
    if (inplace) {
        if (expands_to(mm, ma) != DT_OK)
            return NULL;
        out.ndim = ma->ndim;
        memcpy(out.shape, ma->shape, sizeof out.shape);
    }
    if (mm->dtype != DT_BOOL) {
        dt__error(DT_EOP, "%s only supports boolean masks, but got mask with dtype %s", "masked_scatter_",
                  dt__ew_torch_name(mm->dtype));
        return NULL;
    }
    out.dtype = ma->dtype;
    out.mesh = ma->mesh;
    const dt__meta *ins[3] = {ma, mm, ms};
    dt__pctx c = {.op = DT_OP_MASKED_SCATTER, .nin = 3, .in = {ma, mm, ms}, .out = &out};
    const dt__psig sig = {.needed = needed,
                          .partial = partial_sets,
                          .accepted = ACCEPTS,
                          .rows = rows,
                          .shard_row = shard_row,
                          .mesh_dim_check = mesh_dim_check};
    int bad;
    /* Nested shards: every device must hold the input part it reads. */
    if (dt__ps_apply(op, &sig, &c, 0, out.pl, &bad) != DT_OK) {
        if (bad >= 0) {
            dt__placement_error(op, ins, 3, 0, ACCEPTS, -1, NULL);
            dt__error_append(" (the shards of the input do not line up with the result's on every device)");
        }
        return NULL;
    }
    dt_tensor *t = dt__tensor_new(a->graph, &out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_MASKED_SCATTER);
    if (n) {
        n->n_in = 3;
        n->in[0] = a->v;
        n->in[1] = mask->v;
        n->in[2] = source->v;
        n->out = t->v;
    }
    return dt__client_submit(t, n);
}

/* 1 when the device at coord holds a part of the Partial result that is
 * not `m`'s: a mesh dim where the result is Partial, m is not, and the
 * coordinate is not 0. */
static int zero_part(const dt__meta *out, const dt__meta *m, const int64_t *coord) {
    for (int md = 0; md < out->mesh->ndim; md++)
        if (out->pl[md].kind == P_ && m->pl[md].kind != P_ && coord[md] != 0)
            return 1;
    return 0;
}

dt_status dt__lower_masked_scatter(dt__lower *L, dt__node *n) {
    dt__tval *a = n->in[0], *mask = n->in[1], *src = n->in[2];
    const dt__meta *out = &n->out->meta;
    int64_t s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_K_MASKED_SCATTER); dt__lw_each(L, &dev);) {
        const int64_t *os = dev.start, *ol = dev.len;
        input_region(&a->meta, out, os, ol, s, l);
        dt__kernel *k = dev.k;
        k->n_in = 3;
        k->in[0] = dt__lw_region(L, a, dev.idx, dev.coord, s, l);
        k->in[1] = dt__blob_retain(mask->blobs[dev.idx]);
        k->in[2] = dt__blob_retain(src->blobs[dev.idx]);
        dt__kattr *ka = &k->attr;
        ka->dtype = out->dtype;
        ka->ndim = out->ndim;
        ka->gndim = out->ndim;
        memcpy(ka->start, os, sizeof ka->start);
        memcpy(ka->shape, ol, sizeof ka->shape);
        memcpy(ka->gshape, out->shape, sizeof ka->gshape);
        int whole = 1;
        for (int d = 0; d < out->ndim; d++)
            whole &= os[d] == 0 && ol[d] == out->shape[d];
        int flags = 0;
        if (zero_part(out, &a->meta, dev.coord))
            flags |= DT_KMS_ZERO_INPUT;
        if (zero_part(out, &src->meta, dev.coord))
            flags |= DT_KMS_ZERO_SOURCE;
        if (!whole || flags)
            flags |= DT_KMS_REGION;
        ka->flags = flags;
        dt__lw_each_push(L, &dev);
    }
    return L->status;
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_masked_scatter[] = {
    {"masked_scatter", "views", ACCEPTS, 0},
    {NULL, NULL, NULL, 0},
};
