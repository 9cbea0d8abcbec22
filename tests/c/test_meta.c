/*
 * Shard boxes (src/core/records/meta.c: dt__chunk, dt__local_region) against
 * expectations written here: torch.chunk's rule (c = ceil(n/k); shard i is
 * [min(i*c, n), min((i+1)*c, n))), hand-computed tables for uneven and nested
 * cases, and, end to end, each device's block as the workers hold it
 * (dt_tensor_fetch_local) compared with the global tensor's box. Runs on the
 * 'ref' backend under ASan/UBSan and TSan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "test_util.h"

/* torch.chunk's i-th piece of [0, n) in k pieces, written independently of
 * dt__chunk: the chunk size is the ceiling of n / k. */
static void chunk_rule(int64_t n, int64_t k, int64_t i, int64_t *start, int64_t *len) {
    int64_t c = n / k + (n % k != 0);
    int64_t s = i * c, e = (i + 1) * c;
    if (s > n)
        s = n;
    if (e > n)
        e = n;
    *start = s;
    *len = e - s;
}

static void test_chunk_rule(void) {
    for (int64_t n = 0; n <= 40; n++) {
        for (int64_t k = 1; k <= 9; k++) {
            int64_t covered = 0;
            for (int64_t i = 0; i < k; i++) {
                int64_t s, l, ws, wl;
                dt__chunk(n, k, i, &s, &l);
                chunk_rule(n, k, i, &ws, &wl);
                if (s != ws || l != wl) {
                    fprintf(stderr, "dt__chunk(n=%lld, k=%lld, i=%lld) = [%lld, +%lld), want [%lld, +%lld)\n",
                            (long long)n, (long long)k, (long long)i, (long long)s, (long long)l,
                            (long long)ws, (long long)wl);
                    failures++;
                }
                /* The pieces tile [0, n) in order. */
                CHECK(s == covered);
                covered += l;
            }
            CHECK(covered == n);
        }
    }
    /* A few by hand, trailing empties included. */
    static const struct {
        int64_t n, k, want[8][2];
    } table[] = {
        {5, 3, {{0, 2}, {2, 2}, {4, 1}}},
        {5, 4, {{0, 2}, {2, 2}, {4, 1}, {5, 0}}},
        {1, 4, {{0, 1}, {1, 0}, {1, 0}, {1, 0}}},
        {0, 3, {{0, 0}, {0, 0}, {0, 0}}},
        {10, 4, {{0, 3}, {3, 3}, {6, 3}, {9, 1}}},
        {7, 8, {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}, {6, 1}, {7, 0}}},
        {6, 4, {{0, 2}, {2, 2}, {4, 2}, {6, 0}}},
    };
    for (size_t t = 0; t < sizeof table / sizeof table[0]; t++)
        for (int64_t i = 0; i < table[t].k; i++) {
            int64_t s, l;
            dt__chunk(table[t].n, table[t].k, i, &s, &l);
            if (s != table[t].want[i][0] || l != table[t].want[i][1]) {
                fprintf(stderr, "chunk %lld of %lld in %lld: got [%lld, +%lld), want [%lld, +%lld)\n",
                        (long long)i, (long long)table[t].n, (long long)table[t].k, (long long)s,
                        (long long)l, (long long)table[t].want[i][0], (long long)table[t].want[i][1]);
                failures++;
            }
        }
}

static dt_mesh *make_mesh(int ndim, const int64_t *shape, int first_id) {
    int64_t ids[64], n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    for (int64_t i = 0; i < n; i++)
        ids[i] = first_id + i;
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, ndim, shape, ids, NULL, &m) == DT_OK);
    return m;
}

/* The box the device at `coord` must hold, by the documented rule: the mesh
 * dims that shard a tensor dim split it one after another in mesh-dim order,
 * each splitting what the previous ones left by torch.chunk's rule. */
static void box_rule(const dt_mesh *mesh, const dt_placement *pl, int ndim, const int64_t *shape,
                     const int64_t *coord, int64_t *start, int64_t *len) {
    for (int d = 0; d < ndim; d++) {
        start[d] = 0;
        len[d] = shape[d];
    }
    for (int md = 0; md < dt_mesh_ndim(mesh); md++) {
        if (pl[md].kind != DT_PLACEMENT_SHARD)
            continue;
        int d = pl[md].dim;
        int64_t s, l;
        chunk_rule(len[d], dt_mesh_shape(mesh)[md], coord[md], &s, &l);
        start[d] += s;
        len[d] = l;
    }
}

static void meta_for(dt__meta *m, dt_mesh *mesh, const dt_placement *pl, int ndim, const int64_t *shape) {
    memset(m, 0, sizeof *m);
    m->dtype = DT_FLOAT32;
    m->ndim = ndim;
    memcpy(m->shape, shape, (size_t)ndim * sizeof *shape);
    m->mesh = mesh;
    CHECK(dt__placements_normalize(mesh, ndim, pl, m->pl) == DT_OK);
}

/* dt__local_region against hand-computed boxes of nested shards. */
static void test_nested_tables(void) {
    /* Mesh 2 x 3, tensor [11, 4], [Shard(0), Shard(0)]: mesh dim 0 splits the
     * 11 rows 6 + 5, then mesh dim 1 splits each part in three: 6 -> 2,2,2 and
     * 5 -> 2,2,1. */
    int64_t mshape[2] = {2, 3}, shape[2] = {11, 4};
    dt_mesh *mesh = make_mesh(2, mshape, 0);
    dt_placement ss[2] = {S(0), S(0)};
    dt__meta m;
    meta_for(&m, mesh, ss, 2, shape);
    static const int64_t rows[6][2] = {{0, 2}, {2, 2}, {4, 2}, {6, 2}, {8, 2}, {10, 1}};
    for (int64_t i = 0; i < 6; i++) {
        int64_t coord[DT_MAX_MESH_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
        dt__mesh_coord(mesh, i, coord);
        CHECK(coord[0] == i / 3 && coord[1] == i % 3);
        dt__local_region(&m, coord, s, l);
        if (s[0] != rows[i][0] || l[0] != rows[i][1] || s[1] != 0 || l[1] != 4) {
            fprintf(stderr, "[S(0),S(0)] device %lld: got rows [%lld, +%lld) cols [%lld, +%lld)\n",
                    (long long)i, (long long)s[0], (long long)l[0], (long long)s[1], (long long)l[1]);
            failures++;
        }
    }
    /* [Shard(1), Shard(0)] of [11, 4]: columns 2,2 by mesh dim 0, rows
     * 4,4,3 by mesh dim 1. */
    dt_placement s10[2] = {S(1), S(0)};
    meta_for(&m, mesh, s10, 2, shape);
    for (int64_t i = 0; i < 6; i++) {
        int64_t coord[DT_MAX_MESH_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&m, coord, s, l);
        static const int64_t r[3][2] = {{0, 4}, {4, 4}, {8, 3}};
        CHECK(s[1] == 2 * coord[0] && l[1] == 2);
        CHECK(s[0] == r[coord[1]][0] && l[0] == r[coord[1]][1]);
    }
    /* [Partial, Shard(-1)] of [3, 5]: Partial does not split; -1 is dim 1,
     * split 2,2,1. */
    int64_t shape2[2] = {3, 5};
    dt_placement ps[2] = {P(), S(-1)};
    meta_for(&m, mesh, ps, 2, shape2);
    CHECK(m.pl[1].kind == DT_PLACEMENT_SHARD && m.pl[1].dim == 1);
    for (int64_t i = 0; i < 6; i++) {
        int64_t coord[DT_MAX_MESH_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&m, coord, s, l);
        static const int64_t c[3][2] = {{0, 2}, {2, 2}, {4, 1}};
        CHECK(s[0] == 0 && l[0] == 3 && s[1] == c[coord[1]][0] && l[1] == c[coord[1]][1]);
        CHECK(dt__partial_zero(&m, coord) == (coord[0] != 0));
    }
    dt_mesh_release(mesh);

    /* Mesh 2 x 2 x 2, tensor [7, 3], [Shard(0), Shard(1), Shard(0)]: rows
     * 4 + 3 by mesh dim 0, then 2 + 2 / 2 + 1 by mesh dim 2; columns 2 + 1 by
     * mesh dim 1. */
    int64_t mshape3[3] = {2, 2, 2}, shape3[2] = {7, 3};
    mesh = make_mesh(3, mshape3, 0);
    dt_placement s3[3] = {S(0), S(1), S(0)};
    meta_for(&m, mesh, s3, 2, shape3);
    for (int64_t i = 0; i < 8; i++) {
        int64_t coord[DT_MAX_MESH_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&m, coord, s, l);
        static const int64_t r[2][2][2] = {{{0, 2}, {2, 2}}, {{4, 2}, {6, 1}}};
        static const int64_t c[2][2] = {{0, 2}, {2, 1}};
        const int64_t *wr = r[coord[0]][coord[2]], *wc = c[coord[1]];
        if (s[0] != wr[0] || l[0] != wr[1] || s[1] != wc[0] || l[1] != wc[1]) {
            fprintf(stderr, "3-D mesh device %lld: got rows [%lld, +%lld) cols [%lld, +%lld)\n", (long long)i,
                    (long long)s[0], (long long)l[0], (long long)s[1], (long long)l[1]);
            failures++;
        }
    }
    dt_mesh_release(mesh);
}

/* Every placement combination of a 2-D mesh on a 2-D tensor, sizes that do
 * not divide evenly: dt__local_region against the rule. */
static void test_region_rule(void) {
    int64_t mshapes[3][2] = {{2, 3}, {3, 2}, {4, 2}};
    dt_placement options[4] = {R(), P(), S(0), S(1)};
    for (int ms = 0; ms < 3; ms++) {
        dt_mesh *mesh = make_mesh(2, mshapes[ms], 0);
        for (int64_t rows = 0; rows <= 9; rows++) {
            for (int a = 0; a < 4; a++) {
                for (int b = 0; b < 4; b++) {
                    int64_t shape[2] = {rows, 5};
                    dt_placement pl[2] = {options[a], options[b]};
                    dt__meta m;
                    meta_for(&m, mesh, pl, 2, shape);
                    for (int64_t i = 0; i < dt_mesh_size(mesh, -1); i++) {
                        int64_t coord[DT_MAX_MESH_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM], ws[DT_MAX_NDIM],
                            wl[DT_MAX_NDIM];
                        dt__mesh_coord(mesh, i, coord);
                        dt__local_region(&m, coord, s, l);
                        box_rule(mesh, pl, 2, shape, coord, ws, wl);
                        if (memcmp(s, ws, 2 * sizeof *s) || memcmp(l, wl, 2 * sizeof *l)) {
                            fprintf(stderr, "mesh %lldx%lld pl (%d,%d) rows %lld device %lld: box mismatch\n",
                                    (long long)mshapes[ms][0], (long long)mshapes[ms][1], a, b,
                                    (long long)rows, (long long)i);
                            failures++;
                        }
                    }
                }
            }
        }
        dt_mesh_release(mesh);
    }
}

/* End to end: a tensor whose element values are their flat global index,
 * distributed, then each device's block read back as stored. The block's
 * shape and every value must be the rule's box of the global tensor. */
static void test_device_blocks(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    int64_t mshape[2] = {2, 3}, shape[2] = {7, 5};
    dt_mesh *mesh = make_mesh(2, mshape, 0);
    float host[35];
    for (int i = 0; i < 35; i++)
        host[i] = (float)i;
    dt_placement cases[5][2] = {{S(0), S(0)}, {S(0), S(1)}, {S(1), S(0)}, {R(), S(1)}, {S(1), S(1)}};
    for (int c = 0; c < 5; c++) {
        dt_tensor *t = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, host, sizeof host, mesh, cases[c]);
        CHECK(t != NULL);
        /* An op on it too: its blocks follow the same boxes. */
        dt_tensor *u = t ? dt_binary_scalar(DT_BINARY_ADD, t, dt_scalar_float(0.5), 0) : NULL;
        CHECK(u != NULL);
        for (int64_t i = 0; u && i < 6; i++) {
            int64_t coord[2] = {i / 3, i % 3}, ws[2], wl[2], got_shape[DT_MAX_NDIM];
            box_rule(mesh, cases[c], 2, shape, coord, ws, wl);
            for (int which = 0; which < 2; which++) {
                dt_future *f = dt_tensor_fetch_local(which ? u : t, i);
                CHECK(f && dt_future_shape(f, got_shape) == 2);
                if (!f)
                    continue;
                if (got_shape[0] != wl[0] || got_shape[1] != wl[1]) {
                    fprintf(stderr, "case %d device %lld: block shape [%lld, %lld], want [%lld, %lld]\n", c,
                            (long long)i, (long long)got_shape[0], (long long)got_shape[1], (long long)wl[0],
                            (long long)wl[1]);
                    failures++;
                    dt_future_release(f);
                    continue;
                }
                float got[35];
                CHECK(dt_future_read(f, got, (size_t)(wl[0] * wl[1]) * sizeof *got) == DT_OK);
                for (int64_t r = 0; r < wl[0]; r++)
                    for (int64_t k = 0; k < wl[1]; k++) {
                        float want = host[(ws[0] + r) * 5 + ws[1] + k] + (which ? 0.5f : 0.0f);
                        if (got[r * wl[1] + k] != want) {
                            fprintf(stderr, "case %d device %lld (%s): [%lld,%lld] = %g, want %g\n", c,
                                    (long long)i, which ? "t + 0.5" : "t", (long long)r, (long long)k,
                                    got[r * wl[1] + k], want);
                            failures++;
                        }
                    }
                dt_future_release(f);
            }
        }
        dt_tensor_release(u);
        dt_tensor_release(t);
    }
    dt_mesh_release(mesh);
    dt_graph_release(g);
}

/* The library reports the version of the header it was built with, in both
 * forms, and they agree with each other. */
static void test_version(void) {
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", DT_VERSION_MAJOR, DT_VERSION_MINOR, DT_VERSION_PATCH);
    if (strcmp(dt_version(), want) != 0 || strcmp(DT_VERSION_STRING, want) != 0) {
        fprintf(stderr, "%s:%d: dt_version() \"%s\", DT_VERSION_STRING \"%s\", expected \"%s\"\n", __FILE__,
                __LINE__, dt_version(), DT_VERSION_STRING, want);
        failures++;
    }
    int num = DT_VERSION_MAJOR * 10000 + DT_VERSION_MINOR * 100 + DT_VERSION_PATCH;
    if (dt_version_number() != num) {
        fprintf(stderr, "%s:%d: dt_version_number() %d, expected %d\n", __FILE__, __LINE__,
                dt_version_number(), num);
        failures++;
    }
}

int main(void) {
    test_version();
    test_chunk_rule();
    test_nested_tables();
    test_region_rule();
    test_device_blocks();
    if (failures) {
        fprintf(stderr, "test_meta: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_meta: all passed\n");
    return 0;
}
