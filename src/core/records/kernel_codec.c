/*
 * The kernel codec: a batch of queued kernels (dt__kbatch) to bytes and
 * back, for worker processes (docs/cluster.md). Records and packed attributes:
 * kernel_rec.c.
 *
 * Batch encoding, version 2, little-endian throughout:
 *   batch  := "DTKB" u16 version u16 0 u32 ngroups u32 nstreams group* stream*
 *   group  := u64 id i32 type i32 t0 i32 t1 u32 n i64 device_id[n]
 * (`type`: the device type whose comm holds the group; t0 and t1: the first
 * and the last rank's device types, the others t0; version 1 had neither:
 * a process that receives a group of another node's devices must know
 * their types to tell which are its own.)
 *   stream := i32 type i64 device_id i32 kind u32 nkernels kernel*
 *   kernel := i32 kop u8 n_in u8 has_out u16 0 i32 rank i32 site_line
 *             u64 in_id[n_in] [u64 out_id] [u64 future_id: FETCH, SYNC]
 *             str opname str site_file u32 alen u8 attr[alen]
 *   str    := u16 len (0xffff: none) u8 bytes[len] (len < 4096)
 * Blobs, futures and groups travel by id; the decoder's resolver binds them
 * in its process (kernel_rec.h, dt__kresolver). What cannot cross a
 * process: a GATE kernel (a test's in-process gate) is refused by the
 * encoder. A cross-mesh copy is point-to-point collectives (a send with no
 * output, a receive with no input) and a local ASSEMBLE kernel. A FETCH
 * or SYNC kernel keeps its future as an in-process handle and is encoded by
 * the future's id, which the resolver maps back.
 *
 * Decoding checks every length and count against the bytes left and every
 * field the core indexes with (ndim, lens, n_in, kinds, ranks, group ids,
 * device ids: never negative),
 * so a truncated or corrupt buffer is an error, never a read out of bounds.
 * Outputs are bound first, then inputs: a kernel may read what a kernel of
 * a later stream in the batch makes.
 *
 * Threads: encoding runs on the controller (it reads the graph's group
 * cache); decoding on any thread.
 */
#include <stdio.h>
#include <string.h>

#include "core/records/blob.h"
#include "core/records/chain_prog.h"
#include "core/records/coll.h"
#include "core/records/future.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"

/* ---------------------------------------------------------------- buffer */

void dt__bytes_free(dt__bytes *b) {
    dt__free(b->p);
    memset(b, 0, sizeof *b);
}

uint8_t *dt__bytes_room(dt__bytes *b, size_t n) {
    if (b->failed)
        return NULL;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n)
            cap *= 2;
        uint8_t *p = dt__realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return NULL;
        }
        b->p = p;
        b->cap = cap;
    }
    uint8_t *p = b->p + b->len;
    b->len += n;
    return p;
}

void dt__bytes_put(dt__bytes *b, uint64_t v, int n) {
    uint8_t *p = dt__bytes_room(b, (size_t)n);
    if (p)
        dt__le_put(&p, v, n);
}

#define STR_MAX 4095
#define STR_NONE 0xffff

static void wr_str(dt__bytes *b, const char *s) {
    if (!s) {
        dt__bytes_put(b, STR_NONE, 2);
        return;
    }
    size_t n = strlen(s);
    if (n > STR_MAX)
        n = STR_MAX; /* names and file paths: never this long in practice */
    dt__bytes_put(b, n, 2);
    uint8_t *p = dt__bytes_room(b, n);
    if (p)
        memcpy(p, s, n);
}

/* ---------------------------------------------------------------- encode */

static int has_future(int kop) { return kop == DT_KC_FETCH || kop == DT_KC_SYNC; }

dt_status dt__kernel_encode(const dt__kbatch *b, dt__kgroup_fn group_of, void *ctx, dt__bytes *out) {
    uint64_t *groups = NULL;
    size_t ngroups = 0, gcap = 0;
    for (int i = 0; i < b->n; i++)
        for (const dt__krec *k = b->s[i].head; k; k = k->next) {
            if (k->kop == DT_KC_GATE || k->kop == DT_KC_STOP || k->kop == DT_KC_RELEASE ||
                k->kop == DT_KC_BCAST || k->kop == DT_KC_USER || k->kop == DT_KC_STEP || k->kop < 0 ||
                k->kop >= DT_KC_END) {
                dt__free(groups);
                return dt__error(DT_EINVAL, "kernel encode: a %s kernel (%s) cannot leave the process",
                                 k->opname ? k->opname : "core",
                                 k->kop == DT_KC_GATE   ? "test gate"
                                 : k->kop == DT_KC_USER ? "a user kernel: its function lives in this process"
                                                        : "not a kernel");
            }
            if (k->kop != DT_KC_COLLECTIVE)
                continue;
            dt__collattr a;
            dt__collattr_read(k, &a);
            size_t j = 0;
            while (j < ngroups && groups[j] != a.group)
                j++;
            if (j < ngroups)
                continue;
            if (ngroups == gcap) {
                gcap = gcap ? 2 * gcap : 8;
                uint64_t *ng = dt__realloc(groups, gcap * sizeof *groups);
                if (!ng) {
                    dt__free(groups);
                    return dt__error(DT_ENOMEM, "kernel encode: out of memory");
                }
                groups = ng;
            }
            groups[ngroups++] = a.group;
        }
    uint8_t *h = dt__bytes_room(out, 4);
    if (h)
        memcpy(h, "DTKB", 4);
    dt__bytes_put(out, 2, 2);
    dt__bytes_put(out, 0, 2);
    dt__bytes_put(out, ngroups, 4);
    dt__bytes_put(out, (uint64_t)b->n, 4);
    for (size_t j = 0; j < ngroups; j++) {
        int type = 0, n = 0, t0 = 0, t1 = 0;
        const int64_t *ids = NULL;
        if (!group_of(ctx, groups[j], &type, &n, &ids, &t0, &t1)) {
            dt__free(groups);
            return dt__error(DT_EINVAL, "kernel encode: collective group %llu is unknown",
                             (unsigned long long)groups[j]);
        }
        dt__bytes_put(out, groups[j], 8);
        dt__bytes_put(out, (uint32_t)type, 4);
        dt__bytes_put(out, (uint32_t)t0, 4);
        dt__bytes_put(out, (uint32_t)t1, 4);
        dt__bytes_put(out, (uint64_t)n, 4);
        for (int r = 0; r < n; r++)
            dt__bytes_put(out, (uint64_t)ids[r], 8);
    }
    dt__free(groups);
    for (int i = 0; i < b->n; i++) {
        const dt__kbatch_stream *s = &b->s[i];
        uint32_t nk = 0;
        for (const dt__krec *k = s->head; k; k = k->next)
            nk++;
        dt__bytes_put(out, (uint32_t)s->type, 4);
        dt__bytes_put(out, (uint64_t)s->device_id, 8);
        dt__bytes_put(out, (uint32_t)s->kind, 4);
        dt__bytes_put(out, nk, 4);
        for (const dt__krec *k = s->head; k; k = k->next) {
            dt__bytes_put(out, (uint32_t)k->kop, 4);
            dt__bytes_put(out, (uint64_t)k->n_in, 1);
            dt__bytes_put(out, k->out ? 1 : 0, 1);
            dt__bytes_put(out, 0, 2);
            dt__bytes_put(out, (uint32_t)k->rank, 4);
            dt__bytes_put(out, (uint32_t)k->site_line, 4);
            for (int j = 0; j < k->n_in; j++)
                dt__bytes_put(out, k->in[j]->id, 8);
            if (k->out)
                dt__bytes_put(out, k->out->id, 8);
            if (has_future(k->kop))
                dt__bytes_put(out, ((const dt_future *)k->handle)->id, 8);
            wr_str(out, k->opname);
            wr_str(out, k->site_file);
            dt__bytes_put(out, k->alen, 4);
            uint8_t *p = dt__bytes_room(out, k->alen);
            if (p)
                memcpy(p, k->attr, k->alen);
        }
    }
    if (out->failed)
        return dt__error(DT_ENOMEM, "kernel encode: out of memory");
    return DT_OK;
}

/* ---------------------------------------------------------------- decode */

typedef struct reader {
    const uint8_t *p, *end, *start;
    const char *why; /* the first failure */
} reader;

static int left(const reader *r, size_t n) { return (size_t)(r->end - r->p) >= n; }

static uint64_t rd(reader *r, int n) {
    if (r->why || !left(r, (size_t)n)) {
        if (!r->why)
            r->why = "truncated";
        return 0;
    }
    return dt__le_get(&r->p, n);
}

static void fail(reader *r, const char *why) {
    if (!r->why)
        r->why = why;
}

/* An interned copy of a string field (NULL for none or on failure). */
static const char *rd_str(reader *r) {
    uint64_t n = rd(r, 2);
    if (r->why || n == STR_NONE)
        return NULL;
    if (n > STR_MAX || !left(r, n)) {
        fail(r, n > STR_MAX ? "string too long" : "truncated");
        return NULL;
    }
    char tmp[STR_MAX + 1];
    memcpy(tmp, r->p, n);
    tmp[n] = 0;
    r->p += n;
    if (memchr(tmp, 0, n)) {
        fail(r, "string with a NUL byte");
        return NULL;
    }
    const char *s = dt__intern(tmp);
    if (!s)
        fail(r, "out of memory");
    return s;
}

typedef struct gmap {
    uint64_t from, to;
} gmap;

/* A decoded kernel's input names, bound once every output of the batch
 * exists (a kernel may read what a later stream of the batch makes). */
typedef struct pending {
    dt__krec *k;
    int n_in;
    uint64_t ids[DT_MAX_OP_INPUTS];
} pending;

typedef struct pendings {
    pending *v;
    size_t n, cap;
} pendings;

/* One kernel of a stream of device type `type`; NULL with r->why set. Its
 * inputs go to `pend`. */
static dt__krec *rd_kernel(reader *r, int type, const dt__kresolver *res, const gmap *gm, size_t ngm,
                           pendings *pend) {
    int32_t kop = (int32_t)(uint32_t)rd(r, 4);
    int n_in = (int)rd(r, 1), has_out = (int)rd(r, 1);
    rd(r, 2);
    int32_t rank = (int32_t)(uint32_t)rd(r, 4);
    int32_t line = (int32_t)(uint32_t)rd(r, 4);
    if (r->why)
        return NULL;
    if (kop < 0 || kop >= DT_KC_END || kop == DT_KC_STOP || kop == DT_KC_GATE || kop == DT_KC_RELEASE ||
        kop == DT_KC_BCAST || kop == DT_KC_USER || kop == DT_KC_STEP) {
        fail(r, "unknown or in-process kernel op");
        return NULL;
    }
    /* A collective's counts are checked with its attributes, below. */
    if (n_in > DT_MAX_OP_INPUTS || (kop != DT_KC_COLLECTIVE && has_out != !has_future(kop)) ||
        (kop == DT_KC_FETCH && n_in != 1)) {
        fail(r, "bad input or output count");
        return NULL;
    }
    uint64_t in_id[DT_MAX_OP_INPUTS], out_id = 0, fut_id = 0;
    for (int j = 0; j < n_in; j++)
        in_id[j] = rd(r, 8);
    if (has_out)
        out_id = rd(r, 8);
    if (has_future(kop))
        fut_id = rd(r, 8);
    const char *opname = rd_str(r);
    const char *site = rd_str(r);
    uint64_t alen = rd(r, 4);
    if (r->why)
        return NULL;
    if (!left(r, alen)) {
        fail(r, "truncated");
        return NULL;
    }
    const uint8_t *attr = r->p;
    r->p += alen;
    dt__collattr ca;
    dt__asmattr aa;
    if (kop == DT_KC_COLLECTIVE ? dt__collattr_parse(attr, alen, &ca) != 0 || rank < 0 || rank >= ca.n
        : kop == DT_K_CHAIN     ? dt__chain_check(attr, alen) != 0
        : kop == DT_KC_ASSEMBLE ? dt__asmattr_parse(attr, alen, n_in, &aa) != 0 || !has_out
                                : dt__kattr_check(attr, alen) != 0) {
        fail(r, "malformed attributes");
        return NULL;
    }
    /* Every rank of a collective has an input and an output, but a
     * point-to-point sender (no output) and receiver (no input). */
    int p2p = kop == DT_KC_COLLECTIVE && ca.kind == DT_COLL_SENDRECV;
    if (kop == DT_KC_COLLECTIVE &&
        ((p2p && ca.n != 2) || has_out != !(p2p && rank == 0) || (n_in < 1 && !(p2p && rank == 1)))) {
        fail(r, "bad input or output count");
        return NULL;
    }
    uint64_t group = 0;
    if (kop == DT_KC_COLLECTIVE) {
        size_t j = 0;
        while (j < ngm && gm[j].from != ca.group)
            j++;
        if (j == ngm) {
            fail(r, "collective of a group the batch does not define");
            return NULL;
        }
        group = gm[j].to;
    }
    dt__krec *k = dt__krec_alloc(alen);
    if (!k) {
        fail(r, "out of memory");
        return NULL;
    }
    memcpy(k->attr, attr, alen);
    if (kop == DT_KC_COLLECTIVE) {
        uint8_t *p = k->attr;
        dt__le_put(&p, group, 8);
    }
    k->kop = kop;
    k->rank = rank;
    k->site_line = line;
    k->opname = opname ? opname : "kernel";
    k->site_file = site;
    if (n_in) {
        if (pend->n == pend->cap) {
            size_t cap = pend->cap ? 2 * pend->cap : 64;
            pending *v = dt__realloc(pend->v, cap * sizeof *v);
            if (!v) {
                fail(r, "out of memory");
                dt__krec_discard(k);
                return NULL;
            }
            pend->v = v;
            pend->cap = cap;
        }
        pending *pe = &pend->v[pend->n++];
        pe->k = k;
        pe->n_in = n_in;
        memcpy(pe->ids, in_id, sizeof(uint64_t) * (size_t)n_in);
    }
    if (has_out && !(k->out = res->output(res->ctx, out_id, type)))
        fail(r, "the resolver made no output blob");
    if (!r->why && has_future(kop) && !(res->future && (k->handle = res->future(res->ctx, fut_id))))
        fail(r, "a read or sync names a future this process does not know");
    if (r->why) {
        if (n_in)
            pend->n--;
        dt__krec_discard(k);
        return NULL;
    }
    return k;
}

dt_status dt__kernel_decode(const void *buf, size_t len, const dt__kresolver *res, dt__kbatch *out) {
    reader r = {.p = buf, .end = (const uint8_t *)buf + len, .start = buf};
    out->n = 0;
    out->s = NULL;
    gmap *gm = NULL;
    int64_t *ids = NULL;
    pendings pend = {0};
    if (!buf || !left(&r, 4) || memcmp(r.p, "DTKB", 4) != 0)
        fail(&r, "not a kernel batch");
    else
        r.p += 4;
    uint64_t version = rd(&r, 2);
    rd(&r, 2);
    if (!r.why && version != 2)
        fail(&r, "unsupported version");
    uint64_t ngroups = rd(&r, 4), nstreams = rd(&r, 4);
    /* Counts are bounded by the bytes that would hold them. */
    if (!r.why && (ngroups > (size_t)(r.end - r.p) / 16 || nstreams > (size_t)(r.end - r.p) / 20))
        fail(&r, "truncated");
    if (!r.why && ngroups && !(gm = dt__calloc(ngroups, sizeof *gm)))
        fail(&r, "out of memory");
    for (uint64_t j = 0; j < ngroups && !r.why; j++) {
        gm[j].from = rd(&r, 8);
        int type = (int)(int32_t)(uint32_t)rd(&r, 4);
        int t0 = (int)(int32_t)(uint32_t)rd(&r, 4), t1 = (int)(int32_t)(uint32_t)rd(&r, 4);
        uint64_t n = rd(&r, 4);
        if (r.why)
            break;
        int bad_type = type < 0 || type >= DT_DEVICE_TYPES || t0 < 0 || t0 >= DT_DEVICE_TYPES || t1 < 0 ||
                       t1 >= DT_DEVICE_TYPES;
        if (bad_type || n < 1 || n > INT32_MAX || !left(&r, 8 * n)) {
            fail(&r, bad_type ? "bad device type" : "bad group size");
            break;
        }
        if (!res->group) {
            fail(&r, "collectives refused by the resolver");
            break;
        }
        dt__free(ids);
        if (!(ids = dt__malloc(8 * n))) {
            fail(&r, "out of memory");
            break;
        }
        for (uint64_t i = 0; i < n && !r.why; i++)
            if ((ids[i] = (int64_t)rd(&r, 8)) < 0)
                fail(&r, "a negative device id in a group");
        if (r.why)
            break;
        if (res->group(res->ctx, gm[j].from, type, t0, t1, (int)n, ids, &gm[j].to) != DT_OK)
            fail(&r, "the resolver could not make a group");
    }
    if (!r.why && nstreams && !(out->s = dt__calloc(nstreams, sizeof *out->s)))
        fail(&r, "out of memory");
    for (uint64_t i = 0; i < nstreams && !r.why; i++) {
        dt__kbatch_stream *s = &out->s[out->n++];
        s->type = (int)(int32_t)(uint32_t)rd(&r, 4);
        s->device_id = (int64_t)rd(&r, 8);
        s->kind = (int)(int32_t)(uint32_t)rd(&r, 4);
        uint64_t nk = rd(&r, 4);
        if (!r.why && (s->type < 0 || s->type >= DT_DEVICE_TYPES || s->device_id < 0 || s->kind < 0 ||
                       s->kind >= DT_STREAM_KINDS))
            fail(&r, "bad stream (device type, device id or kind)");
        if (!r.why && nk > (size_t)(r.end - r.p) / 20)
            fail(&r, "truncated");
        for (uint64_t j = 0; j < nk && !r.why; j++) {
            dt__krec *k = rd_kernel(&r, s->type, res, gm, ngroups, &pend);
            if (!k)
                break;
            if (s->tail)
                s->tail->next = k;
            else
                s->head = k;
            s->tail = k;
        }
    }
    if (!r.why && r.p != r.end)
        fail(&r, "trailing bytes");
    /* Inputs, now that every output of the batch has its blob. */
    for (size_t i = 0; i < pend.n && !r.why; i++) {
        pending *pe = &pend.v[i];
        for (int j = 0; j < pe->n_in; j++) {
            pe->k->in[j] = res->input(res->ctx, pe->ids[j]);
            if (!pe->k->in[j]) {
                fail(&r, "a kernel reads a blob the resolver does not know");
                break;
            }
            pe->k->n_in = (int16_t)(j + 1);
        }
    }
    dt__free(pend.v);
    dt__free(gm);
    dt__free(ids);
    if (r.why) {
        size_t at = (size_t)(r.p - r.start);
        dt__kbatch_free(out);
        return dt__error(DT_EINVAL, "kernel decode: %s (at byte %zu of %zu)", r.why, at, len);
    }
    return DT_OK;
}
