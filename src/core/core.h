/*
 * The core's base header: the includes every core module shares, the
 * handle magics, the sizing constants, and forward declarations of the
 * records that cross module boundaries (as opaque pointers). It declares no
 * module's functions: each module has its own header, and a file includes
 * the ones it uses. Any file under src/core, src/comm and src/ops may
 * include it; nothing here runs code.
 *
 * Modules and their headers (interface: what other modules call; layout:
 * a struct definition only the module and the friends named in its header
 * comment need):
 *  - mesh.h       dt_mesh, read-only after creation (mesh.c)
 *  - meta.h       dt__meta and its pure functions: regions, dtypes,
 *                 placements (meta.c)
 *  - memstats.h   per-device live-blob byte counts (memstats.c)
 *  - blob.h       per-device blobs: refcount, event, accounting (blob.c)
 *  - tensor.h     the controller's value record and the client's symbol
 *                 (tensor.c)
 *  - node.h       client-level ops, node attributes and node records
 *                 (tensor.c makes them)
 *  - kernel.h     the kernel builder that lowering fills, core kernel kinds
 *                 (lower.c); kernel_rec.h: the queued record and its codec
 *  - stream.h     worker streams, events, the stream map, the kernel runner
 *                 (kernel_stream.c, events.c, kernel_run.c;
 *                 the map: core/controller/stream_map.c);
 *                 stream_int.h: the stream's layout
 *  - graph.h      the graph's interface: submit, flow control, client
 *                 checks (graph.c); graph_int.h: the graph's layout and the
 *                 controller's side of the queue (graph.c, executor.c)
 *  - future.h     futures, layout included (future.c)
 *  - lower.h      the lowering context and the dt__lw_* helpers (lower.c)
 *  - gate.h       test-only gates (gate.c)
 *  - window.h, placement.h: the window and its passes, the placement engine
 *  - coll.h, comm/comm.h: the collective planner's description, the
 *    communication interface
 *
 * Threads and ownership (who may touch what):
 *  - dt__meta inside a dt__tval is written once by the client before the node
 *    that creates it is enqueued, then only read (by any thread).
 *  - dt__tval.blobs is controller-only; dt__tval.next_release is written by
 *    the client that drops the symbol, then read by the controller.
 *  - A symbol and its value share one record (graph.c): the client must not
 *    touch the symbol after pushing the value onto the release stack.
 *  - dt__blob.impl/.error are written by the worker that runs the producing
 *    kernel, before any reader runs (same stream: program order; other
 *    streams: the reader waits on the blob's event, events.c, which
 *    publishes the producer's completed count with release/acquire).
 *  - Kernels are created by the controller and owned by a stream's queue,
 *    then by its worker, which frees them after running.
 *
 * Lock order (outer first): graph life_lock -> graph qlock (only for the
 * controller's sleep; the queue itself is lock-free) -> stream lock;
 * collective, future and stream event (ev_lock) locks are leaves. No lock is
 * graph-wide on the kernel path: a cross-stream wait sleeps on the
 * producing stream's ev_lock only.
 */
#ifndef DT_CORE_H
#define DT_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "common/common.h"
#include "common/pool.h"
#include "dtorch/dtorch.h"

/* Fields written by different threads are kept on different cache lines: a
 * line that one core writes and another reads moves between them on every
 * access. */
#define DT_CACHE_LINE 64

/* Device types a graph serves (dt_device_type values). */
#define DT_DEVICE_TYPES 2

/* Most tensor inputs of one node or kernel (batch_norm takes five). */
#define DT_MAX_OP_INPUTS 6
#define DT__MAX_IN DT_MAX_OP_INPUTS

/* Runs' allocations a graph keeps for its next runs (core/records/step.h,
 * graph_int.h step_spare). */
#define DT__STEP_SPARES 4

/* ------------------------------------------------------------ handles */

/* Every public handle's first field is a magic: its type's LIVE value while
 * it lives, DEAD once the final release ran. The records are type-stable
 * (pools whose slabs are never returned while the process lives), so testing
 * a released handle reads defined memory; a record on a pool's free list
 * holds a 64-byte-aligned link there, never a LIVE value (none has its low
 * six bits clear). A record
 * reused by a new handle of the same type is live again: detection is best
 * effort. The dt__X_ok checks replace the NULL tests of the entry points;
 * dt__handle_bad names what is wrong with a handle that fails one. */
#define DT__MESH_LIVE 0x4d455348u   /* "MESH" */
#define DT__TENSOR_LIVE 0x54454e53u /* "TENS" */
#define DT__GRAPH_LIVE 0x47524150u  /* "GRAP" */
#define DT__FUTURE_LIVE 0x46555455u /* "FUTU" */
#define DT__GATE_LIVE 0x47415445u   /* "GATE" */
#define DT__HANDLE_DEAD 0xdeadbeefu
static inline const char *dt__handle_bad(const void *h) { return h ? "a released handle" : "NULL"; }

/* Records that cross module boundaries, declared here so that an interface
 * can name them without their layout (each is defined in the header named). */
typedef struct dt__meta dt__meta;     /* meta.h */
typedef struct dt__memdev dt__memdev; /* memstats.c (opaque) */
typedef struct dt__blob dt__blob;     /* blob.h */
typedef struct dt__tval dt__tval;     /* tensor.h */
typedef struct dt__node dt__node;     /* node.h */
typedef struct dt__kernel dt__kernel; /* kernel.h */
typedef struct dt__krec dt__krec;     /* kernel_rec.h: a kernel as queued on a stream */
typedef struct dt__stream dt__stream; /* stream_int.h */
typedef struct dt__lower dt__lower;   /* lower.h */
typedef struct dt__coll dt__coll;     /* core/records/coll.h */

#endif /* DT_CORE_H */
