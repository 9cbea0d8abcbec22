/*
 * The graph's streams: a graph keeps one worker stream per (device type, id,
 * kind) it has used, in an open-addressing map made on first use, so a mesh
 * of ids [0, 2**31-1] costs two streams, not a table of two billion slots.
 * The map and the list of streams in creation order are controller-only:
 * lowering looks streams up, dt__lower_sync and shutdown walk the list.
 *
 * Threads: the controller (the test hooks' map reads too: the debug read
 * after a sync, see stream_map.h).
 */
#include <string.h>

#include "comm/comm.h"
#include "core/controller/lower_comm.h"
#include "core/controller/remote.h"
#include "core/controller/stream_map.h"
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
