/*
 * The graph's interface (graph.c): what the client side and the other
 * modules call on a graph: submitting a node, flow control, the client's
 * checks, the backend per device type. The graph is opaque here; its layout
 * and the controller's side of the queue are graph_int.h. Any module may
 * include it; each declaration says its thread.
 */
#ifndef DT_CORE_GRAPH_H
#define DT_CORE_GRAPH_H

#include "core/core.h"

/* The backend serving device type `t` on g (any thread). */
const dt__backend *dt__graph_be(const dt_graph *g, dt_device_type t);
/* Bumped in the child of every fork() (graph.c): a graph whose fork_gen
 * differs was made by an ancestor process and has no threads here. */
extern _Atomic unsigned dt__fork_gen;
/* The error message for a failed dt__graph_submit status; returns st. */
dt_status dt__submit_error(dt_status st);

/* Appends a node; DT_ESHUTDOWN (node untouched) once the graph is closed. */
dt_status dt__graph_submit(dt_graph *g, dt__node *n);

#define DT_BACKLOG_MAX 32768
/* A client thread compares the backlog with DT_BACKLOG_MAX once every this
 * many submissions. */
#define DT_BACKLOG_STRIDE 64
/* Counts records leaving the pipeline and wakes a waiting client (any thread). */
void dt__backlog_done(dt_graph *g, long n);
/* Records in flight now: nodes pushed + kernels queued - nodes lowered -
 * kernels run (any thread; a snapshot). */
long dt__backlog(dt_graph *g);

/* Checks a graph is usable and the mesh/meta are sane. */
dt_status dt__client_check_graph(dt_graph *g);
/* DT_EDEVICE (thread error naming the device) when g's backend cannot run on
 * every device of `mesh` (see dt_graph_satisfy). Client threads. */
dt_status dt__graph_check_mesh(const dt_graph *g, const dt_mesh *mesh);
/* A PlacementError message: "op: placements ... not accepted ...". */
dt_status dt__placement_error(const char *op, const dt__meta *const *ins, int nin, int mesh_dim,
                              const char *accepted, int fix_input, const dt_placement *fix);

#endif /* DT_CORE_GRAPH_H */
