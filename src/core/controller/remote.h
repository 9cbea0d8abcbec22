/*
 * Remote streams (issue 13): the streams of a worker node's devices. The
 * controller lowers onto them as onto any stream; at the flush
 * (dt__remote_flush) each worker node's kernels of the round leave, in
 * order, as one batch (the kernel codec's bytes plus the values they read
 * that the node does not hold), and the node's sub-controller
 * (src/net/subctl.c) runs them on its own streams. A read (FETCH) comes back
 * as the piece's bytes, a sync as its arrivals; both complete the main
 * node's future on the cluster thread (src/net/cluster.c). A value a node
 * holds is released there when its last reference here goes.
 *
 * A SLICE of a host value (a from_torch source) ships as its region only:
 * the main node slices it and the kernel slices that piece whole. Each
 * batch ends in a SYNC on each of its streams, all completing one future
 * whose completion retires the batch's kernels from the backlog, so the
 * backlog bound covers kernels queued on a node (dt_cluster_counters_get
 * counts them, and the host bytes shipped).
 *
 * A remote stream has no worker thread here and its completed count is all
 * ones, so a local kernel that reads a worker node's value (a copy between
 * nodes, issue 13 item 3) never waits: the value carries the error that
 * says where it lives, and the local kernel's output inherits it.
 *
 * The bytes of the extra frame of a BATCH message (net/wire.h),
 * little-endian:
 *   body := u32 tag u32 nput put* u64 klen u8 kbatch[klen]
 *   put  := u64 id i32 dtype u32 ndim i64 shape[ndim] u32 elen u8 error[elen]
 *           u64 nbytes u8 data[nbytes]
 * `tag` names the main node's graph (blob ids are per graph); a put is a
 * value the batch reads and the node does not hold: a host value (its
 * bytes) or a failed one (its error, elen > 0, no bytes). Of a RELEASE
 * message: u32 n (u32 tag u64 id)*n. Of a RESULT message with a piece:
 *   piece := i32 dtype u32 ndim i64 shape[ndim] u8 data[...]
 *
 * Threads: dt__remote_flush on the controller; the dt__cluster_* calls as
 * each says.
 */
#ifndef DT_CORE_REMOTE_H
#define DT_CORE_REMOTE_H

#include "core/core.h"

/* Controller: ships the dirty remote streams' batches (each worker node's
 * streams together) and takes them off g->dirty. */
void dt__remote_flush(struct dt_graph *g);
/* Controller, when its streams stop: completions of g's batches that come
 * later touch nothing of g. */
void dt__remote_detach(struct dt_graph *g);

/* Controller: g's name on the worker nodes (made on first use). */
uint32_t dt__remote_tag(struct dt_graph *g);

/* ---- src/net/cluster.c (cluster_none.c without ZeroMQ) ---- */

/* The worker node serving device (type, id): its index, or -1 for a device
 * of this process (no cluster, or the main node's own). Any thread. */
int dt__cluster_node_of(dt_device_type type, int64_t id);
/* Moves when worker nodes register and when a cluster ends: ids a graph
 * ran here may be a worker node's now, or this process's again, and the
 * controller checks its streams (dt__graph_streams_recheck). Any thread. */
uint64_t dt__cluster_generation(void);
/* A collective of a batch whose group spans nodes (the group's key and
 * the collective's number, as its DATA messages name them with the
 * batch's tag). */
typedef struct dt__span_key {
    uint64_t group, seq;
} dt__span_key;
/* Ships a batch body (layout above; dt__malloc'd, taken over) to worker
 * node `node` on graph backend `backend`, with the `n` futures its FETCH
 * and SYNC kernels complete, counts[i] kernels naming futs[i] (one
 * reference each, taken over), and the `nkeys` collectives spanning nodes
 * among its kernels (`keys`, dt__malloc'd or NULL, taken over; graph tag
 * `tag`): if the node cannot run the batch, the waits of every node for
 * those collectives' parts from its ranks fail. A node that is not alive
 * fails the reads among them at once with its error, and lets the syncs
 * (futures without pieces) through. Controller thread. */
void dt__cluster_ship(int node, const char *backend, void *body, size_t len, struct dt_future **futs,
                      const int *counts, int n, uint32_t tag, dt__span_key *keys, int nkeys);
/* A cuda group `key` of graph `tag` over devices ids[n] was just made:
 * when some of them are worker nodes' and NCCL can serve every process
 * holding a rank (comm/span_nccl.h), makes its NCCL unique id, keeps it
 * here and queues it to each of those nodes ahead of any batch queued
 * later; 1 then, else 0 (host staging). Controller thread. */
int dt__cluster_span_nccl(uint32_t tag, uint64_t key, int n, const int64_t *ids);
/* DATA chunks the main node relayed between two worker nodes (any
 * thread; dt_cluster_counters). */
int64_t dt__cluster_relayed(void);
/* Value `id` of graph `tag` held by worker node `node` is no longer needed
 * here (any thread; it leaves with the node's next message). */
void dt__cluster_release(int node, uint32_t tag, uint64_t id);

#endif /* DT_CORE_REMOTE_H */
