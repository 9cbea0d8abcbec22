/*
 * Remote streams in one process (core/controller/remote.h): a main node and a worker
 * node thread (dt_node_run) over loopback, with the 'ref' backend, so the
 * sanitizer builds see the batch, the node's sub-controller, the reads,
 * the releases and a kernel error crossing the connection. A mesh of the
 * worker node's two devices runs elementwise ops, a reduction to Partial
 * and its all-reduce, an all-gather; every value read is compared with the
 * values computed here from the inputs. Process-level behaviour (a node
 * killed, torch's results) is tests/python/test_cluster.py's.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "dtorch/dtorch_cluster.h"
#include "test_node.h"
#include "test_util.h"

#define ROWS 4
#define COLS 6

/* Waits (bounded) until the node has reported every kernel shipped run:
 * nothing of g left in its backlog, none counted on nodes. */
static void check_drained(dt_graph *g) {
    dt_cluster_counters c = {0};
    dt_graph_stats st = {0};
    for (int i = 0; i < 10000; i++) {
        dt_cluster_counters_get(&c);
        CHECK_EQ(dt_graph_get_stats(g, &st, 0), DT_OK);
        if (c.kernels_on_nodes == 0 && st.in_flight == 0)
            return;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    fprintf(stderr, "not drained: %lld kernels on nodes, %lld in flight\n", (long long)c.kernels_on_nodes,
            (long long)st.in_flight);
    failures++;
}

static void run_programs(dt_mesh *mesh) {
    dt_graph_options go = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK_EQ(dt_graph_create(&go, &g), DT_OK);
    if (!g)
        return;
    float x[ROWS * COLS], got[ROWS * COLS], want[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        x[i] = (float)(i % 5) - 2.0f;
    int64_t shape[2] = {ROWS, COLS}, d0 = 0;
    dt_placement s0 = S(0), r = R();
    for (int round = 0; round < 3; round++) { /* later rounds reuse what the node holds */
        dt_cluster_counters c0, c1;
        dt_cluster_counters_get(&c0);
        dt_tensor *t = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, mesh, &s0);
        dt_tensor *sq = dt_binary(DT_BINARY_MUL, t, t);
        dt_tensor *e = dt_binary_scalar(DT_BINARY_ADD, sq, dt_scalar_float(0.5), 0);
        CHECK_EQ(read_floats(e, got, ROWS * COLS), DT_OK);
        /* The host value left as its 2 shards (each device's rows), not whole. */
        dt_cluster_counters_get(&c1);
        CHECK_EQ(c1.values - c0.values, 2);
        CHECK_EQ(c1.value_bytes - c0.value_bytes, (int64_t)sizeof x);
        for (int i = 0; i < ROWS * COLS; i++)
            want[i] = x[i] * x[i] + 0.5f;
        check_floats("x*x+0.5", got, want, ROWS * COLS);
        dt_tensor *cs = dt_sum(e, 1, &d0, 0); /* S(0) summed over dim 0: Partial */
        dt_tensor *ar = dt_redistribute(cs, mesh, &r);
        float col[COLS], wcol[COLS];
        for (int j = 0; j < COLS; j++) {
            float p0 = want[0 * COLS + j] + want[1 * COLS + j], p1 = want[2 * COLS + j] + want[3 * COLS + j];
            wcol[j] = p0 + p1; /* rank order, as in-process */
        }
        CHECK_EQ(read_floats(ar, col, COLS), DT_OK);
        check_floats("all-reduce", col, wcol, COLS);
        dt_tensor *ag = dt_redistribute(e, mesh, &r);
        CHECK_EQ(read_floats(ag, got, ROWS * COLS), DT_OK);
        check_floats("all-gather", got, want, ROWS * COLS);
        CHECK_EQ(dt_graph_sync(g), DT_OK);
        check_drained(g);
        dt_tensor_release(ag);
        dt_tensor_release(ar);
        dt_tensor_release(cs);
        dt_tensor_release(e);
        dt_tensor_release(sq);
        dt_tensor_release(t);
    }
    /* A kernel error on the node surfaces at the read, naming the op and
     * the device; the graph goes on. */
    int64_t ishape[1] = {2}, wshape[2] = {ROWS, COLS};
    int64_t bad_idx[2] = {1, 9};
    dt_tensor *w = dt_tensor_from_buffer(g, DT_FLOAT32, 2, wshape, x, sizeof x, mesh, &r);
    dt_tensor *idx = dt_tensor_from_buffer(g, DT_INT64, 1, ishape, bad_idx, sizeof bad_idx, mesh, &r);
    dt_tensor *emb = dt_embedding(idx, w);
    float eg[2 * COLS];
    dt_status st = read_floats(emb, eg, 2 * COLS);
    CHECK_EQ(st, DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "cpu:") != NULL);
    dt_tensor *ok = dt_binary_scalar(DT_BINARY_MUL, w, dt_scalar_float(2.0), 0);
    CHECK_EQ(read_floats(ok, got, ROWS * COLS), DT_OK);
    for (int i = 0; i < ROWS * COLS; i++)
        want[i] = x[i] * 2.0f;
    check_floats("after the error", got, want, ROWS * COLS);
    dt_tensor_release(ok);
    dt_tensor_release(emb);
    dt_tensor_release(idx);
    dt_tensor_release(w);
    dt_graph_release(g);
}

int main(void) {
    if (!dt_cluster_available()) {
        printf("test_remote: built without ZeroMQ: skipped\n");
        return 0;
    }
    dt_cluster_options o = {.cpu_devices = 1, .token = "c-remote-token", .heartbeat_ms = 200};
    CHECK_EQ(dt_cluster_listen("127.0.0.1:0", &o), DT_OK);
    node_thread n;
    char addr[200];
    CHECK_EQ(dt_cluster_address(addr, sizeof addr), DT_OK);
    start_node(&n, addr, "c-remote-token", 2, 30000);
    CHECK_EQ(dt_cluster_wait(1, 30000), DT_OK);
    int64_t ids[2] = {1, 2}, mshape[1] = {2};
    dt_mesh *mesh = NULL;
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &mesh), DT_OK);
    if (mesh)
        run_programs(mesh);
    dt_mesh_release(mesh);
    dt_cluster_shutdown();
    pthread_join(n.t, NULL);
    CHECK_EQ(n.rc, 0);
    if (failures)
        fprintf(stderr, "test_remote: %d failures\n", failures);
    return failures != 0;
}
