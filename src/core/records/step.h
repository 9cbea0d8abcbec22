/*
 * A run of device-independent kernels (docs/decisions.md, "One message per
 * mesh per run"): consecutive nodes that would each be one shared record
 * (core/records/bcast.h) on the same mesh, lowered into one record holding
 * K kernel images, with ONE slot per device linked into that device's
 * stream queue when the run is closed (core/controller/lower_step.c).
 *
 * Each image names its blobs by group (core/records/bgroup.h): input j is
 * member d of group gin[j], the output member d of gout, so the controller
 * writes nothing per device for a kernel. Its events are by (run, number)
 * (docs/decisions.md, "Events by run and number"): the output group names
 * the run's event bases (`ev`: device d's stream and the number of the
 * kernel before the run's first there) and its index, so kernel i of the
 * run is number base[d] + i + 1 on device d's stream, as K records would
 * have been numbered; the streams' counts advance by K when the run
 * closes. A worker that reaches its
 * slot instantiates the K kernels in order, each as a shared record's slot
 * would be (core/worker/kernel_run.c): its own op name, call site,
 * attributes, in-place test and event. The last slot run (or dropped)
 * drops the groups the images hold and frees the record.
 *
 * Each image starts with a dt__bcast header whose `gin` and `img` are the
 * image's, so the code that instantiates a shared record's slot (the
 * in-place test, the release of borrowed inputs) reads an image the same
 * way; its `left` and `n` are unused.
 *
 * Memory: one allocation, [dt__step][n slots][n streams][cap images].
 * Threads: filled by the controller while the run is open (nothing of it
 * is visible to a worker before the close links the slots and the round's
 * flush hands them over), then read by the workers; `left` is the only
 * field written after the hand-over.
 */
#ifndef DT_CORE_STEP_H
#define DT_CORE_STEP_H

#include "core/records/bcast.h"

/* Images per run at most: the run is closed when it is full. */
#define DT__STEP_MAX 32

typedef struct dt__step_img {
    dt__bcast bc;     /* gin[] and img (the kernel, no blobs) */
    dt__bgroup *gout; /* the output's group (held by its value) */
    /* Input j's entry in the run's holds (dt__step.held). */
    uint8_t hold[DT_MAX_OP_INPUTS];
} dt__step_img;

/* A group the run holds once for the images that read it: `uses` image
 * inputs name it through this entry. A group may have more than one entry
 * (it is looked for among the last few only); each entry is one hold. */
typedef struct dt__step_held {
    dt__bgroup *gr;
    int uses;
} dt__step_held;
#define DT__STEP_HELD (DT__STEP_MAX * DT_MAX_OP_INPUTS)
_Static_assert(DT__STEP_HELD <= 256, "an image's hold index is a byte");

/* An image's stride: its header, then its kernel with the most attributes. */
#define DT__STEP_IMG_HDR ((sizeof(dt__step_img) + DT_CACHE_LINE - 1) / DT_CACHE_LINE * DT_CACHE_LINE)
#define DT__STEP_IMG_STRIDE                                                                                  \
    ((DT__STEP_IMG_HDR + sizeof(dt__krec) + DT__KATTR_PACK_MAX + DT_CACHE_LINE - 1) / DT_CACHE_LINE *        \
     DT_CACHE_LINE)

struct dt__stream;
struct dt_mesh;

typedef struct dt__step {
    atomic_int left;            /* slots not yet run or dropped */
    int n;                      /* slots: the mesh's devices */
    int k;                      /* images so far */
    const struct dt_mesh *mesh; /* controller only */
    dt__runev *ev;              /* controller only: the event bases (ss: device d's stream) */
    struct dt__stream **ss;     /* controller only: ev->ss */
    const dt__backend **be;     /* controller only: ss[d]'s backend */
    const dt__backend *be_all;  /* controller only: dt__backend_all(n, be) */
    uint8_t *imgs;              /* image 0 */
    int nheld;                  /* entries of held */
    dt__step_held *held;        /* the groups the run holds (after the images) */
    /* Where the last slot leaves the allocation for a next run (the
     * graph's DT__STEP_SPARES step_spare entries), in the first that is
     * empty; NULL, or none empty: freed. */
    _Atomic(struct dt__step *) *spare;
    struct dt__step_memo *memo; /* controller only: its scratch (dt__step_memo) */
} dt__step;

#define DT__STEP_HDR ((size_t)2 * DT_CACHE_LINE)
_Static_assert(sizeof(dt__step) <= DT__STEP_HDR, "dt__step header");
/* Where the images start: after the slots and backends. */
#define DT__STEP_IMGS(n)                                                                                     \
    ((DT__STEP_HDR + (size_t)(n) * (DT__BCAST_SLOT + sizeof(void *)) + DT_CACHE_LINE - 1) / DT_CACHE_LINE *  \
     DT_CACHE_LINE)
#define DT__STEP_HELD_AT(n) (DT__STEP_IMGS(n) + (size_t)DT__STEP_MAX * DT__STEP_IMG_STRIDE)
/* The controller's scratch: after the holds, on lines of its own. */
#define DT__STEP_MEMO_AT(n)                                                                                  \
    ((DT__STEP_HELD_AT(n) + (size_t)DT__STEP_HELD * sizeof(dt__step_held) + DT_CACHE_LINE - 1) /             \
     DT_CACHE_LINE * DT_CACHE_LINE)
#define DT__STEP_BYTES(n) (DT__STEP_MEMO_AT(n) + sizeof(dt__step_memo))

/* Where a group's entry in the run's holds is looked up: a small table
 * indexed by a hash of the group's address (dt__step_hold_slot). */
#define DT__STEP_HOLD_HASH 64
_Static_assert(DT__STEP_HELD < 255, "0xff marks no entry");

/* The controller's scratch in a run's allocation, never read by a worker,
 * kept with the allocation when the next run reuses it (the graph's
 * step_spare), since nothing in it names this run:
 * - the attributes last packed for an image, and their packed bytes: a
 *   kernel whose dt__kattr has the same bytes (a loop of one op) copies
 *   them instead of packing (pack reads nothing but the dt__kattr's bytes:
 *   equal bytes pack equal; `len` 0: none yet);
 * - the hold table: hix[h] is the entry of `held` last added for a group
 *   whose address hashes to h; an index is trusted only when below the
 *   run's nheld and that entry names the group (so stale ones from an
 *   earlier run, or a collision, only cost a new entry: one more hold). */
typedef struct dt__step_memo {
    dt__kattr a;
    uint32_t len;
    uint8_t hix[DT__STEP_HOLD_HASH];
    uint8_t bytes[DT__KATTR_PACK_MAX];
} dt__step_memo;

/* Group gr's place in a run's hold table: a multiplicative hash of its
 * address (groups are pooled records a power of two apart, so the low bits
 * alone would collide). */
static inline unsigned dt__step_hold_slot(const void *gr) {
    return (unsigned)(((uint64_t)(uintptr_t)gr >> 6) * 0x9e3779b97f4a7c15ull >> 58);
}
_Static_assert(DT__STEP_HOLD_HASH == 64, "dt__step_hold_slot keeps the top 6 bits");

/* Slot d of st. */
static inline dt__krec *dt__step_slot(dt__step *st, int d) {
    return (dt__krec *)((uint8_t *)st + DT__STEP_HDR + (size_t)d * DT__BCAST_SLOT);
}

/* Image i of st. */
static inline dt__step_img *dt__step_img_at(const dt__step *st, int i) {
    return (dt__step_img *)(st->imgs + (size_t)i * DT__STEP_IMG_STRIDE);
}

/* The device index of slot k of st. */
static inline int dt__step_slot_index(const dt__step *st, const dt__krec *k) {
    return (int)(((const uint8_t *)k - ((const uint8_t *)st + DT__STEP_HDR)) / DT__BCAST_SLOT);
}

/* Whether image im's input j is the only one of the run that reads its
 * group through the run's hold (as a record of its own per kernel would
 * hold it alone): only then may its kernel take the member over. */
static inline int dt__step_sole_use(const dt__step *st, const dt__step_img *im, int j) {
    return st->held[im->hold[j]].uses == 1;
}

/* One slot is done with st (run, dropped, or never queued): the last drops
 * the groups it holds and frees it. Any thread. */
static inline void dt__step_unref(dt__step *st) {
    if (atomic_fetch_sub_explicit(&st->left, 1, memory_order_acq_rel) != 1)
        return;
    for (int i = 0; i < st->nheld; i++)
        dt__bgroup_release(st->held[i].gr);
    for (int i = 0; st->spare && i < DT__STEP_SPARES; i++) {
        dt__step *none = NULL;
        if (!atomic_load_explicit(&st->spare[i], memory_order_relaxed) &&
            atomic_compare_exchange_strong_explicit(&st->spare[i], &none, st, memory_order_release,
                                                    memory_order_relaxed))
            return;
    }
    dt__free(st);
}

#endif /* DT_CORE_STEP_H */
