/*
 * Data between nodes: the mailbox and the outbox (xfer.h). One lock
 * guards both, the lost devices and the node table; one condition wakes
 * the waiting ranks (broadcast on each delivery, loss and abort; a waiter
 * checks its own key). Few ranks wait at once (a node's devices), so one
 * condition is enough. A shared message's takers read its payload through
 * views that hold a reference (xfer_share, atomic: views are freed without
 * the lock).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "comm/xfer.h"

struct xfer_share {
    atomic_int refs; /* the mailbox's while takers are to come, one per view */
    dt__xfer_msg *m;
};

static void share_drop(void *arg) {
    struct xfer_share *s = arg;
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        dt__xfer_msg_free(s->m);
        dt__free(s);
    }
}

static atomic_llong count_bytes[2], count_frames[2]; /* [1]: sent */

typedef struct lost_range {
    int64_t first, count;
    char why[DT__XFER_TEXT];
} lost_range;

/* A collective whose parts from [first, first + count) will not come. */
typedef struct failed_parts {
    struct failed_parts *next;
    uint32_t tag;
    uint64_t group, seq;
    int64_t first, count;
    char why[DT__XFER_TEXT];
} failed_parts;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    dt__xfer_hooks hooks;
    int started;
    dt__xfer_msg *box;            /* arrived, not yet taken */
    dt__xfer_msg *partial;        /* arriving in chunks: the buffer in arg, len the bytes so far */
    dt__xfer_msg *out, *out_last; /* to send, oldest first */
    lost_range *lost;
    int nlost, caplost;
    failed_parts *failed;
    char abort_why[DT__XFER_TEXT]; /* non-empty: every other node is gone */
    int64_t *layout;               /* node table: nlayout (first, count) pairs */
    int nlayout;
} X = {.mu = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

void dt__xfer_msg_free(dt__xfer_msg *m) {
    if (!m)
        return;
    if (m->release)
        m->release(m->arg);
    dt__free(m);
}

/* Frees a list; a shared message some takers already took is only let go
 * of (their views hold its payload). */
static void free_list(dt__xfer_msg *m) {
    while (m) {
        dt__xfer_msg *next = m->next;
        if (m->share)
            share_drop(m->share);
        else
            dt__xfer_msg_free(m);
        m = next;
    }
}

static void free_failed(failed_parts *f) {
    while (f) {
        failed_parts *next = f->next;
        dt__free(f);
        f = next;
    }
}

void dt__xfer_start(const dt__xfer_hooks *h) {
    pthread_mutex_lock(&X.mu);
    X.hooks = h ? *h : (dt__xfer_hooks){0};
    X.started = h != NULL;
    X.nlost = 0;
    X.abort_why[0] = 0;
    failed_parts *failed = X.failed;
    X.failed = NULL;
    dt__free(X.layout);
    X.layout = NULL;
    X.nlayout = 0;
    pthread_mutex_unlock(&X.mu);
    free_failed(failed);
}

void dt__xfer_stop(void) {
    pthread_mutex_lock(&X.mu);
    dt__xfer_msg *box = X.box, *out = X.out, *partial = X.partial;
    X.box = X.out = X.out_last = X.partial = NULL;
    X.hooks = (dt__xfer_hooks){0};
    X.started = 0;
    dt__free(X.lost);
    X.lost = NULL;
    X.nlost = X.caplost = 0;
    failed_parts *failed = X.failed;
    X.failed = NULL;
    dt__free(X.layout);
    X.layout = NULL;
    X.nlayout = 0;
    if (!X.abort_why[0])
        snprintf(X.abort_why, sizeof X.abort_why, "the cluster ended");
    pthread_cond_broadcast(&X.cond);
    pthread_mutex_unlock(&X.mu);
    free_list(box);
    free_list(out);
    free_list(partial);
    free_failed(failed);
}

int dt__xfer_is_local(int64_t id) {
    pthread_mutex_lock(&X.mu);
    int (*is_local)(int64_t) = X.hooks.is_local;
    pthread_mutex_unlock(&X.mu);
    return is_local ? is_local(id) : 1;
}

void dt__xfer_post(dt__xfer_msg *m) {
    m->next = NULL;
    pthread_mutex_lock(&X.mu);
    void (*wake)(void) = X.hooks.wake;
    if (!X.started || X.abort_why[0]) {
        pthread_mutex_unlock(&X.mu);
        dt__xfer_msg_free(m);
        return;
    }
    if (X.out_last)
        X.out_last->next = m;
    else
        X.out = m;
    X.out_last = m;
    pthread_mutex_unlock(&X.mu);
    if (wake)
        wake();
}

dt__xfer_msg *dt__xfer_take(void) {
    pthread_mutex_lock(&X.mu);
    dt__xfer_msg *m = X.out;
    X.out = X.out_last = NULL;
    pthread_mutex_unlock(&X.mu);
    return m;
}

static int same_key(const dt__xfer_hdr *a, const dt__xfer_hdr *b) {
    return a->tag == b->tag && a->group == b->group && a->seq == b->seq && a->from == b->from &&
           a->to == b->to;
}

/* Chunk m goes into its message's buffer (made by its first chunk); the
 * message once whole, else NULL. m is freed. Under mu. */
static dt__xfer_msg *assemble(dt__xfer_msg *m) {
    const dt__xfer_hdr *h = &m->h;
    dt__xfer_msg **pp = &X.partial;
    while (*pp && !same_key(&(*pp)->h, h))
        pp = &(*pp)->next;
    dt__xfer_msg *w = *pp;
    if (!w && h->total <= (uint64_t)1 << 40) {
        w = dt__calloc(1, sizeof *w);
        void *buf = w ? dt__malloc(h->total ? h->total : 1) : NULL;
        if (!buf) {
            dt__free(w);
            w = NULL;
        } else {
            w->h = *h;
            w->h.offset = 0;
            w->data = buf;
            w->arg = buf;
            w->release = dt__free;
            w->next = X.partial;
            X.partial = w;
            pp = &X.partial;
        }
    }
    /* Malformed, or out of memory: the wait for it ends with its node. */
    if (!w || w->h.total != h->total || h->offset > h->total || m->len > h->total - h->offset ||
        w->len + m->len > h->total) {
        dt__xfer_msg_free(m);
        return NULL;
    }
    memcpy((uint8_t *)w->arg + h->offset, m->data, m->len);
    w->len += m->len;
    dt__xfer_msg_free(m);
    if (w->len < w->h.total)
        return NULL;
    *pp = w->next;
    w->next = NULL;
    return w;
}

/* The record saying that dev takes no part in h's collective (or sends
 * none to it), or NULL: both rounds of an all-reduce, shared messages too
 * (their dst_device is a receiving rank's). Under mu. */
static const failed_parts *failed_at(const dt__xfer_hdr *h, int64_t dev) {
    uint64_t seq = h->seq & ~DT__XFER_ROUND2;
    for (const failed_parts *f = X.failed; f; f = f->next)
        if (f->tag == h->tag && f->group == h->group && f->seq == seq && dev >= f->first &&
            dev < f->first + f->count)
            return f;
    return NULL;
}

/* Reads the node table out of m's payload: (first, count) pairs of
 * little-endian int64. A malformed one is ignored (senders then address
 * each rank, as without a table). Under mu. */
static void set_layout(const dt__xfer_msg *m) {
    size_t n = m->len / 16;
    int64_t *v = n && m->len % 16 == 0 && n <= INT32_MAX ? dt__calloc(2 * n, sizeof *v) : NULL;
    if (!v)
        return;
    const uint8_t *p = m->data;
    for (size_t i = 0; i < 2 * n; i++) {
        uint64_t x = 0;
        for (int b = 7; b >= 0; b--)
            x = x << 8 | p[8 * i + (size_t)b];
        v[i] = (int64_t)x;
    }
    dt__free(X.layout);
    X.layout = v;
    X.nlayout = (int)n;
}

void dt__xfer_deliver(dt__xfer_msg *m) {
    pthread_mutex_lock(&X.mu);
    if (!X.started || failed_at(&m->h, m->h.dst_device)) {
        pthread_mutex_unlock(&X.mu);
        dt__xfer_msg_free(m);
        return;
    }
    if (!m->h.error[0] && (m->h.offset != 0 || m->len != m->h.total) && !(m = assemble(m))) {
        pthread_mutex_unlock(&X.mu);
        return;
    }
    if (m->h.group == 0) { /* the node table (dt__xfer_layout_msg) */
        set_layout(m);
        pthread_mutex_unlock(&X.mu);
        dt__xfer_msg_free(m);
        return;
    }
    m->next = X.box;
    X.box = m;
    pthread_cond_broadcast(&X.cond);
    pthread_mutex_unlock(&X.mu);
}

/* The reason waits for `dev` fail, or NULL. Under mu. */
static const char *gone(int64_t dev) {
    for (int i = 0; i < X.nlost; i++)
        if (dev >= X.lost[i].first && dev < X.lost[i].first + X.lost[i].count)
            return X.lost[i].why;
    return X.abort_why[0] ? X.abort_why : NULL;
}

/* A taker's view of shared message m (in the box at *pp): a copy of its
 * header and a reference on its payload; the last taker's view also takes
 * m out of the box. NULL when out of memory. Under mu. */
static dt__xfer_msg *take_view(dt__xfer_msg **pp, int32_t to, int shares) {
    dt__xfer_msg *m = *pp, *v = dt__calloc(1, sizeof *v);
    if (!m->share && v) {
        if ((m->share = dt__calloc(1, sizeof *m->share))) {
            atomic_init(&m->share->refs, 1);
            m->share->m = m;
            m->left = shares;
        }
    }
    if (!v || !m->share) {
        dt__free(v);
        return NULL;
    }
    atomic_fetch_add(&m->share->refs, 1);
    v->h = m->h;
    v->h.to = to;
    v->data = m->data;
    v->len = m->len;
    v->release = share_drop;
    v->arg = m->share;
    if (--m->left <= 0) {
        *pp = m->next;
        m->next = NULL;
        share_drop(m->share); /* the box's reference: v still holds one */
    }
    return v;
}

dt__xfer_msg *dt__xfer_wait(uint32_t tag, uint64_t group, uint64_t seq, int32_t from, int32_t to,
                            int64_t src_device, int shares, char *err, size_t errlen) {
    const dt__xfer_hdr key = {.tag = tag, .group = group, .seq = seq};
    pthread_mutex_lock(&X.mu);
    for (;;) {
        for (dt__xfer_msg **pp = &X.box; *pp; pp = &(*pp)->next) {
            dt__xfer_hdr *h = &(*pp)->h;
            if (h->tag == tag && h->group == group && h->seq == seq && h->from == from &&
                (h->to == to || h->to == DT__XFER_SHARED)) {
                dt__xfer_msg *m = *pp;
                if (h->to == DT__XFER_SHARED && (shares > 1 || m->share)) {
                    m = take_view(pp, to, shares);
                    if (!m)
                        snprintf(err, errlen, "out of memory taking a shared message");
                } else {
                    *pp = m->next;
                    m->next = NULL;
                }
                pthread_mutex_unlock(&X.mu);
                return m;
            }
        }
        const failed_parts *f = failed_at(&key, src_device);
        const char *why = f ? f->why : gone(src_device);
        if (why || !X.started) {
            snprintf(err, errlen, "%s", why ? why : "this process is not in a cluster");
            pthread_mutex_unlock(&X.mu);
            return NULL;
        }
        pthread_cond_wait(&X.cond, &X.mu);
    }
}

void dt__xfer_lost(int64_t first, int64_t count, const char *why) {
    pthread_mutex_lock(&X.mu);
    if (X.nlost == X.caplost) {
        int cap = X.caplost ? 2 * X.caplost : 8;
        lost_range *v = dt__realloc(X.lost, (size_t)cap * sizeof *v);
        if (v) {
            X.lost = v;
            X.caplost = cap;
        }
    }
    if (X.nlost < X.caplost) {
        lost_range *l = &X.lost[X.nlost++];
        l->first = first;
        l->count = count;
        snprintf(l->why, sizeof l->why, "%s", why && *why ? why : "a node was lost");
    } else if (!X.abort_why[0]) { /* out of memory: every wait fails rather than hang */
        snprintf(X.abort_why, sizeof X.abort_why, "%s", why && *why ? why : "a node was lost");
    }
    pthread_cond_broadcast(&X.cond);
    pthread_mutex_unlock(&X.mu);
}

/* Drops the messages of list *pp that f's devices were to receive. Under
 * mu; returns them for freeing outside it. */
static dt__xfer_msg *take_failed(dt__xfer_msg **pp, const failed_parts *f, dt__xfer_msg *dead) {
    while (*pp) {
        dt__xfer_msg *m = *pp;
        if (failed_at(&m->h, m->h.dst_device) == f) {
            *pp = m->next;
            m->next = dead;
            dead = m;
        } else {
            pp = &m->next;
        }
    }
    return dead;
}

void dt__xfer_fail_parts(uint32_t tag, uint64_t group, uint64_t seq, int64_t first, int64_t count,
                         const char *why) {
    failed_parts *f = dt__calloc(1, sizeof *f);
    dt__xfer_msg *dead = NULL;
    pthread_mutex_lock(&X.mu);
    if (f) {
        *f = (failed_parts){X.failed, tag, group, seq, first, count, ""};
        snprintf(f->why, sizeof f->why, "%s", why && *why ? why : "a node could not run a collective");
        X.failed = f;
        dead = take_failed(&X.box, f, dead);
        dead = take_failed(&X.partial, f, dead);
    } else if (!X.abort_why[0]) { /* out of memory: every wait fails rather than hang */
        snprintf(X.abort_why, sizeof X.abort_why, "%s", why && *why ? why : "a node could not run a batch");
    }
    pthread_cond_broadcast(&X.cond);
    pthread_mutex_unlock(&X.mu);
    free_list(dead);
}

void dt__xfer_abort(const char *why) {
    pthread_mutex_lock(&X.mu);
    if (!X.abort_why[0])
        snprintf(X.abort_why, sizeof X.abort_why, "%s", why && *why ? why : "the cluster ended");
    dt__xfer_msg *out = X.out;
    X.out = X.out_last = NULL;
    pthread_cond_broadcast(&X.cond);
    pthread_mutex_unlock(&X.mu);
    free_list(out);
}

size_t dt__xfer_pending(void) {
    pthread_mutex_lock(&X.mu);
    size_t n = 0;
    for (dt__xfer_msg *m = X.box; m; m = m->next)
        n++;
    pthread_mutex_unlock(&X.mu);
    return n;
}

void dt__xfer_set_layout(int n, const int64_t *first, const int64_t *count) {
    int64_t *v = n > 0 ? dt__calloc(2 * (size_t)n, sizeof *v) : NULL;
    for (int i = 0; v && i < n; i++) {
        v[2 * i] = first[i];
        v[2 * i + 1] = count[i];
    }
    pthread_mutex_lock(&X.mu);
    dt__free(X.layout);
    X.layout = v;
    X.nlayout = v ? n : 0; /* out of memory: no table, so no shared messages */
    pthread_mutex_unlock(&X.mu);
}

int dt__xfer_node_of(int64_t key) {
    pthread_mutex_lock(&X.mu);
    int idx = DT__XFER_NODE_UNKNOWN;
    for (int i = 0; i < X.nlayout && idx < 0; i++)
        if (key >= X.layout[2 * i] && key - X.layout[2 * i] < X.layout[2 * i + 1])
            idx = i;
    pthread_mutex_unlock(&X.mu);
    return idx;
}

dt__xfer_msg *dt__xfer_layout_msg(int n, const int64_t *first, const int64_t *count) {
    dt__xfer_msg *m = dt__calloc(1, sizeof *m);
    uint8_t *buf = m && n > 0 ? dt__malloc(16 * (size_t)n) : NULL;
    if (!buf) {
        dt__free(m);
        return NULL;
    }
    for (int i = 0; i < 2 * n; i++) {
        uint64_t x = (uint64_t)(i % 2 ? count[i / 2] : first[i / 2]);
        for (int b = 0; b < 8; b++)
            buf[8 * (size_t)i + (size_t)b] = (uint8_t)(x >> (8 * b));
    }
    m->h.dtype = DT_INT64;
    m->h.ndim = 1;
    m->h.shape[0] = 2 * (int64_t)n;
    m->data = buf;
    m->len = m->h.total = 16 * (size_t)n;
    m->release = dt__free;
    m->arg = buf;
    return m;
}

void dt__xfer_count(int out, size_t bytes, size_t frames) {
    atomic_fetch_add(&count_bytes[out != 0], (long long)bytes);
    atomic_fetch_add(&count_frames[out != 0], (long long)frames);
}

void dt__xfer_counters(int64_t *bytes_out, int64_t *frames_out, int64_t *bytes_in, int64_t *frames_in) {
    *bytes_out = atomic_load(&count_bytes[1]);
    *frames_out = atomic_load(&count_frames[1]);
    *bytes_in = atomic_load(&count_bytes[0]);
    *frames_in = atomic_load(&count_frames[0]);
}
