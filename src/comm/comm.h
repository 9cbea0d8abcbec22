/*
 * The communication interface: the back ends (in-process, inproc.c; NCCL,
 * nccl.c; spanning nodes, span.c and xfer.c) that run the collectives a
 * group's ranks meet in. A layer of its own below the worker, which runs
 * collectives through it; the controller keeps each graph's groups
 * (core/controller/lower_comm.h).
 */
#ifndef DT_COMM_H
#define DT_COMM_H

#include "core/records/kernel_rec.h"

/* How the ranks of a group run
 * one collective. A group is an ordered set of devices, made by
 * group_create; every rank's worker calls run with the same (group, seq) for
 * one collective and its own input; run leaves the result (or an error) in
 * `out`. An `out` that already carries an error (a cancelled kernel) still
 * meets its peers and computes nothing. A point-to-point copy
 * (DT_COLL_SENDRECV) is a run of a 2-rank group: the sender's `in` is the
 * piece and its `out` NULL, the receiver's `in` NULL and its `out` gets the
 * copy (staged through host memory when the two blobs' backends differ). The
 * in-process back end meets the peers in memory; the NCCL one fills the same
 * slots. */
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
 * messages (comm/xfer.h, span.c): staged through host memory, CUDA
 * devices too. Call before its first collective; no-op for other back
 * ends and when every device is local. */
dt_status dt__comm_group_span(dt__comm *c, uint64_t group, uint32_t tag, uint64_t key, int t0, int t1);
/* The NCCL back end (nccl.c), and whether it can serve cuda meshes now. */
extern const dt__comm_ops dt__comm_nccl;
int dt__comm_nccl_usable(void);
/* dt__comm_group_span for the NCCL comm: its group `group` spanning nodes
 * uses NCCL across them when the main node shipped a unique id for (tag,
 * key) (comm/span_nccl.h), else stages through host memory. */
dt_status dt__comm_nccl_span(dt__comm *c, uint64_t group, uint32_t tag, uint64_t key, int t0, int t1);
/* The back end for collectives among devices of `type`. */
const dt__comm_ops *dt__comm_for(dt_device_type type);
#endif /* DT_COMM_H */
