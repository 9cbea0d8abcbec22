/*
 * Lower once, instantiate per device (docs/decisions.md): a node whose
 * kernel is the same on every device of its mesh but for the blobs it reads
 * and writes there is lowered into one device-independent record
 * (core/records/bcast.h) instead of one record per device. The controller
 * packs the kernel's attributes once; per device it makes the output's blob
 * and links the device's slot (a record header naming its blobs) into that
 * stream's batch, so the streams' order, events, memory charges and frees
 * are those of per-device records. Each worker instantiates its slot
 * itself (core/worker/kernel_run.c).
 *
 * Taken only where nothing else needs per-device records: the switch on
 * (g->bcast), no tap, nothing recorded (explain, traces), no worker node's
 * devices, regular layouts, and every input's block on each device the
 * kernel's whole input there: laid out as the output (or both all
 * Replicate/Partial), or as the caller checked device by device (linalg).
 * Replay (replay.c) captures the slots while it captures a node: a slot has
 * a handle, so the template is kept unusable and later sightings of the
 * signature are lowered here again, not replayed per device.
 *
 * Threads: the controller thread only.
 */
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_comm.h"
#include "core/controller/lower_queue.h"
#include "core/controller/lower_step.h"
#include "core/records/bcast.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/trace.h"
#include "core/worker/stream_int.h"

/* Meshes of more devices are lowered per device (the streams are looked up
 * into a stack array). */
#define BCAST_MAX_DEV DT__LW_BCAST_MAX_DEV

/* 1 when every placement of m is Replicate or Partial: each device holds the
 * whole global shape. */
static int whole(const dt__meta *m) {
    for (int md = 0; md < m->mesh->ndim; md++)
        if (m->pl[md].kind == DT_PLACEMENT_SHARD)
            return 0;
    return 1;
}

/* 1 when input `in` of an elementwise kernel writing `out` needs, on every
 * device, exactly its own local block: both hold their whole shape, or
 * both have the same shape and placements. */
static int same_blocks(const dt__meta *in, const dt__meta *out) {
    if (whole(in) && whole(out))
        return 1;
    if (in->ndim != out->ndim || memcmp(in->shape, out->shape, sizeof(int64_t) * (size_t)in->ndim))
        return 0;
    for (int md = 0; md < out->mesh->ndim; md++)
        if (in->pl[md].kind != out->pl[md].kind || in->pl[md].dim != out->pl[md].dim)
            return 0;
    return 1;
}

void dt__lw_bcast_round(dt__lower *L) {
    const dt_graph *g = L->g;
    /* A mesh of several local devices, or of one while CUDA graphs are on
     * (a run's slot is what a worker captures, core/worker/graph_run.c). */
    int least = atomic_load_explicit(&g->cuda_graph, memory_order_relaxed) ? 1 : 2;
    L->bc_least = atomic_load_explicit(&g->bcast, memory_order_relaxed) && !g->ktap ? least : 0;
    L->step_on = atomic_load_explicit(&g->step, memory_order_relaxed) &&
                 atomic_load_explicit(&g->bgroup, memory_order_relaxed);
}

int dt__lw_bcast_mesh(const dt__lower *L, const dt_mesh *mesh) { return dt__lw_bcast_on(L, mesh); }

int dt__lw_bcast_wanted(const dt__lower *L, const dt__tval *out) { return dt__lw_bcast_out(L, out); }

/* Whether node inputs `in` and output `out` may be lowered as one record
 * (`checked`: the caller found every device's input blocks its own). */
static int eligible(const dt__lower *L, const dt__tval *out, dt__tval *const *in, int n_in, int checked) {
    const dt_mesh *mesh = out->meta.mesh;
    if (!dt__lw_bcast_out(L, out))
        return 0;
    for (int j = 0; j < n_in; j++) {
        const dt__meta *m = &in[j]->meta;
        if (m->mesh != mesh || m->seg.n || (!checked && !same_blocks(m, &out->meta)))
            return 0;
        if (!dt__lw_blobs_there(in[j]))
            return 0; /* an earlier failure: the per-device path reports it */
    }
    return 1;
}

int dt__lw_probes(const dt__lower *L, const dt__node *n, int proven, int64_t *devs) {
    const dt_mesh *mesh = n->out->meta.mesh;
    /* Invariant: callers asked dt__lw_bcast_wanted first. */
    DT_ASSERT(mesh->ndev <= DT__LW_BCAST_MAX_DEV);
    uint32_t moved = 0; /* mesh dims on which some meta is not Replicate */
    int ok = proven && L->g->bcast_proof;
    for (int j = -1; ok && j < n->n_in; j++) {
        const dt__meta *m = j < 0 ? &n->out->meta : &n->in[j]->meta;
        ok = m->mesh == mesh && dt__lw_even(m);
        for (int md = 0; md < mesh->ndim; md++)
            if (m->pl[md].kind != DT_PLACEMENT_REPLICATE)
                moved |= 1u << md;
    }
    if (!ok) {
        for (int64_t d = 0; d < mesh->ndev; d++)
            devs[d] = d;
        return (int)mesh->ndev;
    }
    int k = 0;
    devs[k++] = 0;
    for (int md = 0; md < mesh->ndim; md++)
        if ((moved >> md & 1) && mesh->shape[md] > 1)
            devs[k++] = mesh->strides[md];
    return k;
}

int dt__lw_same_attr(dt__lw_same *s, int64_t d, const dt__kattr *a) {
    if (a->text)
        return 0; /* not packed into a fixed buffer: per device */
    if (d == 0) {
        s->a0 = a;
        s->len = 0;
        return 1;
    }
    /* The same bytes as given pack the same (the usual case, cheap: device
     * 0's are packed only when they are needed); bytes that differ may
     * still pack the same (unused entries, padding). */
    DT_ASSERT(a != s->a0); /* device 0's is not overwritten */
    if (!memcmp(a, s->a0, sizeof *a))
        return 1;
    if (!s->len)
        s->len = dt__kattr_pack(s->a0, s->p0);
    uint8_t p[DT__KATTR_PACK_MAX];
    return dt__kattr_pack(a, p) == s->len && !memcmp(p, s->p0, s->len);
}

int dt__lw_own_block(const dt__meta *m, const int64_t *coord, const int64_t *start, const int64_t *len) {
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    dt__local_region(m, coord, ls, ll);
    size_t bytes = sizeof(int64_t) * (size_t)m->ndim;
    return !memcmp(start, ls, bytes) && !memcmp(len, ll, bytes);
}

/* The node's output blobs, one per device, each with the kernel's
 * reference and the value's: a fresh value's as one group (the value holds
 * the group; core/records/bgroup.h) when g->bgroup is on, else one blob
 * each. 0 when out of memory. */
static int make_outs(dt__lower *L, dt__tval *out, dt__stream *const *ss, int n, dt__blob **outs) {
    dt_graph *g = L->g;
    if (atomic_load_explicit(&g->bgroup, memory_order_relaxed) && !out->blobs) {
        const dt__backend *be[BCAST_MAX_DEV];
        for (int d = 0; d < n; d++)
            be[d] = ss[d]->be;
        dt__bgroup *gr = dt__bgroup_new(g->ctl_pools, n, be, DT__BGROUP_REFS);
        if (!gr)
            return 0;
        out->grp = gr;
        out->blobs = dt__bgroup_ptrs(gr);
        memcpy(outs, out->blobs, sizeof *outs * (size_t)n);
        return 1;
    }
    if (dt__lw_alloc_blobs(L, out) != DT_OK)
        return 0;
    int made = 0;
    while (made < n && (outs[made] = dt__blob_new_in(g->ctl_pools, ss[made]->be))) {
        /* The kernel's reference and the value's: no other thread sees it yet. */
        atomic_init(&outs[made]->refs, 2);
        made++;
    }
    if (made == n) {
        memcpy(out->blobs, outs, sizeof *outs * (size_t)n);
        return 1;
    }
    for (int d = 0; d < made; d++) {
        dt__blob_release(outs[d]);
        dt__blob_release(outs[d]);
    }
    return 0;
}

dt__bgroup *dt__lw_group_of(dt_graph *g, dt__tval *v, int n) {
    if (v->grp || !atomic_load_explicit(&g->bgroup, memory_order_relaxed))
        return v->grp;
    dt__bgroup *gr = dt__bgroup_adopt(g->ctl_pools, n, v->blobs);
    if (!gr)
        return NULL;
    if (v->blobs != v->inl)
        dt__free(v->blobs);
    v->grp = gr;
    v->blobs = dt__bgroup_ptrs(gr);
    return gr;
}

dt__krec *dt__lw_bcast_init(const dt__lower *L, dt__bcast *b, int kop, const char *opname, int n_in) {
    dt__krec *img = b->img;
    img->kop = kop;
    img->opname = opname ? opname : dt__ops[L->node->op].name;
    img->site_file = L->node->site_file;
    img->site_line = L->node->site_line;
    for (int d = 0; d < b->n; d++) {
        dt__krec *slot = dt__bcast_slot(b, d);
        slot->kop = DT_KC_BCAST;
        slot->handle = b;
        slot->opname = img->opname;
        slot->site_file = img->site_file;
        slot->site_line = img->site_line;
        slot->n_in = (int16_t)n_in;
    }
    return img;
}

int dt__lw_bcast(dt__lower *L, dt__tval *out, int kop, dt__kattr *a, const char *opname, dt__tval *const *in,
                 int n_in, int checked) {
    dt_graph *g = L->g;
    if (kop >= DT_K_COUNT || a->text || !eligible(L, out, in, n_in, checked))
        return 0;
    if (dt__lw_step_add(L, out, kop, a, opname, in, n_in))
        return 1; /* appended to the mesh's open run (lower_step.c) */
    const dt_mesh *mesh = out->meta.mesh;
    int n = (int)mesh->ndev;
    dt__stream *ss[BCAST_MAX_DEV];
    for (int d = 0; d < n; d++) {
        ss[d] = dt__lw_stream(L, mesh, d);
        if (!ss[d])
            return 1; /* L->status set */
        if (ss[d]->remote)
            return 0; /* a worker node's device (its first use): records leave per device */
    }
    /* The node's reuse mark (passes/reuse.c), as dt__lw_push_on puts it. */
    a->flags |= L->kflags;
    uint8_t attr[DT__KATTR_PACK_MAX];
    size_t alen = dt__kattr_pack(a, attr);
    dt__bcast *b = dt__bcast_new(g->ctl_pools, n, alen);
    dt__blob *outs[BCAST_MAX_DEV];
    if (!b || !make_outs(L, out, ss, n, outs)) {
        if (b) {
            atomic_store_explicit(&b->left, 1, memory_order_relaxed);
            dt__bcast_unref(b);
        }
        dt__lw_fail(L, DT_ENOMEM, "out of memory (device-independent record)");
        return 1;
    }
    memcpy(dt__lw_bcast_init(L, b, kop, opname, n_in)->attr, attr, alen);
    /* Each input is held once, whole, by this record (its group; a value
     * made per device is adopted into one first): its slots borrow their
     * device's member. */
    dt__bgroup *gin[DT_MAX_OP_INPUTS] = {NULL};
    for (int j = 0; j < n_in; j++)
        if ((gin[j] = dt__lw_group_of(g, in[j], n))) {
            b->gin[j] = gin[j];
            dt__bgroup_hold(gin[j]);
        }
    for (int d = 0; d < n; d++) {
        dt__krec *slot = dt__bcast_slot(b, d);
        for (int j = 0; j < n_in; j++)
            slot->in[j] = gin[j] ? in[j]->blobs[d] : dt__blob_retain(in[j]->blobs[d]);
        slot->out = outs[d];
        dt__lw_bind(g, ss[d], slot);
        dt__lw_stream_append(g, ss[d], slot);
    }
    atomic_fetch_add_explicit(&g->bcast_nodes, 1, memory_order_relaxed);
    return 1;
}
