/*
 * Blob groups (docs/decisions.md, "Blob groups"): the blobs of one value on
 * every device of its mesh, made by one device-independent record
 * (core/records/bcast.h), as one allocation with one count of holders.
 *
 * Layout: [dt__bgroup][n member pointers][n member blobs], from one pool
 * record for meshes of up to DT__BGROUP_POOLED devices. The pointers are the
 * value's `blobs` array (core/client/tensor.h), so code that reads a value's
 * blob on a device is unchanged; each member is an ordinary blob, with its
 * own reference count for the holders that are per device (a per-device
 * kernel reading it, a view's `base`, a collective), its event, charge and
 * error. A value made per device that a shared record reads is adopted
 * (dt__bgroup_adopt): a group of its existing blobs (pointers only), which
 * takes the value's references over, so later shared records hold it once.
 *
 * References: `holds` counts the holders of the whole group (the tensor
 * value, and each shared record that reads it: one count per record, not
 * per device). While it is above zero the group holds one reference on
 * every member; the last hold dropped drops those n references (on the
 * controller through its dead lists, elsewhere directly), but for members
 * a kernel took over (`taken`). `live` counts the members in the
 * allocation not yet freed and the holds' part (1 until the last hold's
 * drops are done); the last of these frees the allocation.
 *
 * Threads: made by the controller; holds are dropped by the controller (a
 * value freed) or by the worker that runs a shared record's last slot;
 * members are freed on any thread (blob.c).
 */
#ifndef DT_CORE_BGROUP_H
#define DT_CORE_BGROUP_H

#include "common/pool.h"
#include "core/records/blob.h"

typedef struct dt__bgroup {
    atomic_int holds; /* holders of the whole group */
    atomic_int live;  /* members not yet freed, + 1 until the holds are gone */
    int n;            /* members: the mesh's devices */
    int pooled;       /* from dt__bgroup_pool (else malloc) */
    /* Bit d: member d's group reference was taken over by the kernel that
     * read it as the group's only holder's slot and wrote into it in place
     * (core/worker/kernel_run.c); the last hold skips it. Set by that
     * device's worker, read after the holds are gone. */
    atomic_ullong taken;
} dt__bgroup;

/* Groups have at most this many members (the bits of `taken`). */
#define DT__BGROUP_MAX 64

/* Groups of up to this many members come from a pool. */
#define DT__BGROUP_POOLED 8
#define DT__BGROUP_HDR ((size_t)DT_CACHE_LINE)
_Static_assert(sizeof(dt__bgroup) <= DT__BGROUP_HDR && DT__BGROUP_HDR % _Alignof(dt__blob) == 0,
               "dt__bgroup header");
/* Where the members start: after the header and n pointers, aligned. */
#define DT__BGROUP_MEMBERS(n)                                                                                \
    ((DT__BGROUP_HDR + (size_t)(n) * sizeof(dt__blob *) + _Alignof(dt__blob) - 1) / _Alignof(dt__blob) *     \
     _Alignof(dt__blob))
#define DT__BGROUP_BYTES(n) (DT__BGROUP_MEMBERS(n) + (size_t)(n) * sizeof(dt__blob))
extern dt__pool dt__bgroup_pool; /* blob.c */

/* The member pointers: a value's `blobs` array while it holds the group. */
static inline dt__blob **dt__bgroup_ptrs(dt__bgroup *gr) {
    return (dt__blob **)((uint8_t *)gr + DT__BGROUP_HDR);
}

/* A group of n members on backends be[d] (the streams'), one hold (the
 * caller's), each member with `refs` references: the group's own and
 * refs - 1 for the caller (the records that make them). NULL when out of
 * memory. The controller thread (`mine`: its pool lists). */
dt__bgroup *dt__bgroup_new(struct dt__pool_lists *mine, int n, const dt__backend *const *be, int refs);

/* A group of a value's existing blobs[0..n) (made per device), one hold
 * (the caller's): the group takes the caller's reference on each blob over.
 * NULL when out of memory. The controller thread. */
dt__bgroup *dt__bgroup_adopt(struct dt__pool_lists *mine, int n, dt__blob *const *blobs);

/* Whether member d's group reference was taken over. */
static inline int dt__bgroup_taken(dt__bgroup *gr, int d) {
    return (int)(atomic_load_explicit(&gr->taken, memory_order_relaxed) >> d & 1);
}

/* One more holder of the whole group. */
static inline void dt__bgroup_hold(dt__bgroup *gr) {
    atomic_fetch_add_explicit(&gr->holds, 1, memory_order_relaxed);
}

/* Drops one hold; returns 1 when it was the last, and the caller then drops
 * the group's reference on every member not taken over (dt__bgroup_taken),
 * then calls dt__bgroup_member_gone once (as dt__bgroup_release does; the
 * controller through its dead lists, core/client/tensor.c). */
static inline int dt__bgroup_unhold(dt__bgroup *gr) {
    return atomic_fetch_sub_explicit(&gr->holds, 1, memory_order_acq_rel) == 1;
}

/* Drops a hold, and when it was the last the group's reference on each
 * member (those freed here). Any thread. */
void dt__bgroup_release(dt__bgroup *gr);

/* A member of a group was freed (blob.c), or the last hold's drops are
 * done: the last of these frees the allocation. */
void dt__bgroup_member_gone(dt__bgroup *gr, struct dt__pool_lists *mine);

#endif /* DT_CORE_BGROUP_H */
