/*
 * A worker node on a thread of the test process (test_cluster.c,
 * test_remote.c): dt_node_run with the given options until the main node
 * says stop or goes away.
 */
#ifndef DT_TEST_NODE_H
#define DT_TEST_NODE_H

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dtorch/dtorch_cluster.h"
#include "test_util.h"

typedef struct node_thread {
    pthread_t t;
    dt_node_options o;
    char addr[200];
    int rc; /* dt_node_run's exit status once joined; -1 before */
} node_thread;

static void *run_node(void *arg) {
    node_thread *n = arg;
    n->rc = dt_node_run(&n->o);
    return NULL;
}

/* Starts a node of `cpus` CPU devices that registers with `addr`. */
static inline void start_node(node_thread *n, const char *addr, const char *token, int cpus, int timeout_ms) {
    memset(n, 0, sizeof *n);
    snprintf(n->addr, sizeof n->addr, "%s", addr);
    n->o = (dt_node_options){.main_address = n->addr,
                             .token = token,
                             .cpu_devices = cpus,
                             .connect_timeout_ms = timeout_ms,
                             .quiet = 1};
    n->rc = -1;
    CHECK_EQ(pthread_create(&n->t, NULL, run_node, n), 0);
}

#endif
