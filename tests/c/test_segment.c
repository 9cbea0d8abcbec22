/*
 * Segmented dims (src/core/client/segment.c) on the 'ref' backend, so the
 * sanitizer builds run them: cat along a Shard(0) dim on meshes of 2, 3 and
 * 4 devices with uneven and empty inputs is a local cat (no collective
 * lowered) with the segment lengths recorded; an elementwise op and a
 * permute keep the layout; slices at segment boundaries are local and one
 * segment is the regular layout; reads, per-device reads, a slice off the
 * boundaries (the fallback) and redistribute lower (the values: Python).
 */
#include <stdio.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

#define COLS 3

/* The 'ref' backend has no view kernels (cat, slices): the values are checked
 * against torch in tests/python/test_segmented_cat.py; here the layouts, the
 * communication, and that reads (the fallback's conversion) lower and fail
 * cleanly. */
static void read_runs(dt_tensor *t, int64_t n) {
    float got[64 * COLS];
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ(dt_tensor_shape(t)[0], n);
        (void)dt_tensor_read(t, got, sizeof(float) * (size_t)(n * COLS));
    }
}

static void run(dt_graph *g, int64_t w, const int64_t *lens, int nseg) {
    int64_t ids[4];
    for (int64_t i = 0; i < w; i++)
        ids[i] = i;
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, &w, ids, NULL, &mesh) == DT_OK);
    dt_placement s0 = S(0);
    float host[64 * COLS] = {0};
    dt_tensor *parts[4];
    int64_t total = 0;
    for (int s = 0; s < nseg; s++) {
        int64_t shape[2] = {lens[s], COLS};
        float *x = host + total * COLS;
        for (int64_t i = 0; i < lens[s] * COLS; i++)
            x[i] = (float)(s * 100 + i);
        parts[s] = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof(float) * (size_t)(lens[s] * COLS),
                                         mesh, &s0);
        CHECK(parts[s] != NULL);
        total += lens[s];
    }
    CHECK(dt_graph_sync(g) == DT_OK);
    long before = dt_debug_collectives_lowered();
    dt_tensor *c = dt_cat(nseg, parts, 0);
    dt_tensor *twice = c ? dt_binary(DT_BINARY_ADD, c, c) : NULL;
    const int64_t perm[2] = {1, 0};
    dt_tensor *tr = c ? dt_permute(c, 2, perm) : NULL;
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK_EQ(dt_debug_collectives_lowered(), before);
    int dim = -1, md = -1, nz = 0;
    int64_t seg[8];
    for (int s = 0; s < nseg; s++)
        nz += lens[s] > 0;
    CHECK_EQ(dt_debug_segments(c, &dim, &md, seg), nz > 1 ? nz : 0);
    if (nz > 1)
        CHECK(dim == 0 && md == 0);
    CHECK_EQ(dt_debug_segments(tr, &dim, &md, seg), nz > 1 ? nz : 0);
    if (nz > 1)
        CHECK(dim == 1);
    /* A read converts to the regular layout: one all-gather when segmented. */
    before = dt_debug_collectives_lowered();
    read_runs(c, total);
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK(nz > 1 ? dt_debug_collectives_lowered() > before : dt_debug_collectives_lowered() == before);
    for (int64_t i = 0; i < w; i++)
        dt_future_release(dt_tensor_fetch_local(c, i));
    read_runs(twice, total);
    /* Slices at each boundary: local; the rest of the list stays segmented. */
    int64_t at = 0;
    for (int s = 0; s < nseg; s++) {
        dt_slice sl[2] = {{at, 1, total - at, 0}, {0, 1, COLS, 0}};
        before = dt_debug_collectives_lowered();
        dt_tensor *tail = dt_index(c, sl, 0);
        CHECK(dt_graph_sync(g) == DT_OK);
        if (lens[s] > 0 && at > 0)
            CHECK_EQ(dt_debug_collectives_lowered(), before);
        int rest = 0;
        for (int q = s; q < nseg; q++)
            rest += lens[q] > 0;
        CHECK_EQ(dt_debug_segments(tail, &dim, &md, seg), rest > 1 ? rest : 0);
        read_runs(tail, total - at);
        dt_tensor_release(tail);
        at += lens[s];
    }
    /* Off the boundaries (the fallback), then redistributed. */
    if (total > 2) {
        dt_placement r = R();
        dt_tensor *rep = dt_redistribute(c, NULL, &r);
        dt_slice sl[2] = {{1, 1, total - 2, 0}, {0, 1, COLS, 0}};
        dt_tensor *mid = rep ? dt_index(rep, sl, 0) : NULL;
        CHECK_EQ(dt_debug_segments(mid, &dim, &md, seg), 0);
        read_runs(rep, total);
        read_runs(mid, total - 2);
        dt_tensor_release(mid);
        dt_tensor_release(rep);
    }
    dt_tensor_release(tr);
    dt_tensor_release(twice);
    dt_tensor_release(c);
    for (int s = 0; s < nseg; s++)
        dt_tensor_release(parts[s]);
    dt_mesh_release(mesh);
}

/* The dim sharded by both mesh dims of an a x b mesh. */
static void run2d(dt_graph *g, int64_t a, int64_t b, const int64_t *lens, int nseg) {
    int64_t ids[16], shape[2] = {a, b};
    for (int64_t i = 0; i < a * b; i++)
        ids[i] = i;
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 2, shape, ids, NULL, &mesh) == DT_OK);
    dt_placement s00[2] = {S(0), S(0)};
    float host[64 * COLS] = {0};
    dt_tensor *parts[4];
    int64_t total = 0;
    for (int s = 0; s < nseg; s++) {
        int64_t sh[2] = {lens[s], COLS};
        float *x = host + total * COLS;
        for (int64_t i = 0; i < lens[s] * COLS; i++)
            x[i] = (float)(s * 100 + i);
        parts[s] = dt_tensor_from_buffer(g, DT_FLOAT32, 2, sh, x, sizeof(float) * (size_t)(lens[s] * COLS),
                                         mesh, s00);
        CHECK(parts[s] != NULL);
        total += lens[s];
    }
    CHECK(dt_graph_sync(g) == DT_OK);
    long before = dt_debug_collectives_lowered();
    dt_tensor *c = dt_cat(nseg, parts, 0);
    dt_tensor *twice = c ? dt_binary(DT_BINARY_ADD, c, c) : NULL;
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK_EQ(dt_debug_collectives_lowered(), before);
    int dim = -1, md = -1, mds[8] = {-1, -1};
    int64_t seg[8];
    int nz = 0;
    for (int s = 0; s < nseg; s++)
        nz += lens[s] > 0;
    CHECK_EQ(dt_debug_segments(c, &dim, &md, seg), nz > 1 ? nz : 0);
    CHECK_EQ(dt_debug_segment_mesh_dims(c, mds), nz > 1 ? 2 : 0);
    if (nz > 1)
        CHECK(dim == 0 && md == 0 && mds[0] == 0 && mds[1] == 1);
    read_runs(c, total);
    read_runs(twice, total);
    /* Ulysses' step on each mesh dim: one all-to-all group per line. */
    for (int u = 0; u < 2; u++) {
        dt_placement pl[2] = {S(0), S(0)};
        pl[u] = S(1);
        before = dt_debug_collectives_lowered();
        dt_tensor *h = c ? dt_redistribute(c, NULL, pl) : NULL;
        dt_tensor *back = h ? dt_redistribute(h, NULL, s00) : NULL;
        CHECK(dt_graph_sync(g) == DT_OK);
        if (nz > 1) {
            CHECK_EQ(dt_debug_collectives_lowered() - before, 2 * shape[1 - u]);
            CHECK_EQ(dt_debug_segment_mesh_dims(h, mds), 2);
            CHECK(mds[0] == 1 - u && mds[1] == u);
            CHECK_EQ(dt_debug_segment_mesh_dims(back, mds), 2);
            CHECK(mds[0] == 0 && mds[1] == 1);
        }
        read_runs(h, total);
        read_runs(back, total);
        dt_tensor_release(back);
        dt_tensor_release(h);
    }
    /* Slices at each boundary: local. */
    int64_t at = 0;
    for (int s = 0; s < nseg; s++) {
        dt_slice sl[2] = {{at, 1, total - at, 0}, {0, 1, COLS, 0}};
        before = dt_debug_collectives_lowered();
        dt_tensor *tail = dt_index(c, sl, 0);
        CHECK(dt_graph_sync(g) == DT_OK);
        if (lens[s] > 0 && at > 0)
            CHECK_EQ(dt_debug_collectives_lowered(), before);
        read_runs(tail, total - at);
        dt_tensor_release(tail);
        at += lens[s];
    }
    dt_tensor_release(twice);
    dt_tensor_release(c);
    for (int s = 0; s < nseg; s++)
        dt_tensor_release(parts[s]);
    dt_mesh_release(mesh);
}

int main(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    const int64_t a[] = {5, 3}, b[] = {1, 2}, c[] = {0, 4, 7}, d[] = {2, 1, 6, 3};
    for (int64_t w = 2; w <= 4; w++) {
        run(g, w, a, 2);
        run(g, w, b, 2);
        run(g, w, c, 3);
        run(g, w, d, 4);
    }
    const int64_t e[] = {9, 5}, f[] = {3, 0, 12};
    for (int64_t rows = 2; rows <= 3; rows++)
        for (int64_t cols = 2; cols <= 4; cols++) {
            run2d(g, rows, cols, a, 2);
            run2d(g, rows, cols, e, 2);
            run2d(g, rows, cols, f, 3);
            run2d(g, rows, cols, d, 4);
        }
    dt_graph_release(g);
    printf("test_segment: %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
