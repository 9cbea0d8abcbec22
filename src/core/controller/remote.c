/*
 * Remote streams, the controller's side (core/controller/remote.h): at the flush, each
 * worker node's kernels of the round become one batch body (the values they
 * read that the node does not hold, then the kernel codec's bytes), which
 * the cluster thread sends (src/net/cluster.c). The kernels' records are
 * then dropped here: their outputs stay as names of the node's values.
 *
 * Threads: the controller thread only.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "comm/xfer.h"
#include "core/client/graph.h"
#include "core/controller/lower_comm.h"
#include "core/controller/remote.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"
#include "dtorch/dtorch_cluster.h"

static atomic_uint tags; /* the graphs' names on the worker nodes */

/* dt_cluster_counters: host bytes and values shipped, kernels on nodes. */
static atomic_llong sent_bytes, sent_values, on_nodes;

void dt_cluster_counters_get(dt_cluster_counters *out) {
    if (!out)
        return;
    out->value_bytes = atomic_load(&sent_bytes);
    out->values = atomic_load(&sent_values);
    out->kernels_on_nodes = atomic_load(&on_nodes);
    out->relayed = dt__port_relayed();
    dt__xfer_counters(&out->data_bytes_sent, &out->data_messages_sent, &out->data_bytes_received,
                      &out->data_messages_received);
}

static void patch(dt__bytes *b, size_t at, uint64_t v, int n) {
    if (!b->failed) {
        uint8_t *p = b->p + at;
        dt__le_put(&p, v, n);
    }
}

/* The node already holds b: it made it, or an earlier batch sent it. */
static int held(const dt__blob *b, int node) {
    uint64_t seq;
    const dt__stream *p = dt__blob_event(b, &seq);
    return b->remote == node + 1 || (p && p->remote == node + 1);
}

/* One put: b's bytes when it is a host value here, else an error naming
 * the kernel k of stream s that reads it. */
static void put(dt__bytes *body, dt__blob *b, int node, uint32_t tag, const dt__krec *k,
                const dt__stream *s) {
    dt_dtype dtype = DT_FLOAT32;
    int64_t shape[DT_MAX_NDIM];
    uint64_t seq;
    const dt__stream *made = dt__blob_event(b, &seq);
    int ndim =
        !made && b->impl && !b->error && b->be->describe ? b->be->describe(b->impl, &dtype, shape) : -1;
    char why[1024], what[600];
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
        if (p && b->be->to_host(b->impl, p, nb, e, sizeof e) == DT_OK) {
            atomic_fetch_add(&sent_bytes, (long long)nb);
            atomic_fetch_add(&sent_values, 1);
            goto sent;
        }
        body->len = mark; /* an error put instead */
        snprintf(why, sizeof why, "copying a value to worker node %d failed: %s", node, e);
        err = why;
    }
    if (!err) {
        if (made && !made->remote && made->retired)
            snprintf(what, sizeof what,
                     "it reads a value this process computed on its %s:%lld before that device was worker "
                     "node %d's (the value stays where it was made): compute it again after "
                     "MainNode.wait_cluster_ready(), or copy it over with to_torch() and from_torch()",
                     made->type == DT_DEVICE_CUDA ? "cuda" : "cpu", (long long)made->device_id, node);
        else
            snprintf(what, sizeof what,
                     "a kernel on worker node %d reads a value computed on another node or on the main node "
                     "that was not copied there first (copies between nodes are send/recv pairs)",
                     node);
        dt__kernel_failure(why, sizeof why, k, s, what);
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

/* ---- per-device pieces of host values ---- */

typedef struct piece_ent {
    dt__blob *src, *piece; /* our references (src's: its address stays its own) */
    int ndim;
    int64_t start[DT_MAX_NDIM], len[DT_MAX_NDIM];
} piece_ent;

typedef struct pieces {
    piece_ent *e;
    int n, cap;
} pieces;

/* Binds SLICE kernel k to `piece` (the region it slices, whole). */
static int bind_piece(dt__krec *k, dt__kattr *a, dt__blob *piece) {
    memset(a->start, 0, sizeof a->start);
    size_t n = dt__kattr_pack_size(a);
    if (n > k->alen)
        return 0;
    k->alen = (uint32_t)dt__kattr_pack(a, k->attr);
    dt__blob_release(k->in[0]);
    k->in[0] = dt__blob_retain(piece);
    return 1;
}

/* A SLICE kernel of a host value the node does not hold (a source of
 * from_torch, dtorch.Tensor(t), distribute_tensor) reads, in place of the
 * whole value, a new one: the region it slices, sliced here and shipped as a
 * put (a region several of the node's devices slice, once). 1 when a put was
 * written; 0 leaves k as it is (the whole value is put then). */
static int put_piece(dt_graph *g, dt__bytes *body, pieces *ps, dt__krec *k, int node) {
    dt__blob *b = k->n_in == 1 ? k->in[0] : NULL;
    uint64_t seq;
    if (k->kop != DT_K_SLICE || !b || held(b, node) || dt__blob_event(b, &seq) || !b->impl || b->error ||
        !b->be->describe || !b->be->run)
        return 0;
    dt__kattr a;
    memset(&a, 0, sizeof a);
    dt__kattr_unpack(k, &a);
    if (a.ndim < 0 || a.ndim > DT_MAX_NDIM)
        return 0;
    for (int i = 0; i < ps->n; i++) {
        piece_ent *e = &ps->e[i];
        if (e->src == b && e->ndim == a.ndim && !memcmp(e->start, a.start, sizeof e->start) &&
            !memcmp(e->len, a.shape, sizeof e->len)) {
            bind_piece(k, &a, e->piece);
            return 0;
        }
    }
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 8;
        piece_ent *v = dt__realloc(ps->e, (size_t)cap * sizeof *v);
        if (!v)
            return 0;
        ps->e = v;
        ps->cap = cap;
    }
    void *impl = NULL;
    char e[256] = "";
    dt_dtype dtype = DT_FLOAT32;
    int64_t shape[DT_MAX_NDIM];
    if (b->be->run(DT_K_SLICE, &a, &b->impl, 1, &impl, e, sizeof e) != DT_OK || !impl)
        return 0;
    int ndim = b->be->describe(impl, &dtype, shape);
    dt__blob *piece = ndim >= 0 ? dt__blob_new(b->be) : NULL;
    size_t mark = body->len, nb = piece ? b->be->nbytes(impl) : 0;
    if (piece) {
        piece->id = ++g->blob_ids;
        dt__bytes_put(body, piece->id, 8);
        dt__bytes_put(body, (uint32_t)dtype, 4);
        dt__bytes_put(body, (uint32_t)ndim, 4);
        for (int d = 0; d < ndim; d++)
            dt__bytes_put(body, (uint64_t)shape[d], 8);
        dt__bytes_put(body, 0, 4);
        dt__bytes_put(body, nb, 8);
        uint8_t *p = dt__bytes_room(body, nb);
        if (!p || b->be->to_host(impl, p, nb, e, sizeof e) != DT_OK) {
            body->len = mark;
            dt__blob_release(piece);
            piece = NULL;
        }
    }
    b->be->free(impl);
    if (!piece)
        return 0;
    piece->remote = node + 1;
    piece->rtag = g->remote_tag;
    piece_ent *pe = &ps->e[ps->n++];
    memset(pe, 0, sizeof *pe);
    pe->src = dt__blob_retain(b);
    pe->piece = piece;
    pe->ndim = a.ndim;
    memcpy(pe->start, a.start, sizeof pe->start);
    memcpy(pe->len, a.shape, sizeof pe->len);
    if (!bind_piece(k, &a, piece)) {
        /* Shipped but unused: the node drops it with our release. */
        return 1;
    }
    atomic_fetch_add(&sent_bytes, (long long)nb);
    atomic_fetch_add(&sent_values, 1);
    return 1;
}

/* ---- kernels queued on a node (the backlog) ---- */

/* The graph as the batches' completions see it: NULL once it is gone
 * (dt__remote_detach), so a completion after the graph ended touches
 * nothing of it. */
struct dt__racct {
    atomic_int refs;
    pthread_mutex_t mu;
    dt_graph *g;
};

static void racct_release(struct dt__racct *a) {
    if (atomic_fetch_sub(&a->refs, 1) != 1)
        return;
    pthread_mutex_destroy(&a->mu);
    dt__free(a);
}

void dt__remote_detach(dt_graph *g) {
    struct dt__racct *a = g->racct;
    if (!a)
        return;
    pthread_mutex_lock(&a->mu);
    a->g = NULL;
    pthread_mutex_unlock(&a->mu);
    g->racct = NULL;
    racct_release(a);
}

typedef struct batch_done {
    struct dt__racct *a;
    long nk;
} batch_done;

/* A batch's syncs all came back (or failed: the node is lost, the cluster
 * stopped): its kernels leave the backlog. Any thread. */
static void on_batch_done(void *arg) {
    batch_done *d = arg;
    pthread_mutex_lock(&d->a->mu);
    if (d->a->g)
        dt__backlog_done(d->a->g, d->nk);
    pthread_mutex_unlock(&d->a->mu);
    atomic_fetch_sub(&on_nodes, d->nk);
    racct_release(d->a);
    dt__free(d);
}

/* Appends a SYNC kernel to each of the `n` streams, all completing one
 * future whose completion retires the batch's `nk` kernels: the backlog
 * counts them until the node has run them. NULL (nothing appended) when out
 * of memory: the caller retires them at once. Our reference. */
static dt_future *batch_future(dt_graph *g, dt__stream **ss, int n, long nk) {
    if (!g->racct && (g->racct = dt__calloc(1, sizeof *g->racct))) {
        atomic_init(&g->racct->refs, 1);
        pthread_mutex_init(&g->racct->mu, NULL);
        g->racct->g = g;
    }
    batch_done *d = g->racct ? dt__calloc(1, sizeof *d) : NULL;
    dt_future *f = d ? dt__future_new() : NULL;
    dt__krec *ks[64] = {0};
    int ok = f != NULL;
    for (int i = 0; ok && i < n; i++)
        ok = (ks[i] = dt__krec_alloc(0)) != NULL;
    if (!ok) {
        for (int i = 0; i < n; i++)
            dt__krec_free(ks[i]);
        if (f)
            dt_future_release(f);
        dt__free(d);
        return NULL;
    }
    d->a = g->racct;
    atomic_fetch_add(&d->a->refs, 1);
    d->nk = nk;
    atomic_fetch_add(&on_nodes, nk);
    f->cb = on_batch_done;
    f->cb_arg = d;
    dt__future_expect(f, n);
    for (int i = 0; i < n; i++) {
        dt__krec *k = ks[i];
        k->kop = DT_KC_SYNC;
        k->opname = "batch";
        k->handle = f;
        atomic_fetch_add(&f->refs, 1);
        if (ss[i]->btail)
            ss[i]->btail->next = k;
        else
            ss[i]->bhead = k;
        ss[i]->btail = k;
    }
    return f;
}

/* The collectives spanning nodes among a batch's kernels, each once: if
 * the node cannot run the batch, the other nodes' ranks waiting for these
 * collectives' parts are told so (cluster_remote.c). */
typedef struct spans {
    dt__span_key *k;
    int n, cap;
} spans;

static void add_span(dt_graph *g, spans *sp, const dt__krec *k, int node) {
    if (k->kop != DT_KC_COLLECTIVE)
        return;
    dt__collattr a;
    dt__collattr_read(k, &a);
    int type = 0, n = 0, spanning = 0;
    const int64_t *ids = NULL;
    if (!dt__graph_group_info(g, a.group, &type, &n, &ids))
        return;
    for (int i = 0; i < n && !spanning; i++)
        spanning = dt__port_node_of((dt_device_type)type, ids[i]) != node;
    for (int i = 0; i < sp->n && spanning; i++)
        spanning = sp->k[i].group != a.group || sp->k[i].seq != a.seq;
    if (!spanning)
        return;
    if (sp->n == sp->cap) {
        int cap = sp->cap ? 2 * sp->cap : 8;
        dt__span_key *v = dt__realloc(sp->k, (size_t)cap * sizeof *v);
        if (!v) /* out of memory: a failure of this batch would leave its peers waiting */
            return;
        sp->k = v;
        sp->cap = cap;
    }
    sp->k[sp->n++] = (dt__span_key){a.group, a.seq};
}

/* Ships the `n` streams `ss` of worker node `node`. */
static void ship(dt_graph *g, int node, dt__stream **ss, int n) {
    dt__kbatch kb = {.n = n, .s = dt__calloc((size_t)n, sizeof *kb.s)};
    dt__bytes body = {0};
    futs fs = {0};
    pieces ps = {0};
    spans sp = {0};
    long nk = 0;
    uint32_t nput = 0;
    char msg[1024] = "";
    for (int i = 0; i < n; i++)
        for (dt__krec *k = ss[i]->bhead; k; k = k->next)
            nk++;
    dt_future *done = batch_future(g, ss, n, nk);
    dt__bytes_put(&body, g->remote_tag, 4);
    size_t nput_at = body.len;
    dt__bytes_put(&body, 0, 4);
    for (int i = 0; i < n; i++) {
        dt__stream *s = ss[i];
        if (kb.s)
            kb.s[i] = (dt__kbatch_stream){s->type, s->device_id, s->kind, s->bhead, s->btail};
        for (dt__krec *k = s->bhead; k; k = k->next) {
            nput += (uint32_t)put_piece(g, &body, &ps, k, node);
            for (int j = 0; j < k->n_in; j++)
                if (!held(k->in[j], node)) {
                    put(&body, k->in[j], node, g->remote_tag, k, s);
                    nput++;
                }
            if ((k->kop == DT_KC_FETCH || k->kop == DT_KC_SYNC) && add_future(&fs, k->handle) != 0)
                body.failed = 1;
            add_span(g, &sp, k, node);
        }
    }
    patch(&body, nput_at, nput, 4);
    size_t klen_at = body.len;
    dt__bytes_put(&body, 0, 8);
    dt_status st = body.failed || !kb.s ? DT_ENOMEM : DT_OK;
    if (st == DT_OK)
        st = dt__kernel_encode(&kb, dt__graph_group_lookup, g, &body);
    if (st == DT_OK && body.failed)
        st = DT_ENOMEM;
    if (st != DT_OK)
        snprintf(msg, sizeof msg, "cannot run on worker node %d: %s", node,
                 st == DT_ENOMEM ? "out of memory" : dt_last_error());
    patch(&body, klen_at, body.len - klen_at - 8, 8);
    /* The records are dropped after the batch is queued: a value whose last
     * reference they hold is released after the batch that reads it. */
    dt__krec *dead = NULL;
    for (int i = 0; i < n; i++) {
        dt__stream *s = ss[i];
        for (dt__krec *k = s->bhead, *next; k; k = next) {
            next = k->next;
            dt__blob *out = k->out;
            if (out && !out->error) {
                char where[600];
                if (st == DT_OK)
                    snprintf(where, sizeof where,
                             "%s on %s:%lld: the value lives on worker node %d; a kernel on another node "
                             "read it without a copy between the nodes",
                             k->opname ? k->opname : "kernel", s->type == DT_DEVICE_CUDA ? "cuda" : "cpu",
                             (long long)s->device_id, node);
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
            k->next = dead;
            dead = k;
        }
        s->bhead = s->btail = NULL;
    }
    if (!done)
        dt__backlog_done(g, nk);
    dt__free(kb.s);
    if (st == DT_OK) {
        dt__port_ship(node, dt_graph_backend(g), body.p, body.len, fs.f, fs.count, fs.n, g->remote_tag, sp.k,
                      sp.n);
        sp.k = NULL;
    } else {
        dt__bytes_free(&body);
        for (int i = 0; i < fs.n; i++) {
            dt__future_fail(fs.f[i], DT_EKERNEL, msg);
            for (int c = 0; c < fs.count[i]; c++)
                dt_future_release(fs.f[i]);
        }
    }
    if (done)
        dt_future_release(done);
    while (dead) {
        dt__krec *k = dead;
        dead = k->next;
        dt__krec_discard(k);
    }
    for (int i = 0; i < ps.n; i++) {
        dt__blob_release(ps.e[i].piece);
        dt__blob_release(ps.e[i].src);
    }
    dt__free(ps.e);
    dt__free(fs.f);
    dt__free(fs.count);
    dt__free(sp.k);
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
