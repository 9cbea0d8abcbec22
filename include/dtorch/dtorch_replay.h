/*
 * dtorch capture and replay: the controller's cache of lowered nodes
 * (docs/decisions.md, "Replay"; src/core/controller/replay.c). Include after or instead
 * of dtorch.h (it includes it).
 */
#ifndef DTORCH_REPLAY_H
#define DTORCH_REPLAY_H

#include "dtorch/dtorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Turns g's capture and replay on (1, the default unless DTORCH_REPLAY=0
 * was set when g was made) or off (0), for the controller rounds that start
 * afterwards: a node with the signature of one lowered before (op,
 * attributes, input and output layouts, which inputs share a blob) gets
 * copies of that node's kernels bound to its own values instead of a
 * lowering. Results are the same either way. DT_EINVAL for a bad graph.
 * Any thread. */
DT_API dt_status dt_graph_set_replay(dt_graph *g, int on);

/* Turns g's device-independent records on (1, the default unless
 * DTORCH_BCAST=0 was set when g was made) or off (0), for the controller
 * rounds that start afterwards: a node whose kernel is the same on every
 * device of its mesh but for the device's own blobs (elementwise ops on
 * inputs laid out as their output, matmuls on each device's own blocks,
 * norms, softmax, attention on each device's heads, views, a slice write,
 * reductions along unsharded dims) is lowered once, into one record every
 * device's worker instantiates, instead of one record per device. Results
 * are the same either way. DT_EINVAL for a bad graph. Any thread. */
DT_API dt_status dt_graph_set_bcast(dt_graph *g, int on);

/* Turns on (1, the default unless DTORCH_BGROUP=0 was set when g was made)
 * or off (0) blob groups: a device-independent record makes a fresh value's
 * blobs on every device as one group, which the value and each shared
 * record that reads it hold once, not once per device. Results and memory
 * accounting are the same either way. DT_EINVAL for a bad graph. Any
 * thread. */
DT_API dt_status dt_graph_set_bgroup(dt_graph *g, int on);

/* Turns on (1, the default unless DTORCH_STEP=0 was set when g was made)
 * or off (0) runs of device-independent records: consecutive ones on one
 * mesh are one record with one slot per device, linked when the run ends,
 * instead of a slot per device per node. Needs blob groups. Results and
 * memory accounting are the same either way. DT_EINVAL for a bad graph.
 * Any thread. */
DT_API dt_status dt_graph_set_step(dt_graph *g, int on);

/* g's runs of device-independent records so far (each one record with a
 * slot per device); -1 for a bad graph. Any thread. */
DT_API int64_t dt_debug_step_runs(dt_graph *g);

/* Turns on (1) or off (0, the default unless DTORCH_CUDA_GRAPH=1 was set
 * when g was made) CUDA graphs of repeated run slots: a worker whose
 * backend captures (the CUDA shim; the CPU one only under
 * DTORCH_GRAPH_EMULATE=1, a test emulation) records a run slot whose
 * kernels and inputs' layouts repeat, on its second sighting, and launches
 * it on later ones (docs/cuda.md; not yet run on a GPU). Results are the
 * same either way. DT_EINVAL for a bad graph. Any thread. */
DT_API dt_status dt_graph_set_cuda_graph(dt_graph *g, int on);

/* g's run slots captured as graphs, launched from a capture, and run
 * eagerly while graphs were on (each a slot on one device). Any thread. */
DT_API dt_status dt_debug_graph_stats(dt_graph *g, int64_t *captured, int64_t *launched, int64_t *eager);

/* Test use: the event of t's blob on device `device` of its mesh (index
 * 0 .. size - 1), after dt_graph_sync: *kind, the kind of stream whose
 * kernel makes it (0 compute, 1 communication; -1: made by the controller,
 * ready at once), *device_id that stream's device and *seq the kernel's
 * number on it (0 with -1). What runs of device-independent records must
 * keep equal to one record per device per node. DT_EINVAL for a bad
 * tensor, device or NULL argument, or a value with no blob there (never
 * computed); a failed sync's status. Client threads. */
DT_API dt_status dt_debug_event(dt_tensor *t, int64_t device, int *kind, int64_t *device_id, uint64_t *seq);

/* g's device-independent records so far (nodes lowered that way); -1 for a
 * bad graph. Any thread. */
DT_API int64_t dt_debug_bcast_nodes(dt_graph *g);
/* g's collectives lowered as one device-independent record (all ranks'
 * kernels one record, each worker instantiating its rank); -1 for a bad
 * graph. Any thread. */
DT_API int64_t dt_debug_bcast_collectives(dt_graph *g);

/* Test use: from now on g's workers note each collective kernel they run
 * or drop (its stream, group, sequence number and rank; up to `cap`, the
 * earlier notes forgotten), for a test that compares what ranks meet with
 * device-independent records on and off. Call with no work of g in flight
 * (after dt_graph_sync). DT_EINVAL for a bad graph or cap < 1, DT_ENOMEM.
 * Client thread. */
DT_API dt_status dt_debug_coll_log(dt_graph *g, int cap);
/* Note i (0 ..) of dt_debug_coll_log, after dt_graph_sync: the device and
 * kind of the stream (0 compute, 1 communication) whose worker ran it, the
 * comm group's id, the collective's sequence number in it and the rank.
 * Notes of one stream are in its order; streams interleave. Returns the
 * notes taken (at most cap) with i out of range, or -1 for a bad graph or
 * none asked for. Client thread. */
DT_API int64_t dt_debug_coll_noted(dt_graph *g, int64_t i, int64_t *device_id, int *stream_kind,
                                   uint64_t *group, uint64_t *seq, int *rank);

/* g's replay counters: *hits, nodes whose kernels were replayed; *misses,
 * nodes the cache could hold that were lowered (first sightings, and
 * lowerings that cannot be replayed). Each read atomically. DT_EINVAL for
 * NULL arguments. Any thread. */
DT_API dt_status dt_graph_get_replay_stats(dt_graph *g, int64_t *hits, int64_t *misses);

/* g's replayed nodes (of *hits above) that the run found: the node's
 * signature was that of the template which followed the previous node's
 * last time, so no hash or table probe was needed; -1 for a bad graph. Any
 * thread. */
DT_API int64_t dt_debug_replay_run_hits(dt_graph *g);

/* Test and benchmark use: CPU time g's controller thread has used so far,
 * in nanoseconds (its CLOCK_THREAD_CPUTIME_ID, read from the calling
 * thread); -1 for a bad graph, a controller that has exited, or a platform
 * without per-thread clocks. Any thread. */
DT_API int64_t dt_debug_controller_cpu_ns(dt_graph *g);

/* Test and benchmark use: turns timing of the controller's lowering step
 * (lowering or replaying each node, CLOCK_MONOTONIC) on (on != 0) or off
 * for the nodes lowered afterwards, and returns the nanoseconds timed so far
 * (-1 for a bad graph). Off costs one relaxed load per node. Any thread. */
DT_API int64_t dt_debug_lowering_ns(dt_graph *g, int on);

#ifdef __cplusplus
}
#endif

#endif /* DTORCH_REPLAY_H */
