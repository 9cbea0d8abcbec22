/*
 * The schedule (docs/decisions.md, "Overlap by schedule"):
 * the order in which the controller lowers one round's slots, so that a
 * collective queued on a communication stream hides behind compute that
 * does not need its result.
 *
 * Values are immutable and a node's inputs are explicit, so any order in
 * which every producer in the window comes before its readers gives the
 * same results. The schedule is program order (one check per node) but
 * for hoisting: when a slot c lowered in program order has its output come
 * off a communication stream, the slots within reach after it (c + 1 ..
 * c + DT__SCHED_AHEAD, up to the first barrier) that do not depend on c
 * through in-window producers are lowered next, in program order, ahead of
 * everything that waits for c's result; then program order resumes, each
 * hoisted slot skipped at its turn. A hoisted slot whose own output comes
 * off a communication stream takes the hoisted slots after it that depend
 * on it out of the hoist (they wait for it as c's readers wait for c, and
 * come in program order, or in the hoist of a later collective output).
 * Two micro-batches written one after the other come out interleaved as a
 * programmer would write them (docs/decisions.md, "The schedule hoists
 * within reach").
 *
 * Cost. Asking is O(reach) loads of one int per slot: each slot's latest
 * in-window producer (`lp`, found once per slot per round) is compared with
 * c, and by induction in slot order every slot depends on c while that
 * producer is c or a later slot not yet lowered; from the first slot where
 * it is not, the dependence is propagated slot by slot over the rest of the
 * reach, which builds the hoist.
 * Nothing is kept per slot between collective outputs, so a long round
 * costs per slot what a short one does (the list schedule this replaces
 * built reader lists and a heap over the rest of the round).
 *
 * Bounds. A hoisted slot is at most DT__SCHED_AHEAD slots after the oldest
 * slot not yet lowered (c + 1), so no node is lowered more than that many
 * slots ahead of its turn and the values it makes early are bounded in
 * number. Barriers (FETCH, SYNC, DEBUG_GATE and STOP: reads, graph-wide
 * waits, test gates and the shutdown) are lowered in their place:
 * everything before them first, nothing after them before them.
 *
 * Streams. One controller appends every rank's kernels of a collective at
 * once (dt__lw_collective), so every rank sees collectives in the order the
 * schedule lowers them, and every wait on any stream points at a kernel
 * appended before it: whatever the order, no stream can wait for one queued
 * after it.
 *
 * Threads: controller only. Nothing here locks. The arrays are kept across
 * rounds and grow by doubling; a round with no collective touches none.
 */
#ifndef DT_CORE_SCHED_H
#define DT_CORE_SCHED_H

#include "core/controller/window.h"

/* How far ahead of the oldest slot not yet lowered a slot may be lowered. */
#define DT__SCHED_AHEAD 128

typedef struct dt__sched {
    int cap;                     /* slots the per-slot arrays hold */
    int32_t *lp;                 /* per slot: its latest in-window producer that lowers (-1: none),
                                  * INT32_MAX for a slot never lowered, INT32_MIN for a barrier */
    uint32_t *mark;              /* per slot: == gen once handed out of program order this round */
    uint32_t *dep;               /* per slot: == qid while it depends on the slot being asked about */
    int32_t hq[DT__SCHED_AHEAD]; /* the hoist: slots to hand out next (-1: taken out) */
    int hq_i, hq_n;
    uint32_t gen, qid;
    int on;          /* this round may reorder */
    int engaged;     /* a hoist is being handed out, or program order has hoisted slots
                      * ahead to skip (marked) */
    int hoisted_max; /* the last slot hoisted this round (-1: none) */
    int lp_n;        /* lp holds the slots not yet lowered before lp_n */
    int next;        /* program order: the next slot not handed out */
    long reordered;  /* slots lowered ahead of an older one, this round */
} dt__sched;

/* Starts a round over the filled window w; `on`: the graph's setting. */
void dt__sched_begin(dt__sched *S, const dt__window *w, int on);
/* The next slot to lower, or -1 when every slot has been handed out.
 * Program order (nothing hoisted) inline: it is every node's path. */
int dt__sched_next_engaged(dt__sched *S, const dt__window *w);
static inline int dt__sched_next(dt__sched *S, const dt__window *w) {
    if (!S->engaged)
        return S->next < w->n ? S->next++ : -1;
    return dt__sched_next_engaged(S, w);
}
/* After slot `slot` (from dt__sched_next) was lowered, or skipped: `comm`
 * says its output comes off a communication stream. Cannot fail: out of
 * memory, the rest of the round keeps program order. */
void dt__sched_done_slow(dt__sched *S, const dt__window *w, int slot);
static inline void dt__sched_done(dt__sched *S, const dt__window *w, int slot, int comm) {
    if (comm && S->on)
        dt__sched_done_slow(S, w, slot);
}
/* Frees the arrays (S itself is the caller's). */
void dt__sched_free(dt__sched *S);

#endif /* DT_CORE_SCHED_H */
