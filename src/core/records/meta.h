/*
 * Tensor metadata (meta.c): dtype, shape, mesh and normalised placements,
 * and the pure functions over them (local regions, chunking, type
 * promotion, placement validation). The layout is the interface: a dt__meta
 * is written once by the client before the node that makes its value is
 * queued, then only read, by any thread. The functions keep no state and
 * run on any thread; any module may include this header.
 */
#ifndef DT_CORE_META_H
#define DT_CORE_META_H

#include "core/core.h"
#include "core/records/seg.h"

struct dt__meta {
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    dt_mesh *mesh;                     /* owned reference */
    dt_placement pl[DT_MAX_MESH_NDIM]; /* normalised: shard dims >= 0 */
    dt__seg seg;                       /* seg.h; set by dt__client_submit for every value */
};

int64_t dt__numel(int ndim, const int64_t *shape);
/* 1 when two metas describe the same layout (dtype, shape, mesh, placements). */
int dt__meta_same(const dt__meta *a, const dt__meta *b);
/* torch.chunk's split of [0, n) into k pieces: piece i is
 * [min(i*c, n), min((i+1)*c, n)) with c = ceil(n/k). */
void dt__chunk(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len);
/* The region of the global tensor that the device at `coord` holds: nested
 * shards split in mesh-dim order (segmented dims: seg.h). */
void dt__local_region(const dt__meta *m, const int64_t *coord, int64_t *start, int64_t *len);
/* 1 when the device at `coord` must hold zeros for a Partial value built from
 * a full one (its coordinate along some Partial mesh dim is not 0). */
int dt__partial_zero(const dt__meta *m, const int64_t *coord);
/* 1 when some tensor dim is sharded by more than one mesh dim. */
int dt__has_nested_shards(const dt__meta *m);

/* Validates and normalises user placements (NULL = all Replicate) for a
 * tensor of `ndim` dims on `mesh` into out (size-1 mesh dims become
 * Replicate). Sets the thread error and returns DT_EINVAL on bad input. */
dt_status dt__placements_normalize(const dt_mesh *mesh, int ndim, const dt_placement *in, dt_placement *out);
/* Writes "[Shard(dim=0), Replicate()]" into sb. */
void dt__placements_format(dt__strbuf *sb, const dt_placement *pl, int n);
dt_status dt__shape_check(int ndim, const int64_t *shape);

/* torch's type promotion. */
dt_dtype dt__promote_types(dt_dtype a, dt_dtype b);
/* Result dtype of a op b for tensors (0-d tensors rank like scalars as in
 * torch's result_type). */
dt_dtype dt__result_type2(const dt__meta *a, const dt__meta *b);
dt_dtype dt__result_type_scalar(const dt__meta *a, dt_scalar s);
/* torch's result_type over `nt` tensors and `ns` Python scalars. */
dt_dtype dt__result_type(const dt__meta *const *ts, int nt, const dt_scalar *ss, int ns);
int dt__dtype_is_int(dt_dtype d); /* integers, not bool */

#endif /* DT_CORE_META_H */
