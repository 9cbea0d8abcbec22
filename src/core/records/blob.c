/*
 * Blob lifetime and accounting: the pools of kernel records and blobs,
 * dt__blob_new, dt__blob_account (a kernel's new output charged to its
 * device, a view tied to the input whose storage it shares, or a donated
 * input's charge moved to it) and dt__blob_release (the last reference
 * returns the charge, frees the backend storage and event, and lets go of
 * the base).
 * dt__blob_retain is inline in blob.h.
 *
 * Threads: any (controller, workers, client threads dropping a tensor);
 * references are atomic; the pools (common/pool.h) take any thread, with
 * their own lock. dt__mem_charge is atomic.
 */
#include <string.h>

#include "core/records/blob.h"
#include "core/records/cluster_port.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/memstats.h"
#include "core/worker/stream_int.h"

dt__pool dt__kernel_pool = DT__POOL_INIT(sizeof(dt__kernel));
dt__pool dt__blob_pool = DT__POOL_INIT(sizeof(dt__blob));

dt__blob *dt__blob_new(const dt__backend *be) { return dt__blob_new_in(NULL, be); }

/* Frees a blob whose last reference is gone; returns its base, whose
 * reference it held. */
static dt__blob *blob_free(dt__blob *b, dt__pool_lists *mine) {
    if (b->charged)
        dt__mem_charge(b->mem, -b->charged);
    if (b->impl)
        b->be->free(b->impl);
    if (b->bev && b->be->event_free)
        b->be->event_free(b->bev);
    if (b->error)
        dt__free(b->error);
    if (b->remote)
        dt__port_release(b->remote - 1, b->rtag, b->id);
    dt__blob *base = b->base;
    dt__pool_free_in(&dt__blob_pool, mine, b);
    return base;
}

void dt__blob_release_in(dt__blob *b, dt__pool_lists *mine) {
    /* A chain of views (x = x.view(...) in a loop) is let go of in a loop,
     * not by recursion, so its length never grows the stack. */
    while (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1)
        b = blob_free(b, mine);
}

void dt__blob_release(dt__blob *b) { dt__blob_release_in(b, NULL); }

void dt__blob_release_ctl(dt_graph *g, dt__blob *b, dt__pool_lists *mine) {
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    dt__stream *s = b->producer;
    if (s && !s->remote && !b->remote && b->impl) {
        b->next_dead = s->dead;
        s->dead = b;
        if (!s->dead_queued) {
            s->dead_queued = 1;
            s->next_dead_q = g->dead_q;
            g->dead_q = s;
        }
        return;
    }
    dt__blob_release_in(blob_free(b, mine), mine);
}

void dt__blob_free_dead(dt__blob *b) {
    dt__pool_lists *mine = dt__pool_my_lists();
    for (dt__blob *next; b; b = next) {
        next = b->next_dead;
        dt__blob_release_in(blob_free(b, mine), mine);
    }
}

/* Charges a new output to its device (s's worker thread). Storage is counted once: an output
 * written into its donated input's buffer takes that input's charge (and base) over; a view of
 * an input on this device's account (the backend says they share storage) is charged nothing
 * and holds that input, whose charge then lasts as long as the storage is seen; anything else is
 * charged its storage's bytes, which for a view of the kernel's own temporary is more than its
 * elements'. An input on no device's account (a source: the host copy from_torch made, which
 * each device's blob of a Replicate shares) or on another device's (an in-process copy may
 * share a host buffer) is not a base: that output is charged here, as before views, so a
 * device's value is always counted on that device. */
void dt__blob_account(dt__krec *k, const dt__stream *s, int inplace) {
    dt__blob *out = k->out;
    if (!out || !out->impl || out->charged || out->base)
        return;
    if (inplace && k->n_in > 0 && k->in[0]->impl && s->be->same_storage &&
        s->be->same_storage(out->impl, k->in[0]->impl)) {
        dt__blob *in = k->in[0];
        out->charged = in->charged;
        out->mem = in->mem;
        out->base = in->base;
        in->charged = 0;
        in->base = NULL;
        atomic_fetch_add_explicit(&s->g->kernels_in_place, 1, memory_order_relaxed);
        return;
    }
    if (!s->mem)
        return;
    out->mem = s->mem;
    if (s->be->same_storage)
        for (int i = 0; i < k->n_in; i++) {
            dt__blob *in = k->in[i];
            if (in->impl && in->mem == s->mem && in->be == s->be &&
                s->be->same_storage(out->impl, in->impl)) {
                out->base = dt__blob_retain(in);
                return;
            }
        }
    out->charged =
        (int64_t)(s->be->storage_nbytes ? s->be->storage_nbytes(out->impl) : s->be->nbytes(out->impl));
    dt__mem_charge(out->mem, out->charged);
}
