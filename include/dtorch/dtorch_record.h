/*
 * dtorch recording: what dtorch.explain() and dtorch.profiler.trace() are
 * built on (docs/explain-and-trace.md). Include after or instead of
 * dtorch.h (it includes it). The library's implementation is
 * src/core/records/trace.c (the recorder) and the roles' own records.
 */
#ifndef DTORCH_RECORD_H
#define DTORCH_RECORD_H

#include "dtorch/dtorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ----------------------------------------- recording: explain and traces */

/* What dtorch.explain() and dtorch.profiler.trace() are built on. While
 * recording of a kind is on (process-wide, every graph), each graph's
 * controller and workers append fixed-size records to bounded per-thread
 * buffers (a full buffer drops records and counts them); the take functions
 * hand them over. Off, recording costs one predictable branch per node and
 * per kernel. */
typedef enum dt_record_kind {
    DT_RECORD_EXPLAIN = 0, /* one record per collective lowered (dt_explain_record) */
    DT_RECORD_TRACE = 1    /* nodes lowered and kernels run, with times (dt_trace_node, dt_trace_kernel) */
} dt_record_kind;

/* Turns recording of `kind` on (on != 0) or off; calls nest (a count: off
 * as many times as on). Work lowered while it is on is recorded, so to
 * record exactly some ops, sync their graph before turning it on and after
 * them before turning it off. DT_EINVAL for an unknown kind. Any thread. */
DT_API dt_status dt_record_enable(dt_record_kind kind, int on);
/* 1 while recording of `kind` is on, else 0. Any thread. */
DT_API int dt_record_enabled(dt_record_kind kind);

/* The kind of communication a collective performs. */
typedef enum dt_comm_kind {
    DT_COMM_ALL_GATHER = 0,
    DT_COMM_ALL_REDUCE,
    DT_COMM_REDUCE_SCATTER,
    DT_COMM_ALL_TO_ALL,
    DT_COMM_SHIFT,     /* a ring step: each device sends its block to the next (send/recv) */
    DT_COMM_SEND_RECV, /* point-to-point copies between two meshes (pipeline stages) */
    DT_COMM_KINDS
} dt_comm_kind;
/* "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "shift",
 * "send_recv"; NULL for other values. Static. */
DT_API const char *dt_comm_kind_name(int kind);

/* One collective a node's lowering made: every group of devices along one
 * mesh dim runs it once (a device takes part once). `bytes` is what one
 * device contributes (its input), the most over the devices; for
 * DT_COMM_SEND_RECV the most one destination device receives from other
 * devices. */
typedef struct dt_explain_record {
    const char *file; /* the user's source file (interned, lives with the process), or NULL */
    int32_t line;
    int32_t kind;                        /* dt_comm_kind */
    int32_t mesh_dim;                    /* -1: between meshes */
    char mesh_dim_name[DT_MAX_DIM_NAME]; /* the mesh's name of that dim; "" when -1 or unnamed */
    const char *op;                      /* the op whose lowering made it (static) */
    int64_t bytes;
} dt_explain_record;

/* Waits for g's work issued so far (as dt_graph_sync), then hands over the
 * explain records appended since the last take: *out is a new array of *n
 * records (free with dt_record_free; NULL when *n is 0), *dropped (may be
 * NULL) the records lost to a full buffer since the last take. When
 * recording of the kind is off, the buffers are emptied afterwards. Client
 * threads. */
DT_API dt_status dt_graph_take_explain(dt_graph *g, dt_explain_record **out, size_t *n, int64_t *dropped);

#define DT_TRACE_SHAPES 4 /* shapes kept per node: the output's, then up to 3 inputs' */

/* A node the controller lowered: when a client thread recorded it and when
 * the controller lowered it (nanoseconds, CLOCK_MONOTONIC). */
typedef struct dt_trace_node {
    uint64_t id;           /* unique in the graph, > 0 */
    const char *op, *file; /* static; interned or NULL */
    int32_t line;
    uint32_t client_thread; /* a small number per client thread, from 1 */
    int64_t client_begin_ns, client_end_ns, lower_begin_ns, lower_end_ns;
    int32_t dtype; /* the output's dt_dtype, -1 when none */
    int32_t n_shapes;
    int32_t ndim[DT_TRACE_SHAPES];
    int64_t shape[DT_TRACE_SHAPES][DT_MAX_NDIM]; /* global shapes */
} dt_trace_node;

/* A kernel a worker ran: on which stream, its node, its times and the bytes
 * of its output (0 when it has none). */
typedef struct dt_trace_kernel {
    uint64_t node;                    /* dt_trace_node.id, 0 when its node was not recorded */
    int32_t device_type, stream_kind; /* dt_device_type; 0 compute, 1 communication */
    int64_t device_id;
    uint64_t seq;                   /* the kernel's number on its stream */
    const char *op, *kernel, *file; /* static; static; interned or NULL */
    int32_t line;
    int64_t begin_ns, end_ns, bytes;
} dt_trace_kernel;

/* As dt_graph_take_explain, for traces: new arrays of nodes and kernels
 * (free each with dt_record_free). Client threads. */
DT_API dt_status dt_graph_take_trace(dt_graph *g, dt_trace_node **nodes, size_t *n_nodes,
                                     dt_trace_kernel **kernels, size_t *n_kernels, int64_t *dropped);
/* Frees an array a take function made. NULL is ignored. */
DT_API void dt_record_free(void *records);

#ifdef __cplusplus
}
#endif

#endif /* DTORCH_RECORD_H */
