/*
 * The worker node's sub-controller (subctl.h). Values are kept in a hash
 * table keyed by (graph tag, blob id) of the main node; the resolver of the
 * kernel codec binds a batch's names through it. Each FETCH or SYNC kernel
 * of a batch gets a future of its own here, whose completion callback
 * queues a ticket (the main node's future id and the piece's rank) for the
 * node thread to answer.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "core/client/graph.h"
#include "core/controller/lower_comm.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/trace.h"
#include "net/node_int.h"
#include "net/subctl.h"

typedef struct entry {
    struct entry *next;
    uint32_t tag;
    uint64_t id;
    dt__blob *b;
} entry;

typedef struct gent {
    uint32_t tag;
    uint64_t from, to;
} gent;

/* A graph one of whose batches could not run here: the error its missing
 * values read as. */
typedef struct failure {
    struct failure *next;
    uint32_t tag;
    char *why;
} failure;

typedef struct ticket {
    struct ticket *next;
    struct dt__subctl *x;
    dt_future *f; /* our reference */
    uint64_t main_id;
    int rank; /* a read's piece, or -1 (a sync) */
} ticket;

struct dt__subctl {
    dt_graph *g;
    char backend[32];
    entry **tab;
    size_t cap, n;
    gent *groups;
    size_t ng, gcap;
    int64_t cuda_first; /* the global id of this node's CUDA device 0 */
    uint32_t tag;       /* the batch being decoded */
    ticket *made;       /* its tickets, until it is handed over */
    failure *failures;  /* graphs with a batch that could not run */
    pthread_mutex_t mu; /* guards done */
    ticket *done, *done_last;
    int pipe[2];
    int tracing; /* dt__subctl_trace */
};

/* ---------------------------------------------------------------- values */

static size_t slot(const dt__subctl *x, uint32_t tag, uint64_t id) {
    uint64_t h = (id ^ ((uint64_t)tag << 40)) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 17) & (x->cap - 1);
}

static entry **where(dt__subctl *x, uint32_t tag, uint64_t id) {
    entry **pp = &x->tab[slot(x, tag, id)];
    while (*pp && ((*pp)->tag != tag || (*pp)->id != id))
        pp = &(*pp)->next;
    return pp;
}

static dt__blob *lookup(dt__subctl *x, uint32_t tag, uint64_t id) {
    entry *e = *where(x, tag, id);
    return e ? e->b : NULL;
}

/* Puts b (its reference taken over) as (tag, id), replacing any value. */
static dt_status keep(dt__subctl *x, uint32_t tag, uint64_t id, dt__blob *b) {
    if ((x->n + 1) * 2 > x->cap) {
        size_t cap = x->cap ? 2 * x->cap : 256;
        entry **t = dt__calloc(cap, sizeof *t);
        if (!t) {
            dt__blob_release(b);
            return dt__error(DT_ENOMEM, "worker node: out of memory");
        }
        entry **old = x->tab;
        size_t ocap = x->cap;
        x->tab = t;
        x->cap = cap;
        for (size_t i = 0; i < ocap; i++)
            for (entry *e = old[i], *next; e; e = next) {
                next = e->next;
                e->next = x->tab[slot(x, e->tag, e->id)];
                x->tab[slot(x, e->tag, e->id)] = e;
            }
        dt__free(old);
    }
    entry **pp = where(x, tag, id);
    if (*pp) {
        dt__blob_release((*pp)->b);
        (*pp)->b = b;
        return DT_OK;
    }
    entry *e = dt__calloc(1, sizeof *e);
    if (!e) {
        dt__blob_release(b);
        return dt__error(DT_ENOMEM, "worker node: out of memory");
    }
    e->tag = tag;
    e->id = id;
    e->b = b;
    *pp = e;
    x->n++;
    return DT_OK;
}

static void drop(dt__subctl *x, uint32_t tag, uint64_t id) {
    if (!x->cap)
        return;
    entry **pp = where(x, tag, id);
    entry *e = *pp;
    if (!e)
        return;
    *pp = e->next;
    dt__blob_release(e->b);
    dt__free(e);
    x->n--;
}

/* -------------------------------------------------------------- resolver */

static dt__blob *res_input(void *ctx, uint64_t id) {
    dt__subctl *x = ctx;
    dt__blob *b = x->cap ? lookup(x, x->tag, id) : NULL;
    if (b)
        return dt__blob_retain(b);
    for (failure *f = x->failures; f; f = f->next)
        if (f->tag == x->tag) { /* a value of a batch that could not run */
            b = dt__blob_new(dt__graph_be(x->g, DT_DEVICE_CPU));
            if (b) {
                b->id = id;
                if (!(b->error = dt__strdup(f->why))) {
                    dt__blob_release(b);
                    b = NULL;
                }
            }
            return b;
        }
    return NULL;
}

static dt__blob *res_output(void *ctx, uint64_t id, int type) {
    dt__subctl *x = ctx;
    if (type < 0 || type >= DT_DEVICE_TYPES || (x->cap && lookup(x, x->tag, id)))
        return NULL;
    dt__blob *b = dt__blob_new(dt__graph_be(x->g, (dt_device_type)type));
    if (!b)
        return NULL;
    b->id = id;
    return keep(x, x->tag, id, dt__blob_retain(b)) == DT_OK ? b : (dt__blob_release(b), NULL);
}

static void on_done(void *arg) {
    ticket *t = arg;
    dt__subctl *x = t->x;
    pthread_mutex_lock(&x->mu);
    t->next = NULL; /* it was on the batch's list of tickets */
    if (x->done_last)
        x->done_last->next = t;
    else
        x->done = t;
    x->done_last = t;
    ssize_t w = write(x->pipe[1], "r", 1); /* full pipe: a wake is pending anyway */
    (void)w;
    pthread_mutex_unlock(&x->mu);
}

static dt_future *res_future(void *ctx, uint64_t id) {
    dt__subctl *x = ctx;
    ticket *t = dt__calloc(1, sizeof *t);
    dt_future *f = t ? dt__future_new() : NULL;
    if (f && !(f->pieces = dt__calloc(1, sizeof *f->pieces))) {
        dt_future_release(f);
        f = NULL;
    }
    if (!f) {
        dt__free(t);
        return NULL;
    }
    f->npieces = 1;
    f->be = dt__graph_be(x->g, DT_DEVICE_CPU);
    dt__future_expect(f, 1);
    f->cb = on_done;
    f->cb_arg = t;
    t->x = x;
    t->f = f;
    t->main_id = id;
    t->rank = -1;
    t->next = x->made;
    x->made = t;
    atomic_fetch_add(&f->refs, 1); /* the kernel's */
    return f;
}

static dt_status res_group(void *ctx, uint64_t id, int type, int t0, int t1, int n, const int64_t *ids,
                           uint64_t *local) {
    dt__subctl *x = ctx;
    for (size_t i = 0; i < x->ng; i++)
        if (x->groups[i].tag == x->tag && x->groups[i].from == id) {
            *local = x->groups[i].to;
            return DT_OK;
        }
    if (x->ng == x->gcap) {
        size_t cap = x->gcap ? 2 * x->gcap : 16;
        gent *v = dt__realloc(x->groups, cap * sizeof *v);
        if (!v)
            return dt__error(DT_ENOMEM, "worker node: out of memory");
        x->groups = v;
        x->gcap = cap;
    }
    dt__comm *c = dt__graph_comm(x->g, (dt_device_type)type);
    if (!c)
        return DT_ENOMEM;
    dt_status st = c->ops->group_create(c, n, ids, local);
    if (st == DT_OK && (st = dt__comm_group_span(c, *local, x->tag, id, t0, t1)) != DT_OK)
        c->ops->group_destroy(c, *local);
    if (st == DT_OK)
        x->groups[x->ng++] = (gent){x->tag, id, *local};
    return st;
}

/* ------------------------------------------------------------------ API */

dt__subctl *dt__subctl_new(int64_t cuda_first) {
    dt__subctl *x = dt__calloc(1, sizeof *x);
    if (!x) {
        dt__error(DT_ENOMEM, "worker node: out of memory");
        return NULL;
    }
    if (pipe(x->pipe) != 0) {
        dt__error(DT_EBACKEND, "worker node: pipe: %s", strerror(errno));
        dt__free(x);
        return NULL;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(x->pipe[i], F_SETFL, fcntl(x->pipe[i], F_GETFL) | O_NONBLOCK);
        fcntl(x->pipe[i], F_SETFD, FD_CLOEXEC);
    }
    pthread_mutex_init(&x->mu, NULL);
    x->cuda_first = cuda_first;
    return x;
}

int dt__subctl_fd(const dt__subctl *x) { return x->pipe[0]; }

static void free_tickets(ticket *t) {
    while (t) {
        ticket *next = t->next;
        dt_future_release(t->f);
        dt__free(t);
        t = next;
    }
}

void dt__subctl_free(dt__subctl *x) {
    if (!x)
        return;
    if (x->g) {
        dt_graph_shutdown(x->g); /* every kernel handed over runs first */
        dt_graph_release(x->g);
    }
    dt__subctl_trace(x, 0);
    for (size_t i = 0; i < x->cap; i++)
        for (entry *e = x->tab[i], *next; e; e = next) {
            next = e->next;
            dt__blob_release(e->b);
            dt__free(e);
        }
    dt__free(x->tab);
    dt__free(x->groups);
    while (x->failures) {
        failure *f = x->failures;
        x->failures = f->next;
        dt__free(f->why);
        dt__free(f);
    }
    free_tickets(x->made);
    free_tickets(x->done);
    close(x->pipe[0]);
    close(x->pipe[1]);
    pthread_mutex_destroy(&x->mu);
    dt__free(x);
}

static const uint8_t *take(dt__rd *r, uint64_t n) {
    if (r->bad || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *s = r->p;
    r->p += n;
    return s;
}

/* One put: a host value or a failed one. */
static dt_status put(dt__subctl *x, dt__rd *r) {
    uint64_t id = dt__rd_get(r, 8);
    uint32_t dtype = (uint32_t)dt__rd_get(r, 4), ndim = (uint32_t)dt__rd_get(r, 4);
    int64_t shape[DT_MAX_NDIM];
    if (r->bad || ndim > DT_MAX_NDIM || dtype >= DT_DTYPE_COUNT)
        return dt__error(DT_EINVAL, "worker node: a malformed batch (value %llu)", (unsigned long long)id);
    int64_t numel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        shape[d] = (int64_t)dt__rd_get(r, 8);
        if (shape[d] < 0)
            r->bad = 1;
        numel *= shape[d];
    }
    uint32_t elen = (uint32_t)dt__rd_get(r, 4);
    const uint8_t *err = take(r, elen);
    uint64_t nb = dt__rd_get(r, 8);
    const uint8_t *data = take(r, nb);
    if (r->bad || (!elen && nb != (uint64_t)numel * dt_dtype_size((dt_dtype)dtype)))
        return dt__error(DT_EINVAL, "worker node: a malformed batch (value %llu)", (unsigned long long)id);
    const dt__backend *be = dt__graph_be(x->g, DT_DEVICE_CPU);
    dt__blob *b = dt__blob_new(be);
    if (!b)
        return dt__error(DT_ENOMEM, "worker node: out of memory");
    b->id = id;
    char e[512] = "";
    if (elen) {
        b->error = dt__malloc(elen + 1);
        if (b->error) {
            memcpy(b->error, err, elen);
            b->error[elen] = 0;
        }
    } else if (be->from_host((dt_dtype)dtype, (int)ndim, shape, data, &b->impl, e, sizeof e) != DT_OK) {
        b->error = dt__strdup(e[0] ? e : "worker node: storing a value failed");
    }
    return keep(x, x->tag, id, b);
}

dt_status dt__subctl_batch(dt__subctl *x, const char *backend, const void *body, size_t len) {
    if (!x->g) {
        dt_graph_options o = {.backend = backend && *backend ? backend : NULL};
        dt_status st = dt_graph_create(&o, &x->g);
        if (st != DT_OK)
            return st;
        x->g->local_only = 1; /* before its first stream */
        x->g->first_id[DT_DEVICE_CUDA] = x->cuda_first;
        snprintf(x->backend, sizeof x->backend, "%s", backend ? backend : "");
    } else if (strcmp(x->backend, backend ? backend : "") != 0) {
        return dt__error(DT_EINVAL, "worker node: it runs the '%s' backend, not '%s'", x->backend, backend);
    }
    dt__rd r = {body, (const uint8_t *)body + len, 0};
    x->tag = (uint32_t)dt__rd_get(&r, 4);
    uint32_t nput = (uint32_t)dt__rd_get(&r, 4);
    for (uint32_t i = 0; i < nput && !r.bad; i++) {
        dt_status st = put(x, &r);
        if (st != DT_OK)
            return st;
    }
    uint64_t klen = dt__rd_get(&r, 8);
    const uint8_t *kb = take(&r, klen);
    if (r.bad || r.p != r.end)
        return dt__error(DT_EINVAL, "worker node: a malformed batch");
    dt__kresolver res = {x, res_input, res_output, res_future, res_group};
    dt__kbatch b = {0};
    dt_status st = dt__kernel_decode(kb, klen, &res, &b);
    if (st == DT_OK) {
        /* Each read's piece goes to its own future's slot 0; its rank is the
         * main node's. */
        for (int i = 0; i < b.n; i++)
            for (dt__krec *k = b.s[i].head; k; k = k->next)
                if (k->kop == DT_KC_FETCH || k->kop == DT_KC_SYNC) {
                    ticket *t = ((dt_future *)k->handle)->cb_arg;
                    t->rank = k->kop == DT_KC_FETCH ? k->rank : -1;
                    k->rank = 0;
                }
        st = dt__kbatch_push(x->g, &b);
    }
    dt__kbatch_free(&b);
    if (st == DT_OK) {
        x->made = NULL; /* the tickets are the callbacks' now */
    } else {
        for (ticket *t = x->made; t; t = t->next)
            t->f->cb = NULL;
        free_tickets(x->made);
        x->made = NULL;
    }
    return st;
}

void dt__subctl_failed(dt__subctl *x, const char *why) {
    failure *f = x->failures;
    while (f && f->tag != x->tag)
        f = f->next;
    char *w = dt__strdup(why);
    if (!w) /* out of memory: later reads of its values fail to decode instead */
        return;
    if (!f && (f = dt__calloc(1, sizeof *f))) {
        f->tag = x->tag;
        f->next = x->failures;
        x->failures = f;
    }
    if (!f) {
        dt__free(w);
        return;
    }
    dt__free(f->why);
    f->why = w;
}

void dt__subctl_release(dt__subctl *x, const void *body, size_t len) {
    dt__rd r = {body, (const uint8_t *)body + len, 0};
    uint32_t n = (uint32_t)dt__rd_get(&r, 4);
    for (uint32_t i = 0; i < n && !r.bad; i++) {
        uint32_t tag = (uint32_t)dt__rd_get(&r, 4);
        uint64_t id = dt__rd_get(&r, 8);
        if (!r.bad)
            drop(x, tag, id);
    }
}

/* ---------------------------------------------------------------- traces */

void dt__subctl_trace(dt__subctl *x, int on) {
    if (!on == !x->tracing)
        return;
    x->tracing = on != 0;
    dt_record_enable(DT_RECORD_TRACE, on != 0);
}

static size_t text_len(const char *s) { return s ? strnlen(s, 1023) : 0; }

static void put_text(uint8_t **w, const char *s) {
    size_t n = text_len(s);
    dt__le_put(w, n, 2);
    if (n)
        memcpy(*w, s, n);
    *w += n;
}

/* The kernel records the graph's workers made since the last take, in
 * subctl.h's layout (dt__malloc'd, *len bytes); NULL when none. */
static uint8_t *dt__subctl_take_trace(dt__subctl *x, size_t *len) {
    dt__rec *r = x->g ? x->g->rec : NULL;
    if (!r)
        return NULL;
    int64_t skew = dt__node_clock_skew();
    pthread_mutex_lock(&r->lock);
    size_t n = 0, bytes = 4;
    /* Workers publish records while this runs: both passes take the count the
     * first one saw (b->upto), or the second would write past what was sized. */
    for (dt__recbuf *b = r->workers; b; b = b->next) {
        b->upto = dt__recbuf_count(b);
        for (size_t i = b->taken; i < b->upto; i++) {
            const dt__rec_kernel *e = dt__recbuf_at(b, i);
            bytes += 44 + 6 + text_len(e->op) + text_len(e->kernel) + text_len(e->file);
            n++;
        }
    }
    uint8_t *out = n ? dt__malloc(bytes) : NULL, *w = out;
    if (out) {
        dt__le_put(&w, n, 4);
        for (dt__recbuf *b = r->workers; b; b = b->next) {
            size_t cnt = b->upto;
            uint64_t key = b->key;
            if ((int)(key >> 56) == DT_DEVICE_CUDA) /* its graph's ids are local: the global one */
                key = dt__rec_stream_key(DT_DEVICE_CUDA, (int)((key >> 48) & 0xff),
                                         (int64_t)(key & 0xffffffffffffull) + x->cuda_first);
            for (size_t i = b->taken; i < cnt; i++) {
                const dt__rec_kernel *e = dt__recbuf_at(b, i);
                dt__le_put(&w, key, 8);
                dt__le_put(&w, e->seq, 8);
                dt__le_put(&w, (uint64_t)(e->begin_ns + skew), 8);
                dt__le_put(&w, (uint64_t)(e->end_ns + skew), 8);
                dt__le_put(&w, (uint64_t)e->bytes, 8);
                dt__le_put(&w, (uint32_t)e->line, 4);
                put_text(&w, e->op);
                put_text(&w, e->kernel);
                put_text(&w, e->file);
            }
            b->taken = cnt;
        }
        *len = bytes;
    }
    pthread_mutex_unlock(&r->lock);
    return out;
}

int dt__subctl_next(dt__subctl *x, dt__wire_msg *m, void **payload, size_t *plen) {
    char c[64];
    while (read(x->pipe[0], c, sizeof c) > 0) {
    }
    pthread_mutex_lock(&x->mu);
    ticket *t = x->done;
    if (t) {
        x->done = t->next;
        if (!x->done)
            x->done_last = NULL;
    }
    pthread_mutex_unlock(&x->mu);
    if (!t)
        return 0;
    memset(m, 0, sizeof *m);
    *payload = NULL;
    *plen = 0;
    m->type = DT__WIRE_RESULT;
    m->u.result.future = t->main_id;
    m->u.result.rank = t->rank;
    m->u.result.count = 1;
    dt_future *f = t->f;
    char e[256] = "";
    const char *err = f->status != DT_OK ? (f->error ? f->error : dt_status_str(f->status)) : NULL;
    dt__blob *b = t->rank >= 0 ? f->pieces[0] : NULL;
    if (!err && t->rank >= 0) {
        dt_dtype dtype = DT_FLOAT32;
        int64_t shape[DT_MAX_NDIM];
        int ndim = -1;
        if (!b || b->error || !b->impl)
            err = b && b->error ? b->error : "the read produced no value";
        else if (!b->be->describe || (ndim = b->be->describe(b->impl, &dtype, shape)) < 0)
            err = "the worker node's backend cannot describe a value";
        size_t nb = err ? 0 : b->be->nbytes(b->impl), head = 8 + 8 * (size_t)(ndim > 0 ? ndim : 0);
        uint8_t *p = err ? NULL : dt__malloc(head + nb);
        if (!err && !p)
            err = "out of memory sending a read";
        if (p) {
            uint8_t *w = p;
            dt__le_put(&w, (uint32_t)dtype, 4);
            dt__le_put(&w, (uint32_t)ndim, 4);
            for (int d = 0; d < ndim; d++)
                dt__le_put(&w, (uint64_t)shape[d], 8);
            if (b->be->to_host(b->impl, w, nb, e, sizeof e) == DT_OK) {
                *payload = p;
                *plen = head + nb;
                m->nextra = 1;
            } else {
                dt__free(p);
                err = e[0] ? e : "copying a read to the host failed";
            }
        }
    }
    if (!err && t->rank < 0 && x->tracing && (*payload = dt__subctl_take_trace(x, plen)))
        m->nextra = 1;
    if (err) {
        m->u.result.status = f->status != DT_OK ? f->status : DT_EKERNEL;
        snprintf(m->u.result.error, sizeof m->u.result.error, "%s", err);
    }
    dt_future_release(f);
    dt__free(t);
    return 1;
}
