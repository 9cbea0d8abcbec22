/*
 * The cluster API in a build without ZeroMQ (DT_HAVE_ZMQ off): every call
 * says so (dtorch_cluster.h).
 */
#include <stdio.h>

#include "common/common.h"
#include "dtorch/dtorch_cluster.h"
#include "net/net.h"

#define NO_ZMQ "cluster: this build of dtorch has no ZeroMQ (install libzmq3-dev and rebuild)"

int dt_cluster_available(void) { return 0; }
int dt_cluster_has_curve(void) { return 0; }
dt_status dt_cluster_listen(const char *address, const dt_cluster_options *opts) {
    (void)address, (void)opts;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
dt_status dt_cluster_address(char *buf, size_t cap) {
    (void)buf, (void)cap;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
dt_status dt_cluster_wait(int num_nodes, int timeout_ms) {
    (void)num_nodes, (void)timeout_ms;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
int dt_cluster_num_nodes(void) { return 0; }
int dt_cluster_num_alive(void) { return 0; }
dt_status dt_cluster_node(int index, dt_node_info *out) {
    (void)index, (void)out;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
int64_t dt_cluster_cpu_devices(void) { return 0; }
int64_t dt_cluster_cuda_devices(void) { return 0; }
void dt_cluster_shutdown(void) {}
dt_status dt_cluster_remove(int index) {
    (void)index;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
void dt_debug_node_clock_skew(int64_t ns) { (void)ns; }
dt_status dt_cluster_take_trace(dt_cluster_trace_kernel **out, size_t *n) {
    if (out)
        *out = NULL;
    if (n)
        *n = 0;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
dt_status dt_debug_cluster_corrupt_batch(int node) {
    (void)node;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
int dt_node_run(const dt_node_options *opts) {
    (void)opts;
    fprintf(stderr, "dtorch-node: %s\n", NO_ZMQ);
    return 1;
}

/* No worker nodes without ZeroMQ: core runs with no cluster port. */
const dt__cluster_port *dt__net_port(void) { return NULL; }
