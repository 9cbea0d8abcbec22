/*
 * The placement-signature engine and the checks the operator families share
 * (core/client/placement.h).
 *
 * Threads: any; no state.
 */
#include <string.h>

#include "core/client/graph.h"
#include "core/client/placement.h"
#include "core/client/tensor.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"

#define R_ DT_PLACEMENT_REPLICATE
#define S_ DT_PLACEMENT_SHARD
#define P_ DT_PLACEMENT_PARTIAL

/* ------------------------------------------------------- shared checks */

dt_status dt__check_operands(const char *name, dt_tensor *const *ins, int nin) {
    for (int j = 0; j < nin; j++) {
        if (!dt__tensor_ok(ins[j]))
            return dt__error(DT_EINVAL, "%s: tensor argument %d is %s", name, j, dt__handle_bad(ins[j]));
        if (ins[j]->graph != ins[0]->graph)
            return dt__error(DT_EINVAL, "%s: the tensors belong to different graphs", name);
        if (!dt_mesh_equal(ins[j]->v->meta.mesh, ins[0]->v->meta.mesh))
            return dt__error(DT_EINVAL,
                             "%s: the tensors are on different device meshes; move one with "
                             "redistribute(device_mesh=...)",
                             name);
    }
    return DT_OK;
}

dt_status dt__wrap_dim(const char *op, int64_t dim, int ndim, int *out) {
    int n = ndim > 0 ? ndim : 1;
    if (dim < -n || dim >= n)
        return dt__error(DT_EINDEX,
                         "%s(): Dimension out of range (expected to be in range of [%d, %d], but got %lld)",
                         op, -n, n - 1, (long long)dim);
    *out = (int)(dim < 0 ? dim + n : dim);
    return DT_OK;
}

/* -------------------------------------------------------------- engine */

int dt__ps_broadcast_map(const dt__pctx *c, int j, int d) {
    const dt__meta *m = c->in[j], *out = c->out;
    int od = d + out->ndim - m->ndim;
    return m->shape[d] == 1 && out->shape[od] != 1 ? DT__PS_REJECT : od;
}

/* The outcome of row `id` (od: the output dim shard_row gave). */
static int row_outcome(const dt__psig *s, int id, int od, int *key) {
    for (const dt__ps_row *r = s->rows; id >= 0 && r->text; r++) {
        if (r->id != id)
            continue;
        if (r->to == DT__PS_SHARD)
            return od >= 0 ? od : DT__PS_REJECT;
        if (r->to == DT__PS_PARTIAL)
            *key = od;
        return r->to;
    }
    return DT__PS_REJECT;
}

int dt__ps_shard_outcome(const dt__psig *s, const dt__pctx *c, int j, int d, int *key) {
    *key = -1;
    if (!s->rows)
        return s->shard_map(c, j, d);
    int od = -1;
    int id = s->shard_row(c, j, d, &od);
    return row_outcome(s, id, od, key);
}

int dt__ps_shard_outcome_at(const dt__psig *s, const dt__pctx *c, int j, int md, int d, int *key) {
    if (!s->shard_row_at)
        return dt__ps_shard_outcome(s, c, j, d, key);
    *key = -1;
    int od = -1;
    int id = s->shard_row_at(c, j, md, d, &od);
    return row_outcome(s, id, od, key);
}

void dt__ps_needed(const dt__psig *s, const dt__pctx *c, int j, const int64_t *coord, const int64_t *os,
                   const int64_t *ol, int64_t *st, int64_t *l) {
    if (s->needed) {
        s->needed(c, j, coord, os, ol, st, l);
        return;
    }
    /* Invariant: signatures without `needed` keep the rank (placement.h). */
    DT_ASSERT(c->in[j]->ndim == c->out->ndim);
    memcpy(st, os, sizeof(int64_t) * (size_t)c->out->ndim);
    memcpy(l, ol, sizeof(int64_t) * (size_t)c->out->ndim);
}

/* reject() where c->err_in lists the call's inputs: input j is shown as
 * err_in[err_pos[j]], whose placements the fix starts from. */
static dt_status reject_listed(const char *name, const dt__psig *s, const dt__pctx *c, int md, int j) {
    int at = c->err_pos[j];
    if (at < 0)
        return dt__placement_error(name, c->err_in, c->err_nin, md, s->accepted, -1, NULL);
    dt_placement fix[DT_MAX_MESH_NDIM];
    memcpy(fix, c->err_in[at]->pl, sizeof fix);
    fix[md] = (dt_placement){R_, 0};
    return dt__placement_error(name, c->err_in, c->err_nin, md, s->accepted, at, fix);
}

/* PlacementError with the fix "make input j Replicate on mesh dim md". */
static dt_status reject(const char *name, const dt__psig *s, const dt__pctx *c, int md, int j) {
    if (c->err_in)
        return reject_listed(name, s, c, md, j);
    dt_placement fix[DT_MAX_MESH_NDIM];
    memcpy(fix, c->in[j]->pl, sizeof fix);
    fix[md] = (dt_placement){R_, 0};
    return dt__placement_error(name, c->in, c->nin, md, s->accepted, j, fix);
}

static int accepts_partial(const dt__psig *s, uint32_t set) {
    for (const uint32_t *p = s->partial; p && *p; p++)
        if (*p == set)
            return 1;
    return 0;
}

/* The output placement on mesh dim md, or a PlacementError. */
static dt_status mesh_dim_rule(const char *name, const dt__psig *s, const dt__pctx *c, int md,
                               dt_placement *res) {
    int out_dim = -1, shard_in = -1, first_p = -1, sum_key = -1, one_key = 1;
    uint32_t pset = 0, from_p = 0, nonrep = 0;
    if (s->mesh_dim_check) {
        int j = s->mesh_dim_check(c, md);
        if (j >= 0)
            return reject(name, s, c, md, j);
    }
    for (int j = 0; j < c->nin; j++) {
        dt_placement p = c->in[j]->pl[md];
        if (p.kind == R_)
            continue;
        int key = -1;
        int od = p.kind == P_ ? DT__PS_PARTIAL : dt__ps_shard_outcome_at(s, c, j, md, p.dim, &key);
        if (od == DT__PS_REJECT)
            return reject(name, s, c, md, j);
        if (od == DT__PS_GATHER)
            continue; /* whole once the op gathers it */
        nonrep |= 1u << j;
        if (p.kind == P_)
            from_p |= 1u << j;
        if (od == DT__PS_PARTIAL) {
            /* Shards summed over one key (a contracted index) sum as one. */
            if (p.kind == S_) {
                one_key &= key >= 0 && (sum_key < 0 || key == sum_key);
                sum_key = key;
            }
            pset |= 1u << j;
            if (first_p < 0)
                first_p = j;
            continue;
        }
        if (out_dim >= 0 && od != out_dim)
            return reject(name, s, c, md, j);
        out_dim = od;
        shard_in = j;
    }
    if (pset) {
        /* A partial sum stays exact only where the op is linear in exactly
         * these inputs and every other input is whole on this mesh dim. */
        int shard_sum = !from_p && ((pset & (pset - 1)) == 0 || one_key);
        if (!shard_sum && !accepts_partial(s, pset))
            return reject(name, s, c, md, first_p);
        if (nonrep != pset)
            return reject(name, s, c, md, shard_in);
        *res = (dt_placement){P_, 0};
    } else if (out_dim >= 0) {
        *res = (dt_placement){S_, out_dim};
    } else {
        *res = (dt_placement){R_, 0};
    }
    return DT_OK;
}

dt_status dt__ps_rule_md(const char *name, const dt__psig *s, const dt__pctx *c, int md, dt_placement *res) {
    return mesh_dim_rule(name, s, c, md, res);
}

/* The first input a device does not hold the needed region of, or -1. */
static int misaligned_input(const dt__psig *s, const dt__pctx *c) {
    const dt_mesh *mesh = c->out->mesh;
    int64_t coord[DT_MAX_MESH_NDIM], os[DT_MAX_NDIM], ol[DT_MAX_NDIM];
    int64_t ns[DT_MAX_NDIM], nl[DT_MAX_NDIM], ls[DT_MAX_NDIM], ll[DT_MAX_NDIM];
    for (int64_t idx = 0; idx < mesh->ndev; idx++) {
        dt__mesh_coord(mesh, idx, coord);
        dt__local_region(c->out, coord, os, ol);
        for (int j = 0; j < c->nin; j++) {
            dt__ps_needed(s, c, j, coord, os, ol, ns, nl);
            dt__local_region(c->in[j], coord, ls, ll);
            for (int d = 0; d < c->in[j]->ndim; d++)
                if (nl[d] > 0 && (ns[d] < ls[d] || ns[d] + nl[d] > ls[d] + ll[d]))
                    return j;
        }
    }
    return -1;
}

dt_status dt__ps_apply(const char *name, const dt__psig *s, const dt__pctx *c, int check_regions,
                       dt_placement *out_pl, int *bad_input) {
    /* The caller's output meta is read by shard_map and the region check. */
    const dt_mesh *mesh = c->out->mesh;
    *bad_input = -1;
    for (int md = 0; md < mesh->ndim; md++)
        if (mesh_dim_rule(name, s, c, md, &out_pl[md]) != DT_OK)
            return DT_EPLACEMENT;
    if (mesh->ndev <= 1)
        return DT_OK;
    int nested = dt__has_nested_shards(c->out);
    for (int j = 0; j < c->nin && !nested; j++)
        nested = dt__has_nested_shards(c->in[j]);
    if (s->own_regions || (!check_regions && !nested))
        return DT_OK;
    int j = misaligned_input(s, c);
    if (j < 0)
        return DT_OK;
    *bad_input = j;
    return DT_EPLACEMENT; /* the family words the message (its fix) */
}
