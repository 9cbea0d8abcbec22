/*
 * The graph's promises (src/core/client/graph.c, debug.c), tested without clocks:
 *  - flow control bounds the records in flight: 200,000 ops recorded behind
 *    a closed test gate (the device's worker is held, nothing drains) never
 *    put more than the bound in flight, and the client did wait (fails if
 *    flow control never waits: the peak would be the 200,000 ops);
 *  - a read held pending by a gate times out (dt_future_wait with 0 and a
 *    small timeout) while the gate is closed and completes once it opens;
 *    metadata getters answer meanwhile;
 *  - dt_graph_shutdown lets its own gated work through (never hangs on a
 *    gate) and leaves the gate closed for other graphs;
 *  - dt_graph_cancel drops work queued behind a closed gate unrun: a read
 *    queued behind it fails with DT_ECANCELLED, a collective whose rank 0
 *    is held behind the gate does not leave rank 1 waiting, the stats count
 *    the dropped work, ops afterwards fail with DT_ESHUTDOWN;
 *  - with deferred backpressure an op never waits: the thread is told
 *    (dt_take_backpressure) and dt_graph_wait_capacity times out while the
 *    gate holds the pipeline full;
 *  - every *_release accepts NULL, and a call that fails validation enqueues
 *    nothing (the graph's submitted-record count does not move).
 * Runs on the 'ref' backend under ASan/UBSan and TSan.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static dt_mesh *mesh1d(int n, int first_id) {
    int64_t shape[1] = {n}, ids[16];
    for (int i = 0; i < n; i++)
        ids[i] = first_id + i;
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

/* ------------------------------------------------------- flow control */

typedef struct opener_arg {
    dt_graph *g;
    dt_debug_gate *gate;
    atomic_int recorded; /* the client has recorded every op */
} opener_arg;

/* Opens the gate once the client waits in flow control, or once it has
 * recorded everything without waiting (flow control broken: the test then
 * fails on the counts, instead of hanging). Polls the counters every
 * millisecond; the runtime itself never spins. */
static void *opener(void *p) {
    opener_arg *a = p;
    for (;;) {
        dt_graph_stats s;
        dt_graph_get_stats(a->g, &s, 0);
        if (s.flow_waits > 0 || atomic_load(&a->recorded))
            break;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    dt_debug_gate_open(a->gate);
    return NULL;
}

static void test_flow_control_bound(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(1, 0);
    int64_t shape[1] = {1};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(0), m, NULL);
    CHECK(x && dt_graph_sync(g) == DT_OK);
    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK);
    /* Everything after this on device 0 waits behind the gate. */
    dt_tensor *t = dt_debug_gated(x, gate);
    dt_tensor_release(x);
    dt_graph_stats s0;
    CHECK(dt_graph_get_stats(g, &s0, 1) == DT_OK);
    CHECK(s0.in_flight_limit > 0 && s0.check_interval > 0);
    CHECK(s0.flow_waits == 0);

    opener_arg arg = {.g = g, .gate = gate};
    atomic_init(&arg.recorded, 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, opener, &arg) == 0);
    const int n = 200000;
    for (int i = 0; i < n; i++) {
        dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, t, dt_scalar_float(1), 0);
        dt_tensor_release(t);
        t = y;
    }
    atomic_store(&arg.recorded, 1);
    pthread_join(th, NULL);
    CHECK(dt_graph_sync(g) == DT_OK);

    dt_graph_stats s = stats(g);
    /* On one device an op is one record once lowered, and the client looks
     * at the bound every check_interval submissions: it can pass the bound by
     * one interval, and by one more if its look races with a batch. */
    int64_t bound = s.in_flight_limit + 2 * s.check_interval;
    if (s.peak_in_flight > bound || s.flow_waits < 1) {
        fprintf(stderr, "flow control: %lld records in flight at the peak (bound %lld), %lld waits\n",
                (long long)s.peak_in_flight, (long long)bound, (long long)s.flow_waits);
        failures++;
    }
    printf("flow control: peak %lld records in flight (limit %lld, bound %lld), %lld wait(s)\n",
           (long long)s.peak_in_flight, (long long)s.in_flight_limit, (long long)bound,
           (long long)s.flow_waits);
    /* The gate really held the work back: the pipeline filled up (a client may
     * stop a batch's size early: it can see a batch's nodes and kernels at
     * once while the controller hands them over). */
    CHECK(s.peak_in_flight > s.in_flight_limit / 2);
    CHECK(s.submitted - s0.submitted >= n);
    float got = -1;
    CHECK(dt_tensor_read(t, &got, sizeof got) == DT_OK && got == (float)n);
    dt_debug_gate_release(gate);
    dt_tensor_release(t);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* ------------------------------------------------------------- gates */

static void test_pending_read(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(2, 0);
    int64_t shape[2] = {4, 3};
    float v[12];
    for (int i = 0; i < 12; i++)
        v[i] = (float)i;
    dt_placement s0[1] = {S(0)};
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, v, sizeof v, m, s0);
    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK && !dt_debug_gate_is_open(gate));
    dt_tensor *t = dt_debug_gated(x, gate);
    dt_tensor *y = dt_binary_scalar(DT_BINARY_MUL, t, dt_scalar_float(2), 0);
    CHECK(t && y);
    dt_future *f = dt_tensor_fetch(y);
    CHECK(f != NULL);
    /* Held: a wait with a timeout says "not yet", however long it is. */
    CHECK(dt_future_wait(f, 0) == DT_ETIMEDOUT);
    CHECK(dt_future_wait(f, 20) == DT_ETIMEDOUT);
    CHECK(!dt_future_is_ready(f));
    /* Metadata answers without the value. */
    CHECK(dt_tensor_ndim(y) == 2 && dt_tensor_shape(y)[0] == 4 && dt_tensor_shape(y)[1] == 3);
    CHECK(dt_tensor_dtype(y) == DT_FLOAT32 && dt_tensor_numel(y) == 12);
    CHECK(dt_tensor_mesh(y) == m && same(dt_tensor_placements(y)[0], S(0)));
    CHECK(dt_tensor_graph(t) == g && same(dt_tensor_placements(t)[0], S(0)));
    int64_t fs[DT_MAX_NDIM];
    CHECK(dt_future_shape(f, fs) == 2 && fs[0] == 4 && fs[1] == 3);
    CHECK(!dt_future_is_ready(f));
    dt_debug_gate_open(gate);
    CHECK(dt_debug_gate_is_open(gate));
    CHECK(dt_future_wait(f, -1) == DT_OK && dt_future_is_ready(f));
    float got[12];
    CHECK(dt_future_read(f, got, sizeof got) == DT_OK);
    for (int i = 0; i < 12; i++)
        CHECK(got[i] == 2.0f * v[i]);
    /* An open gate lets new work through at once. */
    dt_tensor *t2 = dt_debug_gated(y, gate);
    float got2[12];
    CHECK(t2 && dt_tensor_read(t2, got2, sizeof got2) == DT_OK && memcmp(got, got2, sizeof got) == 0);
    dt_future_release(f);
    dt_tensor_release(t2);
    dt_tensor_release(y);
    dt_tensor_release(t);
    dt_tensor_release(x);
    dt_debug_gate_release(gate);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* A shutdown with a closed gate in the way lets its own work through and
 * finishes it; the gate stays closed for another graph. */
static void test_shutdown_passes_gates(void) {
    dt_graph *g = ref_graph(), *g2 = ref_graph();
    dt_mesh *m = mesh1d(3, 0);
    int64_t shape[1] = {6};
    dt_tensor *x = dt_arange(g, DT_FLOAT32, 0, 6, 1, m, NULL);
    dt_tensor *x2 = dt_arange(g2, DT_FLOAT32, 0, 6, 1, m, NULL);
    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK);
    dt_tensor *t = dt_debug_gated(x, gate), *t2 = dt_debug_gated(x2, gate);
    dt_future *f = dt_tensor_fetch(t), *f2 = dt_tensor_fetch(t2);
    CHECK(f && dt_future_wait(f, 0) == DT_ETIMEDOUT);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    float got[6];
    CHECK(dt_future_read(f, got, sizeof got) == DT_OK);
    for (int i = 0; i < 6; i++)
        CHECK(got[i] == (float)i);
    CHECK(!dt_debug_gate_is_open(gate));
    CHECK(f2 && dt_future_wait(f2, 10) == DT_ETIMEDOUT);
    dt_debug_gate_open(gate);
    CHECK(f2 && dt_future_read(f2, got, sizeof got) == DT_OK && got[5] == 5.0f);
    /* After the shutdown a gated op fails at the call. */
    CHECK(dt_debug_gated(x, gate) == NULL && dt_last_status() == DT_ESHUTDOWN);
    CHECK(dt_debug_gated(NULL, gate) == NULL && dt_last_status() == DT_EINVAL);
    CHECK(dt_debug_gated(x, NULL) == NULL && dt_last_status() == DT_EINVAL);
    (void)shape;
    dt_future_release(f2);
    dt_future_release(f);
    dt_tensor_release(t2);
    dt_tensor_release(t);
    dt_tensor_release(x2);
    dt_tensor_release(x);
    dt_debug_gate_release(gate);
    dt_mesh_release(m);
    dt_graph_release(g2);
    dt_graph_release(g);
}

/* ------------------------------------------ NULL releases, failed calls */

static void test_release_null(void) {
    dt_tensor_release(NULL);
    dt_tensor_retain(NULL);
    dt_mesh_release(NULL);
    dt_mesh_retain(NULL);
    dt_graph_release(NULL);
    dt_graph_retain(NULL);
    dt_future_release(NULL);
    dt_debug_gate_release(NULL);
    dt_debug_gate_open(NULL);
    dt_dlpack_delete(NULL);
    CHECK(!dt_debug_gate_is_open(NULL));
    CHECK(dt_graph_get_stats(NULL, NULL, 0) == DT_EINVAL);
    CHECK(dt_graph_shutdown(NULL) == DT_EINVAL);
    CHECK(dt_future_wait(NULL, 0) == DT_EINVAL);
}

/* Each failing call: NULL and a non-OK status, and the submitted-record
 * count unchanged. */
#define EXPECT_FAILS_QUIETLY(call)                                                                           \
    do {                                                                                                     \
        int64_t before_ = stats(g).submitted;                                                                \
        dt_clear_error();                                                                                    \
        dt_tensor *r_ = (call);                                                                              \
        CHECK(r_ == NULL && dt_last_status() != DT_OK && dt_last_error()[0] != '\0');                        \
        dt_tensor_release(r_);                                                                               \
        int64_t after_ = stats(g).submitted;                                                                 \
        if (after_ != before_) {                                                                             \
            fprintf(stderr, "%s:%d: %s enqueued %lld record(s) although it failed\n", __FILE__, __LINE__,    \
                    #call, (long long)(after_ - before_));                                                   \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

static void test_failed_calls_enqueue_nothing(void) {
    dt_graph *g = ref_graph(), *g2 = ref_graph();
    dt_mesh *m = mesh1d(2, 0), *m3 = mesh1d(3, 0);
    int64_t shape[2] = {4, 6}, shape_t[2] = {6, 4}, bad_shape[2] = {4, -1}, v4[1] = {4}, dim9 = 9;
    float host[24] = {0};
    dt_placement s0[1] = {S(0)}, s1[1] = {S(1)}, r[1] = {R()}, p[1] = {P()}, s7[1] = {S(7)};
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, host, sizeof host, m, s0);
    dt_tensor *b = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_float(1), m, r);
    dt_tensor *bp = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_float(1), m, p);
    dt_tensor *bt = dt_full(g, DT_FLOAT32, 2, shape_t, dt_scalar_float(1), m, s1);
    dt_tensor *c4 = dt_full(g, DT_FLOAT32, 1, v4, dt_scalar_float(1), m, NULL);
    dt_tensor *on3 = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_float(1), m3, NULL);
    dt_tensor *other = dt_full(g2, DT_FLOAT32, 2, shape, dt_scalar_float(1), m, NULL);
    dt_tensor *idx = dt_full(g, DT_FLOAT32, 1, v4, dt_scalar_float(0), m, NULL);
    CHECK(a && b && bp && bt && c4 && on3 && other && idx);
    /* The counter counts: one successful op is one record. */
    int64_t before = stats(g).submitted;
    dt_tensor *ok = dt_binary(DT_BINARY_ADD, a, b);
    CHECK(ok && stats(g).submitted == before + 1);
    dt_tensor_release(ok);

    EXPECT_FAILS_QUIETLY(dt_binary(DT_BINARY_ADD, a, c4));    /* shapes do not broadcast */
    EXPECT_FAILS_QUIETLY(dt_binary(DT_BINARY_ADD, a, other)); /* another graph */
    EXPECT_FAILS_QUIETLY(dt_binary(DT_BINARY_ADD, a, on3));   /* another mesh */
    EXPECT_FAILS_QUIETLY(dt_binary(DT_BINARY_DIV, b, bp));    /* (R, P) for div: a placement error */
    EXPECT_FAILS_QUIETLY(dt_binary(DT_BINARY_MUL, bp, bp));   /* (P, P) for mul */
    EXPECT_FAILS_QUIETLY(dt_binary(DT_BINARY_ADD, NULL, b));
    EXPECT_FAILS_QUIETLY(dt_matmul(a, b));  /* K mismatch */
    EXPECT_FAILS_QUIETLY(dt_matmul(a, bt)); /* (S(0), S(1)) */
    EXPECT_FAILS_QUIETLY(dt_sum(a, 1, &dim9, 0));
    EXPECT_FAILS_QUIETLY(dt_redistribute(a, NULL, s7));
    EXPECT_FAILS_QUIETLY(dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, host, 7, m, NULL));
    EXPECT_FAILS_QUIETLY(dt_full(g, DT_FLOAT32, 2, bad_shape, dt_scalar_float(0), m, NULL));
    EXPECT_FAILS_QUIETLY(dt_rand(g, DT_INT64, 2, shape, m, NULL));
    EXPECT_FAILS_QUIETLY(dt_reshape(a, 1, v4));
    dt_tensor *pair[2] = {a, c4};
    EXPECT_FAILS_QUIETLY(dt_cat(2, pair, 0));
    EXPECT_FAILS_QUIETLY(dt_embedding(idx, b)); /* float indices */
    dt_tensor *sv = NULL, *si = NULL;
    before = stats(g).submitted;
    CHECK(dt_sort(bp, 0, 0, 0, &sv, &si) == DT_EPLACEMENT && !sv && !si);
    CHECK(stats(g).submitted == before);
    /* A read of a device the mesh lacks is refused before its node is made. */
    before = stats(g).submitted;
    CHECK(dt_tensor_fetch_local(a, 2) == NULL && dt_last_status() == DT_EINDEX);
    CHECK(stats(g).submitted == before);

    dt_tensor_release(idx);
    dt_tensor_release(other);
    dt_tensor_release(on3);
    dt_tensor_release(c4);
    dt_tensor_release(bt);
    dt_tensor_release(bp);
    dt_tensor_release(b);
    dt_tensor_release(a);
    dt_mesh_release(m3);
    dt_mesh_release(m);
    dt_graph_release(g2);
    dt_graph_release(g);
}

/* ------------------------------------------------------------ cancel */

static void test_cancel_drops_queued_work(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m1 = mesh1d(1, 0), *m2 = mesh1d(2, 0);
    int64_t shape[1] = {4};
    dt_placement pp[1] = {P()}, pr[1] = {R()};
    dt_tensor *a = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(1), m1, NULL);
    dt_tensor *p = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(1), m2, pp);
    CHECK(a && p && dt_graph_sync(g) == DT_OK);
    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK);
    /* Device 0's worker waits at the gate; device 1's reaches the allreduce
     * and waits there for rank 0, which is queued behind the gate. */
    dt_tensor *t = dt_debug_gated(a, gate);
    const int n = 1000;
    for (int i = 0; i < n; i++) {
        dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, t, dt_scalar_float(1), 0);
        dt_tensor_release(t);
        t = y;
    }
    dt_tensor *r = dt_redistribute(p, m2, pr);
    CHECK(t && r);
    dt_future *ft = dt_tensor_fetch(t), *fr = dt_tensor_fetch_local(r, 0);
    CHECK(ft && fr);
    CHECK(dt_future_wait(ft, 0) == DT_ETIMEDOUT);
    dt_status st = dt_graph_cancel(g, 0);
    CHECK(st == DT_OK || st == DT_ETIMEDOUT);
    CHECK(dt_graph_cancel(g, -1) == DT_OK);
    CHECK(dt_graph_cancel(g, -1) == DT_OK); /* idempotent */
    CHECK(dt_graph_shutdown(g) == DT_OK);
    /* The reads were dropped, not run: the gate was never opened. */
    CHECK(!dt_debug_gate_is_open(gate));
    CHECK(dt_future_wait(ft, -1) == DT_OK && dt_future_status(ft) == DT_ECANCELLED);
    CHECK(dt_future_wait(fr, -1) == DT_OK && dt_future_status(fr) != DT_OK);
    dt_graph_stats s = stats(g);
    CHECK(s.cancelled >= n);
    CHECK(s.in_flight == 0);
    dt_tensor *late = dt_binary_scalar(DT_BINARY_ADD, a, dt_scalar_float(1), 0);
    CHECK(late == NULL && dt_last_status() == DT_ESHUTDOWN);
    dt_future_release(ft);
    dt_future_release(fr);
    dt_tensor_release(t);
    dt_tensor_release(r);
    dt_tensor_release(a);
    dt_tensor_release(p);
    dt_debug_gate_release(gate);
    dt_mesh_release(m1);
    dt_mesh_release(m2);
    dt_graph_release(g);
    CHECK(dt_graph_cancel(NULL, 0) == DT_EINVAL && dt_graph_wait_capacity(NULL, 0) == DT_EINVAL);
}

static void test_deferred_backpressure(void) {
    dt_graph *g = ref_graph();
    dt_graph_set_deferred_backpressure(g, 1);
    dt_mesh *m = mesh1d(1, 0);
    int64_t shape[1] = {1};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(0), m, NULL);
    CHECK(x && dt_graph_sync(g) == DT_OK);
    CHECK(dt_graph_wait_capacity(g, 0) == DT_OK);
    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK);
    dt_tensor *t = dt_debug_gated(x, gate);
    dt_graph *told = NULL;
    /* No op waits (the gate is never opened before the end): the loop ends
     * only because the thread is told about the pressure. */
    for (int i = 0; i < 200000 && !told; i++) {
        dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, t, dt_scalar_float(1), 0);
        dt_tensor_release(t);
        t = y;
        told = dt_take_backpressure();
    }
    CHECK(told == g);
    CHECK(dt_take_backpressure() == NULL);
    CHECK(dt_graph_wait_capacity(g, 0) == DT_ETIMEDOUT);
    CHECK(dt_graph_wait_capacity(g, 5) == DT_ETIMEDOUT);
    dt_graph_release(told);
    dt_debug_gate_open(gate);
    CHECK(dt_graph_wait_capacity(g, -1) == DT_OK);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_debug_gate_release(gate);
    dt_tensor_release(t);
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

int main(void) {
    test_release_null();
    test_failed_calls_enqueue_nothing();
    test_pending_read();
    test_shutdown_passes_gates();
    test_flow_control_bound();
    test_cancel_drops_queued_work();
    test_deferred_backpressure();
    if (failures) {
        fprintf(stderr, "test_graph: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_graph: all passed\n");
    return 0;
}
