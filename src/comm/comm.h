/*
 * The communication interface (collective.c): groups of devices and the
 * collectives their ranks run together, and the attributes a collective
 * kernel carries instead of pointers.
 */
#ifndef DT_COMM_H
#define DT_COMM_H

#include "core/records/kernel_rec.h"

/* A collective kernel's attributes, as read from its record (kernel_codec.c):
 * the per-rank arrays stay in the record, little-endian (dt__collattr_at). */
typedef struct dt__collattr {
    uint64_t group, seq; /* the comm's group; the collective's number in it */
    int kind, ndim, dim_a, dim_b, n;
    int type; /* the device type whose comm holds the group */
    dt_dtype dtype;
    const uint8_t *shapes; /* n * ndim: each rank's input shape */
    const uint8_t *starts; /* n: each rank's range along dim_b (sliced kinds) */
    const uint8_t *lens;
} dt__collattr;
/* Entry i of one of a dt__collattr's arrays. */
int64_t dt__collattr_at(const uint8_t *arr, size_t i);
/* 0 when `len` bytes hold well-formed collective attributes (a filled,
 * its arrays pointing into buf). */
int dt__collattr_parse(const uint8_t *buf, size_t len, dt__collattr *a);
/* Reads a DT_KC_COLLECTIVE record's attributes. */
void dt__collattr_read(const dt__krec *k, dt__collattr *a);

/* The communication interface (collective.c): how the ranks of a group run
 * one collective. A group is an ordered set of devices, made by
 * group_create; every rank's worker calls run with the same (group, seq) for
 * one collective and its own input; run leaves the result (or an error) in
 * `out`. An `out` that already carries an error (a cancelled kernel) still
 * meets its peers and computes nothing. A point-to-point copy
 * (DT_COLL_SENDRECV) is a run of a 2-rank group: the sender's `in` is the
 * piece and its `out` NULL, the receiver's `in` NULL and its `out` gets the
 * copy (staged through host memory when the two blobs' backends differ). The
 * in-process back end meets the peers in memory; a NCCL one (issue 12) or a
 * ZeroMQ one (issue 13) fills the same slots. */
typedef struct dt__comm dt__comm;
typedef struct dt__comm_ops {
    const char *name;
    dt__comm *(*create)(dt_device_type type);
    /* After every worker has stopped: frees the comm and any group left. */
    void (*destroy)(dt__comm *c);
    /* Any thread. */
    dt_status (*group_create)(dt__comm *c, int n, const int64_t *device_ids, uint64_t *group);
    void (*group_destroy)(dt__comm *c, uint64_t group);
    /* A worker: rank `rank`'s part of collective a->seq of group a->group. */
    void (*run)(dt__comm *c, const dt__collattr *a, int rank, dt__blob *in, dt__blob *out,
                const char *opname);
} dt__comm_ops;

struct dt__comm {
    const dt__comm_ops *ops;
    dt_device_type type;
    /* Device ids are global; this process's device 0 is id first_id (a
     * worker node's CUDA devices: the graph's first_id). Set by
     * dt__graph_comm before the comm is used. */
    int64_t first_id;
};

extern const dt__comm_ops dt__comm_inproc;
/* Group `group` of comm c is the main node's group `key` of the graph
 * tagged `tag` (core/controller/remote.h); its first rank's device is of type t0, its
 * last rank's of t1, the others of t0 (they differ only for a copy between
 * device types, which the CPU comm holds). When some of its devices are not
 * this process's (dt__xfer_is_local), its collectives meet this process's
 * ranks in memory and exchange data with the other nodes' ranks by
 * messages (comm/xfer.h, coll_span.c): staged through host memory, CUDA
 * devices too. Call before its first collective; no-op for other back
 * ends and when every device is local. */
dt_status dt__comm_group_span(dt__comm *c, uint64_t group, uint32_t tag, uint64_t key, int t0, int t1);
/* The NCCL back end (comm_nccl.c), and whether it can serve cuda meshes now. */
extern const dt__comm_ops dt__comm_nccl;
int dt__comm_nccl_usable(void);
/* dt__comm_group_span for the NCCL comm: its group `group` spanning nodes
 * uses NCCL across them when the main node shipped a unique id for (tag,
 * key) (comm/span_nccl.h), else stages through host memory. */
dt_status dt__comm_nccl_span(dt__comm *c, uint64_t group, uint32_t tag, uint64_t key, int t0, int t1);
/* The back end for collectives among devices of `type`. */
const dt__comm_ops *dt__comm_for(dt_device_type type);
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
 * graph until it ends (collective.c); 0 with L->status set on failure.
 * *seq gets the group's next sequence number. */
uint64_t dt__lw_group(dt__lower *L, const dt_mesh *mesh, int64_t base, int64_t stride, int n, int stream_kind,
                      uint64_t *seq);
/* The next sequence number of g's collective group `id` (replay.c: a
 * replayed collective takes a fresh one, as dt__lw_group would); 0 when g
 * has no such group. Controller thread. */
uint64_t dt__graph_group_next_seq(struct dt_graph *g, uint64_t id);
#endif /* DT_COMM_H */
