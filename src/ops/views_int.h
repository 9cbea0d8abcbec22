/*
 * Private header of the views and shape family (views.c, index.c,
 * views_join.c, views_rearrange.c, masked_scatter.c): the node kinds behind DT_OP_VIEW, what each
 * keeps in the node attributes, and the helpers the files share
 * (masked_scatter has a node op of its own and uses only the helpers).
 *
 * Threads: the dt__view_* client helpers run on client threads; the
 * dt__vlower_* functions on the graph's controller thread.
 */
#ifndef DT_OPS_VIEWS_INT_H
#define DT_OPS_VIEWS_INT_H

#include "core/client/placement.h"
#include "core/core.h"

/* The kind of a DT_OP_VIEW node (nattr.sub), and the node attributes it
 * uses. "spec" means v_start/v_step/v_len per input dim and v_mask = the
 * input dims indexed by an integer (dropped). */
typedef enum dt__view_op {
    DT_V_RESHAPE = 0,       /* out meta only */
    DT_V_PERMUTE,           /* v_ints = dims */
    DT_V_EXPAND,            /* out meta only */
    DT_V_INDEX,             /* spec */
    DT_V_INDEX_TENSOR,      /* in[1] = index, v_dim */
    DT_V_SETITEM,           /* spec; in[1] = value or none (scalar) */
    DT_V_SETITEM_MASK,      /* in[1] = mask, v_dim, scalar */
    DT_V_SETITEM_INDEX,     /* in[1] = index, v_dim, scalar */
    DT_V_CAT,               /* in[0..2), v_dim (output dim), v_nints = 1 for stack */
    DT_V_TRIL,              /* v_ints[0] = diagonal, v_nints = 1 for triu */
    DT_V_FLIP,              /* v_mask = dims */
    DT_V_ROLL,              /* v_ints = shifts, v_start = dims, v_nints pairs (0: flat) */
    DT_V_REPEAT,            /* v_ints = repeats, v_nints */
    DT_V_REPEAT_INTERLEAVE, /* v_ints[0] = repeats or v_ints[1] = output_size with in[1], v_dim */
    DT_V_CLONE,             /* nothing */
    DT_V_CONTIGUOUS,        /* nothing */
    DT_V_COUNT
} dt__view_op;

/* The op name of each kind, for kernel error messages. */
extern const char *const dt__view_names[DT_V_COUNT];

/* ---------------------------------------------------------------- client */

/* Checks `a` is not NULL (DT_EINVAL naming `op`). */
dt_status dt__view_check(const char *op, const dt_tensor *a);
/* Checks `b` may be combined with `a`: same graph and mesh. */
dt_status dt__view_check_pair(const char *op, const dt_tensor *a, const dt_tensor *b);
/* Wraps a possibly negative dim into [0, ndim) (DT_EINDEX with torch's
 * message otherwise). A 0-d tensor accepts -1 and 0, as torch does, when
 * `scalar_ok`. */
dt_status dt__view_wrap_dim(const char *op, int64_t dim, int ndim, int scalar_ok, int *out);
/* Reports a PlacementError for input `which` of `ins` on mesh dim `md`,
 * suggesting that input's placements with mesh dim md made Replicate. */
dt_status dt__view_reject(const char *op, const dt__meta *const *ins, int nin, int which, int md,
                          const char *accepted);
/* The output placements of a view from its Shard rows (core/client/placement.h):
 * R->R, P->P (a view moves data, so a Partial passes through), a Shard as
 * its row says; `accepted` is DT__VIEW_TEXT of the same list. Input 0 is
 * `ins[0]`; nin > 1 only with a mesh_dim_check (the other inputs' rule).
 * `fam` reaches shard_row. Writes out->pl; a PlacementError naming `op`
 * otherwise. */
dt_status dt__view_place(const char *op, const dt__meta *const *ins, int nin, dt__meta *out,
                         const dt__ps_row *rows, int (*shard_row)(const dt__pctx *c, int j, int d, int *od),
                         int (*mesh_dim_check)(const dt__pctx *c, int md), const void *fam,
                         const char *accepted);
/* The accepted text of a view's rows. */
#define DT__VIEW_TEXT(list) DT__PS_ROWS_TEXT("R->R", list, P)
/* The Shard rows of the views that decide through dt__view_place; the
 * registry rows (views.c) print the same lists. A row id: */
enum { DT__VR_KEEP = DT__PS_ROW_KEEP, DT__VR_OP = DT__PS_ROW_OWN, DT__VR_IDX };
#define DT__VIEW_PERMUTE_ROWS(X) X(DT__VR_KEEP, "S(d)->S(the position d moves to)", SHARD)
#define DT__VIEW_EXPAND_ROWS(X)                                                                              \
    DT__PS_ROWS2(X, "S(d)->S(d + new dims) when dim d keeps its size", "no S(d) of a dim that broadcasts",   \
                 REJECT)
#define DT__VIEW_REPEAT_ROWS(X)                                                                              \
    DT__PS_ROWS2(X, "S(d)->S(d + new dims) when dim d is repeated once", "no S(d) of a repeated dim", REJECT)
#define DT__VIEW_FLIP_ROWS(X) DT__PS_ROWS2(X, "S(d)->S(d) for d not flipped", "no S(flipped d)", REJECT)
#define DT__VIEW_ROLL_ROWS(X)                                                                                \
    DT__PS_ROWS2(X, "S(d)->S(d) for d not rolled", "no S(rolled d) (a flat roll rolls every dim)", REJECT)
#define DT__VIEW_INDEX_ROWS(X)                                                                               \
    X(DT__VR_KEEP, "S(d)->S(d') when dim d is taken whole (not sliced, not integer-indexed)", SHARD)         \
    X(DT__VR_IDX, "S(d)->S(d') for a slice of whole segments of a segmented d (a local narrow)", SHARD)      \
    X(DT__VR_OP, "no S(sliced or integer-indexed d)", REJECT)
#define DT__VIEW_INDEX_TENSOR_ROWS(X)                                                                        \
    X(DT__VR_KEEP, "(S(j),R)->S(j') for j != dim", SHARD)                                                    \
    X(DT__VR_IDX, "(R,S(k))->S(dim+k)", SHARD)                                                               \
    X(DT__VR_OP, "no S(dim) of the input, no Partial index", REJECT)
#define DT__VIEW_INDEX_TENSOR_TEXT DT__PS_ROWS_TEXT("(R,R)->R", DT__VIEW_INDEX_TENSOR_ROWS, PR)
#define DT__VIEW_RI_ROWS(X)                                                                                  \
    X(DT__VR_KEEP, "S(d)->S(d) for d != dim", SHARD)                                                         \
    X(DT__VR_IDX, "S(dim)->S(dim) when every device's output block is its input block repeated", SHARD)
#define DT__VIEW_RI_TENSOR_ROWS(X)                                                                           \
    DT__PS_ROWS2(X, "S(d)->S(d) for d != dim", "no S(dim); repeats Replicate", REJECT)
/* cat and stack (views_join.c): a Shard of a dim the result keeps stays; cat
 * gathers a Shard(dim) itself. The all-Partial set is the bit set of every
 * input, made at the call (the text is the empty set's). */
#define DT__VIEW_CAT_ROWS(X)                                                                                 \
    X(DT__VR_KEEP, "S(j)->S(j)* for j != dim", SHARD)                                                        \
    X(DT__VR_OP,                                                                                             \
      "S(dim)->S(dim): a local cat when every input has the same placements and S(dim) on one or more mesh " \
      "dims (a "                                                                                             \
      "segmented result), else all-gathered and sliced back (S(j) when another input is S(j))",              \
      GATHER)
#define DT__VIEW_STACK_ROWS(X) X(DT__VR_KEEP, "S(j)->S(j or j+1)*", SHARD)
#define DT__PS_SET_CAT_P(X1, X2, X3)
#define DT__PS_EMPTY_CAT_P ", (all P)->P"
#define DT__VIEW_CAT_TEXT DT__PS_ROWS_TEXT("R->R", DT__VIEW_CAT_ROWS, CAT_P)
#define DT__VIEW_STACK_TEXT DT__PS_ROWS_TEXT("R->R", DT__VIEW_STACK_ROWS, CAT_P)
/* The rows of the three setitem forms (index.c; the registry row prints
 * them): the output keeps the target's (input 0's) placements, and the
 * value, mask or index follows the target's placement on each mesh dim. */
#define DT__VIEW_SETITEM_ROWS(X)                                                                             \
    X(DT__VR_KEEP, "(S(d),R)->S(d)", SHARD)                                                                  \
    X(DT__VR_IDX, "(S(d),S(e))->S(d) when each device holds the part of the value it writes", SHARD)         \
    X(DT__VR_OP, "no Shard of the value where the target is R or P", REJECT)
/* A Replicate or scalar value is written by one device of a Partial mesh
 * dim, zeros by the others: the sum is the assigned value. */
#define DT__PS_BIT_scalar 0u
#define DT__PS_SET_SETITEM(X1, X2, X3) X2(P, R) X2(P, P) X2(P, scalar)
#define DT__PS_EMPTY_SETITEM ""
#define DT__VIEW_SETITEM_TEXT DT__PS_ROWS_TEXT("(R,R)->R", DT__VIEW_SETITEM_ROWS, SETITEM)
#define DT__VIEW_SETITEM_MASK_ROWS(X)                                                                        \
    X(DT__VR_KEEP, "(S(d),R)->S(d)", SHARD)                                                                  \
    X(DT__VR_IDX, "(S(d),S(e))->S(d) when the mask is sharded like the target on the masked dims", SHARD)    \
    X(DT__VR_OP, "no Shard of the mask where the target is R or P, no Partial mask", REJECT)
#define DT__VIEW_SETITEM_MASK_TEXT DT__PS_ROWS_TEXT("(R,R)->R", DT__VIEW_SETITEM_MASK_ROWS, PR)
#define DT__VIEW_SETITEM_INDEX_ROWS(X)                                                                       \
    DT__PS_ROWS2(X, "(S(d),R)->S(d) for d != dim", "no S(dim) of the target; the index Replicate", REJECT)
#define DT__VIEW_SETITEM_INDEX_TEXT DT__PS_ROWS_TEXT("(R,R)->R", DT__VIEW_SETITEM_INDEX_ROWS, PR)

/* 1 when the box (s, l) lies within what the device at `coord` holds of m
 * (empty boxes always do). */
int dt__view_within(const dt__meta *m, const int64_t *coord, const int64_t *s, const int64_t *l);
/* A new symbol with metadata `out` on a's graph and its node of kind `kind`
 * reading in[0] = a (and in[1] = b when not NULL). *node is NULL when out of
 * memory; pass both to dt__client_submit. */
dt_tensor *dt__view_begin(dt_tensor *a, dt_tensor *b, const dt__meta *out, int kind, dt__node **node);

/* ------------------------------------------------------------- lowering */

/* Makes k, a DT_K_VIEW kernel of the node being lowered, one of sub `sub`
 * in its dtype, named after its kind. */
void dt__view_kernel_set(dt__kernel *k, const dt__node *n, int sub);
/* A new DT_K_VIEW kernel set so; NULL (L->status set) as dt__lw_kernel. */
dt__kernel *dt__view_kernel(dt__lower *L, const dt__node *n, int sub);
/* Lowers n as one DT_K_VIEW kernel `sub` per device that reads every input's
 * own blob there, with `attr` (dtype and sub are set here). For the ops
 * whose local computation does not depend on the device. */
void dt__view_lower_each(dt__lower *L, dt__node *n, int sub, const dt__kattr *attr);
/* reshape, permute, expand and contiguous: one kernel per device from the
 * input's own block to the output's (views_rearrange.c). */
void dt__vlower_local(dt__lower *L, dt__node *n);
/* Lowering of each kind (views.c dispatches). */
void dt__vlower_index(dt__lower *L, dt__node *n);
void dt__vlower_index_tensor(dt__lower *L, dt__node *n);
void dt__vlower_setitem(dt__lower *L, dt__node *n);
void dt__vlower_setitem_mask(dt__lower *L, dt__node *n);
void dt__vlower_setitem_index(dt__lower *L, dt__node *n);
void dt__vlower_cat(dt__lower *L, dt__node *n);
void dt__vlower_tril(dt__lower *L, dt__node *n);
void dt__vlower_flip(dt__lower *L, dt__node *n);
void dt__vlower_roll(dt__lower *L, dt__node *n);
void dt__vlower_repeat(dt__lower *L, dt__node *n);
void dt__vlower_repeat_interleave(dt__lower *L, dt__node *n);

#endif /* DT_OPS_VIEWS_INT_H */
