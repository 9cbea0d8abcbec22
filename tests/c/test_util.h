/*
 * Shared helpers of the C tests: a CHECK that counts failures and prints the
 * library's last error, placement constructors and metadata checks. Each test
 * executable includes this once (static functions; unused ones are marked).
 */
#ifndef DT_TEST_UTIL_H
#define DT_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

#include "dtorch/dtorch.h"

static int failures;

#define CHECK(cond)                                                                                          \
    do {                                                                                                     \
        if (!(cond)) {                                                                                       \
            fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #cond,          \
                    dt_last_error());                                                                        \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* Compare two integers (as long long) and print both operands on failure,
 * as libuv's ASSERT_EQ does. */
#define CHECK_EQ(a, b)                                                                                       \
    do {                                                                                                     \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                                      \
        if (check_a_ != check_b_) {                                                                          \
            fprintf(stderr, "%s:%d: CHECK_EQ(%s, %s) failed: %lld != %lld; last error: %s\n", __FILE__,      \
                    __LINE__, #a, #b, check_a_, check_b_, dt_last_error());                                  \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)
/* Compare two C strings (NULL allowed) and print both on failure. */
#define CHECK_STREQ(a, b)                                                                                    \
    do {                                                                                                     \
        const char *check_a_ = (a), *check_b_ = (b);                                                         \
        if (!check_a_ || !check_b_ ? check_a_ != check_b_ : strcmp(check_a_, check_b_) != 0) {               \
            fprintf(stderr, "%s:%d: CHECK_STREQ(%s, %s) failed: \"%s\" != \"%s\"\n", __FILE__, __LINE__, #a, \
                    #b, check_a_ ? check_a_ : "(null)", check_b_ ? check_b_ : "(null)");                     \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* Compare two floating-point values exactly and print both on failure. */
#define CHECK_FEQ(a, b)                                                                                      \
    do {                                                                                                     \
        double check_a_ = (double)(a), check_b_ = (double)(b);                                               \
        if (check_a_ != check_b_) {                                                                          \
            fprintf(stderr, "%s:%d: CHECK_FEQ(%s, %s) failed: %.17g != %.17g\n", __FILE__, __LINE__, #a, #b, \
                    check_a_, check_b_);                                                                     \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* Reads t (waits up to a minute) into out (n floats); the read's status. */
__attribute__((unused)) static dt_status read_floats(dt_tensor *t, float *out, size_t n) {
    dt_future *f = t ? dt_tensor_fetch(t) : NULL;
    if (!f)
        return t ? dt_last_status() : DT_EINVAL;
    dt_status st = dt_future_wait(f, 60000);
    if (st == DT_OK)
        st = dt_future_read(f, out, n * sizeof(float));
    dt_future_release(f);
    return st;
}

/* Counts a failure (and prints the first differing element) unless got == want exactly. */
__attribute__((unused)) static void check_floats(const char *what, const float *got, const float *want,
                                                 size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "%s, element %zu: %.9g, want %.9g\n", what, i, got[i], want[i]);
            failures++;
            return;
        }
}

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
