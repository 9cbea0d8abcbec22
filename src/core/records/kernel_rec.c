/*
 * Kernel records (dt__krec, kernel_rec.h): the compact form a kernel takes
 * once it is queued, and its packed attributes.
 *
 * Records: a header (blobs bound by pointer, named by dt__blob.id) and the
 * attributes packed to what they hold, from three pools of size classes (an
 * elementwise kernel takes the smallest) or, past the largest, a plain
 * allocation.
 *
 * Packed backend attributes (a dt__kattr, lossless: every field that is not
 * zero is kept, so no per-op table says which fields an op reads; no bytes
 * at all for a core kernel that has none):
 *   u16 present; then, in this order, each field whose bit is set:
 *   bit 0..6  dtype sub flags ndim dim gndim nints    i32 each
 *   bit 7, 8  dims_mask seed                           u64
 *   bit 9, 10 scalar scalar2                           i32 kind, i64 i, f64 f
 *   bit 11-13 f[0] f[1] f[2]                           f64
 *   bit 14    text (einsum)                            u32 n, n bytes, NUL
 *   bit 15    arrays: u8 len[5] (shape start gshape step ints, each up to
 *             its last non-zero entry), then those entries, i64 each.
 * A collective's attributes (dt__collattr, comm/comm.h):
 *   u64 group  u64 seq  u8 kind ndim dim_a dim_b type  i32 dtype  u32 n
 *   i64 shapes[n * ndim]  and for reduce-scatter/all-to-all i64 starts[n], lens[n]
 *   (type: the device type whose comm holds the group).
 * A local assembly's (DT_KC_ASSEMBLE, dt__asmattr):
 *   i32 dtype  u8 ndim  u8 n  i64 shape[ndim]  i64 starts[n * ndim]
 *   (n: the kernel's inputs, placed in order at their starts).
 * Both are little-endian, the same bytes in memory and in an encoded batch
 * (kernel_codec.c).
 *
 * Threads: records are made on the controller (or a decoding thread) and
 * freed by workers; the pools are thread-safe.
 */
#include <stdio.h>
#include <string.h>

#include "core/records/bcast.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "core/records/gate.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/step.h"
#include "core/records/ufn.h"

/* ---------------------------------------------------------------- records */

#define KREC_HDR offsetof(dt__krec, attr)
#define KREC_CLASSES DT__KREC_CLASSES
#define KREC_MALLOC DT__KREC_MALLOC
static const size_t class_size[KREC_CLASSES] = {DT__KREC_SMALL, 256, 640};
dt__pool dt__bcast_pool = DT__POOL_INIT(DT__BCAST_BYTES(DT__BCAST_POOLED, DT__KATTR_PACK_MAX));
dt__pool dt__krec_pools[KREC_CLASSES] = {DT__POOL_INIT(DT__KREC_SMALL), DT__POOL_INIT(256),
                                         DT__POOL_INIT(640)};
_Static_assert(offsetof(dt__krec, attr) < DT__KREC_SMALL, "the smallest class holds a header");

size_t dt__krec_footprint(size_t alen) {
    for (int c = 0; c < KREC_CLASSES; c++)
        if (KREC_HDR + alen <= class_size[c])
            return class_size[c];
    return KREC_HDR + alen;
}

dt__krec *dt__krec_alloc(size_t alen) { return dt__krec_alloc_in(NULL, alen); }

int dt__krec_class(size_t alen) {
    for (int c = 0; c < KREC_CLASSES; c++)
        if (KREC_HDR + alen <= class_size[c])
            return c;
    return KREC_MALLOC;
}

dt__krec *dt__krec_alloc_big(size_t alen) { return alen > UINT32_MAX ? NULL : dt__malloc(KREC_HDR + alen); }

dt__krec *dt__krec_alloc_in(dt__pool_lists *mine, size_t alen) {
    if (alen > UINT32_MAX)
        return NULL;
    int cls = dt__krec_class(alen);
    dt__krec *k = dt__krec_alloc_raw(mine, cls, alen);
    if (!k)
        return NULL;
    memset(k, 0, KREC_HDR); /* a constant size: inline stores */
    k->cls = (uint8_t)cls;
    k->alen = (uint32_t)alen;
    return k;
}

void dt__krec_free(dt__krec *k) {
    if (!k)
        return;
    if (k->cls == KREC_MALLOC)
        dt__free(k);
    else
        dt__pool_free(&dt__krec_pools[k->cls], k);
}

void dt__krec_discard(dt__krec *k) {
    if (!k)
        return;
    if (k->kop == DT_KC_STEP) { /* a run's slot: its kernels' outputs there */
        dt__step *st = k->handle;
        int d = dt__step_slot_index(st, k);
        for (int i = 0; i < st->k; i++)
            dt__blob_release(dt__bgroup_ptrs(dt__step_img_at(st, i)->gout)[d]);
        dt__step_unref(st);
        return;
    }
    /* A slot's inputs from a group its shared record holds are borrowed. */
    dt__krec_release_blobs(k, k->kop == DT_KC_BCAST ? k->handle : NULL, -1);
    if (k->handle) {
        if (k->kop == DT_KC_FETCH || k->kop == DT_KC_SYNC)
            dt_future_release(k->handle);
        else if (k->kop == DT_KC_GATE)
            dt__debug_gate_unref(k->handle);
        else if (k->kop == DT_KC_RELEASE)
            dt__blob_free_dead(k->handle);
        else if (k->kop == DT_KC_BCAST) {
            dt__bcast_unref(k->handle); /* a slot: the shared record holds it */
            return;
        } else if (k->kop == DT_KC_USER)
            dt__ufn_unref(k->handle);
    }
    dt__krec_free(k);
}

void dt__kbatch_free(dt__kbatch *b) {
    for (int i = 0; i < b->n; i++)
        for (dt__krec *k = b->s[i].head, *next; k; k = next) {
            next = k->next;
            dt__krec_discard(k);
        }
    dt__free(b->s);
    b->s = NULL;
    b->n = 0;
}

/* ---------------------------------------------------- little-endian bytes */

static uint64_t dbits(double d) {
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static double bitsd(uint64_t u) {
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

int64_t dt__collattr_at(const uint8_t *arr, size_t i) {
    const uint8_t *p = arr + 8 * i;
    return (int64_t)dt__le_get(&p, 8);
}

/* ------------------------------------------------- packed backend attrs */

enum { NI32 = 7, SCALAR_BYTES = 20 };

static void kattr_i32s(const dt__kattr *a, int32_t *v) {
    v[0] = a->dtype;
    v[1] = a->sub;
    v[2] = a->flags;
    v[3] = a->ndim;
    v[4] = a->dim;
    v[5] = a->gndim;
    v[6] = a->nints;
}

static int scalar_set(const dt_scalar *s) { return s->kind != 0 || s->i != 0 || dbits(s->f) != 0; }

/* The arrays in packing order, with their capacities. */
static void kattr_arrays(const dt__kattr *a, const int64_t **arr, int *cap) {
    arr[0] = a->shape, cap[0] = DT_MAX_NDIM;
    arr[1] = a->start, cap[1] = DT_MAX_NDIM;
    arr[2] = a->gshape, cap[2] = DT_MAX_NDIM;
    arr[3] = a->step, cap[3] = DT_MAX_NDIM;
    arr[4] = a->ints, cap[4] = 2 * DT_MAX_NDIM;
}

/* Entries of v[0..cap) up to its last nonzero one. */
static int used_len(const int64_t *v, int cap) {
    int n = cap;
    while (n > 0 && v[n - 1] == 0)
        n--;
    return n;
}

/* The arrays' used lengths (packing order); 0 when all are zero. Most
 * kernels set none (elementwise) or a few: one pass of ORs over the 48
 * entries, of constant count (the compiler's vector loop), first. */
static int kattr_lens(const dt__kattr *a, const int64_t **arr, int *len) {
    uint64_t any = 0;
    for (int i = 0; i < DT_MAX_NDIM; i++)
        any |= (uint64_t)(a->shape[i] | a->start[i] | a->gshape[i] | a->step[i] | a->ints[i] |
                          a->ints[DT_MAX_NDIM + i]);
    if (!any) {
        memset(len, 0, 5 * sizeof *len);
        return 0;
    }
    int cap[5];
    kattr_arrays(a, arr, cap);
    for (int j = 0; j < 5; j++)
        len[j] = used_len(arr[j], cap[j]);
    return 1;
}

size_t dt__kattr_pack_size(const dt__kattr *a) {
    int32_t v[NI32];
    kattr_i32s(a, v);
    size_t n = 2;
    for (int i = 0; i < NI32; i++)
        n += v[i] ? 4 : 0;
    n += a->dims_mask ? 8 : 0;
    n += a->seed ? 8 : 0;
    n += scalar_set(&a->scalar) ? SCALAR_BYTES : 0;
    n += scalar_set(&a->scalar2) ? SCALAR_BYTES : 0;
    for (int i = 0; i < 3; i++)
        n += dbits(a->f[i]) ? 8 : 0;
    if (a->text)
        n += 4 + strlen(a->text) + 1;
    const int64_t *arr[5];
    int len[5];
    if (kattr_lens(a, arr, len))
        n += 5 + 8 * (size_t)(len[0] + len[1] + len[2] + len[3] + len[4]);
    return n;
}

static void put_scalar(uint8_t **p, const dt_scalar *s) {
    dt__le_put(p, (uint32_t)s->kind, 4);
    dt__le_put(p, (uint64_t)s->i, 8);
    dt__le_put(p, dbits(s->f), 8);
}

/* The present bits of a's fields but the arrays' (bit 15): bit i < 7 for
 * kattr_i32s' v[i], then dims_mask, seed, scalar, scalar2, f[0..2], text.
 * Written out, no loop: it runs for every packed kernel. */
static unsigned kattr_present(const dt__kattr *a, const int32_t *v) {
    unsigned p = (unsigned)(v[0] != 0) | (unsigned)(v[1] != 0) << 1 | (unsigned)(v[2] != 0) << 2 |
                 (unsigned)(v[3] != 0) << 3 | (unsigned)(v[4] != 0) << 4 | (unsigned)(v[5] != 0) << 5 |
                 (unsigned)(v[6] != 0) << 6;
    p |= (unsigned)(a->dims_mask != 0) << 7 | (unsigned)(a->seed != 0) << 8;
    p |= (unsigned)scalar_set(&a->scalar) << 9 | (unsigned)scalar_set(&a->scalar2) << 10;
    p |= (unsigned)(dbits(a->f[0]) != 0) << 11 | (unsigned)(dbits(a->f[1]) != 0) << 12 |
         (unsigned)(dbits(a->f[2]) != 0) << 13;
    return p | (unsigned)(a->text != NULL) << 14;
}

size_t dt__kattr_pack(const dt__kattr *a, uint8_t *out) {
    int32_t v[NI32];
    kattr_i32s(a, v);
    const int64_t *arr[5];
    int len[5];
    int any = kattr_lens(a, arr, len);
    unsigned present = kattr_present(a, v) | (any ? 1u << 15 : 0);
    uint8_t *p = out;
    dt__le_put(&p, present, 2);
    for (unsigned m = present & 0x7fu; m; m &= m - 1) /* the set ints only */
        dt__le_put(&p, (uint32_t)v[__builtin_ctz(m)], 4);
    if (present & 1u << 7)
        dt__le_put(&p, a->dims_mask, 8);
    if (present & 1u << 8)
        dt__le_put(&p, a->seed, 8);
    if (present & 1u << 9)
        put_scalar(&p, &a->scalar);
    if (present & 1u << 10)
        put_scalar(&p, &a->scalar2);
    for (unsigned m = present >> 11 & 7u; m; m &= m - 1)
        dt__le_put(&p, dbits(a->f[__builtin_ctz(m)]), 8);
    if (present & 1u << 14) {
        size_t tn = strlen(a->text);
        dt__le_put(&p, tn, 4);
        memcpy(p, a->text, tn + 1);
        p += tn + 1;
    }
    if (any) {
        for (int j = 0; j < 5; j++)
            dt__le_put(&p, (uint64_t)len[j], 1);
        for (int j = 0; j < 5; j++) {
            if (DT__LE_HOST) { /* the entries' own bytes: one copy per array */
                memcpy(p, arr[j], 8 * (size_t)len[j]);
                p += 8 * (size_t)len[j];
                continue;
            }
            for (int i = 0; i < len[j]; i++)
                dt__le_put(&p, (uint64_t)arr[j][i], 8);
        }
    }
    return (size_t)(p - out);
}

/* Parses packed attributes of `n` bytes into a, when not NULL. 0 when well
 * formed and exactly n bytes long. Every field but the arrays is assigned;
 * array entries are written up to their packed length and must be zero
 * beyond it: a is zeroed by the caller, or (lens not NULL) holds an earlier
 * parse whose array lengths are lens[], and the entries that parse wrote
 * past this one's lengths are cleared here (lens then gets this parse's). */
static int kattr_parse(const uint8_t *buf, size_t n, dt__kattr *a, uint8_t *lens) {
    if (n == 0)
        return 0; /* a core kernel's: no attributes */
    const uint8_t *p = buf, *end = buf + n;
#define NEED(k)                                                                                              \
    do {                                                                                                     \
        if ((size_t)(end - p) < (size_t)(k))                                                                 \
            return -1;                                                                                       \
    } while (0)
    NEED(2);
    unsigned present = (unsigned)dt__le_get(&p, 2);
    int32_t v[NI32] = {0};
    for (int i = 0; i < NI32; i++)
        if (present & 1u << i) {
            NEED(4);
            v[i] = (int32_t)(uint32_t)dt__le_get(&p, 4);
        }
    /* The core and the backends index arrays with these. */
    if (v[3] < 0 || v[3] > DT_MAX_NDIM || v[5] < 0 || v[5] > DT_MAX_NDIM || v[6] < 0 ||
        v[6] > 2 * DT_MAX_NDIM)
        return -1;
    uint64_t mask = 0, seed = 0;
    if (present & 1u << 7) {
        NEED(8);
        mask = dt__le_get(&p, 8);
    }
    if (present & 1u << 8) {
        NEED(8);
        seed = dt__le_get(&p, 8);
    }
    /* Zeroed whole and copied bytewise: the padding after kind stays 0, so
     * an unpacked dt__kattr is the same bytes every time. */
    dt_scalar sc[2];
    memset(sc, 0, sizeof sc);
    for (int j = 0; j < 2; j++)
        if (present & 1u << (9 + j)) {
            NEED(SCALAR_BYTES);
            sc[j].kind = (int32_t)(uint32_t)dt__le_get(&p, 4);
            sc[j].i = (int64_t)dt__le_get(&p, 8);
            sc[j].f = bitsd(dt__le_get(&p, 8));
        }
    double f[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++)
        if (present & 1u << (11 + i)) {
            NEED(8);
            f[i] = bitsd(dt__le_get(&p, 8));
        }
    const char *text = NULL;
    if (present & 1u << 14) {
        NEED(4);
        uint64_t tn = dt__le_get(&p, 4);
        if ((uint64_t)(end - p) < tn + 1 || p[tn] != 0 || memchr(p, 0, tn))
            return -1;
        text = (const char *)p;
        p += tn + 1;
    }
    if (a) {
        a->dtype = v[0], a->sub = v[1], a->flags = v[2], a->ndim = v[3];
        a->dim = v[4], a->gndim = v[5], a->nints = v[6];
        a->dims_mask = mask, a->seed = seed;
        memcpy(&a->scalar, &sc[0], sizeof sc[0]);
        memcpy(&a->scalar2, &sc[1], sizeof sc[1]);
        memcpy(a->f, f, sizeof f);
        a->text = text;
    }
    int len[5] = {0, 0, 0, 0, 0};
    dt__kattr dummy;
    const int64_t *arr[5];
    int cap[5];
    kattr_arrays(a ? a : &dummy, arr, cap);
    if (present & 1u << 15) {
        NEED(5);
        for (int j = 0; j < 5; j++) {
            len[j] = (int)dt__le_get(&p, 1);
            if (len[j] > cap[j])
                return -1;
        }
        for (int j = 0; j < 5; j++) {
            NEED(8 * (size_t)len[j]);
            for (int i = 0; i < len[j]; i++) {
                int64_t x = (int64_t)dt__le_get(&p, 8);
                if (a)
                    ((int64_t *)arr[j])[i] = x;
            }
        }
    }
    if (a && lens)
        for (int j = 0; j < 5; j++) {
            if (lens[j] > len[j])
                memset((int64_t *)arr[j] + len[j], 0, 8 * (size_t)(lens[j] - len[j]));
            lens[j] = (uint8_t)len[j];
        }
#undef NEED
    return p == end ? 0 : -1;
}

int dt__kattr_check(const uint8_t *buf, size_t n) { return kattr_parse(buf, n, NULL, NULL); }

int dt__kattr_unpack_bytes(const uint8_t *buf, size_t n, dt__kattr *a) {
    memset(a, 0, sizeof *a);
    return kattr_parse(buf, n, a, NULL);
}

void dt__kattr_unpack(const dt__krec *k, dt__kattr *a) {
    memset(a, 0, sizeof *a);
    (void)kattr_parse(k->attr, k->alen, a, NULL); /* made by pack or checked by decode */
}

void dt__kattr_unpack_over(const dt__krec *k, dt__kattr *a, uint8_t *lens) {
    /* Made by pack or checked by decode, so the parse succeeds; a record
     * with no attributes (a core kernel's) and a failure start from zero. */
    if (k->alen == 0 || kattr_parse(k->attr, k->alen, a, lens) != 0) {
        memset(a, 0, sizeof *a);
        memset(lens, 0, DT__KATTR_ARRAYS);
    }
}

/* ------------------------------------------------------ collective attrs */

#define COLL_HDR 29

static int sliced_kind(int kind) { return kind == DT_COLL_REDUCESCATTER || kind == DT_COLL_ALLTOALL; }

static size_t coll_size(int kind, int n, int ndim) {
    return COLL_HDR + 8 * (size_t)n * (size_t)ndim + (sliced_kind(kind) ? 16 * (size_t)n : 0);
}

int dt__collattr_parse(const uint8_t *buf, size_t len, dt__collattr *a) {
    if (len < COLL_HDR)
        return -1;
    const uint8_t *p = buf;
    a->group = dt__le_get(&p, 8);
    a->seq = dt__le_get(&p, 8);
    a->kind = (int)dt__le_get(&p, 1);
    a->ndim = (int)dt__le_get(&p, 1);
    a->dim_a = (int)dt__le_get(&p, 1);
    a->dim_b = (int)dt__le_get(&p, 1);
    a->type = (int)dt__le_get(&p, 1);
    a->dtype = (dt_dtype)(int32_t)(uint32_t)dt__le_get(&p, 4);
    uint64_t n = dt__le_get(&p, 4);
    int dims = a->ndim > 0 ? a->ndim : 1;
    if (a->kind >= DT_COLL_KINDS || a->ndim > DT_MAX_NDIM || a->dim_a >= dims || a->dim_b >= dims ||
        a->type >= DT_DEVICE_TYPES || (int)a->dtype < 0 || a->dtype >= DT_DTYPE_COUNT || n < 1 ||
        n > INT32_MAX)
        return -1;
    a->n = (int)n;
    if (coll_size(a->kind, a->n, a->ndim) != len)
        return -1;
    a->shapes = p;
    a->starts = p + 8 * (size_t)a->n * (size_t)a->ndim;
    a->lens = a->starts + 8 * (size_t)a->n;
    return 0;
}

void dt__collattr_read(const dt__krec *k, dt__collattr *a) {
    memset(a, 0, sizeof *a);
    (void)dt__collattr_parse(k->attr, k->alen, a); /* made by dt__coll_krec or checked by decode */
}

size_t dt__coll_attr_size(const dt__coll *c) { return coll_size(c->kind, c->n, c->ndim); }

dt__krec *dt__coll_krec(const dt__coll *c, uint64_t group, uint64_t seq, int rank) {
    dt__krec *k = dt__krec_alloc(coll_size(c->kind, c->n, c->ndim));
    if (!k)
        return NULL;
    k->kop = DT_KC_COLLECTIVE;
    k->rank = rank;
    dt__coll_pack(c, group, seq, k->attr);
    return k;
}

void dt__coll_pack(const dt__coll *c, uint64_t group, uint64_t seq, uint8_t *out) {
    uint8_t *p = out;
    dt__le_put(&p, group, 8);
    dt__le_put(&p, seq, 8);
    dt__le_put(&p, (uint64_t)c->kind, 1);
    dt__le_put(&p, (uint64_t)c->ndim, 1);
    dt__le_put(&p, (uint64_t)c->dim_a, 1);
    dt__le_put(&p, (uint64_t)c->dim_b, 1);
    dt__le_put(&p, (uint64_t)c->type, 1);
    dt__le_put(&p, (uint32_t)c->dtype, 4);
    dt__le_put(&p, (uint64_t)c->n, 4);
    size_t row = 8 * (size_t)c->ndim, n = (size_t)c->n;
    for (int r = 0; r < c->n; r++) {
        if (DT__LE_HOST) { /* each int64 is its own little-endian bytes: a row at once */
            memcpy(p, c->shapes[r], row);
            p += row;
        } else
            for (int d = 0; d < c->ndim; d++)
                dt__le_put(&p, (uint64_t)c->shapes[r][d], 8);
    }
    if (!sliced_kind(c->kind))
        return;
    if (DT__LE_HOST) {
        memcpy(p, c->starts, 8 * n);
        memcpy(p + 8 * n, c->lens, 8 * n);
        return;
    }
    for (int r = 0; r < c->n; r++)
        dt__le_put(&p, (uint64_t)c->starts[r], 8);
    for (int r = 0; r < c->n; r++)
        dt__le_put(&p, (uint64_t)c->lens[r], 8);
}

/* ------------------------------------------------------ assembly attrs */

#define ASM_HDR 6

static size_t asm_size(int ndim, int n) { return ASM_HDR + 8 * (size_t)ndim * (size_t)(1 + n); }

int dt__asmattr_parse(const uint8_t *buf, size_t len, int n_in, dt__asmattr *a) {
    if (len < ASM_HDR)
        return -1;
    const uint8_t *p = buf;
    a->dtype = (dt_dtype)(int32_t)(uint32_t)dt__le_get(&p, 4);
    a->ndim = (int)dt__le_get(&p, 1);
    a->n = (int)dt__le_get(&p, 1);
    if ((int)a->dtype < 0 || a->dtype >= DT_DTYPE_COUNT || a->ndim > DT_MAX_NDIM || a->n > DT_MAX_OP_INPUTS ||
        a->n != n_in || asm_size(a->ndim, a->n) != len)
        return -1;
    for (int d = 0; d < a->ndim; d++)
        a->shape[d] = (int64_t)dt__le_get(&p, 8);
    for (int i = 0; i < a->n * a->ndim; i++)
        a->starts[i] = (int64_t)dt__le_get(&p, 8);
    return 0;
}

dt__krec *dt__asm_krec(dt_dtype dtype, int ndim, const int64_t *shape, int n, const int64_t *starts) {
    dt__krec *k = dt__krec_alloc(asm_size(ndim, n));
    if (!k)
        return NULL;
    k->kop = DT_KC_ASSEMBLE;
    uint8_t *p = k->attr;
    dt__le_put(&p, (uint32_t)dtype, 4);
    dt__le_put(&p, (uint64_t)ndim, 1);
    dt__le_put(&p, (uint64_t)n, 1);
    for (int d = 0; d < ndim; d++)
        dt__le_put(&p, (uint64_t)shape[d], 8);
    for (int i = 0; i < n * ndim; i++)
        dt__le_put(&p, (uint64_t)starts[i], 8);
    return k;
}
