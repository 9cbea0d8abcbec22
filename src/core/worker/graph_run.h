/*
 * CUDA graphs of run slots (core/worker/graph_run.c; docs/decisions.md,
 * "CUDA graphs of repeated run slots"): a worker whose backend captures
 * (dt__backend.graph_begin) records a repeated run slot's kernels once and
 * launches them on later sightings. Opt-in: the graph's `cuda_graph`
 * switch (DTORCH_CUDA_GRAPH=1, dt_graph_set_cuda_graph).
 *
 * Threads: the stream's worker, but dt__graphs_free (the controller, after
 * the worker has stopped).
 */
#ifndef DT_CORE_GRAPH_RUN_H
#define DT_CORE_GRAPH_RUN_H

#include "core/records/step.h"
#include "core/worker/stream.h"

/* Run slot `d` of st on s by a graph when it can: 1 with given[i] image i's
 * static output (the caller hands out a share of it as image i's output,
 * dt__backend.graph_share, and completes each kernel as if it had run);
 * 0: the caller runs the slot's kernels one by one. Waits for the inputs
 * from other streams first either way. */
int dt__graph_slot(dt__step *st, int d, dt__stream *s, void **given);
/* Frees what s's worker captured (dt__stream_free). */
void dt__graphs_free(dt__stream *s);

#endif /* DT_CORE_GRAPH_RUN_H */
