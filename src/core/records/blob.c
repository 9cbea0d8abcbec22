/*
 * Blob lifetime: the pools of kernel records and blobs, dt__blob_new and
 * dt__blob_release (the last reference returns the charge, frees the
 * backend storage and event, and lets go of the base). The charge itself is
 * made by the worker that produced the blob (core/worker/kernel_run.c: a
 * kernel's new output charged to its device, a view tied to the input whose
 * storage it shares, or a donated input's charge moved to it).
 * dt__blob_retain is inline in blob.h.
 *
 * Threads: any (controller, workers, client threads dropping a tensor);
 * references are atomic; the pools (common/pool.h) take any thread, with
 * their own lock. dt__mem_charge is atomic.
 */
#include <string.h>

#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/cluster_port.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/memstats.h"

dt__pool dt__kernel_pool = DT__POOL_INIT(sizeof(dt__kernel));
dt__pool dt__blob_pool = DT__POOL_INIT(sizeof(dt__blob));
dt__pool dt__bgroup_pool = DT__POOL_INIT(DT__BGROUP_BYTES(DT__BGROUP_POOLED));
dt__pool dt__runev_pool = DT__POOL_INIT(DT__RUNEV_BYTES(DT__RUNEV_POOLED));

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
    if (b->grp) {
        /* Back to what dt__bgroup_new makes (the group's next use in the
         * pool skips it): this thread holds the line now. */
        dt__bgroup *gr = b->grp;
        const dt__backend *be = b->be;
        memset(b, 0, sizeof *b);
        atomic_init(&b->refs, DT__BGROUP_REFS);
        b->be = be;
        b->grp = gr;
        dt__bgroup_member_gone(gr, mine);
    } else
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

void dt__blob_free_last(dt__blob *b, dt__pool_lists *mine) { dt__blob_release_in(blob_free(b, mine), mine); }

void dt__blob_free_dead(dt__blob *b) {
    dt__pool_lists *mine = dt__pool_my_lists();
    for (dt__blob *next; b; b = next) {
        next = b->next_dead;
        dt__blob_release_in(blob_free(b, mine), mine);
    }
}

const dt__backend *dt__backend_all(int n, const dt__backend *const *be) {
    const dt__backend *all = be[0];
    for (int d = 1; d < n; d++)
        if (be[d] != all)
            all = NULL;
    return all;
}

dt__bgroup *dt__bgroup_new(dt__pool_lists *mine, int n, const dt__backend *const *be, int refs) {
    return dt__bgroup_new_all(mine, n, be, dt__backend_all(n, be), refs);
}

dt__bgroup *dt__bgroup_new_all(dt__pool_lists *mine, int n, const dt__backend *const *be,
                               const dt__backend *all, int refs) {
    int pooled = n <= DT__BGROUP_POOLED;
    dt__bgroup *gr = pooled ? dt__pool_alloc_in(&dt__bgroup_pool, mine, 0) : dt__malloc(DT__BGROUP_BYTES(n));
    if (!gr)
        return NULL;
    if (pooled) {
        /* The group the pool hands out next: its header was last written
         * by the worker that freed it, so its line is asked for now, to
         * arrive while this node and the next are lowered rather than be
         * waited for then. */
        dt__pool_list *l = dt__pool_slot_list(&dt__bgroup_pool, mine);
        if (l && l->head)
            __builtin_prefetch(l->head, 1, 3);
    }
    /* A pooled allocation freed with its members as made here (blob.c) for
     * this size and backend: nothing to write into the members. */
    int ready = pooled && all && refs == DT__BGROUP_REFS && gr->ready == DT__BGROUP_READY(n, all);
    atomic_init(&gr->holds, 1);
    atomic_init(&gr->live, n + 1);
    atomic_init(&gr->taken, 0);
    gr->n = n;
    gr->pooled = pooled;
    gr->ev = NULL;
    gr->be_all = all;
    gr->loose = 0;
    gr->ready = 0;
    if (ready)
        return gr;
    dt__blob **ptrs = dt__bgroup_ptrs(gr);
    dt__blob *m = (dt__blob *)((uint8_t *)gr + DT__BGROUP_MEMBERS(n));
    memset(m, 0, sizeof *m * (size_t)n); /* one run of stores over the members' lines */
    for (int d = 0; d < n; d++) {
        atomic_init(&m[d].refs, refs);
        m[d].be = be[d];
        m[d].grp = gr;
        ptrs[d] = &m[d];
    }
    return gr;
}

dt__bgroup *dt__bgroup_adopt(dt__pool_lists *mine, int n, dt__blob *const *blobs) {
    int pooled = n <= DT__BGROUP_POOLED;
    dt__bgroup *gr = pooled ? dt__pool_alloc_in(&dt__bgroup_pool, mine, 0)
                            : dt__malloc(DT__BGROUP_HDR + (size_t)n * sizeof(dt__blob *));
    if (!gr)
        return NULL;
    atomic_init(&gr->holds, 1);
    atomic_init(&gr->live, 1); /* no member in the allocation */
    atomic_init(&gr->taken, 0);
    gr->n = n;
    gr->pooled = pooled;
    gr->ev = NULL;
    gr->be_all = NULL; /* no members in the allocation */
    gr->ready = 0;
    int loose = 1;
    for (int d = 0; d < n && loose; d++)
        loose = blobs[d] && !blobs[d]->grp;
    gr->loose = loose;
    memcpy(dt__bgroup_ptrs(gr), blobs, sizeof *blobs * (size_t)n);
    return gr;
}

void dt__bgroup_release(dt__bgroup *gr) {
    if (!dt__bgroup_unhold(gr))
        return;
    dt__pool_lists *mine = dt__pool_my_lists();
    dt__blob **ptrs = dt__bgroup_ptrs(gr);
    for (int d = 0; d < gr->n; d++)
        if (!dt__bgroup_taken(gr, d))
            dt__blob_release_in(ptrs[d], mine);
    dt__bgroup_member_gone(gr, mine);
}

void dt__bgroup_member_gone(dt__bgroup *gr, dt__pool_lists *mine) {
    if (atomic_fetch_sub_explicit(&gr->live, 1, memory_order_acq_rel) != 1)
        return;
    if (gr->ev)
        dt__runev_unref((dt__runev *)gr->ev, mine);
    /* Every member was reset when freed (blob_free). */
    gr->ready = gr->be_all ? DT__BGROUP_READY(gr->n, gr->be_all) : 0;
    if (gr->pooled)
        dt__pool_free_in(&dt__bgroup_pool, mine, gr);
    else
        dt__free(gr);
}

dt__runev *dt__runev_new(dt__pool_lists *mine, int n) {
    int pooled = n <= DT__RUNEV_POOLED;
    dt__runev *ev = pooled ? dt__pool_alloc_in(&dt__runev_pool, mine, 0) : dt__malloc(DT__RUNEV_BYTES(n));
    if (!ev)
        return NULL;
    atomic_init(&ev->refs, 0);
    ev->n = n;
    ev->pooled = pooled;
    ev->ss = (struct dt__stream **)((uint8_t *)ev + DT__RUNEV_HDR);
    ev->base = (uint64_t *)(ev->ss + n);
    return ev;
}

void dt__runev_unref(dt__runev *ev, dt__pool_lists *mine) {
    if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (ev->pooled)
        dt__pool_free_in(&dt__runev_pool, mine, ev);
    else
        dt__free(ev);
}
