/*
 * A collective's description as lowering plans it (coll.h): made by the
 * controller, turned into each rank's kernel record (dt__coll_krec,
 * kernel_rec.c) or one shared record (core/controller/lower_bcast.c) and
 * freed. One allocation: the description, then its per-rank arrays.
 */
#include <string.h>

#include "core/records/coll.h"

dt__coll *dt__coll_new(dt_device_type type, int kind, int n, int ndim, dt_dtype dtype) {
    size_t hdr = (sizeof(dt__coll) + 7) / 8 * 8;
    dt__coll *c = dt__calloc(1, hdr + (size_t)n * (sizeof *c->shapes + 2 * sizeof *c->starts));
    if (!c)
        return NULL;
    c->shapes = (int64_t(*)[DT_MAX_NDIM])((uint8_t *)c + hdr);
    c->starts = (int64_t *)(c->shapes + n);
    c->lens = c->starts + n;
    c->type = type;
    c->kind = kind;
    c->n = n;
    c->ndim = ndim;
    c->dtype = dtype;
    return c;
}

void dt__coll_free(dt__coll *c) { dt__free(c); }

dt__coll *dt__coll_on(dt__coll_buf *b, dt_device_type type, int kind, int n, int ndim, dt_dtype dtype) {
    /* Invariant: callers keep to the buffer's ranks. */
    DT_ASSERT(n <= DT__COLL_BUF);
    memset(&b->c, 0, sizeof b->c);
    memset(b->shapes, 0, sizeof b->shapes[0] * (size_t)n);
    memset(b->starts, 0, sizeof b->starts[0] * (size_t)n);
    memset(b->lens, 0, sizeof b->lens[0] * (size_t)n);
    b->c.shapes = b->shapes;
    b->c.starts = b->starts;
    b->c.lens = b->lens;
    b->c.type = type;
    b->c.kind = kind;
    b->c.n = n;
    b->c.ndim = ndim;
    b->c.dtype = dtype;
    return &b->c;
}

int dt__coll_same(const dt__coll *a, const dt__coll *b) {
    if (a->kind != b->kind || a->n != b->n || a->ndim != b->ndim || a->dim_a != b->dim_a ||
        a->dim_b != b->dim_b || a->type != b->type || a->dtype != b->dtype)
        return 0;
    size_t n = (size_t)a->n;
    for (size_t r = 0; r < n; r++)
        if (memcmp(a->shapes[r], b->shapes[r], sizeof(int64_t) * (size_t)a->ndim))
            return 0;
    return !memcmp(a->starts, b->starts, n * sizeof *a->starts) &&
           !memcmp(a->lens, b->lens, n * sizeof *a->lens);
}
