/*
 * Shared helpers of the C tests: a CHECK that counts failures and prints the
 * library's last error, placement constructors and metadata checks. Each test
 * executable includes this once (static functions; unused ones are marked).
 */
#ifndef DT_TEST_UTIL_H
#define DT_TEST_UTIL_H

#include <stdio.h>

#include "dtorch/dtorch.h"

static int failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond,   \
                    dt_last_error());                                                              \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Equal integers; prints both operands when they differ. */
#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long va_ = (long long)(a), vb_ = (long long)(b);                                      \
        if (va_ != vb_) {                                                                          \
            fprintf(stderr, "%s:%d: CHECK_EQ_INT(%s, %s) failed: %lld != %lld; last error: %s\n",  \
                    __FILE__, __LINE__, #a, #b, va_, vb_, dt_last_error());                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

/* Equal floats, bit for bit (both NaN counts as equal); prints both. */
#define CHECK_EQ_FLOAT(a, b)                                                                       \
    do {                                                                                           \
        double va_ = (double)(a), vb_ = (double)(b);                                               \
        if (!(va_ == vb_ || (va_ != va_ && vb_ != vb_))) {                                         \
            fprintf(stderr, "%s:%d: CHECK_EQ_FLOAT(%s, %s) failed: %.17g != %.17g; last error: %s\n", \
                    __FILE__, __LINE__, #a, #b, va_, vb_, dt_last_error());                        \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

__attribute__((unused)) static dt_placement R(void) { return (dt_placement){DT_PLACEMENT_REPLICATE, 0}; }
__attribute__((unused)) static dt_placement S(int d) { return (dt_placement){DT_PLACEMENT_SHARD, d}; }
__attribute__((unused)) static dt_placement P(void) { return (dt_placement){DT_PLACEMENT_PARTIAL, 0}; }

/* Equal placements (the dim matters only for Shard). */
__attribute__((unused)) static int same(dt_placement a, dt_placement b) {
    return a.kind == b.kind && (a.kind != DT_PLACEMENT_SHARD || a.dim == b.dim);
}

/* t has this dtype, shape and (1-D mesh) placement. */
__attribute__((unused)) static void check_meta(dt_tensor *t, dt_dtype dt, int ndim, const int64_t *shape,
                                               dt_placement p) {
    CHECK(t != NULL);
    if (!t)
        return;
    CHECK(dt_tensor_dtype(t) == dt);
    CHECK(dt_tensor_ndim(t) == ndim);
    for (int d = 0; d < ndim && d < dt_tensor_ndim(t); d++)
        CHECK(dt_tensor_shape(t)[d] == shape[d]);
    CHECK(same(dt_tensor_placements(t)[0], p));
}

#endif /* DT_TEST_UTIL_H */
