/*
 * The schedule: which slot of a round the controller lowers next (sched.h
 * says what is hoisted, the bound, and why it is safe).
 *
 * Program order, with a question at each slot lowered in program order
 * whose output comes off a communication stream: does some slot within
 * reach not depend on it? If so, those slots are the hoist (hq), handed out
 * next. Slots never lowered (DT__WS_DEAD, DT__WS_FUSED) are neither
 * hoisted nor waited for: they keep their turn in program order (the
 * controller frees their records then).
 *
 * Threads: controller only.
 */
#include <stdint.h>
#include <string.h>

#include "core/controller/sched.h"
#include "core/controller/window.h"
#include "core/records/node.h"

/* lp's marks (sched.h). */
#define LP_NEVER INT32_MAX   /* never lowered: depends on everything, hoisted never */
#define LP_BARRIER INT32_MIN /* a barrier: the reach ends there */

/* Lowered in its place (DT_OPF_BARRIER, src/ops/ops.def): reads,
 * graph-wide waits, test gates, the shutdown. */
static int barrier(const dt__node *n) { return (dt__ops[n->op].flags & DT_OPF_BARRIER) != 0; }

/* A slot that is lowered (not DEAD or FUSED), so readers wait for it. */
static int lowers(const dt__window *w, int s) { return !(w->flags[s] & (DT__WS_DEAD | DT__WS_FUSED)); }

/* ------------------------------------------------------------ arrays */

static int grow(void **p, size_t n, size_t size) {
    void *q = dt__realloc(*p, n * size);
    if (!q)
        return 0;
    *p = q;
    return 1;
}

static int reserve(dt__sched *S, int n) {
    if (n <= S->cap)
        return 1;
    int cap = S->cap ? S->cap : 256;
    while (cap < n)
        cap *= 2;
    if (!grow((void **)&S->lp, (size_t)cap, sizeof *S->lp) ||
        !grow((void **)&S->mark, (size_t)cap, sizeof *S->mark) ||
        !grow((void **)&S->dep, (size_t)cap, sizeof *S->dep))
        return 0;
    /* The stamps of slots new to the arrays match no generation. */
    memset(S->mark + S->cap, 0, (size_t)(cap - S->cap) * sizeof *S->mark);
    memset(S->dep + S->cap, 0, (size_t)(cap - S->cap) * sizeof *S->dep);
    S->cap = cap;
    return 1;
}

/* The next value of a stamp counter; when it wraps, the stamps it names
 * are cleared so that none matches by age. */
static uint32_t next_stamp(uint32_t *ctr, uint32_t *stamps, int cap) {
    if (++*ctr == 0) {
        memset(stamps, 0, (size_t)cap * sizeof *stamps);
        *ctr = 1;
    }
    return *ctr;
}

/* ------------------------------------------------------------ the question */

/* Fills lp for the slots in (c, lim) (those up to c are lowered: their
 * node records are freed). */
static void latest_producers(dt__sched *S, const dt__window *w, int c, int lim) {
    if (S->lp_n <= c)
        S->lp_n = c + 1;
    for (int s; (s = S->lp_n) < lim; S->lp_n++) {
        const dt__node *x = w->nodes[s];
        int32_t latest = -1;
        if (barrier(x))
            latest = LP_BARRIER;
        else if (!lowers(w, s))
            latest = LP_NEVER;
        else
            for (int j = 0; j < x->n_in; j++) {
                int p = dt__window_producer(w, x->in[j]);
                if (p > latest && lowers(w, p))
                    latest = p;
            }
        S->lp[s] = latest;
    }
}

/* Slot c (lowered in program order) has its output on a communication
 * stream: fills the hoist with the slots within reach that do not depend
 * on it. */
static void ask(dt__sched *S, const dt__window *w, int c) {
    int lim = c + 1 + DT__SCHED_AHEAD < w->n ? c + 1 + DT__SCHED_AHEAD : w->n;
    latest_producers(S, w, c, lim);
    /* While each slot not yet lowered reads, as its latest producer, c or
     * a slot after c not yet lowered, it depends on c (by induction in slot
     * order: that producer does). A producer never lowered is not counted;
     * a slot after c that an earlier hoist lowered before c depends on
     * nothing here, so a slot reading it is asked the long way. Stop at a
     * barrier. */
    int s = c + 1;
    for (; s < lim; s++) {
        int32_t p = S->lp[s];
        if (S->mark[s] == S->gen || p == LP_NEVER)
            continue;
        if (p < c || (p > c && S->mark[p] == S->gen))
            break;
    }
    if (s == lim || S->lp[s] == LP_BARRIER)
        return;
    /* From the first slot that may not depend on c, the dependence is
     * propagated through its producers; the slots before it do. */
    uint32_t q = next_stamp(&S->qid, S->dep, S->cap);
    S->dep[c] = q;
    for (int t = c + 1; t < s; t++)
        if (S->mark[t] != S->gen && S->lp[t] != LP_NEVER)
            S->dep[t] = q;
    S->hq_i = S->hq_n = 0;
    for (; s < lim && S->lp[s] != LP_BARRIER; s++) {
        if (S->lp[s] == LP_NEVER || S->mark[s] == S->gen)
            continue;
        /* Its latest producer first: in a chain it decides. */
        int32_t lp = S->lp[s];
        int d = lp >= c && S->dep[lp] == q;
        const dt__node *x = w->nodes[s];
        for (int j = 0; j < x->n_in && !d; j++) {
            int p = dt__window_producer(w, x->in[j]);
            d = p >= c && S->dep[p] == q;
        }
        if (d)
            S->dep[s] = q;
        else
            S->hq[S->hq_n++] = s;
    }
    if (S->hq_n) {
        S->engaged = 1;
        if (S->hq[S->hq_n - 1] > S->hoisted_max)
            S->hoisted_max = S->hq[S->hq_n - 1];
    }
}

/* Hoisted slot h's output came off a communication stream: the slots of
 * the hoist after it that depend on it leave the hoist. Only through the
 * hoist's own slots: any other slot of the reach depends on the slot that
 * was asked about, and so does whatever reads it. */
static void drop_readers(dt__sched *S, const dt__window *w, int h) {
    uint32_t q = next_stamp(&S->qid, S->dep, S->cap);
    S->dep[h] = q;
    for (int k = S->hq_i; k < S->hq_n; k++) {
        int s = S->hq[k];
        if (s < 0)
            continue;
        const dt__node *x = w->nodes[s];
        for (int j = 0; j < x->n_in; j++) {
            int p = dt__window_producer(w, x->in[j]);
            if (p >= h && S->dep[p] == q) {
                S->dep[s] = q;
                S->hq[k] = -1;
                break;
            }
        }
    }
}

/* ------------------------------------------------------------ the API */

void dt__sched_begin(dt__sched *S, const dt__window *w, int on) {
    S->engaged = 0;
    S->next = 0;
    S->reordered = 0;
    S->lp_n = 0;
    S->hq_i = S->hq_n = 0;
    S->hoisted_max = -1;
    /* Out of memory: program order for the round. */
    S->on = on && reserve(S, w->n);
    if (S->on)
        next_stamp(&S->gen, S->mark, S->cap);
}

int dt__sched_next_engaged(dt__sched *S, const dt__window *w) {
    /* The first slot not handed out, so far. */
    while (S->next < w->n && S->mark[S->next] == S->gen)
        S->next++;
    while (S->hq_i < S->hq_n) {
        int s = S->hq[S->hq_i++];
        if (s < 0)
            continue; /* left the hoist: program order */
        S->mark[s] = S->gen;
        if (s != S->next)
            S->reordered++;
        return s;
    }
    /* Past every hoisted slot: the inline path again. */
    if (S->next > S->hoisted_max)
        S->engaged = 0;
    return S->next < w->n ? S->next++ : -1;
}

void dt__sched_done_slow(dt__sched *S, const dt__window *w, int slot) {
    if (S->hq_i > 0 && S->hq[S->hq_i - 1] == slot)
        drop_readers(S, w, slot);
    else if (slot + 1 < w->n)
        ask(S, w, slot);
}

void dt__sched_free(dt__sched *S) {
    dt__free(S->lp);
    dt__free(S->mark);
    dt__free(S->dep);
    memset(S, 0, sizeof *S);
}
