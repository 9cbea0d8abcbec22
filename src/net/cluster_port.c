/* The cluster port this layer registers with core (src/init.c). */
#include "net/cluster_int.h"
#include "net/net.h"

static const dt__cluster_port port = {
    .node_of = dt__cluster_node_of,
    .generation = dt__cluster_generation,
    .ship = dt__cluster_ship,
    .span_nccl = dt__cluster_span_nccl,
    .relayed = dt__cluster_relayed,
    .release = dt__cluster_release,
    .cuda_devices = dt_cluster_cuda_devices,
    .private_nodes = dt__cluster_private,
};

const dt__cluster_port *dt__net_port(void) { return &port; }
