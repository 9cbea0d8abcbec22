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
 * Events by (run, number) (docs/decisions.md, "Events by run and number"):
 * a group made by a run of shared kernels (core/records/step.h) names the
 * run's event bases (`ev`) and its kernel's index in the run (`kidx`)
 * instead of its members' producer and seq, which stay 0: member d's event
 * is (ev->ss[d], ev->base[d] + kidx + 1), the number its kernel has on
 * device d's stream, as a record of its own would have had. Readers of a
 * blob's event go through dt__blob_event, so the controller writes nothing
 * per device for such a group.
 *
 * Threads: made by the controller; holds are dropped by the controller (a
 * value freed) or by the worker that runs a shared record's last slot;
 * members are freed on any thread (blob.c).
 */
#ifndef DT_CORE_BGROUP_H
#define DT_CORE_BGROUP_H

#include "common/pool.h"
#include "core/records/blob.h"

struct dt__stream;

/* A run's event bases: device d's stream and the number of the kernel
 * appended there before the run's first. One allocation [dt__runev][n
 * streams][n bases], made when the run opens, filled then and only read
 * afterwards; freed with the last group that names it (`refs`, set when
 * the run closes to the groups it made). */
typedef struct dt__runev {
    atomic_int refs;
    int n;
    int pooled;
    struct dt__stream **ss;
    uint64_t *base;
} dt__runev;

#define DT__RUNEV_HDR ((sizeof(dt__runev) + 7) / 8 * 8)
#define DT__RUNEV_BYTES(n) (DT__RUNEV_HDR + (size_t)(n) * (sizeof(void *) + sizeof(uint64_t)))
/* Bases of meshes of up to this many devices come from a pool. */
#define DT__RUNEV_POOLED 8
extern dt__pool dt__runev_pool; /* blob.c */

/* Bases for n streams (refs 0, ss and base to fill); NULL when out of
 * memory. The controller thread (`mine`: its pool lists). */
dt__runev *dt__runev_new(struct dt__pool_lists *mine, int n);
/* One group (or the run that made none) is done with ev. Any thread. */
void dt__runev_unref(dt__runev *ev, struct dt__pool_lists *mine);

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
    /* Made by a run: its event bases and this group's kernel index there
     * (the members' events, dt__blob_event). NULL: each member's own. Set
     * when made, then only read. */
    const dt__runev *ev;
    int kidx;
    /* An adopted group whose members are all there and none a group's own
     * (blob.grp NULL: per-device blobs): it shares no blob with a group
     * made with members (a replay signature's short form, replay_sig.c).
     * Set when made, then only read; 0 for a group made with members. */
    int loose;
    /* Every member's backend when they are all the same, else NULL (an
     * adopted group's too). Set when made. */
    const dt__backend *be_all;
    /* DT__BGROUP_READY(n, be_all) while the allocation is free in the pool
     * with every member as dt__bgroup_new makes them (each member is reset
     * by the thread that frees it, blob.c), so the next group of the same
     * size and backend writes no member line: the lines the workers wrote
     * last stay theirs. 0 while in use. After the pool's free-list link. */
    uint64_t ready;
} dt__bgroup;

/* The references each member starts with when a pooled group is reused
 * without initialising its members (dt__bgroup_new's `refs` then). */
#define DT__BGROUP_REFS 2
#define DT__BGROUP_READY(n, be) (0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)(be) ^ ((uint64_t)(n) << 56))

/* Groups have at most this many members (the bits of `taken`). */
#define DT__BGROUP_MAX 64

/* Groups of up to this many members come from a pool. */
#define DT__BGROUP_POOLED 8
#define DT__BGROUP_HDR ((size_t)DT_CACHE_LINE)
/* A free record's pool link (common/pool.c: three words) leaves `ready`. */
_Static_assert(offsetof(dt__bgroup, ready) >= 3 * sizeof(void *), "dt__bgroup ready after the pool's link");
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

/* Member 0 of a group made with members (dt__bgroup_new). */
static inline dt__blob *dt__bgroup_members(const dt__bgroup *gr) {
    return (dt__blob *)((uint8_t *)gr + DT__BGROUP_MEMBERS(gr->n));
}

/* b's event: the stream whose kernel number *seq makes it (NULL: made by
 * the controller, ready at once). A member of a group a run made computes
 * it from the run's bases (above); any other blob has it in its fields.
 * Any thread that may read b's event (its consumer's controller or
 * worker). */
static inline struct dt__stream *dt__blob_event(const dt__blob *b, uint64_t *seq) {
    const dt__bgroup *gr = b->grp;
    if (b->producer || !gr || !gr->ev) {
        *seq = b->seq;
        return b->producer;
    }
    size_t d = (size_t)(b - dt__bgroup_members(gr));
    *seq = gr->ev->base[d] + (uint64_t)gr->kidx + 1;
    return gr->ev->ss[d];
}

/* A group of n members on backends be[d] (the streams'), one hold (the
 * caller's), each member with `refs` references: the group's own and
 * refs - 1 for the caller (the records that make them). NULL when out of
 * memory. The controller thread (`mine`: its pool lists). */
dt__bgroup *dt__bgroup_new(struct dt__pool_lists *mine, int n, const dt__backend *const *be, int refs);
/* The same where `all` is dt__backend_all(n, be), known to the caller (a run
 * of shared kernels finds it once for its images). */
dt__bgroup *dt__bgroup_new_all(struct dt__pool_lists *mine, int n, const dt__backend *const *be,
                               const dt__backend *all, int refs);
/* be[0] when every be[d] (d < n) is it, else NULL. */
const dt__backend *dt__backend_all(int n, const dt__backend *const *be);

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
