/*
 * Collectives (src/comm/inproc.c, src/core/controller/lower_comm.c) against
 * expectations computed here:
 * every reduction of Partial pieces p0..p(k-1) must equal the rank-order sum
 * ((p0 + p1) + p2) + ... in float32 bit for bit (docs/decisions.md), on
 * every device that holds a copy (each one read with dt_tensor_fetch_local,
 * never only the first). The pieces are genuinely different on every device
 * (a sum over a sharded dim: piece i is row i), and their values are chosen
 * so that float32 addition gives another result in any other order: the test
 * checks that itself, so it fails if the collective adds in reverse order or
 * if each rank starts from its own piece. Runs on the 'ref' backend under
 * ASan/UBSan and TSan.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

#if FLT_EVAL_METHOD != 0
#error "the expected sums below need float arithmetic evaluated in float"
#endif

#define N 48   /* elements per piece */
#define MAXK 6 /* ranks */

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static dt_mesh *make_mesh(int ndim, const int64_t *shape) {
    int64_t ids[64], n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    for (int64_t i = 0; i < n; i++)
        ids[i] = i;
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, ndim, shape, ids, NULL, &m) == DT_OK);
    return m;
}

static uint64_t rng_state = 0x243f6a8885a308d3ull;
static uint32_t next_u32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

/* Pieces whose float32 sum depends on the order: magnitudes from 2^-3 to
 * 2^25 with both signs, and every fourth element the classic cancellation
 * {2^24, 1, -2^24, 1, ...}. No -0.0 (a one-element sum turns it into +0.0). */
static void make_pieces(int k, float p[MAXK][N]) {
    for (int e = 0; e < N; e++)
        for (int r = 0; r < k; r++) {
            if (e % 4 == 0) {
                static const float pattern[4] = {16777216.0f, 1.0f, -16777216.0f, 1.0f};
                p[r][e] = pattern[(r + e / 4) % 4] * (r % 2 ? 1.0f : 1.0f + (float)(e % 3));
            } else {
                float mant = 1.0f + (float)(next_u32() % 1024) / 1024.0f;
                int ex = (int)(next_u32() % 29) - 3;
                p[r][e] = ldexpf(next_u32() % 2 ? -mant : mant, ex);
            }
        }
}

/* ((p[first] + p[first+1]) + ...) with the ranks taken in the order
 * first, first+1, ..., wrapping; `reverse` goes the other way from k-1. */
static void ordered_sum(int k, float p[MAXK][N], int first, int reverse, float *out) {
    for (int e = 0; e < N; e++) {
        float acc = reverse ? p[k - 1][e] : p[first][e];
        for (int j = 1; j < k; j++) {
            int r = reverse ? k - 1 - j : (first + j) % k;
            acc = acc + p[r][e];
        }
        out[e] = acc;
    }
}

/* The pieces really discriminate: reverse order, and starting from any rank
 * but 0, each give another result somewhere. */
static void check_order_matters(int k, float p[MAXK][N]) {
    float want[N], other[N];
    ordered_sum(k, p, 0, 0, want);
    ordered_sum(k, p, 0, 1, other);
    CHECK(memcmp(want, other, sizeof want) != 0);
    for (int first = 1; first < k; first++) {
        ordered_sum(k, p, first, 0, other);
        CHECK(memcmp(want, other, sizeof want) != 0);
    }
}

/* Reads device `idx`'s block of t (n floats) and compares it bit for bit. */
static void expect_block(dt_tensor *t, int64_t idx, const float *want, int64_t n, const char *what) {
    dt_future *f = dt_tensor_fetch_local(t, idx);
    float got[N];
    int64_t shape[DT_MAX_NDIM];
    CHECK(f && dt_future_shape(f, shape) == 1 && shape[0] == n);
    if (!f || shape[0] != n) {
        dt_future_release(f);
        return;
    }
    CHECK(dt_future_read(f, got, (size_t)n * sizeof *got) == DT_OK);
    for (int64_t e = 0; e < n; e++)
        if (memcmp(&got[e], &want[e], sizeof got[e]) != 0) {
            fprintf(stderr, "%s: device %lld element %lld: got %.9g, want %.9g (rank-order sum)\n", what,
                    (long long)idx, (long long)e, got[e], want[e]);
            failures++;
            break;
        }
    dt_future_release(f);
}

/* A Partial [N] tensor on a 1-D mesh of k devices whose piece on rank r is
 * p[r]: x [k, N] sharded by rows, summed over the rows. */
static dt_tensor *partial_from_pieces(dt_graph *g, dt_mesh *mesh, int k, float p[MAXK][N]) {
    int64_t shape[2] = {k, N}, dim0 = 0;
    dt_placement s0[1] = {S(0)};
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, p, (size_t)k * N * sizeof(float), mesh, s0);
    dt_tensor *y = x ? dt_sum(x, 1, &dim0, 0) : NULL;
    dt_tensor_release(x);
    CHECK(y && dt_tensor_placements(y)[0].kind == DT_PLACEMENT_PARTIAL);
    /* Each device holds its own addend. */
    for (int r = 0; y && r < k; r++)
        expect_block(y, r, p[r], N, "partial piece");
    return y;
}

/* P -> R (all-reduce) and P -> S (reduce-scatter) on 1-D meshes of 3 to 6. */
static void test_one_dim(void) {
    dt_graph *g = ref_graph();
    for (int k = 3; k <= MAXK; k++) {
        int64_t mshape[1] = {k};
        dt_mesh *mesh = make_mesh(1, mshape);
        float p[MAXK][N], want[N];
        make_pieces(k, p);
        check_order_matters(k, p);
        ordered_sum(k, p, 0, 0, want);
        dt_tensor *y = partial_from_pieces(g, mesh, k, p);
        dt_placement r[1] = {R()}, s0[1] = {S(0)};
        dt_tensor *rep = y ? dt_redistribute(y, NULL, r) : NULL;
        CHECK(rep != NULL);
        for (int i = 0; rep && i < k; i++)
            expect_block(rep, i, want, N, "all-reduce");
        dt_tensor *sh = y ? dt_redistribute(y, NULL, s0) : NULL;
        CHECK(sh != NULL);
        int64_t c = (N + k - 1) / k;
        for (int i = 0; sh && i < k; i++) {
            int64_t start = i * c < N ? i * c : N, end = (i + 1) * c < N ? (i + 1) * c : N;
            expect_block(sh, i, want + start, end - start, "reduce-scatter");
        }
        /* The full read sums the pieces in rank order too. */
        float full[N];
        CHECK(y && dt_tensor_read(y, full, sizeof full) == DT_OK && memcmp(full, want, sizeof full) == 0);
        dt_tensor_release(sh);
        dt_tensor_release(rep);
        dt_tensor_release(y);
        dt_mesh_release(mesh);
    }
    dt_graph_release(g);
}

/* 2-D meshes: a Partial mesh dim of 3 with a Replicate one of 2, each way
 * round. Every group of devices that differ only in the Partial coordinate
 * reduces in its rank order, and all 6 copies of the result are equal. */
static void test_two_dim(void) {
    dt_graph *g = ref_graph();
    for (int pdim = 0; pdim < 2; pdim++) {
        int64_t mshape[2] = {pdim == 0 ? 3 : 2, pdim == 0 ? 2 : 3};
        dt_mesh *mesh = make_mesh(2, mshape);
        float p[MAXK][N], want[N];
        make_pieces(3, p);
        check_order_matters(3, p);
        ordered_sum(3, p, 0, 0, want);
        /* x [3, N]: Shard(0) on the Partial-to-be dim, Replicate on the other. */
        int64_t shape[2] = {3, N}, dim0 = 0;
        dt_placement xp[2] = {pdim == 0 ? S(0) : R(), pdim == 0 ? R() : S(0)};
        dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, p, 3 * N * sizeof(float), mesh, xp);
        dt_tensor *y = x ? dt_sum(x, 1, &dim0, 0) : NULL;
        CHECK(y && dt_tensor_placements(y)[pdim].kind == DT_PLACEMENT_PARTIAL);
        for (int64_t i = 0; y && i < 6; i++) {
            int64_t coord[2] = {i / mshape[1], i % mshape[1]};
            expect_block(y, i, p[coord[pdim]], N, "2-D partial piece");
        }
        dt_placement rr[2] = {R(), R()};
        dt_tensor *rep = y ? dt_redistribute(y, NULL, rr) : NULL;
        CHECK(rep != NULL);
        for (int64_t i = 0; rep && i < 6; i++)
            expect_block(rep, i, want, N, "2-D all-reduce");
        dt_tensor_release(rep);
        dt_tensor_release(y);
        dt_tensor_release(x);
        dt_mesh_release(mesh);
    }
    dt_graph_release(g);
}

int main(void) {
    test_one_dim();
    test_two_dim();
    if (failures) {
        fprintf(stderr, "test_collective: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_collective: all passed\n");
    return 0;
}
