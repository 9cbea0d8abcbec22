/*
 * The main node's state (cluster.c), shared with its remote-streams half
 * (cluster_remote.c). Everything is guarded by `mu` unless a field says
 * otherwise; cluster.c's comment has the threads and the lock order.
 */
#ifndef DT_NET_CLUSTER_INT_H
#define DT_NET_CLUSTER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "core/controller/remote.h"
#include "dtorch/dtorch_cluster.h"
#include "net/transport.h"

/* A batch sent with collectives that span nodes (their keys), kept until
 * the node shows it ran it (a RESULT of it or of a later batch) or says it
 * could not (then the other nodes' waits for its parts fail). */
typedef struct sentb {
    struct sentb *next;
    uint64_t seq;
    uint32_t tag;
    dt__span_key *keys;
    int nkeys;
} sentb;

typedef struct node {
    uint8_t rid[256];
    size_t rid_len;
    int64_t last_seen; /* ms, dt__net_now_ms: the last heartbeat (cluster_beat.c) */
    dt_node_info info;
    uint8_t *rel; /* releases not yet sent: (u32 tag, u64 id) each */
    size_t rel_n, rel_cap;
    uint32_t data_port; /* where it takes DATA from other worker nodes (0: through us only) */
    uint32_t flags;     /* DT__WIRE_REG_* from its REGISTER */
    int notify_lost;    /* lost: the other nodes are still to be told (the beat thread) */
    uint64_t batches;   /* batches shipped to it (their seq) */
    sentb *sent;        /* oldest first */
} node;

/* A batch for the cluster thread to send (core/controller/remote.h), or a control
 * message (`ctl`, taken over) that must leave in order with the batches
 * (an NCCL unique id before the batch that names its group). */
typedef struct outmsg {
    struct outmsg *next;
    int node;
    dt__wire_msg *ctl;
    char backend[32];
    void *body;
    size_t len;
    uint64_t seq;
    uint32_t tag;
    dt__span_key *keys;
    int nkeys;
} outmsg;

/* A main-node future that a worker node's kernels complete: `remaining`
 * arrivals expected from `node`, one reference held per arrival, from the
 * node's batch number `batch`. */
typedef struct pend {
    struct pend *next;
    dt_future *f;
    int node, remaining;
    uint64_t batch;
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
    /* CUDA devices: the main node's own (what its CUDA backend saw at
     * dt_cluster_listen), then each worker node's; `flags` as a worker
     * node's REGISTER says them, for the main node's own (DT__WIRE_REG_*). */
    int64_t cuda_local, cuda_total;
    uint32_t flags;
    node *nodes;
    int n, cap, alive, refused;
    dt__net_in *in;         /* the cluster thread's receive buffer */
    outmsg *out, *out_last; /* batches to send, oldest first */
    pend *pend;             /* futures worker nodes complete */
    int woken;              /* a "send" wake is on its way */
    pid_t pid;              /* the process that listens (a forked child does not own the cluster) */
    int corrupt;            /* tests: node index + 1 whose next batch leaves a byte short */
    /* The heartbeat channel (cluster_beat.c): its own context, socket,
     * thread and wake pipe. */
    void *bctx, *beat;
    int bwake[2];
    int beat_port;
    pthread_t beat_thread;
    int beat_running, beat_stopping;
    /* Bumped when a worker node registers (its ids stop being this
     * process's) and when the cluster ends (they are again):
     * dt__cluster_generation. */
    atomic_uint_fast64_t generation;
    /* dt_cluster_options.private_nodes, set before the cluster listens
     * (dt__cluster_private). */
    atomic_int private_nodes;
    /* Worker nodes' kernel records not taken yet (cluster_trace.c), on
     * their nodes' clocks. */
    dt_cluster_trace_kernel *trace;
    size_t ntrace, trace_cap;
} dt__cluster_state;

extern dt__cluster_state dt__C;
#define C dt__C

/* Keeps the kernel records of the extra frame of node idx's RESULT (the
 * layout: subctl.h); a malformed frame is dropped with a message. Cluster
 * thread; takes mu. */
void dt__cluster_trace_add(int idx, const void *body, size_t len);
/* Forgets the records not taken (under mu). */
void dt__cluster_trace_clear(void);

/* The node a message came from, or NULL (under mu). */
node *dt__cluster_find(const dt__net_in *in);
/* Marks nd lost with `why` (its error names it), fails the waits for its
 * devices' parts and has the beat thread tell the other nodes (under mu;
 * any thread). */
void dt__cluster_lose(node *nd, const char *why);
/* Wakes the cluster thread (under mu). */
void dt__cluster_wake(void);
/* Appends o to the messages the cluster thread sends next (under mu). */
void dt__cluster_queue(outmsg *o);
/* Cluster thread (cluster_remote.c): a RESULT from a live node (not under
 * mu); sends the queued batches and releases; fails the pending futures of
 * nodes not alive (only < 0), or of node `only` with `why` (only those of
 * its batch number `batch` when not 0). Reap runs on any thread, never
 * under mu. */
void dt__cluster_on_result(dt__net_in *in);
void dt__cluster_send_out(void);
void dt__cluster_reap(int only, uint64_t batch, const char *why);
/* Frees a node's list of sent batches (under mu). */
void dt__cluster_sent_free(node *nd);

/* The heartbeat channel (cluster_beat.c). open: binds it beside the main
 * address `ep` ("tcp://HOST:PORT"; PORT + 1, or a free port when PORT is
 * "*"), under life; start/stop: its thread (under life, not mu); close:
 * frees it (under life); wake: the beat thread looks again (lost nodes to
 * tell about; under mu, any thread). */
dt_status dt__cluster_beat_open(const char *ep);
dt_status dt__cluster_beat_start(void);
void dt__cluster_beat_stop(void);
void dt__cluster_beat_close(void);
void dt__cluster_beat_wake(void);

/* Data between nodes (cluster_data.c). Installs the hooks (after the
 * cluster thread started); cluster thread: sends this process's queued
 * messages, delivers or relays one that arrived from a live node (not
 * under mu); fails this process's waits for nd's parts (under mu); sends
 * LOST about nd to every live node (beat thread, on its socket, under mu);
 * batch `b` of node idx could not run there (`why` names the node): the
 * waits for its ranks' parts fail here and on every live node (cluster
 * thread, not under mu; b's keys taken over). */
void dt__cluster_data_start(void);
void dt__cluster_send_data(void);
void dt__cluster_on_data(dt__net_in *in);
void dt__cluster_data_lost(const node *nd);
void dt__cluster_data_tell_lost(void *sock, const node *nd);
void dt__cluster_data_failed(int idx, sentb *b, const char *why);
/* Tells a node just welcomed about the nodes lost before it joined, and
 * every live node (and this process) the node table (under mu). */
void dt__cluster_data_welcome(const uint8_t *rid, size_t rid_len);
/* Tells a node just registered where the other live nodes take DATA
 * directly, and them where it does (under mu). */
void dt__cluster_data_peers(const node *nd);

/* The cluster port's entries (core/records/cluster_port.h says what each
 * does), registered with core by src/init.c through dt__net_port(). */
int dt__cluster_node_of(dt_device_type type, int64_t id);
uint64_t dt__cluster_generation(void);
int dt__cluster_private(void);
void dt__cluster_ship(int node, const char *backend, void *body, size_t len, struct dt_future **futs,
                      const int *counts, int n, uint32_t tag, dt__span_key *keys, int nkeys);
int dt__cluster_span_nccl(uint32_t tag, uint64_t key, int n, const int64_t *ids);
int64_t dt__cluster_relayed(void);
void dt__cluster_release(int node, uint32_t tag, uint64_t id);

#endif /* DT_NET_CLUSTER_INT_H */
