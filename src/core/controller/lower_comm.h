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
#include "core/records/kernel_rec.h"

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
/* The streams and groups of one mesh dim for collectives (controller):
 * every coordinate of the other mesh dims is one group of the dim's
 * devices in coordinate order, as dt__lw_group makes it. Cached with the
 * graph (keyed by the mesh's uid, the dim and the streams' kind) until its
 * groups are retired, so a collective looks its streams and groups up once
 * per mesh, not once per rank. Read-only for the caller but for the
 * sequence numbers (dt__lw_coll_seq). */
typedef struct dt__lw_cdim {
    int n;                  /* the mesh's devices */
    int ng;                 /* groups: n / the dim's size */
    int kind;               /* the streams' actual kind (DTORCH_OVERLAP=0: compute) */
    struct dt__stream **ss; /* n: mesh device d's stream of that kind */
    const dt__backend **be; /* n: its backend */
    int *rank;              /* n: device d's rank in its group (its coordinate on the dim) */
    int *gi;                /* n: device d's group, in the order of the groups' first devices */
    uint64_t *id;           /* ng: each group's id */
    uint64_t **seq;         /* ng: each group's last sequence number (the cache's counter) */
} dt__lw_cdim;

/* Mesh dim md's streams of `stream_kind` and groups (made on first use);
 * NULL with L->status set when a stream or group cannot be made, NULL
 * without when the mesh has a worker node's device (the per-rank path
 * then makes and reports what it needs). */
const dt__lw_cdim *dt__lw_coll_dim(dt__lower *L, const dt_mesh *mesh, int md, int stream_kind);

/* Group gi's next sequence number (its id in *id), as dt__lw_group numbers. */
static inline uint64_t dt__lw_coll_seq(const dt__lw_cdim *cd, int gi, uint64_t *id) {
    *id = cd->id[gi];
    return ++*cd->seq[gi];
}

/* A collective over mesh dim md of `mesh` on every group at once (each
 * coordinate of the other dims its own group), as one shared record
 * (lower_coll.c): c describes every group's ranks (the caller found the
 * groups alike: the same bytes packed but for the group and number; c stays
 * the caller's), the input is blob group `in` (a value's blobs on every
 * device of the mesh; the caller's hold moves into the record), the output
 * a new group in *out (one hold, the caller's). Returns 1 when it took the
 * collective (on a failure L->status is set, *out untouched and the caller
 * keeps its hold), 0 when the caller lowers it per group (nothing made or
 * numbered): the switch off, blob groups off, a mesh not shared, another
 * comm or kind, more attributes than a worker instantiates. */
struct dt__bgroup;
int dt__lw_coll_groups(dt__lower *L, const dt_mesh *mesh, int md, int stream_kind, const dt__coll *c,
                       struct dt__bgroup *in, struct dt__bgroup **out, const char *opname);

/* A collective replay template (docs/decisions.md, "A collective replayed
 * as its record"): what dt__lw_coll_groups packed for a node whose whole
 * lowering was that one shared record, reading the node's input 0 and
 * making its output. The attributes' first 16 bytes (the first group's id
 * and sequence number) are renumbered at each replay, as are the slots'. */
typedef struct dt__coll_tpl {
    int md, stream_kind;
    uint32_t alen;
    uint8_t attr[DT__KATTR_PACK_MAX];
} dt__coll_tpl;

/* Node n's collective as template t says, without lowering it: n's
 * signature is t's capture's (replay.c checked it). Returns 1 when it took
 * the node (L->status set on a failure), 0 when what the signature does not
 * hold forbids it now (the switches, a tap, explain or traces, an input an
 * earlier failure left without blobs): the caller lowers the node. */
int dt__lw_coll_replay(dt__lower *L, const dt__node *n, const dt__coll_tpl *t);

/* v's blobs as one group (dt__lw_group_of: made from its per-device blobs
 * when it has none, blob groups on); NULL when there is none to be had
 * (groups off, a missing blob, out of memory). */
struct dt__bgroup *dt__lw_group_of_all(struct dt_graph *g, dt__tval *v);
/* A group of blobs[0..n) (one reference each, which move into it) when blob
 * groups are on and none is missing; NULL otherwise (nothing taken). */
struct dt__bgroup *dt__lw_adopt(struct dt_graph *g, dt__blob *const *blobs, int n);
/* Drops a hold on group gr; the last lets go of its members through the
 * controller's dead lists, as a value freed does (core/client/tensor.c). */
void dt__lw_group_drop(struct dt_graph *g, struct dt__bgroup *gr);

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
