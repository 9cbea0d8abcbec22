/*
 * Runtime tests through the public C API on the pure-C 'ref' backend: the
 * client->controller queue, the controller's lowering, the workers,
 * collectives, futures, kernel errors, shutdown with work still queued, and
 * many client threads. Runs under ASan/UBSan and TSan (tools/test.sh).
 * Expected values are computed here on the host from the inputs, never by
 * the code under test.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "dtorch/dtorch_ops.h"
#include "test_util.h"

static dt_mesh *mesh1d(int n, int first_id) {
    int64_t shape[1] = {n}, ids[16];
    for (int i = 0; i < n; i++)
        ids[i] = first_id + i;
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m) == DT_OK);
    return m;
}

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

/* Compares a read of t with `want` (n floats); prints both on mismatch. */
static void expect_values(dt_tensor *t, const float *want, int64_t n, const char *what) {
    float *got = calloc((size_t)(n ? n : 1), sizeof *got);
    dt_status st = dt_tensor_read(t, got, (size_t)n * sizeof *got);
    CHECK(st == DT_OK);
    for (int64_t i = 0; st == DT_OK && i < n; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr, "%s: element %lld: got %g, want %g\n", what, (long long)i, got[i], want[i]);
            failures++;
            break;
        }
    }
    free(got);
}

static void fill(float *x, int64_t n, int salt) {
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 7 + salt) % 11) - 5.0f;
}

/* ------------------------------------------------------------- tests */

static void test_elementwise_and_sum(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(3, 0);
    int64_t shape[2] = {5, 7};
    float x[35], y[7], want[35];
    fill(x, 35, 1);
    fill(y, 7, 3);
    dt_placement px[1] = {S(0)}, py[1] = {R()};
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, m, px);
    dt_tensor *b = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape + 1, y, sizeof y, m, py);
    CHECK(a && b);
    dt_tensor *c = dt_binary(DT_BINARY_MUL, a, b); /* (S0, R) broadcast -> S0 */
    CHECK(c && dt_tensor_placements(c)[0].kind == DT_PLACEMENT_SHARD);
    dt_tensor *d = dt_binary_scalar(DT_BINARY_SUB, c, dt_scalar_float(1.5), 1); /* 1.5 - c */
    dt_tensor *e = dt_neg(d);
    for (int i = 0; i < 35; i++)
        want[i] = -(1.5f - x[i] * y[i % 7]);
    expect_values(e, want, 35, "neg(1.5 - a*b)");

    int64_t dim0 = 0;
    dt_tensor *s = dt_sum(e, 1, &dim0, 0); /* S(0) reduced -> Partial */
    CHECK(s && dt_tensor_placements(s)[0].kind == DT_PLACEMENT_PARTIAL);
    float ws[7] = {0};
    for (int i = 0; i < 35; i++)
        ws[i % 7] += want[i];
    expect_values(s, ws, 7, "sum(dim=0)");
    dt_tensor *sr = dt_redistribute(s, NULL, py);
    expect_values(sr, ws, 7, "sum(dim=0) redistributed");

    dt_tensor *all = dt_sum(e, -1, NULL, 0);
    CHECK(all && dt_tensor_ndim(all) == 0);
    float wall = 0;
    for (int i = 0; i < 35; i++)
        wall += want[i];
    expect_values(all, &wall, 1, "sum()");

    dt_tensor *ts[] = {a, b, c, d, e, s, sr, all};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++)
        dt_tensor_release(ts[i]);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* Every source in {R, S0, S1, P} to every target on meshes of 2 and 3. */
static void test_redistribute_all(void) {
    dt_graph *g = ref_graph();
    const int64_t shapes[3][2] = {{6, 4}, {5, 7}, {1, 3}};
    dt_placement all[4] = {R(), S(0), S(1), P()};
    for (int n = 2; n <= 3; n++) {
        dt_mesh *m = mesh1d(n, 10);
        for (int si = 0; si < 3; si++) {
            int64_t numel = shapes[si][0] * shapes[si][1];
            float x[64];
            fill(x, numel, si);
            for (int a = 0; a < 4; a++) {
                dt_tensor *src =
                    dt_tensor_from_buffer(g, DT_FLOAT32, 2, shapes[si], x, (size_t)numel * 4, m, &all[a]);
                CHECK(src);
                for (int b = 0; b < 4; b++) {
                    dt_tensor *dst = dt_redistribute(src, NULL, &all[b]);
                    CHECK(dst);
                    if (!dst)
                        continue;
                    CHECK(dt_tensor_placements(dst)[0].kind == all[b].kind);
                    char what[64];
                    snprintf(what, sizeof what, "mesh %d shape %d: %d -> %d", n, si, a, b);
                    expect_values(dst, x, numel, what);
                    dt_tensor_release(dst);
                }
                dt_tensor_release(src);
            }
        }
        dt_mesh_release(m);
    }
    dt_graph_release(g);
}

static void test_matmul(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(2, 0);
    int64_t sa[2] = {5, 3}, sb[2] = {3, 4};
    float x[15], y[12], want[20] = {0};
    fill(x, 15, 2);
    fill(y, 12, 5);
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 3; k++)
                want[i * 4 + j] += x[i * 3 + k] * y[k * 4 + j];
    dt_placement combos[][3] = {
        {R(), R(), R()},  {S(0), R(), S(0)}, {R(), S(1), S(1)}, {S(1), S(0), P()},
        {S(1), R(), P()}, {R(), S(0), P()},  {P(), R(), P()},   {R(), P(), P()},
    };
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++) {
        dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, sa, x, sizeof x, m, &combos[c][0]);
        dt_tensor *b = dt_tensor_from_buffer(g, DT_FLOAT32, 2, sb, y, sizeof y, m, &combos[c][1]);
        dt_tensor *o = dt_matmul(a, b);
        CHECK(o && dt_tensor_placements(o)[0].kind == combos[c][2].kind);
        if (o)
            expect_values(o, want, 20, "matmul");
        dt_tensor_release(o);
        dt_tensor_release(a);
        dt_tensor_release(b);
    }
    /* A rejected combination: nothing enqueued, a clear error, runtime fine. */
    dt_placement s0[1] = {S(0)};
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, sa, x, sizeof x, m, s0);
    dt_tensor *b = dt_tensor_from_buffer(g, DT_FLOAT32, 2, sb, y, sizeof y, m, s0);
    CHECK(dt_matmul(a, b) == NULL && dt_last_status() == DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "matmul") && strstr(dt_last_error(), "redistribute"));
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* dt_tensor_fetch_local: each device's block as stored, shapes by the torch.chunk rule written
 * here (ceil(5/3) = 2 rows: 2, 2, 1), a Replicate copy on every device, a Partial addend not summed. */
static void test_fetch_local(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(3, 0);
    int64_t shape[2] = {5, 7};
    float x[35];
    fill(x, 35, 2);
    dt_placement ps[1] = {S(0)}, pr[1] = {R()}, pp[1] = {P()};
    dt_tensor *s = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, m, ps);
    dt_tensor *r = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, m, pr);
    dt_tensor *p = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, m, pp);
    CHECK(s && r && p);
    const int64_t rows[3] = {2, 2, 1}, first[3] = {0, 2, 4};
    for (int64_t i = 0; i < 3; i++) {
        float got[35];
        int64_t ls[DT_MAX_NDIM];
        dt_future *f = dt_tensor_fetch_local(s, i);
        CHECK(f && dt_future_shape(f, ls) == 2 && ls[0] == rows[i] && ls[1] == 7);
        CHECK(f && dt_future_read(f, got, (size_t)(rows[i] * 7) * sizeof *got) == DT_OK);
        for (int64_t k = 0; f && k < rows[i] * 7; k++)
            CHECK(got[k] == x[first[i] * 7 + k]);
        dt_future_release(f);
        f = dt_tensor_fetch_local(r, i);
        CHECK(f && dt_future_read(f, got, sizeof got) == DT_OK);
        for (int k = 0; f && k < 35; k++)
            CHECK(got[k] == x[k]);
        dt_future_release(f);
        f = dt_tensor_fetch_local(p, i);
        CHECK(f && dt_future_read(f, got, sizeof got) == DT_OK);
        for (int k = 0; f && k < 35; k++)
            CHECK(got[k] == (i == 0 ? x[k] : 0.0f));
        dt_future_release(f);
    }
    CHECK(dt_tensor_fetch_local(s, 3) == NULL && dt_last_status() == DT_EINDEX);
    CHECK(dt_tensor_fetch_local(s, -1) == NULL && dt_last_status() == DT_EINDEX);
    CHECK(dt_tensor_fetch_local(NULL, 0) == NULL);
    dt_tensor_release(s);
    dt_tensor_release(r);
    dt_tensor_release(p);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* dt_tensor_from_local_buffers: each device gets its own block, as given; a
 * Partial is the sum of the blocks; a block of the wrong size fails before
 * anything is made. */
static void test_from_local(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(3, 0);
    int64_t shape[2] = {5, 7};
    float x[35], pieces[3][35], want[35];
    fill(x, 35, 4);
    /* Shard(0): rows 2, 2, 1 (ceil(5/3) = 2). */
    const int64_t rows[3] = {2, 2, 1}, first[3] = {0, 2, 4};
    const void *data[3];
    size_t nbytes[3];
    for (int i = 0; i < 3; i++) {
        data[i] = x + first[i] * 7;
        nbytes[i] = (size_t)(rows[i] * 7) * sizeof(float);
    }
    dt_placement ps[1] = {S(0)}, pp[1] = {P()};
    dt_tensor *s = dt_tensor_from_local_buffers(g, DT_FLOAT32, 2, shape, m, ps, data, nbytes);
    CHECK(s != NULL);
    expect_values(s, x, 35, "from_local Shard(0)");
    /* Partial: three different addends, summed by the read. */
    for (int i = 0; i < 3; i++) {
        fill(pieces[i], 35, 5 + i);
        data[i] = pieces[i];
        nbytes[i] = sizeof pieces[i];
    }
    for (int k = 0; k < 35; k++)
        want[k] = (pieces[0][k] + pieces[1][k]) + pieces[2][k];
    dt_tensor *p = dt_tensor_from_local_buffers(g, DT_FLOAT32, 2, shape, m, pp, data, nbytes);
    CHECK(p != NULL);
    for (int64_t i = 0; p && i < 3; i++) {
        float got[35];
        dt_future *f = dt_tensor_fetch_local(p, i);
        CHECK(f && dt_future_read(f, got, sizeof got) == DT_OK);
        for (int k = 0; f && k < 35; k++)
            CHECK(got[k] == pieces[i][k]);
        dt_future_release(f);
    }
    expect_values(p, want, 35, "from_local Partial");
    /* A block of the wrong size, or no blocks at all, is DT_EINVAL. */
    nbytes[2] -= sizeof(float);
    CHECK(dt_tensor_from_local_buffers(g, DT_FLOAT32, 2, shape, m, pp, data, nbytes) == NULL &&
          dt_last_status() == DT_EINVAL);
    CHECK(dt_tensor_from_local_buffers(g, DT_FLOAT32, 2, shape, m, pp, NULL, nbytes) == NULL &&
          dt_last_status() == DT_EINVAL);
    dt_tensor_release(s);
    dt_tensor_release(p);
    dt_mesh_release(m);
    dt_graph_release(g);
}

static void test_bad_input(void) {
    dt_graph *g = ref_graph();
    int64_t shape1[1] = {2}, dup[2] = {1, 1};
    dt_mesh *bad = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape1, dup, NULL, &bad) == DT_EINVAL && !bad);
    CHECK(strstr(dt_last_error(), "unique"));
    dt_mesh *m = mesh1d(2, 0);
    int64_t shape[2] = {2, 3};
    float x[6] = {1, 2, 3, 4, 5, 6};
    dt_placement s5[1] = {S(5)};
    CHECK(!dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, m, s5) &&
          dt_last_status() == DT_EINVAL);
    CHECK(!dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, 5, m, NULL) && dt_last_status() == DT_EINVAL);
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, m, NULL);
    int64_t shape2[1] = {4};
    dt_tensor *b = dt_full(g, DT_FLOAT32, 1, shape2, dt_scalar_float(1), m, NULL);
    CHECK(!dt_binary(DT_BINARY_ADD, a, b) && dt_last_status() == DT_ESHAPE);
    int64_t dim9 = 9;
    CHECK(!dt_sum(a, 1, &dim9, 0) && dt_last_status() == DT_EINDEX);
    /* Still working. */
    dt_tensor *c = dt_binary_scalar(DT_BINARY_ADD, a, dt_scalar_int(1), 0);
    float want[6] = {2, 3, 4, 5, 6, 7};
    expect_values(c, want, 6, "after errors");
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_tensor_release(c);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* The binary-call memo must not let a plan made for one graph's tensors
 * accept a tensor of another graph with the same layout. */
static void test_memo_keeps_graph_check(void) {
    dt_graph *g1 = ref_graph(), *g2 = ref_graph();
    dt_mesh *m = mesh1d(2, 0);
    int64_t shape[1] = {4};
    dt_tensor *a = dt_full(g1, DT_FLOAT32, 1, shape, dt_scalar_float(1), m, NULL);
    dt_tensor *b = dt_full(g2, DT_FLOAT32, 1, shape, dt_scalar_float(1), m, NULL);
    for (int i = 0; i < 2; i++) {
        dt_tensor *c = dt_binary(DT_BINARY_ADD, a, a);
        CHECK(c);
        dt_tensor_release(c);
        CHECK(!dt_binary(DT_BINARY_ADD, a, b) && dt_last_status() == DT_EINVAL);
    }
    /* Values dropped after a shutdown are freed by the releasing thread. */
    dt_tensor *d = dt_binary(DT_BINARY_ADD, b, b);
    CHECK(dt_graph_shutdown(g2) == DT_OK);
    dt_tensor_release(d);
    dt_tensor_release(a);
    dt_tensor_release(b);
    dt_mesh_release(m);
    dt_graph_release(g1);
    dt_graph_release(g2);
}

/* A kernel that fails poisons its outputs; the read names op and call site. */
static void test_kernel_error(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(2, 0);
    int64_t shape[1] = {4};
    dt_set_call_site("test_runtime.c", 4242);
    /* The ref backend has no float16 arithmetic: the kernel fails. */
    dt_tensor *h = dt_full(g, DT_FLOAT16, 1, shape, dt_scalar_float(1), m, NULL);
    dt_tensor *h2 = dt_neg(h);
    dt_tensor *h3 = dt_binary_scalar(DT_BINARY_MUL, h2, dt_scalar_int(2), 0);
    dt_set_call_site(NULL, 0);
    uint16_t buf[4];
    CHECK(dt_tensor_read(h3, buf, sizeof buf) == DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "test_runtime.c:4242") != NULL);
    CHECK(strstr(dt_last_error(), "cpu:") != NULL);
    /* Unaffected work continues. */
    dt_tensor *ok = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), m, NULL);
    float want[4] = {2, 2, 2, 2};
    expect_values(ok, want, 4, "after kernel error");
    dt_tensor_release(h);
    dt_tensor_release(h2);
    dt_tensor_release(h3);
    dt_tensor_release(ok);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* Shutting down with thousands of ops queued finishes cleanly. */
static void test_shutdown_with_work_queued(void) {
    for (int round = 0; round < 3; round++) {
        dt_graph *g = ref_graph();
        dt_mesh *m = mesh1d(4, 0);
        int64_t shape[1] = {64};
        dt_placement s0[1] = {S(0)};
        dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(1), m, s0);
        for (int i = 0; i < 2000; i++) {
            dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, x, dt_scalar_float(1), 0);
            dt_tensor_release(x);
            x = y;
        }
        dt_future *f = dt_tensor_fetch(x);
        if (round == 0) {
            CHECK(dt_graph_shutdown(g) == DT_OK);
            /* After shutdown: ops fail cleanly, releases are harmless. */
            CHECK(dt_neg(x) == NULL && dt_last_status() == DT_ESHUTDOWN);
            float want[64];
            for (int i = 0; i < 64; i++)
                want[i] = 2001;
            float got[64];
            CHECK(dt_future_read(f, got, sizeof got) == DT_OK && memcmp(got, want, sizeof got) == 0);
        }
        dt_future_release(f);
        dt_tensor_release(x);
        dt_mesh_release(m);
        dt_graph_release(g); /* rounds 1-2: shutdown through the last release */
    }
}

/* Several client threads on one graph and on their own graphs at once. */
typedef struct worker_arg {
    dt_graph *g;
    int seed;
} worker_arg;

static void *client_thread(void *p) {
    worker_arg *w = p;
    dt_mesh *m = mesh1d(3, 3 * (w->seed % 2));
    int64_t shape[2] = {7, 5};
    float x[35], want[35];
    fill(x, 35, w->seed);
    dt_placement s1[1] = {S(1)}, r[1] = {R()};
    for (int it = 0; it < 30; it++) {
        dt_tensor *a = dt_tensor_from_buffer(w->g, DT_FLOAT32, 2, shape, x, sizeof x, m, s1);
        dt_tensor *b = dt_binary(DT_BINARY_ADD, a, a);
        dt_tensor *c = dt_redistribute(b, NULL, r);
        for (int i = 0; i < 35; i++)
            want[i] = x[i] + x[i];
        expect_values(c, want, 35, "thread");
        dt_tensor_release(a);
        dt_tensor_release(b);
        dt_tensor_release(c);
    }
    dt_mesh_release(m);
    return NULL;
}

static void test_many_threads(void) {
    dt_graph *shared = ref_graph();
    dt_graph *own[2] = {ref_graph(), ref_graph()};
    pthread_t th[6];
    worker_arg args[6];
    for (int i = 0; i < 6; i++) {
        args[i] = (worker_arg){i < 4 ? shared : own[i - 4], i};
        pthread_create(&th[i], NULL, client_thread, &args[i]);
    }
    for (int i = 0; i < 6; i++)
        pthread_join(th[i], NULL);
    CHECK(dt_graph_sync(shared) == DT_OK);
    dt_graph_release(shared);
    dt_graph_release(own[0]);
    dt_graph_release(own[1]);
}

static void test_futures(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(2, 0);
    int64_t shape[1] = {3};
    dt_tensor *x = dt_arange(g, DT_FLOAT32, 0, 3, 1, m, NULL);
    dt_future *f = dt_tensor_fetch(x);
    CHECK(dt_future_wait(f, 10000) == DT_OK && dt_future_is_ready(f));
    float got[3], want[3] = {0, 1, 2};
    CHECK(dt_future_read(f, got, sizeof got) == DT_OK && memcmp(got, want, sizeof got) == 0);
    CHECK(dt_future_read(f, got, 4) == DT_EINVAL);
    dt_future_release(f);
    dt_future *s = dt_graph_sync_future(g);
    CHECK(dt_future_wait(s, -1) == DT_OK && dt_future_status(s) == DT_OK);
    dt_future_release(s);
    (void)shape;
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* More ops than the pipeline's bound (DT_BACKLOG_MAX): the client waits for
 * the workers to drain instead of queueing without limit, and nothing hangs,
 * including collectives and reads in the middle of the stream. */
static void test_backlog_bound(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(2, 0);
    int64_t shape[1] = {8};
    dt_placement s0[1] = {S(0)}, r[1] = {R()};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(0), m, s0);
    int n = 3 * 16384 + 7;
    for (int i = 0; i < n; i++) {
        dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, x, dt_scalar_float(1), 0);
        dt_tensor_release(x);
        x = y;
        if (i % 10000 == 5000) {
            dt_tensor *z = dt_redistribute(x, NULL, r);
            dt_tensor *w = dt_redistribute(z, NULL, s0);
            dt_tensor_release(x);
            dt_tensor_release(z);
            x = w;
        }
    }
    float want[8];
    for (int i = 0; i < 8; i++)
        want[i] = (float)n;
    expect_values(x, want, 8, "backlog");
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* Meshes of up to DT_MAX_MESH_NDIM (8) dims run ops; devices the backend
 * lacks (CUDA on 'ref') and sizes torch rejects fail at the call. */
static void test_mesh_rank_and_devices(void) {
    dt_graph *g = ref_graph();
    int64_t shape8[8] = {2, 1, 2, 1, 1, 2, 1, 1}, ids[8];
    for (int i = 0; i < 8; i++)
        ids[i] = 7 - i;
    dt_mesh *m8 = NULL;
    CHECK(DT_MAX_MESH_NDIM == 8);
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 8, shape8, ids, NULL, &m8) == DT_OK && dt_mesh_ndim(m8) == 8);
    CHECK(dt_graph_satisfy(g, m8) == 1);
    int64_t shape9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1}, id0 = 0;
    dt_mesh *m9 = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 9, shape9, &id0, NULL, &m9) == DT_EINVAL && !m9);
    /* (4, 6) sharded by mesh dims 0 and 5 on tensor dim 1 (nested) and by 2 on dim 0. */
    float x[24];
    fill(x, 24, 3);
    int64_t shape[2] = {4, 6};
    dt_placement pl[8] = {S(1), R(), S(0), R(), R(), S(1), R(), R()};
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, m8, pl);
    CHECK(a != NULL);
    int64_t dim0 = 0;
    dt_tensor *s = dt_sum(a, 1, &dim0, 0);
    float want[6] = {0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++)
            want[j] += x[i * 6 + j];
    expect_values(s, want, 6, "sum on an 8-dim mesh");
    dt_tensor *r = dt_redistribute(a, NULL, NULL);
    expect_values(r, x, 24, "redistribute on an 8-dim mesh");
    /* A CUDA mesh on the ref backend: refused at the call, naming the device. */
    dt_mesh *cuda = NULL;
    int64_t one = 1, id3 = 3;
    CHECK(dt_mesh_create(DT_DEVICE_CUDA, 1, &one, &id3, NULL, &cuda) == DT_OK);
    CHECK(dt_graph_satisfy(g, cuda) == 0 && dt_graph_satisfy(NULL, cuda) == 0);
    CHECK(!dt_full(g, DT_FLOAT32, 1, &one, dt_scalar_float(1), cuda, NULL) && dt_last_status() == DT_EDEVICE);
    CHECK(strstr(dt_last_error(), "cuda:3") != NULL);
    CHECK(!dt_tensor_from_buffer(g, DT_FLOAT32, 1, &one, x, sizeof x[0], cuda, NULL) &&
          dt_last_status() == DT_EDEVICE);
    CHECK(!dt_redistribute(s, cuda, NULL) && dt_last_status() == DT_EDEVICE);
    /* Negative sizes and element counts past int64 are torch's RuntimeErrors (DT_EOP). */
    int64_t neg[2] = {2, -1}, huge[2] = {(int64_t)1 << 62, 4}, bytes[2] = {(int64_t)1 << 61, 2};
    CHECK(!dt_full(g, DT_FLOAT32, 2, neg, dt_scalar_float(0), m8, NULL) && dt_last_status() == DT_EOP);
    CHECK(!dt_empty(g, DT_FLOAT32, 2, huge, m8, NULL) && dt_last_status() == DT_EOP);
    CHECK(!dt_empty(g, DT_FLOAT64, 2, bytes, m8, NULL) && dt_last_status() == DT_EOP);
    CHECK(strstr(dt_last_error(), "overflow") != NULL);
    dt_tensor_release(a);
    dt_tensor_release(s);
    dt_tensor_release(r);
    dt_mesh_release(cuda);
    dt_mesh_release(m8);
    dt_graph_release(g);
}

/* User kernels (dt_user_op) on the ref backend, which has no DLPack: the
 * call records, the read fails with DT_EKERNEL naming the kernel and the
 * backend, the function is never called, and release runs exactly once,
 * also for a refused call; the graph goes on. (The torch backend runs them:
 * tests/python/test_local_map.py.) */
static atomic_int user_runs, user_releases;

static dt_status user_never(void *ctx, int64_t rank, int n_in, void *const *in_dl, void **out_dl, char *err,
                            size_t errlen) {
    (void)ctx, (void)rank, (void)n_in, (void)in_dl, (void)out_dl, (void)err, (void)errlen;
    atomic_fetch_add(&user_runs, 1);
    return DT_EKERNEL;
}

static void user_release(void *ctx) {
    CHECK(ctx == &user_runs);
    atomic_fetch_add(&user_releases, 1);
}

static void test_user_kernel_without_dlpack(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1d(2, 0);
    int64_t shape[1] = {4};
    float x[4] = {1, 2, 3, 4};
    dt_placement s0[1] = {{DT_PLACEMENT_SHARD, 0}};
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, x, sizeof x, m, s0);
    dt_user_kernel uk = {"mine", user_never, user_release, &user_runs};
    dt_tensor *y = dt_user_op(g, &uk, &a, 1, DT_FLOAT32, 1, shape, NULL, s0);
    CHECK(y != NULL);
    float got[4];
    CHECK(dt_tensor_read(y, got, sizeof got) == DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "mine failed") != NULL && strstr(dt_last_error(), "DLPack") != NULL);
    dt_tensor_release(y);
    /* Refused at the call (a 2-D shape with a Shard of dim 3): release still runs, nothing is recorded. */
    int64_t bad_shape[2] = {4, 1};
    dt_placement s3[1] = {{DT_PLACEMENT_SHARD, 3}};
    CHECK(dt_user_op(g, &uk, &a, 1, DT_FLOAT32, 2, bad_shape, NULL, s3) == NULL);
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK(atomic_load(&user_runs) == 0);
    CHECK(atomic_load(&user_releases) == 2);
    CHECK(dt_user_kernel_stream() == NULL); /* only a running user kernel's thread has one */
    float want[4] = {2, 3, 4, 5};
    dt_tensor *b = dt_binary_scalar(DT_BINARY_ADD, a, dt_scalar_float(1.0), 0);
    expect_values(b, want, 4, "user kernel: the graph goes on");
    dt_tensor_release(b);
    dt_tensor_release(a);
    dt_mesh_release(m);
    dt_graph_release(g);
}

int main(void) {
    test_elementwise_and_sum();
    test_redistribute_all();
    test_matmul();
    test_bad_input();
    test_mesh_rank_and_devices();
    test_memo_keeps_graph_check();
    test_kernel_error();
    test_fetch_local();
    test_from_local();
    test_shutdown_with_work_queued();
    test_many_threads();
    test_futures();
    test_backlog_bound();
    test_user_kernel_without_dlpack();
    if (failures) {
        fprintf(stderr, "test_runtime: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_runtime: all passed\n");
    return 0;
}
