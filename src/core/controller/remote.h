/*
 * Remote streams (docs/decisions.md, "Remote streams: the first working increment"): the streams of a worker
 * node's devices. The controller lowers onto them as onto any stream; at the flush (dt__remote_flush) each
 * worker node's kernels of the round leave, in order, as one batch (the kernel codec's bytes plus the values
 * they read that the node does not hold), and the node's sub-controller (src/net/subctl.c) runs them on its
 * own streams. A read (FETCH) comes back as the piece's bytes, a sync as its arrivals; both complete the main
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
 * nodes) never waits: the value carries the error that
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
#include "core/records/cluster_port.h"

/* Controller: ships the dirty remote streams' batches (each worker node's
 * streams together) and takes them off g->dirty. */
void dt__remote_flush(struct dt_graph *g);
/* Controller, when its streams stop: completions of g's batches that come
 * later touch nothing of g. */
void dt__remote_detach(struct dt_graph *g);

/* Controller: g's name on the worker nodes (made on first use). */
uint32_t dt__remote_tag(struct dt_graph *g);

#endif /* DT_CORE_REMOTE_H */
