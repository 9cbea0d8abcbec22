/*
 * Segmented dims (seg.h, dt__seg; docs/decisions.md "segmented cat"): the
 * descriptor arithmetic. The regions each device holds in the storage order
 * (dt__seg_range, dt__seg_piece) and how a redistribute step moves them
 * (dt__seg_step), which meta.c's dt__local_region and the redistribute
 * planner use; and the helpers the ops' seg rules and the gate
 * (core/client/segment.c) decide with.
 *
 * Threads: any thread; every function is pure.
 */
#include <string.h>

#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/seg.h"

/* ------------------------------------------------------------ regions */

int dt__seg_shards(const dt__meta *m, int md, int d) {
    return m->pl[md].kind == DT_PLACEMENT_SHARD && m->pl[md].dim == d;
}

unsigned dt__seg_mask(const dt__seg *g) {
    unsigned mask = 0;
    for (int i = 0; i < g->nmd; i++)
        mask |= 1u << g->mds[i];
    return mask;
}

unsigned dt__seg_sharding(const dt__meta *m) {
    unsigned mask = 0;
    for (int i = 0; i < m->seg.nmd; i++)
        if (dt__seg_shards(m, m->seg.mds[i], m->seg.dim))
            mask |= 1u << m->seg.mds[i];
    return mask;
}

int64_t dt__seg_piece(const dt__meta *m, int s, const int64_t *coord) {
    unsigned mask = dt__seg_mask(&m->seg);
    int64_t len = m->seg.len[s], st;
    for (int md = 0; md < m->mesh->ndim; md++) /* nested: ascending mesh dims */
        if ((mask >> md) & 1)
            dt__chunk(len, m->mesh->shape[md], coord[md], &st, &len);
    return len;
}

/* The block B(c): c's pieces of every segment. */
static int64_t block_len(const dt__meta *m, const int64_t *c) {
    int64_t n = 0;
    for (int s = 0; s < m->seg.n; s++)
        n += dt__seg_piece(m, s, c);
    return n;
}

/* Grid order: the sharding mesh dims first, then the others, each in
 * descriptor order (the canonical form already is). */
static int grid_order(const dt__meta *m, int *ord) {
    unsigned sh = dt__seg_sharding(m);
    int k = 0, p;
    for (int i = 0; i < m->seg.nmd; i++)
        if ((sh >> m->seg.mds[i]) & 1)
            ord[k++] = m->seg.mds[i];
    p = k;
    for (int i = 0; i < m->seg.nmd; i++)
        if (!((sh >> m->seg.mds[i]) & 1))
            ord[k++] = m->seg.mds[i];
    return p;
}

void dt__seg_range(const dt__meta *m, const int64_t *coord, int64_t *start, int64_t *len) {
    int ord[DT_MAX_MESH_NDIM], k = m->seg.nmd, p = grid_order(m, ord), seen = 0;
    int64_t c[DT_MAX_MESH_NDIM];
    memcpy(c, coord, sizeof(int64_t) * (size_t)m->mesh->ndim);
    for (int i = 0; i < k; i++)
        c[ord[i]] = 0;
    *start = *len = 0;
    /* Every block in storage order (an odometer, ord[k-1] fastest); the
     * device's are the contiguous run matching it on the sharding dims. */
    for (;;) {
        int match = 1;
        for (int j = 0; j < p; j++)
            match &= c[ord[j]] == coord[ord[j]];
        int64_t b = block_len(m, c);
        if (match)
            *len += b, seen = 1;
        else if (!seen)
            *start += b;
        int i = k - 1;
        while (i >= 0 && ++c[ord[i]] == m->mesh->shape[ord[i]])
            c[ord[i--]] = 0;
        if (i < 0)
            return;
    }
}

/* The canonical descriptor for m's placements: the sharding mesh dims
 * ascending, then `gathered` (-1: none), then the other ones in their
 * present order. */
static void canonical(dt__meta *m, int gathered) {
    dt__seg *g = &m->seg;
    unsigned sh = dt__seg_sharding(m);
    int8_t mds[DT_MAX_MESH_NDIM];
    int k = 0;
    for (int md = 0; md < m->mesh->ndim; md++)
        if ((sh >> md) & 1)
            mds[k++] = (int8_t)md;
    if (gathered >= 0)
        mds[k++] = (int8_t)gathered;
    for (int i = 0; i < g->nmd; i++)
        if (!((sh >> g->mds[i]) & 1) && g->mds[i] != gathered)
            mds[k++] = g->mds[i];
    memcpy(g->mds, mds, (size_t)k);
}

void dt__seg_step(dt__meta *m, int md, dt_placement to) {
    int on = m->seg.n && ((dt__seg_mask(&m->seg) >> md) & 1), was = on && dt__seg_shards(m, md, m->seg.dim);
    m->pl[md] = to;
    if (on && was != dt__seg_shards(m, md, m->seg.dim))
        canonical(m, was ? md : -1);
}

int dt__seg_redistributes(const dt__meta *in, const dt__meta *out) {
    const dt__seg *g = &in->seg;
    unsigned mask = dt__seg_mask(g), a = dt__seg_sharding(in), b = 0;
    for (int md = 0; md < in->mesh->ndim; md++) {
        if (!dt__seg_shards(out, md, g->dim))
            continue;
        if (!((mask >> md) & 1))
            return 0; /* a mesh dim outside the grid */
        b |= 1u << md;
    }
    unsigned diff = a ^ b;
    if (diff & (diff - 1))
        return 0; /* more than one change: the order of the steps would matter */
    if (diff & b) /* starts to shard: it must split the held range in blocks */
        for (int i = 0; i < g->nmd; i++)
            if (!((a >> g->mds[i]) & 1))
                return (1u << g->mds[i]) == diff;
    return 1;
}

/* ------------------------------------------------------------ rules */

int dt__seg_same(const dt__seg *a, const dt__seg *b) {
    return a->n == b->n && a->nmd == b->nmd && memcmp(a->mds, b->mds, (size_t)a->nmd) == 0 &&
           memcmp(a->len, b->len, sizeof(int64_t) * (size_t)a->n) == 0;
}

int dt__seg_reshape_dim(const dt__meta *in, const dt__meta *out, int d) {
    int64_t before = dt__numel(d, in->shape), p = 1;
    for (int o = 0; o < out->ndim; p *= out->shape[o], o++)
        if (p == before && out->shape[o] == in->shape[d])
            return o;
    return -1;
}

int dt__seg_layout_ok(const dt__meta *out) {
    unsigned mask = dt__seg_mask(&out->seg);
    for (int m = 0; m < out->mesh->ndim; m++)
        if (!((mask >> m) & 1) && dt__seg_shards(out, m, out->seg.dim))
            return 0;
    dt__meta c = *out;
    canonical(&c, -1);
    return memcmp(c.seg.mds, out->seg.mds, (size_t)out->seg.nmd) == 0;
}

int dt__seg_same_sharding(const dt__meta *in, const dt__meta *out) {
    return dt__seg_sharding(in) == dt__seg_sharding(out);
}
