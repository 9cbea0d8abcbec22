/*
 * The schedule (docs/decisions.md, "Overlap by schedule"):
 * the order in which the controller lowers one round's slots, so that a
 * collective queued on a communication stream hides behind compute that
 * does not need its result.
 *
 * Values are immutable and a node's inputs are explicit, so any order in
 * which every producer in the window comes before its readers gives the
 * same results. The schedule starts in program order and stays there (it
 * costs one check per node) until a slot's output comes off a communication
 * stream and some slot after it does not depend on it. From then on the
 * round's remaining slots are lowered by list
 * scheduling on the key (wave, slot): a slot's wave is the number of
 * collective outputs on its longest path of in-window producers since the
 * schedule engaged, so every compute node that needs no pending collective
 * result is lowered before those that do, in program order within a wave.
 *
 * Where every slot after such a slot c depends on c (through in-window
 * producers), the list schedule engaged at c would hand the slots out in
 * program order up to the next collective output c2, and from c2 on in the
 * order it would give engaged at c2 (each wave counted from c is one more
 * than from c2), so the schedule stays in program order and asks again at
 * c2: a round that is one chain through its all-reduces never engages (a
 * decode round that reaches the next forward still does: its rotary tables
 * hang on no collective, and are hoisted). The question is O(1) per collective: the round's slots after its
 * first collective output carry, once, the least over the slots after them of their latest in-window producer
 * (sched.c).
 *
 * Bounds. A slot is considered only once it is within DT__SCHED_AHEAD slots
 * of the oldest slot not yet lowered, so no node is lowered more than that
 * many slots ahead of its turn and the values it makes early are bounded in
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
    int cap;        /* slots the per-slot arrays hold */
    int ecap;       /* entries edges holds */
    int32_t *wait;  /* unlowered in-window producers of each slot */
    int32_t *wave;  /* each slot's wave */
    int32_t *eoff;  /* n + 1: slot s's readers are edges[eoff[s] .. eoff[s + 1]) */
    int32_t *edges; /* the readers, and (while engaging) each input's producer */
    int32_t *heap;  /* admitted slots whose producers are lowered, by (wave, slot) */
    uint8_t *st;    /* per slot: DT__SCHED_* */
    int on;         /* this round may reorder */
    int engaged;    /* list scheduling (after a collective output some slot does not need) */
    int scanned;    /* not engaged: wait[s], s after the first collective output, holds the
                     * least latest producer of the slots from s on (sched.c) */
    int eager;      /* test only: engage at the first collective output, asked nothing */
    int next;       /* program order: the next slot */
    int oldest;     /* engaged: the oldest slot not yet lowered */
    int admitted;   /* engaged: slots [0, admitted) have been considered */
    int nheap;
    int gate;       /* engaged: an admitted barrier is not yet lowered */
    long reordered; /* slots lowered ahead of an older one, this round */
} dt__sched;

/* Starts a round over the filled window w; `on`: the graph's setting. */
void dt__sched_begin(dt__sched *S, const dt__window *w, int on);
/* The next slot to lower, or -1 when every slot has been handed out.
 * Program order (not engaged) inline: it is every node's path. */
int dt__sched_next_engaged(dt__sched *S, const dt__window *w);
static inline int dt__sched_next(dt__sched *S, const dt__window *w) {
    if (!S->engaged)
        return S->next < w->n ? S->next++ : -1;
    return dt__sched_next_engaged(S, w);
}
/* After slot `slot` (from dt__sched_next) was lowered, or skipped: `comm`
 * says its output comes off a communication stream. Cannot fail: out of
 * memory, the rest of the round keeps program order. */
void dt__sched_done_slow(dt__sched *S, const dt__window *w, int slot, int comm);
static inline void dt__sched_done(dt__sched *S, const dt__window *w, int slot, int comm) {
    if (S->engaged || comm)
        dt__sched_done_slow(S, w, slot, comm);
}
/* Frees the arrays (S itself is the caller's). */
void dt__sched_free(dt__sched *S);

#endif /* DT_CORE_SCHED_H */
