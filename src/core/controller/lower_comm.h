/*
 * The controller's side of collectives (lower_comm.c): each graph's comm per
 * device type, its cache of groups, and the lowering helpers that queue a
 * collective's or a point-to-point copy's kernels. Controller thread unless
 * a declaration says otherwise.
 */
#ifndef DT_CORE_LOWER_COMM_H
#define DT_CORE_LOWER_COMM_H

#include "comm/comm.h"
#include "core/core.h"

/* g's comm for `type`, made on first use (any thread); NULL when out of
 * memory. */
dt__comm *dt__graph_comm(struct dt_graph *g, dt_device_type type);
/* Makes g's later collectives make new groups (controller): a group
 * records which of its ranks are this process's when made, and a worker
 * node that registered since may hold some (dt__graph_streams_recheck).
 * The groups stay until dt__graph_comm_free: kernels in flight use them. */
void dt__graph_groups_retire(struct dt_graph *g);
/* Destroys g's groups and comms (controller, after the streams stopped). */
void dt__graph_comm_free(struct dt_graph *g);
/* The devices of group `id` of g's cache (controller): 0 when unknown. */
int dt__graph_group_info(struct dt_graph *g, uint64_t id, int *type, int *n, const int64_t **device_ids);
/* The device types of group `id`'s first and last ranks (the others are
 * t0's) (controller): 0 when unknown. */
int dt__graph_group_types(struct dt_graph *g, uint64_t id, int *t0, int *t1);

/* Queues a point-to-point copy of `piece` (a blob of mesh device sidx of
 * smesh, of `ndim` dims `shape`) to device didx of dmesh: a send kernel on
 * the source's communication stream and the matching receive on the
 * destination's, under the next sequence number of the pair's 2-rank group
 * (made on first use and cached as dt__lw_group's; between device types it
 * lives in the CPU comm, the host memory the copy stages through). The
 * piece's reference moves in. Returns the received blob (the destination
 * backend's; one reference for the caller), or NULL with L->status set. */
dt__blob *dt__lw_send_recv(dt__lower *L, const dt_mesh *smesh, int64_t sidx, const dt_mesh *dmesh,
                           int64_t didx, dt__blob *piece, int ndim, const int64_t *shape, dt_dtype dtype);

/* The comm group of mesh devices base + r * stride (r < n) for collectives
 * on their `stream_kind` streams, made on first use and cached with the
 * graph until it ends (lower_comm.c); 0 with L->status set on failure.
 * *seq gets the group's next sequence number. */
uint64_t dt__lw_group(dt__lower *L, const dt_mesh *mesh, int64_t base, int64_t stride, int n, int stream_kind,
                      uint64_t *seq);
/* The next sequence number of g's collective group `id` (replay.c: a
 * replayed collective takes a fresh one, as dt__lw_group would); 0 when g
 * has no such group. Controller thread. */
uint64_t dt__graph_group_next_seq(struct dt_graph *g, uint64_t id);
/* Group `id` of g's cache for the kernel codec (dt__kgroup_fn,
 * core/records/kernel_rec.h): its comm's device type, ranks, devices and
 * first and last ranks' device types; 0 when unknown. */
int dt__graph_group_lookup(void *g, uint64_t id, int *type, int *n, const int64_t **device_ids, int *t0,
                           int *t1);

#endif /* DT_CORE_LOWER_COMM_H */
