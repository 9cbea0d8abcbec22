/*
 * Streams (interface): a worker thread with an in-order kernel queue per
 * (device type, id, kind), the events that order kernels across streams,
 * the graph's stream map, and the worker's kernel runner. kernel_stream.c
 * holds the worker loop and the hand-over, events.c the events (the map is core/controller/stream_map.c),
 * kernel_run.c what runs one kernel. Included by the controller side
 * (executor, lower, fetch, debug) and the workers' modules; src/ops and
 * src/ops name only the stream kinds (for dt__lw_collective). The stream is opaque here; its layout is
 * stream_int.h. Each declaration says its thread.
 */
#ifndef DT_CORE_STREAM_H
#define DT_CORE_STREAM_H

#include "core/core.h"
#include "core/records/kernel_rec.h"

/* Starts a stream (controller thread). NULL with the thread error set when
 * memory, the backend's stream or the thread cannot be had. */
dt__stream *dt__stream_start(struct dt_graph *g, dt_device_type type, int64_t device_id, int kind);
/* Hands over a list of kernels (controller thread). */
void dt__stream_submit(dt__stream *s, dt__krec *head, dt__krec *tail);
/* Queues the stop kernel after everything handed over (controller). */
void dt__stream_send_stop(dt__stream *s);
/* Frees a stream whose worker has been joined (controller). Only once every
 * worker of the graph has exited: a kernel on another stream may read this
 * one's completed count (its events) until then. */
void dt__stream_free(dt__stream *s);
/* Runs kernel k on s, then completes its number and drops its references
 * (s's worker thread; core/worker/kernel_run.c). */
void dt__kernel_run(dt__krec *k, dt__stream *s);
/* The message of kernel k on stream s failing for `what`, into buf: the
 * op, the device and the user's call site (core/worker/kernel_run.c). */
void dt__kernel_failure(char *buf, size_t cap, const dt__krec *k, const dt__stream *s, const char *what);
/* Runs a user kernel (DT_KC_USER: the caller's function on the inputs' local
 * pieces; s's worker thread; core/worker/user_run.c). */
void dt__user_run(dt__krec *k, dt__stream *s);
/* After dt_graph_cancel: releases k without running it (its output poisoned,
 * a read or sync failed, a collective still meets its peers), completing
 * its number (s's worker thread; core/worker/kernel_run.c). */
void dt__kernel_drop(dt__krec *k, dt__stream *s);

/* Events (events.c). The producing worker publishes a completed kernel
 * (after recording the backend's event, if any, for its output). */
void dt__event_complete(dt__stream *s, uint64_t n);
/* Makes stream `s` wait for blob b's event (worker of s): returns once the
 * producer has completed b's kernel on the host, and has the backend make
 * s's device queue wait on b's backend event if there is one. */
void dt__event_wait(dt__stream *s, const dt__blob *b);
/* 1 when b's event has completed (any thread): the host count, and the
 * backend's event_query for backends with events. */
int dt__event_query(const dt__blob *b);

/* Whether any worker thread still runs (any thread; the pools' busy probe,
 * registered by src/init.c). */
int dt__streams_running(void);
/* In a fork child: the parent's workers are gone (kernel_stream.c). */
void dt__stream_forked(void);

/* Spins briefly until *counter differs from `seen` (1) or gives up (0). The
 * spin is bounded (a few tens of microseconds) and yields the core between
 * probes, so a 2-core machine running more threads than cores is not starved:
 * it only saves the sleep/wake system calls when work arrives back to back. */
int dt__spin_until_changed(atomic_uint *counter, unsigned seen);
/* Probes of the bounded spins before a thread sleeps on its condition
 * variable; each probe yields the core once. */
#ifndef DT_SPIN_PROBES
#define DT_SPIN_PROBES 64
#endif

/* Traces (core/records/trace.h; trace_kernels.c): kernel k (`kernel` its
 * kernel's name, static) ran on s from t0 to now; called by s's worker
 * before s completes its number. */
void dt__rec_kernel_ran(dt__stream *s, const dt__krec *k, const char *kernel, int64_t t0);

/* The controller's release of a value's blob (its release loop): a blob
 * whose last reference this was and that a local stream's worker made goes
 * on that stream's dead list, which the flush hands to the worker to free
 * (dt__blob_free_dead, core/records/blob.h): the backend's free (a tensor's destructor, its
 * storage) runs on the thread that made it, not on the controller. Others
 * are freed here (kernel_stream.c). */
void dt__blob_release_ctl(struct dt_graph *g, dt__blob *b, struct dt__pool_lists *mine);
void dt__blob_release_ctl(dt_graph *g, dt__blob *b, struct dt__pool_lists *mine);

#endif /* DT_CORE_STREAM_H */
