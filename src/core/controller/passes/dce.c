/*
 * Pass dce: dead-node elimination. A node whose result is dropped in the
 * same round, with no reader in the window, computes something nobody can
 * ever see (window.h: all its readers would be in this window), so it is
 * never lowered. Walking the window newest first makes a dead node's inputs
 * lose that reader before their own producers are looked at, so a chain
 * (x = a.exp(); y = x.sin(); both dropped unread) dies in one walk.
 *
 * A node is kept, whatever its result, when lowering it does something
 * besides computing that result: its op has DT_OPF_SIDE_EFFECT in
 * src/ops/ops.def (SOURCE frees the host data it owns as it is
 * distributed; FETCH, SYNC and STOP are reads, barriers and the shutdown;
 * DEBUG_GATE holds kernels at a test's gate). Every other node is pure: dtorch values are immutable, and the
 * in-place Python forms (x.add_(y), x[i] = v, masked_fill_) record a new value and rebind the symbol. Random
 * ops draw their seed when recorded, so dropping one does not shift the next one's numbers.
 *
 * The dead node's value is freed with the round's releases, as any other:
 * its blob array was never made, which dt__tval_free_list_deferred allows.
 *
 * While explain records (dtorch.explain(), DTORCH_EXPLAIN=1) nothing is
 * eliminated: `with explain(): model(x)` shows the forward's communication
 * whether or not its result is kept (docs/decisions.md, "explain keeps the
 * work whose result is dropped").
 *
 * Threads: controller only.
 */
#include "core/controller/window.h"
#include "core/records/node.h"
#include "core/records/trace.h"

dt_status dt__pass_dce(dt__window *w) {
    if (dt__rec_enabled(DT__REC_EXPLAIN))
        return DT_OK;
    for (int i = w->n - 1; i >= 0; i--) {
        const dt__node *n = w->nodes[i];
        if (!(w->flags[i] & DT__WS_RELEASED) || w->consumers[i] != 0 || !n->out ||
            (dt__ops[n->op].flags & DT_OPF_SIDE_EFFECT))
            continue;
        w->flags[i] |= DT__WS_DEAD;
        w->eliminated++;
        for (int j = 0; j < n->n_in; j++) {
            int s = dt__window_producer(w, n->in[j]);
            if (s >= 0)
                w->consumers[s]--;
        }
    }
    return DT_OK;
}
