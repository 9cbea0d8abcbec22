/*
 * The cluster port: what core asks of the cluster (src/net) — which worker
 * node serves a device, shipping a batch to one, releasing a value held
 * there — as a table src/net registers at start-up (src/init.c), so core
 * never names the cluster's functions. Without a registered port (a build
 * without ZeroMQ) every device is this process's and the answers below are
 * those of no cluster.
 *
 * Threads: registered once before main() (or when libdtorch is loaded),
 * then only read; each entry says which thread calls it.
 */
#ifndef DT_CORE_CLUSTER_PORT_H
#define DT_CORE_CLUSTER_PORT_H

#include "core/core.h"

/* A collective of a batch whose group spans nodes (the group's key and the
 * collective's number, as its DATA messages name them with the batch's tag). */
typedef struct dt__span_key {
    uint64_t group, seq;
} dt__span_key;

typedef struct dt__cluster_port {
    /* The worker node serving device (type, id): its index, or -1 for a
     * device of this process (the main node's own). Any thread. */
    int (*node_of)(dt_device_type type, int64_t id);
    /* Moves when worker nodes register and when a cluster ends: ids a graph
     * ran here may be a worker node's now, or this process's again, and the
     * controller checks its streams. Any thread. */
    uint64_t (*generation)(void);
    /* Ships a batch body (core/controller/remote.h gives its layout;
     * dt__malloc'd, taken over) to worker node `node` on graph backend
     * `backend`, with the `n` futures its FETCH and SYNC kernels complete,
     * counts[i] kernels naming futs[i] (one reference each, taken over), and
     * the `nkeys` collectives spanning nodes among its kernels (`keys`,
     * dt__malloc'd or NULL, taken over; graph tag `tag`): if the node cannot
     * run the batch, the waits of every node for those collectives' parts
     * from its ranks fail. A node that is not alive fails the reads among
     * them at once with its error, and lets the syncs (futures without
     * pieces) through. Controller thread. */
    void (*ship)(int node, const char *backend, void *body, size_t len, struct dt_future **futs,
                 const int *counts, int n, uint32_t tag, dt__span_key *keys, int nkeys);
    /* A cuda group `key` of graph `tag` over devices ids[n] was just made:
     * when some of them are worker nodes' and NCCL can serve every process
     * holding a rank (comm/span_nccl.h), makes its NCCL unique id, keeps it
     * and queues it to each of those nodes ahead of any batch queued later;
     * 1 then, else 0 (host staging). Controller thread. */
    int (*span_nccl)(uint32_t tag, uint64_t key, int n, const int64_t *ids);
    /* DATA chunks the main node relayed between two worker nodes (any
     * thread; dt_cluster_counters). */
    int64_t (*relayed)(void);
    /* Value `id` of graph `tag` held by worker node `node` is no longer
     * needed here (any thread; it leaves with the node's next message). */
    void (*release)(int node, uint32_t tag, uint64_t id);
    /* CUDA devices the cluster's worker nodes serve in all (any thread). */
    int64_t (*cuda_devices)(void);
    /* 1 when the worker nodes serve only per-device-per-process graphs
     * (dt_cluster_options.private_nodes; any thread). */
    int (*private_nodes)(void);
} dt__cluster_port;

/* The registered port, NULL without a cluster layer. */
extern const dt__cluster_port *dt__cluster_port_used;
void dt__cluster_port_register(const dt__cluster_port *port);

static inline int dt__port_node_of(dt_device_type type, int64_t id) {
    return dt__cluster_port_used ? dt__cluster_port_used->node_of(type, id) : -1;
}
static inline uint64_t dt__port_generation(void) {
    return dt__cluster_port_used ? dt__cluster_port_used->generation() : 0;
}
static inline int dt__port_span_nccl(uint32_t tag, uint64_t key, int n, const int64_t *ids) {
    return dt__cluster_port_used ? dt__cluster_port_used->span_nccl(tag, key, n, ids) : 0;
}
static inline int64_t dt__port_relayed(void) {
    return dt__cluster_port_used ? dt__cluster_port_used->relayed() : 0;
}
static inline void dt__port_release(int node, uint32_t tag, uint64_t id) {
    if (dt__cluster_port_used)
        dt__cluster_port_used->release(node, tag, id);
}
static inline int dt__port_private(void) {
    return dt__cluster_port_used ? dt__cluster_port_used->private_nodes() : 0;
}
static inline int64_t dt__port_cuda_devices(void) {
    return dt__cluster_port_used ? dt__cluster_port_used->cuda_devices() : 0;
}
/* Only for a device dt__port_node_of placed on a worker node, so never
 * without a port. */
static inline void dt__port_ship(int node, const char *backend, void *body, size_t len,
                                 struct dt_future **futs, const int *counts, int n, uint32_t tag,
                                 dt__span_key *keys, int nkeys) {
    dt__cluster_port_used->ship(node, backend, body, len, futs, counts, n, tag, keys, nkeys);
}

#endif /* DT_CORE_CLUSTER_PORT_H */
