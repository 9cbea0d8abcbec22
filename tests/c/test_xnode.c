/*
 * Data between nodes over ZeroMQ, in the sanitizer builds: this process is
 * the main node (2 CPU devices, the 'ref' backend) and starts itself twice
 * as worker nodes (`--node ADDRESS`, fresh processes: one mailbox per
 * process, comm/xfer.h), A with ids 2, 3 and B with ids 4, 5. Values move
 * between the three nodes' meshes; a mesh over all six devices all-gathers
 * and all-reduces (the sum compared with the one computed here in rank
 * order, exactly); B is made unable to decode a batch holding its ranks of
 * an all-reduce (dt_debug_cluster_corrupt_batch): the read fails at once,
 * naming B, and the next all-reduce runs; a copy from A to B goes straight
 * between them (the main node relays nothing); then B is SIGKILLed and an
 * all-reduce that waits for its part fails, naming it, within the loss
 * bound, and A and the main node go on. Python's test_cluster_data.py
 * covers torch's results.
 */
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtorch/dtorch_cluster.h"
#include "test_util.h"

extern char **environ;

#define TOKEN "c-xnode-token"
#define HB_MS 1000 /* the default: robust under the sanitizers on a loaded machine */
#define ROWS 6
#define COLS 5

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static pid_t spawn_node(const char *addr) {
    char *argv[] = {"test_xnode", "--node", (char *)addr, NULL};
    pid_t pid = -1;
    CHECK_EQ(posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ), 0);
    return pid;
}

static dt_mesh *mesh_of(int n, const int64_t *ids) {
    int64_t shape[1] = {n};
    dt_mesh *m = NULL;
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m), DT_OK);
    return m;
}

static void run(void) {
    dt_graph_options go = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK_EQ(dt_graph_create(&go, &g), DT_OK);
    static const int64_t here_ids[2] = {0, 1}, a_ids[2] = {2, 3}, b_ids[2] = {4, 5},
                         all_ids[6] = {0, 1, 2, 3, 4, 5};
    dt_mesh *here = mesh_of(2, here_ids), *a = mesh_of(2, a_ids), *b = mesh_of(2, b_ids),
            *all = mesh_of(6, all_ids);
    if (!g || !here || !a || !b || !all)
        return;
    float x[ROWS * COLS], got[ROWS * COLS], want[COLS];
    for (int i = 0; i < ROWS * COLS; i++) /* sums that depend on the order of the adds */
        x[i] = (i % 7 == 3 ? 1e7f : 0.0f) + 0.37f * (float)(i % 11) - 1.3f;
    int64_t shape[2] = {ROWS, COLS}, d0 = 0;
    dt_placement s0 = S(0), s1 = S(1), r = R();
    /* Moves: main -> A -> B -> main, across placements. */
    dt_tensor *t = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, here, &s0);
    dt_tensor *ta = dt_redistribute(t, a, &r);
    dt_tensor *tb = dt_redistribute(ta, b, &s1);
    dt_tensor *back = dt_redistribute(tb, here, &s0);
    CHECK_EQ(read_floats(ta, got, ROWS * COLS), DT_OK);
    check_floats("main -> A", got, x, ROWS * COLS);
    CHECK_EQ(read_floats(tb, got, ROWS * COLS), DT_OK);
    check_floats("A -> B", got, x, ROWS * COLS);
    CHECK_EQ(read_floats(back, got, ROWS * COLS), DT_OK);
    check_floats("B -> main", got, x, ROWS * COLS);
    /* A mesh over the three nodes: all-gather, and an all-reduce in rank
     * order (one row per device, summed). */
    dt_tensor *s = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, all, &s0);
    dt_tensor *ag = dt_redistribute(s, all, &r);
    CHECK_EQ(read_floats(ag, got, ROWS * COLS), DT_OK);
    check_floats("all-gather over 3 nodes", got, x, ROWS * COLS);
    dt_tensor *part = dt_sum(s, 1, &d0, 0);
    dt_tensor *ar = dt_redistribute(part, all, &r);
    for (int j = 0; j < COLS; j++) {
        float acc = x[j];
        for (int i = 1; i < ROWS; i++)
            acc += x[i * COLS + j];
        want[j] = acc;
    }
    CHECK_EQ(read_floats(ar, got, COLS), DT_OK);
    check_floats("all-reduce over 3 nodes", got, want, COLS);
    /* B cannot decode the batch holding its ranks of an all-reduce: the
     * ranks waiting for its parts, here and on A, fail at once (well
     * before the loss bound) naming it, and the next all-reduce runs. */
    CHECK_EQ(dt_debug_cluster_corrupt_batch(1), DT_OK);
    double t0 = now_s();
    CHECK_EQ(dt_debug_hold_controller(g, 1), DT_OK); /* one round: one batch for B */
    dt_tensor *thrice = dt_binary_scalar(DT_BINARY_MUL, part, dt_scalar_float(3.0), 0);
    dt_tensor *ar3 = dt_redistribute(thrice, all, &r);
    CHECK_EQ(dt_debug_hold_controller(g, 0), DT_OK);
    CHECK_EQ(read_floats(ar3, got, COLS), DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "worker node 1") != NULL);
    CHECK(strstr(dt_last_error(), "could not run a batch") != NULL);
    double took = now_s() - t0;
    if (took > 2.0 * HB_MS / 1000.0) {
        fprintf(stderr, "the failed batch took %.2f s to fail its read (the loss bound)\n", took);
        failures++;
    }
    dt_tensor *ar4 = dt_redistribute(part, all, &r);
    CHECK_EQ(read_floats(ar4, got, COLS), DT_OK);
    check_floats("all-reduce after B's failed batch", got, want, COLS);
    /* A's part for B goes straight to B (their connection is up by now),
     * not through the main node. */
    dt_cluster_counters c0, c1;
    dt_cluster_counters_get(&c0);
    dt_tensor *tb2 = dt_redistribute(ta, b, &r);
    CHECK_EQ(read_floats(tb2, got, ROWS * COLS), DT_OK);
    check_floats("A -> B straight", got, x, ROWS * COLS);
    dt_cluster_counters_get(&c1);
    CHECK_EQ(c1.relayed, c0.relayed);
    /* B killed: an all-reduce waiting for its part fails, naming it. */
    dt_node_info nb;
    CHECK_EQ(dt_cluster_node(1, &nb), DT_OK);
    kill(nb.pid, SIGKILL);
    t0 = now_s();
    dt_tensor *twice = dt_binary_scalar(DT_BINARY_MUL, part, dt_scalar_float(2.0), 0);
    dt_tensor *ar2 = dt_redistribute(twice, all, &r);
    CHECK_EQ(read_floats(ar2, got, COLS), DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "worker node 1") != NULL);
    took = now_s() - t0;
    if (took > 2.0 * HB_MS / 1000.0 + 5.0) {
        fprintf(stderr, "the failure took %.2f s\n", took);
        failures++;
    }
    /* A and the main node go on (A's streams are not stuck in the collective). */
    dt_tensor *ya = dt_redistribute(ta, a, &s0);
    dt_tensor *yh = dt_redistribute(ya, here, &r);
    CHECK_EQ(read_floats(yh, got, ROWS * COLS), DT_OK);
    check_floats("A -> main after B's loss", got, x, ROWS * COLS);
    dt_tensor *ts[] = {t, ta, tb, back, s, ag, part, ar, thrice, ar3, ar4, tb2, twice, ar2, ya, yh};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++)
        dt_tensor_release(ts[i]);
    dt_mesh *ms[] = {here, a, b, all};
    for (size_t i = 0; i < 4; i++)
        dt_mesh_release(ms[i]);
    dt_graph_release(g);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--node") == 0) {
        dt_node_options o = {.main_address = argv[2],
                             .token = TOKEN,
                             .cpu_devices = 2,
                             .connect_timeout_ms = 30000,
                             .quiet = 1};
        return dt_node_run(&o);
    }
    if (!dt_cluster_available()) {
        printf("test_xnode: built without ZeroMQ: skipped\n");
        return 0;
    }
    dt_cluster_options o = {.token = TOKEN, .cpu_devices = 2, .heartbeat_ms = HB_MS};
    CHECK_EQ(dt_cluster_listen("127.0.0.1:0", &o), DT_OK);
    char addr[200] = "";
    CHECK_EQ(dt_cluster_address(addr, sizeof addr), DT_OK);
    pid_t pa = spawn_node(addr);
    CHECK_EQ(dt_cluster_wait(1, 30000), DT_OK); /* A registers first: ids 2, 3 */
    pid_t pb = spawn_node(addr);
    CHECK_EQ(dt_cluster_wait(2, 30000), DT_OK);
    if (!failures)
        run();
    dt_cluster_shutdown();
    int status = 0;
    if (pa > 0) {
        CHECK_EQ(waitpid(pa, &status, 0), pa);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (pb > 0) {
        kill(pb, SIGKILL); /* killed already, unless run() stopped early */
        waitpid(pb, &status, 0);
    }
    if (failures)
        fprintf(stderr, "test_xnode: %d failures\n", failures);
    return failures != 0;
}
