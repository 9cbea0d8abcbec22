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

/* The segment of run slot `d` of st on s that starts at image a, ending
 * at *b: by a graph when it can, 1 with given[i] image a + i's static
 * output (the caller hands out a share of it as that image's output,
 * dt__backend.graph_share, and completes each kernel as if it had run);
 * 0: the caller runs the segment's kernels one by one. A segment ends
 * before an image that reads what another stream makes (its first image
 * excepted) or that is never captured; the segment's inputs from other
 * streams are waited for first. With graphs off, *b is the slot's end. */
int dt__graph_slot(dt__step *st, int d, dt__stream *s, int a, int *b, void **given);
/* Frees what s's worker captured (dt__stream_free). */
void dt__graphs_free(dt__stream *s);

#endif /* DT_CORE_GRAPH_RUN_H */
