/*
 * The graph's layout, the record all three roles share, and the state they
 * all touch (graph_state.c). For the core modules that run the graph's
 * threads or keep its counters (the client's graph.c and tensor.c, the
 * controller, the workers), core/api and C tests; src/ops never include it. Which thread writes each field is
 * on the struct; the lock order is core.h's.
 */
#ifndef DT_CORE_GRAPH_INT_H
#define DT_CORE_GRAPH_INT_H

#include "core/core.h"
#include "core/records/cluster_port.h"
#include "core/records/kernel.h"

/* Fields are grouped by the threads that write them, each group on its own
 * cache line: a line written by the client and read by the controller (or
 * the other way round) moves between cores on every access, which costs more
 * than the rest of recording an op. */
/* One collective kernel a worker ran or dropped (dt_debug_coll_log). */
typedef struct dt__coll_logent {
    int64_t device_id;
    int stream_kind, rank;
    uint64_t group, seq;
} dt__coll_logent;

struct dt_graph {
    uint32_t magic; /* DT__GRAPH_LIVE */
    /* Read-mostly. One backend per device type: lowering picks the one of
     * the mesh's type, and every blob keeps the backend that made it. */
    const dt__backend *be[DT_DEVICE_TYPES];
    /* Collectives on the communication stream (1, the default) or on the
     * compute stream (0): DTORCH_OVERLAP=0 at graph creation. */
    int overlap;
    /* The window's chain pass runs (0, the default; DTORCH_CHAINS=1 at
     * creation or dt_graph_set_chains turn it on). */
    atomic_int chains;
    /* The controller replays the kernels of nodes it has lowered before
     * (core/controller/replay.h; on unless DTORCH_REPLAY=0 at creation or
     * dt_graph_set_replay turn it off). */
    atomic_int replay;
    /* The controller lowers an eligible node as one device-independent
     * record (core/records/bcast.h; on unless DTORCH_BCAST=0 at creation
     * or dt_graph_set_bcast turn it off). */
    atomic_int bcast;
    /* The families decide a shared record's eligibility on the devices
     * dt__lw_probes picks where its proof holds, else on every device
     * (core/controller/lower_bcast.c; on unless DTORCH_BCAST_PROOF=0 at
     * creation: one flag, read by the controller only). */
    int bcast_proof;
    /* The controller's spin for work before it sleeps (graph.c,
     * dt__graph_wait_queue): probes of the next wait, halved by a wait that
     * ends asleep and doubled by one the spin ends, within [1,
     * DT_SPIN_PROBES] (0: the first wait's whole bound); `spin_adapt` 0
     * (DTORCH_SPIN_ADAPT=0 at creation)
     * spins the whole bound every time. Controller only. */
    int ctl_spin, spin_adapt;
    /* A shared record makes a fresh value's blobs as one group, which the
     * value and the shared records reading it hold once each
     * (core/records/bgroup.h; on unless DTORCH_BGROUP=0 at creation or
     * dt_graph_set_bgroup turn it off). */
    atomic_int bgroup;
    /* Consecutive shared nodes of one mesh are one run: one record, one
     * slot per device (core/records/step.h; on unless DTORCH_STEP=0 at
     * creation or dt_graph_set_step turn it off). */
    atomic_int step;
    struct dt__step *step_open; /* controller only: the open run, or NULL */
    /* A worker whose backend captures launches repeated run slots as CUDA
     * graphs (core/worker/graph_run.c; off unless DTORCH_CUDA_GRAPH=1 at
     * creation or dt_graph_set_cuda_graph turn it on). */
    atomic_int cuda_graph;
    /* The controller lowers a round's compute ahead of what waits on its
     * collectives (core/controller/sched.h; on unless DTORCH_SCHEDULE=0 at creation;
     * dt_graph_set_schedule). */
    atomic_int schedule;
    /* Shuts the graph down and frees it when the last reference goes
     * (dt_graph_release, graph_state.c): set by dt_graph_create
     * (core/api/graph_life.c), which is above every role that may hold the
     * last reference. */
    void (*finalize)(struct dt_graph *g);
    pthread_t ctl;
    pthread_mutex_t life_lock; /* serialises shutdown */
    int shut_down;             /* the controller is joined; guarded by life_lock */
    int closed;                /* STOP is queued; guarded by life_lock */
    atomic_int gates_bypassed; /* set by shutdown: this graph's gate kernels stop waiting (debug.c) */
    atomic_int held;           /* dt_debug_hold_controller: the controller takes nothing (debug.c) */
    /* Set by dt_graph_cancel before it closes the queue: the controller
     * frees nodes unlowered, workers drop kernels unrun (dt__kernel_drop). */
    atomic_int cancelled;
    atomic_long dropped; /* nodes and kernels dropped by a cancel */
    unsigned fork_gen;   /* dt__fork_gen when made: another value means a forked child */
    int defer_pressure;  /* dt_graph_set_deferred_backpressure */
    int ctl_exited;      /* the controller has returned; guarded by bl_lock, signalled on bl_cond */

    /* Client-written. The queue is a lock-free stack of nodes (newest
     * first) that the controller takes whole; a head tagged with bit 0 (a
     * STOP node) marks a closed queue, after which no push can succeed. */
    _Alignas(DT_CACHE_LINE) _Atomic(dt__node *) qhead;
    /* Values the client dropped: a second lock-free stack (DT__R_CLOSED once
     * closed). Dropping a symbol is as frequent as making one, so it costs
     * a push, not a node. */
    _Atomic(dt__tval *) rhead;
    atomic_int ctl_sleeping; /* the controller sleeps (or is about to) on qcond */
    atomic_long submitted;   /* nodes pushed */

    _Alignas(DT_CACHE_LINE) atomic_int refs;

    /* Controller-written: kernels handed to streams. */
    _Alignas(DT_CACHE_LINE) atomic_long kqueued;
    long kqueued_local; /* controller-only: kqueued before it is published */
    /* The most records in flight the controller has seen after a batch
     * (dt_graph_get_stats); a client may reset it. */
    atomic_long peak_backlog;
    atomic_long nodes_eliminated; /* never lowered (passes/dce.c) */
    atomic_long nodes_fused;      /* run inside chain kernels (passes/chain.c) */
    atomic_long replay_hits;      /* nodes whose kernels were replayed (replay.c) */
    atomic_long replay_misses;    /* nodes the cache could hold that were lowered */
    atomic_long replay_run_hits;  /* of replay_hits, found by the run's prediction (replay.c) */
    atomic_long chain_blocks;     /* blocks the backends' run_chain ran chain kernels on (chain_run.c) */
    atomic_long step_runs;        /* runs of shared kernels closed (lower_step.c) */
    /* Run slots captured as graphs, launched, run eagerly with graphs on
     * (core/worker/graph_run.c). */
    atomic_long graph_captured, graph_launched, graph_eager;
    atomic_long bcast_nodes; /* nodes lowered as one device-independent record (lower_bcast.c) */
    atomic_long bcast_colls; /* collectives lowered as one device-independent record (lower_coll.c) */
    /* Test use (dt_debug_coll_log): each collective kernel a worker ran or
     * dropped, up to coll_log_cap entries; NULL: not noted. Set before the
     * work it notes is recorded; entries are read after a sync. */
    struct dt__coll_logent *coll_log;
    int coll_log_cap;
    atomic_int coll_log_n;
    atomic_int time_lowering;    /* dt_debug_lowering_ns: time each node's lowering */
    atomic_long lowering_ns;     /* the lowering steps' time while timed */
    atomic_long nodes_reordered; /* lowered ahead of an older node (core/controller/sched.c) */
    /* Controller-only: kernels queued on communication streams ever
     * (dt__lw_stream_append; the schedule reads it). */
    long comm_queued;
    /* Controller-only: the replay cache while it captures a node's kernels
     * (dt__lw_stream_append notes them), NULL otherwise. */
    struct dt__replay *replay_cap;
    dt_mesh *defer_mesh; /* controller-only: mesh references not yet dropped */
    /* Controller-only: the controller thread's pool lists (common/pool.h),
     * for its allocations and frees of records; NULL until it runs. */
    struct dt__pool_lists *ctl_pools;
    int defer_n;

    /* Flow control: the backlog is submitted + kqueued - retired, node
     * records queued plus kernels not yet run. A client that finds it above
     * DT_BACKLOG_MAX waits (bl_lock/bl_cond) until the pipeline has drained
     * to half, so a loop that records faster than the devices run cannot grow
     * memory without bound. */
    _Alignas(DT_CACHE_LINE) atomic_long retired; /* nodes lowered + kernels run */
    _Alignas(DT_CACHE_LINE) atomic_int bl_waiters;
    atomic_long flow_waits; /* times a client waited on the backlog */
    pthread_mutex_t bl_lock;
    pthread_cond_t bl_cond;
    /* The controller's sleep; clients take qlock only to wake it. */
    pthread_mutex_t qlock;
    pthread_cond_t qcond;

    /* Workers: kernels that wrote into in[0]'s buffer (dt_graph_get_stats). */
    _Alignas(DT_CACHE_LINE) atomic_long kernels_in_place;

    /* Controller-only: the stream map, an open-addressing table keyed by
     * (device type, id, kind) with linear probing (smap_cap a power of two,
     * at most half full), and the streams in creation order. */
    _Alignas(DT_CACHE_LINE) dt__stream **smap;
    size_t smap_cap, smap_n;
    dt__stream *streams, *streams_last;
    dt__stream *dirty;
    dt__stream *dead_q; /* streams with dead blobs this round (stream_int.h) */
    uint64_t blob_ids;  /* the last blob id given (dt__blob.id) */
    /* Controller-only: the collectives' groups made so far (core/controller/lower_comm.c). */
    struct dt__group_ref *groups;
    /* Controller-only: each mesh dim's streams and groups for collectives,
     * cached as first looked up (dt__lw_coll_dim, lower_comm.c). */
    struct dt__coll_dim *coll_dims;
    /* Controller-only: the graph has remote streams (core/controller/remote.c), and
     * its name on the worker nodes (0 until its first remote stream). */
    int has_remote;
    uint32_t remote_tag;
    /* Controller-only: dt__cluster_generation when its streams were last
     * checked against the cluster's devices (executor.c). */
    uint64_t cluster_gen;
    /* Controller-only: what the completions of its batches on worker nodes
     * retire the backlog through (core/controller/remote.c); NULL until the first. */
    struct dt__racct *racct;
    /* Every device is this process's (a worker node's own graph, which in a
     * one-process test shares the process with its main node). */
    int local_only;
    /* dt_graph_options.per_device_per_process: every device is a worker
     * node's of a private cluster (dt__graph_local); set at creation. */
    int per_process;
    /* The global id of this process's device 0, per type: 0, except in a
     * worker node's graph, whose CUDA devices are the global ids from its
     * first (node-major numbering, docs/cluster.md) and run as the node's
     * local devices id - first (the backend's streams, NCCL). Set before
     * the first stream; read by the controller and the workers. */
    int64_t first_id[DT_DEVICE_TYPES];
    dt__ktap_fn ktap; /* test-only (dt__graph_set_kernel_tap_for_test) */
    void *ktap_arg;
    /* One communication back end per device type, made on first use
     * (dt__graph_comm); read by workers, freed with the graph. */
    _Atomic(struct dt__comm *) comm[DT_DEVICE_TYPES];
    /* Explain and trace records (core/records/trace.h); NULL when it could not be
     * made (nothing is recorded then). Made and freed with the graph. */
    struct dt__rec *rec;
    /* Controller-only: the compute streams of the mesh the last run opened
     * on (core/controller/lower_step.c), for meshes of up to
     * 8 devices: valid while the mesh's uid is step_ss_uid
     * and cluster_gen step_ss_gen (a stream is only replaced when a
     * cluster change retires it); step_ss_uid 0: none. */
    uint64_t step_ss_uid, step_ss_gen;
    struct dt__stream *step_ss[8];
    /* Runs' allocations (core/records/step.h) that their last slots gave
     * back, for the controller's next runs: a run's kernel images span tens
     * of kilobytes, which malloc would hand back to the system and fault in
     * again, and several runs are in flight at once (decode at tp8: ~6 a
     * token). Written by workers, taken by the controller; freed with the
     * graph. Their own line. */
    _Alignas(DT_CACHE_LINE) _Atomic(struct dt__step *) step_spare[DT__STEP_SPARES];
};

#define DT__Q_IS_CLOSED(h) (((uintptr_t)(h)&1) != 0)
#define DT__R_CLOSED ((dt__tval *)(uintptr_t)1)
static inline int dt__graph_ok(const dt_graph *g) { return g && g->magic == DT__GRAPH_LIVE; }

/* ---- the graph record's shared state (graph_state.c) ---- */

/* The fork generation: moved in a forked child (src/init.c), so a graph
 * made before the fork is not the child's. */
extern _Atomic unsigned dt__fork_gen;
static inline int dt__graph_forked(const dt_graph *g) {
    return g->fork_gen != atomic_load_explicit(&dt__fork_gen, memory_order_relaxed);
}
/* The controller's last act: wakes dt_graph_cancel/shutdown waiters. */
void dt__graph_controller_exited(dt_graph *g);

/* The backend that runs device type t's kernels (any thread; fixed at
 * creation). Declared in client/graph.h too, for modules the layout is not
 * for (src/ops). */
const dt__backend *dt__graph_be(const dt_graph *g, dt_device_type t);

/* The error (set, and returned) of a push onto a graph that cannot take it:
 * DT_EFORKED (made before this process forked) or shut down. */
dt_status dt__submit_error(dt_status st);

/* Flow control: a client that finds the backlog (nodes queued plus kernels
 * not yet run) above DT_BACKLOG_MAX waits until it has drained to half,
 * checking every DT_BACKLOG_STRIDE of its submissions. */
#define DT_BACKLOG_MAX 32768
#define DT_BACKLOG_STRIDE 64
/* n nodes lowered or kernels run (controller, workers): wakes waiters once
 * the backlog is down to half. */
void dt__backlog_done(dt_graph *g, long n);
long dt__backlog(dt_graph *g);

/* Whether every device of g is this process's: a worker node's own graph,
 * or an ordinary graph while the cluster's worker nodes serve only
 * per-device-per-process graphs (dt_cluster_options.private_nodes). */
static inline int dt__graph_local(const dt_graph *g) {
    return g->local_only || (!g->per_process && dt__port_private());
}

#endif /* DT_CORE_GRAPH_INT_H */
