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
    dt__tval *x = n->in[0], *y = n->out;
    dt_debug_gate *gate = n->extra;
    const dt_mesh *mesh = x->meta.mesh;
    if (dt__lw_alloc_blobs(L, y) != DT_OK) {
        dt__debug_gate_unref(gate);
        return L->status;
    }
    int64_t coord[DT_MAX_MESH_NDIM], start[DT_MAX_NDIM], len[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&x->meta, coord, start, len);
        dt__kernel *k = dt__lw_kernel(L, DT_KC_GATE);
        if (!k)
            break;
        k->n_in = 1;
        k->in[0] = dt__blob_retain(x->blobs[i]);
        k->attr.dtype = x->meta.dtype;
        k->attr.ndim = x->meta.ndim;
        memcpy(k->attr.shape, len, sizeof len);
        k->extra = dt__debug_gate_retain(gate);
        y->blobs[i] = dt__lw_push(L, mesh, i, k);
    }
    dt__debug_gate_unref(gate); /* the node's reference */
    return L->status;
}
