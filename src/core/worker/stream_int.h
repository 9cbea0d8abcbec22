/*
 * The stream's layout (layout only; the functions are stream.h). For the
 * stream's own modules (kernel_stream.c, events.c, kernel_run.c) and the
 * controller-side friends that read its device or queue its kernels
 * (lower.c, executor.c, fetch.c, blob.c, debug.c, the CHAIN lowering in
 * src/ops/elementwise_chain.c, and C tests). Which thread writes
 * each field is on the struct.
 */
#ifndef DT_CORE_STREAM_INT_H
#define DT_CORE_STREAM_INT_H

#include "core/records/kernel_rec.h"
#include "core/worker/stream.h"

/* A worker thread with an in-order kernel queue for one (device type, id,
 * kind). Streams live in the graph's stream map (core/controller/stream_map.c), made on first
 * use, and stop with the graph.
 *
 * Events (events.c): the worker counts the kernels it has completed in
 * `done` (every kernel the controller appended, in order), so "kernel n of
 * this stream has completed" is an event that costs nothing to record. A
 * worker of another stream that needs such an event spins briefly, then
 * sleeps on this stream's ev_lock/ev_cond; the worker broadcasts there only
 * when ev_waiters says someone sleeps. ev_lock is a leaf lock. */
struct dt__stream {
    dt_device_type type;
    int64_t device_id;
    int kind;
    struct dt_graph *g;
    const dt__backend *be;
    void *ctx;         /* the backend's stream context (stream_new), or NULL */
    int record_events; /* the backend has event_new/record/free: record one per output */
    dt__memdev *mem;   /* the device's memory record */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    dt__krec *head, *tail; /* guarded by lock */
    int sleeping;          /* guarded by lock */
    atomic_uint pushed;    /* bumped per hand-over: the worker's spin watches it */
    /* Controller-only: kernels lowered in this batch, not yet handed over;
     * kernels appended ever (the last one's number is its event). */
    dt__krec *bhead, *btail;
    struct dt__stream *next_dirty;
    int dirty;
    /* Controller-only: blobs this stream's worker made whose last reference
     * the controller let go of this round (dt__blob_release_ctl), for the
     * worker to free; the stream is on g->dead_q while it has any. */
    struct dt__blob *dead;
    struct dt__stream *next_dead_q;
    int dead_queued;
    uint64_t appended;
    /* Controller-only: 1 while the open run (core/records/step.h) numbers
     * kernels on this stream: what is bound or linked here closes it first. */
    int in_run;
    struct dt__stream *next_all; /* controller-only: the graph's streams, oldest first */
    /* A remote stream (core/controller/remote.h): worker node remote - 1 runs its
     * kernels; it has no worker thread here and its `done` is all ones.
     * 0: a local stream. Set when made. */
    int remote;
    /* Controller-only: a stream whose device is served elsewhere since
     * (dt__graph_streams_recheck): out of the map, so new work on the id
     * goes where it is served now; its values stay and are read here. */
    int retired;
    /* Worker-written, read by consumers on other streams. */
    _Alignas(DT_CACHE_LINE) _Atomic uint64_t done;
    uint64_t completed;        /* worker-only: what it last stored into done */
    struct dt__graphs *graphs; /* worker-only: its captured run slots (graph_run.c), or NULL */
    atomic_int ev_waiters;
    pthread_mutex_t ev_lock;
    pthread_cond_t ev_cond;
    /* Test-only counts (dt__graph_debug_stream): kernels run, and of those
     * collectives and cross-mesh assemblies. Worker-written, relaxed. */
    atomic_long n_run, n_comm;
    dt__krec *stop_k;       /* the stop kernel, made with the stream */
    struct dt__recbuf *rec; /* worker-only: its trace buffer, owned by g->rec (core/records/trace.h) */
    /* Worker-only: the last backend kernel's attributes, which the next one
     * is unpacked over (dt__kattr_unpack_over), and its arrays' lengths. On
     * lines of their own, away from the fields other threads read. */
    _Alignas(DT_CACHE_LINE) dt__kattr kattr;
    uint8_t kattr_lens[DT__KATTR_ARRAYS];
};

#endif /* DT_CORE_STREAM_INT_H */
