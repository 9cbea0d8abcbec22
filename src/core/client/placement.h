/*
 * The placement-signature engine: one rule, per mesh dim, that decides the
 * output placements of the elementwise, nn, reduce, sort_scan,
 * masked_scatter, linalg and views (reshape, setitem, ...) families (ops whose devices compute their
 * output region from regions of their inputs, or that gather a sharded dim
 * themselves), and the checks every family shares (operands on one graph
 * and mesh, dim wrapping, "does each device hold the region it reads").
 *
 * A signature (dt__psig) says, for one call:
 *  - shard_map: what a Shard(d) of input j becomes in the output: an output
 *    dim, DT__PS_PARTIAL (the op sums over that dim, e.g. a vocab-sharded
 *    embedding) or DT__PS_REJECT;
 *  - partial: the combinations of Partial inputs the op is linear in, each a
 *    bit set of inputs (bit j: input j, or a DT__PS_PARTIAL shard of it);
 *    the others must be Replicate on that mesh dim, and the output is
 *    Partial (a DT__PS_PARTIAL shard of a single input, with every other
 *    input Replicate, is accepted without being listed);
 *  - needed: the region of input j a device computing output region
 *    (os, ol) reads (NULL: the same region, for same-shaped inputs).
 * Per mesh dim: every Shard input must map to the same output dim (the
 * output is Shard of it, Replicate inputs are sliced locally); a Partial
 * combination in `partial` gives Partial; all Replicate gives Replicate;
 * anything else is a PlacementError naming the input to redistribute.
 *
 * The "accepted" text of the errors and of the registry's doc rows comes
 * from the same partial sets: DT__PS_SET_* below lists each set once as
 * X-macro patterns, which expand both to the bit sets (DT__PS_MASKS) and to
 * the text (DT__PS_TEXT), e.g. DT__PS_SET_MUL gives {0b01, 0b10} and
 * ", (P,R)->P, (R,P)->P". A family may define its own DT__PS_SET_<name>
 * (and DT__PS_EMPTY_<name>) in its file.
 *
 * Every family but elementwise (whose broadcast map prints as
 * DT__PS_SHARDS_*) gives Shard rows instead of shard_map: an X-macro list of
 * X(id, "S(pattern)->outcome", TO), TO one of SHARD (the output dim that
 * shard_row gives), PARTIAL (a partial sum; shards of several inputs for
 * which shard_row gives the same key >= 0, e.g. one contracted index, sum
 * as one: (S(K),S(K))->P), GATHER (the op gathers that dim itself: the
 * input counts as whole and the output is Replicate on that mesh dim unless
 * another input decides) or REJECT. shard_row only says which row a Shard(d)
 * of input j falls in (-1: none, rejected); the outcome is the row's, and
 * DT__PS_ROWS_TEXT makes the accepted text of the same list (head, the
 * accepting rows, the Partial set, then the REJECT rows), so the decision
 * and its text cannot drift apart.
 * DT__PS_ROWS2 is the common two-row list (the dims the op leaves alone,
 * the op's own dims).
 * Extras: mesh_dim_check (per mesh dim, before the rule: an input that must
 * be made Replicate, e.g. masked_scatter's mask), own_regions (the
 * family's lowering gathers what it reads: no region check) and
 * shard_row_at (shard_row per mesh dim: reshape's joint block search
 * reports each mesh dim's row, setitem's value follows the target's
 * placement on that mesh dim); for rules over stand-ins, pctx.err_in (the
 * inputs the error lists: cat runs dt__ps_rule_md per mesh dim on one input
 * per placement class, linear's bias rule takes the product as its input 0).
 *
 * Threads: client threads (the rules are read-only data); the region check
 * also on the controller through dt__ps_needed.
 */
#ifndef DT_CORE_PLACEMENT_H
#define DT_CORE_PLACEMENT_H

#include "core/core.h"
#include "core/records/node.h"

/* Outcomes of a Shard: an output dim (>= 0) or one of these. DT__PS_SHARD
 * is a row's "the output dim shard_row gives". */
enum { DT__PS_REJECT = -1, DT__PS_PARTIAL = -2, DT__PS_GATHER = -3, DT__PS_SHARD = -4 };

/* ---- Partial sets (X-macro patterns of P and R per input) ---- */
#define DT__PS_BIT_P 1u
#define DT__PS_BIT_R 0u
/* One-input patterns X1(P); two-input patterns X2(a, b); three-input X3(a, b, c). */
#define DT__PS_SET_NONE(X1, X2, X3)
#define DT__PS_SET_P(X1, X2, X3) X1(P)
#define DT__PS_SET_PP(X1, X2, X3) X2(P, P)
#define DT__PS_SET_PR(X1, X2, X3) X2(P, R)
#define DT__PS_SET_MUL(X1, X2, X3) X2(P, R) X2(R, P)
/* P for tensor / scalar only (the caller drops it for scalar / tensor). */
#define DT__PS_SET_PDIV(X1, X2, X3) X1(P)
/* No such form (a binary op that takes two tensors). */
#define DT__PS_SET_NA(X1, X2, X3)
/* "no Partial" is written out where a set is empty. */
#define DT__PS_EMPTY_NONE "; no Partial"
#define DT__PS_EMPTY_P ""
#define DT__PS_EMPTY_PP ""
#define DT__PS_EMPTY_PR ""
#define DT__PS_EMPTY_MUL ""
#define DT__PS_EMPTY_PDIV ""
#define DT__PS_EMPTY_NA "; no Partial"

#define DT__PS_MASK1(a) DT__PS_BIT_##a,
#define DT__PS_MASK2(a, b) (DT__PS_BIT_##a | DT__PS_BIT_##b << 1),
#define DT__PS_MASK3(a, b, c) (DT__PS_BIT_##a | DT__PS_BIT_##b << 1 | DT__PS_BIT_##c << 2),
#define DT__PS_TEXT1(a) ", " #a "->P"
#define DT__PS_TEXT2(a, b) ", (" #a "," #b ")->P"
#define DT__PS_TEXT3(a, b, c) ", (" #a "," #b "," #c ")->P"
/* The bit sets of a set, as initialisers of a uint32_t array (0-terminated:
 * the all-Replicate combination is never a Partial one). */
#define DT__PS_MASKS(set)                                                                                    \
    { DT__PS_SET_##set(DT__PS_MASK1, DT__PS_MASK2, DT__PS_MASK3) 0 }
/* The text after the Shard rules: ", (P,R)->P, ..." or "; no Partial". */
#define DT__PS_TEXT(set) DT__PS_SET_##set(DT__PS_TEXT1, DT__PS_TEXT2, DT__PS_TEXT3) DT__PS_EMPTY_##set

/* The Shard rules of the elementwise family ("broadcast S/R"), by arity:
 * a `*` marks a Replicate input sliced locally. */
#define DT__PS_SHARDS_1 "R->R, S(d)->S(d)"
#define DT__PS_SHARDS_2 "(R,R)->R, (S(d),S(d))->S(d), (S(d),R)->S(d)*, (R,S(d))->S(d)*"

/* ---- Shard rows (X-macro lists of X(id, text, TO)) ---- */
typedef struct dt__ps_row {
    int id;           /* what shard_row returns for this row */
    const char *text; /* "S(kept d)->S(d')" */
    int to;           /* DT__PS_SHARD, DT__PS_PARTIAL, DT__PS_GATHER or DT__PS_REJECT */
} dt__ps_row;
#define DT__PS_ROW(id, text, to) {id, text, DT__PS_##to},
/* The rows of a list, as the initialiser of a dt__ps_row array ({0} ends it). */
#define DT__PS_ROWS(list)                                                                                    \
    {                                                                                                        \
        list(DT__PS_ROW) { 0, NULL, 0 }                                                                      \
    }
/* The two-row list most families have: the dims the op leaves alone keep
 * their Shard (row DT__PS_ROW_KEEP, text `keep`), the op's own dims have
 * outcome `to` (row DT__PS_ROW_OWN, text `own`); a family names the ids
 * after its rows (e.g. reduce's kept and reduced dims). */
enum { DT__PS_ROW_KEEP, DT__PS_ROW_OWN };
#define DT__PS_ROWS2(X, keep, own, to) X(DT__PS_ROW_KEEP, keep, SHARD) X(DT__PS_ROW_OWN, own, to)
/* Accepting rows print ", text" in list order, REJECT rows "; text" last. */
#define DT__PS_ACC_SHARD(text) ", " text
#define DT__PS_ACC_PARTIAL(text) ", " text
#define DT__PS_ACC_GATHER(text) ", " text
#define DT__PS_ACC_REJECT(text)
#define DT__PS_REJ_SHARD(text)
#define DT__PS_REJ_PARTIAL(text)
#define DT__PS_REJ_GATHER(text)
#define DT__PS_REJ_REJECT(text) "; " text
#define DT__PS_ROW_ACC(id, text, to) DT__PS_ACC_##to(text)
#define DT__PS_ROW_REJ(id, text, to) DT__PS_REJ_##to(text)
/* The accepted text: `head` (the all-Replicate rule), the accepting rows,
 * the Partial set, then the REJECT rows. */
#define DT__PS_ROWS_TEXT(head, list, set) head list(DT__PS_ROW_ACC) DT__PS_TEXT(set) list(DT__PS_ROW_REJ)

/* What a signature's functions see: the inputs and the output of the call
 * (on the client before the node exists, or from the node), and the
 * family's own context. */
typedef struct dt__pctx {
    int op;             /* the DT_OP_* of the call */
    const dt__nattr *a; /* its node attributes (NULL where a family has none yet) */
    int nin;
    const dt__meta *in[DT_MAX_OP_INPUTS];
    const dt__meta *out;
    const void *fam; /* the family's own context (linalg: its label plan) */
    /* The inputs a PlacementError lists (NULL: in[0..nin)) and the position
     * of in[j] among them (err_pos[j]; -1: none, no fix named): for a rule
     * over representatives or derived operands (cat's one input per
     * placement class, linear's bias rule whose input 0 is the product). */
    const dt__meta *const *err_in;
    int err_nin;
    const int *err_pos;
} dt__pctx;

typedef struct dt__psig {
    int (*shard_map)(const dt__pctx *c, int j, int d);
    void (*needed)(const dt__pctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                   int64_t *s, int64_t *l);
    /* 0-terminated bit sets (DT__PS_MASKS), or NULL for none. */
    const uint32_t *partial;
    /* The accepted text of the PlacementError. */
    const char *accepted;
    /* A row table (DT__PS_ROWS) and the row of a Shard(d) of input j (its
     * id, or -1: no row, rejected; *od the output dim for a SHARD row), in
     * place of shard_map. */
    const dt__ps_row *rows;
    int (*shard_row)(const dt__pctx *c, int j, int d, int *od);
    /* Per mesh dim, before the rule: the input to make Replicate, or -1. */
    int (*mesh_dim_check)(const dt__pctx *c, int md);
    /* The lowering gathers what each device reads: no region check. */
    int own_regions;
    /* In place of shard_row where a family decides per mesh dim: the row
     * of a Shard(d) of input j on mesh dim md (reshape's joint block search
     * reports each mesh dim's row; setitem's value follows the target's
     * placement there). */
    int (*shard_row_at)(const dt__pctx *c, int j, int md, int d, int *od);
} dt__psig;

/* The output placement on every mesh dim of c->out's mesh, into out_pl;
 * then, when `check_regions` (or when shards nest) and not s->own_regions,
 * that every device holds
 * the regions it reads. A PlacementError (naming `name` and s->accepted) on
 * failure, with *bad_input the input that does not line up (-1 when the
 * per-mesh-dim rule failed and the error already suggests a fix). */
dt_status dt__ps_apply(const char *name, const dt__psig *s, const dt__pctx *c, int check_regions,
                       dt_placement *out_pl, int *bad_input);
/* The rule on mesh dim md alone, into *res (a PlacementError naming `name`
 * otherwise): for a family that runs it per mesh dim on representatives of
 * its inputs (cat and stack take any number of inputs; the rule's outcome
 * depends only on which placements occur, so one input per placement class
 * decides as all of them would). */
dt_status dt__ps_rule_md(const char *name, const dt__psig *s, const dt__pctx *c, int md, dt_placement *res);
/* The region of input j that output region (os, ol) reads (s->needed, or
 * the same region). */
void dt__ps_needed(const dt__psig *s, const dt__pctx *c, int j, const int64_t *coord, const int64_t *os,
                   const int64_t *ol, int64_t *st, int64_t *l);
/* The shard map of the broadcast S/R rule: dim d of input j is output dim
 * d + (out ndim - in ndim), rejected when it is a size-1 dim that
 * broadcasts. */
int dt__ps_broadcast_map(const dt__pctx *c, int j, int d);
/* What a Shard(d) of input j becomes: an output dim, DT__PS_PARTIAL,
 * DT__PS_GATHER or DT__PS_REJECT (from shard_map or the rows); *key the sum
 * key of a PARTIAL row (the od shard_row gave, -1 for none). */
int dt__ps_shard_outcome(const dt__psig *s, const dt__pctx *c, int j, int d, int *key);
/* The same on mesh dim md: from s->shard_row_at when set, else as
 * dt__ps_shard_outcome. */
int dt__ps_shard_outcome_at(const dt__psig *s, const dt__pctx *c, int j, int md, int d, int *key);

/* ---- the shared checks ---- */

/* nin tensor arguments given, on one graph and one mesh: DT_EINVAL with
 * torch-style messages naming `name` otherwise. */
dt_status dt__check_operands(const char *name, dt_tensor *const *ins, int nin);
/* Normalises dim against ndim (torch's wrap rules, 0-d accepts -1 and 0);
 * DT_EINDEX with torch's message when out of range. */
dt_status dt__wrap_dim(const char *op, int64_t dim, int ndim, int *out);

#endif /* DT_CORE_PLACEMENT_H */
