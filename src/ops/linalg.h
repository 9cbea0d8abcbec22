/*
 * Private to the linear algebra family (matmul.c, einsum.c): the index
 * ("label") plan shared by matmul, mm, bmm, outer, linear and einsum.
 *
 * Every dim of every operand carries a label (M, K, N, a batch dim, an einsum
 * letter); labels the output keeps are in `olab`, the others are contracted.
 * Placements are matched per mesh dim through the labels, and each device's
 * operand regions follow from the ranges its labels cover. A pure value type:
 * any thread.
 */
#ifndef DT_OPS_LINALG_H
#define DT_OPS_LINALG_H

#include "core/core.h"

#define DT_LINALG_MAX_LABELS (3 * DT_MAX_NDIM)

/* The op a linalg node computes: a DT_KL_* code (matmul is DT_KL_MATMUL). */
enum { DT_LINALG_MATMUL = DT_KL_MATMUL };

typedef struct dt__lplan {
    int nops; /* operands taking part in the contraction: 1 or 2 */
    const dt__meta *in[2];
    int lab[2][DT_MAX_NDIM];
    int nout;
    int olab[DT_MAX_NDIM];
    int nlab;
    int64_t lsize[DT_LINALG_MAX_LABELS];
    int opos[DT_LINALG_MAX_LABELS];       /* output position, or -1 when contracted */
    uint32_t split[DT_LINALG_MAX_LABELS]; /* mesh dims that split a contracted label */
} dt__lplan;

/* Builds the plan of einsum(`equation`) over n (1 or 2) operands, checking
 * the equation as torch does. Sets the thread error on failure. */
dt_status dt__einsum_plan(const char *equation, int n, const dt__meta *const *ms, dt__lplan *p);

#endif /* DT_OPS_LINALG_H */
