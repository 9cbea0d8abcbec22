/*
 * Ring attention: scaled_dot_product_attention with the sequence sharded
 * along one mesh dim (the ring), never gathering the keys and values.
 *
 * Along the ring each device holds one block of queries and one block of
 * keys/values. In step i the device at ring coordinate r attends its queries
 * to the key/value block of ring coordinate (r - i) mod n and merges the
 * result into its accumulator by log-sum-exp (online softmax,
 * torch_attention.cpp); meanwhile, on the communication stream, it passes
 * that block on to r + 1 and receives the next from r - 1 (a DT_COLL_SHIFT
 * collective). So the transfer of block i + 1 overlaps step i's attention.
 * The shift that brings block i + 1 also waits for step i - 1's result, so a
 * device holds at most three key/value blocks at once, whatever the ring's
 * size.
 *
 * Causal attention keeps key position <= query position in global sequence
 * positions (torch's top-left alignment): a block whose keys all come after
 * the device's last query is skipped (no kernel; it is still passed on), a
 * block wholly before needs no mask, and only the blocks that straddle get
 * the mask, computed from the blocks' global offsets. Uneven shards (torch's
 * chunk rule) work: offsets and lengths come from each block's region.
 *
 * Placements: query, key and value have the same placements; the ring's mesh
 * dim is Shard(seq) (seq = dim -2); every other mesh dim is Replicate or a
 * shard of a batch/head dim. The result has the query's placements. Masks and
 * dropout are not supported here (the Python layer says so at the call).
 *
 * Threads: dt_sdpa_ring on client threads; dt__lower_sdpa_ring on the
 * controller.
 */
#include <math.h>
#include <string.h>

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "ops/nn_int.h"
#include "ops/ops.h"

dt_tensor *dt_sdpa_ring(dt_tensor *q, dt_tensor *k, dt_tensor *v, int is_causal, double scale, int mesh_dim) {
    dt_clear_error();
    const char *op = "scaled_dot_product_attention";
    if (dt__sdpa_check(op, q, k, v, NULL, 0.0, is_causal, scale) != DT_OK)
        return NULL;
    if (q->graph != k->graph || q->graph != v->graph) {
        dt__error(DT_EINVAL, "%s(): the tensors belong to different graphs", op);
        return NULL;
    }
    const dt__meta *mq = &q->v->meta, *mk = &k->v->meta, *mv = &v->v->meta;
    const dt_mesh *mesh = mq->mesh;
    if (!dt_mesh_equal(mesh, mk->mesh) || !dt_mesh_equal(mesh, mv->mesh)) {
        dt__error(DT_EINVAL,
                  "%s(): the tensors are on different device meshes; move one with "
                  "redistribute(device_mesh=...)",
                  op);
        return NULL;
    }
    if (mesh_dim < 0 || mesh_dim >= mesh->ndim) {
        dt__error(DT_EINDEX, "%s(): ring mesh dim %d out of range for a mesh of %d dims", op, mesh_dim,
                  mesh->ndim);
        return NULL;
    }
    int nd = mq->ndim, seq = nd - 2;
    const dt__meta *ins[3] = {mq, mk, mv};
    for (int md = 0; md < mesh->ndim; md++) {
        dt_placement p = mq->pl[md];
        int same = 1;
        for (int j = 1; j < 3; j++)
            same &= ins[j]->pl[md].kind == p.kind && ins[j]->pl[md].dim == p.dim;
        /* A size-1 mesh dim holds everything: its placement is normalised. */
        int ok = same;
        if (ok && mesh->shape[md] > 1)
            ok = md == mesh_dim
                     ? p.kind == DT_PLACEMENT_SHARD && p.dim == seq
                     : p.kind == DT_PLACEMENT_REPLICATE || (p.kind == DT_PLACEMENT_SHARD && p.dim < seq);
        if (!ok) {
            dt__placement_error(
                op, ins, 3, md,
                "ring attention: (q, k, v) all S(seq) on the ring's mesh dim; elsewhere all R or "
                "all S(d) on the same batch/head dim d",
                -1, NULL);
            return NULL;
        }
    }
    dt__meta out = *mq;
    out.shape[nd - 1] = mv->shape[nd - 1];
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.flags = (isnan(scale) ? DT_KNN_DEFAULT : 0) | (is_causal ? DT_KNN_CAUSAL : 0);
    a.f[1] = isnan(scale) ? 0.0 : scale;
    a.ints[0] = mesh_dim;
    dt_tensor *t = dt__tensor_new(q->graph, &out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_SDPA_RING);
    if (n) {
        n->n_in = 3;
        n->in[0] = q->v;
        n->in[1] = k->v;
        n->in[2] = v->v;
        n->out = t->v;
        n->a = a;
    }
    return dt__client_submit(t, n);
}

/* ------------------------------------------------------------ lowering */

typedef struct ring {
    dt__lower *L;
    const dt__node *n;
    const dt_mesh *mesh;
    int md, size, nd, dk, dv;
    dt_dtype acc_dtype, kv_dtype;
    dt__blob **kv;  /* per device: the key/value block it holds now (owned) */
    dt__blob **acc; /* per device: its accumulator so far (owned; NULL before the first block) */
    dt__blob **dep; /* per device: the accumulator the next shift waits for (owned) */
} ring;

/* Makes k an SDPA kernel of the ring: `flags`, its result's dtype and
 * local shape. */
static void sdpa_set(const ring *R, dt__kernel *k, int flags, dt_dtype dtype, const int64_t *shape) {
    k->attr.dtype = dtype;
    k->attr.flags = flags;
    k->attr.f[1] = R->n->a.f[1];
    k->attr.ndim = R->nd;
    memcpy(k->attr.shape, shape, sizeof(int64_t) * (size_t)R->nd);
}

/* Step 0's pack: kv = cat(k, v, dim=-1) on every device (k's blocks). */
static void pack(ring *R) {
    dt__tval *tk = R->n->in[1], *tv = R->n->in[2];
    for (dt__lw_dev dev = DT__LW_EACH(tk, DT_K_CAT); dt__lw_each(R->L, &dev);) {
        int64_t i = dev.idx;
        dt__kernel *k = dev.k;
        k->n_in = 2;
        k->in[0] = dt__blob_retain(tk->blobs[i]);
        k->in[1] = dt__blob_retain(tv->blobs[i]);
        k->attr.dtype = R->kv_dtype;
        k->attr.dim = R->nd - 1;
        k->attr.ndim = R->nd;
        memcpy(k->attr.shape, dev.len, sizeof dev.len);
        k->attr.shape[R->nd - 1] = R->dk + R->dv;
        R->kv[i] = dt__lw_push(R->L, R->mesh, i, k);
    }
}

/* Step `step` on every device: attend to the block it holds now (q's
 * blocks; a device with nothing to attend to gets no kernel). */
static void attend(ring *R, int step) {
    dt__tval *tq = R->n->in[0], *tk = R->n->in[1];
    int causal = (R->n->a.flags & DT_KNN_CAUSAL) != 0;
    int64_t ks[DT_MAX_NDIM], kl[DT_MAX_NDIM];
    int seq = R->nd - 2;
    for (dt__lw_dev dev = DT__LW_EACH(tq, DT__LW_NO_KERNEL); dt__lw_each(R->L, &dev);) {
        int64_t i = dev.idx, *coord = dev.coord, *qs = dev.start, *ql = dev.len;
        int64_t r = coord[R->md];
        coord[R->md] = (r - step + R->size) % R->size; /* whose block it holds */
        dt__local_region(&tk->meta, coord, ks, kl);
        int64_t q0 = qs[seq], q1 = qs[seq] + ql[seq], k0 = ks[seq], k1 = ks[seq] + kl[seq];
        /* The next shift waits for the accumulator before this step. */
        dt__blob_release(R->dep[i]);
        R->dep[i] = dt__blob_retain(R->acc[i]);
        if (ql[seq] == 0 || kl[seq] == 0 || (causal && k0 > q1 - 1))
            continue; /* nothing to attend to (or all of it in the future) */
        int flags =
            DT_KNN_RING | (R->n->a.flags & DT_KNN_DEFAULT) | (causal && k1 - 1 > q0 ? DT_KNN_CAUSAL : 0);
        int64_t shape[DT_MAX_NDIM];
        memcpy(shape, ql, sizeof shape);
        shape[R->nd - 1] = R->dv + 1;
        dt__kernel *k = dt__lw_kernel(R->L, DT_K_SDPA);
        if (!k)
            return;
        sdpa_set(R, k, flags, R->acc_dtype, shape);
        k->attr.ints[0] = q0;
        k->attr.ints[1] = k0;
        k->attr.ints[2] = R->dk;
        k->n_in = R->acc[i] ? 3 : 2;
        k->in[0] = dt__blob_retain(tq->blobs[i]);
        k->in[1] = dt__blob_retain(R->kv[i]);
        k->in[2] = R->acc[i]; /* the reference moves in */
        R->acc[i] = dt__lw_push(R->L, R->mesh, i, k);
    }
}

/* Every ring group passes on the blocks its devices hold in step `step`:
 * ring coordinate r gets r - 1's. */
static void shift(ring *R, int step) {
    const dt__tval *tk = R->n->in[1];
    int64_t coord[DT_MAX_MESH_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    int64_t stride = R->mesh->strides[R->md];
    for (int64_t base = 0; base < R->mesh->ndev && R->L->status == DT_OK; base++) {
        dt__mesh_coord(R->mesh, base, coord);
        if (coord[R->md] != 0)
            continue;
        dt__coll *c = dt__coll_new(R->mesh->type, DT_COLL_SHIFT, R->size, R->nd, R->kv_dtype);
        for (int r = 0; c && r < R->size; r++) {
            coord[R->md] = (r - step + R->size) % R->size;
            dt__local_region(&tk->meta, coord, s, l);
            l[R->nd - 1] = R->dk + R->dv;
            memcpy(c->shapes[r], l, sizeof c->shapes[r]);
        }
        /* The blocks' references move into the kernels; the new ones land in
         * R->kv (a failure discards the group, and the caller stops). */
        dt__lw_collective_after(R->L, R->mesh, DT_STREAM_COMM, c, base, stride, R->kv, R->dep, R->kv,
                                R->kv_dtype, NULL);
    }
}

/* Each device's result: the accumulator's output columns in the output
 * dtype, or, for a device with no query rows, plain attention on its own
 * blocks (an empty result). */
static void results(ring *R) {
    for (dt__lw_dev dev = DT__LW_EACH(R->n->out, DT_K_SDPA); dt__lw_each(R->L, &dev);) {
        int64_t i = dev.idx;
        int flags = R->acc[i] ? DT_KNN_RING_FINAL : (R->n->a.flags & (DT_KNN_DEFAULT | DT_KNN_CAUSAL));
        dt__kernel *k = dev.k;
        sdpa_set(R, k, flags, R->n->out->meta.dtype, dev.len);
        if (R->acc[i]) {
            k->n_in = 1;
            k->in[0] = R->acc[i]; /* the reference moves in */
            R->acc[i] = NULL;
        } else {
            k->n_in = 3;
            for (int j = 0; j < 3; j++)
                k->in[j] = dt__blob_retain(R->n->in[j]->blobs[i]);
        }
        dt__lw_each_push(R->L, &dev);
    }
}

dt_status dt__lower_sdpa_ring(dt__lower *L, dt__node *n) {
    const dt__meta *mq = &n->in[0]->meta;
    ring R = {.L = L, .n = n, .mesh = mq->mesh, .md = (int)n->a.ints[0], .nd = mq->ndim};
    R.size = (int)R.mesh->shape[R.md];
    R.dk = (int)n->in[1]->meta.shape[R.nd - 1];
    R.dv = (int)n->in[2]->meta.shape[R.nd - 1];
    R.kv_dtype = mq->dtype;
    /* Half-precision inputs accumulate in float32. */
    R.acc_dtype = mq->dtype == DT_FLOAT64 ? DT_FLOAT64 : DT_FLOAT32;
    size_t nd = (size_t)R.mesh->ndev;
    R.kv = dt__calloc(nd, sizeof *R.kv);
    R.acc = dt__calloc(nd, sizeof *R.acc);
    R.dep = dt__calloc(nd, sizeof *R.dep);
    if (!R.kv || !R.acc || !R.dep)
        dt__lw_fail(L, DT_ENOMEM, "out of memory (ring attention)");
    else if (dt__lw_alloc_blobs(L, n->out) == DT_OK)
        pack(&R);
    for (int step = 0; step < R.size && L->status == DT_OK; step++) {
        attend(&R, step);
        if (step + 1 < R.size)
            shift(&R, step);
    }
    results(&R);
    for (size_t i = 0; i < nd; i++) {
        if (R.kv)
            dt__blob_release(R.kv[i]);
        if (R.acc)
            dt__blob_release(R.acc[i]);
        if (R.dep)
            dt__blob_release(R.dep[i]);
    }
    dt__free(R.kv);
    dt__free(R.acc);
    dt__free(R.dep);
    return L->status;
}
