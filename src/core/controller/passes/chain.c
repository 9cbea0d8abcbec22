/*
 * Pass chain: blocked elementwise chains (docs/decisions.md, "Blocked
 * elementwise chains"). A run of elementwise
 * nodes, each reading the one before, whose intermediate results nobody
 * else can see, becomes one CHAIN node lowered at the last node's slot: one
 * kernel per device that walks the data in cache-sized blocks and runs every
 * step's kernel on each block (src/ops/elementwise_chain.c lowers it,
 * core/worker/chain_run.c and the backends' run_chain run it), so only the
 * chain's inputs and its result touch memory-sized buffers.
 *
 * Which nodes. Those whose op's chainable column (src/ops/ops.def) says so:
 * the ops dt__lower_elementwise lowers (binary with a tensor or scalar
 * operand, unary, casts, where, masked_fill, clamp), on a CPU mesh,
 * with every tensor operand of the result's shape and placements and no
 * Partial: then each device's kernel reads the whole local pieces, as in
 * the chain kernel. Node s links to its reader c when s's result was
 * released in this round and c is its only reader here (window.h: then c
 * is its only reader ever; c may read it at several operands), c is such a
 * node too, the chain stays within DT__CHAIN_MAX_STEPS steps and
 * DT__CHAIN_MAX_IN outside inputs, and the tensor has at least
 * DT__CHAIN_MIN_NUMEL elements.
 *
 * Why the results stay bit-identical. Each step is the kernel its node
 * would run; on a block the kernel computes each element as on the whole
 * tensor as long as the kernel is position-independent. Blocks start at
 * multiples of the block size, a multiple of every vector width, so even
 * a vectorised body and a scalar tail split the elements as on the whole
 * tensor run by one thread. ATen calls that are not position-independent
 * (docs/decisions.md lists them: sigmoid, exp2, sinh, cosh, rsqrt, pow,
 * add/sub with alpha, rounding divisions) give a different result to
 * another split, which eager torch's own threads already make; they end a
 * chain rather than join it (their chainable function says 0).
 *
 * Placement. The CHAIN node takes the last node's slot: every outside input
 * of every step was made before that node was recorded. The earlier steps'
 * slots are marked DT__WS_FUSED (not lowered; their records live to the end
 * of the round, since the CHAIN node points at them through w->steps).
 *
 * Threads: controller only.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/window.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream.h"

/* The op's chainable column (src/ops/ops.def): the elementwise family says
 * which of its nodes may be steps. */
static int fusable_op(const dt__node *n) {
    dt__chainable_fn ok = dt__ops[n->op].chainable;
    return ok && ok(n);
}

static int same_layout(const dt__meta *a, const dt__meta *b) {
    if (a->mesh != b->mesh || a->ndim != b->ndim)
        return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return 0;
    for (int d = 0; d < a->mesh->ndim; d++)
        if (a->pl[d].kind != b->pl[d].kind || a->pl[d].dim != b->pl[d].dim)
            return 0;
    return 1;
}

/* A node that may be a step: a chainable one on a CPU mesh, every operand laid
 * out as the result, no Partial, enough elements. */
static int fusable(const dt__node *n) {
    if (!n->out || n->n_in < 1 || n->n_in > DT__CHAIN_MAX_IN || !fusable_op(n))
        return 0;
    const dt__meta *m = &n->out->meta;
    if (m->mesh->type != DT_DEVICE_CPU || dt__numel(m->ndim, m->shape) < DT__CHAIN_MIN_NUMEL)
        return 0;
    for (int d = 0; d < m->mesh->ndim; d++)
        if (m->pl[d].kind == DT_PLACEMENT_PARTIAL)
            return 0;
    for (int j = 0; j < n->n_in; j++)
        if (!same_layout(&n->in[j]->meta, m))
            return 0;
    return 1;
}

/* Outside inputs c adds to a chain ending in value v (its other operands;
 * repeats counted, a bound). */
static int outside(const dt__node *c, const dt__tval *v) {
    int k = 0;
    for (int j = 0; j < c->n_in; j++)
        k += c->in[j] != v;
    return k;
}

/* The CHAIN node for steps[0..ns): the outside inputs, first seen first
 * (the first step's in[0] leads: the reuse pass may give its buffer to the
 * result). NULL when out of memory. */
static dt__node *chain_node(dt__node *const *steps, int ns) {
    dt__node *c = dt__pool_alloc(&dt__node_pool);
    if (!c)
        return NULL;
    memset(c, 0, sizeof *c);
    const dt__node *tail = steps[ns - 1];
    c->op = DT_OP_CHAIN;
    c->out = tail->out;
    c->site_file = tail->site_file;
    c->site_line = tail->site_line;
    c->extra = (void *)steps;
    c->a.ints[0] = ns;
    for (int i = 0; i < ns; i++) {
        for (int j = 0; j < steps[i]->n_in; j++) {
            dt__tval *v = steps[i]->in[j];
            int seen = i > 0 && v == steps[i - 1]->out;
            for (int q = 0; q < c->n_in && !seen; q++)
                seen = c->in[q] == v;
            if (!seen) {
                /* Invariant: the pass bounds the outside inputs. */
                DT_ASSERT(c->n_in < DT_MAX_OP_INPUTS);
                c->in[c->n_in++] = v;
            }
        }
    }
    return c;
}

dt_status dt__pass_chain(dt__window *w) {
    if (!w->chains || w->n < 2)
        return DT_OK;
    /* Per slot: the step before it in its chain (-1: none), the chain's
     * length up to it (0: not a step), its outside inputs up to it; and
     * then whether a later step follows it. */
    int32_t *prev = w->aux, *len = w->aux + w->cap, *nin = w->aux + 2 * w->cap;
    for (int i = 0; i < w->n; i++) {
        prev[i] = -1;
        len[i] = 0;
        const dt__node *c = w->nodes[i];
        if ((w->flags[i] & DT__WS_DEAD) || !fusable(c))
            continue;
        len[i] = 1;
        nin[i] = c->n_in;
        for (int j = 0; j < c->n_in; j++) {
            int s = dt__window_producer(w, c->in[j]);
            if (s < 0 || s >= i || len[s] == 0 || !(w->flags[s] & DT__WS_RELEASED) ||
                len[s] >= DT__CHAIN_MAX_STEPS)
                continue;
            const dt__tval *v = c->in[j];
            int reads = 0;
            for (int q = 0; q < c->n_in; q++)
                reads += c->in[q] == v;
            int more = nin[s] + outside(c, v);
            if (reads != w->consumers[s] || more > DT__CHAIN_MAX_IN || !same_layout(&c->out->meta, &v->meta))
                continue;
            prev[i] = s;
            len[i] = len[s] + 1;
            nin[i] = more;
            break;
        }
    }
    /* Tails, newest first: a slot with a chain behind it that no later slot
     * extends (nin[] is reused as "followed"). */
    for (int i = 0; i < w->n; i++)
        nin[i] = 0;
    for (int i = 0; i < w->n; i++)
        if (prev[i] >= 0)
            nin[prev[i]] = 1;
    int off = 0;
    for (int i = 0; i < w->n; i++) {
        if (prev[i] < 0 || nin[i])
            continue;
        int ns = len[i];
        dt__node **steps = w->steps + off;
        for (int s = i, k = ns - 1; k >= 0; s = prev[s], k--)
            steps[k] = w->nodes[s];
        dt__node *c = chain_node(steps, ns);
        if (!c)
            return dt__error(DT_ENOMEM, "chain pass: out of memory");
        for (int s = prev[i]; s >= 0; s = prev[s])
            w->flags[s] |= DT__WS_FUSED;
        w->nodes[i] = c;
        w->fused += ns;
        off += ns;
    }
    return DT_OK;
}
