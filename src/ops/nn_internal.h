/*
 * Shared machinery of the nn functional family (nn.c, nn_norm.c,
 * attention.c, nn_pool.c): one placement engine and one lowering for ops whose every
 * device computes its output region from regions of its inputs, with no
 * communication.
 *
 * An op describes itself with an nn_rules table:
 *  - shard_map says what a Shard(d) of input j becomes in the output on one
 *    mesh dim: an output dim, NN_PARTIAL (the op sums over that dim, e.g. a
 *    vocab-sharded embedding) or NN_REJECT;
 *  - needed gives the region of input j that the device computing output
 *    region (os, ol) reads (NULL: the same region, for same-shaped inputs);
 *  - kattr fills the device's kernel attributes beyond the common ones.
 * dt__nn_submit then applies the placement engine (core/placement.h) per mesh dim:
 * every Shard input must map to the same output dim (the output is Shard of
 * it, Replicate inputs are sliced locally); one NN_PARTIAL shard or one
 * Partial input the op is linear in, with all other inputs Replicate, gives
 * Partial; everything else is a PlacementError. Finally it checks that every
 * device holds every region it needs (nested shards on 2-D meshes).
 *
 * Threads: dt__nn_submit on client threads; dt__lower_nn (nn.c) on the
 * controller. The rules are static read-only data.
 */
#ifndef DT_OPS_NN_INTERNAL_H
#define DT_OPS_NN_INTERNAL_H

#include "core/core.h"
#include "core/node.h"
#include "core/placement.h"

enum { NN_REJECT = DT__PS_REJECT, NN_PARTIAL = DT__PS_PARTIAL };

/* What the rules of one call see: on the client before the node exists, and
 * on the controller from the node (the placement engine's context). */
typedef dt__pctx nn_ctx;

typedef struct nn_rules {
    int kop;
    /* "(R,R)->R, ..." for PlacementError messages. */
    const char *accepted;
    /* Kernel op names by node sub code (NULL: the op table's name). */
    const char *const *sub_names;
    int (*shard_map)(const nn_ctx *c, int j, int d);
    void (*needed)(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                   int64_t *s, int64_t *l);
    void (*kattr)(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol, dt__kattr *k);
} nn_rules;

/* The rules of each DT_OP_* of the family (defined next to each op). */
extern const nn_rules dt__nn_rules_activation, dt__nn_rules_softmax, dt__nn_rules_dropout, dt__nn_rules_pad,
    dt__nn_rules_interpolate, dt__nn_rules_conv2d, dt__nn_rules_norm, dt__nn_rules_embedding,
    dt__nn_rules_sdpa;
/* 2-D pooling (nn_pool.c). */
extern const nn_rules dt__nn_rules_pool2d;

/* Validates placements and records the op: `ins` (nin non-NULL tensors, all
 * on one graph and mesh), `out` with dtype, ndim and shape set (mesh and
 * placements are filled here), node attributes `a`, and `linear_mask`: the
 * inputs the op is linear in (bit j), whose Partial passes through when all
 * other inputs are Replicate on that mesh dim. `name` is the torch name for
 * messages. Returns a new reference or NULL (nothing enqueued). */
dt_tensor *dt__nn_submit(int op, const char *name, dt_tensor *const *ins, int nin, dt__meta *out,
                         const dt__nattr *a, uint32_t linear_mask);

/* Region helpers for needed(): the whole tensor, and the same region. */
void dt__nn_full(const dt__meta *m, int64_t *s, int64_t *l);
/* Checks a tensor argument is given: DT_EINVAL naming `what` otherwise. */
dt_status dt__nn_need(const char *op, const char *what, const dt_tensor *t);
/* The argument checks of scaled_dot_product_attention (shapes, dtypes, mask,
 * dropout, scale) as torch makes them; ring attention shares them. */
dt_status dt__sdpa_check(const char *op, dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *attn_mask,
                         double dropout_p, int is_causal, double scale);

#endif /* DT_OPS_NN_INTERNAL_H */
