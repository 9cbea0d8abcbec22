/*
 * Remote streams, the controller's side (core/remote.h): at the flush, each
 * worker node's kernels of the round become one batch body (the values they
 * read that the node does not hold, then the kernel codec's bytes), which
 * the cluster thread sends (src/net/cluster.c). The kernels' records are
 * then dropped here: their outputs stay as names of the node's values.
 *
 * Threads: the controller thread only.
 */
#include <stdio.h>
#include <string.h>

#include "core/blob.h"
#include "core/future.h"
#include "core/graph.h"
#include "core/graph_int.h"
#include "core/kernel.h"
#include "core/kernel_rec.h"
#include "core/remote.h"
#include "core/stream.h"
#include "core/stream_int.h"

static atomic_uint tags; /* the graphs' names on the worker nodes */

static void patch(dt__bytes *b, size_t at, uint64_t v, int n) {
    if (!b->failed) {
        uint8_t *p = b->p + at;
        dt__le_put(&p, v, n);
    }
}

/* The node already holds b: it made it, or an earlier batch sent it. */
static int held(const dt__blob *b, int node) {
    return b->remote == node + 1 || (b->producer && b->producer->remote == node + 1);
}

/* One put: b's bytes when it is a host value here, else an error. */
static void put(dt__bytes *body, dt__blob *b, int node, uint32_t tag) {
    dt_dtype dtype = DT_FLOAT32;
    int64_t shape[DT_MAX_NDIM];
    int ndim = !b->producer && b->impl && !b->error && b->be->describe
                   ? b->be->describe(b->impl, &dtype, shape)
                   : -1;
    char why[600];
    const char *err = b->error;
    size_t mark = body->len;
    if (ndim >= 0) {
        dt__bytes_put(body, b->id, 8);
        dt__bytes_put(body, (uint32_t)dtype, 4);
        dt__bytes_put(body, (uint32_t)ndim, 4);
        for (int d = 0; d < ndim; d++)
            dt__bytes_put(body, (uint64_t)shape[d], 8);
        dt__bytes_put(body, 0, 4);
        size_t nb = b->be->nbytes(b->impl);
        dt__bytes_put(body, nb, 8);
        uint8_t *p = dt__bytes_room(body, nb);
        char e[256] = "";
        if (p && b->be->to_host(b->impl, p, nb, e, sizeof e) == DT_OK)
            goto sent;
        body->len = mark; /* an error put instead */
        snprintf(why, sizeof why, "copying a value to worker node %d failed: %s", node, e);
        err = why;
    }
    if (!err) {
        snprintf(why, sizeof why,
                 "a kernel on worker node %d reads a value computed on another node or on the main node: "
                 "copies between nodes are not supported yet (issue 13 item 3)",
                 node);
        err = why;
    }
    size_t el = strlen(err);
    if (el > 4000)
        el = 4000;
    dt__bytes_put(body, b->id, 8);
    dt__bytes_put(body, 0, 4);
    dt__bytes_put(body, 0, 4);
    dt__bytes_put(body, el, 4);
    uint8_t *p = dt__bytes_room(body, el);
    if (p)
        memcpy(p, err, el);
    dt__bytes_put(body, 0, 8);
sent:
    if (!b->remote) {
        b->remote = node + 1;
        b->rtag = tag;
    }
}

typedef struct futs {
    dt_future **f;
    int *count;
    int n, cap;
} futs;

static int add_future(futs *fs, dt_future *f) {
    for (int i = 0; i < fs->n; i++)
        if (fs->f[i] == f) {
            fs->count[i]++;
            return 0;
        }
    if (fs->n == fs->cap) {
        int cap = fs->cap ? 2 * fs->cap : 8;
        dt_future **nf = dt__realloc(fs->f, (size_t)cap * sizeof *nf);
        if (nf)
            fs->f = nf;
        int *nc = nf ? dt__realloc(fs->count, (size_t)cap * sizeof *nc) : NULL;
        if (!nc)
            return -1;
        fs->count = nc;
        fs->cap = cap;
    }
    fs->f[fs->n] = f;
    fs->count[fs->n++] = 1;
    return 0;
}

/* Ships the `n` streams `ss` of worker node `node`. */
static void ship(dt_graph *g, int node, dt__stream **ss, int n) {
    dt__kbatch kb = {.n = n, .s = dt__calloc((size_t)n, sizeof *kb.s)};
    dt__bytes body = {0};
    futs fs = {0};
    long nk = 0;
    uint32_t nput = 0;
    char msg[1024] = "";
    dt__bytes_put(&body, g->remote_tag, 4);
    size_t nput_at = body.len;
    dt__bytes_put(&body, 0, 4);
    for (int i = 0; i < n; i++) {
        dt__stream *s = ss[i];
        if (kb.s)
            kb.s[i] = (dt__kbatch_stream){s->type, s->device_id, s->kind, s->bhead, s->btail};
        for (dt__krec *k = s->bhead; k; k = k->next) {
            nk++;
            for (int j = 0; j < k->n_in; j++)
                if (!held(k->in[j], node)) {
                    put(&body, k->in[j], node, g->remote_tag);
                    nput++;
                }
            if ((k->kop == DT_KC_FETCH || k->kop == DT_KC_SYNC) && add_future(&fs, k->handle) != 0)
                body.failed = 1;
        }
    }
    patch(&body, nput_at, nput, 4);
    size_t klen_at = body.len;
    dt__bytes_put(&body, 0, 8);
    dt_status st = body.failed || !kb.s ? DT_ENOMEM : DT_OK;
    if (st == DT_OK)
        st = dt__kernel_encode(g, &kb, &body);
    if (st == DT_OK && body.failed)
        st = DT_ENOMEM;
    if (st != DT_OK)
        snprintf(msg, sizeof msg, "cannot run on worker node %d: %s", node,
                 st == DT_ENOMEM ? "out of memory" : dt_last_error());
    patch(&body, klen_at, body.len - klen_at - 8, 8);
    for (int i = 0; i < n; i++) {
        dt__stream *s = ss[i];
        for (dt__krec *k = s->bhead, *next; k; k = next) {
            next = k->next;
            dt__blob *out = k->out;
            if (out && !out->error) {
                char where[600];
                if (st == DT_OK)
                    snprintf(where, sizeof where,
                             "%s on cpu:%lld: the value lives on worker node %d; reading it on another node "
                             "or on the main node is not supported yet (issue 13 item 3)",
                             k->opname ? k->opname : "kernel", (long long)s->device_id, node);
                out->error = dt__strdup(st == DT_OK ? where : msg);
            }
            if (out && st == DT_OK) {
                out->remote = node + 1;
                out->rtag = g->remote_tag;
            }
            if (k->kop == DT_KC_FETCH || k->kop == DT_KC_SYNC) {
                int listed = 0;
                for (int f = 0; f < fs.n && !listed; f++)
                    listed = fs.f[f] == k->handle;
                if (listed)
                    k->handle = NULL; /* the reference moved into fs */
                else                  /* out of memory listing it: fails here, released by the discard */
                    dt__future_fail(k->handle, DT_EKERNEL, msg);
            }
            dt__krec_discard(k);
        }
        s->bhead = s->btail = NULL;
    }
    dt__backlog_done(g, nk);
    dt__free(kb.s);
    if (st == DT_OK) {
        dt__cluster_ship(node, dt_graph_backend(g), body.p, body.len, fs.f, fs.count, fs.n);
    } else {
        dt__bytes_free(&body);
        for (int i = 0; i < fs.n; i++) {
            dt__future_fail(fs.f[i], DT_EKERNEL, msg);
            for (int c = 0; c < fs.count[i]; c++)
                dt_future_release(fs.f[i]);
        }
    }
    dt__free(fs.f);
    dt__free(fs.count);
}

uint32_t dt__remote_tag(dt_graph *g) {
    if (!g->remote_tag)
        g->remote_tag = atomic_fetch_add(&tags, 1) + 1;
    return g->remote_tag;
}

void dt__remote_flush(dt_graph *g) {
    dt__remote_tag(g);
    /* Off the dirty list, oldest first. */
    dt__stream *rem[64];
    for (;;) {
        int n = 0, node = 0;
        for (dt__stream **pp = &g->dirty; *pp;) {
            dt__stream *s = *pp;
            if (s->remote && (!node || s->remote == node) && n < 64) {
                node = s->remote;
                *pp = s->next_dirty;
                s->next_dirty = NULL;
                s->dirty = 0;
                rem[n++] = s;
            } else {
                pp = &s->next_dirty;
            }
        }
        if (!n)
            return;
        for (int i = 0; i < n / 2; i++) {
            dt__stream *t = rem[i];
            rem[i] = rem[n - 1 - i];
            rem[n - 1 - i] = t;
        }
        ship(g, node - 1, rem, n);
    }
}
