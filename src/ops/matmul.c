/*
 * Linear algebra: matmul (every torch rank, `@`), mm, bmm, outer,
 * nn.functional.linear and einsum (equation parsing in einsum.c).
 *
 * All of them are contractions, described by a label plan (linalg.h): each
 * operand dim carries a label, the output keeps some labels and sums over the
 * others. Placements are matched per mesh dim through the labels:
 *   (R,R)->R;
 *   a Shard of a label the output keeps -> Shard of that output dim, when the
 *   other operand is Replicate (sliced locally to the same range) or shards
 *   the same label (batch dims: (S(b),S(b))->S(b));
 *   a Shard of a contracted label (K) on one or both operands -> Partial: each
 *   device contracts its K range, the Replicate side sliced to it;
 *   (P,R)->P and (R,P)->P (the product is linear in each operand), and a
 *   single-operand einsum passes Partial through.
 * Shards of different labels, Partial with anything but Replicate, and a Shard
 * of a size-1 dim that broadcasts are PlacementErrors. The placement engine
 * (core/client/placement.h) decides this from each kind's Shard rows (a row per
 * label class; a contracted label is the key of its partial sum), which also
 * give the accepted text of errors and registry rows. On 2-D meshes every
 * device's needed operand regions must lie in what it holds (nested shards
 * must line up), else PlacementError.
 *
 * linear's bias follows the output like an elementwise addend: Replicate
 * (sliced to the device's output region) or the output's Shard; on a mesh dim
 * where the output is Partial, a Replicate bias is added only on that dim's
 * first coordinate and a Partial bias on every device (its pieces add up).
 * The engine decides it too, from BIAS_ROWS after the contraction's rule.
 *
 * Lowering: one kernel per device on the operand regions its output region
 * needs: DT_K_LINALG (at::matmul for matmul, DT_KL_MATMUL).
 *
 * Threads: dt_matmul, dt_mm, dt_bmm, dt_outer, dt_linear, dt_einsum run on
 * client threads; dt__lower_linalg on the controller.
 */
#include <stdio.h>
#include <string.h>

#include "core/client/graph.h"
#include "core/client/placement.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "ops/linalg.h"
#include "ops/ops.h"

#define R_ DT_PLACEMENT_REPLICATE
#define S_ DT_PLACEMENT_SHARD
#define P_ DT_PLACEMENT_PARTIAL

static const char *kind_name(int kind) {
    switch (kind) {
    case DT_KL_MM:
        return "mm";
    case DT_KL_BMM:
        return "bmm";
    case DT_KL_OUTER:
        return "outer";
    case DT_KL_LINEAR:
        return "linear";
    case DT_KL_EINSUM:
        return "einsum";
    default:
        return "matmul";
    }
}

/* The Shard rows of each kind (core/client/placement.h), by the class of the
 * sharded dim's label: a batch label both operands keep, M (kept, first
 * operand only), N (kept, second only), K (contracted: a partial sum whose
 * key is the label, so (S(K),S(K)) sums as one), einsum's kept and summed
 * indices, and a size-1 dim that broadcasts (rejected: the other devices
 * would hold nothing to broadcast). A `*` marks a Replicate operand sliced
 * locally. */
enum { L_BATCH, L_M, L_N, L_K, L_KEPT, L_SUMMED, L_BCAST };
#define BCAST_ROW(X) X(L_BCAST, "no Shard of a size-1 dim that broadcasts", REJECT)
#define MATMUL_ROWS(X)                                                                                       \
    X(L_BATCH, "(S(batch),R)->S(batch)*, (R,S(batch))->S(batch)*, (S(batch),S(batch))->S(batch)", SHARD)     \
    X(L_M, "(S(M),R)->S(M)", SHARD)                                                                          \
    X(L_N, "(R,S(N))->S(N)", SHARD)                                                                          \
    X(L_K, "(S(K),R)->P*, (R,S(K))->P*, (S(K),S(K))->P", PARTIAL) BCAST_ROW(X)
#define MM_ROWS(X)                                                                                           \
    X(L_M, "(S(0),R)->S(0)", SHARD)                                                                          \
    X(L_N, "(R,S(1))->S(1)", SHARD) X(L_K, "(S(1),R)->P*, (R,S(0))->P*, (S(1),S(0))->P", PARTIAL)
#define BMM_ROWS(X)                                                                                          \
    X(L_BATCH, "(S(0),R)->S(0)*, (R,S(0))->S(0)*, (S(0),S(0))->S(0)", SHARD)                                 \
    X(L_M, "(S(1),R)->S(1)", SHARD)                                                                          \
    X(L_N, "(R,S(2))->S(2)", SHARD) X(L_K, "(S(2),R)->P*, (R,S(1))->P*, (S(2),S(1))->P", PARTIAL)
#define OUTER_ROWS(X) X(L_M, "(S(0),R)->S(0)", SHARD) X(L_N, "(R,S(0))->S(1)", SHARD)
#define LINEAR_ROWS(X)                                                                                       \
    X(L_M, "(S(batch d),R)->S(d)", SHARD)                                                                    \
    X(L_N, "(R,S(0))->S(-1)", SHARD) X(L_K, "(S(-1),R)->P*, (R,S(1))->P*, (S(-1),S(1))->P", PARTIAL)
#define EINSUM_ROWS(X)                                                                                       \
    X(L_KEPT, "S(kept index)->S(its output dim) with R* or the same S", SHARD)                               \
    X(L_SUMMED, "S(summed index) on one or both->P", PARTIAL) BCAST_ROW(X)

/* linear's bias rule (place_bias), after the contraction's: a two-input
 * rule whose input 0 is the product (placements decided) and input 1 the
 * bias, an elementwise addend that may not change them. A Replicate bias
 * is added on the first coordinate of a mesh dim where the output is P. */
enum { B_OUT, B_KEEP, B_BCAST, B_WHOLE };
#define BIAS_ROWS(X)                                                                                         \
    X(B_OUT, "(S(o),R)->S(o)*", SHARD)                                                                       \
    X(B_KEEP, "(S(o),S(d))->S(o) for o = d + new dims", SHARD)                                               \
    X(B_BCAST, "no S of a bias dim that broadcasts", REJECT) X(B_WHOLE, "no S where the output is R", REJECT)
#define DT__PS_SET_BIAS(X1, X2, X3) X2(P, R) X2(P, P)
#define DT__PS_EMPTY_BIAS ""
#define LINEAR_BIAS                                                                                          \
    "; (output, bias): " DT__PS_ROWS_TEXT("(R,R)->R", BIAS_ROWS, BIAS) " (an R bias is added on the first "  \
                                                                       "coordinate where the output is P)"

#define TEXT_MATMUL DT__PS_ROWS_TEXT("(R,R)->R", MATMUL_ROWS, MUL)
#define TEXT_MM DT__PS_ROWS_TEXT("(R,R)->R", MM_ROWS, MUL)
#define TEXT_BMM DT__PS_ROWS_TEXT("(R,R)->R", BMM_ROWS, MUL)
#define TEXT_OUTER DT__PS_ROWS_TEXT("(R,R)->R", OUTER_ROWS, MUL)
#define TEXT_LINEAR DT__PS_ROWS_TEXT("(x, weight): (R,R)->R", LINEAR_ROWS, MUL) LINEAR_BIAS
#define TEXT_EINSUM DT__PS_ROWS_TEXT("(R,R)->R", EINSUM_ROWS, MUL) "; one operand: R->R" DT__PS_TEXT(P)
static const char *const kind_accepts[] = {
    [DT_KL_MATMUL] = TEXT_MATMUL, [DT_KL_MM] = TEXT_MM,         [DT_KL_BMM] = TEXT_BMM,
    [DT_KL_OUTER] = TEXT_OUTER,   [DT_KL_LINEAR] = TEXT_LINEAR, [DT_KL_EINSUM] = TEXT_EINSUM,
};
static const dt__ps_row matmul_rows[] = DT__PS_ROWS(MATMUL_ROWS), mm_rows[] = DT__PS_ROWS(MM_ROWS),
                        bmm_rows[] = DT__PS_ROWS(BMM_ROWS), outer_rows[] = DT__PS_ROWS(OUTER_ROWS),
                        linear_rows[] = DT__PS_ROWS(LINEAR_ROWS), einsum_rows[] = DT__PS_ROWS(EINSUM_ROWS);
static const uint32_t set_two[] = DT__PS_MASKS(MUL), set_one[] = DT__PS_MASKS(P);
static const dt__ps_row bias_rows[] = DT__PS_ROWS(BIAS_ROWS);
static const uint32_t set_bias[] = DT__PS_MASKS(BIAS);

static const dt__ps_row *kind_rows(int kind) {
    switch (kind) {
    case DT_KL_MM:
        return mm_rows;
    case DT_KL_BMM:
        return bmm_rows;
    case DT_KL_OUTER:
        return outer_rows;
    case DT_KL_LINEAR:
        return linear_rows;
    case DT_KL_EINSUM:
        return einsum_rows;
    default:
        return matmul_rows;
    }
}

/* ------------------------------------------------------------ plans */

static int new_label(dt__lplan *p, int64_t size) {
    /* Invariant: two operands and the output have at most 3 * DT_MAX_NDIM dims. */
    DT_ASSERT(p->nlab < DT_LINALG_MAX_LABELS);
    p->lsize[p->nlab] = size;
    p->opos[p->nlab] = -1;
    p->split[p->nlab] = 0;
    return p->nlab++;
}

static void shape_str(char *buf, size_t n, const dt__meta *m) {
    size_t len = 0;
    buf[0] = 0;
    for (int d = 0; d < m->ndim && len < n; d++)
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", d ? "x" : "", (long long)m->shape[d]);
}

/* torch.matmul's labels: batch dims broadcast from the right, then M, K / K, N. */
static dt_status matmul_plan(const char *name, const dt__meta *a, const dt__meta *b, dt__lplan *p) {
    int na = a->ndim, nb = b->ndim;
    if (na == 0 || nb == 0)
        return dt__error(DT_EOP,
                         "%s: both arguments to matmul need to be at least 1D, but they are %dD and %dD",
                         name, na, nb);
    int64_t ka = a->shape[na - 1], kb = nb == 1 ? b->shape[0] : b->shape[nb - 2];
    if (ka != kb) {
        if (na == 1 && nb == 1)
            return dt__error(
                DT_ESHAPE,
                "%s: inconsistent tensor size, expected tensor [%lld] and src [%lld] to have the same "
                "number of elements, but got %lld and %lld elements respectively",
                name, (long long)ka, (long long)kb, (long long)ka, (long long)kb);
        char sa[128], sb[128];
        shape_str(sa, sizeof sa, a);
        shape_str(sb, sizeof sb, b);
        return dt__error(DT_ESHAPE, "%s: mat1 and mat2 shapes cannot be multiplied (%s and %s)", name, sa,
                         sb);
    }
    memset(p, 0, sizeof *p);
    p->nops = 2;
    p->in[0] = a;
    p->in[1] = b;
    int ba = na > 2 ? na - 2 : 0, bb = nb > 2 ? nb - 2 : 0, nbatch = ba > bb ? ba : bb;
    for (int i = 0; i < nbatch; i++) {
        int da = i - (nbatch - ba), db = i - (nbatch - bb);
        int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
        if (sa != sb && sa != 1 && sb != 1)
            return dt__error(DT_ESHAPE,
                             "%s: The size of tensor a (%lld) must match the size of tensor b (%lld) at "
                             "non-singleton dimension %d",
                             name, (long long)sa, (long long)sb, i);
        int l = new_label(p, sa == 1 ? sb : sa);
        if (da >= 0)
            p->lab[0][da] = l;
        if (db >= 0)
            p->lab[1][db] = l;
        p->olab[p->nout++] = l;
    }
    int k = new_label(p, ka);
    if (na >= 2) {
        int m = new_label(p, a->shape[na - 2]);
        p->lab[0][na - 2] = m;
        p->olab[p->nout++] = m;
    }
    p->lab[0][na - 1] = k;
    if (nb >= 2) {
        int n = new_label(p, b->shape[nb - 1]);
        p->lab[1][nb - 2] = k;
        p->lab[1][nb - 1] = n;
        p->olab[p->nout++] = n;
    } else {
        p->lab[1][0] = k;
    }
    return DT_OK;
}

static dt_status outer_plan(const dt__meta *a, const dt__meta *b, dt__lplan *p) {
    if (a->ndim != 1)
        return dt__error(DT_EOP, "outer: Expected 1-D argument self, but got %d-D", a->ndim);
    if (b->ndim != 1)
        return dt__error(DT_EOP, "outer: Expected 1-D argument vec2, but got %d-D", b->ndim);
    memset(p, 0, sizeof *p);
    p->nops = 2;
    p->in[0] = a;
    p->in[1] = b;
    p->lab[0][0] = new_label(p, a->shape[0]);
    p->lab[1][0] = new_label(p, b->shape[0]);
    p->olab[0] = 0;
    p->olab[1] = 1;
    p->nout = 2;
    return DT_OK;
}

/* linear: x[..., K] with weight [N, K] (or [K]): out [..., N] (or [...]). */
static dt_status linear_plan(const dt__meta *x, const dt__meta *w, dt__lplan *p) {
    if (x->ndim == 0)
        return dt__error(DT_EOP, "linear: input must be at least 1-D, got a 0-d tensor");
    if (w->ndim == 0 || w->ndim > 2)
        return dt__error(DT_EOP,
                         "linear: weight must be 1-D or 2-D (t() expects a tensor with <= 2 dimensions), "
                         "but it is %dD",
                         w->ndim);
    int64_t k = x->shape[x->ndim - 1];
    if (w->shape[w->ndim - 1] != k) {
        int64_t rows = k ? dt__numel(x->ndim, x->shape) / k : 0;
        return dt__error(DT_ESHAPE,
                         "linear: mat1 and mat2 shapes cannot be multiplied (%lldx%lld and %lldx%lld)",
                         (long long)rows, (long long)k, (long long)w->shape[w->ndim - 1],
                         (long long)(w->ndim == 2 ? w->shape[0] : 1));
    }
    memset(p, 0, sizeof *p);
    p->nops = 2;
    p->in[0] = x;
    p->in[1] = w;
    for (int d = 0; d < x->ndim - 1; d++) {
        p->lab[0][d] = new_label(p, x->shape[d]);
        p->olab[p->nout++] = p->lab[0][d];
    }
    int kl = new_label(p, k);
    p->lab[0][x->ndim - 1] = kl;
    if (w->ndim == 2) {
        int n = new_label(p, w->shape[0]);
        p->lab[1][0] = n;
        p->lab[1][1] = kl;
        p->olab[p->nout++] = n;
    } else {
        p->lab[1][0] = kl;
    }
    return DT_OK;
}

/* The plan of a node kind over its operands' metas. */
static dt_status build_plan(int kind, const dt__meta *const *ms, int nops, const char *text, dt__lplan *p) {
    dt_status st;
    switch (kind) {
    case DT_KL_OUTER:
        st = outer_plan(ms[0], ms[1], p);
        break;
    case DT_KL_LINEAR:
        st = linear_plan(ms[0], ms[1], p);
        break;
    case DT_KL_EINSUM:
        return dt__einsum_plan(text, nops, ms, p);
    default:
        st = matmul_plan(kind_name(kind), ms[0], ms[1], p);
    }
    if (st != DT_OK)
        return st;
    for (int i = 0; i < p->nout; i++)
        p->opos[p->olab[i]] = i;
    return DT_OK;
}

/* ------------------------------------------------------- placements */

/* The row of a Shard(d) of operand j (see the rows above): its label's
 * class; *od the output dim of a kept label, the label of a contracted one
 * (the partial sum's key). */
static int shard_row(const dt__pctx *c, int j, int d, int *od) {
    const dt__lplan *p = c->fam;
    int l = p->lab[j][d], einsum = c->a->sub == DT_KL_EINSUM;
    if (c->in[j]->shape[d] != p->lsize[l])
        return L_BCAST;
    if (p->opos[l] < 0) {
        *od = l;
        return einsum ? L_SUMMED : L_K;
    }
    *od = p->opos[l];
    if (einsum)
        return L_KEPT;
    for (int e = 0; p->nops == 2 && e < p->in[1 - j]->ndim; e++)
        if (p->lab[1 - j][e] == l)
            return L_BATCH;
    return j == 0 ? L_M : L_N;
}

/* Fills out->pl (dt__ps_apply on the rows of `kind`) and p->split (the mesh
 * dims whose shards of a contracted label give a Partial output). A
 * PlacementError naming `name` on failure. */
static dt_status place(const char *name, int kind, dt__lplan *p, dt__meta *out) {
    dt__nattr a = {.sub = kind};
    dt__pctx c = {
        .op = DT_OP_LINALG, .a = &a, .nin = p->nops, .in = {p->in[0], p->in[1]}, .out = out, .fam = p};
    const dt__psig sig = {.partial = p->nops == 2 ? set_two : set_one,
                          .accepted = kind_accepts[kind],
                          .rows = kind_rows(kind),
                          .shard_row = shard_row,
                          .own_regions = 1}; /* contract() checks the regions, bias included */
    int bad;
    if (dt__ps_apply(name, &sig, &c, 0, out->pl, &bad) != DT_OK)
        return DT_EPLACEMENT;
    for (int l = 0; l < p->nlab; l++)
        p->split[l] = 0;
    for (int md = 0; md < out->mesh->ndim; md++) {
        if (out->pl[md].kind != P_)
            continue;
        for (int j = 0; j < p->nops; j++)
            if (p->in[j]->pl[md].kind == S_)
                p->split[p->lab[j][p->in[j]->pl[md].dim]] |= 1u << md;
    }
    return DT_OK;
}

/* The range of label l at the device at `coord` whose output region is
 * (os, ol): kept labels follow the output, contracted ones are split by the
 * mesh dims that shard them, in mesh-dim order like a nested shard. */
static void label_range(const dt__lplan *p, const dt_mesh *mesh, const int64_t *coord, const int64_t *os,
                        const int64_t *ol, int l, int64_t *s, int64_t *len) {
    if (p->opos[l] >= 0) {
        *s = os[p->opos[l]];
        *len = ol[p->opos[l]];
        return;
    }
    *s = 0;
    *len = p->lsize[l];
    for (int md = 0; md < mesh->ndim; md++) {
        if (!(p->split[l] & (1u << md)))
            continue;
        int64_t cs, cl;
        dt__chunk(*len, mesh->shape[md], coord[md], &cs, &cl);
        *s += cs;
        *len = cl;
    }
}

/* The region of operand j that the device needs. */
static void operand_region(const dt__lplan *p, int j, const dt_mesh *mesh, const int64_t *coord,
                           const int64_t *os, const int64_t *ol, int64_t *s, int64_t *len) {
    const dt__meta *m = p->in[j];
    for (int d = 0; d < m->ndim; d++) {
        int l = p->lab[j][d];
        if (m->shape[d] != p->lsize[l]) { /* broadcast size-1 dim */
            s[d] = 0;
            len[d] = m->shape[d];
        } else {
            label_range(p, mesh, coord, os, ol, l, &s[d], &len[d]);
        }
    }
}

static int within(const dt__meta *m, const int64_t *coord, const int64_t *s, const int64_t *l) {
    int64_t ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    dt__local_region(m, coord, ls, ll);
    for (int d = 0; d < m->ndim; d++)
        if (l[d] > 0 && (s[d] < ls[d] || s[d] + l[d] > ls[d] + ll[d]))
            return 0;
    return 1;
}

/* The region of an elementwise addend (the bias) for an output region. */
static void addend_region(const dt__meta *b, const dt__meta *out, const int64_t *os, const int64_t *ol,
                          int64_t *s, int64_t *len) {
    int off = out->ndim - b->ndim;
    for (int d = 0; d < b->ndim; d++) {
        if (b->shape[d] == 1) {
            s[d] = 0;
            len[d] = 1;
        } else {
            s[d] = os[d + off];
            len[d] = ol[d + off];
        }
    }
}

/* Whether the device at `coord` adds the bias: not where a Replicate bias
 * meets a Partial output off the first coordinate. */
static int adds_bias(const dt__meta *bias, const dt__meta *out, const int64_t *coord) {
    for (int md = 0; md < out->mesh->ndim; md++)
        if (out->pl[md].kind == P_ && bias->pl[md].kind == R_ && coord[md] != 0)
            return 0;
    return 1;
}

/* The row of a Shard(d) of the product (j = 0) or the bias; fam: the mesh
 * dim the rule runs on. */
static int bias_row(const dt__pctx *c, int j, int d, int *od) {
    const dt__meta *out = c->in[0];
    if (j == 0) {
        *od = d;
        return B_OUT;
    }
    *od = d + out->ndim - c->in[1]->ndim;
    if (c->in[1]->shape[d] != out->shape[*od])
        return B_BCAST;
    return out->pl[*(const int *)c->fam].kind == R_ ? B_WHOLE : B_KEEP;
}

/* The bias rule on every mesh dim of out (placed): a PlacementError listing
 * ms = (x, weight, bias) otherwise. */
static dt_status place_bias(const char *name, int kind, const dt__meta *const *ms, const dt__meta *out) {
    static const int pos[2] = {-1, 2};
    int md;
    dt__pctx c = {
        .nin = 2, .in = {out, ms[2]}, .out = out, .fam = &md, .err_in = ms, .err_nin = 3, .err_pos = pos};
    const dt__psig sig = {
        .partial = set_bias, .accepted = kind_accepts[kind], .rows = bias_rows, .shard_row = bias_row};
    for (md = 0; md < out->mesh->ndim; md++) {
        dt_placement res;
        if (dt__ps_rule_md(name, &sig, &c, md, &res) != DT_OK)
            return DT_EPLACEMENT;
    }
    return DT_OK;
}

/* ------------------------------------------------------------ client */

static dt_status check_operands(const char *name, dt_tensor *const *ts, int n) {
    return dt__check_operands(name, ts, n);
}

/* Shared by every linalg op: plan, output meta, placements, region checks,
 * then one node. `bias` only for linear. */
static dt_tensor *contract(int kind, dt_tensor *const *ts, int nops, dt_tensor *bias, const char *text,
                           dt_dtype dtype, int32_t flags) {
    const char *name = kind_name(kind);
    const dt__meta *ms[3];
    for (int i = 0; i < nops; i++)
        ms[i] = &ts[i]->v->meta;
    dt__lplan p;
    if (build_plan(kind, ms, nops, text, &p) != DT_OK)
        return NULL;
    dt__meta out;
    memset(&out, 0, sizeof out);
    out.mesh = ms[0]->mesh;
    out.dtype = dtype;
    out.ndim = p.nout;
    for (int i = 0; i < p.nout; i++)
        out.shape[i] = p.lsize[p.olab[i]];
    const dt__meta *bm = bias ? &bias->v->meta : NULL;
    int nin = nops;
    if (bm) {
        /* The bias broadcasts to the output like an addend. */
        if (bm->ndim > out.ndim) {
            dt__error(DT_ESHAPE, "linear: bias of %d dims does not broadcast to the output of %d dims",
                      bm->ndim, out.ndim);
            return NULL;
        }
        for (int d = 0; d < bm->ndim; d++) {
            int64_t bs = bm->shape[d], os = out.shape[d + out.ndim - bm->ndim];
            if (bs != 1 && bs != os) {
                dt__error(DT_ESHAPE,
                          "linear: the size of the bias (%lld) must match the size of the output (%lld) at "
                          "non-singleton dimension %d",
                          (long long)bs, (long long)os, d);
                return NULL;
            }
        }
        if (ms[1]->ndim == 1) {
            dt__error(DT_EOP, "linear: mat2 must be a matrix, got 1-D tensor (a 1-D weight takes no bias)");
            return NULL;
        }
        ms[nin++] = bm;
    }
    if (place(name, kind, &p, &out) != DT_OK)
        return NULL;
    if (bm && place_bias(name, kind, ms, &out) != DT_OK)
        return NULL;
    /* Every device's needed regions must lie in what it holds (nested
     * shards, and operands whose shards disagree with the plan). */
    const dt_mesh *mesh = out.mesh;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM], s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    for (int64_t i = 0; i < mesh->ndev; i++) {
        dt__mesh_coord(mesh, i, coord);
        dt__local_region(&out, coord, os, ol);
        int bad = -1;
        for (int j = 0; j < nops && bad < 0; j++) {
            operand_region(&p, j, mesh, coord, os, ol, s, l);
            if (!within(ms[j], coord, s, l))
                bad = j;
        }
        if (bad < 0 && bm && adds_bias(bm, &out, coord)) {
            addend_region(bm, &out, os, ol, s, l);
            if (!within(bm, coord, s, l))
                bad = nin - 1;
        }
        if (bad >= 0) {
            /* Without its shards the operand can be sliced to any region. */
            dt_placement fix[DT_MAX_MESH_NDIM];
            for (int md2 = 0; md2 < mesh->ndim; md2++)
                fix[md2] = ms[bad]->pl[md2].kind == S_ ? (dt_placement){R_, 0} : ms[bad]->pl[md2];
            dt__placement_error(name, ms, nin, 0, kind_accepts[kind], bad, fix);
            dt__error_append(
                " (the shards of several mesh dims do not line up on one index: each tensor must "
                "shard it on the same leading mesh dims)");
            return NULL;
        }
    }
    dt_tensor *t = dt__tensor_new(ts[0]->graph, &out);
    if (!t)
        return NULL;
    dt__node *n = dt__node_new(DT_OP_LINALG);
    if (n) {
        n->n_in = nin;
        for (int j = 0; j < nops; j++)
            n->in[j] = ts[j]->v;
        if (bm)
            n->in[2] = bias->v;
        n->out = t->v;
        n->a.sub = kind;
        n->a.text = text;
        n->a.flags = flags;
    }
    return dt__client_submit(t, n);
}

/* The ATen kernel torch's matrix product of a and b reaches (torch names it
 * in its "not implemented for 'Bool'" error): matmul folds the batch dims of
 * a into mm or mv when b has at most 2 dims, and uses bmm otherwise. */
static const char *product_kernel(int kind, const dt__meta *a, const dt__meta *b) {
    if (kind == DT_KL_BMM || (kind == DT_LINALG_MATMUL && b->ndim >= 3))
        return "bmm";
    if (kind == DT_LINALG_MATMUL && a->ndim == 1 && b->ndim == 1)
        return "dot";
    if ((kind == DT_LINALG_MATMUL && a->ndim >= 2 && b->ndim == 1) || (kind == DT_KL_LINEAR && b->ndim == 1))
        return "addmv_impl_cpu";
    return "addmm_impl_cpu_";
}

/* Same dtype, not bool: the checks torch's matrix products make. */
static dt_status same_dtype(int kind, const char *name, const dt__meta *a, const dt__meta *b) {
    if (a->dtype != b->dtype)
        return dt__error(DT_EOP, "%s: expected both tensors to have the same dtype, but got %s and %s", name,
                         dt_dtype_name(a->dtype), dt_dtype_name(b->dtype));
    if (a->dtype == DT_BOOL)
        return dt__error(DT_EUNSUPPORTED, "%s: \"%s\" not implemented for 'Bool'", name,
                         product_kernel(kind, a, b));
    return DT_OK;
}

static dt_tensor *binary_product(int kind, dt_tensor *a, dt_tensor *b) {
    dt_clear_error();
    const char *name = kind_name(kind);
    dt_tensor *ts[2] = {a, b};
    if (check_operands(name, ts, 2) != DT_OK)
        return NULL;
    const dt__meta *ma = &a->v->meta, *mb = &b->v->meta;
    if (kind == DT_KL_MM && (ma->ndim != 2 || mb->ndim != 2)) {
        dt__error(DT_EOP, "mm: %s must be a matrix", ma->ndim != 2 ? "self" : "mat2");
        return NULL;
    }
    if (kind == DT_KL_BMM) {
        if (ma->ndim != 3 || mb->ndim != 3) {
            dt__error(DT_EOP, "bmm: %s must be a 3D tensor", ma->ndim != 3 ? "batch1" : "batch2");
            return NULL;
        }
        if (mb->shape[0] != ma->shape[0] || mb->shape[1] != ma->shape[2]) {
            dt__error(
                DT_ESHAPE,
                "bmm: Expected size for first two dimensions of batch2 tensor to be: [%lld, %lld] but got: "
                "[%lld, %lld].",
                (long long)ma->shape[0], (long long)ma->shape[2], (long long)mb->shape[0],
                (long long)mb->shape[1]);
            return NULL;
        }
    }
    dt_dtype dtype;
    if (kind == DT_KL_OUTER) {
        dtype = dt__result_type2(ma, mb);
    } else {
        if (same_dtype(kind, name, ma, mb) != DT_OK)
            return NULL;
        dtype = ma->dtype;
    }
    return contract(kind, ts, 2, NULL, NULL, dtype, 0);
}

dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b) { return binary_product(DT_LINALG_MATMUL, a, b); }
dt_tensor *dt_mm(dt_tensor *a, dt_tensor *b) { return binary_product(DT_KL_MM, a, b); }
dt_tensor *dt_bmm(dt_tensor *a, dt_tensor *b) { return binary_product(DT_KL_BMM, a, b); }
dt_tensor *dt_outer(dt_tensor *a, dt_tensor *b) { return binary_product(DT_KL_OUTER, a, b); }

static dt_tensor *linear(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, int32_t flags) {
    dt_clear_error();
    dt_tensor *ts[3] = {x, weight, bias};
    if (check_operands("linear", ts, bias ? 3 : 2) != DT_OK)
        return NULL;
    const dt__meta *mx = &x->v->meta, *mw = &weight->v->meta;
    if (same_dtype(DT_KL_LINEAR, "linear", mx, mw) != DT_OK)
        return NULL;
    if (bias && bias->v->meta.dtype != mx->dtype) {
        dt__error(DT_EOP, "linear: self and mat2 must have the same dtype (bias is %s, input %s)",
                  dt_dtype_name(bias->v->meta.dtype), dt_dtype_name(mx->dtype));
        return NULL;
    }
    return contract(DT_KL_LINEAR, ts, 2, bias, NULL, mx->dtype, flags);
}

dt_tensor *dt_linear(dt_tensor *x, dt_tensor *weight, dt_tensor *bias) { return linear(x, weight, bias, 0); }
dt_tensor *dt_linear_param(dt_tensor *x, dt_tensor *weight, dt_tensor *bias) {
    return linear(x, weight, bias, DT_KF_LINEAR_PARAM);
}

dt_tensor *dt_einsum(const char *equation, int n, dt_tensor *const *operands) {
    dt_clear_error();
    if (!equation) {
        dt__error(DT_EINVAL, "einsum: equation is NULL");
        return NULL;
    }
    if (n < 1 || n > 2 || !operands) {
        dt__error(n > 2 ? DT_EUNSUPPORTED : DT_EINVAL,
                  "einsum: %d operands given; dtorch's einsum takes one or two (contract more in steps)", n);
        return NULL;
    }
    if (check_operands("einsum", operands, n) != DT_OK)
        return NULL;
    const dt__meta *ma = &operands[0]->v->meta;
    if (n == 2 && operands[1]->v->meta.dtype != ma->dtype) {
        dt__error(DT_EOP, "einsum: expected all operands to have the same dtype, but got %s and %s",
                  dt_dtype_name(ma->dtype), dt_dtype_name(operands[1]->v->meta.dtype));
        return NULL;
    }
    return contract(DT_KL_EINSUM, operands, n, NULL, dt__intern(equation), ma->dtype, 0);
}

/* ------------------------------------------------------------ lowering */

/* 1 when each mesh dim that splits a contracted label divides what the
 * mesh dims before it left of it: label_range's chunks then have one
 * length on every device and offsets linear in the coordinate. */
static int labels_even(const dt__lplan *p, const dt_mesh *mesh) {
    for (int l = 0; l < p->nlab; l++) {
        int64_t len = p->lsize[l];
        for (int md = 0; p->opos[l] < 0 && md < mesh->ndim; md++) {
            if (!(p->split[l] >> md & 1))
                continue;
            if (len % mesh->shape[md])
                return 0;
            len /= mesh->shape[md];
        }
    }
    return 1;
}

/* 1 when on every device of n's mesh each operand's region is the device's
 * whole block of it (no slice), so the kernel differs between devices only
 * by its blobs (dt__lw_bcast). Checked on dt__lw_probes' devices
 * (operand_region copies the output region's offsets, a broadcast dim's
 * whole size, or an even label's chunk). Arithmetic only: no record is
 * made. */
static int operands_local(const dt__lower *L, const dt__lplan *p, const dt__node *n, int nops) {
    const dt__meta *out = &n->out->meta;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
    int64_t s[DT_MAX_NDIM], l[DT_MAX_NDIM], ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    int64_t devs[DT__LW_BCAST_MAX_DEV];
    int np = dt__lw_probes(L, n, labels_even(p, out->mesh), devs);
    for (int i = 0; i < np; i++) {
        dt__mesh_coord(out->mesh, devs[i], coord);
        dt__local_region(out, coord, os, ol);
        for (int j = 0; j < nops; j++) {
            size_t bytes = sizeof(int64_t) * (size_t)n->in[j]->meta.ndim;
            operand_region(p, j, out->mesh, coord, os, ol, s, l);
            dt__local_region(&n->in[j]->meta, coord, ls, ll);
            if (memcmp(s, ls, bytes) || memcmp(l, ll, bytes))
                return 0;
        }
    }
    return 1;
}

dt_status dt__lower_linalg(dt__lower *L, dt__node *n) {
    const dt__meta *out = &n->out->meta;
    const dt_mesh *mesh = out->mesh;
    int kind = n->a.sub;
    int nops = kind == DT_KL_EINSUM ? n->n_in : 2;
    const dt__meta *ms[2] = {NULL, NULL};
    for (int j = 0; j < nops; j++)
        ms[j] = &n->in[j]->meta;
    dt__lplan p;
    dt__meta scratch = *out;
    /* The client validated the same plan; rebuilding it is deterministic. */
    DT_ASSERT(build_plan(kind, ms, nops, n->a.text, &p) == DT_OK);
    DT_ASSERT(place(kind_name(kind), kind, &p, &scratch) == DT_OK);
    dt__tval *bias = n->n_in == 3 ? n->in[2] : NULL;
    /* One record for every device where each operand is the device's own
     * block and no bias is added on some devices only (lower_bcast.c). */
    if (!bias && kind != DT_KL_EINSUM && dt__lw_bcast_wanted(L, n->out) && operands_local(L, &p, n, nops)) {
        dt__kattr a = {
            .sub = kind, .flags = n->a.flags & DT_KF_LINEAR_PARAM, .dtype = out->dtype, .text = n->a.text};
        if (dt__lw_bcast(L, n->out, DT_K_LINALG, &a, kind_name(kind), n->in, nops, 1))
            return L->status;
    }
    int64_t s[DT_MAX_NDIM], l[DT_MAX_NDIM];
    for (dt__lw_dev dev = DT__LW_EACH(n->out, DT_K_LINALG); dt__lw_each(L, &dev);) {
        dt__kernel *k = dev.k;
        for (int j = 0; j < nops; j++) {
            operand_region(&p, j, mesh, dev.coord, dev.start, dev.len, s, l);
            k->in[j] = dt__lw_region(L, n->in[j], dev.idx, dev.coord, s, l);
        }
        k->n_in = nops;
        if (bias && adds_bias(&bias->meta, out, dev.coord)) {
            addend_region(&bias->meta, out, dev.start, dev.len, s, l);
            k->in[k->n_in++] = dt__lw_region(L, bias, dev.idx, dev.coord, s, l);
        }
        k->attr.sub = kind;
        k->attr.flags = n->a.flags & DT_KF_LINEAR_PARAM;
        k->attr.dtype = out->dtype;
        k->attr.text = n->a.text;
        k->opname = kind_name(kind);
        dt__lw_each_push(L, &dev);
    }
    return L->status;
}

/* ------------------------------------------------------------ registry */

const dt_op_doc dt__docs_linalg[] = {
    {"matmul", "linalg", TEXT_MATMUL, 0},
    {"mm", "linalg", TEXT_MM, 0},
    {"bmm", "linalg", TEXT_BMM, 0},
    {"outer", "linalg", TEXT_OUTER, 0},
    {"linear", "linalg", TEXT_LINEAR, 0},
    {"einsum", "linalg", TEXT_EINSUM, 0},
    {NULL, NULL, NULL, 0},
};

/* ------------------------------------------------------ segmented dims */

/* The linalg seg rule (the LINALG row's; core/records/seg.h): linear, or
 * matmul by a matrix, with the dim a batch or row dim of the first operand
 * and the others without it. */
int dt__seg_rule_linalg(const dt__node *n, dt__meta *out) {
    const dt__meta *in = &n->in[0]->meta;
    dt__seg g = in->seg;
    if (!g.n || g.dim >= in->ndim - 1 || (n->a.sub != DT_KL_LINEAR && n->a.sub != DT_KL_MATMUL) ||
        n->in[1]->meta.ndim != 2 || out->ndim != in->ndim)
        return DT__SEG_REGULAR;
    for (int j = 1; j < n->n_in; j++)
        if (n->in[j]->meta.seg.n)
            return DT__SEG_REGULAR;
    out->seg = g; /* the dim keeps its number: so must its Shards */
    return dt__seg_same_sharding(in, out) ? DT__SEG_PASS : DT__SEG_REGULAR;
}
