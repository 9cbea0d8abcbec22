/*
 * Reductions: sum mean prod amax amin max min argmax argmin any all, with
 * dims, keepdim, torch's dtype rules and the (values, indices) form of
 * max/min.
 *
 * Placements per mesh dim: R->R; S(kept d)->S(d') (renumbered when dims are
 * dropped); P->P for sum and mean only (mean is linear too: each device
 * divides its piece by the same count). For a Shard of a reduced dim:
 *  - sum: each device sums its shard and the result is Partial;
 *  - mean: the same, divided by the GLOBAL count of reduced elements, so the
 *    Partial pieces add up to the global mean;
 *  - every other op redistributes by itself: each device reduces its shard
 *    with keepdim, the per-device results are all-gathered along that dim
 *    (one piece per rank; a rank whose shard is empty contributes an empty
 *    piece), and the gathered pieces are reduced again. The result is
 *    Replicate on that mesh dim. argmax/argmin (and the indices of max/min)
 *    gather the local best values and their GLOBAL indices and keep, per
 *    position, the smallest index among the best values - torch's first
 *    occurrence - whatever the order of the pieces.
 *
 * The placement engine (core/client/placement.h) decides these from the Shard rows
 * below, which also give the accepted text of errors and registry rows.
 *
 * Node conventions (DT_OP_REDUCE, sum included): in[0] the
 * input; a.sub = dt_reduce_op | DT_KR_* << 8 (PLAIN, or INDICES for the
 * indices of max/min); a.dims_mask the reduced dims (all of them for the
 * no-dim form; bit 0 for a dim given on a 0-d tensor); a.flags DT_KF_ALL
 * for the no-dim form, DT_KF_KEEPDIM. The output meta holds the dtype.
 *
 * Threads: dt_reduce, dt_sum and dt_reduce_with_indices run on client
 * threads; dt__lower_reduce on the graph's controller.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/placement.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "ops/ops.h"

static const char *const reduce_names[DT_REDUCE_COUNT] = {
#define DT_REDUCE_OP(E, name) [DT_REDUCE_##E] = name,
#include "dtorch/dtorch_ops.def"
};

/* The Shard rows (core/client/placement.h): a kept dim stays sharded (renumbered
 * when dims are dropped), a reduced one becomes a partial sum (sum, mean)
 * or is gathered by the op (every other reduction). */
enum { ROW_KEPT = DT__PS_ROW_KEEP, ROW_REDUCED = DT__PS_ROW_OWN };
#define LINEAR_ROWS(X) DT__PS_ROWS2(X, "S(kept d)->S(d')", "S(reduced d)->P", PARTIAL)
#define GATHER_ROWS(X)                                                                                       \
    DT__PS_ROWS2(X, "S(kept d)->S(d')", "S(reduced d)->R (local reduce, all-gather, reduce)", GATHER)
#define LINEAR_TEXT DT__PS_ROWS_TEXT("R->R", LINEAR_ROWS, P)
#define GATHER_TEXT DT__PS_ROWS_TEXT("R->R", GATHER_ROWS, NONE)
static const dt__ps_row linear_rows[] = DT__PS_ROWS(LINEAR_ROWS), gather_rows[] = DT__PS_ROWS(GATHER_ROWS);
static const uint32_t linear_partial[] = DT__PS_MASKS(P);

/* The row of a Shard(d): reduced (a.dims_mask) or kept, then output dim d
 * less the dropped dims before it. */
static int shard_row(const dt__pctx *c, int j, int d, int *od) {
    (void)j;
    uint64_t mask = c->a->dims_mask;
    if (mask & (1ull << d))
        return ROW_REDUCED;
    int keep = (c->a->flags & DT_KF_KEEPDIM) != 0, o = d;
    for (int e = 0; e < d && !keep; e++)
        o -= (mask >> e) & 1;
    *od = o;
    return ROW_KEPT;
}

static int is_linear(int op) { return op == DT_REDUCE_SUM || op == DT_REDUCE_MEAN; }
static int is_arg(int op) { return op == DT_REDUCE_ARGMAX || op == DT_REDUCE_ARGMIN; }
/* Ops that take one dim or none (torch has no dim-list overload). */
static int one_dim_only(int op) {
    return op == DT_REDUCE_PROD || op == DT_REDUCE_MAX || op == DT_REDUCE_MIN || is_arg(op);
}
/* Ops without an identity: an empty reduced dim is an error in torch. */
static int needs_elements(int op) { return op >= DT_REDUCE_AMAX && op <= DT_REDUCE_ARGMIN; }

/* torch's scalar type names, for messages that copy torch's. */
static const char *torch_type_name(dt_dtype d) {
    static const char *const names[DT_DTYPE_COUNT] = {"Bool", "Byte", "Char",     "Short", "Int",
                                                      "Long", "Half", "BFloat16", "Float", "Double"};
    return (unsigned)d < DT_DTYPE_COUNT ? names[d] : "invalid";
}

/* The reduced dims (*mask) from the op's dims argument, and *nodim: whether
 * it is torch's no-dim form (ndims < 0, or no dims for an op that takes a
 * list). Ops without an identity refuse empty reductions, as torch does. */
static dt_status reduced_dims(int op, int mode, const dt__meta *m, int ndims, const int64_t *dims,
                              int keepdim, uint64_t *mask, int *nodim) {
    const char *name = reduce_names[op];
    int nd = ndims < 0 || (ndims == 0 && !one_dim_only(op));
    *mask = 0;
    *nodim = nd;
    if (nd) {
        if (op == DT_REDUCE_MAX || op == DT_REDUCE_MIN) {
            if (keepdim)
                return dt__error(DT_ETYPE, "%s(): keepdim needs a dim", name);
            if (mode == DT_KR_INDICES)
                return dt__error(DT_ETYPE, "%s(): the indices form needs a dim", name);
        }
        for (int d = 0; d < m->ndim; d++)
            *mask |= 1ull << d;
    } else {
        if (one_dim_only(op) && ndims != 1)
            return dt__error(DT_ETYPE, "%s(): argument 'dim' must be a single int, got %d dims", name, ndims);
        if (!dims)
            return dt__error(DT_EINVAL, "%s(): dims is NULL", name);
        for (int i = 0; i < ndims; i++) {
            int d; /* a 0-d tensor accepts dim 0 and -1 */
            dt_status st = dt__wrap_dim(name, dims[i], m->ndim, &d);
            if (st != DT_OK)
                return st;
            if (*mask & (1ull << d))
                return dt__error(DT_EOP, "%s(): dim %lld appears multiple times in the list of dims", name,
                                 (long long)d);
            *mask |= 1ull << d;
        }
    }
    if (needs_elements(op)) {
        /* torch: IndexError for argmax/argmin, RuntimeError for the others. */
        if (nd && dt__numel(m->ndim, m->shape) == 0)
            return dt__error(is_arg(op) ? DT_EINDEX : DT_EOP,
                             "%s(): Expected reduction dim to be specified for input.numel() == 0.%s", name,
                             is_arg(op) ? "" : " Specify the reduction dim with the 'dim' argument.");
        for (int d = 0; d < m->ndim; d++)
            if ((*mask & (1ull << d)) && m->shape[d] == 0)
                return dt__error(DT_EINDEX, "%s(): Expected reduction dim %d to have non-zero size.", name,
                                 d);
    }
    return DT_OK;
}

/* The result dtype (*od) from the input's and the dtype argument (-1: none). */
static dt_status result_dtype(int op, int mode, const dt__meta *m, int dtype, dt_dtype *od) {
    const char *name = reduce_names[op];
    if (dtype >= DT_DTYPE_COUNT || dtype < -1)
        return dt__error(DT_EINVAL, "%s(): unknown dtype %d", name, dtype);
    if (dtype >= 0 && op != DT_REDUCE_SUM && op != DT_REDUCE_MEAN && op != DT_REDUCE_PROD)
        return dt__error(DT_ETYPE, "%s(): got an unexpected keyword argument 'dtype'", name);
    switch (op) {
    case DT_REDUCE_SUM:
    case DT_REDUCE_PROD:
        *od = dtype >= 0 ? (dt_dtype)dtype : dt_dtype_is_floating(m->dtype) ? m->dtype : DT_INT64;
        break;
    case DT_REDUCE_MEAN:
        if (dtype >= 0 && !dt_dtype_is_floating((dt_dtype)dtype))
            return dt__error(
                DT_EOP,
                "mean(): could not infer output dtype. Optional dtype must be either a floating point "
                "or complex dtype. Got: %s",
                torch_type_name((dt_dtype)dtype));
        if (dtype < 0 && !dt_dtype_is_floating(m->dtype))
            return dt__error(
                DT_EOP,
                "mean(): could not infer output dtype. Input dtype must be either a floating point or "
                "complex dtype. Got: %s",
                torch_type_name(m->dtype));
        *od = dtype >= 0 ? (dt_dtype)dtype : m->dtype;
        break;
    case DT_REDUCE_ARGMAX:
    case DT_REDUCE_ARGMIN:
        if (m->dtype == DT_BOOL)
            return dt__error(DT_EOP, "%s(): does not support bool input", name);
        *od = DT_INT64;
        break;
    case DT_REDUCE_ANY:
    case DT_REDUCE_ALL:
        *od = m->dtype == DT_UINT8 ? DT_UINT8 : DT_BOOL;
        break;
    default:
        *od = mode == DT_KR_INDICES ? DT_INT64 : m->dtype;
    }
    return DT_OK;
}

/* The output's shape (the reduced dims dropped, or 1 with keepdim) and its
 * placements, from the Shard rows. */
static dt_status place(int op, const dt__meta *m, dt_dtype od, uint64_t mask, int keepdim, dt__meta *out) {
    memset(out, 0, sizeof *out);
    out->mesh = m->mesh;
    out->dtype = od;
    for (int d = 0; d < m->ndim; d++) {
        if (!(mask & (1ull << d)))
            out->shape[out->ndim++] = m->shape[d];
        else if (keepdim)
            out->shape[out->ndim++] = 1;
    }
    /* A Partial float summed into an integer would truncate each piece. */
    int partial_ok = is_linear(op) && (dt_dtype_is_floating(od) || !dt_dtype_is_floating(m->dtype));
    dt__nattr a = {.dims_mask = mask, .flags = keepdim ? DT_KF_KEEPDIM : 0};
    dt__pctx c = {.op = DT_OP_REDUCE, .a = &a, .nin = 1, .in = {m}, .out = out};
    const dt__psig sig = {
        .partial = partial_ok ? linear_partial : NULL,
        .accepted = is_linear(op) ? LINEAR_TEXT : GATHER_TEXT,
        .rows = is_linear(op) ? linear_rows : gather_rows,
        .shard_row = shard_row,
        .own_regions = 1,
    };
    int bad;
    if (dt__ps_apply(reduce_names[op], &sig, &c, 0, out->pl, &bad) != DT_OK) {
        /* Every Shard has a row: only a Partial input is refused. */
        if (is_linear(op))
            dt__error_append(" (a Partial float cannot be reduced into an integer dtype piece by piece)");
        return DT_EPLACEMENT;
    }
    return DT_OK;
}

/* Validates the op's arguments and fills the output meta. *mask gets the
 * reduced dims, *nodim whether it is torch's no-dim form. */
static dt_status infer(int op, int mode, const dt__meta *m, int ndims, const int64_t *dims, int keepdim,
                       int dtype, dt__meta *out, uint64_t *mask, int *nodim) {
    dt_dtype od = m->dtype;
    dt_status st = reduced_dims(op, mode, m, ndims, dims, keepdim, mask, nodim);
    if (st == DT_OK)
        st = result_dtype(op, mode, m, dtype, &od);
    return st == DT_OK ? place(op, m, od, *mask, keepdim, out) : st;
}

static dt_tensor *submit(int op, int mode, dt_tensor *a, const dt__meta *out, uint64_t mask, int nodim,
                         int keepdim) {
    dt_tensor *t = dt__tensor_new(a->graph, out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_REDUCE);
    if (n) {
        n->n_in = 1;
        n->in[0] = a->v;
        n->out = t->v;
        n->a.sub = op | mode << 8;
        n->a.dims_mask = mask;
        n->a.flags = (keepdim ? DT_KF_KEEPDIM : 0) | (nodim ? DT_KF_ALL : 0);
    }
    return dt__client_submit(t, n);
}

static dt_tensor *reduce_op(int op, int mode, dt_tensor *a, int ndims, const int64_t *dims, int keepdim,
                            int dtype) {
    dt_clear_error();
    if ((unsigned)op >= DT_REDUCE_COUNT) {
        dt__error(DT_EINVAL, "reduce: unknown op %d", op);
        return NULL;
    }
    if (!dt__tensor_ok(a)) {
        dt__error(DT_EINVAL, "%s: tensor argument is %s", reduce_names[op], dt__handle_bad(a));
        return NULL;
    }
    dt__meta out;
    uint64_t mask;
    int nodim;
    if (infer(op, mode, &a->v->meta, ndims, dims, keepdim, dtype, &out, &mask, &nodim) != DT_OK)
        return NULL;
    return submit(op, mode, a, &out, mask, nodim, keepdim);
}

dt_tensor *dt_reduce(dt_reduce_op op, dt_tensor *a, int ndims, const int64_t *dims, int keepdim, int dtype) {
    return reduce_op((int)op, DT_KR_PLAIN, a, ndims, dims, keepdim, dtype);
}

dt_tensor *dt_sum(dt_tensor *a, int ndims, const int64_t *dims, int keepdim) {
    return reduce_op(DT_REDUCE_SUM, DT_KR_PLAIN, a, ndims, dims, keepdim, -1);
}

dt_status dt_reduce_with_indices(dt_reduce_op op, dt_tensor *a, int64_t dim, int keepdim, dt_tensor **values,
                                 dt_tensor **indices) {
    dt_clear_error();
    if (!values || !indices)
        return dt__error(DT_EINVAL, "max/min: NULL output pointer");
    *values = *indices = NULL;
    if (op != DT_REDUCE_MAX && op != DT_REDUCE_MIN)
        return dt__error(DT_EINVAL, "reduce_with_indices: op must be DT_REDUCE_MAX or DT_REDUCE_MIN");
    if (!dt__tensor_ok(a))
        return dt__error(DT_EINVAL, "%s: tensor argument is %s", reduce_names[op], dt__handle_bad(a));
    /* Validate both outputs before enqueuing either. */
    dt__meta vm, im;
    uint64_t mask;
    int nodim;
    if (infer(op, DT_KR_PLAIN, &a->v->meta, 1, &dim, keepdim, -1, &vm, &mask, &nodim) != DT_OK ||
        infer(op, DT_KR_INDICES, &a->v->meta, 1, &dim, keepdim, -1, &im, &mask, &nodim) != DT_OK)
        return dt_last_status();
    dt_tensor *v = submit(op, DT_KR_PLAIN, a, &vm, mask, 0, keepdim);
    if (!v)
        return dt_last_status();
    dt_tensor *i = submit(op, DT_KR_INDICES, a, &im, mask, 0, keepdim);
    if (!i) {
        dt_status st = dt_last_status();
        dt_tensor_release(v);
        return st;
    }
    *values = v;
    *indices = i;
    return DT_OK;
}

/* ------------------------------------------------------------ lowering */

/* All-gathers each device's blob along tensor dim `dim` within every group of
 * devices that differ only in mesh dim `md`. blobs[] (one per device) is
 * replaced by the gathered blobs; the old references move into the kernels.
 * Every collective is queued on all of its ranks before the next one, which
 * keeps the streams' orders consistent (core/controller/lower_comm.c). */
static dt_status allgather(dt__lower *L, const dt_mesh *mesh, int md, int dim, int ndim, dt_dtype dtype,
                           dt__blob **blobs, int64_t (*shapes)[DT_MAX_NDIM], const char *opname) {
    int64_t size = mesh->shape[md], stride = mesh->strides[md];
    int64_t coord[DT_MAX_MESH_NDIM];
    for (int64_t base = 0; base < mesh->ndev; base++) {
        dt__mesh_coord(mesh, base, coord);
        if (coord[md] != 0)
            continue;
        dt__coll *c = dt__coll_new(mesh->type, DT_COLL_ALLGATHER, (int)size, ndim, dtype);
        if (c) {
            c->dim_a = dim;
            /* Each rank's piece shape (read by explain, core/records/trace.c). */
            for (int64_t r = 0; r < size; r++)
                memcpy(c->shapes[r], shapes[base + r * stride], sizeof c->shapes[r]);
        }
        if (dt__lw_collective(L, mesh, DT_STREAM_COMPUTE, c, base, stride, blobs, blobs, dtype, opname) !=
            DT_OK)
            return L->status;
    }
    return DT_OK;
}

/* A DT_K_REDUCE kernel on one input. */
static dt__kernel *reduce_kernel(dt__lower *L, int op, int mode, dt__blob *in, dt_dtype dtype, uint64_t mask,
                                 int flags) {
    dt__kernel *k = dt__lw_kernel(L, DT_K_REDUCE);
    if (!k) {
        dt__blob_release(in);
        return NULL;
    }
    k->n_in = 1;
    k->in[0] = in;
    k->opname = reduce_names[op];
    k->attr.sub = op | mode << 8;
    k->attr.dtype = dtype;
    k->attr.dims_mask = mask;
    k->attr.flags = flags;
    return k;
}

/* The per-device kernel when no communication is needed: the torch op on the
 * local piece (for mean over a sharded dim: the local sum over the global
 * count). */
static void lower_local(dt__lower *L, dt__node *n, int op, int mode, int sharded_reduce) {
    dt__tval *in = n->in[0], *o = n->out;
    const dt__meta *m = &in->meta;
    const dt_mesh *mesh = o->meta.mesh;
    /* The kernel is the same on every device. */
    dt__kattr a = {
        .sub = op | mode << 8, .dtype = o->meta.dtype, .dims_mask = n->a.dims_mask, .flags = n->a.flags};
    if (op == DT_REDUCE_SUM) {
        /* The no-dim form keeps nothing; with keepdim it is every dim
         * listed. A 0-d sum with or without dim is the value itself. */
        int all = m->ndim == 0 || ((a.flags & DT_KF_ALL) && !(a.flags & DT_KF_KEEPDIM));
        a.sub = op | DT_KR_PLAIN << 8;
        a.dims_mask = all ? 0 : a.dims_mask;
        a.flags = all ? DT_KF_ALL : a.flags & DT_KF_KEEPDIM;
    } else if (op == DT_REDUCE_MEAN && sharded_reduce) {
        a.sub = op | DT_KR_SUM_DIV << 8;
        a.flags &= DT_KF_KEEPDIM;
        a.f[0] = 1;
        for (int d = 0; d < m->ndim; d++)
            if (a.dims_mask & (1ull << d))
                a.f[0] *= (double)m->shape[d];
    }
    /* Each device reduces its own block: one shared record (lower_bcast.c),
     * whose output is a fresh value's (its blobs one group, made there). */
    if (dt__lw_bcast(L, o, DT_K_REDUCE, &a, reduce_names[op], n->in, 1, 1) ||
        dt__lw_alloc_blobs(L, o) != DT_OK)
        return;
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__kernel *k = reduce_kernel(L, op, 0, dt__blob_retain(in->blobs[i]), a.dtype, 0, 0);
        if (!k)
            return;
        k->attr = a;
        o->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
}

/* A reduction over sharded dims without an additive form, between its
 * steps (lower_gathered). */
typedef struct gathered {
    dt__lower *L;
    const dt__node *n;
    int op;                         /* the reduction asked for */
    int arg;                        /* 1 when it gives indices: values and indices are gathered */
    int best;                       /* ARGMAX or ARGMIN: which indices */
    int vop;                        /* the reduction of the gathered values */
    dt_dtype vdt;                   /* their dtype */
    dt__blob **vals, **idxs;        /* per device: its pieces so far (owned) */
    int64_t (*shapes)[DT_MAX_NDIM]; /* per device: its piece's shape */
} gathered;

/* Each device's piece: its block reduced with keepdim (values, and for an
 * index result global indices too), or an empty piece where the block has
 * no elements along a reduced dim (it keeps the gather's shapes consistent
 * and adds nothing). Walks the input's blocks, two kernels on a device. */
static void local_pieces(gathered *G) {
    dt__tval *in = G->n->in[0];
    const dt__meta *m = &in->meta;
    uint64_t mask = G->n->a.dims_mask;
    for (dt__lw_dev dev = DT__LW_EACH(in, DT__LW_NO_KERNEL); dt__lw_each(G->L, &dev);) {
        int64_t i = dev.idx, *ls = dev.start, *ll = dev.len;
        int empty = 0;
        int64_t pshape[DT_MAX_NDIM];
        for (int d = 0; d < m->ndim; d++) {
            pshape[d] = ll[d];
            if (mask & (1ull << d)) {
                empty |= ll[d] == 0;
                pshape[d] = ll[d] ? 1 : 0;
            }
        }
        memcpy(G->shapes[i], pshape, sizeof G->shapes[i]);
        for (int which = 0; which < 1 + G->arg; which++) {
            dt__kernel *k;
            if (empty) {
                k = dt__lw_kernel(G->L, DT_K_FULL);
                if (!k)
                    return;
                k->attr.dtype = which ? DT_INT64 : G->vdt;
                k->attr.ndim = m->ndim;
                memcpy(k->attr.shape, pshape, sizeof pshape);
                k->attr.scalar = dt_scalar_int(0);
                k->opname = reduce_names[G->op];
            } else if (!which) {
                k = reduce_kernel(G->L, G->vop, DT_KR_PLAIN, dt__blob_retain(in->blobs[i]), G->vdt, mask,
                                  DT_KF_KEEPDIM);
            } else {
                /* Global indices; the no-dim form gives the flat index. */
                k = reduce_kernel(G->L, G->best, DT_KR_GLOBAL_INDEX, dt__blob_retain(in->blobs[i]), DT_INT64,
                                  mask, DT_KF_KEEPDIM | (G->n->a.flags & DT_KF_ALL));
                if (!k)
                    return;
                k->attr.ndim = m->ndim;
                k->attr.gndim = m->ndim;
                memcpy(k->attr.start, ls, sizeof dev.start);
                memcpy(k->attr.gshape, m->shape, sizeof m->shape);
            }
            (which ? G->idxs : G->vals)[i] = dt__lw_push(G->L, m->mesh, i, k);
        }
    }
}

/* All-gathers the pieces along every mesh dim of gmask, innermost first;
 * after each, a piece's shape along the gathered dim is its group's sum. */
static dt_status gather_pieces(gathered *G, uint32_t gmask) {
    const dt__meta *m = &G->n->in[0]->meta;
    const dt_mesh *mesh = m->mesh;
    const char *name = reduce_names[G->op];
    for (int md = mesh->ndim - 1; md >= 0; md--) {
        if (!(gmask & (1u << md)))
            continue;
        int d = m->pl[md].dim;
        if (allgather(G->L, mesh, md, d, m->ndim, G->vdt, G->vals, G->shapes, name) != DT_OK ||
            (G->arg && allgather(G->L, mesh, md, d, m->ndim, DT_INT64, G->idxs, G->shapes, name) != DT_OK))
            return G->L->status;
        /* The gathered pieces: dim d summed over each group along md. */
        int64_t coord[DT_MAX_MESH_NDIM], size = mesh->shape[md], stride = mesh->strides[md];
        for (int64_t base = 0; base < mesh->ndev; base++) {
            dt__mesh_coord(mesh, base, coord);
            if (coord[md] != 0)
                continue;
            int64_t sum = 0;
            for (int64_t r = 0; r < size; r++)
                sum += G->shapes[base + r * stride][d];
            for (int64_t r = 0; r < size; r++)
                G->shapes[base + r * stride][d] = sum;
        }
    }
    return DT_OK;
}

/* Each device's result: its gathered pieces reduced again (the values, or
 * the best values' smallest global indices). The references in vals and
 * idxs move into the kernels; a device's kernel takes them over whole, so
 * the loop makes its own. */
static void combine_pieces(gathered *G) {
    dt__tval *o = G->n->out;
    uint64_t mask = G->n->a.dims_mask;
    int flags = G->n->a.flags;
    for (dt__lw_dev dev = DT__LW_EACH(o, DT__LW_NO_KERNEL); dt__lw_each(G->L, &dev);) {
        int64_t i = dev.idx;
        if (G->arg) {
            dev.k = reduce_kernel(G->L, G->best, DT_KR_COMBINE, G->vals[i], DT_INT64, mask, flags);
            G->vals[i] = NULL;
            if (!dev.k)
                return;
            dev.k->n_in = 2;
            dev.k->in[1] = G->idxs[i];
            G->idxs[i] = NULL;
        } else {
            dev.k = reduce_kernel(G->L, G->vop, DT_KR_PLAIN, G->vals[i], o->meta.dtype, mask, flags);
            G->vals[i] = NULL;
            if (!dev.k)
                return;
        }
        dev.k->opname = reduce_names[G->op];
        dt__lw_each_push(G->L, &dev);
    }
}

/* Reduction over sharded dims without an additive form: local reduce with
 * keepdim, all-gather along every mesh dim that shards a reduced dim
 * (innermost first), reduce the gathered pieces. */
static void lower_gathered(dt__lower *L, dt__node *n, int op, int mode, uint32_t gmask) {
    const dt__meta *m = &n->in[0]->meta;
    int64_t ndev = m->mesh->ndev;
    gathered G = {.L = L, .n = n, .op = op, .arg = is_arg(op) || mode == DT_KR_INDICES};
    G.best = op == DT_REDUCE_ARGMAX || op == DT_REDUCE_MAX ? DT_REDUCE_ARGMAX : DT_REDUCE_ARGMIN;
    /* max/min values over gathered pieces are amax/amin of them. */
    G.vop = G.arg                 ? (G.best == DT_REDUCE_ARGMAX ? DT_REDUCE_AMAX : DT_REDUCE_AMIN)
            : op == DT_REDUCE_MAX ? DT_REDUCE_AMAX
            : op == DT_REDUCE_MIN ? DT_REDUCE_AMIN
                                  : op;
    G.vdt = G.arg ? m->dtype : n->out->meta.dtype;
    G.vals = dt__calloc((size_t)ndev, sizeof *G.vals);
    G.idxs = dt__calloc((size_t)ndev, sizeof *G.idxs);
    G.shapes = dt__calloc((size_t)ndev, sizeof *G.shapes);
    if (!G.vals || !G.idxs || !G.shapes)
        dt__lw_fail(L, DT_ENOMEM, "out of memory (reduction)");
    else
        local_pieces(&G);
    if (L->status == DT_OK && gather_pieces(&G, gmask) == DT_OK)
        combine_pieces(&G);
    /* What a failure left behind. */
    for (int64_t i = 0; i < ndev; i++) {
        if (G.vals)
            dt__blob_release(G.vals[i]);
        if (G.idxs)
            dt__blob_release(G.idxs[i]);
    }
    dt__free(G.vals);
    dt__free(G.idxs);
    dt__free(G.shapes);
}

dt_status dt__lower_reduce(dt__lower *L, dt__node *n) {
    int op = n->a.sub & 0xff;
    int mode = n->a.sub >> 8;
    const dt__meta *m = &n->in[0]->meta;
    uint32_t gmask = 0;
    for (int md = 0; md < m->mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_SHARD && (n->a.dims_mask & (1ull << m->pl[md].dim)))
            gmask |= 1u << md;
    if (is_linear(op) || !gmask)
        lower_local(L, n, op, mode, gmask != 0); /* makes the blob array where it lowers per device */
    else if (dt__lw_alloc_blobs(L, n->out) == DT_OK)
        lower_gathered(L, n, op, mode, gmask);
    return L->status;
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_reduce[] = {
    {"sum", "reduction", LINEAR_TEXT, 0},
    {"mean", "reduction", LINEAR_TEXT " (mean: local sum / global count)", 0},
    {"prod", "reduction", GATHER_TEXT, 1},
    {"amax", "reduction", GATHER_TEXT, 1},
    {"amin", "reduction", GATHER_TEXT, 1},
    {"max", "reduction", GATHER_TEXT "; max(dim) gives (values, indices)", 1},
    {"min", "reduction", GATHER_TEXT "; min(dim) gives (values, indices)", 1},
    {"argmax", "reduction", GATHER_TEXT "; gathers values and global indices", 1},
    {"argmin", "reduction", GATHER_TEXT "; gathers values and global indices", 1},
    {"any", "reduction", GATHER_TEXT, 1},
    {"all", "reduction", GATHER_TEXT, 1},
    {NULL, NULL, NULL, 0},
};

/* ------------------------------------------------------ segmented dims */

/* The reductions' seg rule (the REDUCE row's; core/records/seg.h): over
 * other dims of one input, the dim kept whole (renumbered when dims go). */
int dt__seg_rule_reduce(const dt__node *n, dt__meta *out) {
    const dt__meta *in = &n->in[0]->meta;
    dt__seg g = in->seg;
    if (!g.n || n->n_in != 1 || (n->a.dims_mask >> g.dim) & 1 || out->ndim > in->ndim ||
        (n->a.flags & DT_KF_ALL))
        return DT__SEG_REGULAR;
    if (out->ndim < in->ndim)
        g.dim = (int8_t)(g.dim - __builtin_popcountll(n->a.dims_mask & ((1ull << g.dim) - 1)));
    if (out->shape[g.dim] != in->shape[in->seg.dim])
        return DT__SEG_REGULAR;
    out->seg = g;
    return dt__seg_same_sharding(in, out) ? DT__SEG_PASS : DT__SEG_REGULAR;
}
