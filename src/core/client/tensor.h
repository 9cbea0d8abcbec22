/*
 * Values and symbols (tensor.c): the controller's record of a value
 * (dt__tval: metadata plus its per-device blobs) and the client's symbol
 * (struct dt_tensor) that shares one record with it, and the client-side
 * helpers every op uses to make a symbol and submit its node. Any module may
 * include it. dt__tensor_new, dt__client_submit and dt__next_random_seed run
 * on client threads; the tval free functions on the controller (see each).
 */
#ifndef DT_CORE_TENSOR_H
#define DT_CORE_TENSOR_H

#include "core/records/meta.h"

/* The controller's record of a tensor symbol: metadata plus its blobs. */
struct dt__tval {
    /* The controller's fields first, in one line (with the symbol record's
     * recovery fields before them, tensor.c): a released value's link, its
     * window slot and its blobs are what the controller touches of a value
     * it frees or finds in the window, so that costs one line the client
     * wrote, not three. */
    struct dt__tval *next_release; /* link in the graph's release stack */
    /* Controller-only, for the window (core/controller/window.c): the generation of
     * the round whose window holds this value's producer, and its slot. */
    uint64_t wgen;
    int32_t wslot;
    dt__blob **blobs; /* controller-only; one per mesh device once lowered */
    /* Controller-only: when set, `blobs` is this group's member array and
     * the value holds the group once (core/records/bgroup.h), not each blob. */
    struct dt__bgroup *grp;
    uint64_t id;
    /* Controller-only, for replay (core/controller/replay.c): the meta class of this
     * value's layout, a name for one string of signature words that a
     * template has seen this meta as; 0: none known. Lets a replay skip
     * comparing the layout of a value it has compared before. */
    uint64_t mcls;
    /* Controller-only: storage blobs may point at for a mesh of at most
     * DT__TVAL_INLINE devices (replay.c's replays use it; the free skips it). */
    dt__blob *inl[2];
    dt__meta meta;
};
#define DT__TVAL_INLINE 2

/* Frees a tval and drops its blob references (controller, or any thread once
 * the controller is gone). */
void dt__tval_free(dt__tval *v);
/* The controller's form, for each value of a release list (linked by
 * next_release), in one loop: the mesh references are dropped later, in a
 * batch (dt__graph_flush_releases), so the mesh's count does not move
 * between the client's core and the controller's on every op. */
void dt__tval_free_list_deferred(struct dt_graph *g, dt__tval *list);
void dt__graph_flush_releases(struct dt_graph *g);

/* The client's symbol. */
struct dt_tensor {
    uint32_t magic; /* DT__TENSOR_LIVE */
    atomic_int refs;
    dt_graph *graph; /* owned reference */
    dt__tval *v;
};

static inline int dt__tensor_ok(const dt_tensor *t) { return t && t->magic == DT__TENSOR_LIVE; }

/* Makes a new symbol on `g` with metadata `m` (takes a mesh reference). */
dt_tensor *dt__tensor_new(dt_graph *g, const dt__meta *m);
/* Submits `n` whose out is t->v: on failure frees n and t and returns NULL. */
dt_tensor *dt__client_submit(dt_tensor *t, dt__node *n);

/* Random stream: (seed, call counter) mixed into one generator seed. */
uint64_t dt__next_random_seed(void);

/* The value record pool (common/pool.h): made on one thread, freed on another. */
extern dt__pool dt__tval_pool;

#endif /* DT_CORE_TENSOR_H */
