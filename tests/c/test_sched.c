/*
 * The schedule (src/core/controller/sched.c): the order it hands a window's slots out
 * in, on hand-made node records (a worked example, the bound, barriers and
 * never-lowered slots, and random windows checked for the invariants: every
 * slot once, producers first, barriers in place, nothing further ahead than
 * DT__SCHED_AHEAD), then end to end on the ref backend: two chains of
 * all-reduces written one after the other, held in one window, give the
 * host's values with the schedule on and off, and only "on" reorders.
 */
#include <stdlib.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/sched.h"
#include "core/controller/window.h"
#include "core/records/node.h"
#include "dtorch/dtorch.h"
#include "dtorch/dtorch_schedule.h"
#include "test_util.h"

/* ------------------------------------------------ hand-made records */

#define NV 600
static dt__tval tv[NV];
static dt__node nd[NV];

static void reset(int count) {
    for (int i = 0; i < count; i++) {
        memset(&tv[i], 0, sizeof tv[i]);
        tv[i].id = (uint64_t)i + 1;
        memset(&nd[i], 0, sizeof nd[i]);
        nd[i].op = DT_OP_UNARY;
        nd[i].out = &tv[i];
        nd[i].next = i + 1 < count ? &nd[i + 1] : NULL;
    }
}

/* Node i reads the outputs of nodes `ins` (-1 ends). */
static void reads(int i, const int *ins) {
    for (int j = 0; ins[j] >= 0; j++)
        nd[i].in[nd[i].n_in++] = &tv[ins[j]];
}

/* Runs the schedule over w, with slot s's output on a communication stream
 * when comm[s]; order[] gets the slots as handed out. Returns how many. */
static int run(dt__sched *S, dt__window *w, int on, const uint8_t *comm, int *order) {
    int k = 0;
    dt__sched_begin(S, w, on);
    for (int i; (i = dt__sched_next(S, w)) >= 0;) {
        CHECK(k < w->n);
        if (k >= w->n)
            break;
        order[k++] = i;
        /* As the controller: a slot never lowered queues nothing. */
        dt__sched_done(S, w, i, comm[i] && !(w->flags[i] & (DT__WS_DEAD | DT__WS_FUSED)));
    }
    return k;
}

static int is_barrier(int op) {
    return op == DT_OP_FETCH || op == DT_OP_SYNC || op == DT_OP_DEBUG_GATE || op == DT_OP_STOP;
}

/* The invariants of any schedule of w. */
static void check_valid(const dt__window *w, const int *order, int k) {
    static int pos[NV], oldest_at[NV];
    CHECK_EQ(k, w->n);
    for (int i = 0; i < w->n; i++)
        pos[i] = -1;
    for (int t = 0; t < k; t++) {
        CHECK_EQ(pos[order[t]], -1); /* once */
        pos[order[t]] = t;
    }
    /* oldest_at[t]: the oldest slot not handed out before step t. */
    int oldest = 0;
    for (int t = 0; t < k; t++) {
        oldest_at[t] = oldest;
        while (oldest < w->n && pos[oldest] >= 0 && pos[oldest] <= t)
            oldest++;
    }
    for (int t = 0; t < k; t++) {
        int s = order[t];
        CHECK(s < oldest_at[t] + DT__SCHED_AHEAD);
        for (int j = 0; j < w->nodes[s]->n_in; j++) {
            int p = dt__window_producer(w, w->nodes[s]->in[j]);
            if (p >= 0 && !(w->flags[p] & (DT__WS_DEAD | DT__WS_FUSED)) &&
                !(w->flags[s] & (DT__WS_DEAD | DT__WS_FUSED)))
                CHECK(pos[p] < t); /* producers first */
        }
        if (is_barrier(w->nodes[s]->op)) {
            CHECK_EQ(oldest_at[t], s); /* everything before it first */
            CHECK_EQ(t, s);            /* and nothing after it */
        }
    }
}

/* Two micro-batches written one after the other, each layer a compute node
 * and an all-reduce, then a read:
 *   A: 0 src, 1 c(0), 2 ar(1), 3 c(2), 4 ar(3), 5 c(4)
 *   B: 6 src, 7 c(6), 8 ar(7), 9 c(8)
 *   10 FETCH(5), 11 c(9) */
static void test_worked_example(void) {
    reset(12);
    reads(1, (int[]){0, -1});
    reads(2, (int[]){1, -1});
    reads(3, (int[]){2, -1});
    reads(4, (int[]){3, -1});
    reads(5, (int[]){4, -1});
    reads(7, (int[]){6, -1});
    reads(8, (int[]){7, -1});
    reads(9, (int[]){8, -1});
    reads(11, (int[]){9, -1});
    nd[0].op = nd[6].op = DT_OP_SOURCE;
    nd[2].op = nd[4].op = nd[8].op = DT_OP_REDISTRIBUTE;
    nd[10].op = DT_OP_FETCH;
    nd[10].out = NULL;
    reads(10, (int[]){5, -1});
    uint8_t comm[12] = {0};
    comm[2] = comm[4] = comm[8] = 1;
    dt__window w = {0};
    dt__sched S = {0};
    int order[12];
    CHECK_EQ(dt__window_fill(&w, &nd[0], NULL), DT_OK);
    /* B's compute and all-reduce go ahead of A's layer 2, which reads A's
     * first all-reduce; B's layer 2 ahead of A's layer 3; the read and
     * what follows it in place. */
    const int want[12] = {0, 1, 2, 6, 7, 8, 3, 4, 9, 5, 10, 11};
    CHECK_EQ(run(&S, &w, 1, comm, order), 12);
    for (int t = 0; t < 12; t++)
        CHECK_EQ(order[t], want[t]);
    CHECK_EQ(S.reordered, 4); /* 6, 7, 8 ahead of 3; 9 ahead of 5 */
    check_valid(&w, order, 12);
    /* Off, or with no collective: program order. */
    CHECK_EQ(run(&S, &w, 0, comm, order), 12);
    for (int t = 0; t < 12; t++)
        CHECK_EQ(order[t], t);
    CHECK_EQ(S.reordered, 0);
    uint8_t none[12] = {0};
    CHECK_EQ(run(&S, &w, 1, none, order), 12);
    for (int t = 0; t < 12; t++)
        CHECK_EQ(order[t], t);
    /* Slots never lowered take no part in the order's constraints, and are
     * handed out all the same (the controller frees their records). */
    w.flags[3] |= DT__WS_DEAD;
    w.flags[7] |= DT__WS_FUSED;
    CHECK_EQ(run(&S, &w, 1, comm, order), 12);
    check_valid(&w, order, 12);
    dt__sched_free(&S);
    dt__window_free(&w);
}

/* One all-reduce, its reader, and 500 independent nodes after it: the
 * reader waits no more than DT__SCHED_AHEAD slots (the reach). */
static void test_bound(void) {
    int n = 503;
    reset(n);
    reads(1, (int[]){0, -1});
    reads(2, (int[]){1, -1});
    static uint8_t comm[NV];
    memset(comm, 0, sizeof comm);
    comm[1] = 1;
    dt__window w = {0};
    dt__sched S = {0};
    static int order[NV];
    CHECK_EQ(dt__window_fill(&w, &nd[0], NULL), DT_OK);
    CHECK_EQ(run(&S, &w, 1, comm, order), n);
    check_valid(&w, order, n);
    int at = -1;
    for (int t = 0; t < n; t++)
        if (order[t] == 2)
            at = t;
    /* Slots 3 .. 2 + AHEAD - 1 go first, then the reader. */
    CHECK_EQ(at, 2 + DT__SCHED_AHEAD - 1);
    CHECK_EQ(S.reordered, DT__SCHED_AHEAD - 1);
    dt__sched_free(&S);
    dt__window_free(&w);
}

/* Random windows: random readers among earlier slots, random collectives
 * and barriers, some slots never lowered; every schedule keeps the
 * invariants. */
static void test_random(void) {
    srand(7);
    dt__window w = {0};
    dt__sched S = {0};
    static int order[NV];
    static uint8_t comm[NV];
    for (int round = 0; round < 200; round++) {
        int n = 1 + rand() % (round < 150 ? 40 : NV);
        reset(n);
        for (int i = 0; i < n; i++) {
            int r = rand() % 100;
            nd[i].op = r < 3 ? DT_OP_FETCH : r < 5 ? DT_OP_SYNC : r < 20 ? DT_OP_REDISTRIBUTE : DT_OP_UNARY;
            int k = i ? rand() % 4 : 0;
            for (int j = 0; j < k; j++)
                nd[i].in[nd[i].n_in++] = &tv[i - 1 - rand() % (i < 8 ? i : 8)];
            comm[i] = nd[i].op == DT_OP_REDISTRIBUTE && rand() % 4;
        }
        CHECK_EQ(dt__window_fill(&w, &nd[0], NULL), DT_OK);
        for (int i = 0; i < n; i++)
            if (!is_barrier(nd[i].op) && rand() % 20 == 0)
                w.flags[i] |= rand() % 2 ? DT__WS_DEAD : DT__WS_FUSED;
        CHECK_EQ(run(&S, &w, 1, comm, order), n);
        check_valid(&w, order, n);
    }
    dt__sched_free(&S);
    dt__window_free(&w);
}

/* The reference order (sched.h), written from the definition with no
 * shortcut: program order; after a slot c handed out in program order with
 * comm[c], the slots c+1 .. c+AHEAD (before the first barrier) not yet
 * handed out, lowered, and not depending on c through in-window producers
 * (the closure, recomputed from scratch) are handed out next in slot
 * order, each dropped when it depends on a hoisted slot before it with
 * comm set. Returns the count reordered (handed out while an older slot
 * was not). */
/* dep[s] = 1 when slot s depends on slot c (the closure over in-window
 * producers that are lowered; c itself included). */
static void ref_depends(const dt__window *w, int c, uint8_t *dep) {
    memset(dep, 0, (size_t)w->n);
    dep[c] = 1;
    for (int s = c + 1; s < w->n; s++) {
        if (w->flags[s] & (DT__WS_DEAD | DT__WS_FUSED))
            continue;
        for (int j = 0; j < w->nodes[s]->n_in; j++) {
            int p = dt__window_producer(w, w->nodes[s]->in[j]);
            if (p >= c && !(w->flags[p] & (DT__WS_DEAD | DT__WS_FUSED)) && dep[p])
                dep[s] = 1;
        }
    }
}

static long ref_order(const dt__window *w, const uint8_t *comm, int *order) {
    static uint8_t out[NV];
    int n = w->n, k = 0;
    long reordered = 0;
    memset(out, 0, sizeof out);
    for (int next = 0; next < n; next++) {
        if (out[next])
            continue;
        out[next] = 1;
        order[k++] = next;
        if (!comm[next] || (w->flags[next] & (DT__WS_DEAD | DT__WS_FUSED)))
            continue;
        static uint8_t dep[NV], dropped[NV];
        int c = next, hoisted[DT__SCHED_AHEAD], nh = 0;
        ref_depends(w, c, dep);
        for (int s = c + 1; s < n && s <= c + DT__SCHED_AHEAD && !is_barrier(w->nodes[s]->op); s++)
            if (!out[s] && !(w->flags[s] & (DT__WS_DEAD | DT__WS_FUSED)) && !dep[s])
                hoisted[nh++] = s;
        memset(dropped, 0, sizeof dropped);
        for (int i = 0; i < nh; i++) {
            int s = hoisted[i];
            if (dropped[s])
                continue;
            if (comm[s]) { /* what depends on it leaves the hoist */
                ref_depends(w, s, dep);
                for (int t = s + 1; t < n; t++)
                    dropped[t] |= dep[t];
            }
            int oldest = 0;
            while (out[oldest])
                oldest++;
            reordered += s != oldest;
            out[s] = 1;
            order[k++] = s;
        }
    }
    return reordered;
}

/* The question asked at a collective output (sched.h): on random windows
 * of chains (every slot reads the one before it, with probability 7 in 8,
 * plus earlier ones), the order is the reference's (ref_order), slot for
 * slot, with the same count reordered; and a window where every slot after
 * each collective output reads it, directly or not, never hoists. */
static void test_question(void) {
    srand(11);
    dt__window w = {0};
    dt__sched S = {0};
    static int order[NV], want[NV];
    static uint8_t comm[NV];
    int stayed = 0, hoisted = 0;
    for (int round = 0; round < 400; round++) {
        int n = 1 + rand() % (round < 300 ? 60 : NV);
        reset(n);
        for (int i = 0; i < n; i++) {
            int r = rand() % 100;
            nd[i].op = r < 2 ? DT_OP_FETCH : r < 3 ? DT_OP_SYNC : r < 20 ? DT_OP_REDISTRIBUTE : DT_OP_UNARY;
            if (i && rand() % 8)
                nd[i].in[nd[i].n_in++] = &tv[i - 1];
            int k = i ? rand() % 3 : 0;
            for (int j = 0; j < k; j++)
                nd[i].in[nd[i].n_in++] = &tv[i - 1 - rand() % (i < 8 ? i : 8)];
            comm[i] = nd[i].op == DT_OP_REDISTRIBUTE && rand() % 4;
        }
        CHECK_EQ(dt__window_fill(&w, &nd[0], NULL), DT_OK);
        for (int i = 0; i < n; i++)
            if (!is_barrier(nd[i].op) && rand() % 60 == 0)
                w.flags[i] |= rand() % 2 ? DT__WS_DEAD : DT__WS_FUSED;
        long reordered = ref_order(&w, comm, want);
        CHECK_EQ(run(&S, &w, 1, comm, order), n);
        check_valid(&w, order, n);
        for (int t = 0; t < n; t++)
            CHECK_EQ(order[t], want[t]);
        CHECK_EQ(S.reordered, reordered);
        stayed += S.hoisted_max < 0;
        hoisted += S.hoisted_max >= 0;
    }
    CHECK(stayed > 50 && hoisted > 50); /* both ways taken */
    /* A decode step: one chain through its all-reduces. */
    int n = 40;
    reset(n);
    memset(comm, 0, sizeof comm);
    for (int i = 1; i < n; i++) {
        nd[i].in[nd[i].n_in++] = &tv[i - 1];
        if (i % 5 == 0) {
            nd[i].op = DT_OP_REDISTRIBUTE;
            comm[i] = 1;
        }
    }
    nd[12].in[nd[12].n_in++] = &tv[3]; /* a residual: still after the all-reduce at 10 */
    CHECK_EQ(dt__window_fill(&w, &nd[0], NULL), DT_OK);
    CHECK_EQ(run(&S, &w, 1, comm, order), n);
    CHECK_EQ(S.hoisted_max, -1); /* nothing hoisted */
    CHECK_EQ(S.reordered, 0);
    for (int t = 0; t < n; t++)
        CHECK_EQ(order[t], t);
    /* The last slot reads only slot 3: it goes right after the first
     * all-reduce, ahead of everything that waits for it. */
    nd[n - 1].in[0] = &tv[3];
    CHECK_EQ(dt__window_fill(&w, &nd[0], NULL), DT_OK);
    CHECK_EQ(run(&S, &w, 1, comm, order), n);
    CHECK_EQ(S.hoisted_max, n - 1);
    CHECK_EQ(order[6], n - 1);
    CHECK_EQ(S.reordered, 1);
    dt__sched_free(&S);
    dt__window_free(&w);
}

/* ------------------------------------------------------ end to end */

#define LAYERS 3
#define NEL 8

/* x -> LAYERS x (R -> P, * 2, all-reduce, + 1) for two micro-batches, one
 * after the other, in one held window; returns the nodes reordered. */
static long run_chains(dt_graph *g, int ndev, int schedule) {
    int64_t shape[1] = {NEL}, ids[4] = {0, 1, 2, 3}, mshape[1] = {ndev};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &m) == DT_OK);
    dt_placement r = R(), p = P();
    CHECK_EQ(dt_graph_set_schedule(g, schedule), DT_OK);
    dt_tensor *x[2];
    for (int b = 0; b < 2; b++)
        x[b] = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(b + 1), m, &r);
    CHECK_EQ(dt_graph_sync(g), DT_OK);
    int64_t before = dt_debug_nodes_reordered(g);
    CHECK_EQ(dt_debug_hold_controller(g, 1), DT_OK);
    for (int b = 0; b < 2; b++)
        for (int l = 0; l < LAYERS; l++) {
            dt_tensor *pp = dt_redistribute(x[b], NULL, &p);
            dt_tensor *two = dt_binary_scalar(DT_BINARY_MUL, pp, dt_scalar_float(2), 0);
            dt_tensor *ar = dt_redistribute(two, NULL, &r);
            dt_tensor *next = dt_binary_scalar(DT_BINARY_ADD, ar, dt_scalar_float(1), 0);
            dt_tensor *all[] = {x[b], pp, two, ar};
            for (int i = 0; i < 4; i++)
                dt_tensor_release(all[i]);
            x[b] = next;
        }
    CHECK_EQ(dt_debug_hold_controller(g, 0), DT_OK);
    for (int b = 0; b < 2; b++) {
        float want = (float)(b + 1), got[NEL] = {0};
        for (int l = 0; l < LAYERS; l++)
            want = want * 2 + 1;
        CHECK(dt_tensor_read(x[b], got, sizeof got) == DT_OK);
        for (int i = 0; i < NEL; i++)
            CHECK_FEQ(got[i], want);
        dt_tensor_release(x[b]);
    }
    dt_mesh_release(m);
    return (long)(dt_debug_nodes_reordered(g) - before);
}

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static void test_end_to_end(void) {
    dt_graph *g = ref_graph();
    for (int ndev = 2; ndev <= 4; ndev += 2) {
        CHECK(run_chains(g, ndev, 1) > 0);
        CHECK_EQ(run_chains(g, ndev, 0), 0);
    }
    dt_graph_release(g);
    /* Collectives on the compute stream: nothing to schedule around. */
    setenv("DTORCH_OVERLAP", "0", 1);
    g = ref_graph();
    unsetenv("DTORCH_OVERLAP");
    CHECK_EQ(run_chains(g, 2, 1), 0);
    dt_graph_release(g);
    CHECK_EQ(dt_graph_set_schedule(NULL, 1), DT_EINVAL);
    CHECK_EQ(dt_debug_nodes_reordered(NULL), -1);
}

int main(void) {
    test_worked_example();
    test_bound();
    test_random();
    test_question();
    test_end_to_end();
    if (failures)
        fprintf(stderr, "test_sched: %d failure(s)\n", failures);
    else
        printf("test_sched: ok\n");
    return failures ? 1 : 0;
}
