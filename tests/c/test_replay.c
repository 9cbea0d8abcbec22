/*
 * Capture and replay (src/core/controller/replay.c) end to end on the ref backend: a
 * loop body lowered once and replayed after, with the same values as with
 * replay off; a sum over a sharded dim redistributed to Replicate (an
 * all-reduce) every step on two devices, whose replayed collectives must
 * meet their peers under fresh sequence numbers; a change of scalar and of
 * shape falls back to lowering where the signature changed. The run: after
 * the round's first node (a read before cuts the run) every replayed node is
 * found through its predecessor's template (dt_debug_replay_run_hits), but
 * right after a changed node. Run under ASan and TSan too (no leaks of
 * templates or records, no races with the workers).
 */
#include <string.h>

#include "dtorch/dtorch.h"
#include "dtorch/dtorch_ops.h"
#include "dtorch/dtorch_replay.h"
#include "test_util.h"

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    /* Replay's own templates are what these tests count: device-independent
     * records (DTORCH_BCAST=1, test_bcast.c) would take the elementwise nodes. */
    CHECK(dt_graph_set_bcast(g, 0) == DT_OK);
    return g;
}

static dt_mesh *mesh1d(int n) {
    int64_t shape[1] = {n}, ids[2] = {0, 1};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m) == DT_OK);
    return m;
}

static void counters(dt_graph *g, int64_t *hits, int64_t *misses) {
    CHECK(dt_graph_get_replay_stats(g, hits, misses) == DT_OK);
}

/* One step, in one controller round: y = (x * 2 + s) - x, and the sum of y
 * over its (sharded) dim made Replicate. Returns y; *total gets the sum. */
static dt_tensor *step(dt_graph *g, dt_tensor *x, double s, dt_tensor **total) {
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *a = dt_binary_scalar(DT_BINARY_MUL, x, dt_scalar_float(2), 0);
    dt_tensor *b = dt_binary_scalar(DT_BINARY_ADD, a, dt_scalar_float(s), 0);
    dt_tensor *y = dt_binary(DT_BINARY_SUB, b, x);
    int64_t dims[1] = {0};
    dt_tensor *p = dt_sum(y, 1, dims, 0);
    dt_placement r[1] = {{DT_PLACEMENT_REPLICATE, 0}};
    *total = dt_redistribute(p, NULL, r);
    dt_tensor_release(p);
    dt_tensor_release(b);
    dt_tensor_release(a);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    return y;
}

static void run(int ndev, int n) {
    dt_graph *g = ref_graph();
    CHECK(dt_graph_set_replay(g, 1) == DT_OK); /* off by default */
    dt_mesh *m = mesh1d(ndev);
    dt_placement s0[1] = {{DT_PLACEMENT_SHARD, 0}};
    int64_t shape[1] = {n};
    float host[8];
    for (int i = 0; i < n; i++)
        host[i] = (float)(i + 1);
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, host, (size_t)n * sizeof *host, m, s0);
    CHECK(x && dt_graph_sync(g) == DT_OK);
    int64_t h0, m0, h1, m1, r0;
    for (int it = 0; it < 6; it++) {
        double s = it == 4 ? 0.5 : 1.0; /* step 4 changes the add's scalar */
        counters(g, &h0, &m0);
        r0 = dt_debug_replay_run_hits(g);
        dt_tensor *total = NULL;
        dt_tensor *y = step(g, x, s, &total);
        float got[8] = {0}, sum = 0, want_sum = 0;
        CHECK(y && dt_tensor_read(y, got, (size_t)n * sizeof *got) == DT_OK);
        for (int i = 0; i < n; i++) {
            CHECK_FEQ(got[i], host[i] + (float)s);
            want_sum += host[i] + (float)s;
        }
        CHECK(total && dt_tensor_read(total, &sum, sizeof sum) == DT_OK);
        CHECK_FEQ(sum, want_sum);
        counters(g, &h1, &m1);
        int64_t runs = dt_debug_replay_run_hits(g) - r0;
        if (it == 0) {
            CHECK_EQ(h1 - h0, 0);
            CHECK(m1 - m0 >= 4);
            CHECK_EQ(runs, 0);
        } else if (it == 4) {
            CHECK_EQ(m1 - m0, 1); /* the add; everything else replays */
            CHECK_EQ(h1 - h0, 4);
            CHECK_EQ(runs, 2); /* not the mul (first), nor the sub after the new add */
        } else if (it == 5) {
            /* Back to 1.0: the mul's template remembers both adds, so
             * the step is one run again. */
            CHECK_EQ(m1 - m0, 0);
            CHECK_EQ(h1 - h0, 5);
            CHECK_EQ(runs, 4);
        } else {
            CHECK_EQ(m1 - m0, 0);
            CHECK(h1 - h0 >= 4);
            CHECK_EQ(runs, h1 - h0 - 1);
        }
        dt_tensor_release(total);
        dt_tensor_release(y);
    }
    /* Another shape: lowered anew, right. */
    int64_t shape2[1] = {n - 2};
    dt_tensor *x2 =
        dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape2, host, (size_t)(n - 2) * sizeof *host, m, s0);
    counters(g, &h0, &m0);
    dt_tensor *total = NULL;
    dt_tensor *y = step(g, x2, 1.0, &total);
    float got[8] = {0};
    CHECK(y && dt_tensor_read(y, got, (size_t)(n - 2) * sizeof *got) == DT_OK);
    for (int i = 0; i < n - 2; i++)
        CHECK_FEQ(got[i], host[i] + 1.0f);
    counters(g, &h1, &m1);
    /* Only the redistribute of the 0-d sum has its old signature. */
    CHECK_EQ(h1 - h0, 1);
    CHECK(m1 - m0 >= 4);
    /* Off: nothing moves. */
    CHECK(dt_graph_set_replay(g, 0) == DT_OK);
    dt_tensor_release(total);
    dt_tensor_release(y);
    counters(g, &h0, &m0);
    y = step(g, x, 1.0, &total);
    CHECK(y && dt_tensor_read(y, got, (size_t)n * sizeof *got) == DT_OK);
    CHECK_FEQ(got[0], 2.0f);
    counters(g, &h1, &m1);
    CHECK_EQ(h1 - h0, 0);
    CHECK_EQ(m1 - m0, 0);
    CHECK(dt_graph_set_replay(NULL, 1) == DT_EINVAL);
    CHECK(dt_graph_get_replay_stats(g, NULL, &m1) == DT_EINVAL);
    CHECK_EQ(dt_debug_replay_run_hits(NULL), -1);
    dt_tensor_release(total);
    dt_tensor_release(y);
    dt_tensor_release(x2);
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

int main(void) {
    run(1, 6);
    run(2, 6);
    run(2, 5); /* uneven shards */
    if (failures)
        fprintf(stderr, "test_replay: %d failure(s)\n", failures);
    else
        printf("test_replay: ok\n");
    return failures ? 1 : 0;
}
