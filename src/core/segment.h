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
 * order) stored device-major over mesh dim `md`: device 0's torch.chunk
 * piece of every segment, then device 1's, ... When md is Shard(dim) each
 * device holds its block of that storage order; otherwise every device holds
 * the whole dim in storage order. No other mesh dim shards `dim`. n == 0: a
 * regular dim (the other fields are then 0). */
#define DT_MAX_SEGMENTS 8
typedef struct dt__seg {
    int8_t n, dim, md;
    int64_t len[DT_MAX_SEGMENTS];
} dt__seg;

/* Set on the controller thread (lowering): dt__local_region returns a
 * segmented dim's storage-order block there. Client threads (the ops'
 * placement checks) see the regular layout, the one the fallback gives. */
extern _Thread_local int dt__seg_regions;
/* Device i's piece of segment s over w devices (its torch.chunk length). */
int64_t dt__seg_piece(const dt__seg *g, int64_t w, int s, int64_t i);
/* Device i's block [start, start+len) of the storage order over w devices. */
void dt__seg_block(const dt__seg *g, int64_t w, int64_t i, int64_t *start, int64_t *len);

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
