/*
 * The window (the LogicalGraph of docs/design.md): one controller round's
 * nodes, oldest first, with who reads what inside the round and which
 * values the client dropped in it, and the passes that run over it before
 * the nodes are lowered.
 *
 * What a pass may rely on. The releases of a round are taken before its
 * nodes (executor.c), so every node that reads a released value was pushed
 * before the release and is in this window or an earlier one. A value whose
 * producer is in this window therefore has all its readers here too, and
 * when it is also released here, consumers[slot] is the whole story.
 *
 * What a pass may do. Node records are immutable (lowering functions and the
 * workers read them): a pass marks slots (flags[slot], DT__WS_*) or puts
 * another node in a slot (nodes[slot]), never edits a node's fields.
 *
 * Threads: controller only. Nothing here locks. The arrays are kept across
 * rounds and grow by doubling; a round allocates nothing once they are big
 * enough.
 */
#ifndef DT_CORE_WINDOW_H
#define DT_CORE_WINDOW_H

#include "core/client/tensor.h"
#include "core/core.h"

/* Per-slot flags. */
enum {
    DT__WS_RELEASED = 1 << 0, /* the slot's output was dropped in this round */
    DT__WS_DEAD = 1 << 1,     /* never lowered (pass dce) */
    /* A step of a chain lowered at a later slot (pass chain): not lowered
     * here, and its record is freed only at the end of the round, since the
     * chain's lowering reads it. */
    DT__WS_FUSED = 1 << 3
};

typedef struct dt__window {
    int n, cap;
    dt__node **nodes;   /* n slots, oldest first */
    dt__node **orig;    /* n: the records as taken (a pass may put another in nodes[i]) */
    uint8_t *flags;     /* n: DT__WS_* */
    int32_t *consumers; /* n: node inputs in the window that read nodes[i]->out */
    /* Values released this round (the graph's release list and, in the
     * closing round, the STOP node's); their owner frees them. */
    dt__tval *released;
    const dt__tval *stop_released;
    long eliminated; /* slots marked DT__WS_DEAD this round */
    long fused;      /* nodes put into chains this round (pass chain) */
    int chains;      /* the chain pass may run (the graph's setting, set by the controller) */
    /* Per-slot scratch for passes (3 * cap entries; contents undefined at
     * a pass's start), and the chain pass's step lists (cap entries: each
     * chain's nodes, oldest first, which its CHAIN node points into; valid
     * until the next fill). */
    int32_t *aux;
    dt__node **steps;
    /* This round's generation: a value made in the window carries it with
     * its slot (dt__tval.wgen, wslot); older rounds' stamps are stale, so a
     * round clears nothing. */
    uint64_t gen;
} dt__window;

/* A pass: marks or substitutes slots. Returns DT_OK or an error, after which
 * the window is lowered as the passes before it left it. */
typedef struct dt__pass {
    const char *name;
    dt_status (*run)(dt__window *w);
} dt__pass;

/* The passes, in the order they run (window.c). */
extern const dt__pass dt__passes[];
extern const int dt__npasses;

/* Each pass (src/core/controller/passes/<name>.c). */
dt_status dt__pass_dce(dt__window *w);
/* Whether node n's kernels may write into in[0]'s buffer (the reuse mark,
 * src/core/controller/passes/reuse.c): taken by the controller for each node it lowers
 * after the passes ran, not a pass. */
int dt__reuse_mark(const dt__node *n);
dt_status dt__pass_chain(dt__window *w);
/* The chain pass fuses tensors of at least this many elements (globally):
 * below it the unfused kernels' fast paths for tiny operands win. */
#define DT__CHAIN_MIN_NUMEL 8192

/* Fills w with a batch (linked oldest first through ->next, which is left as
 * it is) and the values released in the same round. DT_ENOMEM when the
 * arrays cannot grow: w->n is then 0 and the batch is to be lowered as is. */
dt_status dt__window_fill(dt__window *w, dt__node *batch, dt__tval *released);
/* The slot whose node produces v in this window, or -1. */
static inline int dt__window_producer(const dt__window *w, const dt__tval *v) {
    return v && v->wgen == w->gen ? v->wslot : -1;
}
/* Runs dt__passes over w in order; stops at the first that fails. */
dt_status dt__window_run_passes(dt__window *w);
/* Frees the arrays (w itself is the caller's). */
void dt__window_free(dt__window *w);

#endif /* DT_CORE_WINDOW_H */
