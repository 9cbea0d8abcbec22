/*
 * Collectives of a group whose ranks live on several nodes (issue 13 item
 * 3): the in-process comm's spanning groups (dt__comm_group_span).
 *
 * This process's ranks meet in the group's rendezvous as in-process ones
 * do (counting only themselves), so they read each other's inputs in
 * memory. Each rank then sends every rank of another node the part of its
 * input that rank needs (its range along dim_b for the sliced kinds, the
 * whole input otherwise; the next rank's only for a ring step, the
 * receiver's only for a send), by messages through the transport
 * (dist/xfer.h), and waits for the parts it needs from the other nodes'
 * ranks. It computes its output with the same kernel, over the same
 * operands in the same rank order, as the in-process comm: results are
 * bit-identical to a one-process mesh of the same size. (A ring
 * reduce-scatter would send less but add in another order; see
 * docs/decisions.md.)
 *
 * A rank whose input failed sends the error instead of bytes, so its peers
 * fail with it rather than wait; a cancelled rank still sends and drains
 * what it is owed. A peer's node lost while a rank waits: the wait fails
 * with the node's error (xfer.h), and so does the rank's output.
 *
 * Threads: the ranks' workers; the group's lock as in collective.c.
 */
#include <stdio.h>
#include <string.h>

#include "core/blob.h"
#include "dist/coll.h"
#include "dist/inproc_int.h"
#include "dist/xfer.h"

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

static void release_bytes(void *arg) { dt__free(arg); }

/* Rank r's message to rank p: its input (sliced to p's range for the
 * sliced kinds), or its input's error. */
static void send_part(group *gr, const coll_view *c, int r, int p, dt__blob *in) {
    const dt__collattr *a = c->a;
    dt__xfer_msg *m = dt__calloc(1, sizeof *m);
    if (!m)
        return; /* the peer's wait fails only when our node is lost: out of memory here is fatal anyway */
    dt__xfer_hdr *h = &m->h;
    h->tag = gr->tag;
    h->group = gr->key;
    h->seq = a->seq;
    h->from = r;
    h->to = p;
    h->src_device = gr->ids[r];
    h->dst_device = gr->ids[p];
    h->dtype = (int32_t)a->dtype;
    h->ndim = (uint32_t)a->ndim;
    for (int d = 0; d < a->ndim; d++)
        h->shape[d] = dt__collattr_at(a->shapes, (size_t)r * (size_t)a->ndim + (size_t)d);
    int sliced = a->kind == DT_COLL_REDUCESCATTER || a->kind == DT_COLL_ALLTOALL;
    char err[512] = "";
    if (!in || in->error || !in->impl) {
        snprintf(h->error, sizeof h->error, "%s",
                 in && in->error ? in->error : "a collective's peer sent no value");
        dt__xfer_post(m);
        return;
    }
    const dt__backend *be = in->be;
    void *impl = in->impl, *made = NULL;
    if (sliced) {
        h->shape[a->dim_b] = dt__collattr_at(a->lens, (size_t)p);
        if (dt__coll_slice_peer(c, r, p, 0, &made, err, sizeof err) != DT_OK) {
            snprintf(h->error, sizeof h->error, "slicing a collective's input failed: %s",
                     err[0] ? err : "backend error");
            dt__xfer_post(m);
            return;
        }
        impl = made;
    }
    /* Always a host copy: a backend's data_ptr is device memory for CUDA
     * (the NCCL comm's buffers), which ZeroMQ cannot read; to_host stages
     * it (device to host on this rank's worker). */
    size_t nb = be->nbytes(impl);
    void *buf = dt__malloc(nb ? nb : 1);
    if (!buf)
        snprintf(h->error, sizeof h->error, "out of memory sending a collective's input");
    else if (be->to_host(impl, buf, nb, err, sizeof err) != DT_OK) {
        snprintf(h->error, sizeof h->error, "copying a collective's input failed: %s",
                 err[0] ? err : "backend error");
        dt__free(buf);
        buf = NULL;
    }
    if (made)
        be->free(made);
    if (buf) {
        m->data = buf;
        m->len = nb;
        m->release = release_bytes;
        m->arg = buf;
    }
    m->h.total = m->len;
    dt__xfer_post(m);
}

/* Waits for rank p's part for rank r and stores it in *impl of `be`; the
 * failure (first one kept) in why. */
static void recv_part(group *gr, const dt__collattr *a, int r, int p, const dt__backend *be, void **impl,
                      char *why, size_t whylen) {
    char err[DT__XFER_TEXT] = "";
    dt__xfer_msg *m = dt__xfer_wait(gr->tag, gr->key, a->seq, p, r, gr->ids[p], err, sizeof err);
    if (why[0] || !be) { /* failed already, or a cancelled rank draining */
        dt__xfer_msg_free(m);
        return;
    }
    if (!m) {
        snprintf(why, whylen, "%s", err);
        return;
    }
    const dt__xfer_hdr *h = &m->h;
    int64_t numel = 1;
    for (uint32_t d = 0; d < h->ndim && d < DT_MAX_NDIM; d++)
        numel *= h->shape[d];
    if (h->error[0])
        snprintf(why, whylen, "%s", h->error);
    else if (h->ndim > DT_MAX_NDIM || h->dtype < 0 || h->dtype >= DT_DTYPE_COUNT || numel < 0 ||
             (size_t)numel * dt_dtype_size((dt_dtype)h->dtype) != m->len)
        snprintf(why, whylen, "a malformed message from %s:%lld",
                 dt__xfer_key_type(h->src_device) == DT_DEVICE_CUDA ? "cuda" : "cpu",
                 (long long)dt__xfer_key_id(h->src_device));
    else if (be->from_host((dt_dtype)h->dtype, (int)h->ndim, h->shape, m->data, impl, err, sizeof err) !=
             DT_OK)
        snprintf(why, whylen, "storing a message from %s:%lld failed: %s",
                 dt__xfer_key_type(h->src_device) == DT_DEVICE_CUDA ? "cuda" : "cpu",
                 (long long)dt__xfer_key_id(h->src_device), err[0] ? err : "backend error");
    dt__xfer_msg_free(m);
}

void dt__coll_span_run(group *gr, const dt__collattr *a, int r, dt__blob *in, dt__blob *out,
                       const char *opname) {
    int n = a->n, p2p = a->kind == DT_COLL_SENDRECV;
    rendezvous *rv = dt__coll_arrive(gr, a, r, in, gr->nlocal);

    coll_view c = {.a = a, .kind = a->kind, .n = n, .slots = rv->slots, .be = out ? out->be : NULL};
    if (in)
        c.be = in->be;
    for (int p = 0; p < n; p++)
        if (!gr->local[p] && needs(a->kind, n, p, r) && !(p2p && r == 1))
            send_part(gr, &c, r, p, in);

    void **pre = out ? dt__calloc((size_t)n, sizeof *pre) : NULL;
    char why[DT__XFER_TEXT] = "";
    if (out && !pre)
        snprintf(why, sizeof why, "out of memory receiving a collective's parts");
    int live = out && !out->error; /* a cancelled rank only drains */
    for (int p = 0; out && p < n; p++)
        if (!gr->local[p] && needs(a->kind, n, r, p))
            recv_part(gr, a, r, p, live && pre ? c.be : NULL, pre ? &pre[p] : NULL, why, sizeof why);

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
            void *impl = NULL;
            dt_status st;
            int src = p2p ? 0 : (r + n - 1) % n;
            if ((p2p || a->kind == DT_COLL_SHIFT) && pre[src]) { /* the peer's message is the output */
                impl = pre[src];
                pre[src] = NULL;
                st = DT_OK;
            } else if (p2p || a->kind == DT_COLL_SHIFT) {
                st = dt__coll_slice_peer(&c, src, r, 1, &impl, err, sizeof err);
            } else {
                st = dt__coll_compute(&c, r, pre, &impl, err, sizeof err);
            }
            if (st == DT_OK) {
                out->impl = impl;
            } else {
                dt__coll_fail(out, opname, err);
            }
        }
    }
    for (int p = 0; pre && p < n; p++)
        if (pre[p])
            c.be->free(pre[p]);
    dt__free(pre);

    dt__coll_depart(gr, rv, n, gr->nlocal);
}
