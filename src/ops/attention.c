/*
 * scaled_dot_product_attention: softmax(q @ k^T * scale + mask) @ v.
 *
 * Each (batch, head) pair is independent, so shards of the leading dims pass
 * through with no communication; the sequence and embedding dims must be
 * whole on every device here (context-parallel attention, which shards the
 * sequence, is Ulysses in python/dtorch/nn/_context_parallel.py and the
 * ring in ring_attention.c). The result is linear in v, so a Partial v
 * with everything else Replicate gives a Partial result. Dropout on the
 * attention weights draws its mask for the global [..., L, S] shape, like
 * dt_dropout, so values do not depend on placements.
 *
 * Threads: dt_scaled_dot_product_attention on client threads; the rule
 * callbacks on the client and the controller.
 */
#include <math.h>
#include <string.h>

#include "core/client/tensor.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/nn_int.h"
#include "ops/ops.h"

/* Output dim of a mask dim (masks broadcast from the right). */
static int mask_out_dim(const nn_ctx *c, int d) { return d + c->out->ndim - c->in[3]->ndim; }

static int row_sdpa(const nn_ctx *c, int j, int d, int *od) {
    int lead = c->out->ndim - 2;
    *od = j < 3 ? d : mask_out_dim(c, d);
    /* A size-1 mask dim broadcasts: every device needs that one entry. */
    if (*od >= lead || (j == 3 && c->in[3]->shape[d] == 1 && c->out->shape[*od] != 1))
        return NN_ROW_OP;
    return NN_ROW_KEEP;
}

static const dt__ps_row sdpa_rows[] = DT__PS_ROWS(NN_SDPA_ROWS);
static const uint32_t sdpa_partial[] = DT__PS_MASKS(SDPA);

static void needed_sdpa(const nn_ctx *c, int j, const int64_t *coord, const int64_t *os, const int64_t *ol,
                        int64_t *s, int64_t *l) {
    (void)coord;
    const dt__meta *m = c->in[j];
    int lead = c->out->ndim - 2;
    dt__nn_full(m, s, l);
    for (int d = 0; d < m->ndim; d++) {
        int od = j < 3 ? d : mask_out_dim(c, d);
        if (od < lead && m->shape[d] == c->out->shape[od]) {
            s[d] = os[od];
            l[d] = ol[od];
        }
    }
}

static void kattr_sdpa(const nn_ctx *c, const int64_t *coord, const int64_t *os, const int64_t *ol,
                       dt__kattr *k) {
    (void)coord, (void)ol;
    /* The global shape and the region's offsets place the dropout mask
     * only: without dropout they are left out, so the kernels of devices
     * holding different heads are the same (a device-independent record). */
    if (c->a->f[0] == 0)
        return;
    int nd = c->out->ndim;
    k->gndim = nd;
    memcpy(k->gshape, c->out->shape, sizeof(int64_t) * (size_t)nd);
    k->gshape[nd - 1] = c->in[1]->shape[nd - 2]; /* S */
    memcpy(k->start, os, sizeof(int64_t) * (size_t)nd);
    k->start[nd - 2] = k->start[nd - 1] = 0;
}

const nn_rules dt__nn_rules_sdpa = {
    .kop = DT_K_SDPA,
    .accepted = NN_SDPA_TEXT,
    .rows = sdpa_rows,
    .shard_row = row_sdpa,
    .partial = sdpa_partial,
    .needed = needed_sdpa,
    .kattr = kattr_sdpa,
};

dt_status dt__sdpa_check(const char *op, dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *attn_mask,
                         double dropout_p, int is_causal, double scale) {
    if (dt__nn_need(op, "query", q) != DT_OK || dt__nn_need(op, "key", k) != DT_OK ||
        dt__nn_need(op, "value", v) != DT_OK)
        return dt_last_status();
    const dt__meta *mq = &q->v->meta, *mk = &k->v->meta, *mv = &v->v->meta;
    int nd = mq->ndim;
    if (nd < 2 || mk->ndim != nd || mv->ndim != nd) {
        dt__error(
            DT_EOP,
            "%s(): query, key and value must have the same number of dimensions (at least 2), got %d, %d "
            "and %d",
            op, mq->ndim, mk->ndim, mv->ndim);
        return dt_last_status();
    }
    for (int d = 0; d < nd - 2; d++) {
        if (mk->shape[d] != mq->shape[d] || mv->shape[d] != mq->shape[d]) {
            dt__error(
                DT_EOP,
                "%s(): query, key and value must have the same batch and head sizes; dim %d is %lld, %lld "
                "and %lld",
                op, d, (long long)mq->shape[d], (long long)mk->shape[d], (long long)mv->shape[d]);
            return dt_last_status();
        }
    }
    if (mk->shape[nd - 1] != mq->shape[nd - 1]) {
        dt__error(DT_EOP, "%s(): query and key must have the same embedding size, got %lld and %lld", op,
                  (long long)mq->shape[nd - 1], (long long)mk->shape[nd - 1]);
        return dt_last_status();
    }
    if (mv->shape[nd - 2] != mk->shape[nd - 2]) {
        dt__error(DT_EOP, "%s(): key and value must have the same sequence length, got %lld and %lld", op,
                  (long long)mk->shape[nd - 2], (long long)mv->shape[nd - 2]);
        return dt_last_status();
    }
    if (!dt_dtype_is_floating(mq->dtype) || mk->dtype != mq->dtype || mv->dtype != mq->dtype) {
        dt__error(DT_EOP,
                  "%s(): Expected query, key, and value to have the same floating-point dtype, but got "
                  "query.dtype: %s, key.dtype: %s and value.dtype: %s instead.",
                  op, dt_dtype_name(mq->dtype), dt_dtype_name(mk->dtype), dt_dtype_name(mv->dtype));
        return dt_last_status();
    }
    if (!(dropout_p >= 0.0 && dropout_p <= 1.0)) {
        dt__error(DT_EINVAL, "%s(): dropout probability has to be between 0 and 1, but got %g", op,
                  dropout_p);
        return dt_last_status();
    }
    if (is_causal && attn_mask) {
        dt__error(DT_EOP, "%s(): Explicit attn_mask should not be set when is_causal=True", op);
        return dt_last_status();
    }
    if (attn_mask) {
        const dt__meta *mm = &attn_mask->v->meta;
        if (mm->dtype != DT_BOOL && mm->dtype != mq->dtype) {
            dt__error(
                DT_EOP,
                "%s(): Expected attn_mask dtype to be bool or to match query dtype, but got attn_mask.dtype: "
                "%s and query.dtype: %s instead.",
                op, dt_dtype_name(mm->dtype), dt_dtype_name(mq->dtype));
            return dt_last_status();
        }
        if (mm->ndim > nd) {
            dt__error(DT_EOP, "%s(): attn_mask has %d dims, more than query's %d", op, mm->ndim, nd);
            return dt_last_status();
        }
        for (int d = 0; d < mm->ndim; d++) {
            int od = d + nd - mm->ndim;
            int64_t want = od == nd - 2   ? mq->shape[nd - 2]
                           : od == nd - 1 ? mk->shape[nd - 2]
                                          : mq->shape[od];
            if (mm->shape[d] != 1 && mm->shape[d] != want) {
                dt__error(
                    DT_EOP,
                    "%s(): attn_mask of dim %d size %lld cannot broadcast to the attention weights' size "
                    "%lld",
                    op, d, (long long)mm->shape[d], (long long)want);
                return dt_last_status();
            }
        }
    }
    if (!isnan(scale) && !isfinite(scale)) {
        dt__error(DT_EINVAL, "%s(): scale must be finite", op);
        return dt_last_status();
    }
    return DT_OK;
}

dt_tensor *dt_scaled_dot_product_attention(dt_tensor *q, dt_tensor *k, dt_tensor *v, dt_tensor *attn_mask,
                                           double dropout_p, int is_causal, double scale) {
    dt_clear_error();
    const char *op = "scaled_dot_product_attention";
    if (dt__sdpa_check(op, q, k, v, attn_mask, dropout_p, is_causal, scale) != DT_OK)
        return NULL;
    const dt__meta *mq = &q->v->meta, *mv = &v->v->meta;
    int nd = mq->ndim;
    dt__meta out = *mq;
    out.shape[nd - 1] = mv->shape[nd - 1];
    dt__nattr a;
    memset(&a, 0, sizeof a);
    a.flags =
        (isnan(scale) ? DT_KNN_DEFAULT : 0) | (is_causal ? DT_KNN_CAUSAL : 0) | (attn_mask ? DT_KNN_MASK : 0);
    a.f[0] = dropout_p;
    a.f[1] = isnan(scale) ? 0.0 : scale;
    if (dropout_p > 0.0)
        a.seed = dt__next_random_seed();
    dt_tensor *ins[4] = {q, k, v, attn_mask};
    return dt__nn_submit(DT_OP_SDPA, op, ins, attn_mask ? 4 : 3, &out, &a, 1);
}

/* ------------------------------------------------------ segmented dims */

/* The seg rule of attention (the SDPA and SDPA_RING rows; core/records/
 * seg.h): non-causal, unmasked, without dropout, with the segmented dim the
 * sequence dim of q, or of k and v alike. */
int dt__seg_rule_sdpa(const dt__node *n, dt__meta *out) {
    const dt__meta *in = &n->in[0]->meta;
    dt__seg g = in->seg;
    if (n->a.flags & (DT_KNN_CAUSAL | DT_KNN_MASK) || n->n_in != 3 || n->a.f[0] != 0.0)
        return DT__SEG_REGULAR;
    const dt__seg *k = &n->in[1]->meta.seg, *v = &n->in[2]->meta.seg;
    /* Keys and values permuted alike leave the result unchanged. */
    if (k->n != v->n || (k->n && (!dt__seg_same(k, v) || k->dim != v->dim ||
                                  dt__seg_sharding(&n->in[1]->meta) != dt__seg_sharding(&n->in[2]->meta))))
        return DT__SEG_REGULAR;
    if (k->n && k->dim != n->in[1]->meta.ndim - 2)
        return DT__SEG_REGULAR;
    if (g.n && g.dim != in->ndim - 2)
        return DT__SEG_REGULAR;
    out->seg = g;
    return dt__seg_same_sharding(in, out) ? DT__SEG_PASS : DT__SEG_REGULAR;
}
