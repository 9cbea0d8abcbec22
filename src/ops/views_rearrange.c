/*
 * The views and shape family, part 4: ops that rearrange one input's
 * elements within each device's block, one kernel per device: tril/triu,
 * flip, roll, repeat and repeat_interleave; and the lowering of the local
 * views (reshape, permute, expand, contiguous), whose client side is
 * views.c's.
 *
 * Placements: see dtorch.h. tril/triu take every placement: the device that
 * holds rows r0.. and columns c0.. of the last two dims applies the local
 * diagonal `diagonal + r0 - c0`, which selects exactly the global triangle.
 *
 * Threads: dt_* functions on client threads; dt__vlower_* on the controller.
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
#include "ops/ops.h"
#include "ops/views_int.h"

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
    if (m->ndim < 2) { /* torch's RuntimeError (DT_EOP), not an index error */
        dt__error(DT_EOP, "%s: input tensor must have at least 2 dimensions", op);
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
    dt__tval *in = n->in[0];
    int nd = n->out->meta.ndim;
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_K_VIEW); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        dt__view_kernel_set(k, n, n->a.v_nints ? DT_KV_TRIU : DT_KV_TRIL);
        if (n->a.v_nints)
            k->opname = "triu";
        k->n_in = 1;
        k->in[0] = dt__blob_retain(in->blobs[dev.idx]);
        k->attr.ints[0] = n->a.v_ints[0] + dev.start[nd - 2] - dev.start[nd - 1];
        dt__lw_each_push(L, &dev);
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

/* The kernel kind of a local view node. */
static int local_sub(const dt__node *n) {
    return n->a.sub == DT_V_RESHAPE      ? DT_KV_RESHAPE
           : n->a.sub == DT_V_PERMUTE    ? DT_KV_PERMUTE
           : n->a.sub == DT_V_CONTIGUOUS ? DT_KV_CONTIGUOUS
                                         : DT_KV_EXPAND;
}

/* A local view as one shared record (lower_bcast.c) when every device's
 * kernel is the same: each makes one (no block a reshape leaves as it is)
 * of the same local shape. Checked on dt__lw_probes' devices (lengths of
 * local regions only): the attributes differ between devices by the shape
 * alone, so the shapes are compared (as dt__lw_same_attr would find). 1
 * when taken (L->status set on a failure). */
static int local_shared(dt__lower *L, dt__node *n) {
    dt__tval *in = n->in[0], *o = n->out;
    if (!dt__lw_bcast_wanted(L, o))
        return 0;
    int nd = o->meta.ndim;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], is[DT_MAX_NDIM], il[DT_MAX_NDIM];
    dt__kattr a = {.sub = local_sub(n), .dtype = o->meta.dtype, .ndim = nd};
    memcpy(a.ints, n->a.v_ints, sizeof(int64_t) * (size_t)nd);
    size_t bytes = sizeof(int64_t) * (size_t)nd;
    int64_t devs[DT__LW_BCAST_MAX_DEV];
    int np = dt__lw_probes(L, n, 1, devs);
    for (int i = 0; i < np; i++) {
        dt__mesh_coord(o->meta.mesh, devs[i], coord);
        dt__local_region(&o->meta, coord, os, ol);
        dt__local_region(&in->meta, coord, is, il);
        if ((n->a.sub == DT_V_RESHAPE && in->meta.ndim == nd && !memcmp(il, ol, bytes)) ||
            (i && memcmp(a.shape, ol, bytes)))
            return 0;
        memcpy(a.shape, ol, bytes);
    }
    return dt__lw_bcast(L, o, DT_K_VIEW, &a, dt__view_names[n->a.sub], n->in, 1, 1);
}

/* One kernel per device from the input's own block to the output's block:
 * reshape, permute, expand and contiguous. Unchanged blocks are handed on as
 * they are by a reshape (a contiguous() of a block that is already
 * contiguous is the backend's no-op: the controller cannot see layouts). */
void dt__vlower_local(dt__lower *L, dt__node *n) {
    dt__tval *in = n->in[0], *o = n->out;
    int64_t is[DT_MAX_NDIM], il[DT_MAX_NDIM];
    if (local_shared(L, n))
        return;
    /* A block that a reshape leaves as it is gets no kernel. */
    for (dt__lw_dev dev = DT__LW_EACH(o, DT__LW_NO_KERNEL); dt__lw_each(L, &dev);) {
        int64_t i = dev.idx, *ol = dev.len;
        if (n->a.sub == DT_V_RESHAPE) {
            dt__local_region(&in->meta, dev.coord, is, il);
            if (in->meta.ndim == o->meta.ndim &&
                memcmp(il, ol, sizeof(int64_t) * (size_t)o->meta.ndim) == 0) {
                o->blobs[i] = dt__blob_retain(in->blobs[i]);
                continue;
            }
        }
        dev.k = dt__view_kernel(L, n, local_sub(n));
        if (!dev.k)
            break;
        dt__kernel *k = dev.k;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(in->blobs[i]);
        k->attr.ndim = o->meta.ndim;
        for (int d = 0; d < o->meta.ndim; d++) {
            k->attr.shape[d] = ol[d];
            k->attr.ints[d] = n->a.v_ints[d];
        }
        dt__lw_each_push(L, &dev);
    }
}
