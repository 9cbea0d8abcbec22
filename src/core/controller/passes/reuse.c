/*
 * The reuse mark: buffer reuse. Marks the nodes whose result may be written
 * into the buffer of their first input: ops that compute each output element
 * from the inputs' elements at the same position only (elementwise binary,
 * unary, activations, casts between types of one element size, clamp,
 * where, masked_fill, and the chain pass's CHAIN nodes, made of those),
 * with in[0] of the result's element size and shape.
 *
 * Marking says "may". Whether a kernel does write in place is decided when
 * it runs (kernel_run.c, run_backend): only when the kernel holds the
 * last reference to in[0]'s blob (the value was dropped and nothing queued
 * reads it any more), and only when the backend finds in[0]'s storage
 * unshared (no view, no export) and of the result's dtype and local shape.
 * So the mark needs no knowledge of lifetimes: dropping the value in a later
 * round is as good as in this one, and it depends on the node alone.
 *
 * It was a window pass; it is now taken per node, by the controller, when it
 * lowers one after the passes ran (executor.c, lower_node): a replayed node
 * needs none (docs/decisions.md "Replay, fourth step"), and the mark is a
 * function of what the replay signature holds. The controller passes it on
 * as DT_KF_REUSE on the node's backend kernels (lower.c, dt__lw_push_on); a
 * backend honours DT_KF_INPLACE for the kernels it can run in place and
 * ignores it on the others.
 *
 * Threads: controller only.
 */
#include "core/client/tensor.h"
#include "core/controller/window.h"
#include "core/records/meta.h"
#include "core/records/node.h"

static int fits(const dt__meta *in, const dt__meta *out) {
    /* One dtype needs no size lookup (the usual case). */
    if (in->ndim != out->ndim ||
        (in->dtype != out->dtype && dt_dtype_size(in->dtype) != dt_dtype_size(out->dtype)))
        return 0;
    for (int d = 0; d < in->ndim; d++)
        if (in->shape[d] != out->shape[d])
            return 0;
    return 1;
}

int dt__reuse_mark(const dt__node *n) {
    return (unsigned)n->op < DT_OP_COUNT && (dt__ops[n->op].flags & DT_OPF_REUSES_IN0) && n->n_in >= 1 &&
           n->out && fits(&n->in[0]->meta, &n->out->meta);
}
