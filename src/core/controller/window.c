/*
 * The window: one round's nodes with their in-window readers and the values
 * released in the round (window.h says what a pass may rely on and do), and
 * the list of passes.
 *
 * Threads: controller only; no locks.
 */
#include <stdatomic.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/window.h"
#include "core/records/node.h"

/* ------------------------------------------------------------ passes */

/* dce first: later passes need not look at nodes that are never lowered.
 * (The reuse mark, once a pass, is taken per lowered node: dt__reuse_mark.) */
const dt__pass dt__passes[] = {
    {"dce", dt__pass_dce},
    {"chain", dt__pass_chain},
};
const int dt__npasses = (int)(sizeof dt__passes / sizeof dt__passes[0]);

/* ------------------------------------------------------------ producers */

/* Window generations, unique in the process: a value stamped by an older
 * round, or by another graph's window, never looks like this round's. */
static _Atomic uint64_t next_gen = 1;

/* Makes room for `n` slots. */
static dt_status reserve(dt__window *w, int n) {
    if (n > w->cap) {
        int cap = w->cap ? w->cap : 256;
        while (cap < n)
            cap *= 2;
        dt__node **nodes = dt__realloc(w->nodes, (size_t)cap * sizeof *nodes);
        if (!nodes)
            return DT_ENOMEM;
        w->nodes = nodes;
        dt__node **orig = dt__realloc(w->orig, (size_t)cap * sizeof *orig);
        if (!orig)
            return DT_ENOMEM;
        w->orig = orig;
        uint8_t *flags = dt__realloc(w->flags, (size_t)cap * sizeof *flags);
        if (!flags)
            return DT_ENOMEM;
        w->flags = flags;
        int32_t *cons = dt__realloc(w->consumers, (size_t)cap * sizeof *cons);
        if (!cons)
            return DT_ENOMEM;
        w->consumers = cons;
        int32_t *aux = dt__realloc(w->aux, (size_t)cap * 3 * sizeof *aux);
        if (!aux)
            return DT_ENOMEM;
        w->aux = aux;
        dt__node **steps = dt__realloc(w->steps, (size_t)cap * sizeof *steps);
        if (!steps)
            return DT_ENOMEM;
        w->steps = steps;
        w->cap = cap;
    }
    return DT_OK;
}

static void mark_released(dt__window *w, const dt__tval *list) {
    for (const dt__tval *v = list; v; v = v->next_release) {
        int s = dt__window_producer(w, v);
        if (s >= 0)
            w->flags[s] |= DT__WS_RELEASED;
    }
}

/* A value's lines (core/client/tensor.h: its meta, then the controller's
 * fields, the window's generation last), the client's writes all. */
static inline void prefetch_value(const dt__tval *v, int write) {
    for (size_t o = 0; o < sizeof *v; o += DT_CACHE_LINE)
        __builtin_prefetch((const uint8_t *)v + o, write, 3);
}

/* Asked for as soon as a node is reached, before its slot is filled: the
 * misses on its values and on the next node (each a line the client
 * wrote) overlap instead of each being waited for in turn. */
static inline void prefetch_node(const dt__node *x) {
    if (x->next)
        __builtin_prefetch(x->next, 0, 3);
    if (x->out)
        prefetch_value(x->out, 1); /* the fill writes its slot */
    for (int j = 0; j < x->n_in; j++)
        if (x->in[j])
            prefetch_value(x->in[j], 0);
}

dt_status dt__window_fill(dt__window *w, dt__node *batch, dt__tval *released) {
    w->n = 0;
    w->eliminated = 0;
    w->fused = 0;
    w->released = released;
    w->stop_released = NULL;
    w->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed);
    /* One walk of the batch, the arrays grown as it goes: a round of
     * thousands of nodes does not fit in the caches, so a walk to count
     * them first would fetch every node's line twice. */
    int i = 0;
    dt__node *last = NULL;
    for (dt__node *x = batch; x; x = x->next, i++) {
        prefetch_node(x);
        if (i == w->cap && reserve(w, i + 1) != DT_OK) {
            /* Nothing of the window is used: the stamps given so far are
             * this generation's, which no later round has. */
            w->gen = atomic_fetch_add_explicit(&next_gen, 1, memory_order_relaxed);
            return dt__error(DT_ENOMEM, "window: out of memory for more than %d nodes", i);
        }
        last = x;
        w->nodes[i] = w->orig[i] = x;
        w->flags[i] = 0;
        w->consumers[i] = 0;
        for (int j = 0; j < x->n_in; j++) {
            int s = dt__window_producer(w, x->in[j]);
            if (s >= 0)
                w->consumers[s]++;
        }
        if (x->out) {
            x->out->wgen = w->gen;
            x->out->wslot = i;
        }
    }
    w->n = i;
    mark_released(w, released);
    /* The closing round: the values dropped before the close travel on STOP. */
    if (last && last->op == DT_OP_STOP) {
        w->stop_released = last->extra;
        mark_released(w, w->stop_released);
    }
    return DT_OK;
}

dt_status dt__window_run_passes(dt__window *w) {
    for (int p = 0; p < dt__npasses; p++) {
        dt_status st = dt__passes[p].run(w);
        if (st != DT_OK)
            return st;
    }
    return DT_OK;
}

void dt__window_free(dt__window *w) {
    dt__free(w->nodes);
    dt__free(w->orig);
    dt__free(w->flags);
    dt__free(w->consumers);
    dt__free(w->aux);
    dt__free(w->steps);
    memset(w, 0, sizeof *w);
}
