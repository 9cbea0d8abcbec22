/*
 * Sorting, scans and data-dependent shapes: cumsum, sort (and argsort),
 * topk, nonzero.
 *
 * Placements per mesh dim (documented in dtorch.h and the registry rows):
 *  - R->R everywhere; a Shard of a dim the op does not work along stays.
 *  - cumsum is linear: P->P (not when floats are summed into an integer
 *    dtype: each piece would be rounded on its own). A Shard of the scanned
 *    dim redistributes by itself: the devices along that mesh dim gather the
 *    dim (the redistribute planner's all-gather, nested shards included),
 *    each computes the cumsum of the whole dim on its part of the other dims,
 *    then keeps the slice of its own shard. The result keeps the input's
 *    placements and is bit-identical to the unsharded cumsum (one ATen call
 *    over the whole dim, which a prefix-of-totals scheme would not give for
 *    floats).
 *  - sort/argsort/topk: a Shard of the sorted dim is gathered the same way
 *    and the whole dim sorted on every device, so that mesh dim becomes
 *    Replicate (the indices are then global without any fixing up). Partial
 *    is a PlacementError: the order of a sum is not the sum of the orders.
 *  - nonzero synchronises: it reads the input's value, computes the indices
 *    on the calling thread and distributes them, all Replicate.
 * The placement engine (core/client/placement.h) decides the first three from the
 * Shard rows below, which also give the accepted text of errors and rows.
 *
 * Two-output ops (sort, topk) record two nodes, one per output, as
 * dt_reduce_with_indices does: kernels have one output each, and both nodes
 * run the same ATen call on the same data, so the values and the indices
 * come from the same (deterministic) sort.
 *
 * Node conventions (DT_OP_SORT_SCAN): in[0] the input; a.sub a DT_KS_* code;
 * a.flags DT_KS_* flags; a.sort_dim the normalised dim; a.sort_k topk's k.
 * The output meta holds the result dtype.
 *
 * Threads: dt_cumsum, dt_sort, dt_topk and dt_nonzero run on client threads
 * (dt_nonzero waits for a value); dt__lower_sort_scan on the controller.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/placement.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/ops.h"

static const char *const kind_names[] = {
    [DT_KS_SORT_VALUES] = "sort",  [DT_KS_SORT_INDICES] = "sort", [DT_KS_TOPK_VALUES] = "topk",
    [DT_KS_TOPK_INDICES] = "topk", [DT_KS_CUMSUM] = "cumsum",
};

/* The Shard rows (core/client/placement.h): a dim the op does not work along stays
 * sharded; the op's own dim is gathered (sort, topk: Replicate after) or
 * gathered and sliced back (cumsum). */
enum { ROW_OTHER = DT__PS_ROW_KEEP, ROW_ALONG = DT__PS_ROW_OWN };
#define SORT_ROWS(X)                                                                                         \
    DT__PS_ROWS2(X, "S(d)->S(d) for d != dim", "S(dim)->R (all-gather of dim, then the op)", GATHER)
#define CUMSUM_ROWS(X)                                                                                       \
    DT__PS_ROWS2(X, "S(d)->S(d) for d != dim",                                                               \
                 "S(dim)->S(dim) (all-gather of dim, cumsum, keep the own shard)", SHARD)
#define SORT_TEXT DT__PS_ROWS_TEXT("R->R", SORT_ROWS, NONE)
#define CUMSUM_TEXT DT__PS_ROWS_TEXT("R->R", CUMSUM_ROWS, P)
static const dt__ps_row sort_rows[] = DT__PS_ROWS(SORT_ROWS), cumsum_rows[] = DT__PS_ROWS(CUMSUM_ROWS);
static const uint32_t cumsum_partial[] = DT__PS_MASKS(P);

static int shard_row(const dt__pctx *c, int j, int d, int *od) {
    (void)j;
    *od = d;
    return d == c->a->sort_dim ? ROW_ALONG : ROW_OTHER;
}

/* A 0-d tensor takes dim 0 and -1, as in torch. */
static dt_status norm_dim(const char *name, const dt__meta *m, int64_t dim, int64_t *out) {
    int d;
    dt_status st = dt__wrap_dim(name, dim, m->ndim, &d);
    if (st == DT_OK)
        *out = d;
    return st;
}

/* The output placements of an op along `dim` (cumsum or a sort), from the
 * rows; a Partial is rejected (with `why`) unless `partial_ok`. */
static dt_status placements_along(const char *name, const dt__meta *m, int64_t dim, int cumsum,
                                  int partial_ok, const char *why, dt__meta *out) {
    dt__nattr a = {.sort_dim = dim};
    dt__pctx c = {.op = DT_OP_SORT_SCAN, .a = &a, .nin = 1, .in = {m}, .out = out};
    const dt__psig sig = {
        .partial = partial_ok ? cumsum_partial : NULL,
        .accepted = cumsum ? CUMSUM_TEXT : SORT_TEXT,
        .rows = cumsum ? cumsum_rows : sort_rows,
        .shard_row = shard_row,
        .own_regions = 1,
    };
    int bad;
    if (dt__ps_apply(name, &sig, &c, 0, out->pl, &bad) != DT_OK) {
        /* Every Shard has a row: only a Partial input is refused. */
        dt__error_append(" (%s)", why);
        return DT_EPLACEMENT;
    }
    return DT_OK;
}

static dt_tensor *submit(dt_tensor *a, const dt__meta *out, int kind, int flags, int64_t dim, int64_t k) {
    dt_tensor *t = dt__tensor_new(a->graph, out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_SORT_SCAN);
    if (n) {
        n->n_in = 1;
        n->in[0] = a->v;
        n->out = t->v;
        n->a.sub = kind;
        n->a.flags = flags;
        n->a.sort_dim = dim;
        n->a.sort_k = k;
    }
    return dt__client_submit(t, n);
}

/* ---------------------------------------------------------------- cumsum */

dt_tensor *dt_cumsum(dt_tensor *a, int64_t dim, int dtype) {
    dt_clear_error();
    if (!dt__tensor_ok(a)) {
        dt__error(DT_EINVAL, "cumsum: tensor argument is %s", dt__handle_bad(a));
        return NULL;
    }
    const dt__meta *m = &a->v->meta;
    if (dtype < -1 || dtype >= DT_DTYPE_COUNT) {
        dt__error(DT_ETYPE, "cumsum(): unknown dtype %d", dtype);
        return NULL;
    }
    int64_t d = 0;
    if (norm_dim("cumsum", m, dim, &d) != DT_OK)
        return NULL;
    dt__meta out = *m;
    /* torch: bool and integers accumulate in int64 unless dtype= says. */
    out.dtype = dtype >= 0 ? (dt_dtype)dtype : dt_dtype_is_floating(m->dtype) ? m->dtype : DT_INT64;
    int partial_ok = dt_dtype_is_floating(out.dtype) || !dt_dtype_is_floating(m->dtype);
    if (placements_along("cumsum", m, d, 1, partial_ok,
                         "a Partial float cannot be summed into an integer dtype piece by piece",
                         &out) != DT_OK)
        return NULL;
    return submit(a, &out, DT_KS_CUMSUM, dtype >= 0 ? DT_KS_DTYPE : 0, d, 0);
}

/* ------------------------------------------------------------ sort, topk */

/* Submits the wanted outputs of a two-output op; both are validated before
 * either is enqueued. */
static dt_status two_outputs(dt_tensor *a, const dt__meta *vm, int vkind, int ikind, int flags, int64_t dim,
                             int64_t k, dt_tensor **values, dt_tensor **indices) {
    dt__meta im = *vm;
    im.dtype = DT_INT64;
    dt_tensor *v = NULL, *i = NULL;
    if (values && !(v = submit(a, vm, vkind, flags, dim, k)))
        return dt_last_status();
    if (indices && !(i = submit(a, &im, ikind, flags, dim, k))) {
        dt_status st = dt_last_status();
        dt_tensor_release(v);
        return st;
    }
    if (values)
        *values = v;
    if (indices)
        *indices = i;
    return DT_OK;
}

static dt_status begin_two(const char *name, dt_tensor *a, dt_tensor **values, dt_tensor **indices) {
    dt_clear_error();
    if (values)
        *values = NULL;
    if (indices)
        *indices = NULL;
    if (!values && !indices)
        return dt__error(DT_EINVAL, "%s: both output pointers are NULL", name);
    if (!dt__tensor_ok(a))
        return dt__error(DT_EINVAL, "%s: tensor argument is %s", name, dt__handle_bad(a));
    return DT_OK;
}

dt_status dt_sort(dt_tensor *a, int64_t dim, int descending, int stable, dt_tensor **values,
                  dt_tensor **indices) {
    dt_status st = begin_two("sort", a, values, indices);
    if (st != DT_OK)
        return st;
    const dt__meta *m = &a->v->meta;
    int64_t d = 0;
    if (norm_dim("sort", m, dim, &d) != DT_OK)
        return dt_last_status();
    dt__meta out = *m;
    if (placements_along(values ? "sort" : "argsort", m, d, 0, 0,
                         "the order of a sum is not the sum of the orders", &out) != DT_OK)
        return DT_EPLACEMENT;
    int flags = (descending ? DT_KS_DESCENDING : 0) | (stable ? DT_KS_STABLE : 0);
    return two_outputs(a, &out, DT_KS_SORT_VALUES, DT_KS_SORT_INDICES, flags, d, 0, values, indices);
}

dt_status dt_topk(dt_tensor *a, int64_t k, int64_t dim, int largest, int sorted, dt_tensor **values,
                  dt_tensor **indices) {
    dt_status st = begin_two("topk", a, values, indices);
    if (st != DT_OK)
        return st;
    const dt__meta *m = &a->v->meta;
    int64_t d = 0;
    if (norm_dim("topk", m, dim, &d) != DT_OK)
        return dt_last_status();
    if (m->dtype == DT_BOOL && m->mesh->type == DT_DEVICE_CPU)
        return dt__error(DT_EOP, "topk(): topk does not support bool dtypes on CPU");
    int64_t size = m->ndim ? m->shape[d] : 1;
    if (k < 0 || k > size)
        return dt__error(DT_EOP, "topk(): selected index k out of range (k = %lld, dim %lld has size %lld)",
                         (long long)k, (long long)d, (long long)size);
    dt__meta out = *m;
    if (m->ndim)
        out.shape[d] = k;
    if (placements_along("topk", m, d, 0, 0, "the largest of a sum is not the sum of the largest", &out) !=
        DT_OK)
        return DT_EPLACEMENT;
    int flags = (largest ? DT_KS_LARGEST : 0) | (sorted ? DT_KS_SORTED : 0);
    return two_outputs(a, &out, DT_KS_TOPK_VALUES, DT_KS_TOPK_INDICES, flags, d, k, values, indices);
}

/* --------------------------------------------------------------- nonzero */

/* Whether element i of a row-major host buffer of `dtype` is nonzero. Floats
 * ignore the sign bit (-0.0 is zero; NaN is nonzero), as torch compares
 * with != 0. Typed loads keep this independent of byte order. */
static int element_nonzero(const unsigned char *buf, dt_dtype dtype, int64_t i) {
    size_t es = dt_dtype_size(dtype);
    const unsigned char *p = buf + (size_t)i * es;
    int floating = dt_dtype_is_floating(dtype);
    switch (es) {
    case 1:
        return p[0] != 0;
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return (floating ? v & 0x7fffu : v) != 0;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return (floating ? v & 0x7fffffffu : v) != 0;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return (floating ? v & 0x7fffffffffffffffull : v) != 0;
    }
    }
}

dt_tensor *dt_nonzero(dt_tensor *a) {
    dt_clear_error();
    if (!dt__tensor_ok(a)) {
        dt__error(DT_EINVAL, "nonzero: tensor argument is %s", dt__handle_bad(a));
        return NULL;
    }
    dt_future *f = dt_tensor_fetch(a);
    if (!f)
        return NULL;
    dt_tensor *t = dt_nonzero_read(a, f);
    dt_future_release(f);
    return t;
}

dt_tensor *dt_nonzero_read(dt_tensor *a, dt_future *value) {
    dt_clear_error();
    if (!dt__tensor_ok(a) || !dt__future_ok(value)) {
        dt__error(DT_EINVAL, "nonzero: %s argument is %s", dt__tensor_ok(a) ? "future" : "tensor",
                  dt__handle_bad(dt__tensor_ok(a) ? (const void *)value : (const void *)a));
        return NULL;
    }
    const dt__meta *m = &a->v->meta;
    int64_t numel = dt__numel(m->ndim, m->shape);
    size_t nbytes = (size_t)numel * dt_dtype_size(m->dtype);
    if (value->local >= 0 || value->dtype != m->dtype || value->ndim != m->ndim ||
        dt__numel(value->ndim, value->shape) != numel) {
        dt__error(DT_EINVAL, "nonzero: the future is not a whole read of the tensor");
        return NULL;
    }
    unsigned char *buf = dt__malloc(nbytes ? nbytes : 1);
    if (!buf) {
        dt__error(DT_ENOMEM, "nonzero: out of memory reading %zu bytes", nbytes);
        return NULL;
    }
    /* The only wait: the result's shape is the number of nonzero values. */
    if (dt_future_read(value, buf, nbytes) != DT_OK) {
        dt__free(buf);
        return NULL;
    }
    int64_t count = 0;
    for (int64_t i = 0; i < numel; i++)
        count += element_nonzero(buf, m->dtype, i);
    int64_t *idx = dt__malloc((size_t)(count * m->ndim) * sizeof *idx + 1);
    if (!idx) {
        dt__free(buf);
        dt__error(DT_ENOMEM, "nonzero: out of memory for %lld indices", (long long)count);
        return NULL;
    }
    /* Row-major order: a running multi-index advanced like an odometer. */
    int64_t pos[DT_MAX_NDIM] = {0}, w = 0;
    for (int64_t i = 0; i < numel; i++) {
        if (element_nonzero(buf, m->dtype, i))
            for (int d = 0; d < m->ndim; d++)
                idx[w++] = pos[d];
        for (int d = m->ndim - 1; d >= 0; d--) {
            if (++pos[d] < m->shape[d])
                break;
            pos[d] = 0;
        }
    }
    dt__free(buf);
    int64_t shape[2] = {count, m->ndim};
    dt_tensor *t = dt_tensor_from_buffer(a->graph, DT_INT64, 2, shape, idx,
                                         (size_t)(count * m->ndim) * sizeof *idx, m->mesh, NULL);
    dt__free(idx);
    return t;
}

/* ------------------------------------------------------------ lowering */

dt_status dt__lower_sort_scan(dt__lower *L, dt__node *n) {
    dt__tval *in = n->in[0], *o = n->out;
    const dt__meta *m = &in->meta;
    const dt_mesh *mesh = m->mesh;
    int kind = n->a.sub;
    int64_t dim = n->a.sort_dim;

    /* Gather the op's dim along every mesh dim that shards it, with the
     * redistribute planner (it undoes nested shards in the right order).
     * `whole` holds the gathered blobs; its meta only lives here. */
    dt__tval whole = {.meta = *m};
    int gather = 0;
    for (int md = 0; md < mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_SHARD && m->pl[md].dim == dim) {
            whole.meta.pl[md] = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
            gather = 1;
        }
    dt__tval *x = in;
    if (gather) {
        dt__node step;
        memset(&step, 0, sizeof step);
        step.op = n->op;
        step.n_in = 1;
        step.in[0] = in;
        step.out = &whole;
        if (dt__lower_redistribute(L, &step) != DT_OK)
            return L->status;
        x = &whole;
    }

    /* cumsum over a gathered dim computes on the gathered blocks, then each
     * device keeps its own shard: `res` describes the full-dim results. */
    int slice_back = gather && kind == DT_KS_CUMSUM;
    dt__tval res = {.meta = whole.meta};
    res.meta.dtype = o->meta.dtype;
    if (slice_back) {
        res.blobs = dt__calloc((size_t)mesh->ndev, sizeof *res.blobs);
        if (!res.blobs)
            dt__lw_fail(L, DT_ENOMEM, "out of memory (blob array)");
    }
    for (dt__lw_dev dev = DT__LW_EACH(o, DT_K_SORT); dt__lw_each(L, &dev);) {
        int64_t i = dev.idx;
        dt__kernel *k = dev.k;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(x->blobs[i]);
        k->opname = kind_names[kind];
        k->attr.sub = kind;
        k->attr.flags = n->a.flags;
        k->attr.dim = (int32_t)dim;
        k->attr.ints[0] = n->a.sort_k;
        k->attr.dtype = o->meta.dtype;
        if (!slice_back) {
            dt__lw_each_push(L, &dev);
            continue;
        }
        res.blobs[i] = dt__lw_push(L, mesh, i, k);
        o->blobs[i] = dt__lw_region(L, &res, i, dev.coord, dev.start, dev.len);
    }
    if (gather) {
        for (int64_t i = 0; i < mesh->ndev; i++) {
            dt__blob_release(whole.blobs[i]);
            if (res.blobs)
                dt__blob_release(res.blobs[i]);
        }
        dt__free(whole.blobs);
        dt__free(res.blobs);
    }
    return L->status;
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_sort_scan[] = {
    {"cumsum", "sort/scan", CUMSUM_TEXT " (not a float into an integer dtype)", 1},
    {"sort", "sort/scan", SORT_TEXT "; (values, indices)", 1},
    {"argsort", "sort/scan", SORT_TEXT, 1},
    {"topk", "sort/scan", SORT_TEXT "; (values, indices)", 1},
    {"nonzero", "data-dependent",
     "any -> R: synchronises (reads the value), computes the indices on the client, distributes them "
     "Replicate",
     1},
    {NULL, NULL, NULL, 0},
};
