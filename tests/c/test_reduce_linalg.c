/*
 * The C API of the reductions and linear algebra families on the pure-C 'ref'
 * backend: what the client infers at the call (shape, dtype, placements),
 * the statuses of rejected calls, and values where the ref backend computes
 * them (sum, 2-D matmul). The torch kernels are tested from Python
 * (tests/python/test_reduce.py, test_linalg.py). Runs under ASan and TSan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static dt_tensor *ones(dt_graph *g, dt_dtype dt, int ndim, const int64_t *shape, dt_mesh *m, dt_placement p) {
    dt_tensor *t = dt_full(g, dt, ndim, shape, dt_scalar_int(1), m, &p);
    CHECK(t != NULL);
    return t;
}

static void test_reduce(dt_graph *g, dt_mesh *m) {
    int64_t shape[2] = {4, 6}, d1 = 1, d0 = 0, dims01[2] = {0, -1};
    dt_tensor *x = ones(g, DT_FLOAT32, 2, shape, m, S(1));
    int64_t s4[1] = {4}, s6[1] = {6}, s41[2] = {4, 1};

    dt_tensor *t = dt_reduce(DT_REDUCE_AMAX, x, 1, &d1, 0, -1); /* gathered by the op */
    check_meta(t, DT_FLOAT32, 1, s4, R());
    dt_tensor_release(t);
    t = dt_reduce(DT_REDUCE_MEAN, x, 1, &d1, 1, -1); /* local sum / global count */
    check_meta(t, DT_FLOAT32, 2, s41, P());
    dt_tensor_release(t);
    t = dt_reduce(DT_REDUCE_ARGMAX, x, 1, &d0, 0, -1); /* a kept shard stays */
    check_meta(t, DT_INT64, 1, s6, S(0));
    dt_tensor_release(t);
    t = dt_reduce(DT_REDUCE_ANY, x, 2, dims01, 0, -1);
    check_meta(t, DT_BOOL, 0, NULL, R());
    dt_tensor_release(t);
    t = dt_reduce(DT_REDUCE_PROD, x, -1, NULL, 0, DT_FLOAT64);
    check_meta(t, DT_FLOAT64, 0, NULL, R());
    dt_tensor_release(t);

    dt_tensor *v = NULL, *i = NULL;
    CHECK(dt_reduce_with_indices(DT_REDUCE_MAX, x, -1, 0, &v, &i) == DT_OK);
    check_meta(v, DT_FLOAT32, 1, s4, R());
    check_meta(i, DT_INT64, 1, s4, R());
    dt_tensor_release(v);
    dt_tensor_release(i);

    /* Rejected at the call, nothing returned. */
    CHECK(dt_reduce_with_indices(DT_REDUCE_SUM, x, 0, 0, &v, &i) == DT_EINVAL && !v && !i);
    int64_t d9 = 9;
    CHECK(!dt_reduce(DT_REDUCE_AMIN, x, 1, &d9, 0, -1) && dt_last_status() == DT_EINDEX);
    CHECK(!dt_reduce(DT_REDUCE_PROD, x, 2, dims01, 0, -1) && dt_last_status() == DT_ETYPE);
    CHECK(!dt_reduce(DT_REDUCE_AMAX, x, -1, NULL, 0, DT_FLOAT64) && dt_last_status() == DT_ETYPE);
    dt_tensor *xi = ones(g, DT_INT64, 2, shape, m, R());
    CHECK(!dt_reduce(DT_REDUCE_MEAN, xi, -1, NULL, 0, -1) && dt_last_status() == DT_EOP);
    dt_tensor *xp = ones(g, DT_FLOAT32, 2, shape, m, P());
    CHECK(!dt_reduce(DT_REDUCE_AMAX, xp, -1, NULL, 0, -1) && dt_last_status() == DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "amax") && strstr(dt_last_error(), "redistribute"));
    CHECK(!dt_reduce(DT_REDUCE_SUM, xp, -1, NULL, 0, DT_INT64) && dt_last_status() == DT_EPLACEMENT);
    t = dt_reduce(DT_REDUCE_SUM, xp, 1, &d0, 0, -1);
    check_meta(t, DT_FLOAT32, 1, s6, P());

    /* sum on the ref backend: a Partial read adds the pieces. */
    float got[6], want[6] = {4, 4, 4, 4, 4, 4};
    CHECK(dt_tensor_read(t, got, sizeof got) == DT_OK);
    CHECK(memcmp(got, want, sizeof got) == 0);
    dt_tensor_release(t);
    dt_tensor_release(xi);
    dt_tensor_release(xp);
    dt_tensor_release(x);
}

static void test_linalg(dt_graph *g, dt_mesh *m) {
    int64_t sx[3] = {2, 4, 3}, sw[2] = {5, 3}, sb[1] = {5}, s245[3] = {2, 4, 5};
    dt_tensor *x = ones(g, DT_FLOAT32, 3, sx, m, R());
    dt_tensor *w = ones(g, DT_FLOAT32, 2, sw, m, S(0));
    dt_tensor *b = ones(g, DT_FLOAT32, 1, sb, m, R());
    dt_tensor *t = dt_linear(x, w, b); /* column parallel */
    check_meta(t, DT_FLOAT32, 3, s245, S(2));
    dt_tensor_release(t);
    dt_tensor *xk = ones(g, DT_FLOAT32, 3, sx, m, S(2));
    dt_tensor *wk = ones(g, DT_FLOAT32, 2, sw, m, S(1));
    t = dt_linear(xk, wk, b); /* row parallel: bias on the first coordinate */
    check_meta(t, DT_FLOAT32, 3, s245, P());
    dt_tensor_release(t);
    CHECK(!dt_linear(xk, w, NULL) && dt_last_status() == DT_EPLACEMENT);
    /* A module's linear: the same layouts and checks (only the product's
     * kind differs, in the LibTorch kernel). */
    t = dt_linear_param(xk, wk, b);
    check_meta(t, DT_FLOAT32, 3, s245, P());
    dt_tensor_release(t);
    CHECK(!dt_linear_param(xk, w, NULL) && dt_last_status() == DT_EPLACEMENT);

    int64_t sa[3] = {2, 4, 3}, sbb[3] = {2, 3, 6}, s246[3] = {2, 4, 6};
    dt_tensor *a = ones(g, DT_FLOAT32, 3, sa, m, S(0));
    dt_tensor *c = ones(g, DT_FLOAT32, 3, sbb, m, S(0));
    t = dt_matmul(a, c);
    check_meta(t, DT_FLOAT32, 3, s246, S(0));
    dt_tensor_release(t);
    dt_tensor *ops[2] = {a, c};
    t = dt_einsum("bij,bjk->bik", 2, ops);
    check_meta(t, DT_FLOAT32, 3, s246, S(0));
    dt_tensor_release(t);
    t = dt_einsum("bij,bjk", 2, ops); /* implicit output: b appears twice, so it is summed */
    int64_t s46[2] = {4, 6};
    check_meta(t, DT_FLOAT32, 2, s46, P());
    dt_tensor_release(t);
    CHECK(!dt_einsum("bij,bjk->bz", 2, ops) && dt_last_status() == DT_EOP);
    CHECK(!dt_einsum("bij,bjk->bik", 1, ops) && dt_last_status() == DT_EOP);
    dt_tensor *three[3] = {a, c, c};
    CHECK(!dt_einsum("a,b,c", 3, three) && dt_last_status() == DT_EUNSUPPORTED);
    CHECK(!dt_bmm(a, a) && dt_last_status() == DT_ESHAPE);
    CHECK(!dt_mm(a, c) && dt_last_status() == DT_EOP);
    dt_tensor_release(a);
    dt_tensor_release(c);

    /* 2-D matmul values on the ref backend, K sharded: a Partial read. */
    int64_t s23[2] = {2, 3}, s32[2] = {3, 2};
    dt_tensor *p = ones(g, DT_FLOAT32, 2, s23, m, S(1));
    dt_tensor *q = ones(g, DT_FLOAT32, 2, s32, m, S(0));
    t = dt_matmul(p, q);
    float got[4], want[4] = {3, 3, 3, 3};
    CHECK(t && dt_tensor_placements(t)[0].kind == DT_PLACEMENT_PARTIAL);
    CHECK(t && dt_tensor_read(t, got, sizeof got) == DT_OK && memcmp(got, want, sizeof got) == 0);
    dt_tensor_release(t);
    dt_tensor_release(p);
    dt_tensor_release(q);
    dt_tensor_release(x);
    dt_tensor_release(w);
    dt_tensor_release(b);
    dt_tensor_release(xk);
    dt_tensor_release(wk);
}

int main(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    int64_t mshape[1] = {2}, ids[2] = {0, 1};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &m) == DT_OK);
    test_reduce(g, m);
    test_linalg(g, m);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_mesh_release(m);
    dt_graph_release(g);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
