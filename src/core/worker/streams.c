/*
 * The graph's streams and their events.
 *
 * Streams: a graph keeps one worker stream per (device type, id, kind) it
 * has used, in an open-addressing map made on first use, so a mesh of ids
 * [0, 2**31-1] costs two streams, not a table of two billion slots. The map
 * and the list of streams in creation order are controller-only: lowering
 * looks streams up, dt__lower_sync and shutdown walk the list.
 *
 * Events: an event is (producer stream, kernel number). The producing worker
 * publishes how many of its kernels have completed (dt__event_complete, a
 * release store); a consumer on another stream spins briefly on that count
 * and then sleeps on the producer's own ev_lock/ev_cond, so no worker ever
 * waits on a graph-wide lock and recording an event costs nothing beyond the
 * count's store. A backend with event slots (backend.h) adds its own event
 * on top: the host wait then only covers the producer's launch, and the
 * device queue waits on the backend's event.
 *
 * Threads: dt__graph_stream, dt__graph_streams_stop and the test hooks' map
 * reads run on the controller thread (the debug read after a sync, see
 * stream.h). dt__event_complete runs on the producing worker, dt__event_wait
 * on the consuming worker, dt__event_query on any thread.
 * Locks: a stream's ev_lock is a leaf: the producer takes it only to
 * broadcast, the consumer only to sleep, neither holding any other lock.
 */
#include <sched.h>
#include <string.h>

#include "comm/comm.h"
#include "core/controller/remote.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

_Static_assert(DT_DEVICE_CUDA < DT_DEVICE_TYPES, "a graph has one backend slot per dt_device_type");

/* ------------------------------------------------------------ the map */

static size_t key_hash(dt_device_type type, int64_t id, int kind) {
    uint64_t h = (uint64_t)id * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)type << 1 | (uint64_t)kind) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    return (size_t)h;
}

static int key_eq(const dt__stream *s, dt_device_type type, int64_t id, int kind) {
    return s->device_id == id && s->kind == kind && s->type == type;
}

/* Inserts s into a table of `cap` slots known to have a free one. */
static void map_put(dt__stream **map, size_t cap, dt__stream *s) {
    size_t i = key_hash(s->type, s->device_id, s->kind) & (cap - 1);
    while (map[i])
        i = (i + 1) & (cap - 1);
    map[i] = s;
}

static dt_status map_grow(dt_graph *g) {
    size_t ncap = g->smap_cap ? g->smap_cap * 2 : 16;
    dt__stream **nm = dt__calloc(ncap, sizeof *nm);
    if (!nm)
        return dt__error(DT_ENOMEM, "streams: out of memory");
    for (size_t i = 0; i < g->smap_cap; i++)
        if (g->smap[i])
            map_put(nm, ncap, g->smap[i]);
    dt__free(g->smap);
    g->smap = nm;
    g->smap_cap = ncap;
    return DT_OK;
}

static dt__stream *map_find(const dt_graph *g, dt_device_type type, int64_t id, int kind) {
    if (!g->smap_cap)
        return NULL;
    size_t i = key_hash(type, id, kind) & (g->smap_cap - 1);
    for (dt__stream *s; (s = g->smap[i]); i = (i + 1) & (g->smap_cap - 1))
        if (key_eq(s, type, id, kind))
            return s;
    return NULL;
}

dt__stream *dt__graph_stream(dt_graph *g, dt_device_type type, int64_t id, int kind) {
    dt__stream *s = map_find(g, type, id, kind);
    if (s)
        return s;
    if ((g->smap_n + 1) * 2 > g->smap_cap && map_grow(g) != DT_OK)
        return NULL;
    s = dt__stream_start(g, type, id, kind);
    if (!s)
        return NULL;
    map_put(g->smap, g->smap_cap, s);
    g->smap_n++;
    if (g->streams_last)
        g->streams_last->next_all = s;
    else
        g->streams = s;
    g->streams_last = s;
    return s;
}

int dt__graph_streams_recheck(dt_graph *g) {
    int retired = 0;
    for (dt__stream *s = g->streams; s; s = s->next_all)
        if (!s->retired && dt__port_node_of(s->type, s->device_id) != s->remote - 1) {
            s->retired = 1;
            retired++;
        }
    if (!retired)
        return 0;
    /* The map again without them (linear probing has no deletion). */
    memset(g->smap, 0, g->smap_cap * sizeof *g->smap);
    g->smap_n = 0;
    for (dt__stream *s = g->streams; s; s = s->next_all)
        if (!s->retired) {
            map_put(g->smap, g->smap_cap, s);
            g->smap_n++;
        }
    dt__graph_groups_retire(g);
    return retired;
}

void dt__graph_streams_stop(dt_graph *g) {
    dt__remote_detach(g); /* its batches on worker nodes retire nothing here from now on */
    /* Stop every worker before freeing any stream: a worker still running
     * may wait on another stream's events (its `done` count), so a stream is
     * freed only when no worker of the graph is left to read it. */
    for (dt__stream *s = g->streams; s; s = s->next_all)
        if (!s->remote)
            dt__stream_send_stop(s);
    for (dt__stream *s = g->streams; s; s = s->next_all)
        if (!s->remote)
            pthread_join(s->thread, NULL);
    for (dt__stream *s = g->streams, *next; s; s = next) {
        next = s->next_all;
        dt__stream_free(s);
    }
    dt__free(g->smap);
    g->smap = NULL;
    g->smap_cap = g->smap_n = 0;
    g->streams = g->streams_last = NULL;
}

/* ------------------------------------------------------------ events */

static int has_events(const dt__backend *be) { return be->api_version >= 2 && be->event_wait; }

void dt__event_complete(dt__stream *s, uint64_t n) {
    /* seq_cst on both sides (done then ev_waiters here, ev_waiters then done
     * in the waiter): one of the two always sees the other's store. */
    atomic_store(&s->done, n);
    if (atomic_load(&s->ev_waiters) > 0) {
        pthread_mutex_lock(&s->ev_lock);
        pthread_cond_broadcast(&s->ev_cond);
        pthread_mutex_unlock(&s->ev_lock);
    }
}

static int host_done(const dt__blob *b) {
    return !b->producer || atomic_load_explicit(&b->producer->done, memory_order_acquire) >= b->seq;
}

void dt__event_wait(dt__stream *s, const dt__blob *b) {
    dt__stream *p = b->producer;
    if (p && p != s && !host_done(b)) {
        /* A short bounded spin saves the sleep when the producer is about to
         * finish (dt__spin_until_changed's reasoning: each probe yields). */
        for (int i = 0; i < DT_SPIN_PROBES && !host_done(b); i++)
            sched_yield();
        if (!host_done(b)) {
            pthread_mutex_lock(&p->ev_lock);
            atomic_fetch_add(&p->ev_waiters, 1);
            while (atomic_load(&p->done) < b->seq)
                pthread_cond_wait(&p->ev_cond, &p->ev_lock);
            atomic_fetch_sub(&p->ev_waiters, 1);
            pthread_mutex_unlock(&p->ev_lock);
        }
    }
    /* The device queue waits for the data (CUDA: cudaStreamWaitEvent). A
     * failure leaves the host wait above, which is the stronger one for
     * backends that run kernels synchronously. Another backend's event means
     * nothing here: that piece is staged through host memory, which waits. */
    if (p && p != s && b->bev && b->be == s->be && has_events(s->be))
        (void)s->be->event_wait(s->ctx, b->bev);
}

int dt__event_query(const dt__blob *b) {
    if (!host_done(b))
        return 0;
    if (b->bev && b->be->api_version >= 2 && b->be->event_query)
        return b->be->event_query(b->bev) != 0;
    return 1;
}

/* ------------------------------------------------------------ test hooks */

void dt__graph_set_backend_for_test(dt_graph *g, dt_device_type type, const dt__backend *be) {
    if (g && be && (unsigned)type < DT_DEVICE_TYPES)
        g->be[type] = be;
}

int dt__graph_debug_stream(dt_graph *g, dt_device_type type, int64_t id, int kind, long *run, long *comm) {
    dt__stream *s = map_find(g, type, id, kind);
    if (!s)
        return -1;
    if (run)
        *run = atomic_load_explicit(&s->n_run, memory_order_relaxed);
    if (comm)
        *comm = atomic_load_explicit(&s->n_comm, memory_order_relaxed);
    return 0;
}
