/*
 * Runs of shared kernels (core/records/step.h, core/controller/lower_step.c):
 * consecutive nodes of one mesh that would each be a device-independent
 * record are appended to one open run, whose slots (one per device) are
 * linked when it is closed.
 *
 * Threads: the controller thread only.
 */
#ifndef DT_CORE_LOWER_STEP_H
#define DT_CORE_LOWER_STEP_H

#include "core/controller/lower.h"

/* Appends the node being lowered (output `out`, backend kernel `kop` with
 * attributes *a, the node's reuse mark added, op name `opname`, the n_in
 * inputs' blocks on each device the kernel's whole inputs there: what
 * dt__lw_bcast found) to the graph's open run on out's mesh, opening one
 * (and closing another mesh's) as needed. Returns 1 when it took the node
 * (L->status set on a failure), 0 when the caller lowers it otherwise
 * (nothing was made; the switch off, groups off, an output with blobs
 * already, a worker node's device). */
int dt__lw_step_add(dt__lower *L, dt__tval *out, int kop, dt__kattr *a, const char *opname,
                    dt__tval *const *in, int n_in);

/* The same for a kernel with one input, `src`, the same blob on every device
 * (a host tensor's data that every device of a Replicate mesh copies): on
 * success (1) the caller's reference on src moves into the run; on 0 the
 * caller keeps it and lowers the node otherwise. */
int dt__lw_step_add_blob(dt__lower *L, dt__tval *out, int kop, dt__kattr *a, const char *opname,
                         dt__blob *src);

/* A run image as replay keeps it (core/controller/replay.c): the kernel
 * dt__lw_step_add appended for a node, its attributes packed (the reuse
 * mark included), and which of the node's inputs each image input reads. */
typedef struct dt__step_tpl {
    int kop;
    int n_in;
    const char *opname;
    uint32_t alen;
    int8_t from[DT_MAX_OP_INPUTS]; /* image input j is the node's input from[j] */
    uint8_t attr[DT__KATTR_PACK_MAX];
} dt__step_tpl;

/* Appends node n's kernel as template t says, without lowering it: n's
 * signature is t's capture's (replay.c checked it), so its output, inputs
 * and attributes are those the lowering would find. Returns 1 when it took
 * the node (L->status set on a failure), 0 when what the signature does not
 * hold forbids a run now (the switches, a tap, explain or traces, an input
 * an earlier failure left without blobs): the caller lowers the node. */
int dt__lw_step_replay(dt__lower *L, const dt__node *n, const dt__step_tpl *t);

/* Closes the open run (g->step_open): links its slot on each device's
 * stream. Called before anything else is linked on any stream (the
 * run's kernels were numbered on its streams when they were appended) and
 * at the round's flush. A no-op when none is open. */
void dt__lw_step_close(dt_graph *g);

#endif /* DT_CORE_LOWER_STEP_H */
