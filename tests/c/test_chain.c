/*
 * The window's chain pass (src/core/controller/passes/chain.c) and the DT_K_CHAIN
 * kernel (src/ops/elementwise_chain.c, src/core/worker/chain_run.c, the ref
 * backend's run_chain): the pass's marks
 * on hand-made records, then chains end to end on the ref backend (whose
 * blocks are 1024 elements, so these sizes cross several block
 * boundaries) against values computed here element by element, with the
 * pass on and off, on one and two devices, a chain whose intermediate is
 * read, and a kernel error inside a chain. The blocks each chain ran on
 * are counted (dt_debug_chain_blocks).
 */
#include <stdlib.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/window.h"
#include "core/records/graph_int.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "dtorch/dtorch.h"
#include "test_util.h"

/* ------------------------------------------------ hand-made records */

#define NV 8
#define BIG 10000

static dt__tval tv[NV];
static dt__node nd[NV];

static void make_tval(int i, dt_mesh *m) {
    memset(&tv[i], 0, sizeof tv[i]);
    tv[i].id = (uint64_t)i + 1;
    tv[i].meta.dtype = DT_FLOAT32;
    tv[i].meta.ndim = 1;
    tv[i].meta.shape[0] = BIG;
    tv[i].meta.mesh = m;
}

static dt__node *make_node(int i, int op, int sub, int out, const int *ins) {
    dt__node *n = &nd[i];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->a.sub = sub;
    n->a.scalar2 = dt_scalar_int(1);
    n->out = out >= 0 ? &tv[out] : NULL;
    for (int j = 0; ins && ins[j] >= 0; j++)
        n->in[n->n_in++] = &tv[ins[j]];
    return n;
}

static void test_pass_marks(void) {
    int64_t shape[1] = {1}, ids[1] = {0};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m) == DT_OK);
    for (int i = 0; i < NV; i++)
        make_tval(i, m);
    /* t0, t6 outside; 0 neg(t0) -> t1; 1 t1 * t6 -> t2; 2 t2 + t2 -> t3;
     * 3 neg(t3) -> t4 (t3 also read by 4: the chain stops at t3);
     * 4 t3 - t4 -> t5. Released: t1, t2, t3, t4. */
    make_node(0, DT_OP_UNARY, DT_UNARY_NEG, 1, (int[]){0, -1});
    make_node(1, DT_OP_EW_BINARY, DT_BINARY_MUL, 2, (int[]){1, 6, -1});
    make_node(2, DT_OP_EW_BINARY, DT_BINARY_ADD, 3, (int[]){2, 2, -1});
    make_node(3, DT_OP_UNARY, DT_UNARY_NEG, 4, (int[]){3, -1});
    make_node(4, DT_OP_EW_BINARY, DT_BINARY_SUB, 5, (int[]){3, 4, -1});
    for (int i = 0; i < 5; i++)
        nd[i].next = i + 1 < 5 ? &nd[i + 1] : NULL;
    tv[1].next_release = &tv[2];
    tv[2].next_release = &tv[3];
    tv[3].next_release = &tv[4];
    tv[4].next_release = NULL;
    dt__window w = {0};
    w.chains = 1;
    CHECK(dt__window_fill(&w, &nd[0], &tv[1]) == DT_OK);
    CHECK(dt__pass_dce(&w) == DT_OK);
    CHECK(dt__pass_chain(&w) == DT_OK);
    /* Chains: {0, 1, 2} (t3 has two readers, so 3 cannot extend it) and
     * {3, 4}: 4 reads t4 only there, t3 from outside. */
    CHECK(w.flags[0] & DT__WS_FUSED);
    CHECK(w.flags[1] & DT__WS_FUSED);
    CHECK(!(w.flags[2] & DT__WS_FUSED));
    CHECK(w.flags[3] & DT__WS_FUSED);
    CHECK(!(w.flags[4] & DT__WS_FUSED));
    CHECK_EQ(w.fused, 5);
    dt__node *c1 = w.nodes[2], *c2 = w.nodes[4];
    CHECK_EQ(c1->op, DT_OP_CHAIN);
    CHECK_EQ(c1->a.ints[0], 3);
    CHECK_EQ(c1->n_in, 2);
    CHECK(c1->in[0] == &tv[0] && c1->in[1] == &tv[6]);
    CHECK(c1->out == &tv[3]);
    dt__node **s1 = c1->extra;
    CHECK(s1[0] == &nd[0] && s1[1] == &nd[1] && s1[2] == &nd[2]);
    CHECK_EQ(c2->op, DT_OP_CHAIN);
    CHECK_EQ(c2->a.ints[0], 2);
    CHECK_EQ(c2->n_in, 1);
    CHECK(c2->in[0] == &tv[3]);
    dt__node_free(c1);
    dt__node_free(c2);

    /* Off: nothing marked. A tensor below DT__CHAIN_MIN_NUMEL: nothing. */
    w.chains = 0;
    CHECK(dt__window_fill(&w, &nd[0], &tv[1]) == DT_OK);
    CHECK(dt__pass_chain(&w) == DT_OK);
    CHECK_EQ(w.fused, 0);
    CHECK(w.nodes[2] == &nd[2]);
    w.chains = 1;
    for (int i = 0; i < NV; i++)
        tv[i].meta.shape[0] = DT__CHAIN_MIN_NUMEL - 1;
    CHECK(dt__window_fill(&w, &nd[0], &tv[1]) == DT_OK);
    CHECK(dt__pass_chain(&w) == DT_OK);
    CHECK_EQ(w.fused, 0);
    dt__window_free(&w);
    dt_mesh_release(m);
}

/* ------------------------------------------------------ end to end */

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    CHECK(dt_graph_set_chains(g, 1) == DT_OK); /* off by default */
    return g;
}

static dt_mesh *mesh1d(int n) {
    int64_t shape[1] = {n}, ids[2] = {0, 1};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m) == DT_OK);
    return m;
}

static int64_t fused(dt_graph *g) {
    dt_graph_stats s;
    memset(&s, 0, sizeof s);
    CHECK(dt_graph_get_stats(g, &s, 0) == DT_OK);
    return s.nodes_fused;
}

/* ((-x) * 3 + x) / 4 - y, x = arange(n), y = 0.5 * arange(n), each step
 * computed here in float32 as the ref kernels do. */
static float want_at(int64_t i) {
    float x = (float)i, y = (float)i * 0.5f;
    float a = -x;
    float b = a * 3.0f;
    float c = b + x;
    float d = c / 4.0f;
    return d - y;
}

static dt_tensor *chain(dt_tensor *x, dt_tensor *y, dt_tensor **keep) {
    dt_tensor *a = dt_neg(x);
    dt_tensor *b = dt_binary_scalar(DT_BINARY_MUL, a, dt_scalar_float(3), 0);
    dt_tensor *c = dt_binary(DT_BINARY_ADD, b, x);
    dt_tensor *d = dt_binary_scalar(DT_BINARY_DIV, c, dt_scalar_float(4), 0);
    dt_tensor *e = dt_binary(DT_BINARY_SUB, d, y);
    dt_tensor_release(a);
    if (keep)
        *keep = b; /* read by the caller: the chain must break there */
    else
        dt_tensor_release(b);
    dt_tensor_release(c);
    dt_tensor_release(d);
    return e;
}

static void check_chain(int ndev, int64_t n, int on, int keep_mid) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(ndev);
    dt_placement s0[1] = {S(0)}, r[1] = {R()};
    const dt_placement *pl = ndev > 1 ? s0 : r;
    CHECK(dt_graph_set_chains(g, on) == DT_OK);
    dt_tensor *x = dt_arange(g, DT_FLOAT32, 0, (double)n, 1, m, pl);
    dt_tensor *y0 = dt_arange(g, DT_FLOAT32, 0, (double)n, 1, m, pl);
    dt_tensor *y = dt_binary_scalar(DT_BINARY_MUL, y0, dt_scalar_float(0.5), 0);
    CHECK(dt_graph_sync(g) == DT_OK);
    int64_t before = fused(g), blocks = dt_debug_chain_blocks(g);
    dt_tensor *mid = NULL;
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *e = chain(x, y, keep_mid ? &mid : NULL);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    float *got = calloc((size_t)n, sizeof *got);
    CHECK(got && dt_tensor_read(e, got, (size_t)n * sizeof *got) == DT_OK);
    int bad = 0;
    for (int64_t i = 0; got && i < n; i++)
        bad += got[i] != want_at(i);
    CHECK_EQ(bad, 0);
    if (mid) {
        CHECK(dt_tensor_read(mid, got, (size_t)n * sizeof *got) == DT_OK);
        bad = 0;
        for (int64_t i = 0; got && i < n; i++)
            bad += got[i] != -(float)i * 3.0f;
        CHECK_EQ(bad, 0);
        dt_tensor_release(mid);
    }
    /* On: one chain of all five nodes, or of the two before and the three
     * after the value that is read; off: none. */
    CHECK_EQ(fused(g) - before, on ? 5 : 0);
    /* Each chain kernel ran on ceil(piece / 1024) blocks on each device
     * (the ref backend's block size), the pieces as torch.chunk cuts them. */
    int64_t per_chain = 0, piece = (n + ndev - 1) / ndev;
    for (int64_t off = 0; off < n; off += piece)
        per_chain += ((n - off < piece ? n - off : piece) + 1023) / 1024;
    CHECK_EQ(dt_debug_chain_blocks(g) - blocks, on ? (keep_mid ? 2 : 1) * per_chain : 0);
    free(got);
    dt_tensor_release(e);
    dt_tensor_release(y);
    dt_tensor_release(y0);
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* A step the ref backend cannot run (exp) fails inside the chain: the
 * error names that step's op, not the chain's last one. */
static void test_error_names_the_step(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(1);
    dt_tensor *x = dt_arange(g, DT_FLOAT32, 0, 9000, 1, m, NULL);
    CHECK(dt_graph_sync(g) == DT_OK);
    int64_t before = fused(g);
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *a = dt_neg(x);
    dt_tensor *b = dt_unary(DT_UNARY_EXP, a);
    dt_tensor *c = dt_binary_scalar(DT_BINARY_MUL, b, dt_scalar_float(2), 0);
    dt_tensor_release(a);
    dt_tensor_release(b);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    float one;
    CHECK(dt_tensor_read(c, &one, sizeof one) != DT_OK);
    CHECK(strstr(dt_last_error(), "exp failed on cpu:0") != NULL);
    CHECK(strstr(dt_last_error(), "unary kernel") != NULL);
    CHECK_EQ(fused(g) - before, 3);
    dt_tensor_release(c);
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

int main(void) {
    test_pass_marks();
    for (int ndev = 1; ndev <= 2; ndev++) {
        check_chain(ndev, 10007, 1, 0);
        check_chain(ndev, 10007, 0, 0);
        check_chain(ndev, 2 * 1024 * 5, 1, 0); /* a whole number of blocks */
        check_chain(ndev, 10007, 1, 1);
    }
    test_error_names_the_step();
    if (failures)
        fprintf(stderr, "test_chain: %d failure(s)\n", failures);
    else
        printf("test_chain: ok\n");
    return failures ? 1 : 0;
}
