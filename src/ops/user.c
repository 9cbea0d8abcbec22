/*
 * User kernels (dt_user_op, public dtorch_ops.h): the caller's function run
 * on each device's local pieces, one node op (USER) and one core kernel kind
 * (DT_KC_USER, run by core/worker/user_run.c). The caller states the
 * output's layout (dtype, global shape, mesh, placements); lowering gives
 * each device's kernel that device's input blobs as they are (no
 * communication) and the device's block of the output to check the result
 * against. The node and each kernel hold a reference to the function's
 * record (core/records/ufn.h); the node has extra, so replay never copies
 * it, and the codec refuses its kernels (they cannot leave the process).
 *
 * Threads: dt_user_op on client threads; the lowering and the discard on
 * the controller.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/placement.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/records/ufn.h"
#include "ops/ops.h"

/* Validates the call; DT_OK or the thread error. */
static dt_status check(dt_graph *g, const dt_user_kernel *uk, dt_tensor *const *in, int n_in, dt_dtype dtype,
                       int ndim, const int64_t *shape, dt_mesh *mesh) {
    if (dt__client_check_graph(g) != DT_OK)
        return dt_last_status();
    if (!uk || !uk->run)
        return dt__error(DT_EINVAL, "user_op: the kernel %s", uk ? "has no run function" : "is NULL");
    if (n_in < 0 || n_in > DT_MAX_OP_INPUTS || (n_in && !in))
        return dt__error(DT_EINVAL, "user_op: %d inputs given, at most %d are taken", n_in, DT_MAX_OP_INPUTS);
    if (n_in && dt__check_operands(uk->name ? uk->name : "user_op", in, n_in) != DT_OK)
        return dt_last_status();
    for (int i = 0; i < n_in; i++)
        if (in[i]->graph != g)
            return dt__error(DT_EINVAL, "user_op: input %d belongs to another graph", i);
    if (!mesh && !n_in)
        return dt__error(DT_EINVAL, "user_op: a mesh is needed when there are no inputs");
    if (mesh && !dt__mesh_ok(mesh))
        return dt__error(DT_EINVAL, "user_op: mesh is %s", dt__handle_bad(mesh));
    if (mesh && n_in && !dt_mesh_equal(mesh, in[0]->v->meta.mesh))
        return dt__error(DT_EINVAL,
                         "user_op: the inputs are on another mesh than the output's; redistribute them "
                         "(device_mesh=...) first");
    if ((int)dtype < 0 || dtype >= DT_DTYPE_COUNT)
        return dt__error(DT_EINVAL, "user_op: dtype %d is not a dtype", (int)dtype);
    return dt__shape_check(ndim, shape);
}

dt_tensor *dt_user_op(dt_graph *g, const dt_user_kernel *uk, dt_tensor *const *in, int n_in, dt_dtype dtype,
                      int ndim, const int64_t *shape, dt_mesh *mesh, const dt_placement *placements) {
    dt_clear_error();
    dt__meta m;
    memset(&m, 0, sizeof m);
    dt__ufn *f = NULL;
    dt_tensor *t = NULL;
    if (check(g, uk, in, n_in, dtype, ndim, shape, mesh) != DT_OK)
        goto refused;
    m.dtype = dtype;
    m.ndim = ndim;
    memcpy(m.shape, shape, sizeof *shape * (size_t)ndim);
    m.mesh = mesh ? mesh : in[0]->v->meta.mesh;
    if (dt__placements_normalize(m.mesh, ndim, placements, m.pl) != DT_OK ||
        dt__graph_check_mesh(g, m.mesh) != DT_OK)
        goto refused;
    f = dt__ufn_new(uk);
    if (!f)
        goto refused;
    t = dt__tensor_new(g, &m);
    if (!t) {
        dt__ufn_unref(f); /* calls release */
        return NULL;
    }
    dt__node *n = dt__node_new(DT_OP_USER);
    if (n) {
        n->n_in = n_in;
        for (int i = 0; i < n_in; i++)
            n->in[i] = in[i]->v;
        n->out = t->v;
        n->a.text = f->uk.name;
        n->extra = f;
    } else {
        dt__ufn_unref(f);
    }
    return dt__client_submit(t, n); /* a failed submit discards the node: dt__user_node_drop */
refused:
    if (uk && uk->release)
        uk->release(uk->ctx);
    return NULL;
}

void dt__user_node_drop(dt_graph *g, dt__node *n) {
    (void)g;
    dt__ufn_unref(n->extra);
    n->extra = NULL;
}

dt_status dt__lower_user(dt__lower *L, dt__node *n) {
    dt__ufn *f = n->extra;
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_KC_USER); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        k->n_in = (int16_t)n->n_in;
        for (int i = 0; i < n->n_in; i++)
            k->in[i] = dt__blob_retain(n->in[i]->blobs[dev.idx]);
        k->rank = (int32_t)dev.idx;
        k->opname = f->uk.name;
        k->attr.dtype = n->out->meta.dtype;
        k->attr.ndim = n->out->meta.ndim;
        memcpy(k->attr.shape, dev.len, sizeof dev.len);
        k->extra = dt__ufn_retain(f);
        dt__lw_each_push(L, &dev);
    }
    dt__user_node_drop(L->g, n); /* the node's reference */
    return L->status;
}
