/*
 * The controller's side of the test aids (core/api/debug.c): a held
 * controller's wait, and the lowering of a gated value (one gate kernel per
 * device, each holding a reference to the gate).
 *
 * Threads: controller only.
 */
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/controller.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"

void dt__debug_wait_held(dt_graph *g) {
    pthread_mutex_lock(&g->qlock);
    while (atomic_load(&g->held) && !atomic_load(&g->gates_bypassed))
        pthread_cond_wait(&g->qcond, &g->qlock);
    pthread_mutex_unlock(&g->qlock);
}

dt_status dt__lower_debug_gate(dt__lower *L, dt__node *n) {
    dt__tval *x = n->in[0];
    dt_debug_gate *gate = n->extra;
    /* The gate's output has x's meta: its blocks are x's. */
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_KC_GATE); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(x->blobs[dev.idx]);
        k->attr.dtype = x->meta.dtype;
        k->attr.ndim = x->meta.ndim;
        memcpy(k->attr.shape, dev.len, sizeof dev.len);
        k->extra = dt__debug_gate_retain(gate);
        dt__lw_each_push(L, &dev);
    }
    dt__debug_gate_unref(gate); /* the node's reference */
    return L->status;
}
