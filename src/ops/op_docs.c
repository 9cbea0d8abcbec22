/*
 * The operator registry: each family file lists its user-facing operators in
 * a dt__docs_<family> array ended by a {NULL} row (a row without signatures
 * is a sub-op with no operator of its own, such as div's rounding mode, and
 * is skipped); this file strings the families together. Read-only static data: any thread.
 */
#include <stddef.h>

#include "ops/ops.h"

static const dt_op_doc *const families[] = {
    dt__docs_creation, dt__docs_elementwise, dt__docs_reduce,    dt__docs_linalg, dt__docs_views,
    dt__docs_nn,       dt__docs_dist,        dt__docs_sort_scan, dt__docs_pool,   dt__docs_masked_scatter,
};

int dt_op_doc_count(void) {
    int n = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const dt_op_doc *d = families[f]; d->name; d++)
            n += d->signatures != NULL;
    return n;
}

const dt_op_doc *dt_op_doc_get(int i) {
    if (i < 0)
        return NULL;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++)
        for (const dt_op_doc *d = families[f]; d->name; d++)
            if (d->signatures && i-- == 0)
                return d;
    return NULL;
}
