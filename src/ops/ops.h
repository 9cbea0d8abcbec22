/*
 * Operator families: each src/ops/<family>.c (and src/ops/redistribute.c)
 * lists its user-facing operators here for the registry (op_docs.c).
 */
#ifndef DT_OPS_H
#define DT_OPS_H

#include "dtorch/dtorch.h"

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
