/*
 * Factories: tensors from host data (a global value, or one block per
 * device), DLPack, constants, random streams (rand, randn, randint) and
 * ranges. The client validates and records; the controller lowers each into
 * one kernel per device that builds that device's local region directly (a
 * Partial placement gets the value on the first coordinate and zeros
 * elsewhere, except from per-device blocks).
 *
 * Threads: dt_* factories on client threads; dt__lower_factory on the
 * controller.
 */
#include <math.h>
#include <string.h>

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_step.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/ops.h"

/* torch's "Storage size calculation overflowed": the bytes of the global
 * tensor must fit in int64 (the element count already does). */
static dt_status check_bytes(dt_dtype dtype, int ndim, const int64_t *shape) {
    int64_t n = dt__numel(ndim, shape), size = (int64_t)dt_dtype_size(dtype);
    if (size > 0 && n > INT64_MAX / size)
        return dt__error(DT_EOP, "Storage size calculation overflowed: %lld elements of %lld bytes",
                         (long long)n, (long long)size);
    return DT_OK;
}

/* The dtype and device_mesh arguments every factory takes. */
static dt_status check_dtype(dt_dtype dtype) {
    if ((unsigned)dtype >= DT_DTYPE_COUNT)
        return dt__error(DT_ETYPE, "dtype: unknown dtype %d", (int)dtype);
    return DT_OK;
}

static dt_status check_mesh(const dt_mesh *mesh) {
    if (!dt__mesh_ok(mesh))
        return dt__error(DT_EINVAL, mesh ? "device_mesh: the mesh is a released handle"
                                         : "device_mesh: a mesh is required");
    return DT_OK;
}

/* The meta of a factory's result before its placements (zero elsewhere). */
static void factory_meta(dt__meta *m, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh) {
    memset(m, 0, sizeof *m);
    m->dtype = dtype;
    m->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        m->shape[d] = shape[d];
    m->mesh = mesh;
}

/* Validates the common arguments and builds the symbol and its node. */
static dt_tensor *factory_begin(dt_graph *g, int op, dt_dtype dtype, int ndim, const int64_t *shape,
                                dt_mesh *mesh, const dt_placement *placements, dt__node **node) {
    *node = NULL;
    dt_clear_error();
    if (dt__client_check_graph(g) != DT_OK || check_dtype(dtype) != DT_OK || check_mesh(mesh) != DT_OK ||
        dt__shape_check(ndim, shape) != DT_OK || check_bytes(dtype, ndim, shape) != DT_OK ||
        dt__graph_check_mesh(g, mesh) != DT_OK)
        return NULL;
    dt__meta m;
    factory_meta(&m, dtype, ndim, shape, mesh);
    if (dt__placements_normalize(mesh, ndim, placements, m.pl) != DT_OK)
        return NULL;
    dt_tensor *t = dt__tensor_new(g, &m);
    if (!t)
        return NULL;
    *node = dt__node_new(op);
    if (*node)
        (*node)->out = t->v;
    return t;
}

static dt_tensor *factory_source(dt_graph *g, void *impl, dt_dtype dtype, int ndim, const int64_t *shape,
                                 dt_mesh *mesh, const dt_placement *placements) {
    dt__node *n;
    dt_tensor *t = factory_begin(g, DT_OP_SOURCE, dtype, ndim, shape, mesh, placements, &n);
    const dt__backend *be = dt__graph_be(g, mesh->type);
    if (!t) {
        be->free(impl);
        return NULL;
    }
    if (n)
        n->extra = impl;
    else
        be->free(impl);
    return dt__client_submit(t, n);
}

dt_tensor *dt_tensor_from_buffer(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape,
                                 const void *data, size_t nbytes, dt_mesh *mesh,
                                 const dt_placement *placements) {
    dt_clear_error();
    if (dt__client_check_graph(g) != DT_OK || dt__shape_check(ndim, shape) != DT_OK ||
        check_dtype(dtype) != DT_OK)
        return NULL;
    size_t want = (size_t)dt__numel(ndim, shape) * dt_dtype_size(dtype);
    if (nbytes != want || (want && !data)) {
        dt__error(DT_EINVAL, "data: %zu bytes given, the shape and dtype need %zu", nbytes, want);
        return NULL;
    }
    /* Validate before copying so a bad call costs nothing. */
    dt_placement tmp[DT_MAX_MESH_NDIM];
    if (check_mesh(mesh) != DT_OK || dt__placements_normalize(mesh, ndim, placements, tmp) != DT_OK ||
        dt__graph_check_mesh(g, mesh) != DT_OK)
        return NULL;
    void *impl = NULL;
    char err[512] = "";
    dt_status st = dt__graph_be(g, mesh->type)->from_host(dtype, ndim, shape, data, &impl, err, sizeof err);
    if (st != DT_OK) {
        dt__error(st, "from_buffer: %s", err);
        return NULL;
    }
    return factory_source(g, impl, dtype, ndim, shape, mesh, placements);
}

dt_tensor *dt_tensor_from_dlpack(dt_graph *g, void *dl_managed, dt_mesh *mesh,
                                 const dt_placement *placements) {
    dt_clear_error();
    /* The backend of the mesh's device type (CPU when no mesh: rejected later). */
    const dt__backend *be = g ? dt__graph_be(g, mesh ? mesh->type : DT_DEVICE_CPU) : NULL;
    if (dt__client_check_graph(g) != DT_OK || !be->from_dlpack) {
        if (g && !be->from_dlpack)
            dt__error(DT_EUNSUPPORTED, "from_dlpack: the '%s' backend has no DLPack support", be->name);
        /* We own it in every case: free it without a backend if needed. */
        if (g && be->dlpack_delete)
            be->dlpack_delete(dl_managed);
        return NULL;
    }
    if (!dl_managed) {
        dt__error(DT_EINVAL, "from_dlpack: tensor is NULL");
        return NULL;
    }
    void *impl = NULL;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    char err[512] = "";
    dt_status st = be->from_dlpack(dl_managed, &impl, &dtype, &ndim, shape, err, sizeof err);
    if (st != DT_OK) {
        dt__error(st, "from_dlpack: %s", err);
        return NULL;
    }
    return factory_source(g, impl, dtype, ndim, shape, mesh, placements);
}

/* The host blocks of dt_tensor_from_local_buffers, one per device in
 * row-major mesh order. A SOURCE node with flags DT__SOURCE_LOCAL owns one
 * until it is lowered, when each block passes to its device's source blob. */
typedef struct local_sources {
    int64_t n;
    void *impl[];
} local_sources;

static void local_sources_free(const dt__backend *be, local_sources *ls) {
    if (!ls)
        return;
    for (int64_t i = 0; i < ls->n; i++)
        if (ls->impl[i])
            be->free(ls->impl[i]);
    dt__free(ls);
}

void dt__source_free(const dt__backend *be, dt__node *n) {
    if (n->op != DT_OP_SOURCE || !n->extra)
        return;
    if (n->a.flags == DT__SOURCE_LOCAL)
        local_sources_free(be, n->extra);
    else
        be->free(n->extra);
    n->extra = NULL;
}

void dt__source_discard(dt_graph *g, dt__node *n) {
    if (n->extra)
        dt__source_free(dt__graph_be(g, n->out->meta.mesh->type), n);
}

dt_tensor *dt_tensor_from_local_buffers(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape,
                                        dt_mesh *mesh, const dt_placement *placements,
                                        const void *const *data, const size_t *nbytes) {
    dt_clear_error();
    if (dt__client_check_graph(g) != DT_OK || dt__shape_check(ndim, shape) != DT_OK ||
        check_dtype(dtype) != DT_OK || check_mesh(mesh) != DT_OK)
        return NULL;
    if (!data || !nbytes) {
        dt__error(DT_EINVAL, "from_local: one buffer and one size per device are required");
        return NULL;
    }
    /* Every block is checked against its device's region before anything is
     * copied, so a bad call costs nothing and enqueues nothing. */
    dt__meta m;
    factory_meta(&m, dtype, ndim, shape, mesh);
    if (check_bytes(dtype, ndim, shape) != DT_OK ||
        dt__placements_normalize(mesh, ndim, placements, m.pl) != DT_OK ||
        dt__graph_check_mesh(g, mesh) != DT_OK)
        return NULL;
    int64_t ndev = mesh->ndev, coord[DT_MAX_MESH_NDIM], start[DT_MAX_NDIM], len[DT_MAX_NDIM];
    for (int64_t i = 0; i < ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&m, coord, start, len);
        size_t want = (size_t)dt__numel(ndim, len) * dt_dtype_size(dtype);
        if (nbytes[i] != want || (want && !data[i])) {
            dt__error(DT_EINVAL,
                      "from_local: device %lld (mesh index %lld) got %zu bytes, its local block needs %zu",
                      (long long)mesh->ids[i], (long long)i, nbytes[i], want);
            return NULL;
        }
    }
    local_sources *ls = dt__calloc(1, sizeof *ls + (size_t)ndev * sizeof(void *));
    if (!ls) {
        dt__error(DT_ENOMEM, "out of memory");
        return NULL;
    }
    ls->n = ndev;
    for (int64_t i = 0; i < ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&m, coord, start, len);
        char err[512] = "";
        dt_status st =
            dt__graph_be(g, mesh->type)->from_host(dtype, ndim, len, data[i], &ls->impl[i], err, sizeof err);
        if (st != DT_OK) {
            local_sources_free(dt__graph_be(g, mesh->type), ls);
            dt__error(st, "from_local: %s", err);
            return NULL;
        }
    }
    dt__node *n;
    dt_tensor *t = factory_begin(g, DT_OP_SOURCE, dtype, ndim, shape, mesh, placements, &n);
    if (!t || !n) {
        local_sources_free(dt__graph_be(g, mesh->type), ls);
        return t ? dt__client_submit(t, n) : NULL; /* the submit reports the lack of memory */
    }
    n->a.flags = DT__SOURCE_LOCAL;
    n->extra = ls;
    return dt__client_submit(t, n);
}

dt_tensor *dt_full(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_scalar value,
                   dt_mesh *mesh, const dt_placement *placements) {
    dt__node *n;
    dt_tensor *t = factory_begin(g, DT_OP_FULL, dtype, ndim, shape, mesh, placements, &n);
    if (!t)
        return NULL;
    if (n)
        n->a.scalar = value;
    return dt__client_submit(t, n);
}

dt_tensor *dt_empty(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                    const dt_placement *placements) {
    dt__node *n;
    dt_tensor *t = factory_begin(g, DT_OP_FULL, dtype, ndim, shape, mesh, placements, &n);
    if (!t)
        return NULL;
    if (n)
        n->a.flags = 1; /* empty */
    return dt__client_submit(t, n);
}

static dt_tensor *random_factory(int op, dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape,
                                 dt_mesh *mesh, const dt_placement *placements) {
    if (!dt_dtype_is_floating(dtype)) {
        dt__error(DT_ETYPE, "%s: dtype must be floating, got %s", op == DT_OP_RAND ? "rand" : "randn",
                  dt_dtype_name(dtype));
        return NULL;
    }
    dt__node *n;
    dt_tensor *t = factory_begin(g, op, dtype, ndim, shape, mesh, placements, &n);
    if (!t)
        return NULL;
    if (n)
        n->a.seed = dt__next_random_seed();
    return dt__client_submit(t, n);
}

dt_tensor *dt_rand(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                   const dt_placement *placements) {
    return random_factory(DT_OP_RAND, g, dtype, ndim, shape, mesh, placements);
}

dt_tensor *dt_randn(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                    const dt_placement *placements) {
    return random_factory(DT_OP_RANDN, g, dtype, ndim, shape, mesh, placements);
}

/* torch's names for the integer types in randint's range messages. */
static const char *c_type_name(dt_dtype d) {
    switch (d) {
    case DT_BOOL:
        return "bool";
    case DT_UINT8:
        return "unsigned char";
    case DT_INT8:
        return "signed char";
    case DT_INT16:
        return "short int";
    case DT_INT32:
        return "int";
    default:
        return "long";
    }
}

dt_tensor *dt_randint(dt_graph *g, dt_dtype dtype, int64_t low, int64_t high, int ndim, const int64_t *shape,
                      dt_mesh *mesh, const dt_placement *placements) {
    dt_clear_error();
    /* torch checks the order first, then that both bounds fit an integer
     * dtype (floating dtypes only warn about precision). */
    if (low >= high) {
        dt__error(DT_EOP, "random_ expects 'from' to be less than 'to', but got from=%lld >= to=%lld",
                  (long long)low, (long long)high);
        return NULL;
    }
    if ((unsigned)dtype < DT_DTYPE_COUNT && !dt_dtype_is_floating(dtype) && dtype != DT_INT64) {
        static const int64_t lo[] = {[DT_BOOL] = 0,
                                     [DT_UINT8] = 0,
                                     [DT_INT8] = -128,
                                     [DT_INT16] = -32768,
                                     [DT_INT32] = -2147483647 - 1};
        static const int64_t hi[] = {
            [DT_BOOL] = 1, [DT_UINT8] = 255, [DT_INT8] = 127, [DT_INT16] = 32767, [DT_INT32] = 2147483647};
        if (low < lo[dtype] || low > hi[dtype]) {
            dt__error(DT_EOP, "from is out of bounds for %s", c_type_name(dtype));
            return NULL;
        }
        if (high - 1 < lo[dtype] || high - 1 > hi[dtype]) {
            dt__error(DT_EOP, "to - 1 is out of bounds for %s", c_type_name(dtype));
            return NULL;
        }
    }
    dt__node *n;
    dt_tensor *t = factory_begin(g, DT_OP_RANDINT, dtype, ndim, shape, mesh, placements, &n);
    if (!t)
        return NULL;
    if (n) {
        n->a.seed = dt__next_random_seed();
        n->a.scalar = dt_scalar_int(low);
        n->a.scalar2 = dt_scalar_int(high);
    }
    return dt__client_submit(t, n);
}

dt_tensor *dt_arange(dt_graph *g, dt_dtype dtype, double start, double end, double step, dt_mesh *mesh,
                     const dt_placement *placements) {
    dt_clear_error();
    if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step)) {
        dt__error(DT_EINVAL, "arange: step must be nonzero and start, end, step finite");
        return NULL;
    }
    if ((step > 0 && end < start) || (step < 0 && end > start)) {
        dt__error(DT_EINVAL, "arange: upper bound and larger bound inconsistent with step sign");
        return NULL;
    }
    if (dtype == DT_BOOL) {
        dt__error(DT_ETYPE, "arange: dtype bool is not supported");
        return NULL;
    }
    int64_t len = (int64_t)ceil((end - start) / step);
    dt__node *n;
    dt_tensor *t = factory_begin(g, DT_OP_ARANGE, dtype, 1, &len, mesh, placements, &n);
    if (!t)
        return NULL;
    if (n) {
        n->a.f[0] = start;
        n->a.f[1] = end;
        n->a.f[2] = step;
    }
    return dt__client_submit(t, n);
}

/* ------------------------------------------------------------ lowering */

/* The kernel that makes node n's region [start, start + len) on a device
 * (`zero`: a Partial's device off the first coordinate), its attributes
 * into *a. */
static int factory_kernel(const dt__node *n, int zero, const int64_t *start, const int64_t *len,
                          dt__kattr *a) {
    const dt__meta *m = &n->out->meta;
    int kop;
    if (zero)
        kop = DT_K_FULL;
    else if (n->op == DT_OP_SOURCE)
        kop = DT_K_SLICE;
    else if (n->op == DT_OP_FULL)
        kop = n->a.flags ? DT_K_EMPTY : DT_K_FULL;
    else if (n->op == DT_OP_RAND || n->op == DT_OP_RANDINT)
        kop = DT_K_RAND;
    else if (n->op == DT_OP_RANDN)
        kop = DT_K_RANDN;
    else
        kop = DT_K_ARANGE;
    memset(a, 0, sizeof *a);
    a->dtype = m->dtype;
    a->ndim = m->ndim;
    memcpy(a->shape, len, sizeof a->shape);
    memcpy(a->start, start, sizeof a->start);
    a->gndim = m->ndim;
    memcpy(a->gshape, m->shape, sizeof a->gshape);
    if (zero)
        a->scalar = dt_scalar_int(0);
    else if (kop == DT_K_FULL)
        a->scalar = n->a.scalar;
    a->seed = n->a.seed;
    memcpy(a->f, n->a.f, sizeof a->f);
    if (kop == DT_K_RAND && n->op == DT_OP_RANDINT) {
        a->sub = DT_KRAND_INT;
        a->scalar = n->a.scalar;
        a->scalar2 = n->a.scalar2;
    }
    return kop;
}

/* A factory whose kernel is the same on every device (every placement
 * Replicate: each device makes the whole tensor from the same attributes,
 * no device zeros; not from_local): one device-independent kernel
 * (core/controller/lower_bcast.c), a host tensor's data read through the
 * one source blob. 1 when taken (L->status says how it went). */
static int factory_shared(dt__lower *L, dt__node *n) {
    dt__tval *v = n->out;
    const dt__meta *m = &v->meta;
    if ((n->op == DT_OP_SOURCE && n->a.flags == DT__SOURCE_LOCAL) || !dt__lw_bcast_wanted(L, v))
        return 0;
    for (int md = 0; md < m->mesh->ndim; md++)
        if (m->pl[md].kind != DT_PLACEMENT_REPLICATE)
            return 0;
    int64_t start[DT_MAX_NDIM] = {0}, len[DT_MAX_NDIM] = {0};
    memcpy(len, m->shape, sizeof(int64_t) * (size_t)m->ndim);
    dt__kattr a;
    int kop = factory_kernel(n, 0, start, len, &a);
    if (n->op != DT_OP_SOURCE)
        return dt__lw_bcast(L, v, kop, &a, NULL, NULL, 0, 1);
    dt__blob *source = dt__blob_new(dt__graph_be(L->g, m->mesh->type));
    if (!source)
        return 0; /* the per-device path reports it */
    source->impl = n->extra;
    if (!dt__lw_step_add_blob(L, v, kop, &a, NULL, source)) {
        source->impl = NULL; /* the node keeps its host data */
        dt__blob_release(source);
        return 0;
    }
    n->extra = NULL; /* the blob owns the host impl now */
    return 1;
}

dt_status dt__lower_factory(dt__lower *L, dt__node *n) {
    dt__tval *v = n->out;
    const dt__meta *m = &v->meta;
    const dt_mesh *mesh = m->mesh;
    if (factory_shared(L, n))
        return L->status;
    if (dt__lw_alloc_blobs(L, v) != DT_OK) {
        dt__source_free(dt__graph_be(L->g, mesh->type), n);
        return L->status;
    }
    dt__blob *source = NULL;
    local_sources *ls = n->op == DT_OP_SOURCE && n->a.flags == DT__SOURCE_LOCAL ? n->extra : NULL;
    if (n->op == DT_OP_SOURCE && !ls) {
        source = dt__blob_new(dt__graph_be(L->g, mesh->type));
        if (!source) {
            dt__source_free(dt__graph_be(L->g, mesh->type), n);
            return dt__lw_fail(L, DT_ENOMEM, "out of memory (blob record)");
        }
        source->impl = n->extra;
        n->extra = NULL; /* the blob owns the host impl now */
    }
    /* The kernel's kind depends on the device (zeros off a Partial's first
     * coordinate), and from_local makes a source blob before it. */
    dt__kattr a;
    for (dt__lw_dev dev = DT__LW_EACH(v, DT__LW_NO_KERNEL); dt__lw_each(L, &dev);) {
        int64_t i = dev.idx;
        int zero = !ls && dt__partial_zero(m, dev.coord);
        if (ls) {
            /* from_local: the device's own block, whole (the slice aliases it). */
            source = dt__blob_new(dt__graph_be(L->g, mesh->type));
            if (!source) {
                dt__lw_fail(L, DT_ENOMEM, "out of memory (blob record)");
                break;
            }
            source->impl = ls->impl[i];
            ls->impl[i] = NULL;
            memset(dev.start, 0, sizeof dev.start);
        }
        int kop = factory_kernel(n, zero, dev.start, dev.len, &a);
        dt__kernel *k = dev.k = dt__lw_kernel(L, kop);
        if (!k)
            break;
        k->attr = a;
        if (kop == DT_K_SLICE) {
            k->n_in = 1;
            k->in[0] = dt__blob_retain(source);
        }
        dt__lw_each_push(L, &dev);
        if (ls) {
            dt__blob_release(source);
            source = NULL;
        }
    }
    dt__blob_release(source);
    if (ls) {
        /* After a failure some host blocks were not taken yet. */
        dt__source_free(dt__graph_be(L->g, mesh->type), n);
        n->extra = NULL;
    }
    return L->status;
}

/* ------------------------------------------------------------ registry */

#define CREATION_SIG "any placements; Partial puts the value on the first coordinate, zeros elsewhere"
const dt_op_doc dt__docs_creation[] = {
    {"tensor", "creation", CREATION_SIG, 0},
    {"from_torch", "creation", CREATION_SIG, 0},
    {"empty", "creation", CREATION_SIG, 0},
    {"zeros", "creation", CREATION_SIG, 0},
    {"ones", "creation", CREATION_SIG, 0},
    {"full", "creation", CREATION_SIG, 0},
    {"rand", "creation", CREATION_SIG "; values independent of placements", 0},
    {"randn", "creation", CREATION_SIG "; values independent of placements", 0},
    {"zeros_like", "creation", "the input's mesh and placements unless given", 0},
    {"ones_like", "creation", "the input's mesh and placements unless given", 0},
    {"full_like", "creation", "the input's mesh and placements unless given", 0},
    {"empty_like", "creation", "the input's mesh and placements unless given", 0},
    {"rand_like", "creation",
     "the input's mesh and placements unless given; values independent of placements", 0},
    {"randn_like", "creation",
     "the input's mesh and placements unless given; values independent of placements", 0},
    {"arange", "creation", CREATION_SIG, 0},
    {"randint", "creation", CREATION_SIG "; values independent of placements", 0},
    {"randint_like", "creation", CREATION_SIG "; values independent of placements", 0},
    {NULL, NULL, NULL, 0},
};
