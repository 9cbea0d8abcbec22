/*
 * dtorch clusters: a main node (this process: the client and the
 * controller) and worker nodes (dtorch-node processes, usually on other
 * hosts) that register with it over ZeroMQ. See docs/cluster.md.
 *
 *     // main node                          // each worker host
 *     dt_cluster_listen("0.0.0.0:5555",      //   DTORCH_CLUSTER_TOKEN=... \
 *                       &opts);              //   dtorch-node --main-node-address=main:5555
 *     dt_cluster_wait(2, 600000);
 *
 * One cluster per process. Worker nodes hold a shared secret, the token:
 * registration carries it (compared in constant time) and, when libzmq has
 * CURVE (dt_cluster_has_curve), every connection is encrypted and
 * authenticated with keys derived from it. The main node sends heartbeats
 * to each worker node and marks one lost after two intervals without its
 * heartbeat; a worker node exits when the main node says stop or is silent
 * for two intervals. Heartbeats travel on a connection of their own, to
 * the main node's port + 1 (a free port when the main node's is), so no
 * transfer delays them; worker nodes also listen, each on a free port, for
 * each other's data.
 *
 * What works today: cluster formation, heartbeats and loss detection,
 * meshes of worker nodes' CPU and CUDA devices (kernels are shipped to the
 * nodes; reads come back), and meshes and copies spanning nodes (their data
 * moves between the processes; docs/cluster.md).
 *
 * Every function is thread-safe. Without ZeroMQ in the build they return
 * DT_EUNSUPPORTED.
 */
#ifndef DTORCH_CLUSTER_H
#define DTORCH_CLUSTER_H

#include <stdint.h>

#include "dtorch/dtorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parameters of dt_cluster_listen; zero-initialise, then set fields. Grows
 * only at the end. */
typedef struct dt_cluster_options {
    int cpu_devices;   /* the main node's own CPU devices (global ids 0..N-1) */
    const char *token; /* the shared secret; NULL: $DTORCH_CLUSTER_TOKEN */
    int heartbeat_ms;  /* heartbeat interval; 0: $DTORCH_HEARTBEAT_MS, else 1000 */
    /* Nonzero: the worker nodes serve only graphs made with
     * dt_graph_options.per_device_per_process; every other graph keeps all
     * its devices in this process (the processes dtorch starts for
     * GraphOption(per_device_per_process=True), docs/user-guide.md). */
    int private_nodes;
} dt_cluster_options;

/* 1 when this build can form clusters (ZeroMQ found), and when its libzmq
 * has CURVE encryption. */
DT_API int dt_cluster_available(void);
DT_API int dt_cluster_has_curve(void);

/* Makes this process the main node and listens at `address` ("HOST:PORT";
 * NULL or "": 127.0.0.1 on a free port; port 0: a free port). DT_EINVAL for
 * a bad address, a missing or overlong token (at most 1024 bytes) or a
 * second call; DT_EBACKEND when the address (or, for heartbeats, its port
 * + 1; a port 65535 is DT_EINVAL) cannot be bound. `opts` is read during
 * the call (NULL: defaults). */
DT_API dt_status dt_cluster_listen(const char *address, const dt_cluster_options *opts);
/* The address the main node listens at, "HOST:PORT" with the port bound,
 * into `buf` of `cap` bytes. DT_EINVAL when not listening. */
DT_API dt_status dt_cluster_address(char *buf, size_t cap);
/* Waits until `num_nodes` worker nodes are connected and alive, at most
 * `timeout_ms` milliseconds (DT_ETIMEDOUT, the thread error saying how
 * many joined). Blocks the calling thread (no spinning); callers that must
 * stay responsive loop over short timeouts. */
DT_API dt_status dt_cluster_wait(int num_nodes, int timeout_ms);
/* Worker nodes registered so far (lost ones included), and of those the
 * ones alive. 0 when not listening. */
DT_API int dt_cluster_num_nodes(void);
DT_API int dt_cluster_num_alive(void);

typedef enum dt_node_state {
    DT_NODE_ALIVE = 0,
    DT_NODE_LOST = 1,    /* no heartbeat for two intervals, or it left */
    DT_NODE_STOPPED = 2, /* the main node told it to stop */
    DT_NODE_REMOVED = 3, /* dt_cluster_remove: told to stop; its ids stay numbered, unusable */
} dt_node_state;

/* One worker node, as the main node sees it. */
typedef struct dt_node_info {
    int index;                    /* registration order, from 0 */
    int state;                    /* dt_node_state */
    int cpu_devices;              /* CPU devices it offers */
    int64_t first_device_id;      /* its first global CPU device id */
    int pid;                      /* its process id on its host */
    char address[128];            /* its peer address, "HOST:PORT" */
    char host[128];               /* its host name */
    char error[512];              /* why it is lost ("" when alive) */
    int cuda_devices;             /* CUDA devices it offers */
    int64_t first_cuda_device_id; /* its first global CUDA device id */
    /* The data of collectives and copies it sent to and received from other
     * nodes (directly, or through the main node), as of its latest answer:
     * exact once a sync of the work has returned. */
    int64_t data_bytes_sent, data_messages_sent, data_bytes_received, data_messages_received;
    /* Its clock (CLOCK_MONOTONIC, as traces read it) minus the main node's,
     * estimated from the heartbeats (the exchange of the smallest round
     * trip so far), and that round trip: the true offset lies within
     * clock_offset_ns +- clock_rtt_ns / 2. clock_rtt_ns is -1 before the
     * first exchange (a heartbeat interval or so after registering). */
    int64_t clock_offset_ns, clock_rtt_ns;
} dt_node_info;

/* Worker node `index` (< dt_cluster_num_nodes()) into *out. DT_EINDEX. */
DT_API dt_status dt_cluster_node(int index, dt_node_info *out);
/* Total CPU devices in the cluster: the main node's, then each worker
 * node's in registration order (global ids are node-major). */
DT_API int64_t dt_cluster_cpu_devices(void);
/* Total CUDA devices in the cluster, numbered as CPU devices are: the main
 * node's own first (those its CUDA backend saw when it started listening,
 * device virtualisation included), then each worker node's. 0 when not
 * listening. */
DT_API int64_t dt_cluster_cuda_devices(void);
/* Counters of this process's traffic to worker nodes (every graph, since
 * the process started): bytes and values of host data shipped (each a
 * device's piece of a host value, or a whole value a kernel reads), and
 * kernels shipped that the nodes have not reported run yet (the backlog
 * counts them), the data messages (chunks) the main node relayed between
 * two worker nodes (those without a direct connection), and the data
 * between nodes (collectives and copies of meshes on several nodes) that
 * passed through the main node: payload bytes and DATA messages (a part
 * travels in messages of at most 1 MiB) it sent to worker nodes (its own
 * devices' parts and the ones it relays) and received from them. These
 * are the main node's own: worker nodes send each other data directly,
 * past it (a worker node started with DTORCH_DIRECT_DATA=0 neither takes
 * nor sends direct data, so with it on every worker node all the data
 * passes through the main node and these count all of it, a relayed byte
 * twice: in and out). */
typedef struct dt_cluster_counters {
    int64_t value_bytes;
    int64_t values;
    int64_t kernels_on_nodes;
    int64_t relayed;
    int64_t data_bytes_sent;
    int64_t data_messages_sent;
    int64_t data_bytes_received;
    int64_t data_messages_received;
} dt_cluster_counters;
DT_API void dt_cluster_counters_get(dt_cluster_counters *out);
/* Tells every worker node to stop, closes the connections and forgets the
 * cluster (a later dt_cluster_listen may form a new one). No-op when not
 * listening. */
DT_API void dt_cluster_shutdown(void);
/* Removes worker node `index` from the cluster while the program runs
 * (MainNode.remove, which first moves or refuses the values it holds): it
 * is told to stop (it exits 0), its state becomes DT_NODE_REMOVED and its
 * device ids stay numbered but are no longer usable; what was still queued
 * for it, or waited on it, fails with "worker node N was removed". The
 * other nodes are untouched. DT_EINDEX for no such node, DT_EINVAL for a
 * node that is not alive or when not listening. */
DT_API dt_status dt_cluster_remove(int index);

/* A kernel a worker node ran while the main node traced
 * (dtorch.profiler.trace, dt_record_enable(DT_RECORD_TRACE)): its node's
 * records, sent with the node's answers to syncs, on the main node's clock
 * (the node's minus its clock_offset_ns, dt_node_info). Device ids are
 * global. Text longer than its field is cut. */
typedef struct dt_cluster_trace_kernel {
    int node;                         /* the worker node's index */
    int32_t device_type, stream_kind; /* dt_device_type; 0 compute, 1 communication */
    int64_t device_id;
    uint64_t seq; /* the kernel's number on its stream */
    char op[64], kernel[64], file[256];
    int32_t line;
    int64_t begin_ns, end_ns, bytes;
} dt_cluster_trace_kernel;
/* The worker nodes' kernel records received since the last call, as a new
 * array (free it with dt_record_free; NULL when none). DT_ENOMEM. */
DT_API dt_status dt_cluster_take_trace(dt_cluster_trace_kernel **out, size_t *n);

/* Tests only: the next kernel batch shipped to worker node `node` leaves
 * one byte short, so the node cannot decode it (the path of a batch a node
 * cannot run). DT_EINDEX for a node that does not exist. */
DT_API dt_status dt_debug_cluster_corrupt_batch(int node);

/* Tests only: this process speaks cluster wire version `version` (0: its
 * own, src/net/wire.h), as a dtorch of another version would: a main node
 * refuses such a worker node, saying which versions met. DT_EINVAL outside
 * 0..65535. */
DT_API dt_status dt_debug_wire_version(int version);

/* Tests only: a worker node run in this process reads its clock `ns`
 * nanoseconds ahead in the heartbeats it sends (as a host whose clock
 * differs would), so the main node's estimate of its offset is tested. */
DT_API void dt_debug_node_clock_skew(int64_t ns);

/* ------------------------------------------------------ the worker node */

/* Parameters of dt_node_run; zero-initialise, then set fields. */
typedef struct dt_node_options {
    const char *main_address; /* "HOST:PORT" of the main node (required) */
    const char *token;        /* NULL: $DTORCH_CLUSTER_TOKEN */
    int cpu_devices;          /* CPU devices to offer (0: 1) */
    int connect_timeout_ms;   /* give up registering after this (0: 60000) */
    int quiet;                /* 1: no progress lines on stderr */
    /* CUDA devices to offer: the first N its CUDA backend sees (0: none),
     * or DT_NODE_CUDA_ALL for every one. More than it sees (none without
     * a GPU) is refused: dt_node_run returns 2. */
    int cuda_devices;
} dt_node_options;

#define DT_NODE_CUDA_ALL (-1)

/* Runs a worker node: connects, registers and serves until the main node
 * says stop or disappears (returns 0), or is refused or cannot register
 * (returns 1; the reason on stderr and in the thread error; 2 for bad
 * options). The calling thread serves; returns when it ends. */
DT_API int dt_node_run(const dt_node_options *opts);

#ifdef __cplusplus
}
#endif

#endif /* DTORCH_CLUSTER_H */
