/*
 * The controller's records for explain and traces (trace_lower.c; the
 * recorder is core/records/trace.h). Each returns at once when recording of
 * its kind is off. Controller thread only.
 */
#ifndef DT_CORE_TRACE_LOWER_H
#define DT_CORE_TRACE_LOWER_H

#include "core/core.h"
#include "core/records/trace.h"

/* lower_node: before and after lowering node n (t0: when it began). */
int64_t dt__rec_node_begin(dt__lower *L, dt__node *n);
void dt__rec_node_end(dt__lower *L, dt__node *n, int64_t t0);
/* One group (devices base + r * stride) of a collective. */
void dt__rec_collective(dt__lower *L, const dt_mesh *mesh, const dt__coll *c, int64_t base, int64_t stride,
                        const char *opname);
/* A point-to-point move between meshes, `bytes` the most any destination
 * device receives from another device. */
void dt__rec_send_recv(dt__lower *L, int64_t bytes);
/* Kernel k, number `seq`, was appended to stream s. */
void dt__rec_kernel_queued(dt_graph *g, const dt__stream *s, const dt__krec *k, uint64_t seq);

#endif /* DT_CORE_TRACE_LOWER_H */
