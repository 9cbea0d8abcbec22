/*
 * Collectives of a group whose ranks live on several nodes: the in-process
 * comm's spanning groups (dt__comm_group_span).
 *
 * This process's ranks meet in the group's rendezvous as in-process ones
 * do (counting only themselves), so they read each other's inputs in
 * memory, and exchange parts with the other nodes' ranks by messages
 * (comm/xfer.h). Every output is computed with the kernel the in-process
 * comm uses, over the same operands in the same rank order, so results
 * are bit-identical to a one-process mesh of the same size.
 *
 * - All-gather, ring step, point-to-point: a rank sends its whole input to
 *   the ranks of other nodes that need it, once per node (one shared
 *   message when the node table names the node and several of its ranks
 *   need it; xfer.h), and computes as in-process with what it received.
 * - Reduce-scatter, all-to-all: a rank sends each rank of another node its
 *   range along dim_b (different bytes for each receiver).
 * - All-reduce of more than two ranks: a reduce-scatter then an
 *   all-gather of the flattened tensor (of two, the input whole to the
 *   other rank, which is as many bytes in one round, and the in-process
 *   sum). Rank r owns the elements [lo(r), lo(r + 1)) with
 *   lo(r) = floor(numel * r / n) (uneven, possibly empty ranges); it adds
 *   the n ranks' pieces of its range with DT_K_SUM_N in rank order, which
 *   adds elementwise, so each element gets exactly the adds, in the order,
 *   of the in-process all-reduce; then the reduced ranges are all-gathered
 *   (shared per node). Each rank's host copy of its input and of its
 *   reduced range serve both its messages and this process's other ranks
 *   (published in the rendezvous; two stage barriers among this process's
 *   ranks). A rank sends (ranks on other nodes) / n of its input plus
 *   (other nodes that hold ranks) / n, where sending its input whole to
 *   every rank of another node sent (ranks on other nodes) inputs.
 *
 * Messages name devices by key (xfer.h): a group of CUDA devices spans
 * nodes as a CPU one does, staged through host memory.
 *
 * Every rank sends every message it owes, with the error instead of bytes
 * when it has none to send (its input failed, a part it needed did not
 * come), and waits for every message it is owed, so no rank waits for a
 * message that never comes: a peer's node lost while a rank waits fails
 * that wait (xfer.h), and the error then reaches, by the messages, every
 * rank that needed what the failed one would have sent. A cancelled rank
 * still does all of it (its all-reduce range too: the others need it) and
 * keeps nothing.
 *
 * Threads: the ranks' workers; the group's lock as in inproc.c (the
 * stage barriers wait on the group's condition under it).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "comm/inproc_int.h"
#include "comm/xfer.h"
#include "core/records/blob.h"
#include "core/records/coll.h"

/* 1 when rank dst needs a part of rank src's input. */
static int needs(int kind, int n, int dst, int src) {
    if (dst == src)
        return 0;
    if (kind == DT_COLL_SHIFT)
        return src == (dst + n - 1) % n;
    if (kind == DT_COLL_SENDRECV)
        return dst == 1 && src == 0;
    return 1;
}

/* This process's ranks that need rank src's part (the takers of a shared
 * message from src). */
static int local_takers(const group *gr, int kind, int n, int src) {
    int k = 0;
    for (int q = 0; q < n; q++)
        k += gr->local[q] && needs(kind, n, q, src);
    return k;
}

/* ------------------------------------------------------------ payloads */

/* A host copy that several messages and this process's other ranks read;
 * freed with the last reference (messages drop theirs when sent). */
typedef struct payload {
    atomic_int refs;
    void *p;
    size_t len;
} payload;

struct span_pub {
    payload *pl;
    char *error;
};

static void payload_drop(void *arg) {
    payload *pl = arg;
    if (pl && atomic_fetch_sub(&pl->refs, 1) == 1) {
        dt__free(pl->p);
        dt__free(pl);
    }
}

/* impl's bytes copied to host memory; NULL with the reason in why. Always
 * a copy: a CUDA backend's data_ptr is device memory (the NCCL comm's
 * spanning groups), which ZeroMQ cannot read; to_host stages it (device to
 * host on this rank's worker). */
static payload *host_copy(const dt__backend *be, void *impl, char *why, size_t whylen) {
    size_t nb = be->nbytes(impl);
    payload *pl = dt__calloc(1, sizeof *pl);
    void *buf = pl ? dt__malloc(nb ? nb : 1) : NULL;
    char err[512] = "";
    if (!buf) {
        snprintf(why, whylen, "out of memory copying a collective's value to host memory");
    } else if (be->to_host(impl, buf, nb, err, sizeof err) != DT_OK) {
        snprintf(why, whylen, "copying a collective's value failed: %s", err[0] ? err : "backend error");
    } else {
        atomic_init(&pl->refs, 1);
        pl->p = buf;
        pl->len = nb;
        return pl;
    }
    dt__free(buf);
    dt__free(pl);
    return NULL;
}

/* ------------------------------------------------------------ messages */

/* The type of the device of key `key` (xfer.h), as errors name it. */
static const char *key_type(int64_t key) { return dt__xfer_key_type(key) == DT_DEVICE_CUDA ? "cuda" : "cpu"; }

/* The reason for a malformed message from the device of key `key` into
 * why. */
static void malformed(char *why, size_t whylen, int64_t key) {
    snprintf(why, whylen, "a malformed message from %s:%lld", key_type(key), (long long)dt__xfer_key_id(key));
}

/* A message of round `seq` from rank r to rank `to` (or DT__XFER_SHARED)
 * on device `dst`, describing rank r's input (the caller changes the shape
 * for a piece); NULL when out of memory (the peer's wait then ends only
 * with our node: out of memory here is fatal anyway). */
static dt__xfer_msg *msg_new(const group *gr, const dt__collattr *a, uint64_t seq, int r, int to,
                             int64_t dst) {
    dt__xfer_msg *m = dt__calloc(1, sizeof *m);
    if (!m)
        return NULL;
    dt__xfer_hdr *h = &m->h;
    h->tag = gr->tag;
    h->group = gr->key;
    h->seq = seq;
    h->from = r;
    h->to = to;
    h->src_device = gr->ids[r];
    h->dst_device = dst;
    h->dtype = (int32_t)a->dtype;
    h->ndim = (uint32_t)a->ndim;
    for (int d = 0; d < a->ndim; d++)
        h->shape[d] = dt__collattr_at(a->shapes, (size_t)r * (size_t)a->ndim + (size_t)d);
    return m;
}

/* Posts m with `len` bytes of pl from `off` (a reference taken), or with
 * `err` instead when it is set. */
static void msg_post(dt__xfer_msg *m, payload *pl, size_t off, size_t len, const char *err) {
    if (!m)
        return;
    if (err && err[0]) {
        snprintf(m->h.error, sizeof m->h.error, "%s", err);
    } else if (pl) {
        atomic_fetch_add(&pl->refs, 1);
        m->data = (uint8_t *)pl->p + off;
        m->len = len;
        m->release = payload_drop;
        m->arg = pl;
    }
    m->h.total = m->len;
    dt__xfer_post(m);
}

/* Posts round `seq`'s message from rank r (pl whole, as a 1-D piece of
 * `len1` elements when len1 >= 0, or err) to every rank of another node
 * that needs it under `kind`: one shared message for a node the node table
 * names where several ranks need it, else one per rank. */
static void send_each_node(const group *gr, const dt__collattr *a, int kind, uint64_t seq, int r,
                           int64_t len1, payload *pl, const char *err) {
    int n = a->n;
    int *node = dt__calloc((size_t)n, sizeof *node); /* out of memory: one message per rank */
    for (int p = 0; node && p < n; p++)
        node[p] =
            gr->local[p] || !needs(kind, n, p, r) ? DT__XFER_NODE_UNKNOWN : dt__xfer_node_of(gr->ids[p]);
    for (int p = 0; p < n; p++) {
        if (gr->local[p] || !needs(kind, n, p, r))
            continue;
        int many = 0, first = 1;
        for (int q = 0; node && q < n && node[p] != DT__XFER_NODE_UNKNOWN; q++)
            if (q != p && node[q] == node[p] && !gr->local[q] && needs(kind, n, q, r)) {
                many = 1;
                first &= q > p;
            }
        if (!first) /* the node's message went with an earlier rank */
            continue;
        dt__xfer_msg *m = msg_new(gr, a, seq, r, many ? DT__XFER_SHARED : p, gr->ids[p]);
        if (m && len1 >= 0) {
            m->h.ndim = 1;
            m->h.shape[0] = len1;
        }
        msg_post(m, pl, 0, pl ? pl->len : 0, err);
    }
    dt__free(node);
}

/* Waits for round seq's message from rank p to rank r (one of `shares`
 * takers when it is shared) and returns it, well formed; NULL when the
 * wait failed, the sender sent its error or the message is malformed,
 * with the reason in why unless why already holds one. */
static dt__xfer_msg *take(const group *gr, uint64_t seq, int r, int p, int shares, char *why, size_t whylen) {
    char err[DT__XFER_TEXT] = "";
    dt__xfer_msg *m = dt__xfer_wait(gr->tag, gr->key, seq, p, r, gr->ids[p], shares, err, sizeof err);
    if (m && m->h.error[0]) {
        snprintf(err, sizeof err, "%s", m->h.error);
    } else if (m) {
        const dt__xfer_hdr *h = &m->h;
        int64_t numel = 1;
        for (uint32_t d = 0; d < h->ndim && d < DT_MAX_NDIM; d++)
            numel *= h->shape[d];
        if (h->ndim > DT_MAX_NDIM || h->dtype < 0 || h->dtype >= DT_DTYPE_COUNT || numel < 0 ||
            (size_t)numel * dt_dtype_size((dt_dtype)h->dtype) != m->len)
            malformed(err, sizeof err, h->src_device);
        else
            return m;
    }
    if (!why[0])
        snprintf(why, whylen, "%s", err);
    dt__xfer_msg_free(m);
    return NULL;
}

/* ------------------------------------------- gathers, scatters, copies */

/* Rank r's messages for the ranks of other nodes: its input whole (once per
 * node) or sliced to each receiver's range, or its input's error. */
static void send_parts(const group *gr, const coll_view *c, int r, dt__blob *in) {
    const dt__collattr *a = c->a;
    int n = a->n, sliced = a->kind == DT_COLL_REDUCESCATTER || a->kind == DT_COLL_ALLTOALL;
    int any = 0;
    for (int p = 0; p < n; p++)
        any |= !gr->local[p] && needs(a->kind, n, p, r);
    if (!any || (a->kind == DT_COLL_SENDRECV && r == 1))
        return;
    char err[DT__XFER_TEXT] = "";
    if (!in || in->error || !in->impl)
        snprintf(err, sizeof err, "%s", in && in->error ? in->error : "a collective's peer sent no value");
    if (!sliced) {
        payload *pl = err[0] ? NULL : host_copy(in->be, in->impl, err, sizeof err);
        send_each_node(gr, a, a->kind, a->seq, r, -1, pl, err);
        payload_drop(pl);
        return;
    }
    for (int p = 0; p < n; p++) {
        if (gr->local[p])
            continue;
        char why[DT__XFER_TEXT] = "";
        void *made = NULL;
        payload *pl = NULL;
        if (!err[0]) {
            char serr[512] = "";
            if (dt__coll_slice_peer(c, r, p, 0, &made, serr, sizeof serr) != DT_OK)
                snprintf(why, sizeof why, "slicing a collective's input failed: %s",
                         serr[0] ? serr : "backend error");
            else
                pl = host_copy(in->be, made, why, sizeof why);
            if (made)
                in->be->free(made);
        }
        dt__xfer_msg *m = msg_new(gr, a, a->seq, r, p, gr->ids[p]);
        if (m)
            m->h.shape[a->dim_b] = dt__collattr_at(a->lens, (size_t)p);
        msg_post(m, pl, 0, pl ? pl->len : 0, err[0] ? err : why);
        payload_drop(pl);
    }
}

/* Rank r's parts from the ranks of other nodes, each as an impl of `be` in
 * pre[p] (be NULL: a rank that only drains); the first failure in why. */
static void recv_parts(const group *gr, const dt__collattr *a, int r, const dt__backend *be, void **pre,
                       char *why, size_t whylen) {
    for (int p = 0; p < a->n; p++) {
        if (gr->local[p] || !needs(a->kind, a->n, r, p))
            continue;
        dt__xfer_msg *m = take(gr, a->seq, r, p, local_takers(gr, a->kind, a->n, p), why, whylen);
        char err[512] = "";
        if (m && be && pre && !why[0] &&
            be->from_host((dt_dtype)m->h.dtype, (int)m->h.ndim, m->h.shape, m->len ? m->data : m, &pre[p],
                          err, sizeof err) != DT_OK)
            snprintf(why, whylen, "storing a message from %s:%lld failed: %s", key_type(m->h.src_device),
                     (long long)dt__xfer_key_id(m->h.src_device), err[0] ? err : "backend error");
        dt__xfer_msg_free(m);
    }
}

/* ----------------------------------------------------------- all-reduce */

/* The first element of rank r's range of `numel` split n ways. */
static int64_t range_lo(int64_t numel, int n, int r) { return numel / n * r + numel % n * r / n; }

/* Publishes rank slot's host copy (or its error) for this process's other
 * ranks. */
static void publish(group *gr, rendezvous *rv, int slot, payload *pl, const char *err) {
    span_pub *s = dt__calloc(1, sizeof *s);
    if (s && err && err[0] && !(s->error = dt__strdup(err)))
        s = (dt__free(s), NULL);
    if (s && !s->error && pl) {
        atomic_fetch_add(&pl->refs, 1);
        s->pl = pl;
    }
    pthread_mutex_lock(&gr->lock);
    rv->pub[slot] = s; /* NULL: out of memory, which the readers report */
    pthread_mutex_unlock(&gr->lock);
}

/* Waits until every rank of this process has reached stage k. */
static void stage(group *gr, rendezvous *rv, int k) {
    pthread_mutex_lock(&gr->lock);
    if (++rv->staged[k] == gr->nlocal)
        pthread_cond_broadcast(&gr->cond);
    while (rv->staged[k] < gr->nlocal)
        pthread_cond_wait(&gr->cond, &gr->lock);
    pthread_mutex_unlock(&gr->lock);
}

/* The bytes of published slot s from `off`, or NULL with why set (unless
 * it holds a failure already). Read after a stage barrier: no lock. */
static const uint8_t *published(const span_pub *s, size_t off, char *why, size_t whylen) {
    if (why[0])
        return NULL;
    if (!s || (!s->error && !s->pl))
        snprintf(why, whylen, "out of memory publishing a collective's value");
    else if (s->error)
        snprintf(why, whylen, "%s", s->error);
    else
        return (const uint8_t *)s->pl->p + off;
    return NULL;
}

void dt__coll_span_clear(rendezvous *rv, int n) {
    for (int i = 0; i < 2 * n; i++) {
        span_pub *s = rv->pub[i];
        if (s) {
            payload_drop(s->pl);
            dt__free(s->error);
            dt__free(s);
            rv->pub[i] = NULL;
        }
    }
}

/* Rank r's range reduced: the n ranks' pieces of it (this process's from
 * their published copies, the others' from round 1's messages, every one
 * waited for) added in rank order, copied to host memory; NULL with the
 * reason in why. */
static payload *reduce_range(group *gr, const dt__collattr *a, int r, rendezvous *rv, const dt__backend *be,
                             int64_t numel, char *why, size_t whylen) {
    int n = a->n;
    size_t esz = dt_dtype_size(a->dtype);
    int64_t lo = range_lo(numel, n, r), len = range_lo(numel, n, r + 1) - lo;
    void **ops = dt__calloc((size_t)n, sizeof *ops);
    if (!ops)
        snprintf(why, whylen, "out of memory reducing a collective's range");
    char err[512] = "";
    for (int q = 0; q < n; q++) {
        dt__xfer_msg *m = NULL;
        const void *src;
        if (gr->local[q]) {
            src = published(rv->pub[q], (size_t)lo * esz, why, whylen);
        } else {
            m = take(gr, a->seq, r, q, 1, why, whylen);
            src = m ? m->data : NULL;
            if (m && !why[0] && (m->h.ndim != 1 || m->h.shape[0] != len || m->h.dtype != (int32_t)a->dtype))
                malformed(why, whylen, m->h.src_device);
        }
        if (!why[0] && be->from_host(a->dtype, 1, &len, len ? src : (const void *)&len, &ops[q], err,
                                     sizeof err) != DT_OK)
            snprintf(why, whylen, "storing a collective's piece failed: %s", err[0] ? err : "backend error");
        dt__xfer_msg_free(m);
    }
    void *sum = NULL;
    payload *red = NULL;
    if (!why[0]) {
        dt__kattr ka;
        memset(&ka, 0, sizeof ka);
        ka.dtype = a->dtype;
        if (be->run(DT_K_SUM_N, &ka, ops, n, &sum, err, sizeof err) != DT_OK)
            snprintf(why, whylen, "%s", err[0] ? err : "backend error");
        else
            red = host_copy(be, sum, why, whylen);
    }
    /* SUM_N of one input may alias it; n >= 2 in a spanning group. */
    if (sum)
        be->free(sum);
    for (int q = 0; ops && q < n; q++)
        if (ops[q])
            be->free(ops[q]);
    dt__free(ops);
    return red;
}

/* Rank r's all-reduce (see the top): its output in *res when `keep`, else
 * only its part in the exchange; the first failure in why. */
static void allreduce(group *gr, const dt__collattr *a, int r, dt__blob *in, rendezvous *rv,
                      const dt__backend *be, int keep, void **res, char *why, size_t whylen) {
    int n = a->n;
    size_t esz = dt_dtype_size(a->dtype);
    int64_t numel = 1, shape[DT_MAX_NDIM];
    for (int d = 0; d < a->ndim; d++)
        numel *= shape[d] = dt__collattr_at(a->shapes, (size_t)r * (size_t)a->ndim + (size_t)d);
    char err[DT__XFER_TEXT] = "";
    for (int p = 0; p < n && !err[0]; p++) { /* a Partial's pieces: one size, which every rank splits */
        int64_t m = 1;
        for (int d = 0; d < a->ndim; d++)
            m *= dt__collattr_at(a->shapes, (size_t)p * (size_t)a->ndim + (size_t)d);
        if (m != numel)
            snprintf(err, sizeof err, "an all-reduce of inputs of different sizes");
    }
    payload *mine = NULL;
    if (!err[0] && (!in || in->error || !in->impl))
        snprintf(err, sizeof err, "%s", in && in->error ? in->error : "a collective's peer sent no value");
    else if (!err[0] && (mine = host_copy(be, in->impl, err, sizeof err)) && mine->len != (size_t)numel * esz)
        snprintf(err, sizeof err, "an all-reduce input of %zu bytes, not %lld", mine->len,
                 (long long)numel * (long long)esz);
    publish(gr, rv, r, mine, err);

    /* Round 1: each rank of another node gets its range of this input. */
    for (int p = 0; p < n; p++) {
        if (gr->local[p])
            continue;
        int64_t lo = range_lo(numel, n, p), len = range_lo(numel, n, p + 1) - lo;
        dt__xfer_msg *m = msg_new(gr, a, a->seq, r, p, gr->ids[p]);
        if (m) {
            m->h.ndim = 1;
            m->h.shape[0] = len;
        }
        msg_post(m, mine, (size_t)lo * esz, (size_t)len * esz, err);
    }
    stage(gr, rv, 0);

    char mine_why[DT__XFER_TEXT] = "";
    payload *red = reduce_range(gr, a, r, rv, be, numel, mine_why, sizeof mine_why);
    publish(gr, rv, n + r, red, mine_why);
    /* Round 2: the reduced range to every other node, once per node. */
    int64_t lo = range_lo(numel, n, r);
    send_each_node(gr, a, DT_COLL_ALLGATHER, a->seq | DT__XFER_ROUND2, r, range_lo(numel, n, r + 1) - lo, red,
                   mine_why);
    stage(gr, rv, 1);

    /* The output: every rank's reduced range in its place. */
    uint8_t *full = keep && !why[0] ? dt__malloc(numel ? (size_t)numel * esz : 1) : NULL;
    if (keep && !why[0] && !full)
        snprintf(why, whylen, "out of memory assembling a collective's output");
    for (int q = 0; q < n; q++) {
        int64_t qlo = range_lo(numel, n, q), qlen = range_lo(numel, n, q + 1) - qlo;
        dt__xfer_msg *m = NULL;
        const void *src;
        if (gr->local[q]) {
            src = published(rv->pub[n + q], 0, why, whylen);
        } else {
            m = take(gr, a->seq | DT__XFER_ROUND2, r, q, gr->nlocal, why, whylen);
            src = m ? m->data : NULL;
            if (m && !why[0] && (m->h.ndim != 1 || m->h.shape[0] != qlen || m->h.dtype != (int32_t)a->dtype))
                malformed(why, whylen, m->h.src_device);
        }
        if (full && !why[0] && qlen)
            memcpy(full + (size_t)qlo * esz, src, (size_t)qlen * esz);
        dt__xfer_msg_free(m);
    }
    char herr[512] = "";
    if (full && !why[0] && be->from_host(a->dtype, a->ndim, shape, full, res, herr, sizeof herr) != DT_OK)
        snprintf(why, whylen, "storing a collective's output failed: %s", herr[0] ? herr : "backend error");
    dt__free(full);
    payload_drop(mine);
    payload_drop(red);
}

/* ----------------------------------------------------------- the entry */

void dt__coll_span_run(group *gr, const dt__collattr *a, int r, dt__blob *in, dt__blob *out,
                       const char *opname) {
    int n = a->n, p2p = a->kind == DT_COLL_SENDRECV;
    rendezvous *rv = dt__coll_arrive(gr, a, r, in, gr->nlocal);

    coll_view c = {.a = a, .kind = a->kind, .n = n, .slots = rv->slots, .be = out ? out->be : NULL};
    if (in)
        c.be = in->be;
    int live = out && !out->error; /* a cancelled rank only takes part */
    char why[DT__XFER_TEXT] = "";
    void *impl = NULL;
    void **pre = NULL;
    /* Two ranks: the input whole to the other sends as many bytes as the
     * two rounds, in one (every rank knows n; see the top). */
    int split = a->kind == DT_COLL_ALLREDUCE && n > 2;
    if (split) {
        allreduce(gr, a, r, in, rv, c.be, live, &impl, why, sizeof why);
    } else {
        send_parts(gr, &c, r, in);
        pre = out ? dt__calloc((size_t)n, sizeof *pre) : NULL;
        if (out && !pre)
            snprintf(why, sizeof why, "out of memory receiving a collective's parts");
        if (out)
            recv_parts(gr, a, r, live ? c.be : NULL, pre, why, sizeof why);
    }

    const char *failed = NULL;
    for (int p = 0; p < n && !failed; p++)
        failed = gr->local[p] && c.slots[p] ? c.slots[p]->error : NULL;
    if (live) {
        if (failed) {
            out->error = dt__strdup(failed);
        } else if (why[0]) {
            dt__coll_fail(out, opname, why);
        } else {
            char err[512] = "";
            dt_status st = DT_OK;
            int src = p2p ? 0 : (r + n - 1) % n;
            if (split) {
                /* computed already */
            } else if ((p2p || a->kind == DT_COLL_SHIFT) && pre[src]) { /* the peer's message is the output */
                impl = pre[src];
                pre[src] = NULL;
            } else if (p2p || a->kind == DT_COLL_SHIFT) {
                st = dt__coll_slice_peer(&c, src, r, 1, &impl, err, sizeof err);
            } else {
                st = dt__coll_compute(&c, r, pre, &impl, err, sizeof err);
            }
            if (st == DT_OK) {
                out->impl = impl;
                impl = NULL;
            } else {
                dt__coll_fail(out, opname, err);
            }
        }
    }
    if (impl)
        c.be->free(impl);
    for (int p = 0; pre && p < n; p++)
        if (pre[p])
            c.be->free(pre[p]);
    dt__free(pre);

    dt__coll_depart(gr, rv, n, gr->nlocal);
}
