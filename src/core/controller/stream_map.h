/*
 * The graph's stream map (stream_map.c): the controller finds, starts,
 * rechecks and stops a graph's worker streams here. Controller thread,
 * except where a declaration says otherwise.
 */
#ifndef DT_CORE_STREAM_MAP_H
#define DT_CORE_STREAM_MAP_H

#include "core/core.h"

/* The stream map (controller thread): the stream of (type, id,
 * kind), started on first use; NULL with the thread error set on failure. */
dt__stream *dt__graph_stream(struct dt_graph *g, dt_device_type type, int64_t id, int kind);
/* The cluster changed since g last looked (dt__cluster_generation): each
 * stream of a device now served elsewhere is retired -- a local one whose
 * id a worker node registered, a remote one whose node the cluster no
 * longer has (it ended) -- out of the map: new work on the id goes where it
 * is served now, as in a graph made then; the values it made stay where
 * they are, read there. g's collective groups are retired too (a group
 * records which ranks are this process's).
 * Returns the number retired: the caller drops what names those streams
 * (the replay cache). Controller thread, between rounds. */
int dt__graph_streams_recheck(struct dt_graph *g);
/* Stops every stream, oldest first, and frees the map (controller, at exit). */
void dt__graph_streams_stop(struct dt_graph *g);

/* ------------------------------------------------ test-only stream hooks */

/* Test-only: serves device type `type` on g with `be` (for a C test that
 * runs a second device type on a copy of the ref backend). Call right after
 * dt_graph_create, before any op on that type. */
void dt__graph_set_backend_for_test(dt_graph *g, dt_device_type type, const dt__backend *be);
/* Test-only: kernels run so far on stream (type, id, kind), and of those
 * collectives and cross-mesh assemblies; -1 when the stream does not exist.
 * Call only after dt_graph_sync with no op recorded since (it reads the
 * controller's map; the sync orders it). */
int dt__graph_debug_stream(dt_graph *g, dt_device_type type, int64_t id, int kind, long *run, long *comm);

#endif /* DT_CORE_STREAM_MAP_H */
