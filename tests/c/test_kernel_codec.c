/*
 * Self-contained kernels (src/core/records/kernel_codec.c): a controller round's
 * kernels, encoded to bytes, decode in a fresh graph against fresh blobs and
 * give the same results bit for bit. The round holds elementwise ops (binary,
 * scalar, broadcast), a reduction, a view (a local slice) and collectives on a
 * 2-device mesh (all-gather, all-reduce, reduce-scatter), with the 'ref'
 * backend; its input comes from a host buffer, which the decoder's resolver
 * rebuilds. Moves between meshes (point-to-point copies through the comm and
 * local assemblies, one of more pieces than a kernel has inputs) round-trip
 * the same way. Expected values are also computed here from the inputs, so the
 * comparison cannot pass on two equally wrong runs. Then: packed attributes
 * are lossless and smaller than the builder; kernels that cannot leave the
 * process are refused; every truncation of the bytes and random bit flips
 * decode to an error or a batch, never a crash (ASan/UBSan, TSan).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/client/tensor.h"
#include "core/controller/lower_comm.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "test_util.h"

#define ROWS 4
#define COLS 6

/* ------------------------------------------------------------ the tap */

#define MAX_ROUNDS 16
static struct {
    pthread_mutex_t lock;
    int n;
    uint8_t *bytes[MAX_ROUNDS];
    size_t len[MAX_ROUNDS];
    dt_status st[MAX_ROUNDS];
} taps = {PTHREAD_MUTEX_INITIALIZER, 0, {0}, {0}, {0}};

static void on_tap(void *arg, const void *bytes, size_t len, dt_status st) {
    (void)arg;
    pthread_mutex_lock(&taps.lock);
    if (taps.n < MAX_ROUNDS) {
        taps.st[taps.n] = st;
        taps.len[taps.n] = len;
        taps.bytes[taps.n] = len ? malloc(len) : NULL;
        if (len)
            memcpy(taps.bytes[taps.n], bytes, len);
        taps.n++;
    }
    pthread_mutex_unlock(&taps.lock);
}

static void taps_clear(void) {
    pthread_mutex_lock(&taps.lock);
    for (int i = 0; i < taps.n; i++)
        free(taps.bytes[i]);
    taps.n = 0;
    pthread_mutex_unlock(&taps.lock);
}

/* ------------------------------------------------------- the resolver */

static float host_x[ROWS * COLS];
static int64_t host_shape[2] = {ROWS, COLS}; /* the shape x's host source is rebuilt with */

typedef struct table {
    dt_graph *g;
    int n;
    uint64_t ids[256];
    dt__blob *blobs[256];
    int externals, groups;
    int tolerant; /* fuzzing: any name binds to a fresh blob */
    uint64_t want_future;
    dt_future *future; /* the decoded syncs' future */
} table;

static dt__blob *lookup(table *t, uint64_t id) {
    for (int i = 0; i < t->n; i++)
        if (t->ids[i] == id)
            return t->blobs[i];
    return NULL;
}

static dt__blob *add(table *t, uint64_t id, dt__blob *b) {
    if (!b || t->n == 256)
        return NULL;
    b->id = id;
    t->ids[t->n] = id;
    t->blobs[t->n++] = b;
    return dt__blob_retain(b);
}

/* Known ids come from the table (outputs of earlier kernels); the one blob
 * the batch reads without making it is x's host source, rebuilt here. */
static dt__blob *res_input(void *ctx, uint64_t id) {
    table *t = ctx;
    dt__blob *b = lookup(t, id);
    if (b)
        return dt__blob_retain(b);
    if (t->tolerant) {
        b = dt__blob_new(&dt__backend_ref);
        dt__blob *r = add(t, id, b);
        if (!r)
            dt__blob_release(b);
        return r;
    }
    if (t->externals++)
        return NULL;
    b = dt__blob_new(&dt__backend_ref);
    char err[256];
    if (b &&
        dt__backend_ref.from_host(DT_FLOAT32, 2, host_shape, host_x, &b->impl, err, sizeof err) != DT_OK) {
        dt__blob_release(b);
        return NULL;
    }
    dt__blob *r = add(t, id, b);
    if (!r)
        dt__blob_release(b);
    return r;
}

static dt__blob *res_output(void *ctx, uint64_t id, int type) {
    table *t = ctx;
    if (!t->tolerant)
        CHECK_EQ(type, DT_DEVICE_CPU);
    if (lookup(t, id))
        return NULL; /* an id is made once */
    dt__blob *b = dt__blob_new(&dt__backend_ref);
    dt__blob *r = add(t, id, b);
    if (!r)
        dt__blob_release(b);
    return r;
}

static dt_future *res_future(void *ctx, uint64_t id) {
    table *t = ctx;
    CHECK_EQ(id, t->want_future);
    if (!t->future)
        t->future = dt__future_new();
    if (!t->future)
        return NULL;
    dt__future_expect(t->future, 1);
    atomic_fetch_add(&t->future->refs, 1);
    return t->future;
}

static dt_status res_group(void *ctx, uint64_t id, int type, int t0, int t1, int n, const int64_t *ids,
                           uint64_t *local) {
    (void)t0, (void)t1;
    table *t = ctx;
    (void)id;
    CHECK_EQ(n, 2);
    CHECK(n == 2 && ids[0] == 0 && ids[1] == 1);
    t->groups++;
    dt__comm *c = dt__graph_comm(t->g, (dt_device_type)type);
    return c ? c->ops->group_create(c, n, ids, local) : DT_ENOMEM;
}

/* Fuzzing: any future id gets a fresh future, any group id binds as is. */
static dt_future *any_future(void *ctx, uint64_t id) {
    (void)ctx, (void)id;
    return dt__future_new();
}

static dt_status any_group(void *ctx, uint64_t id, int type, int t0, int t1, int n, const int64_t *ids,
                           uint64_t *local) {
    (void)t0, (void)t1;
    (void)ctx, (void)type, (void)n, (void)ids;
    *local = id;
    return DT_OK;
}

static void table_free(table *t) {
    for (int i = 0; i < t->n; i++)
        dt__blob_release(t->blobs[i]);
    t->n = 0;
    if (t->future)
        dt_future_release(t->future);
    t->future = NULL;
}

/* --------------------------------------------------------- helpers */

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

/* A blob's values as host floats (n of them); 0 on failure. */
static int blob_floats(const dt__blob *b, float *out, size_t n) {
    if (!b || !b->impl || b->error) {
        fprintf(stderr, "blob %p: impl %p error %s\n", (const void *)b, b ? b->impl : NULL,
                b && b->error ? b->error : "-");
        return 0;
    }
    size_t nb = b->be->nbytes(b->impl);
    if (nb != n * sizeof(float)) {
        fprintf(stderr, "blob of %zu bytes, want %zu\n", nb, n * sizeof(float));
        return 0;
    }
    char err[256];
    return b->be->to_host(b->impl, out, nb, err, sizeof err) == DT_OK;
}

/* Device i's block of t in the original run, and its decoded twin. */
static void compare(const char *what, dt_tensor *t, table *tb, const float *want, size_t n) {
    for (int i = 0; i < 2; i++) {
        const dt__blob *orig = t->v->blobs[i];
        const dt__blob *dec = orig ? lookup(tb, orig->id) : NULL;
        float a[ROWS * COLS], b[ROWS * COLS];
        int ok_a = blob_floats(orig, a, n), ok_b = blob_floats(dec, b, n);
        if (!ok_a || !ok_b || memcmp(a, b, n * sizeof(float)) != 0) {
            fprintf(stderr, "%s, device %d: original (%d) and decoded (%d) differ\n", what, i, ok_a, ok_b);
            failures++;
            continue;
        }
        for (size_t e = 0; want && e < n; e++)
            if (a[e] != want[(size_t)i * n + e]) {
                fprintf(stderr, "%s, device %d, element %zu: %g, want %g\n", what, i, e, a[e],
                        want[(size_t)i * n + e]);
                failures++;
                break;
            }
    }
}

/* ------------------------------------------------------ the round trip */

static void round_trip(void) {
    dt_graph *g = ref_graph();
    int64_t ids[2] = {0, 1}, mshape[1] = {2};
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &mesh) == DT_OK);
    if (!g || !mesh)
        return;
    dt__graph_set_kernel_tap_for_test(g, on_tap, NULL);
    for (int i = 0; i < ROWS * COLS; i++)
        host_x[i] = (float)(i % 7) - 2.5f + 0.125f * (float)i;
    int64_t shape[2] = {ROWS, COLS};
    dt_placement s0 = S(0), r = R(), pp = P();

    /* One round: the controller takes everything recorded while held. */
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, host_x, sizeof host_x, mesh, &s0);
    dt_tensor *ar = dt_arange(g, DT_FLOAT32, 0, COLS, 1, mesh, &r);
    dt_tensor *e1 = dt_binary(DT_BINARY_MUL, x, ar); /* S x R -> S, broadcast */
    dt_tensor *e = dt_binary_scalar(DT_BINARY_ADD, e1, dt_scalar_float(1.5), 0);
    int64_t d1 = 1, d0 = 0;
    dt_placement s1 = S(1);
    dt_tensor *rs = dt_sum(e, 1, &d1, 0);           /* reduction, stays S(0) */
    dt_tensor *ag = dt_redistribute(e, mesh, &r);   /* all-gather */
    dt_tensor *sl = dt_redistribute(ag, mesh, &s1); /* R -> S(1): a local slice (view) */
    dt_tensor *ps = dt_sum(e, 1, &d0, 0);           /* Partial */
    dt_tensor *aredu = dt_redistribute(ps, mesh, &r);
    dt_tensor *rsc = dt_redistribute(ps, mesh, &s0); /* reduce-scatter */
    (void)pp;
    dt_future *sf = dt_graph_sync_future(g);
    CHECK(x && ar && e1 && e && rs && ag && sl && ps && aredu && rsc && sf);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    CHECK(dt_future_wait(sf, -1) == DT_OK);

    /* Expected values, from the inputs. */
    float ev[ROWS * COLS], want_rows[ROWS], want_cols[COLS], want_ag[2 * ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        ev[i] = host_x[i] * (float)(i % COLS) + 1.5f;
    float want_sl[ROWS * COLS];
    for (int dev = 0; dev < 2; dev++)
        for (int i = 0; i < ROWS; i++)
            for (int j = 0; j < COLS / 2; j++)
                want_sl[dev * ROWS * COLS / 2 + i * COLS / 2 + j] = ev[i * COLS + dev * COLS / 2 + j];
    for (int i = 0; i < ROWS; i++) {
        want_rows[i] = 0;
        for (int j = 0; j < COLS; j++)
            want_rows[i] += ev[i * COLS + j];
    }
    float want_ar[2 * COLS], want_rsc[COLS];
    for (int j = 0; j < COLS; j++) {
        /* rank-order sum of the two Partial pieces (rows 0-1, rows 2-3) */
        float p0 = ev[0 * COLS + j] + ev[1 * COLS + j], p1 = ev[2 * COLS + j] + ev[3 * COLS + j];
        want_cols[j] = p0 + p1;
        want_ar[j] = want_ar[COLS + j] = want_cols[j];
        want_rsc[j] = want_cols[j];
    }
    memcpy(want_ag, ev, sizeof ev);
    memcpy(want_ag + ROWS * COLS, ev, sizeof ev);

    pthread_mutex_lock(&taps.lock);
    int rounds = taps.n;
    pthread_mutex_unlock(&taps.lock);
    CHECK_EQ(rounds >= 1, 1);
    CHECK_EQ(taps.st[0], DT_OK);

    /* Decode in a fresh graph against fresh blobs and run it. */
    dt_graph *g2 = ref_graph();
    table tb = {.g = g2, .want_future = sf->id};
    dt__kresolver res = {&tb, res_input, res_output, res_future, res_group};
    dt__kbatch b = {0};
    CHECK_EQ(dt__kernel_decode(taps.bytes[0], taps.len[0], &res, &b), DT_OK);
    CHECK_EQ(b.n, 4); /* each device's compute and communication streams */
    CHECK_EQ(tb.externals, 1);
    CHECK_EQ(tb.groups, 1); /* three collectives, one group (same devices, same stream kind) */
    CHECK(tb.future != NULL);
    CHECK_EQ(dt__kbatch_push(g2, &b), DT_OK);
    dt__kbatch_free(&b);
    if (tb.future)
        CHECK_EQ(dt_future_wait(tb.future, -1), DT_OK);

    compare("e", e, &tb, ev, ROWS * COLS / 2);
    compare("row sums", rs, &tb, want_rows, ROWS / 2);
    compare("slice", sl, &tb, want_sl, ROWS * COLS / 2);
    compare("all-gather", ag, &tb, want_ag, ROWS * COLS);
    compare("all-reduce", aredu, &tb, want_ar, COLS);
    compare("reduce-scatter", rsc, &tb, want_rsc, COLS / 2);

    /* Fuzz: every truncation fails; bit flips fail or decode, never crash. */
    const uint8_t *enc = taps.bytes[0];
    size_t len = taps.len[0];
    uint8_t *buf = malloc(len);
    int fuzz_ok = 0;
    for (size_t cut = 0; cut < len; cut++) {
        table ft = {.g = g2, .tolerant = 1};
        dt__kresolver fr = {&ft, res_input, res_output, any_future, any_group};
        dt__kbatch fb = {0};
        dt_status st = dt__kernel_decode(enc, cut, &fr, &fb);
        if (st != DT_EINVAL) {
            fprintf(stderr, "truncation to %zu of %zu bytes decoded (%d)\n", cut, len, (int)st);
            failures++;
        }
        dt__kbatch_free(&fb);
        table_free(&ft);
    }
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int it = 0; it < 3000 && buf; it++) {
        memcpy(buf, enc, len);
        int flips = 1 + it % 3;
        for (int f = 0; f < flips; f++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(rng >> 33) % len;
            buf[at] ^= (uint8_t)(1u << ((rng >> 20) & 7));
        }
        /* A tolerant resolver: any name binds, so the decoder's own checks
         * are what stands between the bytes and the records. */
        table ft = {.g = g2, .tolerant = 1};
        dt__kresolver fr = {&ft, res_input, res_output, any_future, any_group};
        dt__kbatch fb = {0};
        size_t cut = it % 5 == 0 ? (size_t)(rng >> 40) % len : len;
        dt_status st = dt__kernel_decode(buf, cut, &fr, &fb);
        CHECK(st == DT_OK || st == DT_EINVAL);
        fuzz_ok += st == DT_OK;
        dt__kbatch_free(&fb);
        table_free(&ft);
    }
    free(buf);
    /* Flips in values (not in lengths or names) decode: the loop reaches
     * past the checks. */
    CHECK(fuzz_ok > 0);

    table_free(&tb);
    dt_tensor *all[] = {x, ar, e1, e, rs, ag, sl, ps, aredu, rsc};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        dt_tensor_release(all[i]);
    dt_future_release(sf);
    dt_graph_release(g2);
    dt_mesh_release(mesh);
    dt_graph_release(g);
    taps_clear();
}

/* ------------------------------------------ cross-mesh copies round trip */

/* Pairs of a copy between meshes: 2-rank groups of the CPU comm. */
static dt_status pair_group(void *ctx, uint64_t id, int type, int t0, int t1, int n, const int64_t *ids,
                            uint64_t *local) {
    (void)t0, (void)t1;
    table *t = ctx;
    (void)id, (void)ids;
    CHECK_EQ(n, 2);
    CHECK_EQ(type, DT_DEVICE_CPU);
    t->groups++;
    dt__comm *c = dt__graph_comm(t->g, (dt_device_type)type);
    return c ? c->ops->group_create(c, n, ids, local) : DT_ENOMEM;
}

/* x (rows x cols of host_x) on the 1-d mesh sids[ns], Shard(0), moved to
 * the 1-d mesh dids[nd] as `dpl` (Replicate or Shard(1)) in one round; the
 * round decodes in a fresh graph, runs, and every destination device's
 * block matches the original run's bit for bit and the value computed here
 * from host_x. `pairs`: the groups the round must name (one per pair of
 * devices a piece moves between). */
static void cross_case(const char *what, int ns, const int64_t *sids, int64_t rows, int64_t cols, int nd,
                       const int64_t *dids, dt_placement dpl, int pairs) {
    dt_graph *g = ref_graph();
    int64_t sshape[1] = {ns}, dshape[1] = {nd};
    dt_mesh *sm = NULL, *dm = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, sshape, sids, NULL, &sm) == DT_OK);
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, dshape, dids, NULL, &dm) == DT_OK);
    if (!g || !sm || !dm)
        return;
    dt__graph_set_kernel_tap_for_test(g, on_tap, NULL);
    for (int i = 0; i < ROWS * COLS; i++)
        host_x[i] = (float)(i % 5) - 1.75f + 0.25f * (float)i;
    host_shape[0] = rows;
    host_shape[1] = cols;
    int64_t shape[2] = {rows, cols};
    dt_placement s0 = S(0);
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, host_x, sizeof host_x, sm, &s0);
    dt_tensor *y = dt_redistribute(x, dm, &dpl);
    dt_future *sf = dt_graph_sync_future(g);
    CHECK(x && y && sf);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    CHECK(sf && dt_future_wait(sf, -1) == DT_OK);
    CHECK(taps.n >= 1 && taps.st[0] == DT_OK);
    if (!x || !y || !sf || taps.n < 1 || taps.st[0] != DT_OK) {
        fprintf(stderr, "%s: the round did not encode: %s\n", what, dt_last_error());
        return;
    }

    dt_graph *g2 = ref_graph();
    table tb = {.g = g2, .want_future = sf->id};
    dt__kresolver res = {&tb, res_input, res_output, res_future, pair_group};
    dt__kbatch b = {0};
    CHECK_EQ(dt__kernel_decode(taps.bytes[0], taps.len[0], &res, &b), DT_OK);
    CHECK_EQ(tb.externals, 1);
    CHECK_EQ(tb.groups, pairs);
    CHECK_EQ(dt__kbatch_push(g2, &b), DT_OK);
    dt__kbatch_free(&b);
    if (tb.future)
        CHECK_EQ(dt_future_wait(tb.future, -1), DT_OK);

    int shard = dpl.kind == DT_PLACEMENT_SHARD;
    int64_t cs = shard ? (cols + nd - 1) / nd : cols;
    for (int k = 0; k < nd; k++) {
        int64_t c0 = shard ? k * cs : 0, cl = c0 + cs <= cols ? cs : cols - c0;
        size_t n = (size_t)(rows * cl);
        float want[ROWS * COLS], a[ROWS * COLS], d[ROWS * COLS];
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cl; j++)
                want[i * cl + j] = host_x[i * cols + c0 + j];
        const dt__blob *orig = y->v->blobs[k];
        const dt__blob *dec = orig ? lookup(&tb, orig->id) : NULL;
        int ok_a = blob_floats(orig, a, n), ok_d = blob_floats(dec, d, n);
        if (!ok_a || !ok_d || memcmp(a, want, n * sizeof *a) != 0 || memcmp(d, want, n * sizeof *d) != 0) {
            fprintf(stderr,
                    "%s, destination device %d: original (%d) or decoded (%d) differs from the value\n", what,
                    k, ok_a, ok_d);
            failures++;
        }
    }
    table_free(&tb);
    dt_tensor_release(y);
    dt_tensor_release(x);
    dt_future_release(sf);
    dt_graph_release(g2);
    dt_mesh_release(dm);
    dt_mesh_release(sm);
    dt_graph_release(g);
    taps_clear();
    host_shape[0] = ROWS;
    host_shape[1] = COLS;
}

static void cross_mesh(void) {
    const int64_t a[2] = {0, 1}, b[2] = {1, 2}, eight[8] = {0, 1, 2, 3, 4, 5, 6, 7}, nine[1] = {9};
    /* Device 1 assembles a local slice and a piece from device 0; device 2
     * two received pieces. */
    cross_case("S(0) on [0, 1] -> S(1) on [1, 2]", 2, a, ROWS, COLS, 2, b, S(1), 3);
    cross_case("S(0) on [0, 1] -> R on [1, 2]", 2, a, ROWS, COLS, 2, b, R(), 3);
    /* Eight received pieces: more than one assembly kernel holds. */
    cross_case("S(0) on 8 devices -> R on [9]", 8, eight, 8, 3, 1, nine, R(), 8);
}

/* ---------------------------------------------------------- attributes */

static void attrs(void) {
    dt__kattr a, b;
    memset(&a, 0, sizeof a);
    a.dtype = DT_FLOAT64, a.sub = 3, a.flags = DT_KF_KEEPDIM | DT_KF_REUSE, a.ndim = 3, a.dim = 2;
    a.gndim = 4, a.nints = 16, a.dims_mask = 0x8000000000000005ull, a.seed = 42;
    /* Member by member: a struct assignment may leave the padding after
     * dt_scalar.kind undefined, and the check below compares bytes. */
    a.scalar.kind = DT_SCALAR_FLOAT, a.scalar.f = -0.0;
    a.scalar2.kind = DT_SCALAR_INT, a.scalar2.i = -7;
    a.f[0] = 1.5, a.f[2] = -1e300;
    a.text = "ij,jk->ik";
    for (int d = 0; d < DT_MAX_NDIM; d++) {
        a.shape[d] = d < 3 ? 5 - d : 0;
        a.start[d] = d == 7 ? -1 : 0;
        a.gshape[d] = d * 11;
        a.step[d] = 1;
    }
    for (int i = 0; i < 2 * DT_MAX_NDIM; i++)
        a.ints[i] = i % 3 == 0 ? 0 : (int64_t)1 << (i * 3);
    size_t n = dt__kattr_pack_size(&a);
    dt__krec *k = dt__krec_alloc(n);
    CHECK(k != NULL);
    if (!k)
        return;
    dt__kattr_pack(&a, k->attr);
    dt__kattr_unpack(k, &b);
    CHECK(b.text && strcmp(b.text, a.text) == 0);
    a.text = b.text = NULL;
    CHECK(memcmp(&a, &b, sizeof a) == 0); /* -0.0 kept: bits, not values */
    dt__krec_free(k);

    /* An elementwise kernel's record is a fraction of the builder's. */
    memset(&a, 0, sizeof a);
    a.dtype = DT_FLOAT32, a.sub = DT_BINARY_ADD, a.flags = DT_KF_REUSE;
    size_t small = dt__krec_footprint(dt__kattr_pack_size(&a));
    printf("kernel record: %zu bytes (elementwise) against %zu for a full dt__kattr kernel\n", small,
           sizeof(dt__kernel));
    CHECK(small * 3 <= sizeof(dt__kernel));
    /* Empty attributes unpack to zeros. */
    k = dt__krec_alloc(0);
    CHECK(k != NULL);
    if (k) {
        dt__kattr_unpack(k, &b);
        memset(&a, 0, sizeof a);
        CHECK(memcmp(&a, &b, sizeof a) == 0);
        dt__krec_free(k);
    }
}

/* a (a zeroed dt__kattr with one field set) packs into what pack_size says
 * and unpacks to itself, byte for byte. */
static void one_field_case(const dt__kattr *a, const char *what, int i) {
    size_t n = dt__kattr_pack_size(a);
    dt__krec *k = dt__krec_alloc(n);
    CHECK(k != NULL);
    if (!k)
        return;
    k->alen = (uint32_t)dt__kattr_pack(a, k->attr);
    dt__kattr b;
    dt__kattr_unpack(k, &b);
    if (k->alen != n || memcmp(a, &b, sizeof b) != 0) {
        fprintf(stderr, "attributes with only %s[%d] set: packed %u bytes (size says %zu), unpacked %s\n",
                what, i, k->alen, n, memcmp(a, &b, sizeof b) ? "different" : "the same");
        failures++;
    }
    dt__krec_free(k);
}

/* Each field alone, each array entry alone: packing skips what is zero,
 * so a field's presence must not depend on another's (the arrays' used
 * lengths, the ints, scalars and floats each found on their own). */
static void attrs_one_field(void) {
    dt__kattr a;
    int32_t *i32[] = {&a.dtype, &a.sub, &a.flags, &a.ndim, &a.dim, &a.gndim, &a.nints};
    for (int i = 0; i < (int)(sizeof i32 / sizeof i32[0]); i++) {
        memset(&a, 0, sizeof a);
        *i32[i] = i == 3 || i == 5 || i == 6 ? 2 : -3 - i; /* ndim, gndim, nints: a valid count */
        one_field_case(&a, "int32 field", i);
    }
    memset(&a, 0, sizeof a);
    a.dims_mask = 1ull << 63;
    one_field_case(&a, "dims_mask", 0);
    memset(&a, 0, sizeof a);
    a.seed = 7;
    one_field_case(&a, "seed", 0);
    for (int i = 0; i < 3; i++) {
        memset(&a, 0, sizeof a);
        a.f[i] = 0.5 + i;
        one_field_case(&a, "f", i);
        memset(&a, 0, sizeof a);
        dt_scalar *sc = i < 2 ? &a.scalar : &a.scalar2;
        if (i == 0)
            sc->i = -9;
        else if (i == 1)
            sc->f = -0.0;
        else
            sc->kind = DT_SCALAR_BOOL;
        one_field_case(&a, "scalar", i);
    }
    struct {
        int64_t *v;
        int n;
        const char *name;
    } arr[] = {{a.shape, DT_MAX_NDIM, "shape"},
               {a.start, DT_MAX_NDIM, "start"},
               {a.gshape, DT_MAX_NDIM, "gshape"},
               {a.step, DT_MAX_NDIM, "step"},
               {a.ints, 2 * DT_MAX_NDIM, "ints"}};
    for (int j = 0; j < 5; j++)
        for (int i = 0; i < arr[j].n; i++) {
            memset(&a, 0, sizeof a);
            arr[j].v[i] = -(int64_t)i - 1;
            one_field_case(&a, arr[j].name, i);
        }
}

static uint64_t xorshift(uint64_t *r) {
    *r ^= *r << 13;
    *r ^= *r >> 7;
    *r ^= *r << 17;
    return *r;
}

/* Attributes unpacked over the previous kernel's (a worker's scratch,
 * dt__kattr_unpack_over) equal the packed ones byte for byte, whatever the
 * previous kernel left: records of random fields and array lengths, longer
 * and shorter than the one before, and records with no attributes. */
static void attrs_over(void) {
    dt__kattr scratch, a;
    uint8_t lens[DT__KATTR_ARRAYS] = {0};
    memset(&scratch, 0, sizeof scratch);
    uint64_t r = 0x9e3779b97f4a7c15ull;
#define RND() xorshift(&r)
    int bad = 0;
    for (int t = 0; t < 400 && !bad; t++) {
        memset(&a, 0, sizeof a);
        int empty = t % 9 == 4; /* a core kernel's record: no attribute bytes */
        if (!empty) {
            a.dtype = (int32_t)(RND() % 3), a.sub = (int32_t)(RND() % 4), a.flags = (int32_t)(RND() % 2);
            a.ndim = (int32_t)(RND() % (DT_MAX_NDIM + 1)), a.dim = (int32_t)(RND() % 2);
            a.gndim = (int32_t)(RND() % (DT_MAX_NDIM + 1));
            a.nints = (int32_t)(RND() % (2 * DT_MAX_NDIM + 1));
            a.dims_mask = RND() % 3 == 0 ? RND() : 0, a.seed = RND() % 3 == 0 ? RND() : 0;
            if (RND() % 2)
                a.scalar.kind = DT_SCALAR_FLOAT, a.scalar.f = (double)(int64_t)(RND() % 100) - 50.0;
            if (RND() % 3 == 0)
                a.scalar2.kind = DT_SCALAR_INT, a.scalar2.i = (int64_t)(RND() % 100);
            int fi = (int)(RND() % 3);
            a.f[fi] = RND() % 2 ? 2.5 : 0.0;
            int64_t *arrs[DT__KATTR_ARRAYS] = {a.shape, a.start, a.gshape, a.step, a.ints};
            int caps[DT__KATTR_ARRAYS] = {DT_MAX_NDIM, DT_MAX_NDIM, DT_MAX_NDIM, DT_MAX_NDIM,
                                          2 * DT_MAX_NDIM};
            for (int j = 0; j < DT__KATTR_ARRAYS; j++) {
                int len = (int)(RND() % (uint64_t)(caps[j] + 1));
                for (int i = 0; i < len; i++)
                    arrs[j][i] = RND() % 4 == 0 ? 0 : (int64_t)(RND() % 1000) - 500;
            }
        }
        dt__krec *k = dt__krec_alloc(empty ? 0 : dt__kattr_pack_size(&a));
        CHECK(k != NULL);
        if (!k)
            return;
        if (!empty)
            dt__kattr_pack(&a, k->attr);
        dt__kattr_unpack_over(k, &scratch, lens);
        if (memcmp(&a, &scratch, sizeof a) != 0) {
            const uint8_t *x = (const uint8_t *)&a, *y = (const uint8_t *)&scratch;
            size_t off = 0;
            while (x[off] == y[off])
                off++;
            fprintf(stderr,
                    "record %d (alen %u): unpacked over the previous one, byte %zu of dt__kattr is 0x%02x, "
                    "packed 0x%02x\n",
                    t, (unsigned)k->alen, off, y[off], x[off]);
            bad = 1;
        }
        dt__krec_free(k);
    }
#undef RND
    CHECK(!bad);
}

/* ----------------------------------------------- what cannot be encoded */

static void refused(void) {
    dt_graph *g = ref_graph();
    int64_t ids[1] = {0}, mshape[1] = {1}, shape[1] = {4};
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &mesh) == DT_OK);
    if (!g || !mesh)
        return;
    dt__graph_set_kernel_tap_for_test(g, on_tap, NULL);
    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK);
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), mesh, NULL);
    CHECK(dt_graph_sync(g) == DT_OK);
    dt_tensor *y = dt_debug_gated(x, gate);
    CHECK(y != NULL);
    dt_debug_gate_open(gate);
    CHECK(dt_graph_sync(g) == DT_OK);
    float out[4]; /* its own round: a read */
    CHECK(dt_tensor_read(y, out, sizeof out) == DT_OK);
    CHECK_FEQ(out[3], 2.0f);
    int saw = 0;
    pthread_mutex_lock(&taps.lock);
    for (int i = 0; i < taps.n; i++)
        saw |= taps.st[i] == DT_EINVAL && !taps.bytes[i];
    pthread_mutex_unlock(&taps.lock);
    CHECK_EQ(saw, 1);

    /* A read names its future; a resolver without futures refuses it. */
    int last = taps.n - 1;
    dt__kbatch b = {0};
    table tb = {.g = g, .tolerant = 1};
    dt__kresolver res = {&tb, res_input, res_output, NULL, res_group};
    CHECK(last >= 0 && taps.st[last] == DT_OK);
    if (last >= 0 && taps.st[last] == DT_OK) {
        CHECK_EQ(dt__kernel_decode(taps.bytes[last], taps.len[last], &res, &b), DT_EINVAL);
        CHECK(strstr(dt_last_error(), "future") != NULL);
    }
    CHECK_EQ(b.n, 0);
    table_free(&tb);

    /* A cross-mesh copy goes through the comm (point-to-point kernels and a
     * local assembly): it encodes. */
    int64_t ids2[1] = {1};
    dt_mesh *mesh2 = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids2, NULL, &mesh2) == DT_OK);
    int before = 0, after = 0;
    pthread_mutex_lock(&taps.lock);
    for (int i = 0; i < taps.n; i++)
        before += taps.st[i] == DT_EINVAL;
    pthread_mutex_unlock(&taps.lock);
    dt_placement rr = R();
    dt_tensor *z = mesh2 ? dt_redistribute(x, mesh2, &rr) : NULL;
    CHECK(z != NULL);
    CHECK(dt_tensor_read(z, out, sizeof out) == DT_OK);
    CHECK_FEQ(out[0], 2.0f);
    pthread_mutex_lock(&taps.lock);
    for (int i = 0; i < taps.n; i++)
        after += taps.st[i] == DT_EINVAL;
    pthread_mutex_unlock(&taps.lock);
    CHECK_EQ(after, before);
    dt_tensor_release(z);
    dt_mesh_release(mesh2);
    dt_tensor_release(y);
    dt_tensor_release(x);
    dt_debug_gate_release(gate);
    dt_mesh_release(mesh);
    dt_graph_release(g);
    taps_clear();
}

int main(void) {
    attrs();
    attrs_one_field();
    attrs_over();
    round_trip();
    cross_mesh();
    refused();
    if (failures) {
        fprintf(stderr, "%d failure(s)\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
