/*
 * The controller's window (src/core/controller/window.c) and its passes: the
 * bookkeeping on hand-made node records (consumers, releases, producer
 * lookups across rounds), dead-node elimination and the reuse marks, then
 * both passes end to end on the ref backend, with the controller held
 * (dt_debug_hold_controller) so that what a test records lands in one
 * window whatever the scheduling.
 */
#include <sched.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/window.h"
#include "core/records/mesh.h"
#include "core/records/node.h"
#include "dtorch/dtorch.h"
#include "test_util.h"

/* ------------------------------------------------ hand-made records */

#define NV 16
static dt__tval tv[NV];
static dt__node nd[NV];

static void make_tval(int i) {
    memset(&tv[i], 0, sizeof tv[i]);
    tv[i].id = (uint64_t)i + 1;
    tv[i].meta.dtype = DT_FLOAT32;
    tv[i].meta.ndim = 1;
    tv[i].meta.shape[0] = 4;
}

/* Node i: op over inputs `ins` (-1 ends), output tv[out] (or none, -1). */
static dt__node *make_node(int i, int op, int out, const int *ins) {
    dt__node *n = &nd[i];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->out = out >= 0 ? &tv[out] : NULL;
    for (int j = 0; ins && ins[j] >= 0; j++)
        n->in[n->n_in++] = &tv[ins[j]];
    return n;
}

static dt__node *link(int count) {
    for (int i = 0; i < count; i++)
        nd[i].next = i + 1 < count ? &nd[i + 1] : NULL;
    return &nd[0];
}

static dt__tval *release_list(const int *ids) {
    dt__tval *head = NULL;
    for (int j = 0; ids[j] >= 0; j++) {
        tv[ids[j]].next_release = head;
        head = &tv[ids[j]];
    }
    return head;
}

static void test_bookkeeping_and_dce(void) {
    for (int i = 0; i < NV; i++)
        make_tval(i);
    /* 0 SOURCE -> t0; 1 exp(t0) -> t1; 2 sin(t1) -> t2; 3 t0 * t0 -> t3;
     * 4 FETCH(t3); 5 exp(t3) -> t5; 6 gate(t3) -> t6. Dropped: t0, t1, t2,
     * t5, t6 and t9, which no node of the window makes. */
    make_node(0, DT_OP_SOURCE, 0, NULL);
    make_node(1, DT_OP_UNARY, 1, (int[]){0, -1});
    make_node(2, DT_OP_UNARY, 2, (int[]){1, -1});
    make_node(3, DT_OP_EW_BINARY, 3, (int[]){0, 0, -1});
    make_node(4, DT_OP_FETCH, -1, (int[]){3, -1});
    make_node(5, DT_OP_UNARY, 5, (int[]){3, -1});
    make_node(6, DT_OP_DEBUG_GATE, 6, (int[]){3, -1});
    dt__window w = {0};
    CHECK_EQ(dt__window_fill(&w, link(7), release_list((int[]){0, 1, 2, 5, 6, 9, -1})), DT_OK);
    CHECK_EQ(w.n, 7);
    const int cons[7] = {3, 1, 0, 3, 0, 0, 0};
    for (int i = 0; i < 7 && i < w.n; i++) {
        CHECK(w.nodes[i] == &nd[i]);
        CHECK_EQ(w.consumers[i], cons[i]);
        int released = i == 0 || i == 1 || i == 2 || i == 5 || i == 6;
        CHECK_EQ((w.flags[i] & DT__WS_RELEASED) != 0, released);
    }
    CHECK_EQ(dt__window_producer(&w, &tv[3]), 3);
    CHECK_EQ(dt__window_producer(&w, &tv[9]), -1);
    CHECK(nd[6].next == NULL && nd[0].next == &nd[1]); /* the batch's links are left alone */

    CHECK_EQ(dt__pass_dce(&w), DT_OK);
    /* The chain t1 -> t2 dies whole, and exp(t3); the source, the read and
     * the gate stay, as does t0 * t0 (read by the fetch). */
    const int dead[7] = {0, 1, 1, 0, 0, 1, 0};
    for (int i = 0; i < 7 && i < w.n; i++)
        CHECK_EQ((w.flags[i] & DT__WS_DEAD) != 0, dead[i]);
    CHECK_EQ(w.eliminated, 3);
    CHECK_EQ(w.consumers[0], 2); /* exp(t0) no longer reads t0 */
    CHECK_EQ(w.consumers[3], 2); /* nor exp(t3) t3 */

    /* The reuse mark (per node, taken when the controller lowers one):
     * elementwise ops whose in[0] has the result's layout; sources, reads
     * and gates get none. */
    const int reuse[7] = {0, 1, 1, 1, 0, 1, 0};
    for (int i = 0; i < 7 && i < w.n; i++)
        CHECK_EQ(dt__reuse_mark(w.nodes[i]), reuse[i]);

    /* A cast to a narrower type cannot take its input's buffer. */
    make_tval(0);
    make_tval(1);
    tv[1].meta.dtype = DT_FLOAT16;
    make_node(0, DT_OP_CAST, 1, (int[]){0, -1});
    CHECK_EQ(dt__window_fill(&w, link(1), NULL), DT_OK);
    CHECK_EQ(dt__window_run_passes(&w), DT_OK);
    CHECK_EQ(w.flags[0] & DT__WS_DEAD, 0);
    CHECK_EQ(dt__reuse_mark(w.nodes[0]), 0);
    tv[1].meta.dtype = DT_INT32; /* one element size: it may */
    CHECK_EQ(dt__reuse_mark(w.nodes[0]), 1);
    tv[1].meta.shape[0] = 5; /* another shape: it may not */
    CHECK_EQ(dt__reuse_mark(w.nodes[0]), 0);
    dt__window_free(&w);
}

/* A round bigger than the arrays grows them; a later round does not see
 * the earlier one's producers. */
static void test_rounds(void) {
    enum { N = 3000 };
    static dt__tval big_tv[N];
    static dt__node big_nd[N];
    dt__tval *rel = NULL;
    for (int i = 0; i < N; i++) {
        memset(&big_tv[i], 0, sizeof big_tv[i]);
        big_tv[i].meta.dtype = DT_FLOAT32;
        memset(&big_nd[i], 0, sizeof big_nd[i]);
        big_nd[i].op = DT_OP_UNARY;
        big_nd[i].out = &big_tv[i];
        if (i) {
            big_nd[i].in[0] = &big_tv[i - 1];
            big_nd[i].n_in = 1;
        }
        big_nd[i].next = i + 1 < N ? &big_nd[i + 1] : NULL;
        big_tv[i].next_release = rel;
        rel = &big_tv[i];
    }
    big_nd[0].op = DT_OP_FULL;
    dt__window w = {0};
    CHECK_EQ(dt__window_fill(&w, &big_nd[0], rel), DT_OK);
    CHECK_EQ(w.n, N);
    CHECK(w.cap >= N);
    CHECK_EQ(dt__window_run_passes(&w), DT_OK);
    CHECK_EQ(w.eliminated, N); /* a chain of N dropped values dies in one walk */
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < NV; i++)
            make_tval(i);
        make_node(0, DT_OP_UNARY, 0, (int[]){-1});
        CHECK_EQ(dt__window_fill(&w, link(1), NULL), DT_OK);
        CHECK_EQ(w.n, 1);
        CHECK_EQ(dt__window_producer(&w, &big_tv[N - 1]), -1);
        CHECK_EQ(dt__window_producer(&w, &tv[0]), 0);
        CHECK_EQ(dt__window_run_passes(&w), DT_OK);
        CHECK_EQ(w.eliminated, 0); /* not dropped: kept */
    }
    dt__window_free(&w);
}

/* ------------------------------------------------------ end to end */

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static dt_mesh *mesh1d(int n) {
    int64_t shape[1] = {n}, ids[4] = {0, 1, 2, 3};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m) == DT_OK);
    return m;
}

static dt_graph_stats stats(dt_graph *g) {
    dt_graph_stats s;
    memset(&s, 0, sizeof s);
    CHECK(dt_graph_get_stats(g, &s, 0) == DT_OK);
    return s;
}

static void check_values(dt_tensor *t, int n, float want) {
    float got[8] = {0};
    CHECK(t && dt_tensor_read(t, got, (size_t)n * sizeof *got) == DT_OK);
    for (int i = 0; i < n; i++)
        CHECK_FEQ(got[i], want);
}

static void test_dce_end_to_end(int ndev) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(ndev);
    int64_t shape[1] = {4};
    dt_placement s0[1] = {S(0)};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), m, ndev > 1 ? s0 : NULL);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_graph_stats before = stats(g);

    /* Dropped unread inside one window: y and z are never lowered; w is. */
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *y = dt_neg(x);
    dt_tensor *z = dt_binary_scalar(DT_BINARY_MUL, y, dt_scalar_float(3), 0);
    dt_tensor *w = dt_binary_scalar(DT_BINARY_ADD, x, dt_scalar_float(1), 0);
    dt_tensor_release(z);
    dt_tensor_release(y);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    check_values(w, 4, 3.0f);
    dt_graph_stats after = stats(g);
    CHECK_EQ(after.nodes_eliminated - before.nodes_eliminated, 2);

    /* A dead chain inside a loop, next to a live one. */
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *acc = dt_binary_scalar(DT_BINARY_MUL, x, dt_scalar_float(1), 0);
    for (int i = 0; i < 50; i++) {
        dt_tensor *a = dt_neg(acc);
        dt_tensor *b = dt_binary_scalar(DT_BINARY_MUL, a, dt_scalar_float(2), 0);
        dt_tensor_release(b);
        dt_tensor_release(a);
        dt_tensor *next = dt_binary_scalar(DT_BINARY_ADD, acc, dt_scalar_float(1), 0);
        dt_tensor_release(acc);
        acc = next;
    }
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    check_values(acc, 4, 52.0f);
    dt_graph_stats end = stats(g);
    CHECK_EQ(end.nodes_eliminated - after.nodes_eliminated, 100);
    /* Flow control stays balanced: every node taken left the backlog. A
     * sync returns when each stream has reached its sync kernel, and a worker
     * retires that kernel just after, so the count reaches 0 a moment later;
     * the loop is a hang guard, not a time bound. */
    CHECK(dt_graph_sync(g) == DT_OK);
    int64_t left = stats(g).in_flight;
    for (int i = 0; i < 100000 && left != 0; i++) {
        sched_yield();
        left = stats(g).in_flight;
    }
    CHECK_EQ(left, 0);

    dt_tensor_release(acc);
    dt_tensor_release(w);
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* Reuse on the ref backend: in one window the intermediates are dropped
 * before any kernel runs, so every step after the first writes in place;
 * a value the client keeps is never written over. */
static void test_reuse_end_to_end(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(1);
    int64_t shape[1] = {4};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), m, NULL);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_graph_stats before = stats(g);
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *t = dt_binary_scalar(DT_BINARY_MUL, x, dt_scalar_float(3), 0); /* x is kept: not in place */
    dt_tensor *kept = NULL;
    for (int i = 0; i < 6; i++) {
        dt_tensor *n = i % 2 ? dt_neg(t) : dt_binary_scalar(DT_BINARY_ADD, t, dt_scalar_float(1), 0);
        if (i == 2)
            kept = t; /* the client keeps this one: its buffer must survive */
        else
            dt_tensor_release(t);
        t = n;
    }
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    /* 6 -> 7 -> -7 -> -6 -> 6 -> 7 -> -7 */
    check_values(t, 4, -7.0f);
    check_values(kept, 4, -7.0f);
    check_values(x, 4, 2.0f);
    dt_graph_stats after = stats(g);
    /* Six steps; the one reading `kept` cannot, the others do. */
    CHECK_EQ(after.kernels_in_place - before.kernels_in_place, 5);
    dt_tensor_release(kept);
    dt_tensor_release(t);
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* A graph shut down while its controller is held does not hang. */
static void test_shutdown_while_held(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(1);
    int64_t shape[1] = {4};
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), m, NULL);
    dt_tensor *y = dt_neg(x);
    dt_tensor_release(x);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_tensor_release(y);
    dt_mesh_release(m);
    dt_graph_release(g);
    CHECK(dt_debug_hold_controller(NULL, 1) == DT_EINVAL);
}

int main(void) {
    test_bookkeeping_and_dce();
    test_rounds();
    test_dce_end_to_end(1);
    test_dce_end_to_end(2);
    test_reuse_end_to_end();
    test_shutdown_while_held();
    if (failures)
        fprintf(stderr, "test_window: %d failure(s)\n", failures);
    else
        printf("test_window: ok\n");
    return failures ? 1 : 0;
}
