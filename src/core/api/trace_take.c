/*
 * Handing over explain and trace records (core/records/trace.h):
 * dt_graph_take_explain and dt_graph_take_trace wait for the graph's work
 * issued so far, then copy what every buffer gained since the last take.
 *
 * Threads: client threads (any); the recorder's lock (a leaf) while reading.
 */
#include <stdlib.h>
#include <string.h>

#include "core/records/graph_int.h"
#include "core/records/trace.h"

/* Copies [b->taken, count) of `b` into a new array (*out, *n). */
static dt_status take_buf(dt__recbuf *b, size_t out_elem, void **out, size_t *n) {
    size_t cnt = dt__recbuf_count(b), k = cnt - b->taken;
    *out = NULL;
    *n = 0;
    if (!k)
        return DT_OK;
    char *arr = dt__malloc(k * out_elem);
    if (!arr)
        return dt__error(DT_ENOMEM, "records: out of memory");
    for (size_t i = 0; i < k; i++)
        memcpy(arr + i * out_elem, dt__recbuf_at(b, b->taken + i), out_elem);
    b->taken = cnt;
    *out = arr;
    *n = k;
    return DT_OK;
}

/* The start of a take: checks g, waits for its queued work, then locks its
 * records (*r, unlocked by the caller). *r stays NULL on failure or when g
 * records nothing. */
static dt_status take_begin(dt_graph *g, dt__rec **r, int64_t *dropped) {
    if (dropped)
        *dropped = 0;
    if (!dt__graph_ok(g))
        return dt__error(DT_EINVAL, "graph is %s", dt__handle_bad(g));
    dt_status st = dt_graph_sync(g);
    if (st != DT_OK || !g->rec)
        return st;
    *r = g->rec;
    pthread_mutex_lock(&(*r)->lock);
    return DT_OK;
}

dt_status dt_graph_take_explain(dt_graph *g, dt_explain_record **out, size_t *n, int64_t *dropped) {
    if (!out || !n)
        return dt__error(DT_EINVAL, "dt_graph_take_explain: NULL argument");
    *out = NULL;
    *n = 0;
    dt__rec *r = NULL;
    dt_status st = take_begin(g, &r, dropped);
    if (!r)
        return st;
    st = take_buf(&r->explain, sizeof **out, (void **)out, n);
    long d = atomic_exchange(&r->explain.dropped, 0);
    if (dropped)
        *dropped = d;
    if (st == DT_OK && !dt__rec_enabled(DT__REC_EXPLAIN))
        dt__recbuf_reset(&r->explain);
    pthread_mutex_unlock(&r->lock);
    return st;
}

static int kmap_cmp(const void *a, const void *b) {
    const dt__rec_kmap *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The node of kernel `seq` on stream `key`, from the sorted map. */
static uint64_t kmap_find(const dt__rec_kmap *m, size_t n, uint64_t key, uint64_t seq) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const dt__rec_kmap *e = &m[mid];
        if (e->key < key || (e->key == key && e->seq < seq))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && m[lo].key == key && m[lo].seq == seq ? m[lo].node : 0;
}

dt_status dt_graph_take_trace(dt_graph *g, dt_trace_node **nodes, size_t *n_nodes, dt_trace_kernel **kernels,
                              size_t *n_kernels, int64_t *dropped) {
    if (!nodes || !n_nodes || !kernels || !n_kernels)
        return dt__error(DT_EINVAL, "dt_graph_take_trace: NULL argument");
    *nodes = NULL;
    *kernels = NULL;
    *n_nodes = *n_kernels = 0;
    dt__rec *r = NULL;
    dt_status st = take_begin(g, &r, dropped);
    if (!r)
        return st;
    long d = 0;
    st = take_buf(&r->nodes, sizeof **nodes, (void **)nodes, n_nodes);
    d += atomic_exchange(&r->nodes.dropped, 0);
    /* The whole map (kernels of earlier takes' nodes may run later), sorted
     * by stream and number. */
    size_t nm = dt__recbuf_count(&r->kmap);
    dt__rec_kmap *map = st == DT_OK ? dt__malloc((nm ? nm : 1) * sizeof *map) : NULL;
    if (st == DT_OK && !map)
        st = dt__error(DT_ENOMEM, "records: out of memory");
    for (size_t i = 0; map && i < nm; i++)
        map[i] = *(const dt__rec_kmap *)dt__recbuf_at(&r->kmap, i);
    if (map)
        qsort(map, nm, sizeof *map, kmap_cmp);
    d += atomic_exchange(&r->kmap.dropped, 0);
    size_t total = 0;
    for (dt__recbuf *b = r->workers; b; b = b->next) { /* the counts seen here bound both passes */
        b->upto = dt__recbuf_count(b);
        total += b->upto - b->taken;
    }
    dt_trace_kernel *ks = st == DT_OK && total ? dt__calloc(total, sizeof *ks) : NULL;
    if (st == DT_OK && total && !ks)
        st = dt__error(DT_ENOMEM, "records: out of memory");
    size_t nk = 0;
    for (dt__recbuf *b = r->workers; b && st == DT_OK; b = b->next) {
        size_t cnt = b->upto;
        for (size_t i = b->taken; i < cnt; i++) {
            const dt__rec_kernel *e = dt__recbuf_at(b, i);
            dt_trace_kernel *o = &ks[nk++];
            o->node = kmap_find(map, nm, b->key, e->seq);
            o->device_type = (int32_t)(b->key >> 56);
            o->stream_kind = (int32_t)((b->key >> 48) & 0xff);
            o->device_id = (int64_t)(b->key & 0xffffffffffffull);
            o->seq = e->seq;
            o->op = e->op;
            o->kernel = e->kernel;
            o->file = e->file;
            o->line = e->line;
            o->begin_ns = e->begin_ns;
            o->end_ns = e->end_ns;
            o->bytes = e->bytes;
        }
        b->taken = cnt;
        d += atomic_exchange(&b->dropped, 0);
    }
    dt__free(map);
    if (st != DT_OK) {
        dt__free(*nodes);
        dt__free(ks);
        *nodes = NULL;
        *n_nodes = 0;
        ks = NULL;
        nk = 0;
    } else if (!dt__rec_enabled(DT__REC_TRACE)) {
        dt__recbuf_reset(&r->nodes);
        dt__recbuf_reset(&r->kmap);
        for (dt__recbuf *b = r->workers; b; b = b->next)
            dt__recbuf_reset(b);
    }
    pthread_mutex_unlock(&r->lock);
    *kernels = ks;
    *n_kernels = nk;
    if (dropped)
        *dropped = d;
    return st;
}
