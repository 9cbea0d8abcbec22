/*
 * Operator families: each src/ops/<family>.c (and src/ops/redistribute.c)
 * lists its user-facing operators here for the registry (op_docs.c).
 */
#ifndef DT_OPS_H
#define DT_OPS_H

#include "core/records/node.h"
#include "dtorch/dtorch.h"

/* The op table's rows (op_table.c), registered with core at start-up. */
extern const dt__op_info dt__op_rows[DT_OP_COUNT];

/* The families' lowering functions, named by the op table's rows. */
dt_status dt__lower_factory(dt__lower *L, dt__node *n);
dt_status dt__lower_redistribute(dt__lower *L, dt__node *n);
dt_status dt__lower_sdpa_ring(dt__lower *L, dt__node *n);
dt_status dt__lower_reduce(dt__lower *L, dt__node *n);
dt_status dt__lower_linalg(dt__lower *L, dt__node *n);
dt_status dt__lower_view(dt__lower *L, dt__node *n);
dt_status dt__lower_elementwise(dt__lower *L, dt__node *n);
dt_status dt__lower_nn(dt__lower *L, dt__node *n);
dt_status dt__lower_sort_scan(dt__lower *L, dt__node *n);
dt_status dt__lower_masked_scatter(dt__lower *L, dt__node *n);
/* A USER node (user.c): one DT_KC_USER kernel per device; its discard. */
dt_status dt__lower_user(dt__lower *L, dt__node *n);
void dt__user_node_drop(dt_graph *g, dt__node *n);
/* A CHAIN node (the chain pass's, core/controller/passes/chain.c): one
 * DT_K_CHAIN kernel per device (elementwise_chain.c). */
dt_status dt__lower_chain(dt__lower *L, dt__node *n);

/* The families' seg rules (the seg_rule column; core/records/seg.h), each
 * next to its family; the broadcasting ops use core's dt__seg_broadcast. */
int dt__seg_rule_view(const dt__node *n, dt__meta *out);         /* views.c */
int dt__seg_rule_sdpa(const dt__node *n, dt__meta *out);         /* attention.c */
int dt__seg_rule_softmax(const dt__node *n, dt__meta *out);      /* nn.c */
int dt__seg_rule_norm(const dt__node *n, dt__meta *out);         /* nn_norm.c */
int dt__seg_rule_reduce(const dt__node *n, dt__meta *out);       /* reduce.c */
int dt__seg_rule_linalg(const dt__node *n, dt__meta *out);       /* matmul.c */
int dt__seg_rule_redistribute(const dt__node *n, dt__meta *out); /* redistribute.c */

/* Segmented dims to the regular layout (segment_regular.c): the conversion
 * src/init.c registers with the gate (dt__seg_set_regularise). */
dt_tensor *dt__seg_regularise(dt_tensor *x);

/* The chainable column (elementwise_chain.c): 1 when node n may be a step
 * of a blocked elementwise chain, its kernel computing each element alike
 * however the data is split in blocks: every node of the op, or those of
 * the binary and unary sub-ops that are. */
int dt__ew_chainable(const dt__node *n);
int dt__ew_chainable_binary(const dt__node *n);
int dt__ew_chainable_unary(const dt__node *n);

/* Frees what a SOURCE node owns (its host data: the lowering, once
 * distributed), and the SOURCE row's discard (factory.c). */
void dt__source_free(const dt__backend *be, dt__node *n);
void dt__source_discard(dt_graph *g, dt__node *n);

extern const dt_op_doc dt__docs_creation[];       /* factory.c */
extern const dt_op_doc dt__docs_elementwise[];    /* elementwise.c */
extern const dt_op_doc dt__docs_reduce[];         /* reduce.c */
extern const dt_op_doc dt__docs_linalg[];         /* matmul.c */
extern const dt_op_doc dt__docs_views[];          /* views.c */
extern const dt_op_doc dt__docs_nn[];             /* nn.c */
extern const dt_op_doc dt__docs_dist[];           /* ops/redistribute.c */
extern const dt_op_doc dt__docs_sort_scan[];      /* sort_scan.c */
extern const dt_op_doc dt__docs_pool[];           /* nn_pool.c */
extern const dt_op_doc dt__docs_masked_scatter[]; /* masked_scatter.c */

#endif /* DT_OPS_H */
