/*
 * The machinery the elementwise family's two files share (elementwise.c:
 * binary ops, the shared planner and the lowering; elementwise_unary.c:
 * unary ops, casts, where, masked_fill, clamp).
 *
 * An elementwise call is planned in three steps on the client thread, and
 * only then submitted, so that a failing call enqueues nothing:
 *   1. dt__ew_shape: NULL/graph/mesh checks and the broadcast output shape;
 *   2. the op's own dtype rules (it fills e->out.dtype);
 *   3. dt__ew_placements: per-mesh-dim placement rules and, on meshes with
 *      nested shards, the check that every device holds what it needs;
 * then dt__ew_submit builds the node (and, for in-place forms, a cast back
 * to the target's dtype). Threads: all of it runs on client threads.
 */
#ifndef DT_OPS_ELEMENTWISE_H
#define DT_OPS_ELEMENTWISE_H

#include "core/client/placement.h"
#include "core/core.h"
#include "core/records/meta.h"

/* A planned elementwise call. */
/* The node attributes an elementwise op sets (the rest of dt__nattr stays
 * zero): kept small, since every tiny op builds one on the stack. */
typedef struct dt__ew_attr {
    int32_t sub, flags;
    dt_scalar scalar, scalar2;
} dt__ew_attr;

typedef struct dt__ew {
    const char *name;          /* torch's op name, for messages */
    int op;                    /* DT_OP_* of the node */
    int nin;                   /* tensor inputs, in kernel order */
    dt_tensor *in[DT__MAX_IN]; /* borrowed */
    dt__ew_attr attr;
    dt__meta out; /* set by dt__ew_shape, dtype by the op */
} dt__ew;

/* Step 1: inputs not NULL, one graph, one mesh; e->out gets the broadcast
 * shape and the mesh (dtype left to the op). DT_ESHAPE as torch words it. */
dt_status dt__ew_shape(dt__ew *e);
/* Step 3: e->out.pl from the placement engine (core/client/placement.h) with the
 * "broadcast S/R" shard rule and `partial`, the 0-terminated Partial sets
 * the op is linear in (DT__PS_MASKS; NULL rejects every Partial);
 * PlacementError naming `accepted` otherwise. */
dt_status dt__ew_placements(dt__ew *e, const char *accepted, const uint32_t *partial);
/* Submits a planned call; a new reference or NULL. With DT_EW_INPLACE it
 * first checks torch's in-place rules against e->in[0] (same shape,
 * castable dtype) and appends a cast to in[0]'s dtype when needed. */
dt_tensor *dt__ew_submit(dt__ew *e, int flags);

/* torch's C++ name of a dtype in messages ("Float", "Long", "Bool"). */
const char *dt__ew_torch_name(dt_dtype d);
/* 1 when torch's canCast(from, to) holds (no float -> integral, no
 * non-bool -> bool). */
int dt__ew_can_cast(dt_dtype from, dt_dtype to);
/* 1 when scalar s converts to dtype d without overflow under c10's rules
 * (Scalar::to<T>() as masked_fill and clamp use it). */
int dt__ew_scalar_fits(dt_scalar s, dt_dtype d);

/* The kernel an elementwise node (any op dt__lower_elementwise lowers) runs
 * on each device: kernel op, attributes (dtype, sub, flags, scalars; the
 * rest of *a is left as it is) and the op name its kernels carry (NULL: the
 * node op's). Controller thread (the chain lowering, elementwise_chain.c). */
void dt__ew_kernel_spec(const dt__node *n, int *kop, dt__kattr *a, const char **opname);

/* Op names for kernels' error messages (elementwise_unary.c). */
const char *dt__ew_unary_name(int sub);

#endif /* DT_OPS_ELEMENTWISE_H */
