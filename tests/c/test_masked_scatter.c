/*
 * The C API of masked_scatter (src/ops/masked_scatter.c) on the pure-C 'ref'
 * backend: the result's shape, dtype and placements inferred at the call,
 * and the statuses of rejected calls (torch's shape and dtype errors, the
 * placement rules). The ref backend has no masked_scatter kernel; values are
 * tested from Python against eager torch (tests/python/test_masked_scatter.py),
 * while the lowering runs here under ASan and TSan.
 */
#include <stdio.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static void test_meta(dt_graph *g, dt_mesh *m, dt_mesh *m2) {
    int64_t shape[2] = {5, 7}, row[1] = {7}, col[2] = {5, 1}, src_shape[1] = {40};
    dt_placement s0 = S(0), s1 = S(1), p = P();
    dt_tensor *x0 = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m, &s0);
    dt_tensor *x1 = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m, &s1);
    dt_tensor *xp = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m, &p);
    dt_tensor *xr = dt_full(g, DT_FLOAT32, 1, row, dt_scalar_int(1), m, &s0);
    dt_tensor *xc = dt_full(g, DT_FLOAT32, 2, col, dt_scalar_int(1), m, &s1);
    dt_tensor *mk = dt_full(g, DT_BOOL, 2, shape, dt_scalar_int(1), m, NULL);
    dt_tensor *mk_s = dt_full(g, DT_BOOL, 2, shape, dt_scalar_int(1), m, &s0);
    dt_tensor *mk_row = dt_full(g, DT_BOOL, 1, row, dt_scalar_int(1), m, NULL);
    dt_tensor *mk_f = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m, NULL);
    dt_tensor *src = dt_full(g, DT_FLOAT32, 1, src_shape, dt_scalar_int(2), m, NULL);
    dt_tensor *src_p = dt_full(g, DT_FLOAT32, 1, src_shape, dt_scalar_int(2), m, &p);
    dt_tensor *src_s = dt_full(g, DT_FLOAT32, 1, src_shape, dt_scalar_int(2), m, &s0);
    dt_tensor *src_d = dt_full(g, DT_FLOAT64, 1, src_shape, dt_scalar_int(2), m, NULL);

    dt_tensor *t = dt_masked_scatter(x0, mk, src, 0);
    check_meta(t, DT_FLOAT32, 2, shape, S(0));
    dt_tensor_release(t);
    t = dt_masked_scatter(x1, mk_row, src, DT_EW_INPLACE);
    check_meta(t, DT_FLOAT32, 2, shape, S(1));
    dt_tensor_release(t);
    t = dt_masked_scatter(xp, mk, src_p, 0);
    check_meta(t, DT_FLOAT32, 2, shape, P());
    dt_tensor_release(t);
    t = dt_masked_scatter(xp, mk, src, 0);
    check_meta(t, DT_FLOAT32, 2, shape, P());
    dt_tensor_release(t);
    /* The input broadcasts to the mask: its Shard(0) is the result's Shard(1). */
    t = dt_masked_scatter(xr, mk, src, 0);
    check_meta(t, DT_FLOAT32, 2, shape, S(1));
    dt_tensor_release(t);

    CHECK(dt_masked_scatter(x0, mk_s, src, 0) == NULL && dt_last_status() == DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "input 1's .redistribute(placements=[Replicate()])") != NULL);
    CHECK(dt_masked_scatter(x0, mk, src_s, 0) == NULL && dt_last_status() == DT_EPLACEMENT);
    CHECK(dt_masked_scatter(x0, mk, src_p, 0) == NULL && dt_last_status() == DT_EPLACEMENT);
    CHECK(dt_masked_scatter(xc, mk, src, 0) == NULL && dt_last_status() == DT_EPLACEMENT); /* broadcast dim */
    CHECK(dt_masked_scatter(xr, mk, src, DT_EW_INPLACE) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_masked_scatter(x0, mk_f, src, 0) == NULL && dt_last_status() == DT_EOP);
    CHECK(dt_masked_scatter(x0, mk, src_d, 0) == NULL && dt_last_status() == DT_EOP);
    int64_t bad[1] = {4};
    dt_tensor *mk_bad = dt_full(g, DT_BOOL, 1, bad, dt_scalar_int(1), m, NULL);
    CHECK(dt_masked_scatter(x0, mk_bad, src, 0) == NULL && dt_last_status() == DT_ESHAPE);
    CHECK(dt_masked_scatter(x0, NULL, src, 0) == NULL && dt_last_status() == DT_EINVAL);

    /* 2x2: nested shards of the input line up with the result's. */
    dt_placement nest[2] = {S(0), S(0)}, sp[2] = {S(1), P()}, rr[2] = {R(), R()}, pr[2] = {R(), P()};
    dt_tensor *a = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m2, nest);
    dt_tensor *b = dt_full(g, DT_FLOAT32, 2, shape, dt_scalar_int(1), m2, sp);
    dt_tensor *mk2 = dt_full(g, DT_BOOL, 2, shape, dt_scalar_int(1), m2, rr);
    dt_tensor *s2 = dt_full(g, DT_FLOAT32, 1, src_shape, dt_scalar_int(2), m2, pr);
    dt_tensor *s2r = dt_full(g, DT_FLOAT32, 1, src_shape, dt_scalar_int(2), m2, rr);
    t = dt_masked_scatter(a, mk2, s2r, 0);
    check_meta(t, DT_FLOAT32, 2, shape, S(0));
    CHECK(t && same(dt_tensor_placements(t)[1], S(0)));
    dt_tensor_release(t);
    dt_tensor_release(s2r);
    /* A Shard and a Partial on one mesh dim cannot make one placement. */
    CHECK(dt_masked_scatter(a, mk2, s2, 0) == NULL && dt_last_status() == DT_EPLACEMENT);
    t = dt_masked_scatter(b, mk2, s2, 0);
    check_meta(t, DT_FLOAT32, 2, shape, S(1));
    CHECK(t && same(dt_tensor_placements(t)[1], P()));
    dt_tensor_release(t);

    dt_tensor *all[] = {x0,  x1,    xp,    xr,    xc,     mk, mk_s, mk_row, mk_f,
                        src, src_p, src_s, src_d, mk_bad, a,  b,    mk2,    s2};
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
    test_meta(g, m, m2);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_mesh_release(m2);
    dt_mesh_release(m);
    dt_graph_release(g);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
