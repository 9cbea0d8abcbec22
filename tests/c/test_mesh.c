/*
 * Device meshes (src/core/records/mesh.c): validation at creation, the getters,
 * equality by value, row-major coordinates, and ids up to 2**31-1 and
 * beyond without any cost tied to the id's size. Expectations are written
 * here from the API's documented rules.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/records/mesh.h"
#include "test_util.h"

static dt_mesh *make(int ndim, const int64_t *shape, const int64_t *ids, const char *const *names) {
    dt_mesh *m = NULL;
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, ndim, shape, ids, names, &m), DT_OK);
    return m;
}

/* Every malformed request is DT_EINVAL with a message, and *out is NULL. */
static void test_validation(void) {
    const int64_t shape2[1] = {2}, shape0[1] = {0}, shape22[2] = {2, 2};
    const int64_t ids[4] = {0, 1, 2, 3}, dup[4] = {0, 1, 2, 1}, neg[2] = {0, -3};
    const char *same_names[2] = {"dp", "dp"}, *empty_name[2] = {"dp", ""};
    dt_mesh *m = (dt_mesh *)&m; /* must be overwritten with NULL */
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 0, shape2, ids, NULL, &m), DT_EINVAL);
    CHECK(m == NULL);
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, DT_MAX_MESH_NDIM + 1, shape2, ids, NULL, &m), DT_EINVAL);
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 1, shape0, ids, NULL, &m), DT_EINVAL);
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 1, shape2, NULL, NULL, &m), DT_EINVAL);
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 1, shape2, neg, NULL, &m), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "-3") != NULL);
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 2, shape22, dup, NULL, &m), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "id 1 appears more than once") != NULL);
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 2, shape22, ids, same_names, &m), DT_EINVAL);
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 2, shape22, ids, empty_name, &m), DT_EINVAL);
    CHECK_EQ(dt_mesh_create((dt_device_type)7, 1, shape2, ids, NULL, &m), DT_EINVAL);
    CHECK(m == NULL);
}

/* Getters, default names, coordinates in row-major order. */
static void test_getters_and_coords(void) {
    const int64_t shape[3] = {2, 3, 2};
    int64_t ids[12];
    for (int i = 0; i < 12; i++)
        ids[i] = 100 + 7 * i;
    dt_mesh *m = make(3, shape, ids, NULL);
    if (!m)
        return;
    CHECK_EQ(dt_mesh_ndim(m), 3);
    CHECK_EQ(dt_mesh_size(m, -1), 12);
    CHECK_EQ(dt_mesh_size(m, 1), 3);
    CHECK_EQ(dt_mesh_size(m, 3), 0);
    CHECK_EQ(dt_mesh_device_type(m), DT_DEVICE_CPU);
    CHECK_STREQ(dt_mesh_dim_name(m, 0), "dim0");
    CHECK_STREQ(dt_mesh_dim_name(m, 2), "dim2");
    CHECK(dt_mesh_dim_name(m, 3) == NULL);
    CHECK_EQ(dt_mesh_ids(m)[11], 100 + 77);
    for (int64_t idx = 0; idx < 12; idx++) {
        int64_t c[DT_MAX_MESH_NDIM];
        dt__mesh_coord(m, idx, c);
        CHECK_EQ(c[0], idx / 6);
        CHECK_EQ(c[1], (idx / 2) % 3);
        CHECK_EQ(c[2], idx % 2);
    }
    dt_mesh_release(m);
}

/* Equal means same type, shape, names and ids; not the same object. */
static void test_equality(void) {
    const int64_t shape[2] = {2, 2}, flat[1] = {4};
    const int64_t ids[4] = {0, 1, 2, 3}, other[4] = {0, 1, 3, 2};
    const char *names[2] = {"dp", "tp"};
    dt_mesh *a = make(2, shape, ids, names), *b = make(2, shape, ids, names);
    dt_mesh *c = make(2, shape, other, names), *d = make(2, shape, ids, NULL), *e = make(1, flat, ids, NULL);
    CHECK_EQ(dt_mesh_equal(a, b), 1);
    CHECK_EQ(dt_mesh_equal(a, c), 0);
    CHECK_EQ(dt_mesh_equal(a, d), 0);
    CHECK_EQ(dt_mesh_equal(a, e), 0);
    CHECK_EQ(dt_mesh_equal(a, NULL), 0);
    dt_mesh_release(a);
    dt_mesh_release(b);
    dt_mesh_release(c);
    dt_mesh_release(d);
    dt_mesh_release(e);
}

/* Large ids are plain values, and a big mesh's duplicate check stays quick
 * enough for a unit test (65536 devices; pairwise checking took 2**31 steps). */
static void test_large_ids_and_meshes(void) {
    const int64_t shape2[1] = {2};
    const int64_t big[2] = {0, 2147483647};
    dt_mesh *m = make(1, shape2, big, NULL);
    if (m)
        CHECK_EQ(dt_mesh_ids(m)[1], 2147483647);
    dt_mesh_release(m);
    enum { N = 65536 };
    int64_t *ids = malloc(N * sizeof *ids);
    int64_t shape[1] = {N};
    for (int64_t i = 0; i < N; i++)
        ids[i] = (N - i) * 1000003;
    m = make(1, shape, ids, NULL);
    dt_mesh_release(m);
    ids[N - 1] = ids[0];
    dt_mesh *dupm = NULL;
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &dupm), DT_EINVAL);
    CHECK(dupm == NULL);
    free(ids);
}

int main(void) {
    test_validation();
    test_getters_and_coords();
    test_equality();
    test_large_ids_and_meshes();
    if (failures) {
        fprintf(stderr, "test_mesh: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_mesh: all passed\n");
    return 0;
}
