/*
 * The controller's thread (executor.c): started by dt_graph_create
 * (core/api/graph_life.c) with the graph as its argument; returns after the
 * STOP node, once its workers have stopped.
 */
#ifndef DT_CORE_CONTROLLER_H
#define DT_CORE_CONTROLLER_H

void *dt__controller_main(void *arg);

#endif /* DT_CORE_CONTROLLER_H */
