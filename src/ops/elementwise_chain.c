/*
 * Blocked elementwise chains, the elementwise family's side: which of its
 * nodes may be a chain step (the op table's chainable column), and the
 * lowering of a CHAIN node into one DT_K_CHAIN kernel per device. Which
 * runs of nodes make a chain is the window's chain pass
 * (core/controller/passes/chain.c); the kernel's program is
 * core/records/chain_prog.h; the worker runs it (core/worker/chain_run.c)
 * through the backend's run_chain (torch_chain.cpp, ref_chain.c).
 *
 * Each step is the kernel its node's own lowering would queue
 * (dt__ew_kernel_spec), so the backend runs the same kernels on each block
 * that the unfused nodes run on the whole tensors.
 *
 * Threads: the controller (the chain pass calls the chainable functions,
 * the controller dt__lower_chain). No locks.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/chain_prog.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"
#include "ops/elementwise.h"
#include "ops/ops.h"

/* ------------------------------------------------------------ steps */

/* A step's kernel must compute each element as on the whole tensor however
 * the blocks split it. ATen calls that are not position-independent
 * (docs/decisions.md lists them: sigmoid, exp2, sinh, cosh, rsqrt, pow,
 * add/sub with alpha, rounding divisions in half types) give another result
 * to another split: they end a chain rather than join it. */

int dt__ew_chainable_binary(const dt__node *n) {
    switch (n->a.sub) {
    case DT_BINARY_POW:
        return 0;
    case DT_BINARY_ADD:
    case DT_BINARY_SUB:
        /* alpha != 1 */
        return n->a.scalar2.kind == DT_SCALAR_INT && n->a.scalar2.i == 1;
    case DT_BINARY_DIV_TRUNC:
    case DT_BINARY_DIV_FLOOR:
        return n->out->meta.dtype != DT_FLOAT16 && n->out->meta.dtype != DT_BFLOAT16;
    default:
        return 1;
    }
}

int dt__ew_chainable_unary(const dt__node *n) {
    switch (n->a.sub) {
    case DT_UNARY_SIGMOID:
    case DT_UNARY_EXP2:
    case DT_UNARY_SINH:
    case DT_UNARY_COSH:
    case DT_UNARY_RSQRT:
        return 0;
    default:
        return 1;
    }
}

int dt__ew_chainable(const dt__node *n) {
    (void)n;
    return 1;
}

/* ------------------------------------------------------------ lowering */

/* The chain's input index of value v, or -1. */
static int input_index(const dt__node *n, const dt__tval *v) {
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] == v)
            return j;
    return -1;
}

/* Writes the program for `steps` (or only sizes it, out NULL); returns its
 * bytes. */
static size_t build(const dt__node *n, dt__node *const *steps, int ns, int32_t flags, uint8_t *out) {
    size_t len = DT__CHAIN_HEAD_BYTES;
    uint8_t *p = out;
    if (p)
        dt__chain_put_head(&p, ns, flags);
    for (int i = 0; i < ns; i++) {
        const dt__node *s = steps[i];
        int kop;
        const char *opname;
        dt__kattr a = {0};
        dt__ew_kernel_spec(s, &kop, &a, &opname);
        if (!opname)
            opname = dt__ops[s->op].name;
        uint8_t attr[DT__KATTR_PACK_MAX];
        size_t alen = dt__kattr_pack(&a, attr);
        len += dt__chain_step_bytes(s->n_in, opname, s->site_file, alen);
        if (!p)
            continue;
        int8_t src[DT__CHAIN_MAX_IN];
        for (int j = 0; j < s->n_in; j++) {
            int at = i > 0 && s->in[j] == steps[i - 1]->out ? -1 : input_index(n, s->in[j]);
            /* Invariant: the pass gave the chain node every outside input. */
            DT_ASSERT(at >= -1);
            src[j] = (int8_t)at;
        }
        dt__chain_put_step(&p, kop, s->n_in, src, s->site_line, opname, s->site_file, attr, alen);
    }
    return len;
}

dt_status dt__lower_chain(dt__lower *L, dt__node *n) {
    dt__node *const *steps = n->extra;
    int ns = (int)n->a.ints[0];
    dt__tval *o = n->out;
    const dt_mesh *mesh = o->meta.mesh;
    if (dt__lw_alloc_blobs(L, o) != DT_OK)
        return L->status;
    /* One program for every device, copied into each kernel. */
    size_t len = build(n, steps, ns, L->kflags, NULL);
    uint8_t *prog = dt__malloc(len);
    if (!prog)
        return dt__lw_fail(L, DT_ENOMEM, "out of memory (chain program)");
    build(n, steps, ns, L->kflags, prog);
    int kop;
    const char *opname;
    dt__kattr tail = {0};
    dt__ew_kernel_spec(steps[ns - 1], &kop, &tail, &opname);
    for (int64_t i = 0; i < mesh->ndev && L->status == DT_OK; i++) {
        dt__stream *s = dt__lw_stream(L, mesh, i);
        dt__krec *k = s ? dt__krec_alloc(len) : NULL;
        if (s && !k)
            dt__lw_fail(L, DT_ENOMEM, "out of memory (kernel record)");
        if (!k)
            break;
        k->kop = DT_K_CHAIN;
        k->n_in = (int16_t)n->n_in;
        for (int j = 0; j < n->n_in; j++)
            k->in[j] = n->in[j]->blobs ? dt__blob_retain(n->in[j]->blobs[i]) : NULL;
        k->out = dt__blob_new(s->be);
        k->opname = opname ? opname : dt__ops[steps[ns - 1]->op].name;
        k->site_file = n->site_file;
        k->site_line = n->site_line;
        memcpy(k->attr, prog, len);
        int ok = k->out != NULL;
        for (int j = 0; j < n->n_in; j++)
            ok = ok && k->in[j];
        if (!ok) {
            dt__krec_discard(k);
            dt__lw_fail(L, DT_ENOMEM, "out of memory (blob record)");
            break;
        }
        dt__lw_push_krec(L->g, s, k);
        o->blobs[i] = dt__blob_retain(k->out);
    }
    dt__free(prog);
    return L->status;
}
