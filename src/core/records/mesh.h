/*
 * Meshes (mesh.c): the devices a tensor lives on. The layout is the
 * interface: a mesh is immutable once dt_mesh_create returns, so any module
 * reads its fields on any thread; only mesh.c writes them, and the
 * reference count moves through dt_mesh_retain/release.
 */
#ifndef DT_CORE_MESH_H
#define DT_CORE_MESH_H

#include "core/core.h"

struct dt_mesh {
    uint32_t magic; /* DT__MESH_LIVE */
    dt_device_type type;
    int ndim;
    int names_given; /* the user named the dims (else defaults) */
    int64_t ndev;
    int64_t shape[DT_MAX_MESH_NDIM];
    int64_t strides[DT_MAX_MESH_NDIM]; /* row-major, in devices */
    char names[DT_MAX_MESH_NDIM][DT_MAX_DIM_NAME];
    int64_t *ids; /* ndev entries */
    uint64_t uid; /* unique per mesh ever made: a reused address is not the same mesh */
    /* Client threads (core/client/tensor.c, lineage): whether an id is a
     * worker node's, as of cluster generation g, stored as 2 * g + answer;
     * 0: not known yet. */
    atomic_uint_fast64_t on_node;
    /* Every value retains its mesh on the client and the controller drops
     * it: the count has a cache line of its own (the struct is allocated
     * aligned), away from the fields and the ids array the controller reads. */
    _Alignas(DT_CACHE_LINE) atomic_int refs;
};

/* The coordinate of the device at flat index `idx`. */
void dt__mesh_coord(const dt_mesh *m, int64_t idx, int64_t *coord);
static inline int dt__mesh_ok(const dt_mesh *m) { return m && m->magic == DT__MESH_LIVE; }

#endif /* DT_CORE_MESH_H */
