/*
 * The gate of segmented dims (segment.c; the layout is core/records/seg.h,
 * docs/decisions.md "segmented cat"): what keeps the layout a
 * communication-free cat leaves away from every op that does not
 * understand it, the broadcasting ops' rule (it reads the inputs' value
 * records, client-side), and the conversion to the regular layout, which is built
 * out of ops and so is registered by src/init.c
 * (src/ops/segment_regular.c).
 *
 * Threads: client threads.
 */
#ifndef DT_CORE_SEGMENT_H
#define DT_CORE_SEGMENT_H

#include "core/core.h"
#include "core/records/seg.h"

struct dt__tval;
/* Sets n's output descriptor (t's meta) by its op's seg rule (the seg_rule
 * column of src/ops/ops.def), or converts its segmented inputs to the
 * regular layout first (n->in rewired; the new values, to release after n
 * is queued, in tmp[0..*ntmp), at most one per input). Called by
 * dt__client_submit. */
dt_status dt__seg_gate(dt_tensor *t, dt__node *n, dt_tensor **tmp, int *ntmp);
/* x (segmented) in the regular layout with the same placements: a new
 * reference, or NULL with the thread error set. Runs the registered
 * conversion. */
dt_tensor *dt__seg_regular(dt_tensor *x);
/* The rule of broadcasting ops (elementwise, activations): output dim o
 * for each input dim, right-aligned; every input holding the dim at full
 * size must carry the one descriptor. DT__SEG_PASS or DT__SEG_REGULAR. */
int dt__seg_broadcast(const dt__node *n, dt__meta *out);
/* Registers the conversion (src/init.c, before any graph exists). */
typedef dt_tensor *(*dt__seg_regular_fn)(dt_tensor *x);
void dt__seg_set_regularise(dt__seg_regular_fn fn);
/* dt__client_submit without the gate (tensor.c). */
dt_tensor *dt__client_submit_raw(dt_tensor *t, dt__node *n);
/* The symbol of a value record (tensor.c). */
dt_tensor *dt__tval_tensor(struct dt__tval *v);

#endif
