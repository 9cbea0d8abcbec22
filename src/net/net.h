/*
 * What the cluster layer gives the composition root (src/init.c): the port
 * core reaches the cluster through, or NULL in a build without ZeroMQ.
 */
#ifndef DT_NET_NET_H
#define DT_NET_NET_H

#include "core/records/cluster_port.h"

const dt__cluster_port *dt__net_port(void);

#endif /* DT_NET_NET_H */
