/*
 * A collective's description as lowering plans it (coll.h): made by the
 * controller, turned into each rank's kernel record (dt__coll_krec,
 * kernel_rec.c) and freed.
 */
#include "core/records/coll.h"

dt__coll *dt__coll_new(dt_device_type type, int kind, int n, int ndim, dt_dtype dtype) {
    dt__coll *c = dt__calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->shapes = dt__calloc((size_t)n, sizeof *c->shapes);
    c->starts = dt__calloc((size_t)n, sizeof *c->starts);
    c->lens = dt__calloc((size_t)n, sizeof *c->lens);
    if (!c->shapes || !c->starts || !c->lens) {
        dt__coll_free(c);
        return NULL;
    }
    c->type = type;
    c->kind = kind;
    c->n = n;
    c->ndim = ndim;
    c->dtype = dtype;
    return c;
}

void dt__coll_free(dt__coll *c) {
    if (!c)
        return;
    dt__free(c->shapes);
    dt__free(c->starts);
    dt__free(c->lens);
    dt__free(c);
}
