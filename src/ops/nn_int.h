/*
 * Shared machinery of the nn functional family (nn.c, nn_norm.c,
 * attention.c, nn_pool.c): one placement engine and one lowering for ops whose every
 * device computes its output region from regions of its inputs, with no
 * communication.
 *
 * An op describes itself with an nn_rules table, which its row of ops.def
 * names (the rules column, read by dt__nn_submit and dt__lower_nn):
 *  - rows and shard_row: its Shard rows (core/client/placement.h; the NN_*_ROWS
 *    lists below) and which row a Shard(d) of input j falls in. A row's
 *    outcome is an output dim, a partial sum (e.g. a vocab-sharded
 *    embedding) or a rejection, and the same list prints the accepted text
 *    of its PlacementError and of its registry rows (nn.c, nn_pool.c);
 *  - partial: the Partial sets the op is linear in (DT__PS_MASKS), applied
 *    when the call says it is linear (a pad with a nonzero constant is not);
 *  - needed gives the region of input j that the device computing output
 *    region (os, ol) reads (NULL: the same region, for same-shaped inputs);
 *  - kattr fills the device's kernel attributes beyond the common ones.
 *    Both read the device only through (os, ol) and the local regions of
 *    the node's values, copying offsets and lengths chosen by shapes and
 *    attributes alone (no min, max or clamp of an offset): the shared
 *    record's check (nn.c, nn_bcast) relies on it to decide on a few
 *    devices for all (dt__lw_probes, core/controller/lower.h).
 * dt__nn_submit then applies the placement engine (core/client/placement.h) per mesh dim:
 * every Shard input must map to the same output dim (the output is Shard of
 * it, Replicate inputs are sliced locally); one partial-sum shard or one
 * Partial input the op is linear in, with all other inputs Replicate, gives
 * Partial; everything else is a PlacementError. Finally it checks that every
 * device holds every region it needs (nested shards on 2-D meshes).
 *
 * Threads: dt__nn_submit on client threads; dt__lower_nn (nn.c) on the
 * controller. The rules are static read-only data.
 */
#ifndef DT_OPS_NN_INTERNAL_H
#define DT_OPS_NN_INTERNAL_H

#include "core/client/placement.h"
#include "core/core.h"
#include "core/records/node.h"

/* What the rules of one call see: on the client before the node exists, and
 * on the controller from the node (the placement engine's context). */
typedef dt__pctx nn_ctx;

/* The op table's rules column (core/records/node.h) points at these. */
typedef struct dt__nn_rules {
    int kop;
    /* NN_TEXT of the rows, for PlacementError messages. */
    const char *accepted;
    /* Kernel op names by node sub code (NULL: the op table's name). */
    const char *const *sub_names;
    const dt__ps_row *rows;
    int (*shard_row)(const nn_ctx *c, int j, int d, int *od);
    const uint32_t *partial;
    void (*needed)(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                   int64_t *s, int64_t *l);
    void (*kattr)(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol, dt__kattr *k);
} nn_rules;

/* The Shard rows of each rule: the rule's file decides with them, and the
 * registry rows print them. Row ids: */
enum { NN_ROW_KEEP = DT__PS_ROW_KEEP, NN_ROW_OP = DT__PS_ROW_OWN, NN_ROW_OUT, NN_ROW_SUM };
#define NN_ACT_ROWS(X) X(NN_ROW_KEEP, "S(d)->S(d)", SHARD)
#define NN_SOFTMAX_ROWS(X)                                                                                   \
    DT__PS_ROWS2(X, "S(d)->S(d) for d != dim", "no S(dim) (the softmax dim must not be sharded)", REJECT)
#define NN_PAD_ROWS(X) DT__PS_ROWS2(X, "S(d)->S(d) for an unpadded dim d", "no S(padded d)", REJECT)
#define NN_INTERP_ROWS(X) DT__PS_ROWS2(X, "S(0)->S(0), S(1)->S(1)", "no S(spatial d)", REJECT)
#define NN_POOL_ROWS(X)                                                                                      \
    DT__PS_ROWS2(X, "S(d)->S(d) for d before the last two (batch, channels)", "no S(the last two dims)",     \
                 REJECT)
#define NN_CONV_ROWS(X)                                                                                      \
    X(NN_ROW_KEEP, "(S(0),R,R)->S(0) (batched x)", SHARD)                                                    \
    X(NN_ROW_OUT, "(R,S(0),S(0) or R)->S(1) (groups == 1)", SHARD)                                           \
    X(NN_ROW_OP, "no other Shard (spatial dims, input channels, groups > 1)", REJECT)
#define NN_NORM_ROWS(X)                                                                                      \
    X(NN_ROW_KEEP,                                                                                           \
      "x S(d)->S(d), the others R, for d before the normalized dims (group_norm: d = 0; batch_norm: any d)", \
      SHARD)                                                                                                 \
    X(NN_ROW_OUT, "batch_norm: its [C] inputs S(0) with x S(1) -> S(1)", SHARD)                              \
    X(NN_ROW_OP, "no Shard of a normalized dim or of weight/bias", REJECT)
#define NN_EMB_ROWS(X)                                                                                       \
    X(NN_ROW_KEEP, "(S(d),R)->S(d)", SHARD)                                                                  \
    X(NN_ROW_OUT, "(R,S(1))->S(-1)", SHARD) X(NN_ROW_SUM, "(R,S(0))->P", PARTIAL)
#define NN_SHUFFLE_ROWS(X)                                                                                   \
    DT__PS_ROWS2(X, "S(d)->S(d) for d before the last three (batch)", "no S(the last three dims)", REJECT)
#define NN_SDPA_ROWS(X)                                                                                      \
    DT__PS_ROWS2(X, "R or S(d) on the same batch/head dim d (not the last two) -> S(d)",                     \
                 "no Shard of the last two dims or of a mask dim that broadcasts", REJECT)
/* Family Partial sets: embedding is linear in its weight, sdpa in v. */
#define DT__PS_SET_EMB(X1, X2, X3) X2(R, P)
#define DT__PS_EMPTY_EMB ""
#define DT__PS_SET_SDPA(X1, X2, X3) X3(R, R, P)
#define DT__PS_EMPTY_SDPA " (attn_mask R)"
#define NN_TEXT(head, rows, set) DT__PS_ROWS_TEXT(head, rows, set)
/* The texts of each rule, for its PlacementError and its registry rows. */
#define NN_ACT_TEXT NN_TEXT("R->R", NN_ACT_ROWS, NONE)
#define NN_SOFTMAX_TEXT NN_TEXT("R->R", NN_SOFTMAX_ROWS, NONE)
#define NN_DROPOUT_TEXT NN_TEXT("R->R", NN_ACT_ROWS, P)
#define NN_PAD_TEXT NN_TEXT("R->R", NN_PAD_ROWS, P) "; P only without a nonzero constant value"
#define NN_INTERP_TEXT NN_TEXT("R->R", NN_INTERP_ROWS, P)
#define NN_CONV_TEXT NN_TEXT("(x, weight, bias): (R,R,R)->R", NN_CONV_ROWS, MUL) "; P only without bias"
#define NN_NORM_TEXT NN_TEXT("R->R (x and its weight, bias or [C] inputs)", NN_NORM_ROWS, NONE)
#define NN_EMB_TEXT NN_TEXT("(indices, weight): (R,R)->R", NN_EMB_ROWS, EMB)
#define NN_SHUFFLE_TEXT NN_TEXT("R->R", NN_SHUFFLE_ROWS, P)
#define NN_SDPA_TEXT NN_TEXT("(q, k, v, attn_mask): (R,R,R,R)->R", NN_SDPA_ROWS, SDPA)

/* The rules of each DT_OP_* of the family (defined next to each op, named
 * by its ops.def row). */
extern const nn_rules dt__nn_rules_activation, dt__nn_rules_softmax, dt__nn_rules_dropout, dt__nn_rules_pad,
    dt__nn_rules_interpolate, dt__nn_rules_conv2d, dt__nn_rules_norm, dt__nn_rules_embedding,
    dt__nn_rules_sdpa;
/* 2-D pooling (nn_pool.c). */
extern const nn_rules dt__nn_rules_pool2d;
/* pixel_shuffle (nn.c). */
extern const nn_rules dt__nn_rules_pixel_shuffle;

/* Validates placements and records the op: `ins` (nin non-NULL tensors, all
 * on one graph and mesh), `out` with dtype, ndim and shape set (mesh and
 * placements are filled here), node attributes `a`, and `linear`: nonzero
 * when this call is linear in the inputs of the rule's Partial sets (their
 * Partial passes through when all other inputs are Replicate on that mesh
 * dim). `name` is the torch name for messages. Returns a new reference or
 * NULL (nothing enqueued). */
dt_tensor *dt__nn_submit(int op, const char *name, dt_tensor *const *ins, int nin, dt__meta *out,
                         const dt__nattr *a, int linear);
/* The shard row of ops whose every dim passes through (activations). */
int dt__nn_row_same(const nn_ctx *c, int j, int d, int *od);

/* Region helpers for needed(): the whole tensor, and the same region. */
void dt__nn_full(const dt__meta *m, int64_t *s, int64_t *l);
/* Checks a tensor argument is given: DT_EINVAL naming `what` otherwise. */
dt_status dt__nn_need(const char *op, const char *what, const dt_tensor *t);
/* The argument checks of scaled_dot_product_attention (shapes, dtypes, mask,
 * dropout, scale) as torch makes them; ring attention shares them. */
dt_status dt__sdpa_check(const char *op, dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *attn_mask,
                         double dropout_p, int is_causal, double scale);

#endif /* DT_OPS_NN_INTERNAL_H */
