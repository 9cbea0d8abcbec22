/*
 * Lowering (lower.c, executor.c, fetch.c): the controller's context while
 * it lowers one node into kernels, the dt__lw_* helpers every lowering
 * function calls, the op table (rows in src/ops/ops.def) and the per-family
 * lowering hooks (src/ops). Everything here runs on the controller
 * thread. Included by every lowering function's file.
 */
#ifndef DT_CORE_LOWER_H
#define DT_CORE_LOWER_H

#include <string.h>

#include "core/records/kernel_rec.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"

/* The controller's view while it lowers one batch. */
struct dt__lower {
    dt_graph *g;
    const dt__node *node; /* the node being lowered */
    /* The node's first failure (sticky, reset per node): once set, the
     * dt__lw_* helpers make nothing more and every push discards its kernel,
     * so a lowering function may check only where it must release what it
     * holds. Its detail is the controller thread's dt_last_error(). */
    dt_status status;
    int32_t kflags; /* DT_KF_* the window's passes put on its backend kernels */
    /* The devices a mesh needs for shared records in this round, 0 when the
     * round takes none (dt__lw_bcast_round: the switches, the tap). */
    int32_t bc_least;
    /* Runs of shared records and blob groups both on in this round
     * (dt__lw_bcast_round; lower_step.c's step_for). */
    int32_t step_on;
};

/* Records a lowering failure (the first one wins) with its reason in the
 * thread error; returns L->status. */
dt_status dt__lw_fail(dt__lower *L, dt_status st, const char *what);

/* The stream of mesh device `idx`, started on first use; NULL (L->status
 * set) when it cannot be made. */
dt__stream *dt__lw_stream(dt__lower *L, const dt_mesh *mesh, int64_t idx);
dt__stream *dt__lw_stream_kind(dt__lower *L, const dt_mesh *mesh, int64_t idx, int kind);
/* As dt__lw_push, on the device's communication stream. */
dt__blob *dt__lw_push_comm(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k);
/* A new kernel of `kop` carrying the node's op name and call site; NULL
 * (L->status set) when out of memory or after an earlier failure. */
dt__kernel *dt__lw_kernel(dt__lower *L, int kop);
/* Queues `k` on the stream of mesh device `idx`; sets k->out to a new blob
 * unless already set, and returns that blob with one extra reference for the
 * caller. The builder is packed into a queued record (dt__krec, its
 * references and extra move there) and freed. Always takes k: NULL k, a NULL
 * input (an earlier failure) or a failure here (out of memory) discards it
 * (its references and extra go, see dt__lw_discard) and returns NULL with
 * L->status set. */
dt__blob *dt__lw_push(dt__lower *L, const dt_mesh *mesh, int64_t idx, dt__kernel *k);
/* As dt__lw_push on a stream the caller already holds. */
dt__blob *dt__lw_push_on(dt__lower *L, dt__stream *s, dt__kernel *k);
/* Frees a kernel builder that will not be queued with its input and output
 * references and what its extra owns (future reference, gate
 * reference). NULL is ignored. */
void dt__lw_discard(dt__kernel *k);
/* dt__lw_bind and dt__lw_stream_append: core/controller/lower_queue.h. */
/* A core kernel's record (DT_KC_*) with no attributes, carrying the node's
 * op name and call site; NULL (L->status set) when out of memory. */
dt__krec *dt__lw_core_krec(dt__lower *L, int kop);
/* Queues a record whose blobs are all there (cannot fail). */
void dt__lw_push_krec(dt_graph *g, dt__stream *s, dt__krec *k);
/* Queues collective `c` on all of its c->n ranks or on none: rank r is mesh
 * device base + r * stride, on its `stream_kind` stream. Every rank's stream,
 * kernel and output are made before any is queued, so a failure leaves no
 * rank waiting for peers that never come. On success the inputs
 * blobs[idx] move into the kernels (set NULL) and next[idx] get the outputs
 * (next may be blobs); on failure blobs are untouched. c is freed in either
 * case. The ranks meet in the comm's group for their devices and stream kind
 * (dt__lw_group), under the group's next sequence number. */
dt_status dt__lw_collective(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c, int64_t base,
                            int64_t stride, dt__blob **blobs, dt__blob **next, dt_dtype dtype,
                            const char *opname);
/* As dt__lw_collective; also, where deps[idx] is set, rank idx's kernel
 * waits for that blob before it runs (its reference moves in, set NULL): an
 * ordering edge, not an operand (ring attention bounds its blocks in flight
 * with it). deps may be NULL. */
dt_status dt__lw_collective_after(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c,
                                  int64_t base, int64_t stride, dt__blob **blobs, dt__blob **deps,
                                  dt__blob **next, dt_dtype dtype, const char *opname);
/* dt__lw_collective's one device-independent record (lower_coll.c): where
 * the group is the whole mesh in device order (base 0, stride 1, rank r on
 * device r), every rank's kernel is the same bytes (dt__coll_pack) but for
 * its rank, which each slot carries; the in-process comm (CPU meshes), an
 * all-reduce, all-gather or reduce-scatter, no deps. 1 when it took the
 * collective (as dt__lw_collective's contract; L->status set on a failure),
 * 0 when the caller lowers it per rank (nothing was made or numbered). */
int dt__lw_coll_bcast(dt__lower *L, const dt_mesh *mesh, int stream_kind, dt__coll *c, int64_t base,
                      int64_t stride, dt__blob **blobs, dt__blob **next, const char *opname);
/* Makes sure v has its blob array; DT_ENOMEM (L->status set) if not. */
dt_status dt__lw_alloc_blobs(dt__lower *L, dt__tval *v);

/* One device of a per-device lowering loop, the shape most lowering
 * functions have: the output's blob array, then for each device in mesh
 * order its coordinate, its block of the output and a kernel to fill and
 * queue there:
 *
 *     for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_K_LINALG); dt__lw_each(L, &dev);) {
 *         dev.k->in[0] = dt__lw_region(L, x, dev.idx, dev.coord, s, l);
 *         ...
 *         dt__lw_each_push(L, &dev);
 *     }
 *
 * The loop walks the blocks of one value, v: the node's output, or an input
 * whose blocks a step reads (its blob array exists already). */
typedef struct dt__lw_dev {
    int64_t idx;                                  /* the device's flat mesh index */
    int64_t coord[DT_MAX_MESH_NDIM];              /* its mesh coordinate */
    int64_t start[DT_MAX_NDIM], len[DT_MAX_NDIM]; /* its block of v (dt__local_region) */
    /* A new kernel of kind kop (dt__lw_kernel), the body's to fill and then
     * queue (dt__lw_each_push, dt__lw_push) or free; NULL with
     * DT__LW_NO_KERNEL, where the body makes its own or none. */
    dt__kernel *k;
    /* The loop's own. */
    dt__tval *v;
    int kop;
} dt__lw_dev;
/* The kop of a loop whose body makes its kernels itself (a kind that
 * changes per device, a device that gets none, two on a device). */
#define DT__LW_NO_KERNEL (-1)
/* A loop over the devices of value `val` with a kernel of kind `op` each. */
#define DT__LW_EACH(val, op) ((dt__lw_dev){.idx = -1, .v = (val), .kop = (op)})
/* Steps d to the next device of d->v's mesh and returns 1; on the first call
 * it first makes sure v has its blob array (dt__lw_alloc_blobs). Returns 0,
 * ending the loop, after the last device and as soon as the node has failed
 * (L->status set, before a step or when the kernel cannot be made), so a
 * body never runs after a failure and need not check for one before it
 * makes its next kernel. Controller thread. */
int dt__lw_each(dt__lower *L, dt__lw_dev *d);
/* Queues d->k on d's device (dt__lw_push, which always takes the kernel)
 * and makes the result v's blob there. */
void dt__lw_each_push(dt__lower *L, dt__lw_dev *d);
/* A blob holding the region (start, len) of `v` on device `idx`, which must
 * lie within v's local region there: v's own blob (retained) when the regions
 * are equal, else the output of a SLICE kernel (NULL on failure, as
 * dt__lw_push). */
dt__blob *dt__lw_region(dt__lower *L, dt__tval *v, int64_t idx, const int64_t *coord, const int64_t *start,
                        const int64_t *len);

/* Lowers the node being lowered as one device-independent record
 * (core/records/bcast.h, core/controller/lower_bcast.c) when the graph's
 * switch is on and nothing needs per-device records: backend kernel `kop`
 * with attributes *a (no text; the node's reuse mark is added) and op name
 * `opname` (NULL: the node op's) on every device of out's mesh, reading the
 * n_in inputs' blobs of the same device. Each input must be the device's
 * whole block of what the kernel reads there: `checked` says the caller
 * found so for every device; else each input must be laid out as out (the
 * same shape and placements) or both whole (Replicate/Partial only).
 * Returns 1 when it took the node (L->status set on a failure), 0 when the
 * caller lowers it per device (nothing was made). */
int dt__lw_bcast(dt__lower *L, dt__tval *out, int kop, dt__kattr *a, const char *opname, dt__tval *const *in,
                 int n_in, int checked);
/* 1 when dt__lw_bcast may take a node with output `out` at all (the switch
 * on, nothing recorded, a mesh of several local devices): whether a family
 * should check its blocks for it. */
int dt__lw_bcast_wanted(const dt__lower *L, const dt__tval *out);
/* The same for a mesh (the switch on, nothing recorded, several local
 * devices): what a collective's shared record asks (lower_coll.c).
 * Inline for the controller's own files: dt__lw_bcast_on (lower_queue.h). */
int dt__lw_bcast_mesh(const dt__lower *L, const dt_mesh *mesh);
/* Reads, once a round has been taken, what shared records depend on but a
 * node (graph switches, the test tap) into L->bc_least: a switch changed
 * while the client records applies to every node recorded after it, as
 * those are in a later round. */
void dt__lw_bcast_round(dt__lower *L);
/* Shared record b's image: kernel kop of the node being lowered, under
 * `opname` (NULL: the node's op) at the node's call site; and every slot's
 * header naming b and the image's name and site, with n_in inputs (the
 * caller fills them). Returns the image. */
struct dt__bcast;
dt__krec *dt__lw_bcast_init(const dt__lower *L, struct dt__bcast *b, int kop, const char *opname, int n_in);
/* 1 when every device's block of m has one shape: each mesh dim that
 * shards a dim of m divides what the mesh dims before it left of that dim,
 * as dt__local_region cuts them (meta.c); then each block's offset along a
 * dim is the sum over those mesh dims of coord[md] times the block length
 * they leave. A segmented layout's pieces are not cut so: 0. Inline: the
 * families' probes ask it of every meta of a node. */
static inline int dt__lw_even(const dt__meta *m) {
    if (m->seg.n)
        return 0;
    const dt_mesh *mesh = m->mesh;
    for (int md = 0; md < mesh->ndim; md++) {
        if (m->pl[md].kind != DT_PLACEMENT_SHARD)
            continue;
        /* What the mesh dims before md left of the dim (they divided it). */
        int d = m->pl[md].dim;
        int64_t len = m->shape[d];
        for (int e = 0; e < md; e++)
            if (m->pl[e].kind == DT_PLACEMENT_SHARD && m->pl[e].dim == d)
                len /= mesh->shape[e];
        if (len % mesh->shape[md])
            return 0;
    }
    return 1;
}
/* The group holding v's blobs (n devices): made now from its per-device
 * blobs (the value's references move into it) when g->bgroup is on. NULL:
 * none (off, or out of memory: a shared record's slots then hold each
 * blob). */
struct dt__bgroup *dt__lw_group_of(dt_graph *g, dt__tval *v, int n);

/* Meshes of more devices are lowered per device (dt__lw_bcast_wanted). */
#define DT__LW_BCAST_MAX_DEV 64
/* The devices (flat indices into devs[DT__LW_BCAST_MAX_DEV], device 0
 * first; returns their count) on which a family checks, device by device,
 * that node n's kernels are one shared record, standing for every device of
 * its output's mesh (a mesh dt__lw_bcast_wanted took). The check reads
 * the local regions of n's output and inputs (its metas).
 *
 * Where it is proven (`proven`: the family's own condition, below; the
 * graph's bcast_proof on; every meta on the one mesh, not segmented, and
 * even: each mesh dim that shards a dim divides what the mesh dims before
 * it left of that dim), device 0 and, for each mesh dim of several devices
 * on which some meta is not Replicate, the device one step along it: every
 * local block then has one shape on every device and its offsets are a
 * linear function of the coordinate (meta.c), so a quantity that is affine
 * in the offsets is the same on every device when it is the same on these
 * (f(c) = f(0) + sum of c[md] * (f(e_md) - f(0))), and so is one that
 * depends only on whether c[md] is 0 on mesh dims where a meta is Partial.
 * `proven` is the family's promise that its check and its kernel's
 * attributes read the coordinate only so: offsets and lengths copied from
 * the metas' local regions, chosen by shapes and attributes alone (no min,
 * max or clamp of an offset), and Partial tests of coord[md] != 0.
 * Elsewhere (uneven or segmented blocks, not proven, the switch off): every
 * device. Arithmetic only. */
int dt__lw_probes(const dt__lower *L, const dt__node *n, int proven, int64_t *devs);

/* A family's check that its per-device kernels of a node are one kernel:
 * device 0's attributes, as given (the caller's, not copied) and (once
 * another device's bytes differ from them) packed, to compare the others'
 * with. */
typedef struct dt__lw_same {
    size_t len; /* bytes of p0; 0: not packed yet */
    uint8_t p0[DT__KATTR_PACK_MAX];
    const dt__kattr *a0;
} dt__lw_same;
/* Device d's attributes *a (d counted from 0): 1 while they are the same
 * bytes as device 0's (no text), 0 once they differ. Device 0's *a is
 * kept by address: the caller leaves it as it is while it checks the
 * others (in another variable). Arithmetic only. */
int dt__lw_same_attr(dt__lw_same *s, int64_t d, const dt__kattr *a);
/* 1 when the region (start, len) of a value laid out as m is, on the
 * device at `coord`, its whole local block there (dt__lw_region would
 * return its own blob). */
int dt__lw_own_block(const dt__meta *m, const int64_t *coord, const int64_t *start, const int64_t *len);

/* nattr.flags of a SOURCE node whose extra holds one host block per device
 * (dt_tensor_from_local_buffers) instead of one global host impl. */
#define DT__SOURCE_LOCAL 1
/* The test gates' lowering (core/controller/debug_lower.c). */
dt_status dt__lower_debug_gate(dt__lower *L, dt__node *n);
/* Value reads and graph-wide barriers (core/controller/fetch.c). */
dt_status dt__lower_fetch(dt__lower *L, dt__node *n);
dt_status dt__lower_sync(dt__lower *L, dt__node *n);
/* The discard of both (the op table's column): fails the node's future as
 * cancelled and drops the node's reference (controller thread). */
void dt__fetch_discard(dt_graph *g, dt__node *n);
/* Test-only: collective groups lowered so far, process-wide (lower.c, and
 * replay.c for a replayed one; dt_debug_collectives_lowered reads it). */
extern atomic_long dt__collectives_lowered;

#endif /* DT_CORE_LOWER_H */
