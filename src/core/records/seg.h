/*
 * Segmented dims (docs/decisions.md, "segmented cat"): the descriptor of the
 * layout a communication-free cat along a sharded dim leaves, and the pure
 * arithmetic over it (seg.c): the storage-order ranges each device holds,
 * how a redistribute step moves them, and the helpers the ops' rules
 * (their seg_rule column in src/ops/ops.def) pass the layout through with.
 * The gate that keeps the layout away from every other op is
 * core/client/segment.h.
 *
 * Threads: any thread (pure functions). Any module may include it.
 */
#ifndef DT_CORE_SEG_H
#define DT_CORE_SEG_H

#include <stdint.h>

#include "core/core.h"

/* Tensor dim `dim` is the concatenation of n segments (lengths in user
 * order), cut over the grid of the nmd sharding mesh dims mds[] (docs/
 * decisions.md, "segmented cat"): device c's piece of a segment is its
 * nested torch.chunk piece (mesh dims in ascending order, as regular nested
 * shards), and its block B(c) is its pieces of every segment, in segment
 * order. The storage order is device-major over the grid, mds[0] the most
 * major: B(c) for c in lexicographic order over mds[]. The mesh dims of mds[]
 * that are Shard(dim) now come first (canonical form: ascending among
 * themselves; their order moves nothing), and each device holds the blocks
 * whose coordinates on them are its own: a contiguous range of the storage
 * order. The order of the non-sharding mesh dims is physical (what a device
 * holds); that of the sharding ones only numbers positions, so regions
 * compared with each other must come from the same mds[] (the redistribute
 * planner changes pl before dt__seg_step). No mesh dim outside mds[] shards
 * `dim`. n == 0: a regular dim (the
 * other fields are then 0). */
#define DT_MAX_SEGMENTS 8
typedef struct dt__seg {
    int8_t n, dim, nmd;
    int8_t mds[DT_MAX_MESH_NDIM];
    int64_t len[DT_MAX_SEGMENTS];
} dt__seg;

/* Set on the controller thread (lowering): dt__local_region returns a
 * segmented dim's storage-order range there. Client threads (the ops'
 * placement checks) see the regular layout, the one the fallback gives. */
extern _Thread_local int dt__seg_regions;

/* ------------------------------------------------------------ regions */

/* 1 when mesh dim md of m's placements is Shard(d). */
int dt__seg_shards(const dt__meta *m, int md, int d);
/* Bit md set for each mesh dim of g. */
unsigned dt__seg_mask(const dt__seg *g);
/* The mesh dims of g that shard m's segmented dim now (a bit mask). */
unsigned dt__seg_sharding(const dt__meta *m);
/* The device at coord's piece of segment s (its nested torch.chunk length). */
int64_t dt__seg_piece(const dt__meta *m, int s, const int64_t *coord);
/* The range [start, start+len) of the storage order that the device at
 * coord holds under m's placements. */
void dt__seg_range(const dt__meta *m, const int64_t *coord, int64_t *start, int64_t *len);
/* m after mesh dim md moves to placement `to` (one redistribute step): its
 * placement, and the descriptor kept canonical (a gathered mesh dim becomes
 * the most major of those that do not shard the dim). */
void dt__seg_step(dt__meta *m, int md, dt_placement to);
/* 1 when a redistribute from `in` to `out` (same mesh) keeps in's segmented
 * dim without communication beyond its own steps: at most one mesh dim of
 * the descriptor changes whether it shards the dim, one that starts to must
 * be the most major of those that do not, and no other mesh dim shards it. */
int dt__seg_redistributes(const dt__meta *in, const dt__meta *out);

/* ------------------------------------------------------------ rules */

/* What an op's seg rule (its seg_rule column, core/records/node.h) says of
 * a node: */
enum {
    /* The fallback: the gate converts each segmented input to the regular
     * layout first (dt__seg_regular), and the output is regular. */
    DT__SEG_REGULAR = 0,
    /* The output's descriptor is set (zero: regular); the gate keeps it when
     * it holds for the output's placements (dt__seg_layout_ok). */
    DT__SEG_PASS = 1,
    /* The node set its output's descriptor itself (the producers: cat,
     * getitem); the gate leaves it as it is. */
    DT__SEG_OWN = 2,
};

/* 1 when a and b describe the same segments over the same mesh dims (their
 * dim aside). */
int dt__seg_same(const dt__seg *a, const dt__seg *b);
/* The output dim of a reshape that keeps input dim d whole, or -1. */
int dt__seg_reshape_dim(const dt__meta *in, const dt__meta *out, int d);
/* 1 when out (its descriptor set) is sharded on the dim by the same mesh
 * dims as in: the op moved each Shard with the dim and added none. */
int dt__seg_same_sharding(const dt__meta *in, const dt__meta *out);
/* 1 when out's descriptor holds for its placements: no mesh dim outside
 * the grid shards the dim, and the descriptor is in its canonical form (the
 * sharding mesh dims first: each device's blocks are a contiguous range). */
int dt__seg_layout_ok(const dt__meta *out);

#endif /* DT_CORE_SEG_H */
