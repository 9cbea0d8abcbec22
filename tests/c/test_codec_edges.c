/*
 * The codecs at the edges of their fields (issue 35): the cluster wire
 * (src/net/wire.c) and the kernel batch codec (src/core/records/
 * kernel_codec.c).
 *
 * Wire: every field of every message type is encoded and decoded at its
 * largest accepted value, at 2^32 + 1 where it is 64 bits wide (a field cut
 * to 32 bits reads back as 1), and one past its bound or negative where the
 * decoder must refuse it; every header field (magic, version, type, length,
 * extra frames) malformed on its own is refused by the decoder, with the
 * "wire: " reason.
 *
 * Kernel batches, built byte by byte from the layout kernel_codec.c states:
 * a group's id and device ids and a stream's device id at 2^32 + 1 and at
 * INT64_MAX decode to those values; a negative device id is refused by the
 * decoder itself; so is each malformed header field (magic, version,
 * counts past the bytes).
 */
#include <stdint.h>
#include <stdlib.h>

#include "core/records/kernel_rec.h"
#include "net/wire.h"
#include "test_util.h"

#define BIG32P1 ((int64_t)1 << 32 | 1) /* 2^32 + 1: a 64-bit field cut to 32 bits reads 1 */

/* ------------------------------------------------------------ the wire */

/* Encodes m, decodes it; DT_OK and *out, or the decoder's status. */
static dt_status wire_rt(const dt__wire_msg *m, dt__wire_msg *out) {
    uint8_t buf[DT__WIRE_MAX];
    size_t n = dt__wire_encode(m, buf, sizeof buf);
    if (!n)
        return DT_EINVAL;
    dt_status st = dt__wire_decode(buf, n, out);
    if (st != DT_OK)
        CHECK(strncmp(dt_last_error(), "wire: ", 6) == 0);
    return st;
}

#define ACCEPT(m, field, v)                                                                                  \
    do {                                                                                                     \
        dt__wire_msg a_ = (m), b_;                                                                           \
        a_.field = (v);                                                                                      \
        CHECK_EQ(wire_rt(&a_, &b_), DT_OK);                                                                  \
        CHECK(b_.field == a_.field);                                                                         \
    } while (0)

#define REFUSE(m, field, v)                                                                                  \
    do {                                                                                                     \
        dt__wire_msg a_ = (m), b_;                                                                           \
        a_.field = (v);                                                                                      \
        CHECK_EQ(wire_rt(&a_, &b_), DT_EINVAL);                                                              \
    } while (0)

/* A u64 field at its maximum and at 2^32 + 1. */
#define U64_EDGES(m, field)                                                                                  \
    do {                                                                                                     \
        ACCEPT(m, field, UINT64_MAX);                                                                        \
        ACCEPT(m, field, (uint64_t)BIG32P1);                                                                 \
    } while (0)

/* An i64 field that must not be negative: INT64_MAX and 2^32 + 1 kept, -1 and INT64_MIN refused. */
#define I64_EDGES(m, field)                                                                                  \
    do {                                                                                                     \
        ACCEPT(m, field, INT64_MAX);                                                                         \
        ACCEPT(m, field, BIG32P1);                                                                           \
        REFUSE(m, field, -1);                                                                                \
        REFUSE(m, field, INT64_MIN);                                                                         \
    } while (0)

static dt__wire_msg msg(int type, uint32_t nextra) {
    dt__wire_msg m;
    memset(&m, 0, sizeof m);
    m.type = type;
    m.nextra = nextra;
    return m;
}

static void wire_register(void) {
    static const uint8_t token[DT__WIRE_TOKEN_MAX] = {1};
    dt__wire_msg m = msg(DT__WIRE_REGISTER, 0);
    m.u.reg.token = token;
    m.u.reg.token_len = 3;
    snprintf(m.u.reg.host, sizeof m.u.reg.host, "h");
    ACCEPT(m, u.reg.cpu_devices, DT__WIRE_MAX_DEVICES);
    REFUSE(m, u.reg.cpu_devices, DT__WIRE_MAX_DEVICES + 1);
    REFUSE(m, u.reg.cpu_devices, UINT32_MAX);
    ACCEPT(m, u.reg.cuda_devices, DT__WIRE_MAX_DEVICES);
    REFUSE(m, u.reg.cuda_devices, DT__WIRE_MAX_DEVICES + 1);
    ACCEPT(m, u.reg.pid, UINT32_MAX);
    ACCEPT(m, u.reg.data_port, 65535);
    REFUSE(m, u.reg.data_port, 65536);
    ACCEPT(m, u.reg.flags, DT__WIRE_REG_NCCL | DT__WIRE_REG_CUDA_VIRTUAL);
    REFUSE(m, u.reg.flags, 1u << 31);
    /* The token at its limit, every byte kept. */
    dt__wire_msg a = m, b;
    a.u.reg.token_len = DT__WIRE_TOKEN_MAX;
    CHECK_EQ(wire_rt(&a, &b), DT_OK);
    CHECK_EQ(b.u.reg.token_len, DT__WIRE_TOKEN_MAX);
    /* The host name at its limit (511 bytes) kept whole. */
    memset(a.u.reg.host, 'x', DT__WIRE_TEXT_MAX - 1);
    a.u.reg.host[DT__WIRE_TEXT_MAX - 1] = 0;
    CHECK_EQ(wire_rt(&a, &b), DT_OK);
    CHECK_EQ(strlen(b.u.reg.host), DT__WIRE_TEXT_MAX - 1);
}

static void wire_welcome(void) {
    dt__wire_msg m = msg(DT__WIRE_WELCOME, 0);
    m.u.welcome.heartbeat_ms = 1;
    m.u.welcome.beat_port = 1;
    ACCEPT(m, u.welcome.node_index, UINT32_MAX);
    I64_EDGES(m, u.welcome.first_device_id);
    I64_EDGES(m, u.welcome.first_cuda_device_id);
    ACCEPT(m, u.welcome.heartbeat_ms, 3600 * 1000);
    REFUSE(m, u.welcome.heartbeat_ms, 3600 * 1000 + 1);
    REFUSE(m, u.welcome.heartbeat_ms, 0);
    ACCEPT(m, u.welcome.beat_port, 65535);
    REFUSE(m, u.welcome.beat_port, 65536);
    REFUSE(m, u.welcome.beat_port, 0);
}

static void wire_heartbeat_batch(void) {
    dt__wire_msg m = msg(DT__WIRE_HEARTBEAT, 0);
    U64_EDGES(m, u.heartbeat.seq);
    /* Clock readings (wire version 5): any 64-bit value travels whole. */
    ACCEPT(m, u.heartbeat.sent_ns, INT64_MAX);
    ACCEPT(m, u.heartbeat.sent_ns, INT64_MIN);
    ACCEPT(m, u.heartbeat.echo_ns, BIG32P1);
    ACCEPT(m, u.heartbeat.echo_recv_ns, -BIG32P1);
    m = msg(DT__WIRE_BATCH, 1);
    ACCEPT(m, u.batch.flags, DT__WIRE_BATCH_TRACE);
    REFUSE(m, u.batch.flags, DT__WIRE_BATCH_TRACE << 1);
    REFUSE(m, u.batch.flags, UINT32_MAX);
    memset(m.u.batch.backend, 't', sizeof m.u.batch.backend - 1); /* 31 bytes: the limit */
    U64_EDGES(m, u.batch.seq);
    dt__wire_msg b;
    CHECK_EQ(wire_rt(&m, &b), DT_OK);
    CHECK_EQ(strlen(b.u.batch.backend), sizeof m.u.batch.backend - 1);
}

static void wire_result(void) {
    dt__wire_msg m = msg(DT__WIRE_RESULT, 0);
    U64_EDGES(m, u.result.future);
    ACCEPT(m, u.result.rank, INT32_MAX);
    ACCEPT(m, u.result.rank, -1);
    REFUSE(m, u.result.rank, -2);
    REFUSE(m, u.result.rank, INT32_MIN);
    ACCEPT(m, u.result.count, 1u << 30);
    REFUSE(m, u.result.count, (1u << 30) + 1);
    ACCEPT(m, u.result.status, INT32_MIN);
    ACCEPT(m, u.result.status, INT32_MAX);
    U64_EDGES(m, u.result.batch);
    for (int i = 0; i < 4; i++) {
        I64_EDGES(m, u.result.data[i]);
    }
    /* An extra frame (a piece of a value, or a sync's trace records with
     * rank -1): a future and no failure status. */
    dt__wire_msg piece = msg(DT__WIRE_RESULT, 1);
    piece.u.result.future = 1;
    ACCEPT(piece, u.result.rank, INT32_MAX);
    ACCEPT(piece, u.result.rank, -1);
    REFUSE(piece, u.result.rank, -2);
    REFUSE(piece, u.result.future, 0);
    REFUSE(piece, u.result.status, DT_EKERNEL);
}

static void wire_data(void) {
    dt__wire_msg m = msg(DT__WIRE_DATA, 0);
    m.u.data.dtype = DT_FLOAT32;
    ACCEPT(m, u.data.tag, UINT32_MAX);
    U64_EDGES(m, u.data.group);
    U64_EDGES(m, u.data.seq);
    ACCEPT(m, u.data.from, INT32_MAX);
    REFUSE(m, u.data.from, -1);
    ACCEPT(m, u.data.to, INT32_MAX);
    REFUSE(m, u.data.to, -1);
    I64_EDGES(m, u.data.src_device);
    I64_EDGES(m, u.data.dst_device);
    ACCEPT(m, u.data.dtype, DT_DTYPE_COUNT - 1);
    REFUSE(m, u.data.dtype, DT_DTYPE_COUNT);
    REFUSE(m, u.data.dtype, -1);
    /* No bytes without an extra frame: total 0; with one, offset <= total at
     * 64 bits. */
    REFUSE(m, u.data.total, 1);
    dt__wire_msg f = msg(DT__WIRE_DATA, 1);
    f.u.data.dtype = DT_FLOAT32;
    f.u.data.total = UINT64_MAX;
    U64_EDGES(f, u.data.offset);
    f.u.data.total = (uint64_t)BIG32P1;
    ACCEPT(f, u.data.offset, (uint64_t)BIG32P1);
    REFUSE(f, u.data.offset, (uint64_t)BIG32P1 + 1);
    f.u.data.offset = 1;
    ACCEPT(f, u.data.total, (uint64_t)BIG32P1);
    /* Shapes: every dim at 2^32 + 1 and at INT64_MAX; negative refused. */
    m.u.data.ndim = DT_MAX_NDIM;
    for (int d = 0; d < DT_MAX_NDIM; d++) {
        I64_EDGES(m, u.data.shape[d]);
    }
    /* More dims than a tensor has: not encoded (not cut to DT_MAX_NDIM). */
    dt__wire_msg a = m;
    a.u.data.ndim = DT_MAX_NDIM + 1;
    uint8_t buf[DT__WIRE_MAX];
    CHECK_EQ(dt__wire_encode(&a, buf, sizeof buf), 0);
    a.u.data.ndim = UINT32_MAX;
    CHECK_EQ(dt__wire_encode(&a, buf, sizeof buf), 0);
    /* And not decoded: the ndim field of an encoded message raised by hand. */
    size_t n = dt__wire_encode(&m, buf, sizeof buf);
    size_t at = DT__WIRE_HEADER + 4 + 8 + 8 + 4 + 4 + 8 + 8 + 8 + 8 + 4; /* ndim's offset */
    dt__wire_msg b;
    CHECK_EQ(dt__wire_decode(buf, n, &b), DT_OK);
    CHECK_EQ(buf[at], DT_MAX_NDIM);
    buf[at] = DT_MAX_NDIM + 1;
    CHECK_EQ(dt__wire_decode(buf, n, &b), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "too many dims") != NULL);
}

static void wire_ranges(void) {
    dt__wire_msg m = msg(DT__WIRE_LOST, 0);
    I64_EDGES(m, u.lost.first_device_id);
    I64_EDGES(m, u.lost.count);
    m = msg(DT__WIRE_FAILED, 0);
    ACCEPT(m, u.failed.tag, UINT32_MAX);
    U64_EDGES(m, u.failed.group);
    U64_EDGES(m, u.failed.seq);
    I64_EDGES(m, u.failed.first_device_id);
    I64_EDGES(m, u.failed.count);
    m = msg(DT__WIRE_PEER, 0);
    m.u.peer.port = 1;
    snprintf(m.u.peer.address, sizeof m.u.peer.address, "10.0.0.1");
    ACCEPT(m, u.peer.node_index, UINT32_MAX);
    I64_EDGES(m, u.peer.first_device_id);
    I64_EDGES(m, u.peer.count);
    I64_EDGES(m, u.peer.cuda_first);
    I64_EDGES(m, u.peer.cuda_count);
    ACCEPT(m, u.peer.port, 65535);
    REFUSE(m, u.peer.port, 65536);
    REFUSE(m, u.peer.port, 0);
    REFUSE(m, u.peer.address[0], 0);
    m = msg(DT__WIRE_NCCLID, 0);
    m.u.ncclid.nranks = 2;
    ACCEPT(m, u.ncclid.tag, UINT32_MAX);
    U64_EDGES(m, u.ncclid.group);
    ACCEPT(m, u.ncclid.nranks, 1u << 20);
    REFUSE(m, u.ncclid.nranks, (1u << 20) + 1);
    REFUSE(m, u.ncclid.nranks, 1);
    /* Texts at their limit kept whole, longer ones cut to it. */
    m = msg(DT__WIRE_REFUSE, 0);
    memset(m.u.refuse.reason, 'r', sizeof m.u.refuse.reason);
    m.u.refuse.reason[sizeof m.u.refuse.reason - 1] = 0;
    dt__wire_msg b;
    CHECK_EQ(wire_rt(&m, &b), DT_OK);
    CHECK(!strcmp(b.u.refuse.reason, m.u.refuse.reason));
    m.u.refuse.reason[sizeof m.u.refuse.reason - 1] = 'r'; /* no NUL at all: cut to 511 bytes */
    CHECK_EQ(wire_rt(&m, &b), DT_OK);
    CHECK_EQ(strlen(b.u.refuse.reason), DT__WIRE_TEXT_MAX - 1);
}

/* Each header field malformed alone, on a valid heartbeat and a batch. */
static void wire_header(void) {
    dt__wire_msg m = msg(DT__WIRE_HEARTBEAT, 0), out;
    m.u.heartbeat.seq = 5;
    uint8_t good[DT__WIRE_MAX], buf[DT__WIRE_MAX + 8];
    size_t n = dt__wire_encode(&m, good, sizeof good);
    CHECK_EQ(n, DT__WIRE_HEADER + 32); /* seq and three clock readings */
    CHECK_EQ(dt__wire_decode(good, n, &out), DT_OK);
#define MALFORMED(at, width, value, why)                                                                     \
    do {                                                                                                     \
        memcpy(buf, good, n);                                                                                \
        uint64_t v_ = (value);                                                                               \
        for (int i_ = 0; i_ < (width); i_++)                                                                 \
            buf[(at) + i_] = (uint8_t)(v_ >> (8 * i_));                                                      \
        CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);                                                  \
        CHECK(strstr(dt_last_error(), why) != NULL);                                                         \
        CHECK_EQ(out.type, 0); /* nothing half-decoded */                                                    \
    } while (0)
    for (int i = 0; i < 4; i++)
        MALFORMED(i, 1, good[i] ^ 0x20u, "not a dtorch cluster message");
    MALFORMED(4, 2, 0, "message version 0");
    MALFORMED(4, 2, DT__WIRE_VERSION - 1, "message version");
    MALFORMED(4, 2, DT__WIRE_VERSION + 1, "message version");
    MALFORMED(4, 2, 0xffff, "message version 65535");
    MALFORMED(6, 2, 0, "unknown message type 0");
    MALFORMED(6, 2, DT__WIRE_TYPE_END, "unknown message type");
    MALFORMED(6, 2, 0xffff, "unknown message type 65535");
    MALFORMED(8, 4, 7, "says 7 payload bytes");
    MALFORMED(8, 4, 9, "says 9 payload bytes");
    MALFORMED(8, 4, 0, "says 0 payload bytes");
    MALFORMED(8, 4, UINT32_MAX, "says 4294967295 payload bytes");
    MALFORMED(12, 4, 1, "cannot carry 1 extra frames");
    MALFORMED(12, 4, UINT32_MAX, "cannot carry 4294967295 extra frames");
    /* Shorter than a header, and a frame longer than its length says. */
    for (size_t len = 0; len < DT__WIRE_HEADER; len++)
        CHECK_EQ(dt__wire_decode(good, len, &out), DT_EINVAL);
    memcpy(buf, good, n);
    buf[n] = 0;
    CHECK_EQ(dt__wire_decode(buf, n + 1, &out), DT_EINVAL);
    /* A type's extra frames: a batch needs exactly one, a result at most one. */
    m = msg(DT__WIRE_BATCH, 1);
    n = dt__wire_encode(&m, good, sizeof good);
    CHECK_EQ(dt__wire_decode(good, n, &out), DT_OK);
    MALFORMED(12, 4, 0, "cannot carry 0 extra frames");
    MALFORMED(12, 4, 2, "cannot carry 2 extra frames");
    m = msg(DT__WIRE_RESULT, 0);
    n = dt__wire_encode(&m, good, sizeof good);
    MALFORMED(12, 4, 2, "cannot carry 2 extra frames");
#undef MALFORMED
}

/* ------------------------------------------------------- kernel batches */

typedef struct kb {
    uint8_t b[512];
    size_t n;
} kb;

static void kput(kb *k, uint64_t v, int n) {
    for (int i = 0; i < n; i++)
        k->b[k->n++] = (uint8_t)(v >> (8 * i));
}

static void kheader(kb *k, uint32_t ngroups, uint32_t nstreams) {
    k->n = 0;
    memcpy(k->b, "DTKB", 4);
    k->n = 4;
    kput(k, 2, 2);
    kput(k, 0, 2);
    kput(k, ngroups, 4);
    kput(k, nstreams, 4);
}

/* group := u64 id i32 type i32 t0 i32 t1 u32 n i64 device_id[n] */
static void kgroup(kb *k, uint64_t id, int n, const int64_t *ids) {
    kput(k, id, 8);
    kput(k, DT_DEVICE_CPU, 4);
    kput(k, DT_DEVICE_CPU, 4);
    kput(k, DT_DEVICE_CPU, 4);
    kput(k, (uint64_t)n, 4);
    for (int i = 0; i < n; i++)
        kput(k, (uint64_t)ids[i], 8);
}

/* stream := i32 type i64 device_id i32 kind u32 nkernels (none here) */
static void kstream(kb *k, int64_t device_id) {
    kput(k, DT_DEVICE_CPU, 4);
    kput(k, (uint64_t)device_id, 8);
    kput(k, 0, 4);
    kput(k, 0, 4);
}

static struct {
    uint64_t id;
    int n;
    int64_t ids[4];
} seen;

static dt_status rec_group(void *ctx, uint64_t id, int type, int t0, int t1, int n, const int64_t *ids,
                           uint64_t *out) {
    (void)ctx, (void)type, (void)t0, (void)t1;
    seen.id = id;
    seen.n = n;
    for (int i = 0; i < n && i < 4; i++)
        seen.ids[i] = ids[i];
    *out = id;
    return DT_OK;
}

static dt__blob *no_blob(void *ctx, uint64_t id) {
    (void)ctx, (void)id;
    return NULL;
}

static dt__blob *no_out(void *ctx, uint64_t id, int type) {
    (void)ctx, (void)id, (void)type;
    return NULL;
}

static dt_status kdecode(const kb *k, dt__kbatch *out) {
    dt__kresolver res = {.ctx = NULL, .input = no_blob, .output = no_out, .group = rec_group};
    uint8_t *copy = malloc(k->n ? k->n : 1); /* exact size: ASan sees a read past it */
    memcpy(copy, k->b, k->n);
    dt_status st = dt__kernel_decode(copy, k->n, &res, out);
    free(copy);
    if (st != DT_OK)
        CHECK(strncmp(dt_last_error(), "kernel decode: ", 15) == 0);
    return st;
}

static void kernel_batches(void) {
    dt__kbatch out;
    kb k;
    /* Ids at the edges round-trip whole. */
    const int64_t edges[] = {BIG32P1, INT64_MAX, 0};
    for (int e = 0; e < 3; e++) {
        int64_t ids[2] = {edges[e], 1};
        kheader(&k, 1, 1);
        kgroup(&k, (uint64_t)BIG32P1 + (uint64_t)e, 2, ids);
        kstream(&k, edges[e]);
        memset(&seen, 0, sizeof seen);
        CHECK_EQ(kdecode(&k, &out), DT_OK);
        CHECK(seen.id == (uint64_t)BIG32P1 + (uint64_t)e);
        CHECK_EQ(seen.n, 2);
        CHECK(seen.ids[0] == edges[e]);
        CHECK_EQ(out.n, 1);
        CHECK(out.n == 1 && out.s[0].device_id == edges[e]);
        dt__kbatch_free(&out);
    }
    kheader(&k, 1, 0);
    kgroup(&k, UINT64_MAX, 1, (const int64_t[]){0});
    CHECK_EQ(kdecode(&k, &out), DT_OK);
    CHECK(seen.id == UINT64_MAX);
    dt__kbatch_free(&out);
    /* A negative device id, in a group or a stream: refused by the decoder. */
    int64_t neg[2] = {0, -1};
    kheader(&k, 1, 0);
    kgroup(&k, 7, 2, neg);
    memset(&seen, 0, sizeof seen);
    CHECK_EQ(kdecode(&k, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "device id") != NULL);
    CHECK_EQ(seen.n, 0); /* the resolver never saw it */
    neg[1] = INT64_MIN;
    kheader(&k, 1, 0);
    kgroup(&k, 7, 2, neg);
    CHECK_EQ(kdecode(&k, &out), DT_EINVAL);
    kheader(&k, 0, 1);
    kstream(&k, -1);
    CHECK_EQ(kdecode(&k, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "bad stream") != NULL);
    kheader(&k, 0, 1);
    kstream(&k, INT64_MIN);
    CHECK_EQ(kdecode(&k, &out), DT_EINVAL);
    /* Each header field malformed alone. */
    kheader(&k, 0, 1);
    kstream(&k, 3);
    CHECK_EQ(kdecode(&k, &out), DT_OK);
    dt__kbatch_free(&out);
    kb bad = k;
    bad.b[0] = 'X';
    CHECK_EQ(kdecode(&bad, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "not a kernel batch") != NULL);
    for (uint16_t v = 0; v < 4; v++) {
        if (v == 2)
            continue;
        bad = k;
        bad.b[4] = (uint8_t)v;
        CHECK_EQ(kdecode(&bad, &out), DT_EINVAL);
        CHECK(strstr(dt_last_error(), "unsupported version") != NULL);
    }
    bad = k;
    bad.b[5] = 1; /* version 258 */
    CHECK_EQ(kdecode(&bad, &out), DT_EINVAL);
    const uint32_t counts[] = {2, 0xffff, UINT32_MAX};
    for (int i = 0; i < 3; i++) {
        bad = k;
        for (int j = 0; j < 4; j++)
            bad.b[12 + j] = (uint8_t)(counts[i] >> (8 * j)); /* nstreams */
        CHECK_EQ(kdecode(&bad, &out), DT_EINVAL);
        bad = k;
        for (int j = 0; j < 4; j++)
            bad.b[8 + j] = (uint8_t)(counts[i] >> (8 * j)); /* ngroups */
        CHECK_EQ(kdecode(&bad, &out), DT_EINVAL);
    }
    bad = k;
    bad.n--; /* truncated */
    CHECK_EQ(kdecode(&bad, &out), DT_EINVAL);
    bad = k;
    bad.b[bad.n++] = 0; /* a trailing byte */
    CHECK_EQ(kdecode(&bad, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "trailing bytes") != NULL);
}

int main(void) {
    wire_register();
    wire_welcome();
    wire_heartbeat_batch();
    wire_result();
    wire_data();
    wire_ranges();
    wire_header();
    kernel_batches();
    if (failures)
        fprintf(stderr, "test_codec_edges: %d failures\n", failures);
    return failures != 0;
}
