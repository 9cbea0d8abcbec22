/*
 * Test-only hooks (debug.c): debug gates that hold kernels, holding the
 * controller, and the fork-safety helpers of the debug module's locks. For
 * debug.c, the controller (executor.c, lower.c), the workers
 * (kernel_run.c, kernel_rec.c) and graph.c; each declaration says its
 * thread.
 */
#ifndef DT_CORE_DEBUG_H
#define DT_CORE_DEBUG_H

#include "core/core.h"

/* Runs a DT_KC_GATE kernel (worker thread): sleeps until its gate opens or
 * its graph shuts down, then sets k->out to a copy of k->in[0]. */
void dt__debug_gate_run(dt__krec *k, dt__stream *s);
/* Lets g's kernels waiting at gates through, and any that reach a gate
 * later, without opening the gates for other graphs (dt_graph_shutdown,
 * before it joins the workers, so a forgotten gate cannot hang a shutdown).
 * Any thread. */
void dt__debug_gates_bypass(dt_graph *g);
/* Drops one reference to a gate (a discarded gate kernel's). */
void dt__debug_gate_unref(void *gate);

/* Controller: waits while a test holds it (dt_debug_hold_controller), until
 * released or the graph shuts down. */
void dt__debug_wait_held(dt_graph *g);

/* Atfork helpers: take (1) or drop (0) every global lock of a module, so a
 * fork never copies one held by another thread. */
void dt__debug_fork_lock(int lock);
/* A dropped gate kernel's gate reference (debug.c). */
void dt__debug_gate_drop(dt__krec *k);
/* The DEBUG_GATE node's discard (the op table's column): its gate
 * reference, when g was cancelled before it was lowered (controller). */
void dt__debug_node_drop(dt_graph *g, dt__node *n);

#endif /* DT_CORE_DEBUG_H */
