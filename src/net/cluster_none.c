/*
 * The cluster API in a build without ZeroMQ (DT_HAVE_ZMQ off): every call
 * says so (dtorch_cluster.h).
 */
#include <stdio.h>

#include "common/common.h"
#include "core/controller/remote.h"
#include "core/records/future.h"
#include "dtorch/dtorch_cluster.h"

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
dt_status dt_debug_cluster_corrupt_batch(int node) {
    (void)node;
    return dt__error(DT_EUNSUPPORTED, NO_ZMQ);
}
int dt_node_run(const dt_node_options *opts) {
    (void)opts;
    fprintf(stderr, "dtorch-node: %s\n", NO_ZMQ);
    return 1;
}

/* Remote streams (core/controller/remote.h): no worker nodes without ZeroMQ. */
uint64_t dt__cluster_generation(void) { return 0; }
int dt__cluster_node_of(dt_device_type type, int64_t id) {
    (void)type, (void)id;
    return -1;
}
void dt__cluster_ship(int node, const char *backend, void *body, size_t len, struct dt_future **futs,
                      const int *counts, int n, uint32_t tag, dt__span_key *keys, int nkeys) {
    (void)node, (void)backend, (void)len, (void)tag, (void)nkeys;
    dt__free(body);
    dt__free(keys);
    for (int i = 0; i < n; i++) {
        dt__future_fail(futs[i], DT_EUNSUPPORTED, NO_ZMQ);
        for (int c = 0; c < counts[i]; c++)
            dt_future_release(futs[i]);
    }
}
void dt__cluster_release(int node, uint32_t tag, uint64_t id) { (void)node, (void)tag, (void)id; }
int64_t dt__cluster_relayed(void) { return 0; }
int dt__cluster_span_nccl(uint32_t tag, uint64_t key, int n, const int64_t *ids) {
    (void)tag, (void)key, (void)n, (void)ids;
    return 0;
}
