/*
 * The controller's thread (executor.c): started by dt_graph_create
 * (core/api/graph_life.c) with the graph as its argument; returns after the
 * STOP node, once its workers have stopped.
 */
#ifndef DT_CORE_CONTROLLER_H
#define DT_CORE_CONTROLLER_H

#include "core/core.h"

void *dt__controller_main(void *arg);

/* While a test holds the controller (dt_debug_hold_controller), waits;
 * returns at once otherwise (debug_lower.c). */
void dt__debug_wait_held(dt_graph *g);

#endif /* DT_CORE_CONTROLLER_H */
