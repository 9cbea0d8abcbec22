/*
 * Tests of the pure-C reference backend (src/backend/ref/ref_backend.c),
 * driven only through the dt__backend_ref vtable, against small hand-computed
 * expectations. Standalone: it needs nothing of the core library, so it runs
 * as is under ASan/UBSan and valgrind. Each failure prints both operands;
 * the exit status is the number of failures (capped), 0 on success.
 */
#include "backend/backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const dt__backend *B = &dt__backend_ref;
static int failures, checks;
static char err[256];

#define S(...) ((const int64_t[]){__VA_ARGS__})
#define V(...) ((const double[]){__VA_ARGS__})

static size_t esz(dt_dtype dt) { return dt == DT_BOOL ? 1 : dt == DT_INT32 || dt == DT_FLOAT32 ? 4 : 8; }
static int64_t count(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}
static void put(dt_dtype dt, void *buf, int64_t i, double v) {
    switch (dt) {
    case DT_BOOL:
        ((uint8_t *)buf)[i] = v != 0;
        break;
    case DT_INT32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case DT_INT64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case DT_FLOAT32:
        ((float *)buf)[i] = (float)v;
        break;
    default:
        ((double *)buf)[i] = v;
        break;
    }
}
static double get(dt_dtype dt, const void *buf, int64_t i) {
    switch (dt) {
    case DT_BOOL:
        return ((const uint8_t *)buf)[i];
    case DT_INT32:
        return ((const int32_t *)buf)[i];
    case DT_INT64:
        return (double)((const int64_t *)buf)[i];
    case DT_FLOAT32:
        return ((const float *)buf)[i];
    default:
        return ((const double *)buf)[i];
    }
}
static void print_vals(const char *label, const double *v, int64_t n) {
    printf("    %s [", label);
    for (int64_t i = 0; i < n; i++)
        printf(i ? ", %.17g" : "%.17g", v[i]);
    printf("]\n");
}

/* A new impl of `dt` holding `v` (converted), or NULL after a failure. */
static void *T(dt_dtype dt, int ndim, const int64_t *shape, const double *v) {
    int64_t n = count(ndim, shape);
    void *buf = calloc((size_t)(n ? n : 1), esz(dt)), *out = NULL;
    for (int64_t i = 0; i < n; i++)
        put(dt, buf, i, v[i]);
    dt_status st = B->from_host(dt, ndim, shape, buf, &out, err, sizeof err);
    if (st) {
        printf("FAIL from_host: status %d: %s\n", st, err);
        failures++;
    }
    free(buf);
    return out;
}

/* Checks status and, on failure, that the message mentions `needle`. */
static void check_status(const char *what, dt_status got, dt_status want, const char *needle) {
    checks++;
    if (got != want || (want && needle && !strstr(err, needle))) {
        printf("FAIL %s: status got %d want %d; message \"%s\" should mention \"%s\"\n", what, got, want,
               got ? err : "", needle ? needle : "");
        failures++;
    }
}

static void *run(const char *what, int kop, const dt__kattr *a, void *const *in, int n, dt_status want,
                 const char *needle) {
    void *out = (void *)&out; /* must be reset to NULL on failure */
    err[0] = 0;
    dt_status st = B->run(kop, a, in, n, &out, err, sizeof err);
    check_status(what, st, want, needle);
    if (st && out) {
        printf("FAIL %s: *out not NULL after an error\n", what);
        failures++;
    }
    return st ? NULL : out;
}

/* Compares an impl's dtype-sized byte count, shape and values with the
 * expectation, then frees it. The shape is checked by slicing the whole
 * expected region out of it: that succeeds only with the same rank and no
 * smaller dims, and the byte count rules out larger ones. */
static void expect(const char *what, void *t, dt_dtype dt, int ndim, const int64_t *shape,
                   const double *want) {
    checks++;
    if (!t) {
        printf("FAIL %s: no tensor\n", what);
        failures++;
        return;
    }
    int64_t n = count(ndim, shape);
    size_t nb = (size_t)n * esz(dt);
    double *got = calloc((size_t)n + 1, sizeof *got);
    void *buf = calloc(nb + 1, 1);
    dt__kattr a = {.ndim = ndim};
    if (ndim)
        memcpy(a.shape, shape, (size_t)ndim * sizeof *shape);
    void *whole = NULL;
    if (B->nbytes(t) != nb || B->run(DT_K_SLICE, &a, &t, 1, &whole, err, sizeof err) ||
        B->to_host(t, buf, nb, err, sizeof err)) {
        printf("FAIL %s: expected %zu bytes of shape rank %d, got %zu bytes (%s)\n", what, nb, ndim,
               B->nbytes(t), err);
        failures++;
    } else {
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            got[i] = get(dt, buf, i);
            bad |= got[i] != want[i] || signbit(got[i]) != signbit(want[i]);
        }
        if (bad) {
            printf("FAIL %s: values differ\n", what);
            print_vals("got ", got, n);
            print_vals("want", want, n);
            failures++;
        }
    }
    B->free(whole);
    B->free(t);
    free(got);
    free(buf);
}

static dt__kattr attr(dt_dtype dt) {
    dt__kattr a;
    memset(&a, 0, sizeof a);
    a.dtype = dt;
    a.scalar2 = dt_scalar_int(1); /* EW_BINARY's alpha */
    return a;
}

static void test_host(void) {
    const dt_dtype all[] = {DT_BOOL, DT_INT32, DT_INT64, DT_FLOAT32, DT_FLOAT64};
    for (int k = 0; k < 5; k++) {
        void *t = T(all[k], 2, S(2, 2), V(0, 1, 1, 0));
        expect("from_host/to_host round trip", t, all[k], 2, S(2, 2), V(0, 1, 1, 0));
    }
    void *t = T(DT_FLOAT32, 1, S(3), V(1, 2, 3)), *out = NULL;
    float f[4];
    check_status("to_host short buffer", B->to_host(t, f, 8, err, sizeof err), DT_EINVAL, "12 bytes");
    check_status("to_host long buffer", B->to_host(t, f, 16, err, sizeof err), DT_EINVAL,
                 "got a buffer of 16");
    check_status("to_host exact", B->to_host(t, f, 12, err, sizeof err), DT_OK, NULL);
    B->free(t);
    check_status("from_host float16", B->from_host(DT_FLOAT16, 1, S(1), f, &out, err, sizeof err),
                 DT_EUNSUPPORTED, "float16");
    check_status("from_host negative dim", B->from_host(DT_FLOAT32, 1, S(-1), f, &out, err, sizeof err),
                 DT_EINVAL, "[-1]");
    check_status("from_host ndim 9",
                 B->from_host(DT_FLOAT32, 9, S(1, 1, 1, 1, 1, 1, 1, 1, 1), f, &out, err, sizeof err),
                 DT_EINVAL, "ndim");
    check_status("from_host too large",
                 B->from_host(DT_FLOAT64, 2, S(INT64_MAX / 2, 4), f, &out, err, sizeof err), DT_EINVAL,
                 "invalid shape");
    check_status("from_host NULL data", B->from_host(DT_FLOAT32, 1, S(2), NULL, &out, err, sizeof err),
                 DT_EINVAL, "NULL data for shape [2]");
    /* Empty and 0-d tensors; NULL data is fine with no elements. */
    check_status("from_host empty", B->from_host(DT_INT64, 2, S(0, 3), NULL, &out, err, sizeof err), DT_OK,
                 NULL);
    expect("empty tensor", out, DT_INT64, 2, S(0, 3), V(0));
    expect("0-d tensor", T(DT_FLOAT64, 0, NULL, V(4.5)), DT_FLOAT64, 0, NULL, V(4.5));
    B->free(NULL);
    checks++;
    if (strcmp(B->name, "ref") || B->from_dlpack || B->to_dlpack || B->dlpack_delete || B->worker_init ||
        !B->default_dtype || B->default_dtype() != DT_FLOAT32) {
        printf("FAIL vtable: unexpected optional entries or default dtype\n");
        failures++;
    }
}

static void test_binary(void) {
    void *x = T(DT_FLOAT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6)), *y = T(DT_FLOAT32, 1, S(3), V(10, 20, 30));
    void *col = T(DT_FLOAT32, 2, S(2, 1), V(1, 2)), *row = T(DT_FLOAT32, 2, S(1, 3), V(3, 4, 5));
    void *bad = T(DT_FLOAT32, 1, S(4), V(0, 0, 0, 0)), *li = T(DT_INT64, 1, S(3), V(1, 2, 3));
    dt__kattr a = attr(DT_FLOAT32);
    a.sub = DT_BINARY_ADD;
    expect("[2,3] + [3]", run("add", DT_K_EW_BINARY, &a, (void *[]){x, y}, 2, DT_OK, NULL), DT_FLOAT32, 2,
           S(2, 3), V(11, 22, 33, 14, 25, 36));
    expect("[3] + [2,3]", run("add", DT_K_EW_BINARY, &a, (void *[]){y, x}, 2, DT_OK, NULL), DT_FLOAT32, 2,
           S(2, 3), V(11, 22, 33, 14, 25, 36));
    a.sub = DT_BINARY_MUL;
    expect("[2,1] * [1,3]", run("mul", DT_K_EW_BINARY, &a, (void *[]){col, row}, 2, DT_OK, NULL), DT_FLOAT32,
           2, S(2, 3), V(3, 4, 5, 6, 8, 10));
    a.sub = DT_BINARY_SUB;
    expect("mixed int64 - float32", run("sub", DT_K_EW_BINARY, &a, (void *[]){li, x}, 2, DT_OK, NULL),
           DT_FLOAT32, 2, S(2, 3), V(0, 0, 0, -3, -3, -3));
    a.sub = DT_BINARY_DIV;
    a.dtype = DT_FLOAT64;
    expect("float64 div", run("div", DT_K_EW_BINARY, &a, (void *[]){x, col}, 2, DT_OK, NULL), DT_FLOAT64, 2,
           S(2, 3), V(1, 2, 3, 2, 2.5, 3));
    a.dtype = DT_FLOAT32; /* 1/3 in float32, not double */
    expect("float32 div rounds", run("div", DT_K_EW_BINARY, &a, (void *[]){col, row}, 2, DT_OK, NULL),
           DT_FLOAT32, 2, S(2, 3), V((float)(1.0 / 3), 0.25, 0.2f, (float)(2.0 / 3), 0.5, 0.4f));
    /* Each operand is converted to the output dtype before the op. */
    void *fine = T(DT_FLOAT64, 1, S(1), V(1 + 0x1p-30)), *ones = T(DT_FLOAT32, 1, S(1), V(1));
    a.sub = DT_BINARY_SUB;
    expect("float64 operand rounded to float32 first",
           run("sub", DT_K_EW_BINARY, &a, (void *[]){fine, ones}, 2, DT_OK, NULL), DT_FLOAT32, 1, S(1), V(0));
    B->free(fine);
    B->free(ones);
    a.sub = DT_BINARY_DIV;
    a.dtype = DT_INT64;
    run("int64 div", DT_K_EW_BINARY, &a, (void *[]){li, li}, 2, DT_EUNSUPPORTED, "int64");
    a.sub = DT_BINARY_MUL;
    expect("int64 mul", run("int mul", DT_K_EW_BINARY, &a, (void *[]){li, li}, 2, DT_OK, NULL), DT_INT64, 1,
           S(3), V(1, 4, 9));
    a.sub = DT_BINARY_ADD;
    a.dtype = DT_FLOAT32;
    run("[2,3] + [4]", DT_K_EW_BINARY, &a, (void *[]){x, bad}, 2, DT_EBACKEND,
        "ref: shapes [2,3] and [4] do not broadcast");
    void *empty = T(DT_FLOAT32, 2, S(0, 3), V(0));
    expect("[0,3] + [3]", run("empty add", DT_K_EW_BINARY, &a, (void *[]){empty, y}, 2, DT_OK, NULL),
           DT_FLOAT32, 2, S(0, 3), V(0));
    a.dtype = DT_BOOL;
    run("bool add", DT_K_EW_BINARY, &a, (void *[]){x, y}, 2, DT_EUNSUPPORTED,
        "EW_BINARY does not support dtype bool");
    a.dtype = DT_FLOAT32;
    a.sub = DT_BINARY_LOGICAL_OR;
    run("logical_or", DT_K_EW_BINARY, &a, (void *[]){x, y}, 2, DT_EUNSUPPORTED,
        "EW_BINARY logical_or is not implemented by the reference backend");
    a.sub = DT_BINARY_COUNT;
    run("bad sub", DT_K_EW_BINARY, &a, (void *[]){x, y}, 2, DT_EINVAL, "bad op");
    /* alpha: x + 2 * y, x - 0.5 * y */
    a.sub = DT_BINARY_ADD;
    a.scalar2 = dt_scalar_int(2);
    expect("x + 2 * y", run("add alpha", DT_K_EW_BINARY, &a, (void *[]){x, y}, 2, DT_OK, NULL), DT_FLOAT32, 2,
           S(2, 3), V(21, 42, 63, 24, 45, 66));
    a.sub = DT_BINARY_SUB;
    a.scalar2 = dt_scalar_float(0.5);
    expect("x - 0.5 * y", run("sub alpha", DT_K_EW_BINARY, &a, (void *[]){x, y}, 2, DT_OK, NULL), DT_FLOAT32,
           2, S(2, 3), V(-4, -8, -12, -1, -5, -9));
    a.scalar2 = dt_scalar_int(1);

    /* Scalars: tensor op scalar, scalar op tensor, int tensor with float result. */
    a = attr(DT_FLOAT32);
    a.sub = DT_BINARY_MUL;
    a.scalar = dt_scalar_float(2.5);
    expect("x * 2.5", run("scalar mul", DT_K_EW_BINARY, &a, &y, 1, DT_OK, NULL), DT_FLOAT32, 1, S(3),
           V(25, 50, 75));
    a.sub = DT_BINARY_SUB;
    a.flags = DT_KF_REVERSED;
    a.scalar = dt_scalar_int(1);
    expect("1 - x", run("reversed sub", DT_K_EW_BINARY, &a, &y, 1, DT_OK, NULL), DT_FLOAT32, 1, S(3),
           V(-9, -19, -29));
    a.sub = DT_BINARY_DIV;
    a.scalar = dt_scalar_float(6.0);
    expect("6.0 / int64", run("reversed div", DT_K_EW_BINARY, &a, &li, 1, DT_OK, NULL), DT_FLOAT32, 1, S(3),
           V(6, 3, 2));
    a = attr(DT_INT64);
    a.sub = DT_BINARY_ADD;
    a.scalar = dt_scalar_int(INT64_MAX);
    expect("int64 + max wraps", run("wrap", DT_K_EW_BINARY, &a, &li, 1, DT_OK, NULL), DT_INT64, 1, S(3),
           V((double)INT64_MIN, (double)(INT64_MIN + 1), (double)(INT64_MIN + 2)));
    a.dtype = DT_FLOAT16;
    run("float16 scalar", DT_K_EW_BINARY, &a, &li, 1, DT_EUNSUPPORTED,
        "EW_BINARY does not support dtype float16");

    /* UNARY neg: -0.0 keeps its sign. */
    void *z = T(DT_FLOAT32, 1, S(3), V(0, -1.5, 2));
    a = attr(DT_FLOAT32);
    expect("neg float32", run("neg", DT_K_UNARY, &a, &z, 1, DT_OK, NULL), DT_FLOAT32, 1, S(3),
           V(-0.0, 1.5, -2));
    a = attr(DT_INT64);
    expect("neg int64", run("neg", DT_K_UNARY, &a, &li, 1, DT_OK, NULL), DT_INT64, 1, S(3), V(-1, -2, -3));
    a.sub = DT_UNARY_EXP;
    run("exp", DT_K_UNARY, &a, &li, 1, DT_EUNSUPPORTED,
        "UNARY exp is not implemented by the reference backend");
    a = attr(DT_BOOL);
    void *bo = T(DT_BOOL, 1, S(2), V(1, 0));
    run("neg bool", DT_K_UNARY, &a, &bo, 1, DT_EUNSUPPORTED, "UNARY does not support dtype bool");
    void *all[] = {x, y, col, row, bad, li, empty, z, bo};
    for (int i = 0; i < 9; i++)
        B->free(all[i]);
}

static void test_matmul(void) {
    void *a64 = T(DT_INT64, 2, S(2, 3), V(1, 2, 3, 4, 5, 6)),
         *b64 = T(DT_INT64, 2, S(3, 2), V(7, 8, 9, 10, 11, 12));
    void *a32 = T(DT_FLOAT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6)),
         *b32 = T(DT_FLOAT32, 2, S(3, 2), V(7, 8, 9, 10, 11, 12));
    dt__kattr a = attr(DT_INT64);
    expect("int64 matmul", run("matmul", DT_K_LINALG, &a, (void *[]){a64, b64}, 2, DT_OK, NULL), DT_INT64, 2,
           S(2, 2), V(58, 64, 139, 154));
    a.dtype = DT_FLOAT32;
    expect("float32 matmul", run("matmul", DT_K_LINALG, &a, (void *[]){a32, b32}, 2, DT_OK, NULL), DT_FLOAT32,
           2, S(2, 2), V(58, 64, 139, 154));
    a.dtype = DT_FLOAT64;
    expect("[3,2] @ [2,3] float64", run("matmul", DT_K_LINALG, &a, (void *[]){b32, a32}, 2, DT_OK, NULL),
           DT_FLOAT64, 2, S(3, 3), V(39, 54, 69, 49, 68, 87, 59, 82, 105));
    /* float32 accumulates in float32: 1 + 2^-24 + 2^-24 stays 1 (ties to even). */
    void *tiny = T(DT_FLOAT32, 2, S(1, 3), V(1, 0x1p-24, 0x1p-24)),
         *ones = T(DT_FLOAT32, 2, S(3, 1), V(1, 1, 1));
    a.dtype = DT_FLOAT32;
    expect("float32 accumulation", run("matmul", DT_K_LINALG, &a, (void *[]){tiny, ones}, 2, DT_OK, NULL),
           DT_FLOAT32, 2, S(1, 1), V(1));
    a.dtype = DT_FLOAT64;
    expect("float64 accumulation", run("matmul", DT_K_LINALG, &a, (void *[]){tiny, ones}, 2, DT_OK, NULL),
           DT_FLOAT64, 2, S(1, 1), V(1 + 0x1p-23));
    B->free(tiny);
    B->free(ones);
    run("K mismatch", DT_K_LINALG, &a, (void *[]){a32, a32}, 2, DT_EBACKEND, "[2,3] @ [2,3]");
    void *v = T(DT_FLOAT32, 1, S(3), V(1, 2, 3));
    run("1-D matmul", DT_K_LINALG, &a, (void *[]){v, b32}, 2, DT_EBACKEND, "LINALG");
    /* K = 0 gives zeros. */
    void *e1 = T(DT_FLOAT32, 2, S(2, 0), V(0)), *e2 = T(DT_FLOAT32, 2, S(0, 2), V(0));
    expect("K = 0", run("matmul", DT_K_LINALG, &a, (void *[]){e1, e2}, 2, DT_OK, NULL), DT_FLOAT64, 2,
           S(2, 2), V(0, 0, 0, 0));
    void *all[] = {a64, b64, a32, b32, v, e1, e2};
    for (int i = 0; i < 7; i++)
        B->free(all[i]);
}

static void test_sum(void) {
    void *x = T(DT_FLOAT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6));
    dt__kattr a = attr(DT_FLOAT32);
    a.dims_mask = 1;
    expect("sum dim 0", run("sum", DT_K_REDUCE, &a, &x, 1, DT_OK, NULL), DT_FLOAT32, 1, S(3), V(5, 7, 9));
    a.flags = DT_KF_KEEPDIM;
    expect("sum dim 0 keepdim", run("sum", DT_K_REDUCE, &a, &x, 1, DT_OK, NULL), DT_FLOAT32, 2, S(1, 3),
           V(5, 7, 9));
    a.dims_mask = 2;
    expect("sum dim 1 keepdim", run("sum", DT_K_REDUCE, &a, &x, 1, DT_OK, NULL), DT_FLOAT32, 2, S(2, 1),
           V(6, 15));
    a.flags = 0;
    a.dtype = DT_FLOAT64;
    expect("sum dim 1 to float64", run("sum", DT_K_REDUCE, &a, &x, 1, DT_OK, NULL), DT_FLOAT64, 1, S(2),
           V(6, 15));
    a.dims_mask = 0;
    a.flags = DT_KF_ALL;
    expect("sum all", run("sum", DT_K_REDUCE, &a, &x, 1, DT_OK, NULL), DT_FLOAT64, 0, NULL, V(21));
    a.flags = DT_KF_ALL | DT_KF_KEEPDIM;
    expect("sum all keepdim", run("sum", DT_K_REDUCE, &a, &x, 1, DT_OK, NULL), DT_FLOAT64, 2, S(1, 1), V(21));
    a.flags = 0;
    a.dims_mask = 4;
    run("sum dim 2 of 2-D", DT_K_REDUCE, &a, &x, 1, DT_EBACKEND, "dims_mask 0x4");
    /* 3-D over dims 0 and 2; int32 input summed to int64. */
    void *y = T(DT_INT32, 3, S(2, 2, 2), V(1, 2, 3, 4, 5, 6, 7, 8));
    a = attr(DT_INT64);
    a.dims_mask = 5;
    expect("sum dims {0,2}", run("sum", DT_K_REDUCE, &a, &y, 1, DT_OK, NULL), DT_INT64, 1, S(2), V(14, 22));
    void *b = T(DT_BOOL, 1, S(4), V(1, 0, 1, 1));
    a.dims_mask = 1;
    expect("sum bool", run("sum", DT_K_REDUCE, &a, &b, 1, DT_OK, NULL), DT_INT64, 0, NULL, V(3));
    void *e = T(DT_FLOAT32, 2, S(0, 2), V(0));
    a = attr(DT_FLOAT32);
    a.dims_mask = 1;
    expect("sum over empty dim", run("sum", DT_K_REDUCE, &a, &e, 1, DT_OK, NULL), DT_FLOAT32, 1, S(2),
           V(0, 0));
    a.dtype = DT_BOOL;
    run("sum to bool", DT_K_REDUCE, &a, &x, 1, DT_EUNSUPPORTED, "REDUCE does not support dtype bool");
    /* Only the plain sum: other reductions and modes are LibTorch's. */
    a.dtype = DT_FLOAT32;
    a.sub = DT_REDUCE_MEAN;
    run("mean", DT_K_REDUCE, &a, &x, 1, DT_EUNSUPPORTED,
        "REDUCE mean is not implemented by the reference backend");
    a.sub = DT_REDUCE_SUM | DT_KR_SUM_DIV << 8;
    run("sum mode", DT_K_REDUCE, &a, &x, 1, DT_EUNSUPPORTED, "REDUCE sum is not implemented");
    a.sub = DT_KL_BMM;
    run("bmm", DT_K_LINALG, &a, (void *[]){x, x}, 2, DT_EUNSUPPORTED, "LINALG sub-op 1 is not implemented");
    B->free(x);
    B->free(y);
    B->free(b);
    B->free(e);
}

static void test_copies(void) {
    void *x = T(DT_INT64, 2, S(3, 4), V(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11));
    dt__kattr a = attr(DT_INT64);
    a.ndim = 2;
    memcpy(a.start, S(1, 1), 2 * sizeof(int64_t));
    memcpy(a.shape, S(2, 2), 2 * sizeof(int64_t));
    expect("slice [1:3,1:3]", run("slice", DT_K_SLICE, &a, &x, 1, DT_OK, NULL), DT_INT64, 2, S(2, 2),
           V(5, 6, 9, 10));
    a.shape[1] = 4;
    run("slice out of bounds", DT_K_SLICE, &a, &x, 1, DT_EBACKEND, "exceeds [3,4]");
    a.ndim = 1;
    run("slice rank mismatch", DT_K_SLICE, &a, &x, 1, DT_EBACKEND, "SLICE");

    /* CAT with an empty piece, along dim 0 and along dim -1. */
    void *p0 = T(DT_FLOAT32, 2, S(1, 2), V(1, 2)), *p1 = T(DT_FLOAT32, 2, S(0, 2), V(0));
    void *p2 = T(DT_FLOAT32, 2, S(2, 2), V(3, 4, 5, 6)), *q = T(DT_FLOAT32, 2, S(2, 1), V(7, 8));
    a = attr(DT_FLOAT32);
    expect("cat dim 0 with empty", run("cat", DT_K_CAT, &a, (void *[]){p0, p1, p2}, 3, DT_OK, NULL),
           DT_FLOAT32, 2, S(3, 2), V(1, 2, 3, 4, 5, 6));
    a.dim = -1;
    expect("cat dim -1", run("cat", DT_K_CAT, &a, (void *[]){p2, q}, 2, DT_OK, NULL), DT_FLOAT32, 2, S(2, 3),
           V(3, 4, 7, 5, 6, 8));
    expect("cat of one", run("cat", DT_K_CAT, &a, &q, 1, DT_OK, NULL), DT_FLOAT32, 2, S(2, 1), V(7, 8));
    a.dim = 0;
    run("cat mismatch", DT_K_CAT, &a, (void *[]){p0, q}, 2, DT_EBACKEND, "input 1 has shape [2,1]");
    a.dim = 2;
    run("cat dim 2", DT_K_CAT, &a, (void *[]){p0, p2}, 2, DT_EBACKEND, "CAT dim 2");
    run("cat of none", DT_K_CAT, &a, NULL, 0, DT_EINVAL, "at least 1");

    /* SUM_N adds left to right; bools or. */
    a = attr(DT_FLOAT32);
    expect("sum_n", run("sum_n", DT_K_SUM_N, &a, (void *[]){p2, p2, p2}, 3, DT_OK, NULL), DT_FLOAT32, 2,
           S(2, 2), V(9, 12, 15, 18));
    void *one = run("sum_n of one", DT_K_SUM_N, &a, &p2, 1, DT_OK, NULL);
    checks++;
    if (one == p2) {
        printf("FAIL sum_n of one: aliases its input, but ref impls are freed independently\n");
        failures++;
    }
    expect("sum_n of one", one, DT_FLOAT32, 2, S(2, 2), V(3, 4, 5, 6));
    void *b1 = T(DT_BOOL, 1, S(3), V(1, 0, 0)), *b2 = T(DT_BOOL, 1, S(3), V(1, 1, 0));
    expect("sum_n bool", run("sum_n", DT_K_SUM_N, &a, (void *[]){b1, b2}, 2, DT_OK, NULL), DT_BOOL, 1, S(3),
           V(1, 1, 0));
    run("sum_n mismatch", DT_K_SUM_N, &a, (void *[]){p2, q}, 2, DT_EBACKEND, "input 1 has shape [2,1]");

    /* ZEROS_LIKE, FULL, EMPTY. */
    void *i32 = T(DT_INT32, 2, S(1, 2), V(5, 6));
    expect("zeros_like int32", run("zeros_like", DT_K_ZEROS_LIKE, &a, &i32, 1, DT_OK, NULL), DT_INT32, 2,
           S(1, 2), V(0, 0));
    a = attr(DT_INT64);
    a.ndim = 2;
    memcpy(a.shape, S(2, 1), 2 * sizeof(int64_t));
    a.scalar = dt_scalar_int(-7);
    expect("full int64", run("full", DT_K_FULL, &a, NULL, 0, DT_OK, NULL), DT_INT64, 2, S(2, 1), V(-7, -7));
    a.dtype = DT_FLOAT32;
    a.scalar = dt_scalar_float(2.5);
    expect("full float32", run("full", DT_K_FULL, &a, NULL, 0, DT_OK, NULL), DT_FLOAT32, 2, S(2, 1),
           V(2.5, 2.5));
    a.dtype = DT_BOOL;
    a.scalar = dt_scalar_float(0.5);
    expect("full bool from 0.5", run("full", DT_K_FULL, &a, NULL, 0, DT_OK, NULL), DT_BOOL, 2, S(2, 1),
           V(1, 1));
    a.ndim = 0;
    a.dtype = DT_FLOAT64;
    expect("full 0-d", run("full", DT_K_FULL, &a, NULL, 0, DT_OK, NULL), DT_FLOAT64, 0, NULL, V(0.5));
    a.dtype = DT_INT8;
    run("full int8", DT_K_FULL, &a, NULL, 0, DT_EUNSUPPORTED, "FULL does not support dtype int8");
    a.dtype = DT_FLOAT64;
    a.ndim = 2;
    memcpy(a.shape, S(2, 0), 2 * sizeof(int64_t));
    expect("empty [2,0]", run("empty", DT_K_EMPTY, &a, NULL, 0, DT_OK, NULL), DT_FLOAT64, 2, S(2, 0), V(0));
    a.shape[1] = 2;
    expect("empty [2,2]", run("empty", DT_K_EMPTY, &a, NULL, 0, DT_OK, NULL), DT_FLOAT64, 2, S(2, 2),
           V(0, 0, 0, 0));
    a.shape[1] = -2;
    run("empty negative", DT_K_EMPTY, &a, NULL, 0, DT_EINVAL, "[2,-2]");
    void *all[] = {x, p0, p1, p2, q, b1, b2, i32};
    for (int i = 0; i < 8; i++)
        B->free(all[i]);
}

static void test_arange(void) {
    dt__kattr a = attr(DT_FLOAT32);
    a.ndim = a.gndim = 1;
    a.f[0] = 1, a.f[1] = 10, a.f[2] = 2;
    a.shape[0] = a.gshape[0] = 5;
    expect("arange(1, 10, 2)", run("arange", DT_K_ARANGE, &a, NULL, 0, DT_OK, NULL), DT_FLOAT32, 1, S(5),
           V(1, 3, 5, 7, 9));
    a.start[0] = 2;
    a.shape[0] = 2;
    expect("arange slice [2:4]", run("arange", DT_K_ARANGE, &a, NULL, 0, DT_OK, NULL), DT_FLOAT32, 1, S(2),
           V(5, 7));
    a.dtype = DT_INT64;
    a.f[0] = 3, a.f[2] = -1;
    expect("int64 arange(3, ., -1)[2:4]", run("arange", DT_K_ARANGE, &a, NULL, 0, DT_OK, NULL), DT_INT64, 1,
           S(2), V(1, 0));
    a.dtype = DT_FLOAT64;
    a.f[0] = 0, a.f[2] = 0.1;
    a.start[0] = 0;
    a.shape[0] = 3;
    expect("float64 arange step 0.1", run("arange", DT_K_ARANGE, &a, NULL, 0, DT_OK, NULL), DT_FLOAT64, 1,
           S(3), V(0, 0.1, 2 * 0.1));
    a.dtype = DT_BOOL;
    run("bool arange", DT_K_ARANGE, &a, NULL, 0, DT_EUNSUPPORTED, "ARANGE does not support dtype bool");
}

/* Runs RAND/RANDN over a region of the global tensor [4,6]. */
static void *rnd(int kop, dt_dtype dt, uint64_t seed, const int64_t *start, const int64_t *shape) {
    dt__kattr a = attr(dt);
    a.ndim = a.gndim = 2;
    a.seed = seed;
    memcpy(a.gshape, S(4, 6), 2 * sizeof(int64_t));
    memcpy(a.start, start, 2 * sizeof(int64_t));
    memcpy(a.shape, shape, 2 * sizeof(int64_t));
    return run("rand", kop, &a, NULL, 0, DT_OK, NULL);
}

static void test_rand(void) {
    for (int kop = DT_K_RAND; kop <= DT_K_RANDN; kop++)
        for (dt_dtype dt = DT_FLOAT32; dt <= DT_FLOAT64; dt++) {
            const char *what = kop == DT_K_RAND ? "rand" : "randn";
            void *whole = rnd(kop, dt, 42, S(0, 0), S(4, 6));
            double w[24], seen = 0;
            void *buf = calloc(24, 8);
            B->to_host(whole, buf, 24 * esz(dt), err, sizeof err);
            for (int i = 0; i < 24; i++) {
                w[i] = get(dt, buf, i);
                seen += w[i] != w[0];
                checks++;
                if (kop == DT_K_RAND ? !(w[i] >= 0 && w[i] < 1) : !isfinite(w[i])) {
                    printf("FAIL %s: value %d is %.17g\n", what, i, w[i]);
                    failures++;
                }
            }
            checks++;
            if (!seen) {
                printf("FAIL %s: all values equal %g\n", what, w[0]);
                failures++;
            }
            /* A region equals the same region of the whole tensor ... */
            double r[6];
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 3; j++)
                    r[i * 3 + j] = w[(1 + i) * 6 + 2 + j];
            expect("rand region == region of whole", rnd(kop, dt, 42, S(1, 2), S(2, 3)), dt, 2, S(2, 3), r);
            /* ... and two row shards, concatenated, equal the whole. */
            void *s0 = rnd(kop, dt, 42, S(0, 0), S(2, 6)), *s1 = rnd(kop, dt, 42, S(2, 0), S(2, 6));
            dt__kattr c = attr(dt);
            expect("rand shards cat == whole", run("cat", DT_K_CAT, &c, (void *[]){s0, s1}, 2, DT_OK, NULL),
                   dt, 2, S(4, 6), w);
            /* Another seed gives other values. */
            void *other = rnd(kop, dt, 43, S(0, 0), S(1, 1));
            B->to_host(other, buf, esz(dt), err, sizeof err);
            checks++;
            if (get(dt, buf, 0) == w[0]) {
                printf("FAIL %s: seeds 42 and 43 give %g\n", what, w[0]);
                failures++;
            }
            B->free(other);
            B->free(s0);
            B->free(s1);
            B->free(whole);
            free(buf);
        }
    dt__kattr a = attr(DT_INT64);
    a.ndim = a.gndim = 1;
    a.shape[0] = a.gshape[0] = 2;
    run("rand int64", DT_K_RAND, &a, NULL, 0, DT_EUNSUPPORTED, "RAND does not support dtype int64");
    a.dtype = DT_FLOAT32;
    a.start[0] = 1;
    run("rand region out of global", DT_K_RANDN, &a, NULL, 0, DT_EBACKEND, "exceeds [2]");
    a.gndim = 2;
    run("rand rank mismatch", DT_K_RAND, &a, NULL, 0, DT_EBACKEND, "RAND");
}

static void test_assemble(void) {
    void *r0 = T(DT_FLOAT32, 2, S(1, 3), V(1, 2, 3)), *r1 = T(DT_FLOAT32, 2, S(1, 3), V(4, 5, 6));
    void *c = T(DT_FLOAT32, 2, S(2, 1), V(10, 20)), *out = NULL;
    const int64_t rows[] = {0, 0, 1, 0};
    check_status(
        "assemble copy",
        B->assemble(DT_FLOAT32, 2, S(2, 3), 2, (void *[]){r1, r0}, S(1, 0, 0, 0), 0, &out, err, sizeof err),
        DT_OK, NULL);
    expect("assemble copy", out, DT_FLOAT32, 2, S(2, 3), V(1, 2, 3, 4, 5, 6));
    /* Overlapping pieces add in order; uncovered elements stay zero. */
    check_status("assemble accumulate",
                 B->assemble(DT_FLOAT32, 2, S(2, 3), 3, (void *[]){r0, r1, c}, S(0, 0, 0, 0, 0, 1), 1, &out,
                             err, sizeof err),
                 DT_OK, NULL);
    expect("assemble accumulate", out, DT_FLOAT32, 2, S(2, 3), V(5, 17, 9, 0, 20, 0));
    check_status("assemble partial copy",
                 B->assemble(DT_FLOAT32, 2, S(3, 3), 1, &r0, S(2, 0), 0, &out, err, sizeof err), DT_OK, NULL);
    expect("assemble partial copy", out, DT_FLOAT32, 2, S(3, 3), V(0, 0, 0, 0, 0, 0, 1, 2, 3));
    /* One piece covering everything: still a fresh copy. */
    check_status("assemble one", B->assemble(DT_FLOAT32, 2, S(1, 3), 1, &r0, rows, 0, &out, err, sizeof err),
                 DT_OK, NULL);
    checks++;
    if (out == r0) {
        printf("FAIL assemble one: returned its piece instead of a copy\n");
        failures++;
    }
    expect("assemble one", out, DT_FLOAT32, 2, S(1, 3), V(1, 2, 3));
    /* 0-d, with NULL starts. */
    void *s1 = T(DT_INT64, 0, NULL, V(3)), *s2 = T(DT_INT64, 0, NULL, V(4));
    check_status("assemble 0-d",
                 B->assemble(DT_INT64, 0, NULL, 2, (void *[]){s1, s2}, NULL, 1, &out, err, sizeof err), DT_OK,
                 NULL);
    expect("assemble 0-d accumulate", out, DT_INT64, 0, NULL, V(7));
    check_status("assemble nothing", B->assemble(DT_BOOL, 1, S(2), 0, NULL, NULL, 0, &out, err, sizeof err),
                 DT_OK, NULL);
    expect("assemble nothing", out, DT_BOOL, 1, S(2), V(0, 0));
    out = (void *)&out;
    check_status(
        "assemble out of bounds",
        B->assemble(DT_FLOAT32, 2, S(2, 3), 2, (void *[]){r0, c}, S(0, 0, 1, 2), 0, &out, err, sizeof err),
        DT_EBACKEND, "exceeds [2,3]");
    check_status("assemble rank mismatch",
                 B->assemble(DT_FLOAT32, 1, S(3), 1, &r0, S(0), 0, &out, err, sizeof err), DT_EBACKEND,
                 "expected 1 dims");
    check_status("assemble float16",
                 B->assemble(DT_FLOAT16, 1, S(3), 0, NULL, NULL, 0, &out, err, sizeof err), DT_EUNSUPPORTED,
                 "float16");
    checks++;
    if (out) {
        printf("FAIL assemble: *out not NULL after an error\n");
        failures++;
    }
    void *all[] = {r0, r1, c, s1, s2};
    for (int i = 0; i < 5; i++)
        B->free(all[i]);
}

static void test_errors(void) {
    void *x = T(DT_FLOAT32, 1, S(2), V(1, 2)), *out = NULL;
    dt__kattr a = attr(DT_FLOAT32);
    run("unknown kop", DT_K_COUNT, &a, NULL, 0, DT_EUNSUPPORTED, "unknown kernel op");
    run("negative kop", -1, &a, NULL, 0, DT_EUNSUPPORTED, "unknown kernel op");
    run("matmul with one input", DT_K_LINALG, &a, &x, 1, DT_EINVAL, "LINALG takes 2 inputs, got 1");
    run("binary with three inputs", DT_K_EW_BINARY, &a, (void *[]){x, x, x}, 3, DT_EINVAL,
        "EW_BINARY takes 1 to 2 inputs, got 3");
    run("full with an input", DT_K_FULL, &a, &x, 1, DT_EINVAL, "FULL takes 0 inputs");
    run("NULL input", DT_K_EW_BINARY, &a, (void *[]){x, NULL}, 2, DT_EINVAL, "input 1 is NULL");
    run("NULL attrs", DT_K_UNARY, NULL, &x, 1, DT_EINVAL, "attributes");
    /* No err buffer, or a tiny one: still a status, never a crash. */
    check_status("NULL err", B->run(DT_K_COUNT, &a, NULL, 0, &out, NULL, 0), DT_EUNSUPPORTED, NULL);
    char tiny[4] = "xyz";
    checks++;
    if (B->run(DT_K_COUNT, &a, NULL, 0, &out, tiny, sizeof tiny) != DT_EUNSUPPORTED || strcmp(tiny, "ref")) {
        printf("FAIL tiny err buffer: got \"%s\" want \"ref\"\n", tiny);
        failures++;
    }
    check_status("to_host NULL", B->to_host(NULL, NULL, 0, err, sizeof err), DT_EINVAL, "NULL");
    checks++;
    if (B->nbytes(x) != 8) {
        printf("FAIL nbytes: got %zu want 8\n", B->nbytes(x));
        failures++;
    }
    B->free(x);
}

int main(void) {
    test_host();
    test_binary();
    test_matmul();
    test_sum();
    test_copies();
    test_arange();
    test_rand();
    test_assemble();
    test_errors();
    printf("%s: %d checks, %d failures\n", failures ? "FAILED" : "ok", checks, failures);
    return failures > 100 ? 100 : failures;
}
