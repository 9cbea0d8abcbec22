/*
 * A worker node's sub-controller (subctl.c): runs the main node's kernel
 * batches (core/controller/remote.h for their layout) on this process's own streams,
 * one compute and one communication stream per device, through a graph of
 * the main node's backend; keeps the values the main node names; and hands
 * back each completed read or sync as a RESULT message.
 *
 * Threads: every function runs on the node's thread (node.c), which stands
 * in for the graph's controller (no op is ever recorded on that graph).
 * Completions arrive on the graph's workers; they queue the result under
 * the sub-controller's own lock and write a byte to a pipe, whose reading
 * end the node polls (dt__subctl_fd), so nothing waits by spinning.
 */
#ifndef DT_NET_SUBCTL_H
#define DT_NET_SUBCTL_H

#include "net/wire.h"

typedef struct dt__subctl dt__subctl;

/* A sub-controller whose CUDA devices are the global ids from
 * `cuda_first` (its graph runs them as local devices id - cuda_first).
 * NULL (thread error set) when memory or the pipe cannot be had. */
dt__subctl *dt__subctl_new(int64_t cuda_first);
/* Finishes the work handed over, then frees everything. */
void dt__subctl_free(dt__subctl *x);
/* Readable when results wait (drained by dt__subctl_next). */
int dt__subctl_fd(const dt__subctl *x);
/* Decodes and starts one batch (the extra frame of a BATCH message) on
 * `backend`. A malformed batch or one this node cannot run is an error
 * (thread error set): nothing of it runs. */
dt_status dt__subctl_batch(dt__subctl *x, const char *backend, const void *body, size_t len);
/* The batch last given to dt__subctl_batch could not run (`why`, naming
 * this node): from now on a kernel of its graph that reads a value this
 * node does not hold (one the failed batch would have made) reads a value
 * failed with `why` instead of making its whole batch fail to decode. */
void dt__subctl_failed(dt__subctl *x, const char *why);
/* Records this node's kernels while `on` (the main node traces: the BATCH
 * says so): each sync's RESULT then carries the records made since the
 * last one as its extra frame, little-endian:
 *   trace  := u32 n kernel[n]
 *   kernel := u64 stream_key u64 seq i64 begin_ns i64 end_ns i64 bytes
 *             i32 line text op text kernel text file
 *   text   := u16 len u8 bytes[len]
 * stream_key is core/records/trace.h's, with the global device id; times
 * are this node's clock (the one its heartbeats read). */
void dt__subctl_trace(dt__subctl *x, int on);
/* Drops the values a RELEASE message names (malformed: ignored). */
void dt__subctl_release(dt__subctl *x, const void *body, size_t len);
/* The next completed read or sync as a RESULT message; a read's piece, or
 * a sync's kernel records while tracing (dt__subctl_trace), goes into
 * *payload (dt__malloc'd, *plen bytes; NULL when none). 0 when nothing
 * waits. */
int dt__subctl_next(dt__subctl *x, dt__wire_msg *m, void **payload, size_t *plen);

#endif /* DT_NET_SUBCTL_H */
