/*
 * The pure-C reference backend ("ref").
 *
 * It exists so that the runtime (queues, workers, placement math,
 * collectives) can be tested under ASan, TSan and valgrind without LibTorch.
 * Speed does not matter here; being obviously right does. Every op is one
 * walk over a strided index space (see `walk` in ref_int.h): broadcasting, slicing,
 * concatenation, reduction and placement of pieces are all the same loop with
 * different strides.
 *
 * An impl is a `ref_tensor`: a dense row-major buffer that no one mutates
 * after the kernel that made it returns. The buffer is reference counted
 * (`ref_buf`) for one reason: an elementwise kernel asked to run in place
 * (DT_KF_INPLACE, the core's buffer donation) writes its result into its
 * first input's buffer when that impl is the buffer's only owner, and the
 * result then shares the buffer (`same_storage`), as the torch backend's
 * in-place ATen ops do. A SLICE of the whole tensor shares it too, as the
 * torch backend's views do, so the core's accounting of views (a blob
 * holding its base, core/records/blob.c) runs in the sanitizer builds. No other
 * kernel shares storage: ref tensors are always dense.
 *
 * Storage dtypes: bool, int32, int64, float32, float64. Arithmetic
 * (EW_BINARY add/sub/mul/div, UNARY neg, REDUCE sum, LINALG mm/matmul of 2-D
 * operands, ARANGE) produces int32, int64, float32 or float64. Every other
 * kernel op or sub-op returns DT_EUNSUPPORTED.
 *
 * Status codes: malformed arguments (bad ndim, negative sizes, wrong input
 * count, NULL pointers, a wrong byte count) are DT_EINVAL; shapes that do not
 * fit together (broadcasting, matmul K, regions out of bounds) are
 * DT_EBACKEND, like a shape error from ATen; unsupported dtypes or ops are
 * DT_EUNSUPPORTED.
 *
 * Threading: there is no mutable global state, so every entry may run on any
 * thread concurrently; impls are only read after creation, and a buffer's
 * count is atomic (an impl may be freed on any thread).
 */
#include "backend/ref/ref_int.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The enum names of backend/kernels.def's rows. */
static const char *const kop_names[DT_K_COUNT] = {
#define DT_KOP(E, name) [DT_K_##E] = #E,
#include "backend/kernels.def"
};

/* ---------------------------------------------------------------- ops */

/* o = x (op) y with broadcasting. `a` (may be NULL) carries DT_KF_INPLACE for
 * a kernel whose first input is `into` (x or y): the result may then reuse
 * into's buffer (see donated). Each output element reads only the operands'
 * elements at its own position, so writing over `into` is safe. */
static dt_status binary(int op, int dt, const ref_tensor *x, const ref_tensor *y, const dt__kattr *a,
                        const ref_tensor *into, ref_tensor **out, char *err, size_t errlen) {
    /* The reference backend computes the four arithmetic ops. */
    if (op < 0 || op >= DT_BINARY_COUNT)
        return fail(err, errlen, DT_EINVAL, "ref: EW_BINARY: bad op %d", op);
    if (op > DT_BINARY_DIV)
        return fail(err, errlen, DT_EUNSUPPORTED,
                    "ref: EW_BINARY %s is not implemented by the reference backend",
                    dt_binary_op_name((dt_binary_op)op));
    if (op == DT_BINARY_DIV && !is_float(dt))
        return fail(err, errlen, DT_EUNSUPPORTED,
                    "ref: EW_BINARY div is true division and cannot produce dtype %s", dtname(dt));
    int nd = x->ndim > y->ndim ? x->ndim : y->ndim;
    int64_t shape[DT_MAX_NDIM] = {0}, xs[DT_MAX_NDIM], ys[DT_MAX_NDIM];
    walk w = {.ndim = nd, .n = 3};
    contig(x->ndim, x->shape, xs);
    contig(y->ndim, y->shape, ys);
    /* Right-align the shapes; a missing or size-1 dim repeats (stride 0). */
    for (int d = 0; d < nd; d++) {
        int xd = d - (nd - x->ndim), yd = d - (nd - y->ndim);
        int64_t sx = xd >= 0 ? x->shape[xd] : 1, sy = yd >= 0 ? y->shape[yd] : 1;
        if (sx != sy && sx != 1 && sy != 1)
            return fail(err, errlen, DT_EBACKEND, "ref: shapes %s and %s do not broadcast", SHAPE(x),
                        SHAPE(y));
        shape[d] = sx == 1 ? sy : sx;
        w.stride[1][d] = sx == 1 ? 0 : xs[xd];
        w.stride[2][d] = sy == 1 ? 0 : ys[yd];
    }
    *out = a && into ? donated(a, into, dt, nd, shape) : NULL;
    dt_status st = *out ? DT_OK : mk("EW_BINARY", dt, nd, shape, out, err, errlen);
    if (st)
        return st;
    memcpy(w.shape, shape, sizeof shape);
    contig(nd, shape, w.stride[0]);
    for (int64_t n = (*out)->numel; n > 0; n--, walk_step(&w))
        elem_op(op, *out, w.off[0], x, w.off[1], y, w.off[2]);
    return DT_OK;
}

/* A 0-d tensor on the stack holding a dt_scalar (as float64 or int64), so
 * that scalar ops reuse the broadcasting path and its conversions. Its
 * 8-byte slot can also hold one element of any storage dtype. */
typedef struct scalar_tensor {
    ref_tensor t;
    union {
        double f;
        int64_t i;
    } v;
} scalar_tensor;
static void scalar_init(scalar_tensor *s, dt_scalar v) {
    memset(s, 0, sizeof *s);
    s->t.numel = 1;
    s->t.data = &s->v;
    s->t.dtype = v.kind == DT_SCALAR_FLOAT ? DT_FLOAT64 : DT_INT64;
    v.kind == DT_SCALAR_FLOAT ? st_f(&s->t, 0, v.f) : st_i(&s->t, 0, v.i);
}

static dt_status matmul(int dt, const ref_tensor *x, const ref_tensor *y, ref_tensor **out, char *err,
                        size_t errlen) {
    if (x->ndim != 2 || y->ndim != 2 || x->shape[1] != y->shape[0])
        return fail(err, errlen, DT_EBACKEND, "ref: LINALG needs [M,K] @ [K,N], got %s @ %s", SHAPE(x),
                    SHAPE(y));
    int64_t M = x->shape[0], K = x->shape[1], N = y->shape[1], shape[2] = {M, N};
    dt_status st = mk("LINALG", dt, 2, shape, out, err, errlen);
    if (st)
        return st;
    /* out[i,j] += x[i,k] * y[k,j] for k ascending, every step in the output
     * dtype (the product goes through a one-element temporary of that
     * dtype), like a naive kernel. The output starts at zero. */
    scalar_tensor prod;
    scalar_init(&prod, dt_scalar_int(0));
    prod.t.dtype = (dt_dtype)dt;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++)
            for (int64_t k = 0; k < K; k++) {
                elem_op(DT_BINARY_MUL, &prod.t, 0, x, i * K + k, y, k * N + j);
                elem_op(DT_BINARY_ADD, *out, i * N + j, *out, i * N + j, &prod.t, 0);
            }
    return DT_OK;
}

static dt_status sum(const dt__kattr *a, const ref_tensor *x, ref_tensor **out, char *err, size_t errlen) {
    uint64_t mask = a->dims_mask;
    if (a->flags & DT_KF_ALL)
        mask = x->ndim ? ~0ull >> (64 - x->ndim) : 0;
    if (mask >> x->ndim)
        return fail(err, errlen, DT_EBACKEND, "ref: REDUCE sum dims_mask 0x%llx names dims beyond shape %s",
                    (unsigned long long)mask, SHAPE(x));
    int keep = (a->flags & DT_KF_KEEPDIM) != 0, nd = 0;
    int64_t kshape[DT_MAX_NDIM], kstride[DT_MAX_NDIM], shape[DT_MAX_NDIM];
    for (int d = 0; d < x->ndim; d++) {
        int red = (mask >> d) & 1;
        kshape[d] = red ? 1 : x->shape[d];
        if (!red || keep)
            shape[nd++] = kshape[d];
    }
    /* Accumulate in a float64 or int64 tensor shaped like the output, then
     * convert. Walking the input in row-major order adds each output's terms
     * in ascending index order. */
    ref_tensor *acc;
    dt_status st = mk("REDUCE", a->dtype, nd, shape, out, err, errlen);
    if (st || (st = mk("REDUCE", is_float(a->dtype) ? DT_FLOAT64 : DT_INT64, nd, shape, &acc, err, errlen))) {
        ref_free(*out);
        *out = NULL;
        return st;
    }
    walk w = {.ndim = x->ndim, .n = 2};
    memcpy(w.shape, x->shape, sizeof x->shape);
    contig(x->ndim, x->shape, w.stride[0]);
    contig(x->ndim, kshape, kstride);
    for (int d = 0; d < x->ndim; d++)
        w.stride[1][d] = (mask >> d) & 1 ? 0 : kstride[d];
    for (int64_t n = x->numel; n > 0; n--, walk_step(&w))
        elem_op(DT_BINARY_ADD, acc, w.off[1], acc, w.off[1], x, w.off[0]);
    for (int64_t i = 0; i < acc->numel; i++)
        cvt(*out, i, acc, i);
    ref_free(acc);
    return DT_OK;
}

static dt_status cat(int dim, void *const *in, int n, ref_tensor **out, char *err, size_t errlen) {
    const ref_tensor *x = in[0];
    int nd = x->ndim;
    if (dim < 0)
        dim += nd;
    if (dim < 0 || dim >= nd)
        return fail(err, errlen, DT_EBACKEND, "ref: CAT dim %d out of range for shape %s", dim, SHAPE(x));
    int64_t shape[DT_MAX_NDIM], start[DT_MAX_NDIM] = {0}, zero[DT_MAX_NDIM] = {0};
    memcpy(shape, x->shape, sizeof shape);
    shape[dim] = 0;
    for (int i = 0; i < n; i++) {
        const ref_tensor *p = in[i];
        int ok = p->ndim == nd;
        for (int d = 0; ok && d < nd; d++)
            ok = d == dim || p->shape[d] == x->shape[d];
        if (!ok)
            return fail(err, errlen, DT_EBACKEND,
                        "ref: CAT input %d has shape %s, expected %s outside dim %d", i, SHAPE(p), SHAPE(x),
                        dim);
        shape[dim] += p->shape[dim];
    }
    dt_status st = mk("CAT", x->dtype, nd, shape, out, err, errlen);
    for (int i = 0; !st && i < n; i++) {
        const ref_tensor *p = in[i];
        copy_region(*out, start, p, zero, nd, p->shape, 0);
        start[dim] += p->shape[dim];
    }
    return st;
}

static dt_status sum_n(void *const *in, int n, ref_tensor **out, char *err, size_t errlen) {
    const ref_tensor *x = in[0];
    for (int i = 1; i < n; i++) {
        const ref_tensor *p = in[i];
        if (p->ndim != x->ndim || memcmp(p->shape, x->shape, (size_t)x->ndim * sizeof *x->shape))
            return fail(err, errlen, DT_EBACKEND, "ref: SUM_N input %d has shape %s, expected %s", i,
                        SHAPE(p), SHAPE(x));
    }
    dt_status st = mk("SUM_N", x->dtype, x->ndim, x->shape, out, err, errlen);
    if (st)
        return st;
    ref_tensor *o = *out;
    for (int64_t e = 0; e < o->numel; e++)
        cvt(o, e, x, e);
    for (int i = 1; i < n; i++)
        for (int64_t e = 0; e < o->numel; e++)
            elem_op(DT_BINARY_ADD, o, e, o, e, in[i], e);
    return DT_OK;
}

/* Counter-based randomness: element g of the global tensor (its row-major
 * flat index) gets draws 2g+1 and 2g+2 of a splitmix64 stream started at
 * `seed`. A value depends only on (seed, g), never on which region a device
 * asks for, which is what makes random tensors placement-invariant. */
static uint64_t draw(uint64_t seed, uint64_t g, unsigned k) {
    uint64_t z = seed + (2 * g + k + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rand_value(int kop, int dt, uint64_t seed, uint64_t g) {
    if (kop == DT_K_RAND) /* as many bits as the dtype holds, so float32 never rounds up to 1 */
        return dt == DT_FLOAT32 ? (double)(draw(seed, g, 0) >> 40) * 0x1p-24
                                : (double)(draw(seed, g, 0) >> 11) * 0x1p-53;
    /* Box-Muller; 1 - u1 lies in (0, 1], so the log is finite. */
    double u1 = (double)(draw(seed, g, 0) >> 11) * 0x1p-53, u2 = (double)(draw(seed, g, 1) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586476925 * u2);
}

static dt_status rand_region(int kop, const dt__kattr *a, ref_tensor **out, char *err, size_t errlen) {
    /* randint (DT_KRAND_INT): low + draw mod (high - low), any stored dtype
     * (its own stream, not torch's: the ref backend only promises the range). */
    int randint = kop == DT_K_RAND && a->sub == DT_KRAND_INT;
    if (randint && (esize(a->dtype) == 0 || a->scalar2.i <= a->scalar.i))
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: randint of dtype %s in [%lld, %lld)",
                    dtname(a->dtype), (long long)a->scalar.i, (long long)a->scalar2.i);
    if (!randint && !is_float(a->dtype))
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: %s does not support dtype %s", kop_names[kop],
                    dtname(a->dtype));
    if (a->gndim != a->ndim || a->ndim < 0 || a->ndim > DT_MAX_NDIM || numel_of(a->gndim, a->gshape, 8) < 0)
        return fail(err, errlen, DT_EBACKEND, "ref: %s: region of %d dims in global shape %s", kop_names[kop],
                    a->ndim, fmt_shape(a->gndim, a->gshape).s);
    dt_status st = region_ok(kop_names[kop], a->ndim, a->start, a->shape, a->gshape, err, errlen);
    if (st)
        return st;
    if ((st = mk(kop_names[kop], a->dtype, a->ndim, a->shape, out, err, errlen)))
        return st;
    walk w = {.ndim = a->ndim, .n = 2};
    memcpy(w.shape, a->shape, sizeof w.shape);
    contig(a->ndim, a->shape, w.stride[0]);
    contig(a->ndim, a->gshape, w.stride[1]);
    w.off[1] = dot(a->ndim, a->start, w.stride[1]);
    for (int64_t n = (*out)->numel; n > 0; n--, walk_step(&w))
        if (randint)
            st_i(*out, w.off[0],
                 (int64_t)((uint64_t)a->scalar.i + draw(a->seed, (uint64_t)w.off[1], 0) %
                                                       ((uint64_t)a->scalar2.i - (uint64_t)a->scalar.i)));
        else
            st_f(*out, w.off[0], rand_value(kop, a->dtype, a->seed, (uint64_t)w.off[1]));
    return DT_OK;
}

static dt_status arange(const dt__kattr *a, ref_tensor **out, char *err, size_t errlen) {
    dt_status st = mk("ARANGE", a->dtype, 1, a->shape, out, err, errlen);
    if (st)
        return st;
    ref_tensor *o = *out;
    /* torch computes start + i * step in the accumulation type: double for
     * floats, int64 (wrapping) for integers. */
    for (int64_t i = 0; i < o->numel; i++) {
        int64_t k = a->start[0] + i;
        if (is_float(a->dtype))
            st_f(o, i, a->f[0] + (double)k * a->f[2]);
        else
            st_i(o, i, (int64_t)((uint64_t)f2i(a->f[0]) + (uint64_t)k * (uint64_t)f2i(a->f[2])));
    }
    return DT_OK;
}

static dt_status slice(const dt__kattr *a, const ref_tensor *x, ref_tensor **out, char *err, size_t errlen) {
    if (a->ndim != x->ndim)
        return fail(err, errlen, DT_EBACKEND, "ref: SLICE of %d dims from shape %s", a->ndim, SHAPE(x));
    dt_status st = region_ok("SLICE", x->ndim, a->start, a->shape, x->shape, err, errlen);
    if (st)
        return st;
    int whole = x->buf != NULL;
    for (int d = 0; d < x->ndim && whole; d++)
        whole = a->start[d] == 0 && a->shape[d] == x->shape[d];
    if (whole) {
        if (!(*out = malloc(sizeof **out)))
            return fail(err, errlen, DT_ENOMEM, "ref: out of memory in SLICE");
        **out = *x;
        atomic_fetch_add_explicit(&x->buf->refs, 1, memory_order_relaxed);
        return DT_OK;
    }
    if ((st = mk("SLICE", x->dtype, x->ndim, a->shape, out, err, errlen)))
        return st;
    int64_t zero[DT_MAX_NDIM] = {0};
    copy_region(*out, zero, x, a->start, x->ndim, a->shape, 0);
    return DT_OK;
}

/* A family kernel's sub-op the reference backend does not compute. */
static dt_status unsupported_sub(const char *kname, const char *sub_name, int sub, char *err, size_t errlen) {
    if (sub_name)
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: %s %s is not implemented by the reference backend",
                    kname, sub_name);
    return fail(err, errlen, DT_EUNSUPPORTED, "ref: %s sub-op %d is not implemented by the reference backend",
                kname, sub);
}

static int is_one(dt_scalar v) { return v.kind == DT_SCALAR_FLOAT ? v.f == 1.0 : v.i == 1; }

/* EW_BINARY (backend.h): x (sub) y of two inputs, or of the input and
 * `scalar` (scalar first with DT_KF_REVERSED); ADD and SUB scale y by
 * `scalar2` (computed as y * alpha in the result dtype, then the op). */
static dt_status ew_binary(const dt__kattr *a, int dt, void *const *in, int n_in, ref_tensor **out, char *err,
                           size_t errlen) {
    const ref_tensor *t = in[0];
    scalar_tensor s;
    const ref_tensor *x = t, *y = n_in == 2 ? (const ref_tensor *)in[1] : NULL;
    if (!y) {
        scalar_init(&s, a->scalar);
        if (a->flags & DT_KF_REVERSED) {
            x = &s.t;
            y = t;
        } else {
            y = &s.t;
        }
    }
    if ((a->sub != DT_BINARY_ADD && a->sub != DT_BINARY_SUB) || is_one(a->scalar2))
        return binary(a->sub, dt, x, y, a, t, out, err, errlen);
    scalar_tensor alpha;
    scalar_init(&alpha, a->scalar2);
    ref_tensor *scaled;
    dt_status st = binary(DT_BINARY_MUL, dt, y, &alpha.t, NULL, NULL, &scaled, err, errlen);
    if (st)
        return st;
    st = binary(a->sub, dt, x, scaled, NULL, NULL, out, err, errlen);
    ref_free(scaled);
    return st;
}

dt_status ref_run(int kop, const dt__kattr *a, void *const *in, int n_in, void **out, char *err,
                  size_t errlen) {
    /* The kernel ops this backend runs: the inputs each takes (min..max; max
     * -1: any number), and whether it computes (so needs an arithmetic
     * output dtype rather than any storage dtype). Of the family kernels it
     * runs the sub-ops the core's own C tests use: EW_BINARY add/sub/mul/div,
     * UNARY neg, REDUCE sum and LINALG mm/matmul of 2-D operands. */
    static const struct {
        char runs;
        signed char min, max;
        char computes;
    } ops[DT_K_COUNT] = {
        [DT_K_SLICE] = {1, 1, 1, 0},     [DT_K_FULL] = {1, 0, 0, 0},   [DT_K_EMPTY] = {1, 0, 0, 0},
        [DT_K_ARANGE] = {1, 0, 0, 1},    [DT_K_RAND] = {1, 0, 0, 0},   [DT_K_RANDN] = {1, 0, 0, 0},
        [DT_K_CAT] = {1, 1, -1, 0},      [DT_K_SUM_N] = {1, 1, -1, 0}, [DT_K_ZEROS_LIKE] = {1, 1, 1, 0},
        [DT_K_EW_BINARY] = {1, 1, 2, 1}, [DT_K_UNARY] = {1, 1, 1, 1},  [DT_K_REDUCE] = {1, 1, 1, 1},
        [DT_K_LINALG] = {1, 2, 2, 1},
    };
    if (out)
        *out = NULL;
    if (!out || !a)
        return fail(err, errlen, DT_EINVAL, "ref: run: NULL %s", out ? "attributes" : "out");
    if (kop < 0 || kop >= DT_K_COUNT)
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: unknown kernel op %d", kop);
    const char *name = kop_names[kop];
    if (!ops[kop].runs)
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: %s is not implemented by the reference backend",
                    name);
    if (n_in < ops[kop].min || (ops[kop].max >= 0 && n_in > ops[kop].max)) {
        if (ops[kop].max < 0)
            return fail(err, errlen, DT_EINVAL, "ref: %s takes at least %d inputs, got %d", name,
                        ops[kop].min, n_in);
        if (ops[kop].min == ops[kop].max)
            return fail(err, errlen, DT_EINVAL, "ref: %s takes %d inputs, got %d", name, ops[kop].min, n_in);
        return fail(err, errlen, DT_EINVAL, "ref: %s takes %d to %d inputs, got %d", name, ops[kop].min,
                    ops[kop].max, n_in);
    }
    for (int i = 0; i < n_in; i++)
        if (!in || !in[i])
            return fail(err, errlen, DT_EINVAL, "ref: %s: input %d is NULL", name, i);
    const ref_tensor *x = n_in ? in[0] : NULL;
    int dt = a->dtype;
    if (ops[kop].computes && !is_arith(dt))
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: %s does not support dtype %s", name, dtname(dt));
    ref_tensor *o = NULL;
    dt_status st;
    scalar_tensor s;
    switch (kop) {
    case DT_K_SLICE:
        st = slice(a, x, &o, err, errlen);
        break;
    case DT_K_FULL:
        if ((st = mk(name, a->dtype, a->ndim, a->shape, &o, err, errlen)))
            break;
        scalar_init(&s, a->scalar);
        for (int64_t i = 0; i < o->numel; i++)
            cvt(o, i, &s.t, 0);
        break;
    case DT_K_EMPTY:
        st = mk(name, a->dtype, a->ndim, a->shape, &o, err, errlen);
        break;
    case DT_K_ZEROS_LIKE:
        st = mk(name, x->dtype, x->ndim, x->shape, &o, err, errlen);
        break;
    case DT_K_ARANGE:
        st = arange(a, &o, err, errlen);
        break;
    case DT_K_RAND:
    case DT_K_RANDN:
        st = rand_region(kop, a, &o, err, errlen);
        break;
    case DT_K_EW_BINARY:
        st = ew_binary(a, dt, in, n_in, &o, err, errlen);
        break;
    case DT_K_UNARY:
        if (a->sub != DT_UNARY_NEG) {
            st = unsupported_sub(name, dt_unary_op_name((dt_unary_op)a->sub), a->sub, err, errlen);
            break;
        }
        /* x * -1 is exactly -x in every dtype, -0.0 and int wrap-around included. */
        scalar_init(&s, dt_scalar_int(-1));
        st = binary(DT_BINARY_MUL, dt, x, &s.t, a, x, &o, err, errlen);
        break;
    case DT_K_LINALG:
        if (a->sub != DT_KL_MM && a->sub != DT_KL_MATMUL) {
            st = unsupported_sub(name, NULL, a->sub, err, errlen);
            break;
        }
        st = matmul(dt, x, in[1], &o, err, errlen);
        break;
    case DT_K_REDUCE:
        if ((a->sub & 0xff) != DT_REDUCE_SUM || a->sub >> 8 != DT_KR_PLAIN) {
            st = unsupported_sub(name, dt_reduce_op_name((dt_reduce_op)(a->sub & 0xff)), a->sub, err, errlen);
            break;
        }
        st = sum(a, x, &o, err, errlen);
        break;
    case DT_K_CAT:
        st = cat(a->dim, in, n_in, &o, err, errlen);
        break;
    case DT_K_SUM_N:
        st = sum_n(in, n_in, &o, err, errlen);
        break;
    default:
        st = fail(err, errlen, DT_EUNSUPPORTED, "ref: %s is not implemented", name);
        break;
    }
    if (st == DT_OK)
        *out = o;
    return st;
}

/* ------------------------------------------------------ other entries */

static size_t ref_nbytes(const void *impl) {
    const ref_tensor *t = impl;
    return t ? (size_t)t->numel * esize(t->dtype) : 0;
}

static int ref_describe(const void *impl, dt_dtype *dtype, int64_t *shape) {
    const ref_tensor *t = impl;
    if (!t)
        return -1;
    *dtype = t->dtype;
    memcpy(shape, t->shape, sizeof(int64_t) * (size_t)t->ndim);
    return t->ndim;
}

static dt_status ref_from_host(dt_dtype dtype, int ndim, const int64_t *shape, const void *data, void **out,
                               char *err, size_t errlen) {
    ref_tensor *o;
    if (!out)
        return fail(err, errlen, DT_EINVAL, "ref: from_host: NULL out");
    *out = NULL;
    dt_status st = mk("from_host", dtype, ndim, shape, &o, err, errlen);
    if (st)
        return st;
    if (o->numel && !data) {
        st = fail(err, errlen, DT_EINVAL, "ref: from_host: NULL data for shape %s", SHAPE(o));
        ref_free(o);
        return st;
    }
    if (o->numel)
        memcpy(o->data, data, ref_nbytes(o));
    *out = o;
    return DT_OK;
}

static dt_status ref_to_host(const void *impl, void *buf, size_t nbytes, char *err, size_t errlen) {
    const ref_tensor *t = impl;
    if (!t)
        return fail(err, errlen, DT_EINVAL, "ref: to_host: NULL impl");
    size_t want = ref_nbytes(t);
    if (nbytes != want)
        return fail(err, errlen, DT_EINVAL, "ref: to_host: shape %s of %s is %zu bytes, got a buffer of %zu",
                    SHAPE(t), dtname(t->dtype), want, nbytes);
    if (want && !buf)
        return fail(err, errlen, DT_EINVAL, "ref: to_host: NULL buffer");
    if (want)
        memcpy(buf, t->data, want);
    return DT_OK;
}

static dt_status ref_assemble(dt_dtype dtype, int ndim, const int64_t *shape, int n, void *const *pieces,
                              const int64_t *starts, int accumulate, void **out, char *err, size_t errlen) {
    if (!out)
        return fail(err, errlen, DT_EINVAL, "ref: assemble: NULL out");
    *out = NULL;
    if (n < 0 || (n && (!pieces || (ndim && !starts))))
        return fail(err, errlen, DT_EINVAL, "ref: assemble: bad pieces (n = %d)", n);
    ref_tensor *o;
    dt_status st = mk("assemble", dtype, ndim, shape, &o, err, errlen);
    if (st)
        return st;
    int64_t zero[DT_MAX_NDIM] = {0};
    for (int i = 0; i < n; i++) {
        const ref_tensor *p = pieces[i];
        /* No pointer arithmetic on a NULL `starts` when ndim is 0. */
        const int64_t *at = ndim ? starts + (size_t)i * (size_t)ndim : zero;
        if (!p)
            st = fail(err, errlen, DT_EINVAL, "ref: assemble: piece %d is NULL", i);
        else if (p->ndim != ndim)
            st = fail(err, errlen, DT_EBACKEND, "ref: assemble: piece %d has shape %s, expected %d dims", i,
                      SHAPE(p), ndim);
        else
            st = region_ok("assemble", ndim, at, p->shape, shape, err, errlen);
        if (st) {
            ref_free(o);
            return st;
        }
        copy_region(o, at, p, zero, ndim, p->shape, accumulate);
    }
    *out = o;
    return DT_OK;
}

static dt_dtype ref_default_dtype(void) { return DT_FLOAT32; }

const dt__backend dt__backend_ref = {
    .name = "ref",
    .run = ref_run,
    .free = ref_free,
    .nbytes = ref_nbytes,
    .from_host = ref_from_host,
    .to_host = ref_to_host,
    .from_dlpack = NULL,
    .to_dlpack = NULL,
    .dlpack_delete = NULL,
    .assemble = ref_assemble,
    .worker_init = NULL,
    .default_dtype = ref_default_dtype,
    .same_storage = ref_same_storage,
    .run_chain = ref_run_chain,
    .describe = ref_describe,
    /* CPU: the core's host streams and events serve (NULL slots). */
    .api_version = DT_BACKEND_API_VERSION,
};
