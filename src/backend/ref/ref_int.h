/*
 * The ref backend's tensors and the helpers its kernels share (see
 * ref_backend.c): the impl layout, element loads and stores with dtype
 * conversion, tensor construction and donation, and strided walks. Internal
 * to src/backend/ref/; the functions are static inline so each kernel file
 * can use them without a second exported name for each.
 */
#ifndef DT_REF_INTERNAL_H
#define DT_REF_INTERNAL_H

#include "backend/backend.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A reference-counted element buffer: one per impl, except that an in-place
 * result shares its input's. */
typedef struct ref_buf {
    atomic_int refs;
    _Alignas(16) unsigned char data[];
} ref_buf;

typedef struct ref_tensor {
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    int64_t numel;
    void *data;   /* numel elements, row-major; never NULL (at least one byte) */
    ref_buf *buf; /* owns data; NULL for the stack scalars of scalar_init */
} ref_tensor;

static const char *const dtype_names[] = {"bool",  "uint8",   "int8",     "int16",   "int32",
                                          "int64", "float16", "bfloat16", "float32", "float64"};
_Static_assert(sizeof dtype_names / sizeof dtype_names[0] == DT_DTYPE_COUNT, "one name per dtype");

static inline const char *dtname(int dt) {
    return dt >= 0 && dt < DT_DTYPE_COUNT ? dtype_names[dt] : "invalid";
}

/* Bytes per element of the storage dtypes; 0 means "not stored by ref". */
static inline size_t esize(int dt) {
    switch (dt) {
    case DT_BOOL:
        return 1;
    case DT_INT32:
    case DT_FLOAT32:
        return 4;
    case DT_INT64:
    case DT_FLOAT64:
        return 8;
    default:
        return 0;
    }
}
static inline int is_float(int dt) { return dt == DT_FLOAT32 || dt == DT_FLOAT64; }
static inline int is_arith(int dt) { return dt != DT_BOOL && esize(dt) != 0; }

/* Lets the compiler check the format strings of fail(). */
#if defined(__GNUC__)
#define REF_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define REF_PRINTF(f, a)
#endif
static inline dt_status fail(char *err, size_t errlen, dt_status st, const char *fmt, ...) REF_PRINTF(4, 5);
static inline dt_status fail(char *err, size_t errlen, dt_status st, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* "[2,3]" for messages. A struct so it can be returned by value and used in
 * an argument list: the array lives until the end of the full expression. */
typedef struct shape_str {
    char s[DT_MAX_NDIM * 22 + 3];
} shape_str;
static inline shape_str fmt_shape(int ndim, const int64_t *shape) {
    shape_str r;
    size_t n = 0;
    r.s[n++] = '[';
    for (int d = 0; d < ndim && d < DT_MAX_NDIM; d++)
        n += (size_t)snprintf(r.s + n, sizeof r.s - n, d ? ",%lld" : "%lld", (long long)shape[d]);
    snprintf(r.s + n, sizeof r.s - n, "]");
    return r;
}
#define SHAPE(t) fmt_shape((t)->ndim, (t)->shape).s

/* ------------------------------------------------------ element access */

/* Float to int64 as a cast, but defined for NaN and out-of-range values
 * (a plain C cast is undefined there and UBSan would flag it). */
static inline int64_t f2i(double v) {
    if (v != v)
        return 0;
    if (v >= 9223372036854775808.0)
        return INT64_MAX;
    if (v < -9223372036854775808.0)
        return INT64_MIN;
    return (int64_t)v;
}

static inline int64_t ld_i(const ref_tensor *t, int64_t i) {
    switch (t->dtype) {
    case DT_BOOL:
        return ((const uint8_t *)t->data)[i] != 0;
    case DT_INT32:
        return ((const int32_t *)t->data)[i];
    case DT_INT64:
        return ((const int64_t *)t->data)[i];
    case DT_FLOAT32:
        return f2i(((const float *)t->data)[i]);
    case DT_FLOAT64:
        return f2i(((const double *)t->data)[i]);
    default:
        return 0;
    }
}
static inline double ld_f(const ref_tensor *t, int64_t i) {
    switch (t->dtype) {
    case DT_FLOAT32:
        return ((const float *)t->data)[i];
    case DT_FLOAT64:
        return ((const double *)t->data)[i];
    default:
        return (double)ld_i(t, i);
    }
}
/* Narrowing to int32 keeps the low 32 bits (implementation-defined in C,
 * modular on every compiler we build with), which is torch's wrap-around. */
static inline void st_i(ref_tensor *t, int64_t i, int64_t v) {
    switch (t->dtype) {
    case DT_BOOL:
        ((uint8_t *)t->data)[i] = v != 0;
        break;
    case DT_INT32:
        ((int32_t *)t->data)[i] = (int32_t)v;
        break;
    case DT_INT64:
        ((int64_t *)t->data)[i] = v;
        break;
    case DT_FLOAT32:
        ((float *)t->data)[i] = (float)v;
        break;
    case DT_FLOAT64:
        ((double *)t->data)[i] = (double)v;
        break;
    default:
        break;
    }
}
static inline void st_f(ref_tensor *t, int64_t i, double v) {
    switch (t->dtype) {
    case DT_FLOAT32:
        ((float *)t->data)[i] = (float)v;
        break;
    case DT_FLOAT64:
        ((double *)t->data)[i] = v;
        break;
    case DT_BOOL:
        ((uint8_t *)t->data)[i] = v != 0;
        break;
    default:
        st_i(t, i, f2i(v));
        break;
    }
}
/* A value converted to dtype `dt` and back to double. */
static inline double rnd(int dt, double v) { return dt == DT_FLOAT32 ? (double)(float)v : v; }

/* dst[di] = src[si] converted to dst's dtype (torch's .to()). */
static inline void cvt(ref_tensor *dst, int64_t di, const ref_tensor *src, int64_t si) {
    size_t es = esize(dst->dtype);
    if (dst->dtype == src->dtype)
        memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, es);
    else if (is_float(dst->dtype) || dst->dtype == DT_BOOL)
        st_f(dst, di, ld_f(src, si));
    else
        st_i(dst, di, ld_i(src, si));
}

/* o[oi] = x[xi] (op) y[yi] in o's dtype; each operand is first converted to
 * that dtype, as torch does after type promotion. Float32 is computed in
 * double on float32-rounded operands: for + - * / that gives the correctly
 * rounded float32 result (53 >= 2*24 + 2 bits), i.e. exactly float32
 * arithmetic. Integers use unsigned arithmetic so overflow wraps as in torch
 * instead of being undefined; the low 32 bits of an int64 result are the
 * int32 result, so int32 needs no separate path. For bool (SUM_N/assemble
 * only) ADD stores a nonzero sum as true, i.e. logical or, as torch does. */
static inline void elem_op(int op, ref_tensor *o, int64_t oi, const ref_tensor *x, int64_t xi,
                           const ref_tensor *y, int64_t yi) {
    if (is_float(o->dtype)) {
        double p = rnd(o->dtype, ld_f(x, xi)), q = rnd(o->dtype, ld_f(y, yi));
        st_f(o, oi,
             op == DT_BINARY_ADD   ? p + q
             : op == DT_BINARY_SUB ? p - q
             : op == DT_BINARY_MUL ? p * q
                                   : p / q);
    } else {
        uint64_t p = (uint64_t)ld_i(x, xi), q = (uint64_t)ld_i(y, yi);
        st_i(o, oi, (int64_t)(op == DT_BINARY_ADD ? p + q : op == DT_BINARY_SUB ? p - q : p * q));
    }
}

/* ------------------------------------------------------------ tensors */

/* Elements of a shape, or -1 when a size is negative or bytes would overflow. */
static inline int64_t numel_of(int ndim, const int64_t *shape, size_t es) {
    int64_t n = 1, cap = (int64_t)((SIZE_MAX / 2) / (es ? es : 1));
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] && n > cap / shape[d]))
            return -1;
        n *= shape[d];
    }
    return n;
}

/* A new zero-filled tensor. EMPTY is zeros too: determinism makes valgrind
 * and test failures reproducible, and calloc costs nothing here. */
static inline dt_status mk(const char *what, int dt, int ndim, const int64_t *shape, ref_tensor **out,
                           char *err, size_t errlen) {
    size_t es = esize(dt);
    *out = NULL;
    if (!es)
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: %s does not support dtype %s", what, dtname(dt));
    if (ndim < 0 || ndim > DT_MAX_NDIM || (ndim && !shape))
        return fail(err, errlen, DT_EINVAL, "ref: %s: bad ndim %d", what, ndim);
    int64_t n = numel_of(ndim, shape, es);
    if (n < 0)
        return fail(err, errlen, DT_EINVAL, "ref: %s: invalid shape %s", what, fmt_shape(ndim, shape).s);
    ref_tensor *t = calloc(1, sizeof *t);
    ref_buf *buf = calloc(1, sizeof *buf + (n ? (size_t)n : 1) * es);
    if (!t || !buf) {
        free(t);
        free(buf);
        return fail(err, errlen, DT_ENOMEM, "ref: %s: out of memory for shape %s of %s", what,
                    fmt_shape(ndim, shape).s, dtname(dt));
    }
    t->dtype = (dt_dtype)dt;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = n;
    atomic_init(&buf->refs, 1);
    t->buf = buf;
    t->data = buf->data;
    *out = t;
    return DT_OK;
}

static inline void ref_free(void *impl) {
    ref_tensor *t = impl;
    if (!t)
        return;
    if (t->buf && atomic_fetch_sub_explicit(&t->buf->refs, 1, memory_order_acq_rel) == 1)
        free(t->buf);
    free(t);
}

static inline int ref_same_storage(const void *a, const void *b) {
    const ref_tensor *x = a, *y = b;
    return x && y && x->buf && x->buf == y->buf;
}

/* A new impl of x's dtype and shape sharing x's buffer, for a result written
 * in place into x: only when the core allows it (DT_KF_INPLACE: nothing else
 * will read x), x is its buffer's only owner, and x already has the result's
 * dtype and shape (the other operand broadcasts into it). NULL otherwise
 * (the caller computes out of place). */
static inline ref_tensor *donated(const dt__kattr *a, const ref_tensor *x, int dt, int ndim,
                                  const int64_t *shape) {
    if (!(a->flags & DT_KF_INPLACE) || !x->buf || (int)x->dtype != dt || x->ndim != ndim ||
        atomic_load_explicit(&x->buf->refs, memory_order_acquire) != 1)
        return NULL;
    if (ndim && memcmp(x->shape, shape, (size_t)ndim * sizeof *shape) != 0)
        return NULL;
    ref_tensor *o = malloc(sizeof *o);
    if (!o)
        return NULL;
    *o = *x;
    atomic_fetch_add_explicit(&x->buf->refs, 1, memory_order_relaxed);
    return o;
}

/* The backend's run entry (ref_backend.c) and its run_chain (ref_chain.c). */
dt_status ref_run(int kop, const dt__kattr *a, void *const *in, int n_in, void **out, char *err,
                  size_t errlen);
dt_status ref_run_chain(const dt__chain_step *steps, int nsteps, void *const *in, int n_in, int inplace,
                        void **out, int *failed_step, int64_t *blocks, char *err, size_t errlen);

/* ------------------------------------------------------- strided walks */

/* An odometer over `shape` that tracks one flat offset per operand: operand
 * j is at off[j] = base[j] + sum_d idx[d] * stride[j][d]. A zero stride
 * repeats an element (broadcasting, reduced dims); a base and the parent's
 * strides address a region of a larger tensor. Call walk_step numel times. */
typedef struct walk {
    int ndim, n;
    int64_t shape[DT_MAX_NDIM], idx[DT_MAX_NDIM];
    int64_t stride[3][DT_MAX_NDIM];
    int64_t off[3];
} walk;

static inline void walk_step(walk *w) {
    for (int d = w->ndim - 1; d >= 0; d--) {
        for (int j = 0; j < w->n; j++)
            w->off[j] += w->stride[j][d];
        if (++w->idx[d] < w->shape[d])
            return;
        for (int j = 0; j < w->n; j++)
            w->off[j] -= w->stride[j][d] * w->shape[d];
        w->idx[d] = 0;
    }
}

static inline void contig(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        stride[d] = s;
        s *= shape[d];
    }
}

static inline int64_t dot(int ndim, const int64_t *a, const int64_t *b) {
    int64_t s = 0;
    for (int d = 0; d < ndim; d++)
        s += a[d] * b[d];
    return s;
}

/* Copies (or adds, for accumulate) the region `shape` of src at `sstart`
 * into dst at `dstart`; both tensors have `ndim` dims. */
static inline void copy_region(ref_tensor *dst, const int64_t *dstart, const ref_tensor *src,
                               const int64_t *sstart, int ndim, const int64_t *shape, int add) {
    walk w = {.ndim = ndim, .n = 2};
    memcpy(w.shape, shape, (size_t)ndim * sizeof *shape);
    contig(ndim, dst->shape, w.stride[0]);
    contig(ndim, src->shape, w.stride[1]);
    w.off[0] = dot(ndim, dstart, w.stride[0]);
    w.off[1] = dot(ndim, sstart, w.stride[1]);
    for (int64_t n = numel_of(ndim, shape, 1); n > 0; n--, walk_step(&w)) {
        if (add)
            elem_op(DT_BINARY_ADD, dst, w.off[0], dst, w.off[0], src, w.off[1]);
        else
            cvt(dst, w.off[0], src, w.off[1]);
    }
}

/* Is start + shape within full, for every dim? */
static inline dt_status region_ok(const char *what, int ndim, const int64_t *start, const int64_t *shape,
                                  const int64_t *full, char *err, size_t errlen) {
    for (int d = 0; d < ndim; d++)
        if (start[d] < 0 || shape[d] < 0 || start[d] > full[d] - shape[d])
            return fail(err, errlen, DT_EBACKEND, "ref: %s: region at %s of shape %s exceeds %s", what,
                        fmt_shape(ndim, start).s, fmt_shape(ndim, shape).s, fmt_shape(ndim, full).s);
    return DT_OK;
}

#endif /* DT_REF_INTERNAL_H */
