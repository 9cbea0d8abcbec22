/*
 * The cluster wire format (src/net/wire.c): every message type round-trips;
 * the decoder refuses foreign headers, other versions, unknown types and
 * length mismatches; and, fuzzed with every truncation, every single-bit
 * flip and random bytes (each decoded from a heap buffer of exactly its
 * size, so ASan sees any read past it), it either refuses or accepts a
 * message that re-encodes to the same bytes. SHA-256 (the key derivation
 * and the token comparison) is checked against FIPS 180-2's examples and
 * Python's hashlib.
 */
#include <stdlib.h>

#include "net/wire.h"
#include "test_util.h"

static void hex(const uint8_t d[32], char out[65]) {
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void test_sha256(void) {
    static const struct {
        int n;
        char fill; /* 0: the text */
        const char *text, *digest;
    } v[] = {
        {0, 0, "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {3, 0, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {56, 0, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {55, 'a', NULL, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, 'a', NULL, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {64, 'a', NULL, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {1000, 'a', NULL, "41edece42d63e8d9bf515a9ba6932e1c20cbc9f5a5d134645adb5db1b9737ea3"},
    };
    for (size_t i = 0; i < DT_ARRAY_LEN(v); i++) {
        char buf[1000];
        const char *m = v[i].text;
        if (!m) {
            memset(buf, v[i].fill, (size_t)v[i].n);
            m = buf;
        }
        uint8_t d[32];
        char h[65];
        dt__sha256(m, (size_t)v[i].n, d);
        hex(d, h);
        CHECK_STREQ(h, v[i].digest);
    }
    uint8_t k[32], k2[32];
    char h[65];
    dt__wire_derive("s3cret", "curve-server-secret", k);
    hex(k, h); /* hashlib.sha256(b"dtorch-cluster-v1\0curve-server-secret\0s3cret") */
    CHECK_STREQ(h, "a45250ef36d29bf53d7a7633a001a428ace3cd2333924b817120329804b5972e");
    dt__wire_derive("s3cret", "other", k2);
    CHECK(memcmp(k, k2, 32) != 0);
    dt__wire_derive("s3cres", "curve-server-secret", k2);
    CHECK(memcmp(k, k2, 32) != 0);
    const uint8_t *a = (const uint8_t *)"token-a", *b = (const uint8_t *)"token-b";
    CHECK(dt__wire_token_equal(a, 7, a, 7));
    CHECK(!dt__wire_token_equal(a, 7, b, 7));
    CHECK(!dt__wire_token_equal(a, 7, a, 6));
    CHECK(!dt__wire_token_equal(a, 0, a, 1));
    CHECK(dt__wire_token_equal(a, 0, b, 0));
}

/* One message of each type, with every field set. */
static int sample(int type, dt__wire_msg *m) {
    static const char token[] = "a token\x01\xff with bytes";
    memset(m, 0, sizeof *m);
    m->type = type;
    switch (type) {
    case DT__WIRE_REGISTER:
        m->u.reg.cpu_devices = 3;
        m->u.reg.cuda_devices = 2;
        m->u.reg.pid = 4242;
        snprintf(m->u.reg.host, sizeof m->u.reg.host, "host-%d.example", type);
        m->u.reg.token = (const uint8_t *)token;
        m->u.reg.token_len = sizeof token - 1;
        m->u.reg.data_port = 40002;
        m->u.reg.flags = DT__WIRE_REG_NCCL | DT__WIRE_REG_CUDA_VIRTUAL;
        return 1;
    case DT__WIRE_WELCOME:
        m->u.welcome.node_index = 7;
        m->u.welcome.first_device_id = 0x123456789aLL;
        m->u.welcome.heartbeat_ms = 250;
        m->u.welcome.beat_port = 40001;
        m->u.welcome.first_cuda_device_id = 0x23456789abLL;
        return 1;
    case DT__WIRE_REFUSE:
        snprintf(m->u.refuse.reason, sizeof m->u.refuse.reason, "the token does not match");
        return 1;
    case DT__WIRE_HEARTBEAT:
        m->u.heartbeat.seq = 0xfedcba9876543210ULL;
        m->u.heartbeat.sent_ns = 123456789012345LL;
        m->u.heartbeat.echo_ns = -5; /* another host's clock may read less */
        m->u.heartbeat.echo_recv_ns = 0x7fffffffffffffffLL;
        return 1;
    case DT__WIRE_STOP:
    case DT__WIRE_BYE:
        return 1;
    case DT__WIRE_BATCH:
        m->nextra = 1;
        snprintf(m->u.batch.backend, sizeof m->u.batch.backend, "torch");
        m->u.batch.seq = 0x0a0b0c0d0e0f1011ULL;
        return 1;
    case DT__WIRE_RELEASE:
        m->nextra = 1;
        return 1;
    case DT__WIRE_RESULT:
        m->u.result.future = 0x1122334455667788ULL;
        m->u.result.rank = -1;
        m->u.result.count = 3;
        m->u.result.status = -5;
        m->u.result.batch = 0x99aabbccddeeff00ULL;
        snprintf(m->u.result.error, sizeof m->u.result.error, "add failed on cpu:3");
        m->u.result.data[DT__WIRE_DATA_BYTES_OUT] = 0x0102030405LL;
        m->u.result.data[DT__WIRE_DATA_MSGS_OUT] = 7;
        m->u.result.data[DT__WIRE_DATA_BYTES_IN] = 0x7f00000000000001LL;
        m->u.result.data[DT__WIRE_DATA_MSGS_IN] = 9;
        return 1;
    case DT__WIRE_DATA: /* a failed sender's: no bytes, so an extra frame is refused */
        m->u.data.tag = 0x01020304u;
        m->u.data.group = 0x1122334455667788ULL;
        m->u.data.seq = 0x0102030405060708ULL;
        m->u.data.from = 3;
        m->u.data.to = 1;
        m->u.data.src_device = 0x123456789LL;
        m->u.data.dst_device = 5;
        m->u.data.offset = 0; /* no bytes: an error */
        m->u.data.dtype = DT_FLOAT32;
        m->u.data.ndim = 3;
        m->u.data.shape[0] = 2;
        m->u.data.shape[1] = 0x10000000000LL;
        m->u.data.shape[2] = 7;
        snprintf(m->u.data.error, sizeof m->u.data.error, "exp failed on cpu:3");
        return 1;
    case DT__WIRE_LOST:
        m->u.lost.first_device_id = 4;
        m->u.lost.count = 3;
        snprintf(m->u.lost.error, sizeof m->u.lost.error, "worker node 1 (127.0.0.1) is lost");
        return 1;
    case DT__WIRE_FAILED:
        m->u.failed.tag = 0x0badf00du;
        m->u.failed.group = 0x1122334455667788ULL;
        m->u.failed.seq = 0x0102030405060708ULL;
        m->u.failed.first_device_id = 6;
        m->u.failed.count = 2;
        snprintf(m->u.failed.error, sizeof m->u.failed.error, "worker node 1 could not run a batch");
        return 1;
    case DT__WIRE_PEER:
        m->u.peer.node_index = 3;
        m->u.peer.first_device_id = 9;
        m->u.peer.count = 4;
        m->u.peer.port = 40003;
        snprintf(m->u.peer.address, sizeof m->u.peer.address, "10.231.7.2");
        m->u.peer.cuda_first = 5;
        m->u.peer.cuda_count = 2;
        return 1;
    case DT__WIRE_NCCLID:
        m->u.ncclid.tag = 0x0a0b0c0du;
        m->u.ncclid.group = 0x8000000000000011ULL;
        m->u.ncclid.nranks = 6;
        for (int i = 0; i < DT__WIRE_NCCL_ID; i++)
            m->u.ncclid.id[i] = (uint8_t)(i * 37 + 1); /* every byte value class: NULs too */
        m->u.ncclid.id[5] = 0;
        return 1;
    }
    return 0;
}

static int same_msg(const dt__wire_msg *a, const dt__wire_msg *b) {
    if (a->type != b->type || a->nextra != b->nextra)
        return 0;
    switch (a->type) {
    case DT__WIRE_REGISTER:
        return a->u.reg.cpu_devices == b->u.reg.cpu_devices &&
               a->u.reg.cuda_devices == b->u.reg.cuda_devices && a->u.reg.pid == b->u.reg.pid &&
               !strcmp(a->u.reg.host, b->u.reg.host) && a->u.reg.token_len == b->u.reg.token_len &&
               a->u.reg.data_port == b->u.reg.data_port && a->u.reg.flags == b->u.reg.flags &&
               !memcmp(a->u.reg.token, b->u.reg.token, a->u.reg.token_len);
    case DT__WIRE_WELCOME:
        return !memcmp(&a->u.welcome, &b->u.welcome, sizeof a->u.welcome);
    case DT__WIRE_REFUSE:
        return !strcmp(a->u.refuse.reason, b->u.refuse.reason);
    case DT__WIRE_HEARTBEAT:
        return !memcmp(&a->u.heartbeat, &b->u.heartbeat, sizeof a->u.heartbeat);
    case DT__WIRE_BATCH:
        return !strcmp(a->u.batch.backend, b->u.batch.backend) && a->u.batch.seq == b->u.batch.seq;
    case DT__WIRE_RESULT:
        return a->u.result.future == b->u.result.future && a->u.result.rank == b->u.result.rank &&
               a->u.result.count == b->u.result.count && a->u.result.status == b->u.result.status &&
               a->u.result.batch == b->u.result.batch && !strcmp(a->u.result.error, b->u.result.error) &&
               !memcmp(a->u.result.data, b->u.result.data, sizeof a->u.result.data);
    case DT__WIRE_DATA:
        return a->u.data.tag == b->u.data.tag && a->u.data.group == b->u.data.group &&
               a->u.data.seq == b->u.data.seq && a->u.data.from == b->u.data.from &&
               a->u.data.to == b->u.data.to && a->u.data.src_device == b->u.data.src_device &&
               a->u.data.dst_device == b->u.data.dst_device && a->u.data.offset == b->u.data.offset &&
               a->u.data.total == b->u.data.total && a->u.data.dtype == b->u.data.dtype &&
               a->u.data.ndim == b->u.data.ndim &&
               !memcmp(a->u.data.shape, b->u.data.shape, sizeof a->u.data.shape) &&
               !strcmp(a->u.data.error, b->u.data.error);
    case DT__WIRE_LOST:
        return a->u.lost.first_device_id == b->u.lost.first_device_id && a->u.lost.count == b->u.lost.count &&
               !strcmp(a->u.lost.error, b->u.lost.error);
    case DT__WIRE_FAILED:
        return a->u.failed.tag == b->u.failed.tag && a->u.failed.group == b->u.failed.group &&
               a->u.failed.seq == b->u.failed.seq &&
               a->u.failed.first_device_id == b->u.failed.first_device_id &&
               a->u.failed.count == b->u.failed.count && !strcmp(a->u.failed.error, b->u.failed.error);
    case DT__WIRE_PEER:
        return a->u.peer.node_index == b->u.peer.node_index &&
               a->u.peer.first_device_id == b->u.peer.first_device_id && a->u.peer.count == b->u.peer.count &&
               a->u.peer.port == b->u.peer.port && !strcmp(a->u.peer.address, b->u.peer.address) &&
               a->u.peer.cuda_first == b->u.peer.cuda_first && a->u.peer.cuda_count == b->u.peer.cuda_count;
    case DT__WIRE_NCCLID:
        return a->u.ncclid.tag == b->u.ncclid.tag && a->u.ncclid.group == b->u.ncclid.group &&
               a->u.ncclid.nranks == b->u.ncclid.nranks &&
               !memcmp(a->u.ncclid.id, b->u.ncclid.id, DT__WIRE_NCCL_ID);
    }
    return 1;
}

/* Decodes `n` bytes from an exact-size heap copy. If accepted, the message
 * must re-encode to the same bytes (the decoder kept every field and took
 * nothing it does not check). Returns 1 when accepted. */
static int decode_exact(const uint8_t *bytes, size_t n) {
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, bytes, n);
    dt__wire_msg m;
    dt_status st = dt__wire_decode(copy, n, &m);
    int ok = st == DT_OK;
    if (ok) {
        uint8_t again[DT__WIRE_MAX];
        size_t n2 = dt__wire_encode(&m, again, sizeof again);
        CHECK_EQ(n2, n);
        CHECK(n2 == n && memcmp(again, copy, n) == 0);
    } else {
        CHECK_EQ(st, DT_EINVAL);
        CHECK(strncmp(dt_last_error(), "wire: ", 6) == 0);
    }
    free(copy);
    return ok;
}

static void test_roundtrip_and_fuzz(void) {
    for (int type = 1; type < DT__WIRE_TYPE_END; type++) {
        dt__wire_msg m, back;
        CHECK(sample(type, &m));
        uint8_t buf[DT__WIRE_MAX];
        size_t n = dt__wire_encode(&m, buf, sizeof buf);
        CHECK(n >= DT__WIRE_HEADER);
        CHECK_EQ(dt__wire_decode(buf, n, &back), DT_OK);
        CHECK(same_msg(&m, &back));
        CHECK(decode_exact(buf, n));
        /* Too small an output buffer: refused, not overrun. */
        for (size_t cap = 0; cap < n; cap++)
            CHECK_EQ(dt__wire_encode(&m, buf, cap), 0);
        n = dt__wire_encode(&m, buf, sizeof buf);
        /* Every truncation is refused; so is one extra byte. */
        for (size_t len = 0; len < n; len++)
            CHECK(!decode_exact(buf, len));
        buf[n] = 0;
        CHECK(!decode_exact(buf, n + 1));
        /* Every single-bit flip: refused, or a message that re-encodes to
         * the flipped bytes. A flip in the header's magic, version or
         * length is always refused. */
        for (size_t byte = 0; byte < n; byte++)
            for (int bit = 0; bit < 8; bit++) {
                buf[byte] ^= (uint8_t)(1u << bit);
                int ok = decode_exact(buf, n);
                if ((byte < 6 || (byte >= 8 && byte < 16)) && ok) {
                    fprintf(stderr, "type %d: a flip of bit %d of byte %zu was accepted\n", type, bit, byte);
                    failures++;
                }
                buf[byte] ^= (uint8_t)(1u << bit);
            }
    }
}

/* Encodes m and decodes the bytes: the decoder's status. */
static dt_status round_trip(const dt__wire_msg *m) {
    uint8_t buf[DT__WIRE_MAX];
    dt__wire_msg out;
    size_t n = dt__wire_encode(m, buf, sizeof buf);
    return n ? dt__wire_decode(buf, n, &out) : DT_EINVAL;
}

static void test_refusals(void) {
    dt__wire_msg m;
    sample(DT__WIRE_HEARTBEAT, &m);
    uint8_t buf[DT__WIRE_MAX];
    size_t n = dt__wire_encode(&m, buf, sizeof buf);
    dt__wire_msg out;
    CHECK_EQ(dt__wire_decode(NULL, 0, &out), DT_EINVAL);
    buf[4] = DT__WIRE_VERSION + 1; /* a later version */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "message version 6") != NULL);
    buf[4] = 1; /* the first version: its welcome had no heartbeat port */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "message version 1") != NULL);
    buf[4] = 2; /* the second: no CUDA devices on worker nodes */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "message version 2") != NULL);
    buf[4] = 3; /* the third: no data counters in a result */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "message version 3") != NULL);
    buf[4] = 4; /* the fourth: heartbeats without clock readings */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "message version 4") != NULL);
    buf[4] = DT__WIRE_VERSION;
    buf[6] = 99; /* type 99 */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "unknown message type 99") != NULL);
    buf[6] = 0;
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    buf[6] = DT__WIRE_HEARTBEAT;
    buf[12] = 1; /* one extra frame announced */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    buf[12] = 0;
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_OK);
    /* A welcome with a zero heartbeat or a negative first device id. */
    sample(DT__WIRE_WELCOME, &m);
    m.u.welcome.heartbeat_ms = 0;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    m.u.welcome.heartbeat_ms = 10;
    m.u.welcome.first_device_id = -1;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    m.u.welcome.first_device_id = 0; /* no heartbeat port, or one past 65535 */
    m.u.welcome.beat_port = 0;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    m.u.welcome.beat_port = 65536;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    /* A welcome with a negative first CUDA id, a peer with a negative
     * CUDA range, a registration with a flag this version does not know,
     * an NCCL unique id for a one-rank group. */
    sample(DT__WIRE_WELCOME, &m);
    m.u.welcome.first_cuda_device_id = -1;
    CHECK_EQ(round_trip(&m), DT_EINVAL);
    sample(DT__WIRE_PEER, &m);
    m.u.peer.cuda_count = -2;
    CHECK_EQ(round_trip(&m), DT_EINVAL);
    sample(DT__WIRE_REGISTER, &m);
    m.u.reg.flags = 4;
    CHECK_EQ(round_trip(&m), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "unknown flags") != NULL);
    sample(DT__WIRE_NCCLID, &m);
    m.u.ncclid.nranks = 1;
    CHECK_EQ(round_trip(&m), DT_EINVAL);
    /* The id a byte short. */
    m.u.ncclid.nranks = 2;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_OK);
    CHECK(same_msg(&m, &out));
    buf[DT__WIRE_HEADER + 16] = DT__WIRE_NCCL_ID - 1; /* the id's length field */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    /* A peer without a port. */
    sample(DT__WIRE_PEER, &m);
    m.u.peer.port = 0;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    /* A failure notice with a negative device range. */
    sample(DT__WIRE_FAILED, &m);
    m.u.failed.count = -1;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    /* A registration with a token over the limit is not encoded; one with
     * too many devices is not decoded; a host name with a NUL is refused. */
    static uint8_t big[DT__WIRE_TOKEN_MAX + 1];
    sample(DT__WIRE_REGISTER, &m);
    m.u.reg.token = big;
    m.u.reg.token_len = sizeof big;
    CHECK_EQ(dt__wire_encode(&m, buf, sizeof buf), 0);
    m.u.reg.token_len = DT__WIRE_TOKEN_MAX;
    m.u.reg.cpu_devices = DT__WIRE_MAX_DEVICES + 1;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK(n > 0);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "too many devices") != NULL);
    m.u.reg.cpu_devices = 1;
    n = dt__wire_encode(&m, buf, sizeof buf);
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_OK);
    buf[DT__WIRE_HEADER + 12 + 2] = 0; /* the host name's first byte */
    CHECK_EQ(dt__wire_decode(buf, n, &out), DT_EINVAL);
    CHECK(strstr(dt_last_error(), "NUL") != NULL);
    /* Type 0 and past the end are not encoded. */
    m.type = 0;
    CHECK_EQ(dt__wire_encode(&m, buf, sizeof buf), 0);
    m.type = DT__WIRE_TYPE_END;
    CHECK_EQ(dt__wire_encode(&m, buf, sizeof buf), 0);
}

/* Random bytes behind a valid header prefix (magic, version, a type and a
 * length that match), so the payload parsers see them. */
static void test_random(void) {
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    uint8_t buf[DT__WIRE_HEADER + 600];
    int accepted = 0;
    for (int iter = 0; iter < 200000; iter++) {
        size_t plen = 0;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        plen = (size_t)(x % 600);
        for (size_t i = 0; i < DT__WIRE_HEADER + plen; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = (uint8_t)x;
        }
        memcpy(buf, DT__WIRE_MAGIC, 4);
        buf[4] = DT__WIRE_VERSION, buf[5] = 0;
        buf[6] = (uint8_t)(1 + iter % (DT__WIRE_TYPE_END - 1)), buf[7] = 0;
        buf[8] = (uint8_t)plen, buf[9] = (uint8_t)(plen >> 8), buf[10] = buf[11] = 0;
        memset(buf + 12, 0, 4);
        if (iter % 3 == 0 && plen >= 14) { /* a plausible register: short host, short token */
            buf[6] = DT__WIRE_REGISTER;
            buf[DT__WIRE_HEADER + 1] = buf[DT__WIRE_HEADER + 2] = buf[DT__WIRE_HEADER + 3] = 0;
            buf[DT__WIRE_HEADER + 12] = (uint8_t)(x % 8), buf[DT__WIRE_HEADER + 13] = 0;
        }
        accepted += decode_exact(buf, DT__WIRE_HEADER + plen);
    }
    CHECK(accepted > 0); /* the fuzzer reached the accepting paths */
}

int main(void) {
    test_sha256();
    test_roundtrip_and_fuzz();
    test_refusals();
    test_random();
    if (failures)
        fprintf(stderr, "test_wire: %d failures\n", failures);
    return failures != 0;
}
