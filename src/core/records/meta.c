/*
 * Tensor metadata: dtypes and torch's type promotion, shard arithmetic
 * (torch.chunk sizes, nested shards) and placement validation. Pure
 * functions; any thread.
 */
#include <string.h>

#include "core/records/mesh.h"
#include "core/records/meta.h"

/* ------------------------------------------------------------- dtypes */

static const struct {
    const char *name;
    size_t size;
} dtype_info[DT_DTYPE_COUNT] = {
    [DT_BOOL] = {"bool", 1},       [DT_UINT8] = {"uint8", 1},       [DT_INT8] = {"int8", 1},
    [DT_INT16] = {"int16", 2},     [DT_INT32] = {"int32", 4},       [DT_INT64] = {"int64", 8},
    [DT_FLOAT16] = {"float16", 2}, [DT_BFLOAT16] = {"bfloat16", 2}, [DT_FLOAT32] = {"float32", 4},
    [DT_FLOAT64] = {"float64", 8},
};

size_t dt_dtype_size(dt_dtype d) { return (unsigned)d < DT_DTYPE_COUNT ? dtype_info[d].size : 0; }
const char *dt_dtype_name(dt_dtype d) {
    return (unsigned)d < DT_DTYPE_COUNT ? dtype_info[d].name : "invalid";
}
int dt_dtype_is_floating(dt_dtype d) { return d >= DT_FLOAT16 && d <= DT_FLOAT64; }
int dt__dtype_is_int(dt_dtype d) { return d >= DT_UINT8 && d <= DT_INT64; }

static _Atomic int default_dtype = DT_FLOAT32;

dt_status dt_set_default_dtype(dt_dtype dtype) {
    if (!dt_dtype_is_floating(dtype))
        return dt__error(DT_ETYPE, "default dtype must be a floating dtype, got %s", dt_dtype_name(dtype));
    atomic_store(&default_dtype, (int)dtype);
    return DT_OK;
}
dt_dtype dt_get_default_dtype(void) { return (dt_dtype)atomic_load(&default_dtype); }

/* Category: 0 bool, 1 integer, 2 floating. */
static int category(dt_dtype d) { return d == DT_BOOL ? 0 : dt_dtype_is_floating(d) ? 2 : 1; }

dt_dtype dt__promote_types(dt_dtype a, dt_dtype b) {
    if (a == b)
        return a;
    if (a == DT_BOOL)
        return b;
    if (b == DT_BOOL)
        return a;
    int ca = category(a), cb = category(b);
    if (ca != cb)
        return ca > cb ? a : b;
    if (ca == 2) {
        /* float16 with bfloat16 has no common 16-bit type. */
        if ((a == DT_FLOAT16 && b == DT_BFLOAT16) || (a == DT_BFLOAT16 && b == DT_FLOAT16))
            return DT_FLOAT32;
        return dtype_info[a].size >= dtype_info[b].size ? a : b;
    }
    /* Integers: uint8 with a signed type needs the next wider signed type. */
    if (a == DT_UINT8 || b == DT_UINT8) {
        dt_dtype other = a == DT_UINT8 ? b : a;
        return other == DT_INT8 ? DT_INT16 : other;
    }
    return dtype_info[a].size >= dtype_info[b].size ? a : b;
}

/* torch's combine_categories(higher, lower) without complex types. */
static int combine(int higher, int lower) {
    if (higher < 0)
        return lower;
    if (lower < 0)
        return higher;
    if (dt_dtype_is_floating((dt_dtype)higher))
        return higher;
    if (higher == DT_BOOL || dt_dtype_is_floating((dt_dtype)lower))
        return dt__promote_types((dt_dtype)higher, (dt_dtype)lower);
    return higher;
}

/* torch's result_type: dimensioned tensors rank above 0-d tensors, which rank
 * above Python scalars; a lower rank only matters when it is of a higher
 * category. -1 means "none in this rank". */
typedef struct rt_state {
    int dim, zero, wrapped;
} rt_state;

static void rt_add(int *slot, dt_dtype d) {
    *slot = *slot < 0 ? (int)d : (int)dt__promote_types((dt_dtype)*slot, d);
}
static void rt_tensor(rt_state *s, const dt__meta *m) { rt_add(m->ndim ? &s->dim : &s->zero, m->dtype); }
static dt_dtype rt_result(const rt_state *s) {
    return (dt_dtype)combine(s->dim, combine(s->zero, s->wrapped));
}

dt_dtype dt__result_type2(const dt__meta *a, const dt__meta *b) {
    rt_state s = {-1, -1, -1};
    rt_tensor(&s, a);
    rt_tensor(&s, b);
    return rt_result(&s);
}

static dt_dtype scalar_dtype(dt_scalar sc) {
    return sc.kind == DT_SCALAR_FLOAT ? dt_get_default_dtype()
           : sc.kind == DT_SCALAR_INT ? DT_INT64
                                      : DT_BOOL;
}

dt_dtype dt__result_type_scalar(const dt__meta *a, dt_scalar sc) {
    rt_state s = {-1, -1, -1};
    rt_tensor(&s, a);
    rt_add(&s.wrapped, scalar_dtype(sc));
    return rt_result(&s);
}

dt_dtype dt__result_type(const dt__meta *const *ts, int nt, const dt_scalar *ss, int ns) {
    rt_state s = {-1, -1, -1};
    for (int i = 0; i < nt; i++)
        rt_tensor(&s, ts[i]);
    for (int i = 0; i < ns; i++)
        rt_add(&s.wrapped, scalar_dtype(ss[i]));
    return rt_result(&s);
}

/* -------------------------------------------------------------- shapes */

int dt__meta_same(const dt__meta *a, const dt__meta *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->mesh != b->mesh || a->mesh->uid != b->mesh->uid)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    for (int md = 0; md < a->mesh->ndim; md++)
        if (a->pl[md].kind != b->pl[md].kind || a->pl[md].dim != b->pl[md].dim)
            return 0;
    if (a->seg.n != b->seg.n)
        return 0;
    if (a->seg.n && (a->seg.dim != b->seg.dim || a->seg.nmd != b->seg.nmd ||
                     memcmp(a->seg.mds, b->seg.mds, (size_t)a->seg.nmd) != 0 ||
                     memcmp(a->seg.len, b->seg.len, sizeof(int64_t) * (size_t)a->seg.n)))
        return 0;
    return 1;
}

int64_t dt__numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

dt_status dt__shape_check(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > DT_MAX_NDIM)
        return dt__error(DT_EINVAL, "size: expected at most %d dimensions, got %d", DT_MAX_NDIM, ndim);
    if (ndim > 0 && !shape)
        return dt__error(DT_EINVAL, "size: shape is NULL");
    /* torch answers both with a RuntimeError (DT_EOP): a negative dimension,
     * and an element count that does not fit in int64. */
    for (int d = 0; d < ndim; d++)
        if (shape[d] < 0)
            return dt__error(DT_EOP,
                             "Trying to create tensor with negative dimension %lld: size dimension %d "
                             "must be non-negative",
                             (long long)shape[d], d);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 0)
            return DT_OK;
        if (n > INT64_MAX / shape[d])
            n = -1;
        else if (n >= 0)
            n *= shape[d];
    }
    if (n < 0)
        return dt__error(DT_EOP,
                         "Storage size calculation overflowed: the shape has more than 2**63-1 elements");
    return DT_OK;
}

void dt__chunk(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len) {
    int64_t c = (n + k - 1) / k;
    int64_t s = i * c < n ? i * c : n;
    int64_t e = (i + 1) * c < n ? (i + 1) * c : n;
    *start = s;
    *len = e - s;
}

_Thread_local int dt__seg_regions;

void dt__local_region(const dt__meta *m, const int64_t *coord, int64_t *start, int64_t *len) {
    for (int d = 0; d < m->ndim; d++) {
        start[d] = 0;
        len[d] = m->shape[d];
    }
    int seg = dt__seg_regions && m->seg.n;
    for (int md = 0; md < m->mesh->ndim; md++) {
        if (m->pl[md].kind != DT_PLACEMENT_SHARD)
            continue;
        int d = m->pl[md].dim;
        int64_t s, l;
        if (seg && d == m->seg.dim)
            continue; /* below */
        dt__chunk(len[d], m->mesh->shape[md], coord[md], &s, &l);
        start[d] += s;
        len[d] = l;
    }
    if (seg) /* no other mesh dim shards it (seg.h) */
        dt__seg_range(m, coord, &start[m->seg.dim], &len[m->seg.dim]);
}

int dt__partial_zero(const dt__meta *m, const int64_t *coord) {
    for (int md = 0; md < m->mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_PARTIAL && coord[md] != 0)
            return 1;
    return 0;
}

int dt__has_nested_shards(const dt__meta *m) {
    for (int a = 0; a < m->mesh->ndim; a++)
        for (int b = a + 1; b < m->mesh->ndim; b++)
            if (m->pl[a].kind == DT_PLACEMENT_SHARD && m->pl[b].kind == DT_PLACEMENT_SHARD &&
                m->pl[a].dim == m->pl[b].dim)
                return 1;
    return 0;
}

/* ---------------------------------------------------------- placements */

dt_status dt__placements_normalize(const dt_mesh *mesh, int ndim, const dt_placement *in, dt_placement *out) {
    for (int md = 0; md < mesh->ndim; md++) {
        dt_placement p = in ? in[md] : (dt_placement){DT_PLACEMENT_REPLICATE, 0};
        switch (p.kind) {
        case DT_PLACEMENT_REPLICATE:
        case DT_PLACEMENT_PARTIAL:
            p.dim = 0;
            break;
        case DT_PLACEMENT_SHARD:
            if (p.dim < -ndim || p.dim >= ndim)
                return dt__error(
                    DT_EINVAL,
                    "placements[%d]: Shard(dim=%d) is out of range for a tensor with %d dimension%s", md,
                    p.dim, ndim, ndim == 1 ? "" : "s");
            if (p.dim < 0)
                p.dim += ndim;
            break;
        default:
            return dt__error(DT_EINVAL, "placements[%d]: unknown placement kind %d", md, p.kind);
        }
        /* A mesh dim of size 1 holds everything on its one coordinate. */
        if (mesh->shape[md] == 1)
            p = (dt_placement){DT_PLACEMENT_REPLICATE, 0};
        out[md] = p;
    }
    return DT_OK;
}

void dt__placements_format(dt__strbuf *sb, const dt_placement *pl, int n) {
    dt__sb_printf(sb, "[");
    for (int i = 0; i < n; i++) {
        if (i)
            dt__sb_printf(sb, ", ");
        if (pl[i].kind == DT_PLACEMENT_SHARD)
            dt__sb_printf(sb, "Shard(dim=%d)", pl[i].dim);
        else if (pl[i].kind == DT_PLACEMENT_PARTIAL)
            dt__sb_printf(sb, "Partial()");
        else
            dt__sb_printf(sb, "Replicate()");
    }
    dt__sb_printf(sb, "]");
}
