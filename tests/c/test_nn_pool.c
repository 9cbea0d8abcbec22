/*
 * The C API of 2-D pooling (src/ops/nn_pool.c) on the pure-C 'ref' backend:
 * what max_pool2d, avg_pool2d and the adaptive forms infer at the call
 * (shape, dtype, placements), and the statuses of the calls torch rejects.
 * The ref backend has no pooling kernels, so the values are tested from
 * Python against eager torch (tests/python/test_pooling.py); the lowering
 * still runs here (the kernels fail and poison their outputs), under ASan
 * and TSan.
 */
#include <stdio.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static void check_meta2(dt_tensor *t, dt_dtype dt, int ndim, const int64_t *shape, dt_placement p0,
                        dt_placement p1) {
    check_meta(t, dt, ndim, shape, p0);
    if (t)
        CHECK(same(dt_tensor_placements(t)[1], p1));
}

static void test_max(dt_graph *g, dt_mesh *m) {
    int64_t shape[4] = {5, 3, 7, 9};
    dt_placement s0 = S(0), s1 = S(1), s2 = S(2), p = P();
    dt_tensor *x0 = dt_full(g, DT_FLOAT32, 4, shape, dt_scalar_int(1), m, &s0);
    dt_tensor *x1 = dt_full(g, DT_INT64, 4, shape, dt_scalar_int(1), m, &s1);
    dt_tensor *x2 = dt_full(g, DT_FLOAT32, 4, shape, dt_scalar_int(1), m, &s2);
    dt_tensor *xp = dt_full(g, DT_FLOAT32, 4, shape, dt_scalar_int(1), m, &p);
    dt_tensor *xb = dt_full(g, DT_BOOL, 4, shape, dt_scalar_int(1), m, NULL);
    int64_t k3[2] = {3, 3}, s2x[2] = {2, 2}, p1[2] = {1, 1}, p0[2] = {0, 0}, d1[2] = {1, 1};
    dt_tensor *v = NULL, *i = NULL;

    int64_t want[4] = {5, 3, 4, 5};
    CHECK(dt_max_pool2d(x0, k3, s2x, p1, d1, 0, &v, &i) == DT_OK);
    check_meta(v, DT_FLOAT32, 4, want, S(0));
    check_meta(i, DT_INT64, 4, want, S(0));
    dt_tensor_release(v);
    dt_tensor_release(i);
    /* stride NULL is kernel_size; ceil_mode rounds up. */
    int64_t want2[4] = {5, 3, 3, 3};
    CHECK(dt_max_pool2d(x1, k3, NULL, p0, d1, 1, &v, NULL) == DT_OK);
    check_meta(v, DT_INT64, 4, want2, S(1));
    dt_tensor_release(v);

    /* Spatial shards and Partial are placement errors; the out-parameters stay NULL. */
    CHECK(dt_max_pool2d(x2, k3, NULL, p0, d1, 0, &v, &i) == DT_EPLACEMENT && !v && !i);
    CHECK(strstr(dt_last_error(), "redistribute(placements=[Replicate()])") != NULL);
    CHECK(dt_max_pool2d(xp, k3, NULL, p0, d1, 0, &v, NULL) == DT_EPLACEMENT && !v);

    /* torch's argument errors. */
    int64_t k0[2] = {0, 0}, kneg[2] = {-1, 2}, sneg[2] = {1, -1}, d0[2] = {0, 1}, p2[2] = {2, 2},
            pneg[2] = {-1, 0};
    int64_t k8[2] = {8, 8}, k13[2] = {1, 3};
    CHECK(dt_max_pool2d(x0, k0, NULL, p0, d1, 0, &v, NULL) == DT_EOP); /* stride 0 */
    CHECK(strstr(dt_last_error(), "stride should not be zero") != NULL);
    CHECK(dt_max_pool2d(x0, kneg, d1, p0, d1, 0, &v, NULL) == DT_EOP);
    CHECK(strstr(dt_last_error(), "kernel size should be greater than zero") != NULL);
    CHECK(dt_max_pool2d(x0, k3, sneg, p0, d1, 0, &v, NULL) == DT_EOP);
    CHECK(dt_max_pool2d(x0, k3, NULL, p0, d0, 0, &v, NULL) == DT_EOP);
    CHECK(dt_max_pool2d(x0, k3, NULL, p2, d1, 0, &v, NULL) == DT_EOP);
    CHECK(strstr(dt_last_error(), "at most half of effective kernel size") != NULL);
    CHECK(dt_max_pool2d(x0, k3, NULL, pneg, d1, 0, &v, NULL) == DT_EOP);
    CHECK(dt_max_pool2d(x0, k8, NULL, p0, d1, 0, &v, NULL) == DT_EOP);
    CHECK(strstr(dt_last_error(), "Output size is too small") != NULL);
    CHECK(dt_max_pool2d(x0, k13, NULL, p1, d1, 0, &v, NULL) == DT_EOP);
    CHECK(dt_max_pool2d(xb, k3, NULL, p0, d1, 0, &v, NULL) == DT_EUNSUPPORTED);
    CHECK(dt_max_pool2d(x0, k3, NULL, p0, d1, 0, NULL, NULL) == DT_EINVAL);
    CHECK(dt_max_pool2d(NULL, k3, NULL, p0, d1, 0, &v, NULL) == DT_EINVAL);
    CHECK(dt_max_pool2d(x0, NULL, NULL, p0, d1, 0, &v, NULL) == DT_EINVAL);
    int64_t huge[2] = {INT64_MAX, 1};
    CHECK(dt_max_pool2d(x0, huge, NULL, p0, d1, 0, &v, NULL) == DT_EOP);

    int64_t shape2[2] = {7, 9};
    dt_tensor *y = dt_full(g, DT_FLOAT32, 2, shape2, dt_scalar_int(1), m, NULL);
    CHECK(dt_max_pool2d(y, k3, NULL, p0, d1, 0, &v, NULL) == DT_EOP);
    dt_tensor_release(y);
    dt_tensor *xs[] = {x0, x1, x2, xp, xb};
    for (size_t j = 0; j < sizeof xs / sizeof xs[0]; j++)
        dt_tensor_release(xs[j]);
}

static void test_avg_and_adaptive(dt_graph *g, dt_mesh *m, dt_mesh *m2) {
    int64_t shape[3] = {7, 6, 8};
    dt_placement s0 = S(0), p = P();
    dt_tensor *x = dt_full(g, DT_FLOAT32, 3, shape, dt_scalar_int(1), m, &s0);
    dt_tensor *xp = dt_full(g, DT_FLOAT32, 3, shape, dt_scalar_int(1), m, &p);
    dt_tensor *xi = dt_full(g, DT_INT64, 3, shape, dt_scalar_int(1), m, &p);
    dt_tensor *x32 = dt_full(g, DT_INT32, 3, shape, dt_scalar_int(1), m, NULL);
    int64_t k2[2] = {2, 2}, s1[2] = {1, 2}, p1[2] = {1, 0}, div = 3, zero = 0;

    int64_t want[3] = {7, 7, 4};
    dt_tensor *t = dt_avg_pool2d(x, k2, s1, p1, 1, 0, &div);
    check_meta(t, DT_FLOAT32, 3, want, S(0));
    dt_tensor_release(t);
    t = dt_avg_pool2d(xp, k2, s1, p1, 0, 1, NULL); /* linear: Partial stays */
    int64_t want2[3] = {7, 7, 4};
    check_meta(t, DT_FLOAT32, 3, want2, P());
    dt_tensor_release(t);
    CHECK(dt_avg_pool2d(xi, k2, NULL, p1, 0, 1, NULL) == NULL && dt_last_status() == DT_EPLACEMENT);
    CHECK(dt_avg_pool2d(x, k2, NULL, p1, 0, 1, &zero) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_avg_pool2d(x32, k2, NULL, p1, 0, 1, NULL) == NULL && dt_last_status() == DT_EUNSUPPORTED);
    int64_t shape2[2] = {4, 4};
    dt_tensor *y = dt_full(g, DT_FLOAT32, 2, shape2, dt_scalar_int(1), m, NULL);
    CHECK(dt_avg_pool2d(y, k2, NULL, p1, 0, 1, NULL) == NULL && dt_last_status() == DT_EINDEX);

    int64_t o23[2] = {2, 3}, o11[2] = {1, 1}, oneg[2] = {-1, 2};
    int64_t want3[3] = {7, 2, 3}, want4[3] = {7, 1, 1}, want5[2] = {1, 1};
    t = dt_adaptive_avg_pool2d(xp, o23);
    check_meta(t, DT_FLOAT32, 3, want3, P());
    dt_tensor_release(t);
    t = dt_adaptive_avg_pool2d(y, o11); /* the mean path takes 2-D input */
    check_meta(t, DT_FLOAT32, 2, want5, R());
    dt_tensor_release(t);
    CHECK(dt_adaptive_avg_pool2d(y, o23) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_adaptive_avg_pool2d(x, oneg) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_adaptive_avg_pool2d(x32, o11) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_adaptive_avg_pool2d(x32, o23) == NULL && dt_last_status() == DT_EUNSUPPORTED);

    dt_tensor *v = NULL, *i = NULL;
    CHECK(dt_adaptive_max_pool2d(x, o11, &v, &i) == DT_OK);
    check_meta(v, DT_FLOAT32, 3, want4, S(0));
    check_meta(i, DT_INT64, 3, want4, S(0));
    dt_tensor_release(v);
    dt_tensor_release(i);
    CHECK(dt_adaptive_max_pool2d(xp, o11, &v, &i) == DT_EPLACEMENT && !v && !i);
    CHECK(dt_adaptive_max_pool2d(x, oneg, &v, NULL) == DT_EOP);
    CHECK(dt_adaptive_max_pool2d(y, o11, &v, NULL) == DT_EOP);
    CHECK(dt_adaptive_max_pool2d(x32, o11, &v, NULL) == DT_EUNSUPPORTED);

    /* 2x2: nested batch shards and a channel shard pass; H sharded does not. */
    int64_t shape4[4] = {5, 6, 4, 4};
    dt_placement nest[2] = {S(0), S(0)}, bc[2] = {S(1), S(0)}, bad[2] = {S(0), S(2)}, pp[2] = {P(), S(1)};
    dt_tensor *a = dt_full(g, DT_FLOAT32, 4, shape4, dt_scalar_int(1), m2, nest);
    dt_tensor *b = dt_full(g, DT_FLOAT32, 4, shape4, dt_scalar_int(1), m2, bc);
    dt_tensor *c = dt_full(g, DT_FLOAT32, 4, shape4, dt_scalar_int(1), m2, bad);
    dt_tensor *d = dt_full(g, DT_FLOAT32, 4, shape4, dt_scalar_int(1), m2, pp);
    int64_t want6[4] = {5, 6, 2, 2};
    t = dt_avg_pool2d(a, k2, NULL, (int64_t[2]){0, 0}, 0, 1, NULL);
    check_meta2(t, DT_FLOAT32, 4, want6, S(0), S(0));
    dt_tensor_release(t);
    CHECK(dt_max_pool2d(b, k2, NULL, (int64_t[2]){0, 0}, (int64_t[2]){1, 1}, 0, &v, &i) == DT_OK);
    check_meta2(v, DT_FLOAT32, 4, want6, S(1), S(0));
    check_meta2(i, DT_INT64, 4, want6, S(1), S(0));
    dt_tensor_release(v);
    dt_tensor_release(i);
    CHECK(dt_adaptive_avg_pool2d(c, o23) == NULL && dt_last_status() == DT_EPLACEMENT);
    t = dt_adaptive_avg_pool2d(d, o23);
    int64_t want7[4] = {5, 6, 2, 3};
    check_meta2(t, DT_FLOAT32, 4, want7, P(), S(1));
    dt_tensor_release(t);

    dt_tensor *all[] = {x, xp, xi, x32, y, a, b, c, d};
    for (size_t j = 0; j < sizeof all / sizeof all[0]; j++)
        dt_tensor_release(all[j]);
}

int main(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    int64_t mshape[1] = {3}, ids[3] = {0, 1, 2}, m2shape[2] = {2, 2}, ids4[4] = {0, 1, 2, 3};
    dt_mesh *m = NULL, *m2 = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &m) == DT_OK);
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 2, m2shape, ids4, NULL, &m2) == DT_OK);
    test_max(g, m);
    test_avg_and_adaptive(g, m, m2);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_mesh_release(m2);
    dt_mesh_release(m);
    dt_graph_release(g);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
