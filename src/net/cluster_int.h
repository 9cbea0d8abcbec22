/*
 * The main node's state (cluster.c), shared with its remote-streams half
 * (cluster_remote.c). Everything is guarded by `mu` unless a field says
 * otherwise; cluster.c's comment has the threads and the lock order.
 */
#ifndef DT_NET_CLUSTER_INT_H
#define DT_NET_CLUSTER_INT_H

#include <pthread.h>
#include <sys/types.h>

#include "dtorch/dtorch_cluster.h"
#include "net/transport.h"

typedef struct node {
    uint8_t rid[256];
    size_t rid_len;
    int64_t last_seen; /* ms, dt__net_now_ms */
    dt_node_info info;
    uint8_t *rel; /* releases not yet sent: (u32 tag, u64 id) each */
    size_t rel_n, rel_cap;
} node;

/* A batch for the cluster thread to send (core/remote.h). */
typedef struct outmsg {
    struct outmsg *next;
    int node;
    char backend[32];
    void *body;
    size_t len;
} outmsg;

/* A main-node future that a worker node's kernels complete: `remaining`
 * arrivals expected from `node`, one reference held per arrival. */
typedef struct pend {
    struct pend *next;
    dt_future *f;
    int node, remaining;
} pend;

typedef struct dt__cluster_state {
    pthread_mutex_t life, mu;
    pthread_cond_t changed; /* a node joined, was lost or stopped (monotonic clock) */
    pthread_once_t once;
    int listening;
    void *ctx, *router, *wake_tx, *wake_rx;
    pthread_t thread;
    char address[160];
    char token[DT__WIRE_TOKEN_MAX + 1];
    int heartbeat_ms, cpu_devices;
    int64_t cpu_total;
    node *nodes;
    int n, cap, alive, refused;
    dt__net_in *in;         /* the cluster thread's receive buffer */
    outmsg *out, *out_last; /* batches to send, oldest first */
    pend *pend;             /* futures worker nodes complete */
    int woken;              /* a "send" wake is on its way */
    pid_t pid;              /* the process that listens (a forked child does not own the cluster) */
} dt__cluster_state;

extern dt__cluster_state dt__C;
#define C dt__C

/* The node a message came from, or NULL (under mu). */
node *dt__cluster_find(const dt__net_in *in);
/* Cluster thread (cluster_remote.c): a RESULT from a live node (not under
 * mu); sends the queued batches and releases; fails the pending futures of
 * nodes not alive (only < 0), or of node `only` with `why`. */
void dt__cluster_on_result(dt__net_in *in);
void dt__cluster_send_out(void);
void dt__cluster_reap(int only, const char *why);

/* Data between nodes (cluster_data.c). Installs the hooks (after the
 * cluster thread started); cluster thread: sends this process's queued
 * messages, delivers or relays one that arrived from a live node (not
 * under mu); tells every live node, and this process's waits, that nd is
 * lost (under mu). */
void dt__cluster_data_start(void);
void dt__cluster_send_data(void);
void dt__cluster_on_data(dt__net_in *in);
void dt__cluster_data_lost(const node *nd);
/* Tells a node just welcomed about the nodes lost before it joined, and
 * every live node (and this process) the node table (under mu). */
void dt__cluster_data_welcome(const uint8_t *rid, size_t rid_len);

#endif /* DT_NET_CLUSTER_INT_H */
