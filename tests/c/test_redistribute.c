/*
 * The redistribute planner, exhaustively, on the 'ref' backend: for meshes
 * (2,), (3,), (4,), (2,2), (2,3), (2,1,2) and tensors (6,4), (5,7), (1,3),
 * (7,), every source placement list in {R, S(each dim), P}^ndim to every
 * target in {R, S(each dim), P}^ndim, checked exactly against the host data
 * (small integers, so Partial sums are exact), plus the result's placements
 * and the determinism of Partial -> Replicate.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static long checked;

/* Placement number k of a tensor with `nd` dims: 0 = R, 1..nd = S(k-1), nd+1 = P. */
static dt_placement placement(int k, int nd) {
    if (k == 0)
        return (dt_placement){DT_PLACEMENT_REPLICATE, 0};
    if (k <= nd)
        return (dt_placement){DT_PLACEMENT_SHARD, k - 1};
    return (dt_placement){DT_PLACEMENT_PARTIAL, 0};
}

static void format(char *buf, size_t n, const dt_placement *pl, int k) {
    size_t len = 0;
    for (int i = 0; i < k && len < n; i++)
        len += (size_t)snprintf(buf + len, n - len, "%s%c%d", i ? "," : "",
                                pl[i].kind == DT_PLACEMENT_SHARD     ? 'S'
                                : pl[i].kind == DT_PLACEMENT_PARTIAL ? 'P'
                                                                     : 'R',
                                pl[i].kind == DT_PLACEMENT_SHARD ? pl[i].dim : 0);
}

static void run_mesh(dt_graph *g, int mnd, const int64_t *mshape) {
    int64_t ids[64];
    int64_t ndev = 1;
    for (int i = 0; i < mnd; i++)
        ndev *= mshape[i];
    for (int64_t i = 0; i < ndev; i++)
        ids[i] = 20 + i * 3; /* ids need not be dense */
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, mnd, mshape, ids, NULL, &mesh) == DT_OK);
    const int64_t shapes[4][2] = {{6, 4}, {5, 7}, {1, 3}, {7, 0}};
    const int ndims[4] = {2, 2, 2, 1};
    for (int si = 0; si < 4; si++) {
        int nd = ndims[si];
        int64_t numel = nd == 1 ? shapes[si][0] : shapes[si][0] * shapes[si][1];
        float x[64], got[64];
        for (int64_t i = 0; i < numel; i++)
            x[i] = (float)((i * 5 + si) % 13) - 6.0f;
        int nk = nd + 2, nsrc = 1, ndst = 1;
        for (int i = 0; i < mnd; i++) {
            nsrc *= nk;
            ndst *= nk;
        }
        for (int a = 0; a < nsrc; a++) {
            dt_placement sp[4];
            for (int i = 0, c = a; i < mnd; i++, c /= nk)
                sp[i] = placement(c % nk, nd);
            dt_tensor *src =
                dt_tensor_from_buffer(g, DT_FLOAT32, nd, shapes[si], x, (size_t)numel * 4, mesh, sp);
            CHECK(src);
            if (!src)
                continue;
            for (int b = 0; b < ndst; b++) {
                dt_placement dp[4];
                for (int i = 0, c = b; i < mnd; i++, c /= nk)
                    dp[i] = placement(c % nk, nd);
                dt_tensor *dst = dt_redistribute(src, NULL, dp);
                CHECK(dst);
                if (!dst)
                    continue;
                const dt_placement *rp = dt_tensor_placements(dst);
                for (int i = 0; i < mnd; i++) {
                    dt_placement want = mshape[i] == 1 ? placement(0, nd) : dp[i];
                    CHECK(rp[i].kind == want.kind && rp[i].dim == want.dim);
                }
                CHECK(dt_tensor_ndim(dst) == nd && dt_tensor_numel(dst) == numel);
                memset(got, 0, sizeof got);
                CHECK(dt_tensor_read(dst, got, (size_t)numel * 4) == DT_OK);
                if (memcmp(got, x, (size_t)numel * 4) != 0) {
                    char s1[64], s2[64];
                    format(s1, sizeof s1, sp, mnd);
                    format(s2, sizeof s2, dp, mnd);
                    fprintf(stderr, "mismatch: mesh ndim %d (%lld devices), shape #%d, [%s] -> [%s]\n", mnd,
                            (long long)ndev, si, s1, s2);
                    for (int64_t i = 0; i < numel; i++)
                        fprintf(stderr, "  [%lld] got %g want %g\n", (long long)i, got[i], x[i]);
                    failures++;
                }
                checked++;
                dt_tensor_release(dst);
            }
            dt_tensor_release(src);
        }
    }
    dt_mesh_release(mesh);
}

static dt_mesh *make_mesh(int nd, const int64_t *shape, int64_t first_id) {
    int64_t ids[64], n = 1;
    for (int i = 0; i < nd; i++)
        n *= shape[i];
    for (int64_t i = 0; i < n; i++)
        ids[i] = first_id + i;
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, nd, shape, ids, NULL, &m) == DT_OK);
    return m;
}

/* Moves between meshes (pipeline stages): every source placement list to
 * every target list, values exact. */
static void test_cross_mesh(dt_graph *g) {
    static const struct {
        int snd, dnd;
        int64_t sshape[3], dshape[3];
        int64_t sfirst, dfirst;
    } pairs[] = {
        {1, 1, {2}, {2}, 0, 2},       /* (2,) -> (2,) on other devices */
        {1, 1, {2}, {3}, 0, 1},       /* (2,) -> (3,), overlapping ids */
        {2, 2, {2, 2}, {2, 2}, 0, 4}, /* (2,2) -> (2,2) on other devices */
        {1, 1, {3}, {1}, 0, 7},       /* onto a one-device mesh */
        {2, 1, {2, 2}, {3}, 0, 2},    /* different ndim and size */
        {1, 3, {3}, {2, 1, 2}, 0, 1},
    };
    const int64_t shapes[3][2] = {{6, 4}, {5, 7}, {1, 3}};
    for (size_t pi = 0; pi < sizeof pairs / sizeof pairs[0]; pi++) {
        dt_mesh *sm = make_mesh(pairs[pi].snd, pairs[pi].sshape, pairs[pi].sfirst);
        dt_mesh *dm = make_mesh(pairs[pi].dnd, pairs[pi].dshape, pairs[pi].dfirst);
        for (int si = 0; si < 3; si++) {
            int64_t numel = shapes[si][0] * shapes[si][1];
            float x[64], got[64];
            for (int64_t i = 0; i < numel; i++)
                x[i] = (float)((i * 3 + si) % 7) - 3.0f;
            int nk = 4, nsrc = 1, ndst = 1;
            for (int i = 0; i < pairs[pi].snd; i++)
                nsrc *= nk;
            for (int i = 0; i < pairs[pi].dnd; i++)
                ndst *= nk;
            for (int a = 0; a < nsrc; a++) {
                dt_placement sp[4], dp[4];
                for (int i = 0, c = a; i < pairs[pi].snd; i++, c /= nk)
                    sp[i] = placement(c % nk, 2);
                dt_tensor *src =
                    dt_tensor_from_buffer(g, DT_FLOAT32, 2, shapes[si], x, (size_t)numel * 4, sm, sp);
                CHECK(src);
                for (int b = 0; src && b < ndst; b++) {
                    for (int i = 0, c = b; i < pairs[pi].dnd; i++, c /= nk)
                        dp[i] = placement(c % nk, 2);
                    dt_tensor *dst = dt_redistribute(src, dm, dp);
                    CHECK(dst && dt_mesh_equal(dt_tensor_mesh(dst), dm));
                    if (!dst)
                        continue;
                    memset(got, 0, sizeof got);
                    CHECK(dt_tensor_read(dst, got, (size_t)numel * 4) == DT_OK);
                    if (memcmp(got, x, (size_t)numel * 4) != 0) {
                        char s1[64], s2[64];
                        format(s1, sizeof s1, sp, pairs[pi].snd);
                        format(s2, sizeof s2, dp, pairs[pi].dnd);
                        fprintf(stderr, "cross-mesh mismatch: pair %zu shape %d [%s] -> [%s]\n", pi, si, s1,
                                s2);
                        failures++;
                    }
                    checked++;
                    dt_tensor_release(dst);
                }
                dt_tensor_release(src);
            }
        }
        dt_mesh_release(sm);
        dt_mesh_release(dm);
    }
}

/* cat along a dim its inputs shard (metadata and lifetimes: the ref backend
 * has no view kernels, so the values are checked from Python against torch):
 * the Shard(0) inputs are gathered and the result sliced back to Shard(0),
 * which it is on every mesh dim where some input was; a Partial next to them
 * is still a placement error, with nothing left behind. */
static void test_cat_along_shard(dt_graph *g) {
    const int64_t m3[] = {3}, m22[] = {2, 2};
    const int64_t xs[2] = {5, 4}, ys[2] = {2, 4};
    float x[20] = {0}, y[8] = {0};
    const dt_placement R = {DT_PLACEMENT_REPLICATE, 0}, S0 = {DT_PLACEMENT_SHARD, 0},
                       S1 = {DT_PLACEMENT_SHARD, 1}, P = {DT_PLACEMENT_PARTIAL, 0};
    const struct {
        int mnd;
        const int64_t *mshape;
        dt_placement px[2], py[2], want[2];
    } cases[] = {
        {1, m3, {S0}, {S0}, {S0}},
        {1, m3, {S0}, {R}, {S0}},
        {1, m3, {S0}, {S1}, {S1}},
        {2, m22, {S0, S1}, {S0, S1}, {S0, S1}},
        {2, m22, {R, S0}, {S0, R}, {S0, S0}},
        {2, m22, {S0, P}, {S0, P}, {S0, P}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        dt_mesh *mesh = make_mesh(cases[ci].mnd, cases[ci].mshape, 0);
        dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, xs, x, sizeof x, mesh, cases[ci].px);
        dt_tensor *b = dt_tensor_from_buffer(g, DT_FLOAT32, 2, ys, y, sizeof y, mesh, cases[ci].py);
        dt_tensor *in[3] = {a, b, a};
        dt_tensor *c = dt_cat(3, in, 0);
        CHECK(c != NULL);
        if (c) {
            const dt_placement *pl = dt_tensor_placements(c);
            for (int md = 0; md < cases[ci].mnd; md++)
                CHECK(pl[md].kind == cases[ci].want[md].kind && pl[md].dim == cases[ci].want[md].dim);
            CHECK(dt_tensor_shape(c)[0] == 12);
            checked++;
        }
        dt_tensor_release(c);
        dt_tensor_release(b);
        dt_tensor_release(a);
        dt_mesh_release(mesh);
    }
    dt_mesh *mesh = make_mesh(1, m3, 0);
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, xs, x, sizeof x, mesh, &S0);
    dt_tensor *b = dt_tensor_from_buffer(g, DT_FLOAT32, 2, ys, y, sizeof y, mesh, &P);
    dt_tensor *in[2] = {a, b};
    CHECK(dt_cat(2, in, 0) == NULL && dt_last_status() == DT_EPLACEMENT);
    dt_tensor_release(b);
    dt_tensor_release(a);
    dt_mesh_release(mesh);
    CHECK(dt_graph_sync(g) == DT_OK);
}

/* Partial -> Replicate of float sums is bit-identical run to run and on
 * every device (fixed rank order). */
static void test_deterministic(dt_graph *g) {
    int64_t mshape[1] = {4}, ids[4] = {0, 1, 2, 3}, shape[1] = {1000};
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &mesh) == DT_OK);
    dt_placement s0 = {DT_PLACEMENT_SHARD, 0}, r = {DT_PLACEMENT_REPLICATE, 0};
    float first[1000], again[1000];
    for (int run = 0; run < 3; run++) {
        dt_manual_seed(7);
        dt_tensor *x = dt_randn(g, DT_FLOAT32, 1, shape, mesh, &s0);
        int64_t d0 = 0;
        dt_tensor *s = dt_sum(x, 1, &d0, 1); /* Partial */
        dt_tensor *rs = dt_redistribute(s, NULL, &r);
        CHECK(dt_tensor_read(rs, run ? again : first, 4) == DT_OK);
        if (run)
            CHECK(memcmp(first, again, 4) == 0);
        dt_tensor_release(x);
        dt_tensor_release(s);
        dt_tensor_release(rs);
    }
    dt_mesh_release(mesh);
}

int main(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    const int64_t m1[] = {2}, m2[] = {3}, m3[] = {4}, m4[] = {2, 2}, m5[] = {2, 3}, m6[] = {2, 1, 2};
    run_mesh(g, 1, m1);
    run_mesh(g, 1, m2);
    run_mesh(g, 1, m3);
    run_mesh(g, 2, m4);
    run_mesh(g, 2, m5);
    run_mesh(g, 3, m6);
    test_cross_mesh(g);
    test_cat_along_shard(g);
    test_deterministic(g);
    dt_graph_release(g);
    printf("test_redistribute: %ld redistributions checked, %d failure(s)\n", checked, failures);
    return failures ? 1 : 0;
}
