/*
 * The client's side of a graph (graph.c): submitting a node, flow control,
 * the client's checks, and the controller's side of the queue. The layout
 * and the state every role shares are core/records/graph_int.h. Any module
 * of the client layer or above may include it; each declaration says its
 * thread.
 */
#ifndef DT_CORE_GRAPH_H
#define DT_CORE_GRAPH_H

#include "core/core.h"

/* The backend serving device type `t` on g (any thread; graph_state.c). */
const dt__backend *dt__graph_be(const dt_graph *g, dt_device_type t);

/* Appends a node; DT_ESHUTDOWN (node untouched) once the graph is closed. */
dt_status dt__graph_submit(dt_graph *g, dt__node *n);

/* Checks a graph is usable and the mesh/meta are sane. */
dt_status dt__client_check_graph(dt_graph *g);
/* DT_EDEVICE (thread error naming the device) when g's backend cannot run on
 * every device of `mesh` (see dt_graph_satisfy). Client threads. */
dt_status dt__graph_check_mesh(const dt_graph *g, const dt_mesh *mesh);
/* A PlacementError message: "op: placements ... not accepted ...". */
dt_status dt__placement_error(const char *op, const dt__meta *const *ins, int nin, int mesh_dim,
                              const char *accepted, int fix_input, const dt_placement *fix);

/* Controller: waits until the queue holds something, then takes it whole
 * (oldest first); the closing batch ends in STOP. */
void dt__graph_wait_queue(dt_graph *g);
dt__node *dt__graph_take(dt_graph *g);
/* Controller: takes the dropped values (any order). Taken before the nodes
 * of the same round, so every node that reads one of them was pushed before
 * and is lowered first. */
dt__tval *dt__graph_take_releases(dt_graph *g);
/* Wakes the controller if it sleeps (after a push to the queue or the release
 * stack). */
void dt__graph_wake(dt_graph *g);

#endif /* DT_CORE_GRAPH_H */
