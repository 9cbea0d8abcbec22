/*
 * The C API of the creation and data-dependent family on the pure-C 'ref'
 * backend: what randint, cumsum, sort and topk infer at the call (shape,
 * dtype, placements), the statuses of rejected calls, randint's range and
 * placement invariance, and nonzero (which waits, and computes on the client,
 * so it runs on any backend). The torch kernels are tested from Python
 * (tests/python/test_sort_scan.py, test_factories.py). Runs under ASan and
 * TSan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static void test_randint(dt_graph *g, dt_mesh *one, dt_mesh *two) {
    int64_t shape[2] = {5, 7};
    int64_t a[35], b[35];
    dt_placement s1 = S(1);
    dt_manual_seed(9);
    dt_tensor *x = dt_randint(g, DT_INT64, -3, 4, 2, shape, one, NULL);
    dt_manual_seed(9);
    dt_tensor *y = dt_randint(g, DT_INT64, -3, 4, 2, shape, two, &s1);
    check_meta(y, DT_INT64, 2, shape, S(1));
    CHECK(dt_tensor_read(x, a, sizeof a) == DT_OK);
    CHECK(dt_tensor_read(y, b, sizeof b) == DT_OK);
    CHECK(memcmp(a, b, sizeof a) == 0); /* placement-invariant */
    for (int i = 0; i < 35; i++)
        CHECK(a[i] >= -3 && a[i] < 4);
    dt_tensor_release(x);
    dt_tensor_release(y);

    /* Rejected at the call as torch rejects them. */
    CHECK(dt_randint(g, DT_INT64, 4, 4, 2, shape, one, NULL) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_randint(g, DT_UINT8, 0, 257, 2, shape, one, NULL) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_randint(g, DT_INT8, -129, 0, 2, shape, one, NULL) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_randint(g, DT_BOOL, 0, 3, 2, shape, one, NULL) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_randint(g, (dt_dtype)99, 0, 3, 2, shape, one, NULL) == NULL && dt_last_status() == DT_ETYPE);
}

static void test_meta(dt_graph *g, dt_mesh *m) {
    int64_t shape[2] = {4, 6}, s34[2] = {3, 6};
    dt_placement s0 = S(0), s1 = S(1), p = P();
    dt_tensor *x0 = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m, &s0);
    dt_tensor *x1 = dt_full(g, DT_INT32, 2, shape, dt_scalar_int(1), m, &s1);
    dt_tensor *xp = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m, &p);

    dt_tensor *t = dt_cumsum(x0, 0, -1); /* a sharded scan dim keeps its shard */
    check_meta(t, DT_FLOAT32, 2, shape, S(0));
    dt_tensor_release(t);
    t = dt_cumsum(x1, -1, -1); /* integers accumulate in int64 */
    check_meta(t, DT_INT64, 2, shape, S(1));
    dt_tensor_release(t);
    t = dt_cumsum(xp, 1, DT_FLOAT64); /* linear: Partial stays */
    check_meta(t, DT_FLOAT64, 2, shape, P());
    dt_tensor_release(t);
    CHECK(dt_cumsum(xp, 1, DT_INT64) == NULL && dt_last_status() == DT_EPLACEMENT);
    CHECK(dt_cumsum(x0, 2, -1) == NULL && dt_last_status() == DT_EINDEX);

    dt_tensor *v = NULL, *i = NULL;
    CHECK(dt_sort(x0, 0, 1, 1, &v, &i) == DT_OK); /* sorted dim gathered: Replicate */
    check_meta(v, DT_FLOAT32, 2, shape, R());
    check_meta(i, DT_INT64, 2, shape, R());
    dt_tensor_release(v);
    dt_tensor_release(i);
    CHECK(dt_sort(x0, 1, 0, 0, NULL, &i) == DT_OK); /* argsort; other dim's shard stays */
    check_meta(i, DT_INT64, 2, shape, S(0));
    dt_tensor_release(i);
    CHECK(dt_sort(xp, 1, 0, 0, &v, &i) == DT_EPLACEMENT && !v && !i);
    CHECK(dt_sort(x0, 1, 0, 0, NULL, NULL) == DT_EINVAL);

    CHECK(dt_topk(x1, 3, 0, 1, 1, &v, &i) == DT_OK);
    check_meta(v, DT_INT32, 2, s34, S(1));
    check_meta(i, DT_INT64, 2, s34, S(1));
    dt_tensor_release(v);
    dt_tensor_release(i);
    CHECK(dt_topk(x1, 7, 1, 1, 1, &v, &i) == DT_EOP && !v && !i);
    CHECK(dt_topk(x1, -1, 1, 1, 1, &v, &i) == DT_EOP);
    CHECK(dt_topk(xp, 1, 1, 1, 1, &v, &i) == DT_EPLACEMENT);
    CHECK(dt_topk(x1, 1, -3, 1, 1, &v, &i) == DT_EINDEX);

    dt_tensor_release(x0);
    dt_tensor_release(x1);
    dt_tensor_release(xp);
}

static void test_nonzero(dt_graph *g, dt_mesh *m) {
    int64_t shape[2] = {3, 2};
    float data[6] = {0.0f, 1.5f, -0.0f, 0.0f, -2.0f, 3.0f};
    dt_placement s0 = S(0);
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, data, sizeof data, m, &s0);
    dt_tensor *nz = dt_nonzero(x);
    int64_t want_shape[2] = {3, 2};
    check_meta(nz, DT_INT64, 2, want_shape, R());
    int64_t got[6], want[6] = {0, 1, 2, 0, 2, 1};
    CHECK(nz && dt_tensor_read(nz, got, sizeof got) == DT_OK && memcmp(got, want, sizeof got) == 0);
    dt_tensor_release(nz);
    dt_tensor_release(x);

    int64_t z[1] = {0};
    dt_tensor *e = dt_tensor_from_buffer(g, DT_INT64, 1, z + 0, NULL, 0, m, NULL);
    nz = dt_nonzero(e);
    int64_t e_shape[2] = {0, 1};
    check_meta(nz, DT_INT64, 2, e_shape, R());
    dt_tensor_release(nz);
    dt_tensor_release(e);
    CHECK(dt_nonzero(NULL) == NULL && dt_last_status() == DT_EINVAL);
}

int main(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    int64_t mshape[1] = {2}, ids[2] = {0, 1}, one_shape[1] = {1}, one_id[1] = {0};
    dt_mesh *m = NULL, *one = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &m) == DT_OK);
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, one_shape, one_id, NULL, &one) == DT_OK);
    test_randint(g, one, m);
    test_meta(g, m);
    test_nonzero(g, m);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_mesh_release(one);
    dt_mesh_release(m);
    dt_graph_release(g);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
