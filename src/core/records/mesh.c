/*
 * Device meshes: immutable after creation, so any thread may read them; the
 * reference count is atomic.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/records/mesh.h"

static _Atomic uint64_t next_mesh_uid = 1;

static int cmp_id(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* DT_EINVAL naming a repeated id. Sorting a copy keeps a mesh of a million
 * devices at n log n (pairwise comparison would take hours). */
static dt_status check_unique(const int64_t *ids, int64_t n) {
    int64_t *sorted = dt__malloc((size_t)n * sizeof *sorted);
    if (!sorted)
        return dt__error(DT_ENOMEM, "mesh: out of memory");
    memcpy(sorted, ids, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_id);
    dt_status st = DT_OK;
    for (int64_t i = 1; i < n && st == DT_OK; i++)
        if (sorted[i] == sorted[i - 1])
            st = dt__error(DT_EINVAL, "mesh: device id %lld appears more than once; ids must be unique",
                           (long long)sorted[i]);
    dt__free(sorted);
    return st;
}

/* Type-stable: a released mesh's magic stays readable (core.h, handles). */
static dt__pool mesh_pool = DT__POOL_INIT_STABLE(sizeof(dt_mesh), 0);

dt_status dt_mesh_create(dt_device_type type, int ndim, const int64_t *shape, const int64_t *ids,
                         const char *const *dim_names, dt_mesh **out) {
    if (!out)
        return dt__error(DT_EINVAL, "dt_mesh_create: out is NULL");
    *out = NULL;
    if (type != DT_DEVICE_CPU && type != DT_DEVICE_CUDA)
        return dt__error(DT_EINVAL, "device_type: expected 'cpu' or 'cuda'");
    if (ndim < 1 || ndim > DT_MAX_MESH_NDIM)
        return dt__error(DT_EINVAL, "mesh: expected 1 to %d dimensions, got %d", DT_MAX_MESH_NDIM, ndim);
    if (!shape || !ids)
        return dt__error(DT_EINVAL, "mesh: shape and ids are required");
    int64_t ndev = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return dt__error(
                DT_EINVAL, "mesh: dimension %d has size %lld; every mesh dimension needs at least one device",
                d, (long long)shape[d]);
        ndev *= shape[d];
        if (ndev > (1 << 20))
            return dt__error(DT_EINVAL, "mesh: too many devices");
    }
    for (int64_t i = 0; i < ndev; i++)
        if (ids[i] < 0)
            return dt__error(DT_EINVAL, "mesh: device id %lld is negative", (long long)ids[i]);
    dt_status st = check_unique(ids, ndev);
    if (st != DT_OK)
        return st;
    if (dim_names) {
        for (int d = 0; d < ndim; d++) {
            if (!dim_names[d] || !dim_names[d][0] || strlen(dim_names[d]) >= DT_MAX_DIM_NAME)
                return dt__error(DT_EINVAL,
                                 "mesh_dim_names: name %d must be a non-empty string shorter than %d bytes",
                                 d, DT_MAX_DIM_NAME);
            for (int e = 0; e < d; e++)
                if (strcmp(dim_names[d], dim_names[e]) == 0)
                    return dt__error(DT_EINVAL, "mesh_dim_names: '%s' appears more than once", dim_names[d]);
        }
    }
    dt_mesh *m = dt__pool_alloc(&mesh_pool); /* zeroed; records are cache-line aligned */
    int64_t *idcopy = dt__malloc((size_t)ndev * sizeof *idcopy);
    if (!m || !idcopy) {
        dt__pool_free(&mesh_pool, m);
        dt__free(idcopy);
        return dt__error(DT_ENOMEM, "mesh: out of memory");
    }
    m->magic = DT__MESH_LIVE;
    atomic_init(&m->refs, 1);
    m->uid = atomic_fetch_add_explicit(&next_mesh_uid, 1, memory_order_relaxed);
    m->type = type;
    m->ndim = ndim;
    m->ndev = ndev;
    m->ids = idcopy;
    memcpy(m->ids, ids, (size_t)ndev * sizeof *ids);
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        m->shape[d] = shape[d];
        m->strides[d] = stride;
        stride *= shape[d];
    }
    m->names_given = dim_names != NULL;
    for (int d = 0; d < ndim; d++) {
        if (dim_names)
            snprintf(m->names[d], DT_MAX_DIM_NAME, "%s", dim_names[d]);
        else
            snprintf(m->names[d], DT_MAX_DIM_NAME, "dim%d", d);
    }
    *out = m;
    return DT_OK;
}

void dt_mesh_retain(dt_mesh *mesh) {
    if (dt__mesh_ok(mesh))
        atomic_fetch_add_explicit(&mesh->refs, 1, memory_order_relaxed);
}

void dt_mesh_release(dt_mesh *mesh) {
    if (!dt__mesh_ok(mesh) || atomic_fetch_sub_explicit(&mesh->refs, 1, memory_order_acq_rel) != 1)
        return;
    dt__free(mesh->ids);
    mesh->magic = DT__HANDLE_DEAD;
    dt__pool_free(&mesh_pool, mesh);
}

/* The getters take NULL or a released mesh (a caller's missing check) and
 * return a neutral value: 0, NULL or the CPU type. */
dt_device_type dt_mesh_device_type(const dt_mesh *mesh) {
    return dt__mesh_ok(mesh) ? mesh->type : DT_DEVICE_CPU;
}
int dt_mesh_ndim(const dt_mesh *mesh) { return dt__mesh_ok(mesh) ? mesh->ndim : 0; }
int64_t dt_mesh_size(const dt_mesh *mesh, int dim) {
    if (!dt__mesh_ok(mesh))
        return 0;
    if (dim < 0)
        return mesh->ndev;
    return dim < mesh->ndim ? mesh->shape[dim] : 0;
}
const int64_t *dt_mesh_shape(const dt_mesh *mesh) { return dt__mesh_ok(mesh) ? mesh->shape : NULL; }
const int64_t *dt_mesh_ids(const dt_mesh *mesh) { return dt__mesh_ok(mesh) ? mesh->ids : NULL; }
const char *dt_mesh_dim_name(const dt_mesh *mesh, int dim) {
    return dt__mesh_ok(mesh) && dim >= 0 && dim < mesh->ndim ? mesh->names[dim] : NULL;
}

int dt_mesh_equal(const dt_mesh *a, const dt_mesh *b) {
    if (a == b)
        return !a || dt__mesh_ok(a); /* NULL equals NULL, as before; a released mesh nothing */
    if (!dt__mesh_ok(a) || !dt__mesh_ok(b) || a->type != b->type || a->ndim != b->ndim || a->ndev != b->ndev)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || strcmp(a->names[d], b->names[d]) != 0)
            return 0;
    return memcmp(a->ids, b->ids, (size_t)a->ndev * sizeof *a->ids) == 0;
}

void dt__mesh_coord(const dt_mesh *m, int64_t idx, int64_t *coord) {
    for (int d = 0; d < m->ndim; d++)
        coord[d] = (idx / m->strides[d]) % m->shape[d];
}
