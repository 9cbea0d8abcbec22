/*
 * The schedule: which slot of a round the controller lowers next (sched.h
 * says what is reordered, the bound, and why it is safe).
 *
 * Program order until the first slot whose output comes off a
 * communication stream and that some later slot does not depend on (sched.h
 * says why asking at each such slot keeps the order); then "engage": the readers of every remaining slot
 * (edges), how many in-window producers each still waits for, and each
 * one's wave, and from there list scheduling with a binary heap on
 * (wave, slot). Slots never lowered (DT__WS_DEAD, DT__WS_FUSED) take part
 * as slots without edges: the controller frees their records in turn.
 *
 * Threads: controller only.
 */
#include <string.h>

#include "core/controller/sched.h"
#include "core/controller/window.h"
#include "core/records/node.h"

enum {
    DT__SCHED_LOWERED = 1 << 0,
    DT__SCHED_ADMITTED = 1 << 1,
    DT__SCHED_BARRIER = 1 << 2, /* barrier(), found once while engaging */
};

/* Lowered in its place (DT_OPF_BARRIER, src/ops/ops.def): reads,
 * graph-wide waits, test gates, the shutdown. */
static int barrier(const dt__node *n) { return (dt__ops[n->op].flags & DT_OPF_BARRIER) != 0; }

/* A slot that is lowered (not DEAD or FUSED), so readers wait for it. */
static int lowers(const dt__window *w, int s) { return !(w->flags[s] & (DT__WS_DEAD | DT__WS_FUSED)); }

/* ------------------------------------------------------------ the heap */

static int before(const dt__sched *S, int32_t a, int32_t b) {
    return S->wave[a] != S->wave[b] ? S->wave[a] < S->wave[b] : a < b;
}

static void heap_push(dt__sched *S, int32_t s) {
    int i = S->nheap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!before(S, s, S->heap[p]))
            break;
        S->heap[i] = S->heap[p];
        i = p;
    }
    S->heap[i] = s;
}

static int32_t heap_pop(dt__sched *S) {
    int32_t top = S->heap[0], last = S->heap[--S->nheap];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= S->nheap)
            break;
        if (c + 1 < S->nheap && before(S, S->heap[c + 1], S->heap[c]))
            c++;
        if (!before(S, S->heap[c], last))
            break;
        S->heap[i] = S->heap[c];
        i = c;
    }
    if (S->nheap)
        S->heap[i] = last;
    return top;
}

/* ------------------------------------------------------------ arrays */

static int grow(void **p, size_t n, size_t size) {
    void *q = dt__realloc(*p, n * size);
    if (!q)
        return 0;
    *p = q;
    return 1;
}

static int reserve(dt__sched *S, int n, int edges) {
    if (n > S->cap) {
        int cap = S->cap ? S->cap : 256;
        while (cap < n)
            cap *= 2;
        if (!grow((void **)&S->wait, (size_t)cap, sizeof *S->wait) ||
            !grow((void **)&S->wave, (size_t)cap, sizeof *S->wave) ||
            !grow((void **)&S->eoff, (size_t)cap + 1, sizeof *S->eoff) ||
            !grow((void **)&S->heap, (size_t)cap, sizeof *S->heap) ||
            !grow((void **)&S->st, (size_t)cap, sizeof *S->st))
            return 0;
        S->cap = cap;
    }
    if (edges > S->ecap) {
        int cap = S->ecap ? S->ecap : 1024;
        while (cap < edges)
            cap *= 2;
        if (!grow((void **)&S->edges, (size_t)cap, sizeof *S->edges))
            return 0;
        S->ecap = cap;
    }
    return 1;
}

/* ------------------------------------------------------------ engaging */

/* Considers the slots now within reach of the oldest unlowered one. */
static void admit(dt__sched *S, const dt__window *w) {
    int lim = S->oldest + DT__SCHED_AHEAD < w->n ? S->oldest + DT__SCHED_AHEAD : w->n;
    for (int s; !S->gate && (s = S->admitted) < lim; S->admitted++) {
        int b = S->st[s] & DT__SCHED_BARRIER;
        if (b && s != S->oldest)
            break; /* everything before it first */
        S->st[s] |= DT__SCHED_ADMITTED;
        if (S->wait[s] == 0)
            heap_push(S, s);
        S->gate = b != 0;
    }
}

/* Slot c's output came off a communication stream and every slot up to c is
 * lowered: builds the readers of slots c+1.. and switches to the heap. */
static void engage(dt__sched *S, const dt__window *w, int c) {
    int n = w->n, base = c + 1;
    int ins = 0;
    for (int s = base; s < n; s++)
        ins += w->nodes[s]->n_in;
    /* edges holds each input's producer first, then the readers lists. */
    if (!reserve(S, n, 2 * ins))
        return; /* program order for the rest of the round */
    int32_t *prod = S->edges + ins, *rd = S->edges;
    memset(S->eoff + base, 0, (size_t)(n - base + 1) * sizeof *S->eoff);
    int k = 0;
    for (int s = base; s < n; s++) {
        const dt__node *x = w->nodes[s];
        int ls = lowers(w, s);
        S->wait[s] = 0;
        S->wave[s] = 0;
        S->st[s] = barrier(x) ? DT__SCHED_BARRIER : 0;
        for (int j = 0; j < x->n_in; j++, k++) {
            int p = ls ? dt__window_producer(w, x->in[j]) : -1;
            prod[k] = -1;
            if (p == c)
                S->wave[s] = 1; /* reads the collective's result */
            else if (p >= base && lowers(w, p)) {
                prod[k] = p;
                S->eoff[p + 1]++;
                S->wait[s]++;
            }
        }
    }
    for (int s = base; s < n; s++)
        S->eoff[s + 1] += S->eoff[s];
    /* Fill each producer's list; eoff[p] runs ahead, then is restored. */
    k = 0;
    for (int s = base; s < n; s++)
        for (int j = 0; j < w->nodes[s]->n_in; j++, k++)
            if (prod[k] >= 0)
                rd[S->eoff[prod[k]]++] = s;
    for (int s = n; s > base; s--)
        S->eoff[s] = S->eoff[s - 1];
    S->eoff[base] = 0;
    S->engaged = 1;
    S->oldest = S->admitted = base;
    S->nheap = 0;
    S->gate = 0;
    admit(S, w);
}

/* ------------------------------------------------------------ the question */

/* Not engaged, slot c's output came off a communication stream and every
 * slot up to c is lowered: 1 when every slot after c depends on c through
 * in-window producers, so that the schedule may stay in program order
 * (sched.h). By induction in slot order, given that every slot in (c, s)
 * does, s does when its latest lowered in-window producer is c or later;
 * a slot never lowered has none (engaged, it would go first, with wave 0).
 * The first time in a round (c the first collective output) wait[s] gets
 * each later slot's latest producer, and then the least of these over the
 * slots from s on, so that a later collective output c2 asks
 * wait[c2 + 1] >= c2; the first slot that does not depend on c ends the
 * walk (the schedule engages: no later question). */
static int all_depend(dt__sched *S, const dt__window *w, int c) {
    int n = w->n;
    if (!S->scanned) {
        if (!reserve(S, n, 0))
            return 0; /* engage fails too: program order */
        for (int s = c + 1; s < n; s++) {
            int32_t latest = -1;
            const dt__node *x = w->nodes[s];
            for (int j = 0; j < x->n_in && lowers(w, s); j++) {
                int p = dt__window_producer(w, x->in[j]);
                if (p > latest && lowers(w, p))
                    latest = p;
            }
            if (latest < c)
                return 0;
            S->wait[s] = latest;
        }
        for (int s = n - 2; s > c; s--)
            if (S->wait[s + 1] < S->wait[s])
                S->wait[s] = S->wait[s + 1];
        S->scanned = 1;
    }
    return S->wait[c + 1] >= c;
}

/* ------------------------------------------------------------ the API */

void dt__sched_begin(dt__sched *S, const dt__window *w, int on) {
    (void)w;
    S->on = on;
    S->engaged = 0;
    S->scanned = 0;
    S->next = 0;
    S->reordered = 0;
}

int dt__sched_next_engaged(dt__sched *S, const dt__window *w) {
    if (!S->nheap) {
        DT_ASSERT(S->oldest == w->n); /* the oldest unlowered slot is always ready */
        return -1;
    }
    int s = heap_pop(S);
    if (s != S->oldest && lowers(w, s))
        S->reordered++;
    return s;
}

void dt__sched_done_slow(dt__sched *S, const dt__window *w, int slot, int comm) {
    if (!S->engaged) {
        if (comm && S->on && slot + 1 < w->n && (S->eager || !all_depend(S, w, slot)))
            engage(S, w, slot);
        return;
    }
    S->st[slot] |= DT__SCHED_LOWERED;
    int wv = S->wave[slot] + (comm != 0);
    for (int e = S->eoff[slot]; e < S->eoff[slot + 1]; e++) {
        int r = S->edges[e];
        if (S->wave[r] < wv)
            S->wave[r] = wv; /* before it can be in the heap: it waits for slot */
        if (--S->wait[r] == 0 && (S->st[r] & DT__SCHED_ADMITTED))
            heap_push(S, r);
    }
    int moved = 0;
    if (S->st[slot] & DT__SCHED_BARRIER)
        S->gate = 0, moved = 1;
    for (; S->oldest < w->n && (S->st[S->oldest] & DT__SCHED_LOWERED); S->oldest++)
        moved = 1;
    if (moved) /* else nothing new is within reach */
        admit(S, w);
}

void dt__sched_free(dt__sched *S) {
    dt__free(S->wait);
    dt__free(S->wave);
    dt__free(S->eoff);
    dt__free(S->edges);
    dt__free(S->heap);
    dt__free(S->st);
    memset(S, 0, sizeof *S);
}
