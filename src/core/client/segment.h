/*
 * Segmented dims (docs/decisions.md, "segmented cat"; segment.c): the
 * layout a communication-free cat along a sharded dim leaves, and the gate
 * that keeps it away from every op that does not understand it.
 *
 * Threads: the gate and the conversion on client threads; the region
 * helpers anywhere (pure).
 */
#ifndef DT_CORE_SEGMENT_H
#define DT_CORE_SEGMENT_H

#include <stdatomic.h>
#include <stdint.h>

#include "dtorch/dtorch.h"

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
struct dt__meta;
/* Bit md set for each mesh dim of g. */
unsigned dt__seg_mask(const dt__seg *g);
/* The mesh dims of g that shard m's segmented dim now (a bit mask). */
unsigned dt__seg_sharding(const struct dt__meta *m);
/* The device at coord's piece of segment s (its nested torch.chunk length). */
int64_t dt__seg_piece(const struct dt__meta *m, int s, const int64_t *coord);
/* The range [start, start+len) of the storage order that the device at
 * coord holds under m's placements. */
void dt__seg_range(const struct dt__meta *m, const int64_t *coord, int64_t *start, int64_t *len);
/* m after mesh dim md moves to placement `to` (one redistribute step): its
 * placement, and the descriptor kept canonical (a gathered mesh dim becomes
 * the most major of those that do not shard the dim). */
void dt__seg_step(struct dt__meta *m, int md, dt_placement to);
/* 1 when a redistribute from `in` to `out` (same mesh) keeps in's segmented
 * dim without communication beyond its own steps: at most one mesh dim of
 * the descriptor changes whether it shards the dim, one that starts to must
 * be the most major of those that do not, and no other mesh dim shards it. */
int dt__seg_redistributes(const struct dt__meta *in, const struct dt__meta *out);

struct dt__node;
struct dt__tval;
/* Sets n's output descriptor (t's meta) by the op's rule, or converts its
 * segmented inputs to the regular layout first (n->in rewired; the new
 * values, to release after n is queued, in tmp[0..*ntmp), at most one per
 * input). Called by dt__client_submit. */
dt_status dt__seg_gate(dt_tensor *t, struct dt__node *n, dt_tensor **tmp, int *ntmp);
/* x (segmented) in the regular layout with the same placements: a new
 * reference, or NULL with the thread error set. */
dt_tensor *dt__seg_regular(dt_tensor *x);
/* dt__client_submit without the gate (tensor.c). */
dt_tensor *dt__client_submit_raw(dt_tensor *t, struct dt__node *n);
/* The symbol of a value record (tensor.c). */
dt_tensor *dt__tval_tensor(struct dt__tval *v);
/* Test-only: collective groups lowered so far, process-wide (lower.c). */
extern atomic_long dt__collectives_lowered;

#endif
