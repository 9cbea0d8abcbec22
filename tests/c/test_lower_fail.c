/*
 * Fallible lowering (docs/decisions.md, "Fallible lowering"): with
 * dt_debug_fail_allocs(n) the controller's (n+1)-th allocation while it
 * lowers fails. For n = 0, 1, 2, ... until nothing fails, each small program
 * (a binary op, a reduction, a Shard -> Replicate redistribute on a 2-device
 * mesh, a fetch) must not crash or leak (ASan), and its read either fails
 * with an error naming the op, "on the controller" and the call site, or,
 * when the failure hit nothing, returns the right values. The same graph
 * must keep working afterwards. Runs on the 'ref' backend under ASan/TSan.
 */
#include <stdio.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

#define N 8

enum { PROG_BINARY, PROG_SUM, PROG_REDIST, PROG_FETCH, PROG_COUNT };
static const char *const prog_op[PROG_COUNT] = {"binary", "reduce", "redistribute", "fetch"};

/* Runs program `which` on x (Shard(0) over 2 devices, values 0..N-1); 0 when
 * the read succeeded with the right values, 1 when it failed as it should. */
static int run(int which, dt_tensor *x, dt_mesh *mesh, int armed) {
    float out[N];
    float want[N];
    size_t nb = sizeof out;
    dt_tensor *y = NULL;
    dt_set_call_site("prog.py", 100 + which);
    switch (which) {
    case PROG_BINARY:
        y = dt_binary(DT_BINARY_ADD, x, x);
        for (int i = 0; i < N; i++)
            want[i] = 2.0f * (float)i;
        break;
    case PROG_SUM: {
        int64_t d0 = 0;
        y = dt_sum(x, 1, &d0, 0);
        want[0] = (float)(N * (N - 1) / 2);
        nb = sizeof(float);
        break;
    }
    case PROG_REDIST: {
        dt_placement r = R();
        y = dt_redistribute(x, mesh, &r);
        for (int i = 0; i < N; i++)
            want[i] = (float)i;
        break;
    }
    default:
        dt_tensor_retain(x);
        y = x;
        for (int i = 0; i < N; i++)
            want[i] = (float)i;
        break;
    }
    CHECK(y != NULL);
    if (!y)
        return 0;
    dt_status st = dt_tensor_read(y, out, nb);
    int failed = 0;
    if (st == DT_OK) {
        CHECK(memcmp(out, want, nb) == 0);
    } else {
        const char *msg = dt_last_error();
        failed = 1;
        CHECK(armed);
        CHECK(st == DT_EKERNEL);
        /* The op itself, or (after it) the read's own lowering. */
        CHECK(strstr(msg, prog_op[which]) || strstr(msg, "fetch"));
        CHECK(strstr(msg, "on the controller") != NULL);
        CHECK(strstr(msg, "out of memory") != NULL);
        CHECK(strstr(msg, "prog.py:") != NULL);
        if (!strstr(msg, "controller"))
            fprintf(stderr, "message: %s\n", msg);
    }
    dt_tensor_release(y);
    return failed;
}

int main(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    int64_t shape = 2, ids[2] = {0, 1};
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, &shape, ids, NULL, &mesh) == DT_OK);
    float host[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i;
    int64_t xs = N;
    dt_placement s0 = S(0);
    for (int which = 0; which < PROG_COUNT; which++) {
        int saw_failure = 0, done = 0;
        for (int64_t n = 0; n < 1000 && !done; n++) {
            /* x is made and read before arming: only the program's nodes
             * can be hit. */
            dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 1, &xs, host, sizeof host, mesh, &s0);
            CHECK(x != NULL);
            float back[N];
            CHECK(dt_tensor_read(x, back, sizeof back) == DT_OK);
            dt_debug_fail_allocs(n);
            int failed = run(which, x, mesh, 1);
            saw_failure |= failed;
            if (dt_debug_fail_allocs_pending()) {
                /* Nothing failed: the program's lowering needs at most n
                 * allocations, so every larger n succeeds too. */
                CHECK(!failed);
                done = 1;
            }
            dt_debug_fail_allocs(-1);
            /* The same graph keeps working, with the same input. */
            CHECK(run(which, x, mesh, 0) == 0);
            dt_tensor_release(x);
        }
        CHECK(done);
        CHECK(saw_failure);
    }
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_mesh_release(mesh);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
    if (failures)
        fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
