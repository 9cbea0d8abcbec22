/* The registered cluster port (cluster_port.h). */
#include "core/records/cluster_port.h"

const dt__cluster_port *dt__cluster_port_used;

void dt__cluster_port_register(const dt__cluster_port *port) { dt__cluster_port_used = port; }
