/*
 * Test gates (gate.c): the gate object that gated values' kernels wait on
 * (dt_debug_gate_* in the public header). The controller lowers a gated
 * value (core/controller/debug_lower.c), a worker runs its kernels
 * (core/worker/kernel_run.c), nodes and kernel records hold references.
 * Each declaration says its thread.
 */
#ifndef DT_CORE_GATE_H
#define DT_CORE_GATE_H

#include "core/core.h"

/* A live gate handle (not released by its creator). Any thread. */
int dt__debug_gate_ok(const dt_debug_gate *gate);
/* One more reference (a node's or a kernel's); returns gate. Any thread. */
dt_debug_gate *dt__debug_gate_retain(dt_debug_gate *gate);
/* Drops a reference taken by dt__debug_gate_retain (a dt_debug_gate *,
 * void * for the records that hold it untyped). Any thread. */
void dt__debug_gate_unref(void *gate);
/* Worker: sleeps until the gate opens or *bypassed is set (the graph's
 * shutdown, dt__debug_gates_bypass). */
void dt__debug_gate_wait(dt_debug_gate *gate, const atomic_int *bypassed);
/* Shutdown or cancel (client thread): g's gate kernels stop waiting. */
void dt__debug_gates_bypass(dt_graph *g);

/* fork(): takes (1) or drops (0) the list of live gates' lock (src/init.c). */
void dt__debug_fork_lock(int lock);
/* A gate kernel or node dropped unrun: its reference goes. */
void dt__debug_gate_drop(dt__krec *k);
/* The DEBUG_GATE node's discard (the op table's column): its gate
 * reference, when g was cancelled before it was lowered (controller). */
void dt__debug_node_drop(dt_graph *g, dt__node *n);

#endif /* DT_CORE_GATE_H */
