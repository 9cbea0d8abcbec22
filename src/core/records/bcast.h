/*
 * A device-independent kernel record (docs/decisions.md, "Lower once,
 * instantiate per device"): one node's kernel, lowered once for every device
 * of its mesh. The kernel op, its attributes, its op name and call site are
 * stored once, in `img`; what differs between devices is only which blobs
 * it reads and writes, and those are the device's slot: a record header
 * (kop DT_KC_BCAST, handle the shared record, in[], out, wait) that is
 * linked into that device's stream queue like any record, so the stream's
 * order and events are unchanged. A worker that reaches its slot
 * instantiates the kernel on its stack (the image's header and attributes
 * with the slot's blobs) and runs it as any record (core/worker/kernel_run.c);
 * the last slot run frees the whole record.
 *
 * Memory: one allocation, [dt__bcast][n slots][img + its attributes],
 * from a pool for meshes of up to DT__BCAST_POOLED devices.
 * Threads: made by the controller (core/controller/lower_bcast.c), read by the
 * workers of its streams; `left` is the only field written after the
 * hand-over.
 */
#ifndef DT_CORE_BCAST_H
#define DT_CORE_BCAST_H

#include "common/pool.h"
#include "core/records/bgroup.h"
#include "core/records/kernel_rec.h"

typedef struct dt__bcast {
    atomic_int left; /* slots not yet run or dropped */
    int n;           /* slots */
    int pooled;      /* from dt__bcast_pool (else malloc) */
    /* A collective over groups of one mesh dim (core/controller/lower_coll.c):
     * slot d's group id and sequence number follow the image's attributes,
     * 16 bytes each, as the attributes' first 16 bytes encode them. */
    int coll_ids;
    dt__krec *img; /* the kernel: kop, attributes, name and call site; no blobs */
    /* Input j's group when the record holds it whole (core/records/bgroup.h):
     * the slots' in[j] are then its members, borrowed (no reference of
     * their own); the last slot drops the hold. NULL: the slots hold
     * in[j]. Written before the hand-over, then only read. */
    struct dt__bgroup *gin[DT_MAX_OP_INPUTS];
} dt__bcast;

/* A slot's stride: a record without attributes. */
#define DT__BCAST_SLOT sizeof(dt__krec)
/* The header's size: two cache lines, so the workers' count down of `left`
 * does not share one with the first slot. */
#define DT__BCAST_HDR ((size_t)2 * DT_CACHE_LINE)
_Static_assert(sizeof(dt__bcast) <= DT__BCAST_HDR && DT_CACHE_LINE % _Alignof(dt__krec) == 0,
               "dt__bcast header");
/* Records of up to this many slots come from a pool (made on the
 * controller, freed on a worker: no malloc arena traffic between threads). */
#define DT__BCAST_POOLED 8
#define DT__BCAST_BYTES(n, alen) (DT__BCAST_HDR + ((size_t)(n) + 1) * DT__BCAST_SLOT + (alen))
extern dt__pool dt__bcast_pool; /* kernel_rec.c */

/* Slot i of b. */
static inline dt__krec *dt__bcast_slot(dt__bcast *b, int i) {
    return (dt__krec *)((uint8_t *)b + DT__BCAST_HDR + (size_t)i * DT__BCAST_SLOT);
}

/* A record of n slots whose image has alen bytes of attributes (at most
 * DT__KATTR_PACK_MAX), its header, slots and image header zeroed (left =
 * n); NULL when out of memory. Controller thread (`mine`: its pool lists). */
static inline dt__bcast *dt__bcast_new(struct dt__pool_lists *mine, int n, size_t alen) {
    size_t zeroed = DT__BCAST_BYTES(n, 0);
    int pooled = n <= DT__BCAST_POOLED;
    dt__bcast *b = pooled ? dt__pool_alloc_in(&dt__bcast_pool, mine, zeroed) : dt__calloc(1, zeroed + alen);
    if (!b)
        return NULL;
    b->n = n;
    b->pooled = pooled;
    atomic_init(&b->left, n);
    b->img = dt__bcast_slot(b, n);
    b->img->alen = (uint32_t)alen;
    return b;
}

/* One slot is done with b (run, dropped, or never queued): the last drops
 * the groups it holds and frees it. Any thread. */
static inline void dt__bcast_unref(dt__bcast *b) {
    if (atomic_fetch_sub_explicit(&b->left, 1, memory_order_acq_rel) != 1)
        return;
    for (int j = 0; j < DT_MAX_OP_INPUTS; j++)
        if (b->gin[j])
            dt__bgroup_release(b->gin[j]);
    if (b->pooled)
        dt__pool_free(&dt__bcast_pool, b);
    else
        dt__free(b);
}

/* The device index of slot k of b. */
static inline int dt__bcast_slot_index(const dt__bcast *b, const dt__krec *k) {
    return (int)(((const uint8_t *)k - ((const uint8_t *)b + DT__BCAST_HDR)) / DT__BCAST_SLOT);
}

/* Drops a record's references to its blobs: for device `d`'s instance of a
 * slot (`bc` its shared record; d < 0: a slot that never ran), not the
 * inputs it borrows from groups bc holds, but for a member whose group
 * reference the kernel took over (dt__bgroup.taken). */
static inline void dt__krec_release_blobs(dt__krec *k, const dt__bcast *bc, int d) {
    for (int i = 0; i < k->n_in; i++)
        if (!bc || !bc->gin[i] || (d >= 0 && dt__bgroup_taken(bc->gin[i], d)))
            dt__blob_release(k->in[i]);
    dt__blob_release(k->out);
}

#endif /* DT_CORE_BCAST_H */
