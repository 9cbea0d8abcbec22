/*
 * The placement-signature engine (src/core/client/placement.c) on hand-written
 * signatures: the per-mesh-dim rule (placement.h: every Shard input maps to
 * one output dim -> Shard of it; a listed Partial combination, or a
 * DT__PS_PARTIAL shard of a single input with the others Replicate -> Partial;
 * all Replicate -> Replicate; anything else is a PlacementError), the Partial
 * sets and their text, the error message, dim wrapping, the operand checks and
 * the region check. Every expected value is derived here from those rules.
 * Runs on the 'ref' backend under ASan/UBSan and TSan (no graph is needed).
 */
#include <stdio.h>
#include <string.h>

#include "core/client/placement.h"
#include "core/client/tensor.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "test_util.h"

/* ---------------------------------------------------------- signatures */

/* Same-shaped elementwise: dim d of any input is dim d of the output. */
static int same_map(const dt__pctx *c, int j, int d) {
    (void)c;
    (void)j;
    return d;
}

/* A sum over dim 1 of a 2-D input: a Shard(1) becomes a partial sum, a
 * Shard(0) stays Shard(0) of the 1-D output. */
static int sum1_map(const dt__pctx *c, int j, int d) {
    (void)c;
    (void)j;
    return d == 1 ? DT__PS_PARTIAL : 0;
}

/* A width-3 stencil along dim 0: output rows [s, s+l) read rows
 * [s-1, s+l+1), clipped to the input. */
static void halo_needed(const dt__pctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                        int64_t *s, int64_t *l) {
    (void)coord;
    const dt__meta *m = c->in[j];
    for (int d = 0; d < m->ndim; d++) {
        s[d] = os[d];
        l[d] = ol[d];
    }
    if (ol[0] > 0) {
        int64_t lo = os[0] > 0 ? os[0] - 1 : 0, hi = os[0] + ol[0] + 1;
        if (hi > m->shape[0])
            hi = m->shape[0];
        s[0] = lo;
        l[0] = hi - lo;
    }
}

static const uint32_t set_mul[] = DT__PS_MASKS(MUL);
static const uint32_t set_pp[] = DT__PS_MASKS(PP);
static const uint32_t set_pr[] = DT__PS_MASKS(PR);

#define MUL_TEXT DT__PS_SHARDS_2 DT__PS_TEXT(MUL)
static const dt__psig sig_mul = {
    .shard_map = same_map, .needed = NULL, .partial = set_mul, .accepted = MUL_TEXT};
static const dt__psig sig_pp = {
    .shard_map = same_map, .needed = NULL, .partial = set_pp, .accepted = DT__PS_SHARDS_2 DT__PS_TEXT(PP)};
static const dt__psig sig_pr = {
    .shard_map = same_map, .needed = NULL, .partial = set_pr, .accepted = DT__PS_SHARDS_2 DT__PS_TEXT(PR)};
static const dt__psig sig_none = {
    .shard_map = same_map, .needed = NULL, .partial = NULL, .accepted = DT__PS_SHARDS_2 DT__PS_TEXT(NONE)};
static const dt__psig sig_bcast = {
    .shard_map = dt__ps_broadcast_map, .needed = NULL, .partial = set_mul, .accepted = MUL_TEXT};
static const dt__psig sig_sum1 = {
    .shard_map = sum1_map, .needed = NULL, .partial = NULL, .accepted = "S(0)->S(0), S(1)->P"};
static const dt__psig sig_halo = {
    .shard_map = same_map, .needed = halo_needed, .partial = NULL, .accepted = "stencil"};

/* A row table (placement.h, DT__PS_ROWS): on a [4, 6, 8, 2] input, Shard(0)
 * stays, Shard(1) is summed over, Shard(2) is gathered by the op, Shard(3)
 * is a REJECT row; a second input's shards have no row at all. */
enum { T_KEEP = 7, T_SUM = 3, T_GATHER = 5, T_NO = 1 };
#define TROWS(X)                                                                                             \
    X(T_KEEP, "S(0)->S(0)", SHARD)                                                                           \
    X(T_SUM, "S(1)->P", PARTIAL) X(T_GATHER, "S(2)->R (gathered)", GATHER) X(T_NO, "S(3): none", REJECT)
static const dt__ps_row trows[] = DT__PS_ROWS(TROWS);
static int trow(const dt__pctx *c, int j, int d, int *od) {
    (void)c;
    static const int ids[] = {T_KEEP, T_SUM, T_GATHER, T_NO};
    *od = d;
    return j == 0 ? ids[d] : -1;
}
/* Input 1 must be Replicate on mesh dim 1 (a per-mesh-dim check). */
static int rep1_on_md1(const dt__pctx *c, int md) {
    return md == 1 && c->nin > 1 && c->in[1]->pl[md].kind != DT_PLACEMENT_REPLICATE ? 1 : -1;
}
/* Three-input Partial sets (a family's own, as masked_scatter's). */
#define DT__PS_SET_T3(X1, X2, X3) X3(P, R, R) X3(R, R, P) X3(P, R, P)
#define DT__PS_EMPTY_T3 ""

/* Placements equal, both printed on failure. */
#define CHECK_PL(a, b)                                                                                       \
    do {                                                                                                     \
        dt_placement check_a_ = (a), check_b_ = (b);                                                         \
        if (!same(check_a_, check_b_)) {                                                                     \
            fprintf(stderr, "%s:%d: CHECK_PL(%s, %s) failed: kind %d dim %d != kind %d dim %d\n", __FILE__,  \
                    __LINE__, #a, #b, check_a_.kind, check_a_.dim, check_b_.kind, check_b_.dim);             \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* ------------------------------------------------------------- helpers */

static dt_mesh *mesh1, *mesh2, *mesh1b; /* [4]; [2, 2]; [4] on other ids */

static dt_mesh *make_mesh(int ndim, const int64_t *shape, int first_id) {
    int64_t ids[16], n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    for (int64_t i = 0; i < n; i++)
        ids[i] = first_id + i;
    dt_mesh *m = NULL;
    CHECK_EQ(dt_mesh_create(DT_DEVICE_CPU, ndim, shape, ids, NULL, &m), DT_OK);
    return m;
}

static dt__meta meta(dt_mesh *mesh, int ndim, const int64_t *shape, const dt_placement *pl) {
    dt__meta m;
    memset(&m, 0, sizeof m);
    m.dtype = DT_FLOAT32;
    m.ndim = ndim;
    memcpy(m.shape, shape, sizeof(int64_t) * (size_t)ndim);
    m.mesh = mesh;
    for (int md = 0; md < dt_mesh_ndim(mesh); md++)
        m.pl[md] = pl[md];
    return m;
}

static const int64_t sh46[] = {4, 6}, sh6[] = {6}, sh16[] = {1, 6}, sh4[] = {4}, sh8[] = {8};

/* Applies s to two inputs; returns the status, the output placements in out. */
static dt_status apply2(const dt__psig *s, dt_mesh *mesh, const int64_t *sha, int nda, const dt_placement *pa,
                        const int64_t *shb, int ndb, const dt_placement *pb, const int64_t *sho, int ndo,
                        int check_regions, dt_placement *out, int *bad) {
    /* As the families do, the rule writes the output meta's placements,
     * which the region check then reads. */
    const dt_placement rr[DT_MAX_MESH_NDIM] = {{0}};
    dt__meta a = meta(mesh, nda, sha, pa), b = meta(mesh, ndb, shb, pb), o = meta(mesh, ndo, sho, rr);
    dt__pctx c = {.op = 0, .a = NULL, .nin = 2, .in = {&a, &b}, .out = &o};
    dt_status st = dt__ps_apply("op", s, &c, check_regions, o.pl, bad);
    memcpy(out, o.pl, sizeof o.pl);
    return st;
}

/* On the 1-D mesh, same shape [4, 6]: expect `want` (or DT_EPLACEMENT when
 * want_ok is 0, with the error's fix naming input `fix`). */
static void rule1(const dt__psig *s, dt_placement a, dt_placement b, int want_ok, dt_placement want, int fix,
                  int line) {
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad = 99;
    dt_status st = apply2(s, mesh1, sh46, 2, &a, sh46, 2, &b, sh46, 2, 0, out, &bad);
    if (want_ok) {
        if (st != DT_OK || !same(out[0], want)) {
            fprintf(stderr, "line %d: got status %d, kind %d dim %d; want kind %d dim %d\n", line, st,
                    out[0].kind, out[0].dim, want.kind, want.dim);
            failures++;
        }
    } else {
        CHECK_EQ(st, DT_EPLACEMENT);
        char want_fix[64];
        snprintf(want_fix, sizeof want_fix, "Fix: call input %d's", fix);
        if (!strstr(dt_last_error(), want_fix)) {
            fprintf(stderr, "line %d: error does not contain \"%s\": %s\n", line, want_fix, dt_last_error());
            failures++;
        }
    }
    CHECK_EQ(bad, -1); /* the rule itself, not the region check */
}

/* ---------------------------------------------------------------- tests */

static void test_sets(void) {
    /* MUL: (P,R) is bit 0, (R,P) is bit 1; 0-terminated. */
    CHECK_EQ(sizeof set_mul / sizeof set_mul[0], 3);
    CHECK_EQ(set_mul[0], 1);
    CHECK_EQ(set_mul[1], 2);
    CHECK_EQ(set_mul[2], 0);
    CHECK_EQ(sizeof set_pp / sizeof set_pp[0], 2);
    CHECK_EQ(set_pp[0], 3);
    CHECK_EQ(set_pr[0], 1);
    CHECK_EQ(set_pr[1], 0);
    static const uint32_t set_p[] = DT__PS_MASKS(P), set_none[] = DT__PS_MASKS(NONE);
    CHECK_EQ(sizeof set_p / sizeof set_p[0], 2);
    CHECK_EQ(set_p[0], 1);
    CHECK_EQ(sizeof set_none / sizeof set_none[0], 1);
    CHECK_EQ(set_none[0], 0);
    CHECK_STREQ(DT__PS_TEXT(MUL), ", (P,R)->P, (R,P)->P");
    CHECK_STREQ(DT__PS_TEXT(PP), ", (P,P)->P");
    CHECK_STREQ(DT__PS_TEXT(PR), ", (P,R)->P");
    CHECK_STREQ(DT__PS_TEXT(P), ", P->P");
    CHECK_STREQ(DT__PS_TEXT(PDIV), ", P->P");
    CHECK_STREQ(DT__PS_TEXT(NONE), "; no Partial");
    CHECK_STREQ(DT__PS_TEXT(NA), "; no Partial");
}

static void test_rule_1d(void) {
    /* Shards that line up. */
    rule1(&sig_mul, R(), R(), 1, R(), 0, __LINE__);
    rule1(&sig_mul, S(0), S(0), 1, S(0), 0, __LINE__);
    rule1(&sig_mul, S(1), S(1), 1, S(1), 0, __LINE__);
    rule1(&sig_mul, S(1), R(), 1, S(1), 0, __LINE__);
    rule1(&sig_mul, R(), S(0), 1, S(0), 0, __LINE__);
    /* Shards on different output dims: the second one is to redistribute. */
    rule1(&sig_mul, S(0), S(1), 0, R(), 1, __LINE__);
    rule1(&sig_mul, S(1), S(0), 0, R(), 1, __LINE__);
    /* MUL is linear in either input alone. */
    rule1(&sig_mul, P(), R(), 1, P(), 0, __LINE__);
    rule1(&sig_mul, R(), P(), 1, P(), 0, __LINE__);
    rule1(&sig_mul, P(), P(), 0, R(), 0, __LINE__);
    /* A Partial next to a Shard: the Shard input is the one to fix. */
    rule1(&sig_mul, P(), S(0), 0, R(), 1, __LINE__);
    rule1(&sig_mul, S(1), P(), 0, R(), 0, __LINE__);
    /* PP (add-like): only both Partial. */
    rule1(&sig_pp, P(), P(), 1, P(), 0, __LINE__);
    rule1(&sig_pp, P(), R(), 0, R(), 0, __LINE__);
    rule1(&sig_pp, R(), P(), 0, R(), 1, __LINE__);
    /* PR (div-like): the first input only. */
    rule1(&sig_pr, P(), R(), 1, P(), 0, __LINE__);
    rule1(&sig_pr, R(), P(), 0, R(), 1, __LINE__);
    /* No Partial set at all: Shards still work, any Partial is rejected. */
    rule1(&sig_none, S(0), R(), 1, S(0), 0, __LINE__);
    rule1(&sig_none, P(), R(), 0, R(), 0, __LINE__);
    rule1(&sig_none, R(), P(), 0, R(), 1, __LINE__);
}

static void test_broadcast(void) {
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad;
    dt_placement s0 = S(0), s1 = S(1), r = R(), p = P();
    /* [4, 6] * [6]: dim 0 of the [6] input is output dim 1. */
    CHECK_EQ(apply2(&sig_bcast, mesh1, sh46, 2, &s1, sh6, 1, &s0, sh46, 2, 0, out, &bad), DT_OK);
    CHECK_EQ(out[0].kind, DT_PLACEMENT_SHARD);
    CHECK_EQ(out[0].dim, 1);
    CHECK_EQ(apply2(&sig_bcast, mesh1, sh46, 2, &r, sh6, 1, &s0, sh46, 2, 0, out, &bad), DT_OK);
    CHECK_EQ(out[0].kind, DT_PLACEMENT_SHARD);
    CHECK_EQ(out[0].dim, 1);
    /* S(0) of [4, 6] is output dim 0, S(0) of [6] is output dim 1. */
    CHECK_EQ(apply2(&sig_bcast, mesh1, sh46, 2, &s0, sh6, 1, &s0, sh46, 2, 0, out, &bad), DT_EPLACEMENT);
    /* [1, 6]: its dim 0 broadcasts to 4, so a Shard of it cannot map. */
    CHECK_EQ(apply2(&sig_bcast, mesh1, sh46, 2, &r, sh16, 2, &s0, sh46, 2, 0, out, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "Fix: call input 1's .redistribute(placements=[Replicate()]) first.") !=
          NULL);
    CHECK_EQ(apply2(&sig_bcast, mesh1, sh46, 2, &s1, sh16, 2, &s1, sh46, 2, 0, out, &bad), DT_OK);
    CHECK_EQ(out[0].kind, DT_PLACEMENT_SHARD);
    CHECK_EQ(out[0].dim, 1);
    /* Partial with a broadcast Replicate operand. */
    CHECK_EQ(apply2(&sig_bcast, mesh1, sh46, 2, &p, sh16, 2, &r, sh46, 2, 0, out, &bad), DT_OK);
    CHECK_EQ(out[0].kind, DT_PLACEMENT_PARTIAL);
    /* The map itself: [4, 6] vs [1, 6] into [4, 6]. */
    dt__meta a = meta(mesh1, 2, sh46, &r), b = meta(mesh1, 2, sh16, &r), o = meta(mesh1, 2, sh46, &r);
    dt__meta v = meta(mesh1, 1, sh6, &r);
    dt__pctx c = {.nin = 2, .in = {&a, &b}, .out = &o};
    CHECK_EQ(dt__ps_broadcast_map(&c, 0, 0), 0);
    CHECK_EQ(dt__ps_broadcast_map(&c, 0, 1), 1);
    CHECK_EQ(dt__ps_broadcast_map(&c, 1, 0), DT__PS_REJECT);
    CHECK_EQ(dt__ps_broadcast_map(&c, 1, 1), 1);
    c.in[1] = &v;
    CHECK_EQ(dt__ps_broadcast_map(&c, 1, 0), 1);
}

static void test_partial_shard_map(void) {
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad;
    dt_placement s0 = S(0), s1 = S(1), r = R(), p = P();
    /* One input whose Shard(1) is summed over: Partial without any set. */
    dt__meta a = meta(mesh1, 2, sh46, &s1), o = meta(mesh1, 1, sh4, &r);
    dt__pctx c = {.nin = 1, .in = {&a}, .out = &o};
    CHECK_EQ(dt__ps_apply("sum1", &sig_sum1, &c, 0, o.pl, &bad), DT_OK);
    CHECK_EQ(o.pl[0].kind, DT_PLACEMENT_PARTIAL);
    a.pl[0] = s0;
    CHECK_EQ(dt__ps_apply("sum1", &sig_sum1, &c, 0, o.pl, &bad), DT_OK);
    CHECK_EQ(o.pl[0].kind, DT_PLACEMENT_SHARD);
    CHECK_EQ(o.pl[0].dim, 0);
    /* A Partial input is not a partial-sum shard: not linear without a set. */
    a.pl[0] = p;
    CHECK_EQ(dt__ps_apply("sum1", &sig_sum1, &c, 0, o.pl, &bad), DT_EPLACEMENT);
    /* Two inputs: the shard sum with the other Replicate is Partial; with
     * the other also a shard sum, or a Shard(0), it is rejected. */
    CHECK_EQ(apply2(&sig_sum1, mesh1, sh46, 2, &s1, sh46, 2, &r, sh4, 1, 0, out, &bad), DT_OK);
    CHECK_EQ(out[0].kind, DT_PLACEMENT_PARTIAL);
    CHECK_EQ(apply2(&sig_sum1, mesh1, sh46, 2, &r, sh46, 2, &s1, sh4, 1, 0, out, &bad), DT_OK);
    CHECK_EQ(out[0].kind, DT_PLACEMENT_PARTIAL);
    CHECK_EQ(apply2(&sig_sum1, mesh1, sh46, 2, &s1, sh46, 2, &s1, sh4, 1, 0, out, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "Fix: call input 0's") != NULL);
    CHECK_EQ(apply2(&sig_sum1, mesh1, sh46, 2, &s1, sh46, 2, &s0, sh4, 1, 0, out, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "Fix: call input 1's") != NULL);
}

static void test_rule_2d(void) {
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad;
    /* Each mesh dim on its own. */
    dt_placement a1[] = {S(0), P()}, b1[] = {S(0), R()};
    CHECK_EQ(apply2(&sig_mul, mesh2, sh46, 2, a1, sh46, 2, b1, sh46, 2, 0, out, &bad), DT_OK);
    CHECK(same(out[0], S(0)));
    CHECK(same(out[1], P()));
    dt_placement a2[] = {R(), S(1)}, b2[] = {S(0), R()};
    CHECK_EQ(apply2(&sig_mul, mesh2, sh46, 2, a2, sh46, 2, b2, sh46, 2, 0, out, &bad), DT_OK);
    CHECK(same(out[0], S(0)));
    CHECK(same(out[1], S(1)));
    dt_placement a3[] = {P(), R()}, b3[] = {R(), P()};
    CHECK_EQ(apply2(&sig_mul, mesh2, sh46, 2, a3, sh46, 2, b3, sh46, 2, 0, out, &bad), DT_OK);
    CHECK(same(out[0], P()));
    CHECK(same(out[1], P()));
    /* Rejected on mesh dim 1 only: the whole message, by hand. */
    dt_placement a4[] = {S(0), P()}, b4[] = {R(), P()};
    CHECK_EQ(apply2(&sig_mul, mesh2, sh46, 2, a4, sh46, 2, b4, sh46, 2, 0, out, &bad), DT_EPLACEMENT);
    CHECK_EQ(bad, -1);
    CHECK_STREQ(
        dt_last_error(),
        "op: placements not accepted on mesh dim 1: input 0 has [Shard(dim=0), Partial()], input 1 has "
        "[Replicate(), Partial()]. Accepted per mesh dim: (R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d)*, "
        "(R,S(d))->S(d)*, (P,R)->P, (R,P)->P. Fix: call input 0's .redistribute(placements=[Shard(dim=0), "
        "Replicate()]) first.");
    /* Rejected on mesh dim 0 (the first failing dim is reported). */
    dt_placement a5[] = {S(0), S(0)}, b5[] = {S(1), S(1)};
    CHECK_EQ(apply2(&sig_mul, mesh2, sh46, 2, a5, sh46, 2, b5, sh46, 2, 0, out, &bad), DT_EPLACEMENT);
    CHECK_STREQ(
        dt_last_error(),
        "op: placements not accepted on mesh dim 0: input 0 has [Shard(dim=0), Shard(dim=0)], input 1 "
        "has [Shard(dim=1), Shard(dim=1)]. Accepted per mesh dim: " MUL_TEXT
        ". Fix: call input 1's .redistribute(placements=[Replicate(), Shard(dim=1)]) first.");
    /* The accepted text of a set without Partial. */
    dt_placement a6[] = {P()}, b6[] = {R()};
    CHECK_EQ(apply2(&sig_none, mesh1, sh46, 2, a6, sh46, 2, b6, sh46, 2, 0, out, &bad), DT_EPLACEMENT);
    CHECK_STREQ(dt_last_error(),
                "op: placements not accepted on mesh dim 0: input 0 has [Partial()], input 1 "
                "has [Replicate()]. Accepted per mesh dim: (R,R)->R, (S(d),S(d))->S(d), "
                "(S(d),R)->S(d)*, (R,S(d))->S(d)*; no Partial. Fix: call input 0's "
                ".redistribute(placements=[Replicate()]) first.");
}

static void test_regions(void) {
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad;
    /* dt__ps_needed without `needed`: the output region itself. */
    dt_placement s0 = S(0), r = R();
    dt__meta a = meta(mesh1, 2, sh46, &s0), o = meta(mesh1, 2, sh46, &s0);
    dt__pctx c = {.nin = 1, .in = {&a}, .out = &o};
    int64_t coord[] = {1}, os[] = {1, 2}, ol[] = {1, 3}, st[2] = {-1, -1}, l[2] = {-1, -1};
    dt__ps_needed(&sig_mul, &c, 0, coord, os, ol, st, l);
    CHECK_EQ(st[0], 1);
    CHECK_EQ(st[1], 2);
    CHECK_EQ(l[0], 1);
    CHECK_EQ(l[1], 3);
    /* With `needed`: rows 1..2 read rows 0..3. */
    dt__ps_needed(&sig_halo, &c, 0, coord, os, ol, st, l);
    CHECK_EQ(st[0], 0);
    CHECK_EQ(l[0], 3);
    CHECK_EQ(st[1], 2);
    CHECK_EQ(l[1], 3);
    /* The stencil on S(0) rows of 8 over 4 devices: device 1 holds rows
     * [2, 4) and needs [1, 5): the input does not line up. */
    const int64_t sh82[] = {8, 2};
    a = meta(mesh1, 2, sh82, &s0);
    o = meta(mesh1, 2, sh82, &s0);
    CHECK_EQ(dt__ps_apply("stencil", &sig_halo, &c, 1, o.pl, &bad), DT_EPLACEMENT);
    CHECK_EQ(bad, 0);
    /* Not checked unless asked (and no nested shards). */
    bad = 99;
    CHECK_EQ(dt__ps_apply("stencil", &sig_halo, &c, 0, o.pl, &bad), DT_OK);
    CHECK_EQ(bad, -1);
    /* Replicate input: every device holds everything. */
    a.pl[0] = r;
    CHECK_EQ(dt__ps_apply("stencil", &sig_halo, &c, 1, o.pl, &bad), DT_OK);
    CHECK(same(o.pl[0], R()));
    CHECK_EQ(bad, -1);
    /* Nested shards force the check: out [S(0), S(0)] of 8 rows on 2x2
     * puts rows [4i + 2j, +2) on device (i, j); input 1 as [R, S(0)] holds
     * rows [4j, +4) there, so device (1, 0) (rows 4..6) lacks them. */
    dt_placement pa[] = {S(0), S(0)}, pb[] = {R(), S(0)}, pc[] = {S(0), R()};
    CHECK_EQ(apply2(&sig_mul, mesh2, sh8, 1, pa, sh8, 1, pb, sh8, 1, 0, out, &bad), DT_EPLACEMENT);
    CHECK_EQ(bad, 1);
    CHECK(same(out[0], S(0)));
    CHECK(same(out[1], S(0)));
    /* [S(0), R] holds rows [4i, +4), which contain [4i + 2j, +2). */
    CHECK_EQ(apply2(&sig_mul, mesh2, sh8, 1, pa, sh8, 1, pc, sh8, 1, 0, out, &bad), DT_OK);
    CHECK_EQ(bad, -1);
}

static void test_rows(void) {
    /* The text: the head, each accepting row in list order, the Partial
     * set, then the REJECT rows. */
    CHECK_STREQ(DT__PS_ROWS_TEXT("R->R", TROWS, P),
                "R->R, S(0)->S(0), S(1)->P, S(2)->R (gathered), P->P; S(3): none");
    CHECK_STREQ(DT__PS_ROWS_TEXT("(R,R)->R", TROWS, NONE),
                "(R,R)->R, S(0)->S(0), S(1)->P, S(2)->R (gathered); no Partial; S(3): none");
    CHECK_EQ(sizeof trows / sizeof trows[0], 5);
    CHECK(trows[4].text == NULL);
    CHECK_EQ(trows[2].id, T_GATHER);
    CHECK_EQ(trows[2].to, DT__PS_GATHER);
    static const uint32_t set_p[] = DT__PS_MASKS(P);
    const dt__psig sig = {.partial = set_p, .accepted = "rows", .rows = trows, .shard_row = trow};
    const dt__psig nop = {.accepted = "rows", .rows = trows, .shard_row = trow};
    const int64_t sh[] = {4, 6, 8, 2};
    dt_placement r = R();
    dt__meta a = meta(mesh1, 4, sh, &r), b = meta(mesh1, 4, sh, &r), o = meta(mesh1, 4, sh, &r);
    dt__pctx c = {.nin = 1, .in = {&a, &b}, .out = &o};
    /* The outcome is the row's: an output dim, Partial, gathered, rejected. */
    int key;
    CHECK_EQ(dt__ps_shard_outcome(&sig, &c, 0, 0, &key), 0);
    CHECK_EQ(dt__ps_shard_outcome(&sig, &c, 0, 1, &key), DT__PS_PARTIAL);
    CHECK_EQ(key, 1); /* trow's od */
    CHECK_EQ(dt__ps_shard_outcome(&sig, &c, 0, 2, &key), DT__PS_GATHER);
    CHECK_EQ(dt__ps_shard_outcome(&sig, &c, 0, 3, &key), DT__PS_REJECT);
    CHECK_EQ(dt__ps_shard_outcome(&sig, &c, 1, 0, &key), DT__PS_REJECT); /* no row */
    int bad;
    const dt_placement want[] = {S(0), P(), R()};
    for (int d = 0; d < 3; d++) {
        a.pl[0] = S(d);
        CHECK_EQ(dt__ps_apply("rows", &sig, &c, 0, o.pl, &bad), DT_OK);
        CHECK_PL(o.pl[0], want[d]);
    }
    a.pl[0] = S(3);
    CHECK_EQ(dt__ps_apply("rows", &sig, &c, 0, o.pl, &bad), DT_EPLACEMENT);
    CHECK_STREQ(dt_last_error(),
                "rows: placements not accepted on mesh dim 0: input 0 has [Shard(dim=3)]. Accepted per mesh "
                "dim: rows. Fix: call input 0's .redistribute(placements=[Replicate()]) first.");
    /* Partial: the set decides. */
    a.pl[0] = P();
    CHECK_EQ(dt__ps_apply("rows", &sig, &c, 0, o.pl, &bad), DT_OK);
    CHECK_PL(o.pl[0], P());
    CHECK_EQ(dt__ps_apply("rows", &nop, &c, 0, o.pl, &bad), DT_EPLACEMENT);
    /* Two inputs: a gathered input counts as whole next to a Shard; an
     * input without a row is the one to fix. */
    c.nin = 2;
    a.pl[0] = S(2);
    b.pl[0] = R();
    CHECK_EQ(dt__ps_apply("rows", &sig, &c, 0, o.pl, &bad), DT_OK);
    CHECK_PL(o.pl[0], R());
    a.pl[0] = S(0);
    b.pl[0] = S(0);
    CHECK_EQ(dt__ps_apply("rows", &sig, &c, 0, o.pl, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "Fix: call input 1's") != NULL);
    /* A gathered input is whole next to a Partial one ((R,P)->P is listed). */
    const dt__psig mul = {.partial = set_mul, .accepted = "rows", .rows = trows, .shard_row = trow};
    a.pl[0] = S(2);
    b.pl[0] = P();
    CHECK_EQ(dt__ps_apply("rows", &mul, &c, 0, o.pl, &bad), DT_OK);
    CHECK_PL(o.pl[0], P());
    a.pl[0] = S(0);
    CHECK_EQ(dt__ps_apply("rows", &mul, &c, 0, o.pl, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "Fix: call input 0's") != NULL);
}

static void test_mesh_dim_check_and_sets3(void) {
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad;
    const dt__psig sig = {
        .shard_map = same_map, .partial = set_mul, .accepted = MUL_TEXT, .mesh_dim_check = rep1_on_md1};
    /* Mesh dim 0 takes the plain rule; mesh dim 1 refuses input 1's Shard
     * before the rule (which would accept (S(0),S(0))). */
    dt_placement a1[] = {S(0), S(0)}, b1[] = {S(0), R()}, b2[] = {S(0), S(0)};
    CHECK_EQ(apply2(&sig, mesh2, sh46, 2, a1, sh46, 2, b1, sh46, 2, 0, out, &bad), DT_OK);
    CHECK_PL(out[0], S(0));
    CHECK_PL(out[1], S(0));
    CHECK_EQ(apply2(&sig, mesh2, sh46, 2, a1, sh46, 2, b2, sh46, 2, 0, out, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "not accepted on mesh dim 1") != NULL);
    CHECK(strstr(dt_last_error(),
                 "Fix: call input 1's .redistribute(placements=[Shard(dim=0), Replicate()])") != NULL);
    /* Three-input sets: bits 0, 2 and both; text in list order. */
    static const uint32_t set3[] = DT__PS_MASKS(T3);
    CHECK_EQ(sizeof set3 / sizeof set3[0], 4);
    CHECK_EQ(set3[0], 1);
    CHECK_EQ(set3[1], 4);
    CHECK_EQ(set3[2], 5);
    CHECK_EQ(set3[3], 0);
    CHECK_STREQ(DT__PS_TEXT(T3), ", (P,R,R)->P, (R,R,P)->P, (P,R,P)->P");
}

/* Contracted indices: dim 0 of either input is index 5, dim 1 index 6. */
static int krow(const dt__pctx *c, int j, int d, int *od) {
    (void)c;
    (void)j;
    *od = 5 + d;
    return T_SUM;
}

static void test_sum_keys(void) {
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad;
    const dt__psig sig = {.partial = set_mul, .accepted = "keys", .rows = trows, .shard_row = krow};
    dt_placement s0 = S(0), s1 = S(1), r = R(), p = P();
    /* Both inputs summed over one index: one partial sum. */
    CHECK_EQ(apply2(&sig, mesh1, sh46, 2, &s0, sh46, 2, &s0, sh4, 1, 0, out, &bad), DT_OK);
    CHECK_PL(out[0], P());
    CHECK_EQ(apply2(&sig, mesh1, sh46, 2, &r, sh46, 2, &s1, sh4, 1, 0, out, &bad), DT_OK);
    CHECK_PL(out[0], P());
    /* Two different indices, or a partial sum next to a Partial input. */
    CHECK_EQ(apply2(&sig, mesh1, sh46, 2, &s0, sh46, 2, &s1, sh4, 1, 0, out, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "Fix: call input 0's") != NULL);
    CHECK_EQ(apply2(&sig, mesh1, sh46, 2, &s0, sh46, 2, &p, sh4, 1, 0, out, &bad), DT_EPLACEMENT);
    /* Without keys (shard_map), two shard sums are rejected (test_partial_shard_map). */
    CHECK_EQ(apply2(&sig_sum1, mesh1, sh46, 2, &s1, sh46, 2, &s1, sh4, 1, 0, out, &bad), DT_EPLACEMENT);
}

static void test_own_regions(void) {
    /* The stencil that fails the region check (test_regions) passes when
     * the family's lowering gathers what it reads. */
    int bad = 99;
    dt_placement s0 = S(0);
    const int64_t sh82[] = {8, 2};
    dt__meta a = meta(mesh1, 2, sh82, &s0), o = meta(mesh1, 2, sh82, &s0);
    dt__pctx c = {.nin = 1, .in = {&a}, .out = &o};
    dt__psig own = sig_halo;
    own.own_regions = 1;
    CHECK_EQ(dt__ps_apply("stencil", &own, &c, 1, o.pl, &bad), DT_OK);
    CHECK_EQ(bad, -1);
    CHECK_PL(o.pl[0], S(0));
    CHECK_EQ(dt__ps_apply("stencil", &sig_halo, &c, 1, o.pl, &bad), DT_EPLACEMENT);
    CHECK_EQ(bad, 0);
}

/* dt__ps_rule_md decides one mesh dim alone; err_in makes the error list
 * the call's inputs (c->in stand for err_in[err_pos[j]]). */
static void test_rule_md_and_listed(void) {
    static const uint32_t set_p[] = DT__PS_MASKS(P);
    const dt__psig sig = {.partial = set_p, .accepted = "rows", .rows = trows, .shard_row = trow};
    const int64_t sh[] = {4, 6, 8, 2};
    const dt_placement pa[] = {S(3), S(0)}, pr[] = {R(), R()}, pp[] = {P(), S(1)};
    dt__meta a = meta(mesh2, 4, sh, pa), o = meta(mesh2, 4, sh, pr);
    dt__meta x0 = meta(mesh2, 4, sh, pr), x1 = meta(mesh2, 4, sh, pp);
    dt__pctx c = {.nin = 1, .in = {&a}, .out = &o};
    dt_placement res = P();
    /* Mesh dim 1 alone: S(0) stays, whatever mesh dim 0 holds. */
    CHECK_EQ(dt__ps_rule_md("rows", &sig, &c, 1, &res), DT_OK);
    CHECK_PL(res, S(0));
    CHECK_EQ(dt__ps_rule_md("rows", &sig, &c, 0, &res), DT_EPLACEMENT);
    CHECK_STREQ(dt_last_error(),
                "rows: placements not accepted on mesh dim 0: input 0 has [Shard(dim=3), Shard(dim=0)]. "
                "Accepted per mesh dim: rows. Fix: call input 0's .redistribute(placements=[Replicate(), "
                "Shard(dim=0)]) first.");
    /* Listed: c->in[0] is shown as input 2 of three; the fix starts from
     * the listed input's placements. */
    const dt__meta *listed[] = {&x0, &x1, &a};
    const int at2[] = {2}, none[] = {-1};
    c.err_in = listed;
    c.err_nin = 3;
    c.err_pos = at2;
    CHECK_EQ(dt__ps_rule_md("rows", &sig, &c, 0, &res), DT_EPLACEMENT);
    CHECK_STREQ(
        dt_last_error(),
        "rows: placements not accepted on mesh dim 0: input 0 has [Replicate(), Replicate()], input 1 "
        "has [Partial(), Shard(dim=1)], input 2 has [Shard(dim=3), Shard(dim=0)]. Accepted per mesh "
        "dim: rows. Fix: call input 2's .redistribute(placements=[Replicate(), Shard(dim=0)]) first.");
    /* A stand-in that is none of the call's inputs: no fix named. */
    c.err_pos = none;
    CHECK_EQ(dt__ps_rule_md("rows", &sig, &c, 0, &res), DT_EPLACEMENT);
    CHECK_STREQ(
        dt_last_error(),
        "rows: placements not accepted on mesh dim 0: input 0 has [Replicate(), Replicate()], input 1 "
        "has [Partial(), Shard(dim=1)], input 2 has [Shard(dim=3), Shard(dim=0)]. Accepted per mesh "
        "dim: rows.");
    /* dt__ps_apply reports through the same list. */
    int bad;
    c.err_pos = at2;
    CHECK_EQ(dt__ps_apply("rows", &sig, &c, 0, o.pl, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "input 2 has [Shard(dim=3), Shard(dim=0)]") != NULL);
    CHECK(strstr(dt_last_error(), "Fix: call input 2's") != NULL);
}

/* A per-mesh-dim row (shard_row_at): on mesh dim 0 a Shard(d) stays,
 * on mesh dim 1 it goes to output dim 1 - d, except Shard(1) of input 1,
 * which is gathered there; a second input follows input 0's placement. */
#define TROWS2(X) DT__PS_ROWS2(X, "S(d)->S(d) on mesh dim 0, S(1-d) on 1", "input 1's S(1)->R on 1", GATHER)
static const dt__ps_row trows2[] = DT__PS_ROWS(TROWS2);
static int trow_at(const dt__pctx *c, int j, int md, int d, int *od) {
    (void)c;
    *od = md == 0 ? d : 1 - d;
    return md == 1 && j == 1 && d == 1 ? DT__PS_ROW_OWN : DT__PS_ROW_KEEP;
}
static int trow_never(const dt__pctx *c, int j, int d, int *od) {
    (void)c;
    (void)j;
    (void)d;
    *od = 0;
    return -1; /* shard_row_at takes its place: this must not decide */
}

static void test_rows_at(void) {
    /* The two-row list: ids KEEP and OWN, the text in list order. */
    CHECK_EQ(trows2[0].id, DT__PS_ROW_KEEP);
    CHECK_EQ(trows2[0].to, DT__PS_SHARD);
    CHECK_EQ(trows2[1].id, DT__PS_ROW_OWN);
    CHECK_EQ(trows2[1].to, DT__PS_GATHER);
    CHECK(trows2[2].text == NULL);
    CHECK_STREQ(DT__PS_ROWS_TEXT("R->R", TROWS2, NONE),
                "R->R, S(d)->S(d) on mesh dim 0, S(1-d) on 1, input 1's S(1)->R on 1; no Partial");
    /* own_regions: the nested shards below would otherwise meet the region
     * check (test_regions), which is not what this tests. */
    const dt__psig sig = {
        .accepted = "at", .rows = trows2, .shard_row = trow_never, .shard_row_at = trow_at, .own_regions = 1};
    dt_placement out[DT_MAX_MESH_NDIM] = {{0}};
    int bad, key;
    const int64_t sh44[] = {4, 4};
    dt_placement a1[] = {S(0), S(0)}, a2[] = {S(1), S(0)}, b1[] = {R(), S(1)}, b2[] = {S(1), R()};
    /* One input: mesh dim 0 keeps d, mesh dim 1 gives 1 - d. */
    dt_placement rr[] = {R(), R()};
    dt__meta a = meta(mesh2, 2, sh44, a1), o = meta(mesh2, 2, sh44, rr);
    dt__pctx c = {.nin = 1, .in = {&a}, .out = &o};
    CHECK_EQ(dt__ps_shard_outcome_at(&sig, &c, 0, 0, 0, &key), 0);
    CHECK_EQ(dt__ps_shard_outcome_at(&sig, &c, 0, 1, 0, &key), 1);
    CHECK_EQ(key, -1);
    CHECK_EQ(dt__ps_shard_outcome_at(&sig, &c, 1, 1, 1, &key), DT__PS_GATHER);
    /* Without shard_row_at, the plain rows decide (trow: Shard(1) is summed). */
    const dt__psig plain = {.accepted = "rows", .rows = trows, .shard_row = trow};
    CHECK_EQ(dt__ps_shard_outcome_at(&plain, &c, 0, 1, 1, &key), DT__PS_PARTIAL);
    CHECK_EQ(key, 1);
    CHECK_EQ(dt__ps_apply("at", &sig, &c, 0, o.pl, &bad), DT_OK);
    CHECK_EQ(bad, -1);
    CHECK_PL(o.pl[0], S(0));
    CHECK_PL(o.pl[1], S(1));
    /* Two inputs: [S(0), S(0)] with [R, S(1)]: mesh dim 1 gathers input 1. */
    CHECK_EQ(apply2(&sig, mesh2, sh44, 2, a1, sh44, 2, b1, sh44, 2, 0, out, &bad), DT_OK);
    CHECK_PL(out[0], S(0));
    CHECK_PL(out[1], S(1));
    /* [S(1), S(0)] with [S(1), R]: both S(1) on mesh dim 0, S(1) on 1. */
    CHECK_EQ(apply2(&sig, mesh2, sh44, 2, a2, sh44, 2, b2, sh44, 2, 0, out, &bad), DT_OK);
    CHECK_PL(out[0], S(1));
    CHECK_PL(out[1], S(1));
    /* [S(0), S(0)] with [S(1), R]: mesh dim 0 maps them to 0 and 1. */
    CHECK_EQ(apply2(&sig, mesh2, sh44, 2, a1, sh44, 2, b2, sh44, 2, 0, out, &bad), DT_EPLACEMENT);
    CHECK(strstr(dt_last_error(), "op: placements not accepted on mesh dim 0") != NULL);
    CHECK(strstr(dt_last_error(), "Accepted per mesh dim: at.") != NULL);
    CHECK(strstr(dt_last_error(), "Fix: call input 1's") != NULL);
    /* [S(0), S(0)] with [R, S(0)]: on mesh dim 1 they map to 1 and 1. */
    dt_placement b3[] = {R(), S(0)};
    CHECK_EQ(apply2(&sig, mesh2, sh44, 2, a1, sh44, 2, b3, sh44, 2, 0, out, &bad), DT_OK);
    CHECK_PL(out[1], S(1));
    /* A row id the list lacks is a rejection. */
    dt_placement a3[] = {S(1), S(1)};
    const dt__psig keep_only = {
        .accepted = "keep", .rows = trows2 + 1, .shard_row_at = trow_at, .own_regions = 1};
    a = meta(mesh2, 2, sh44, a3);
    CHECK_EQ(dt__ps_apply("keep", &keep_only, &c, 0, o.pl, &bad), DT_EPLACEMENT);
    CHECK_STREQ(dt_last_error(),
                "keep: placements not accepted on mesh dim 0: input 0 has [Shard(dim=1), Shard(dim=1)]. "
                "Accepted per mesh dim: keep. Fix: call input 0's .redistribute(placements=[Replicate(), "
                "Shard(dim=1)]) first.");
}

static void test_wrap_dim(void) {
    int d = 99;
    for (int64_t dim = -3; dim <= 2; dim++) {
        CHECK_EQ(dt__wrap_dim("sum", dim, 3, &d), DT_OK);
        CHECK_EQ(d, dim < 0 ? dim + 3 : dim);
    }
    d = 99;
    CHECK_EQ(dt__wrap_dim("sum", 3, 3, &d), DT_EINDEX);
    CHECK_STREQ(dt_last_error(),
                "sum(): Dimension out of range (expected to be in range of [-3, 2], but got 3)");
    CHECK_EQ(d, 99);
    CHECK_EQ(dt__wrap_dim("sum", -4, 3, &d), DT_EINDEX);
    CHECK_STREQ(dt_last_error(),
                "sum(): Dimension out of range (expected to be in range of [-3, 2], but got -4)");
    /* A 0-d tensor takes -1 and 0 (torch wraps it as 1-d). */
    CHECK_EQ(dt__wrap_dim("max", -1, 0, &d), DT_OK);
    CHECK_EQ(d, 0);
    CHECK_EQ(dt__wrap_dim("max", 0, 0, &d), DT_OK);
    CHECK_EQ(d, 0);
    CHECK_EQ(dt__wrap_dim("max", 1, 0, &d), DT_EINDEX);
    CHECK_STREQ(dt_last_error(),
                "max(): Dimension out of range (expected to be in range of [-1, 0], but got 1)");
    CHECK_EQ(dt__wrap_dim("max", -2, 0, &d), DT_EINDEX);
}

static void test_operands(void) {
    /* Only magic, graph and v->meta.mesh are read: symbols built by hand. */
    static char g1, g2;
    dt_placement r = R();
    dt_mesh *mesh1c = NULL;
    const int64_t shape[] = {4};
    mesh1c = make_mesh(1, shape, 0); /* equal by value to mesh1 */
    dt__tval v1 = {.meta = meta(mesh1, 1, sh4, &r)}, v2 = {.meta = meta(mesh1c, 1, sh4, &r)};
    dt__tval v3 = {.meta = meta(mesh1b, 1, sh4, &r)};
    const uint32_t live = DT__TENSOR_LIVE; /* hand-built symbols carry a live handle's magic */
    dt_tensor t1 = {.magic = live, .graph = (dt_graph *)&g1, .v = &v1};
    dt_tensor t2 = {.magic = live, .graph = (dt_graph *)&g1, .v = &v2};
    dt_tensor t3 = {.magic = live, .graph = (dt_graph *)&g1, .v = &v3};
    dt_tensor t4 = {.magic = live, .graph = (dt_graph *)&g2, .v = &v1};
    dt_tensor *ok[] = {&t1, &t2, &t1};
    CHECK_EQ(dt__check_operands("add", ok, 3), DT_OK);
    dt_tensor *null1[] = {&t1, NULL};
    CHECK_EQ(dt__check_operands("add", null1, 2), DT_EINVAL);
    CHECK_STREQ(dt_last_error(), "add: tensor argument 1 is NULL");
    dt_tensor *graphs[] = {&t1, &t4};
    CHECK_EQ(dt__check_operands("add", graphs, 2), DT_EINVAL);
    CHECK_STREQ(dt_last_error(), "add: the tensors belong to different graphs");
    dt_tensor *meshes[] = {&t1, &t2, &t3};
    CHECK_EQ(dt__check_operands("mul", meshes, 3), DT_EINVAL);
    CHECK_STREQ(
        dt_last_error(),
        "mul: the tensors are on different device meshes; move one with redistribute(device_mesh=...)");
    dt_mesh_release(mesh1c);
}

int main(void) {
    const int64_t s4[] = {4}, s22[] = {2, 2};
    mesh1 = make_mesh(1, s4, 0);
    mesh2 = make_mesh(2, s22, 0);
    mesh1b = make_mesh(1, s4, 4);
    test_sets();
    test_rule_1d();
    test_broadcast();
    test_partial_shard_map();
    test_rule_2d();
    test_regions();
    test_rows();
    test_mesh_dim_check_and_sets3();
    test_own_regions();
    test_rows_at();
    test_sum_keys();
    test_rule_md_and_listed();
    test_wrap_dim();
    test_operands();
    dt_mesh_release(mesh1);
    dt_mesh_release(mesh2);
    dt_mesh_release(mesh1b);
    if (failures)
        fprintf(stderr, "test_placement: %d failure(s)\n", failures);
    else
        printf("test_placement: ok\n");
    return failures != 0;
}
