/*
 * Blobs (blob.c): one dense local tensor on one device, reference
 * counted, with the event that says when it exists and its memory charge.
 * The layout is shared by the controller (which makes blobs and names them),
 * the workers (which produce and read them) and the comm; the rules for who
 * writes which field are on the struct. dt__blob_new/retain/release run on
 * any thread; a new output is charged to its device by the producing
 * worker (core/worker/kernel_run.c).
 */
#ifndef DT_CORE_BLOB_H
#define DT_CORE_BLOB_H

#include "core/core.h"

/* One local tensor on one device (its impl may be a strided view of
 * another blob's storage). Reference counted: the tensor's per-device slot,
 * every kernel that reads or writes it and every view of it (`base`) hold
 * one.
 *
 * Its event is (producer, seq): the blob exists once kernel number `seq` of
 * stream `producer` has completed (events.c). Both are written by the
 * controller when it queues the producing kernel, before any consumer is
 * queued, then only read. */
struct dt__blob {
    atomic_int refs;
    void *impl;            /* backend value; NULL until produced or when poisoned */
    char *error;           /* non-NULL: the kernel that produced it failed (owned) */
    const dt__backend *be; /* the backend that made it (its device type's) */
    /* NULL: made by the controller itself (a source), ready at once. */
    struct dt__stream *producer;
    uint64_t seq;
    /* The backend's event recorded after the producing kernel (backends
     * with event slots only; NULL otherwise). Written by the producing
     * worker before it publishes its completed count; freed with the blob. */
    void *bev;
    /* Memory accounting: bytes charged to `mem` while the impl lives; 0
     * when uncounted or handed to a kernel that wrote in place. Written by
     * the producing worker, read by whoever frees. */
    int64_t charged;
    dt__memdev *mem;
    /* The input whose storage this blob's impl shares (a view, made by a
     * kernel that did not write in place), held so that the storage stays
     * charged, once, to that input for as long as any blob sees it: a view
     * itself is charged 0. Written by the producing worker before it
     * publishes the kernel, released with the blob. */
    struct dt__blob *base;
    /* The blob's name in kernels and their encoding (kernel_codec.c): unique
     * within its graph, given by the controller when a kernel first names
     * the blob (dt__lw_push_on), 0 until then. Controller-written. */
    uint64_t id;
    /* Held by worker node remote - 1 as id `id` of graph tag `rtag` (0:
     * not): its release tells the node (core/controller/remote.h). Controller-written
     * (at the flush that ships it), read by the last releaser. */
    int32_t remote;
    uint32_t rtag;
    /* Controller-only, once the last reference is gone: the next blob its
     * producer's worker frees (dt__blob_release_ctl). */
    struct dt__blob *next_dead;
    /* The group whose allocation holds this blob (core/records/bgroup.h),
     * NULL for a blob of its own. Set when made, then only read. */
    struct dt__bgroup *grp;
};

dt__blob *dt__blob_new(const dt__backend *be);
/* The same with the calling thread's pool lists (common/pool.h; NULL:
 * looked up); inline, after the pool's declaration below. */
static inline dt__blob *dt__blob_new_in(struct dt__pool_lists *mine, const dt__backend *be);
static inline dt__blob *dt__blob_retain(dt__blob *b) {
    if (b)
        atomic_fetch_add_explicit(&b->refs, 1, memory_order_relaxed);
    return b;
}
void dt__blob_release(dt__blob *b);
/* The same with the calling thread's pool lists (common/pool.h; NULL:
 * looked up), for a thread that holds them (the controller's release loop). */
void dt__blob_release_in(dt__blob *b, struct dt__pool_lists *mine);
/* Frees a blob whose last reference the caller has just dropped (and
 * what it held). Any thread. */
void dt__blob_free_last(dt__blob *b, struct dt__pool_lists *mine);
/* Frees a dead list (a DT_KC_RELEASE kernel's handle). Any thread. */
void dt__blob_free_dead(dt__blob *b);

/* The blob record pool (common/pool.h): made on one thread, freed on another. */
extern dt__pool dt__blob_pool;

static inline dt__blob *dt__blob_new_in(struct dt__pool_lists *mine, const dt__backend *be) {
    dt__blob *b = dt__pool_alloc_in(&dt__blob_pool, mine, 0);
    if (!b)
        return NULL;
    memset(b, 0, sizeof *b); /* a constant size: inline stores */
    atomic_init(&b->refs, 1);
    b->be = be;
    return b;
}

#endif /* DT_CORE_BLOB_H */
