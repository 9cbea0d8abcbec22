/*
 * Streams and events (src/core/worker/events.c, kernel_stream.c,
 * core/controller/stream_map.c) on the 'ref'
 * backend, against values computed here:
 *  - the event model itself: an event (producer, kernel number) is pending
 *    until that kernel completes, then done; a consumer thread waiting on
 *    it sleeps until the producer publishes, in both directions between
 *    two streams;
 *  - a device has a compute and a communication stream: collectives (all-
 *    gather, all-reduce, reduce-scatter, all-to-all) and cross-mesh
 *    assemblies run on the communication one, compute waits on their
 *    results through events, and the values are right; with
 *    DTORCH_OVERLAP=0 they run on the compute stream instead;
 *  - a cross-stream wait on a producer held at a test gate: the result is
 *    not ready before the gate opens and is right after;
 *  - many devices with large ids (up to 2**62) cost a stream each;
 *  - a second device type served by a copy of the ref backend with event
 *    slots (through the test-only hook): a tensor moves CPU -> "cuda" ->
 *    CPU, staged through host memory, with the right values, and the
 *    backend's events are recorded, waited on and queried.
 * Runs under ASan/UBSan and TSan.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/stream_map.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/mesh.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"
#include "dtorch/dtorch.h"
#include "test_util.h"

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static dt_mesh *mesh_of(dt_device_type type, int n, const int64_t *ids) {
    int64_t shape[1] = {n};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(type, 1, shape, ids, NULL, &m) == DT_OK);
    return m;
}

static void expect_values(dt_tensor *t, const float *want, int64_t n, const char *what) {
    float *got = calloc((size_t)(n ? n : 1), sizeof *got);
    dt_status st = dt_tensor_read(t, got, (size_t)n * sizeof *got);
    CHECK_EQ(st, DT_OK);
    for (int64_t i = 0; st == DT_OK && i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "%s: element %lld: got %g, want %g\n", what, (long long)i, got[i], want[i]);
            failures++;
            break;
        }
    free(got);
}

/* ------------------------------------------------------- the event model */

/* A stream record without a worker: enough for the event functions. */
static void fake_stream(dt__stream *s, int64_t id, int kind) {
    memset(s, 0, sizeof *s);
    s->type = DT_DEVICE_CPU;
    s->device_id = id;
    s->kind = kind;
    s->be = &dt__backend_ref;
    pthread_mutex_init(&s->ev_lock, NULL);
    pthread_cond_init(&s->ev_cond, NULL);
}

static void fake_stream_destroy(dt__stream *s) {
    pthread_cond_destroy(&s->ev_cond);
    pthread_mutex_destroy(&s->ev_lock);
}

typedef struct waiter {
    dt__stream *on;    /* the waiting stream */
    const dt__blob *b; /* what it waits for */
    atomic_int done;
} waiter;

static void *wait_main(void *arg) {
    waiter *w = arg;
    dt__event_wait(w->on, w->b);
    atomic_store(&w->done, 1);
    return NULL;
}

static void test_event_model(void) {
    dt__stream a, b;
    fake_stream(&a, 0, DT_STREAM_COMPUTE);
    fake_stream(&b, 0, DT_STREAM_COMM);
    dt__blob from_a = {.producer = &a, .seq = 3}, from_b = {.producer = &b, .seq = 2};
    dt__blob source = {.producer = NULL};
    from_a.be = from_b.be = source.be = &dt__backend_ref;

    /* Query before and after. */
    CHECK_EQ(dt__event_query(&source), 1);
    CHECK_EQ(dt__event_query(&from_a), 0);
    dt__event_complete(&a, 2);
    CHECK_EQ(dt__event_query(&from_a), 0);
    dt__event_complete(&a, 3);
    CHECK_EQ(dt__event_query(&from_a), 1);
    dt__event_complete(&a, 4);
    CHECK_EQ(dt__event_query(&from_a), 1);
    /* A wait on a completed event and on a same-stream one returns at once. */
    dt__event_wait(&b, &from_a);
    dt__event_wait(&b, &from_b);

    /* a waits for b's kernel 2, b for a's kernel 6: both directions, each
     * released only by the other's completion. */
    dt__blob from_a6 = {.producer = &a, .seq = 6};
    from_a6.be = &dt__backend_ref;
    waiter wa = {.on = &a, .b = &from_b}, wb = {.on = &b, .b = &from_a6};
    pthread_t ta, tb;
    CHECK_EQ(pthread_create(&ta, NULL, wait_main, &wa), 0);
    CHECK_EQ(pthread_create(&tb, NULL, wait_main, &wb), 0);
    dt__event_complete(&b, 1); /* not enough */
    dt__event_complete(&a, 5);
    CHECK_EQ(dt__event_query(&from_b), 0);
    CHECK_EQ(dt__event_query(&from_a6), 0);
    CHECK_EQ(atomic_load(&wa.done), 0);
    CHECK_EQ(atomic_load(&wb.done), 0);
    dt__event_complete(&b, 2);
    pthread_join(ta, NULL);
    CHECK_EQ(atomic_load(&wa.done), 1);
    CHECK_EQ(atomic_load(&wb.done), 0);
    dt__event_complete(&a, 6);
    pthread_join(tb, NULL);
    CHECK_EQ(atomic_load(&wb.done), 1);
    CHECK_EQ(dt__event_query(&from_b), 1);
    CHECK_EQ(dt__event_query(&from_a6), 1);
    fake_stream_destroy(&a);
    fake_stream_destroy(&b);
}

/* ----------------------------------------------- compute and comm streams */

#define N 12 /* elements per tensor: divisible by 2, 3 and 4 devices */

/* x (Shard(0) on mesh) -> all-gather -> +1 -> reduce-scatter of a Partial ->
 * all-to-all -> all-reduce, checked against host arithmetic; then the
 * streams that ran them. */
static void run_collectives(dt_graph *g, dt_device_type type, int n, const int64_t *ids, int overlap) {
    dt_mesh *m = mesh_of(type, n, ids);
    int64_t shape2[2] = {N, N};
    int64_t numel = N * N;
    float *x = calloc((size_t)numel, sizeof *x), *want = calloc((size_t)numel, sizeof *want);
    for (int64_t i = 0; i < numel; i++)
        x[i] = (float)((i * 7) % 11) - 5.0f;
    dt_placement s0 = S(0), s1 = S(1), r = R(), p = P();
    dt_tensor *t = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape2, x, (size_t)numel * sizeof *x, m, &s0);
    dt_tensor *y = dt_binary_scalar(DT_BINARY_MUL, t, dt_scalar_float(2), 0); /* compute */
    dt_tensor *gathered = dt_redistribute(y, NULL, &r);                       /* all-gather: comm */
    dt_tensor *z =
        dt_binary_scalar(DT_BINARY_ADD, gathered, dt_scalar_float(1), 0); /* compute waits on comm */
    for (int64_t i = 0; i < numel; i++)
        want[i] = x[i] * 2 + 1;
    expect_values(z, want, numel, "all-gather then add");

    dt_tensor *zp = dt_redistribute(z, NULL, &p);    /* R -> P: local */
    dt_tensor *rs = dt_redistribute(zp, NULL, &s1);  /* reduce-scatter */
    dt_tensor *a2a = dt_redistribute(rs, NULL, &s0); /* all-to-all */
    dt_tensor *neg = dt_neg(a2a);                    /* compute */
    dt_tensor *np = dt_redistribute(neg, NULL, &r);  /* all-gather */
    dt_tensor *npp = dt_redistribute(np, NULL, &p);  /* R -> P: local */
    dt_tensor *pp = dt_binary_scalar(DT_BINARY_MUL, npp, dt_scalar_float(3), 0);
    dt_tensor *ar = dt_redistribute(pp, NULL, &r); /* all-reduce */
    for (int64_t i = 0; i < numel; i++)
        want[i] = -(x[i] * 2 + 1) * 3;
    expect_values(ar, want, numel, "reduce-scatter, all-to-all, all-gather, all-reduce");
    CHECK_EQ(dt_graph_sync(g), DT_OK);

    for (int i = 0; i < n; i++) {
        long run = -1, comm = -1, crun = -1, ccomm = -1;
        CHECK_EQ(dt__graph_debug_stream(g, type, ids[i], DT_STREAM_COMPUTE, &crun, &ccomm), 0);
        int have_comm = dt__graph_debug_stream(g, type, ids[i], DT_STREAM_COMM, &run, &comm) == 0;
        CHECK(crun > 0);
        if (overlap) {
            /* Every collective ran on the communication stream, and only
             * collectives (and syncs) did. */
            CHECK_EQ(have_comm, 1);
            CHECK_EQ(ccomm, 0);
            CHECK(comm >= 5);
        } else {
            CHECK_EQ(have_comm, 0);
            CHECK(ccomm >= 5);
        }
    }
    dt_tensor *all[] = {t, y, gathered, z, zp, rs, a2a, neg, np, npp, pp, ar};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(m);
    free(x);
    free(want);
}

static void test_two_streams(void) {
    dt_graph *g = ref_graph();
    const int64_t ids[4] = {3, 0, 7, 1};
    run_collectives(g, DT_DEVICE_CPU, 2, ids, 1);
    run_collectives(g, DT_DEVICE_CPU, 4, ids, 1);
    dt_graph_release(g);
}

static void test_overlap_off(void) {
    setenv("DTORCH_OVERLAP", "0", 1);
    dt_graph *g = ref_graph();
    unsetenv("DTORCH_OVERLAP");
    const int64_t ids[3] = {0, 1, 2};
    run_collectives(g, DT_DEVICE_CPU, 3, ids, 0);
    dt_graph_release(g);
}

/* Many devices, large ids: each costs its streams only. */
static void test_large_ids(void) {
    dt_graph *g = ref_graph();
    int64_t ids[8];
    for (int i = 0; i < 8; i++)
        ids[i] = i % 2 ? ((int64_t)1 << 62) - i : (int64_t)2147483647 - 1000003 * i;
    run_collectives(g, DT_DEVICE_CPU, 4, ids, 1);
    run_collectives(g, DT_DEVICE_CPU, 4, ids + 4, 1);
    CHECK_EQ(g->smap_n, 16); /* 8 devices x 2 kinds, nothing more */
    int64_t cur = -1, peak = -1;
    CHECK_EQ(dt_memory_stats(DT_DEVICE_CPU, ids[1], &cur, &peak), DT_OK);
    CHECK(peak > 0);
    CHECK_EQ(dt_memory_stats(DT_DEVICE_CPU, 123456789, &cur, &peak), DT_OK);
    CHECK_EQ(cur, 0);
    CHECK_EQ(peak, 0);
    dt_graph_release(g);
}

/* A collective waits on a producer held at a gate. */
static void test_gated_producer(void) {
    dt_graph *g = ref_graph();
    const int64_t ids[2] = {10, 1000000000};
    dt_mesh *m = mesh_of(DT_DEVICE_CPU, 2, ids);
    int64_t shape[1] = {N};
    float x[N], want[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)i - 3.0f;
        want[i] = x[i] + 1.0f;
    }
    dt_placement s0 = S(0), r = R();
    dt_debug_gate *gate = NULL;
    CHECK_EQ(dt_debug_gate_create(&gate), DT_OK);
    dt_tensor *t = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, x, sizeof x, m, &s0);
    dt_tensor *held = dt_debug_gated(t, gate);
    dt_tensor *all = dt_redistribute(held, NULL, &r);
    dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, all, dt_scalar_float(1), 0);
    dt_future *f = dt_tensor_fetch(y);
    CHECK(f != NULL);
    CHECK_EQ(dt_future_wait(f, 20), DT_ETIMEDOUT); /* cannot complete: the gate holds the producer */
    CHECK_EQ(dt_future_is_ready(f), 0);
    dt_debug_gate_open(gate);
    CHECK_EQ(dt_future_wait(f, -1), DT_OK);
    float got[N];
    CHECK_EQ(dt_future_read(f, got, sizeof got), DT_OK);
    for (int i = 0; i < N; i++)
        CHECK_FEQ(got[i], want[i]);
    dt_future_release(f);
    dt_tensor_release(y);
    dt_tensor_release(all);
    dt_tensor_release(held);
    dt_tensor_release(t);
    dt_debug_gate_release(gate);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* ------------------------------------------- a second device type (test-only) */

/* The ref backend serving "cuda" ids, with events that count their use. An
 * event here is a flag set by record; waits check it was recorded. */
static atomic_long ev_made, ev_recorded, ev_waited, ev_waited_unrecorded, ev_freed, ev_queried;

static dt_status tev_new(void *stream_ctx, void **ev) {
    (void)stream_ctx;
    atomic_int *e = calloc(1, sizeof *e);
    if (!e)
        return DT_ENOMEM;
    atomic_fetch_add(&ev_made, 1);
    *ev = e;
    return DT_OK;
}
static dt_status tev_record(void *ev, void *stream_ctx) {
    (void)stream_ctx;
    atomic_store((atomic_int *)ev, 1);
    atomic_fetch_add(&ev_recorded, 1);
    return DT_OK;
}
static dt_status tev_wait(void *stream_ctx, void *ev) {
    (void)stream_ctx;
    atomic_fetch_add(&ev_waited, 1);
    if (!atomic_load((atomic_int *)ev))
        atomic_fetch_add(&ev_waited_unrecorded, 1);
    return DT_OK;
}
static int tev_query(void *ev) {
    atomic_fetch_add(&ev_queried, 1);
    return atomic_load((atomic_int *)ev);
}
static void tev_free(void *ev) {
    atomic_fetch_add(&ev_freed, 1);
    free(ev);
}
static int64_t any_device(dt_device_type type) {
    (void)type;
    return -1;
}
static atomic_long streams_made, streams_freed;
static dt_status tstream_new(dt_device_type type, int64_t id, int kind, void **ctx, char *err,
                             size_t errlen) {
    (void)err;
    (void)errlen;
    CHECK_EQ(type, DT_DEVICE_CUDA);
    CHECK(kind == DT_STREAM_COMPUTE || kind == DT_STREAM_COMM);
    int64_t *c = malloc(sizeof *c);
    if (!c)
        return DT_ENOMEM;
    *c = id;
    atomic_fetch_add(&streams_made, 1);
    *ctx = c;
    return DT_OK;
}
static atomic_long streams_entered;
static void tstream_enter(void *ctx) {
    CHECK(ctx != NULL);
    atomic_fetch_add(&streams_entered, 1);
}
static void tstream_free(void *ctx) {
    atomic_fetch_add(&streams_freed, 1);
    free(ctx);
}

static void test_second_device_type(void) {
    static dt__backend fake_cuda;
    fake_cuda = dt__backend_ref;
    fake_cuda.name = "ref-as-cuda";
    fake_cuda.device_count = any_device;
    fake_cuda.api_version = DT_BACKEND_API_VERSION;
    fake_cuda.stream_new = tstream_new;
    fake_cuda.stream_free = tstream_free;
    fake_cuda.stream_enter = tstream_enter;
    fake_cuda.event_new = tev_new;
    fake_cuda.event_record = tev_record;
    fake_cuda.event_wait = tev_wait;
    fake_cuda.event_query = tev_query;
    fake_cuda.event_free = tev_free;

    /* The core's query asks the backend's event once the host count is done. */
    void *ev = NULL;
    CHECK_EQ(tev_new(NULL, &ev), DT_OK);
    dt__blob eb = {.producer = NULL, .bev = ev, .be = &fake_cuda};
    CHECK_EQ(dt__event_query(&eb), 0);
    CHECK_EQ(tev_record(ev, NULL), DT_OK);
    CHECK_EQ(dt__event_query(&eb), 1);
    CHECK_EQ(atomic_load(&ev_queried), 2);
    tev_free(ev);

    dt_graph *g = ref_graph();
    /* Without the hook a CUDA mesh is refused at the call (no GPU here). */
    const int64_t cids[2] = {5, 2147483647};
    dt_mesh *cm = mesh_of(DT_DEVICE_CUDA, 2, cids);
    int64_t shape[1] = {N};
    float x[N], want[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)(i * i % 7) - 2.0f;
    CHECK(dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, x, sizeof x, cm, NULL) == NULL);
    dt__graph_set_backend_for_test(g, DT_DEVICE_CUDA, &fake_cuda);

    const int64_t ids[2] = {0, 1};
    dt_mesh *m = mesh_of(DT_DEVICE_CPU, 2, ids);
    dt_placement s0 = S(0), r = R();
    dt_tensor *t = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, x, sizeof x, m, &s0);
    dt_tensor *on_cuda = dt_redistribute(t, cm, &s0); /* CPU -> cuda: staged pieces */
    dt_tensor *c2 = dt_binary_scalar(DT_BINARY_MUL, on_cuda, dt_scalar_float(2), 0);
    dt_tensor *cr = dt_redistribute(c2, NULL, &r); /* all-gather on cuda's comm streams */
    dt_tensor *c3 = dt_binary_scalar(DT_BINARY_SUB, cr, dt_scalar_float(1), 0); /* waits via events */
    for (int i = 0; i < N; i++)
        want[i] = x[i] * 2 - 1;
    expect_values(c3, want, N, "cuda-typed mesh: 2x - 1");
    dt_tensor *back = dt_redistribute(c3, m, &s0); /* cuda -> CPU: staged */
    dt_tensor *b2 = dt_binary_scalar(DT_BINARY_ADD, back, dt_scalar_float(1), 0);
    for (int i = 0; i < N; i++)
        want[i] = x[i] * 2;
    expect_values(b2, want, N, "back on the CPU mesh: 2x");
    CHECK_EQ(dt_graph_sync(g), DT_OK);
    long run = 0, comm = 0;
    CHECK_EQ(dt__graph_debug_stream(g, DT_DEVICE_CUDA, cids[1], DT_STREAM_COMM, &run, &comm), 0);
    CHECK(comm >= 2); /* the assembly of the CPU pieces and the all-gather */
    CHECK_EQ(dt__graph_debug_stream(g, DT_DEVICE_CPU, cids[1], DT_STREAM_COMPUTE, NULL, NULL), -1);
    CHECK(atomic_load(&ev_recorded) > 0);
    CHECK_EQ(atomic_load(&ev_made), atomic_load(&ev_recorded));
    CHECK(atomic_load(&ev_waited) > 0); /* compute waited on the all-gather's events */
    CHECK_EQ(atomic_load(&ev_waited_unrecorded), 0);
    CHECK_EQ(atomic_load(&streams_made), 4);

    dt_tensor *all[] = {t, on_cuda, c2, cr, c3, back, b2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dt_tensor_release(all[i]);
    dt_mesh_release(cm);
    dt_mesh_release(m);
    dt_graph_release(g);
    CHECK_EQ(atomic_load(&streams_freed), 4);
    CHECK_EQ(atomic_load(&streams_entered), 4);
    CHECK_EQ(atomic_load(&ev_freed), atomic_load(&ev_made));
}

int main(void) {
    test_event_model();
    test_two_streams();
    test_overlap_off();
    test_large_ids();
    test_gated_producer();
    test_second_device_type();
    if (failures) {
        fprintf(stderr, "test_stream: %d failures\n", failures);
        return 1;
    }
    printf("test_stream: ok\n");
    return 0;
}
