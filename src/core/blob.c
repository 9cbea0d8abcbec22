/*
 * Blob lifetime and accounting: the pools of kernel records and blobs,
 * dt__blob_new, dt__blob_account (a kernel's new output charged to its
 * device, or a donated input's charge moved to it) and dt__blob_release (the
 * last reference returns the charge, frees the backend storage and event).
 * dt__blob_retain is inline in blob.h.
 *
 * Threads: any (controller, workers, client threads dropping a tensor);
 * references are atomic; the pools (common/pool.h) take any thread, with
 * their own lock. dt__mem_charge is atomic.
 */
#include <string.h>

#include "core/blob.h"
#include "core/graph_int.h"
#include "core/kernel.h"
#include "core/kernel_rec.h"
#include "core/memstats.h"
#include "core/remote.h"
#include "core/stream_int.h"

dt__pool dt__kernel_pool = DT__POOL_INIT(sizeof(dt__kernel));
dt__pool dt__blob_pool = DT__POOL_INIT(sizeof(dt__blob));

dt__blob *dt__blob_new(const dt__backend *be) { return dt__blob_new_in(NULL, be); }

dt__blob *dt__blob_new_in(dt__pool_lists *mine, const dt__backend *be) {
    dt__blob *b = dt__pool_alloc_in(&dt__blob_pool, mine, 0);
    if (!b)
        return NULL;
    memset(b, 0, sizeof *b); /* a constant size: inline stores */
    atomic_init(&b->refs, 1);
    b->be = be;
    return b;
}

void dt__blob_release(dt__blob *b) {
    if (!b || atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (b->charged)
        dt__mem_charge(b->mem, -b->charged);
    if (b->impl)
        b->be->free(b->impl);
    if (b->bev && b->be->event_free)
        b->be->event_free(b->bev);
    dt__free(b->error);
    if (b->remote)
        dt__cluster_release(b->remote - 1, b->rtag, b->id);
    dt__pool_free(&dt__blob_pool, b);
}

/* Charges a new output to its device (s's worker thread); an output written into its donated
 * input's buffer takes that input's charge over instead. */
void dt__blob_account(dt__krec *k, const dt__stream *s, int inplace) {
    dt__blob *out = k->out;
    if (!out || !out->impl || out->charged)
        return;
    if (inplace && k->n_in > 0 && k->in[0]->impl && s->be->same_storage &&
        s->be->same_storage(out->impl, k->in[0]->impl)) {
        dt__blob *in = k->in[0];
        out->charged = in->charged;
        out->mem = in->mem;
        in->charged = 0;
        atomic_fetch_add_explicit(&s->g->kernels_in_place, 1, memory_order_relaxed);
        return;
    }
    if (!s->mem)
        return;
    out->mem = s->mem;
    out->charged = (int64_t)s->be->nbytes(out->impl);
    dt__mem_charge(out->mem, out->charged);
}
