/*
 * The cluster wire format (wire.h has the framing and the contract): the
 * header, each type's payload, and the token helpers. A type's payload
 * layout is written above its writer and its reader, which sit side by
 * side; `kinds` has one row per type (name, extra frames, writer, reader).
 * A layout that changes is a new DT__WIRE_VERSION (5 now). Fields are
 * little-endian, signed ones in two's complement:
 *   uN, iN := N / 8 bytes
 *   text   := u16 len u8 bytes[len]  (len < DT__WIRE_TEXT_MAX, no NUL)
 */
#include <stdatomic.h>
#include <string.h>

#include "dtorch/dtorch_cluster.h"
#include "net/wire.h"

/* ------------------------------------------------------------ the fields */

typedef struct writer {
    uint8_t *p, *end;
    int full;
} writer;

static void put(writer *w, uint64_t v, int n) {
    if (w->full || w->end - w->p < n) {
        w->full = 1;
        return;
    }
    for (int i = 0; i < n; i++)
        *w->p++ = (uint8_t)(v >> (8 * i));
}

static void put_bytes(writer *w, const void *s, size_t n) {
    put(w, n, 2);
    if (w->full || (size_t)(w->end - w->p) < n) {
        w->full = 1;
        return;
    }
    if (n)
        memcpy(w->p, s, n);
    w->p += n;
}

static void put_text(writer *w, const char *s) {
    size_t n = s ? strnlen(s, DT__WIRE_TEXT_MAX - 1) : 0;
    put_bytes(w, s, n);
}

typedef struct reader {
    const uint8_t *p, *end;
    const char *why; /* the first failure */
} reader;

static uint64_t get(reader *r, int n) {
    if (r->why)
        return 0;
    if (r->end - r->p < n) {
        r->why = "truncated";
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)*r->p++ << (8 * i);
    return v;
}

static const uint8_t *get_bytes(reader *r, size_t max, size_t *n) {
    *n = (size_t)get(r, 2);
    if (r->why)
        return NULL;
    if (*n > max) {
        r->why = "field too long";
        return NULL;
    }
    if ((size_t)(r->end - r->p) < *n) {
        r->why = "truncated";
        return NULL;
    }
    const uint8_t *s = r->p;
    r->p += *n;
    return s;
}

static void get_text(reader *r, char out[DT__WIRE_TEXT_MAX]) {
    size_t n = 0;
    const uint8_t *s = get_bytes(r, DT__WIRE_TEXT_MAX - 1, &n);
    out[0] = 0;
    if (!s)
        return;
    if (memchr(s, 0, n)) {
        r->why = "text with a NUL byte";
        return;
    }
    memcpy(out, s, n);
    out[n] = 0;
}

/* ---------------------------------------------------------- the payloads */

/* Each reader checks its fields' bounds once they are read (get leaves
 * every field 0 after the first failure, so a check runs only while
 * r->why is unset). */

/* REGISTER := u32 cpu_devices u32 cuda_devices u32 pid text host
 *             u16 token_len u8 token[token_len] u32 data_port u32 flags */
static void put_register(writer *w, const dt__wire_msg *m) {
    put(w, m->u.reg.cpu_devices, 4);
    put(w, m->u.reg.cuda_devices, 4);
    put(w, m->u.reg.pid, 4);
    put_text(w, m->u.reg.host);
    put_bytes(w, m->u.reg.token, m->u.reg.token_len);
    put(w, m->u.reg.data_port, 4);
    put(w, m->u.reg.flags, 4);
}

static void get_register(reader *r, dt__wire_msg *m) {
    m->u.reg.cpu_devices = (uint32_t)get(r, 4);
    m->u.reg.cuda_devices = (uint32_t)get(r, 4);
    m->u.reg.pid = (uint32_t)get(r, 4);
    get_text(r, m->u.reg.host);
    m->u.reg.token = get_bytes(r, DT__WIRE_TOKEN_MAX, &m->u.reg.token_len);
    m->u.reg.data_port = (uint32_t)get(r, 4);
    m->u.reg.flags = (uint32_t)get(r, 4);
    if (!r->why && (m->u.reg.flags & ~(DT__WIRE_REG_NCCL | DT__WIRE_REG_CUDA_VIRTUAL)))
        r->why = "unknown flags";
    else if (!r->why &&
             (m->u.reg.cpu_devices > DT__WIRE_MAX_DEVICES || m->u.reg.cuda_devices > DT__WIRE_MAX_DEVICES))
        r->why = "too many devices";
    else if (!r->why && m->u.reg.data_port > 65535)
        r->why = "bad port";
}

/* WELCOME := u32 node_index i64 first_device_id u32 heartbeat_ms u32 beat_port
 *            i64 first_cuda_device_id */
static void put_welcome(writer *w, const dt__wire_msg *m) {
    put(w, m->u.welcome.node_index, 4);
    put(w, (uint64_t)m->u.welcome.first_device_id, 8);
    put(w, m->u.welcome.heartbeat_ms, 4);
    put(w, m->u.welcome.beat_port, 4);
    put(w, (uint64_t)m->u.welcome.first_cuda_device_id, 8);
}

static void get_welcome(reader *r, dt__wire_msg *m) {
    m->u.welcome.node_index = (uint32_t)get(r, 4);
    m->u.welcome.first_device_id = (int64_t)get(r, 8);
    m->u.welcome.heartbeat_ms = (uint32_t)get(r, 4);
    m->u.welcome.beat_port = (uint32_t)get(r, 4);
    m->u.welcome.first_cuda_device_id = (int64_t)get(r, 8);
    if (!r->why && (m->u.welcome.first_device_id < 0 || m->u.welcome.first_cuda_device_id < 0 ||
                    m->u.welcome.heartbeat_ms == 0 || m->u.welcome.heartbeat_ms > 3600 * 1000 ||
                    m->u.welcome.beat_port == 0 || m->u.welcome.beat_port > 65535))
        r->why = "bad device id, heartbeat interval or port";
}

/* REFUSE := text reason */
static void put_refuse(writer *w, const dt__wire_msg *m) { put_text(w, m->u.refuse.reason); }

static void get_refuse(reader *r, dt__wire_msg *m) { get_text(r, m->u.refuse.reason); }

/* HEARTBEAT := u64 seq i64 sent_ns i64 echo_ns i64 echo_recv_ns */
static void put_heartbeat(writer *w, const dt__wire_msg *m) {
    put(w, m->u.heartbeat.seq, 8);
    put(w, (uint64_t)m->u.heartbeat.sent_ns, 8);
    put(w, (uint64_t)m->u.heartbeat.echo_ns, 8);
    put(w, (uint64_t)m->u.heartbeat.echo_recv_ns, 8);
}

static void get_heartbeat(reader *r, dt__wire_msg *m) {
    m->u.heartbeat.seq = get(r, 8);
    m->u.heartbeat.sent_ns = (int64_t)get(r, 8);
    m->u.heartbeat.echo_ns = (int64_t)get(r, 8);
    m->u.heartbeat.echo_recv_ns = (int64_t)get(r, 8);
}

/* BATCH := u16 len u8 backend[len] u64 seq u32 flags  (the kernels and
 * inputs in the extra frame; RELEASE has no payload, its blob ids in the
 * extra frame) */
static void put_batch(writer *w, const dt__wire_msg *m) {
    put_bytes(w, m->u.batch.backend, strnlen(m->u.batch.backend, sizeof m->u.batch.backend - 1));
    put(w, m->u.batch.seq, 8);
    put(w, m->u.batch.flags, 4);
}

static void get_batch(reader *r, dt__wire_msg *m) {
    size_t n = 0;
    const uint8_t *s = get_bytes(r, sizeof m->u.batch.backend - 1, &n);
    if (s && memchr(s, 0, n))
        r->why = "text with a NUL byte";
    else if (s) {
        memcpy(m->u.batch.backend, s, n);
        m->u.batch.backend[n] = 0;
    }
    m->u.batch.seq = get(r, 8);
    m->u.batch.flags = (uint32_t)get(r, 4);
    if (!r->why && (m->u.batch.flags & ~DT__WIRE_BATCH_TRACE))
        r->why = "unknown batch flags";
}

/* RESULT := u64 future i32 rank u32 count i32 status u64 batch text error
 *           i64 data[4]  (the node's DATA counters, DT__WIRE_DATA_*; a
 *           read's piece, or a sync's kernel records while tracing,
 *           in the extra frame, never with an error) */
static void put_result(writer *w, const dt__wire_msg *m) {
    put(w, m->u.result.future, 8);
    put(w, (uint32_t)m->u.result.rank, 4);
    put(w, m->u.result.count, 4);
    put(w, (uint32_t)m->u.result.status, 4);
    put(w, m->u.result.batch, 8);
    put_text(w, m->u.result.error);
    for (int i = 0; i < 4; i++)
        put(w, (uint64_t)m->u.result.data[i], 8);
}

static void get_result(reader *r, dt__wire_msg *m) {
    m->u.result.future = get(r, 8);
    m->u.result.rank = (int32_t)(uint32_t)get(r, 4);
    m->u.result.count = (uint32_t)get(r, 4);
    m->u.result.status = (int32_t)(uint32_t)get(r, 4);
    m->u.result.batch = get(r, 8);
    get_text(r, m->u.result.error);
    for (int i = 0; i < 4; i++)
        m->u.result.data[i] = (int64_t)get(r, 8);
    if (!r->why && (m->u.result.data[0] < 0 || m->u.result.data[1] < 0 || m->u.result.data[2] < 0 ||
                    m->u.result.data[3] < 0))
        r->why = "bad data counters";
    if (!r->why && (m->u.result.rank < -1 || m->u.result.count > (1u << 30) ||
                    (m->nextra && (m->u.result.future == 0 || m->u.result.status != 0))))
        r->why = "bad rank, count or payload";
}

/* DATA := u32 tag u64 group u64 seq i32 from i32 to i64 src_device
 *         i64 dst_device u64 offset u64 total i32 dtype u32 ndim
 *         i64 shape[ndim] text error  (the chunk's bytes in the extra frame) */
static void put_data(writer *w, const dt__wire_msg *m) {
    const dt__xfer_hdr *h = &m->u.data;
    put(w, h->tag, 4);
    put(w, h->group, 8);
    put(w, h->seq, 8);
    put(w, (uint32_t)h->from, 4);
    put(w, (uint32_t)h->to, 4);
    put(w, (uint64_t)h->src_device, 8);
    put(w, (uint64_t)h->dst_device, 8);
    put(w, h->offset, 8);
    put(w, h->total, 8);
    put(w, (uint32_t)h->dtype, 4);
    put(w, h->ndim, 4); /* dt__wire_encode refused more than DT_MAX_NDIM */
    for (uint32_t d = 0; d < h->ndim; d++)
        put(w, (uint64_t)h->shape[d], 8);
    put_text(w, h->error);
}

static void get_data(reader *r, dt__wire_msg *m) {
    dt__xfer_hdr *h = &m->u.data;
    h->tag = (uint32_t)get(r, 4);
    h->group = get(r, 8);
    h->seq = get(r, 8);
    h->from = (int32_t)(uint32_t)get(r, 4);
    h->to = (int32_t)(uint32_t)get(r, 4);
    h->src_device = (int64_t)get(r, 8);
    h->dst_device = (int64_t)get(r, 8);
    h->offset = get(r, 8);
    h->total = get(r, 8);
    h->dtype = (int32_t)(uint32_t)get(r, 4);
    h->ndim = (uint32_t)get(r, 4);
    if (!r->why && h->ndim > DT_MAX_NDIM)
        r->why = "too many dims";
    for (uint32_t d = 0; !r->why && d < h->ndim; d++)
        if ((h->shape[d] = (int64_t)get(r, 8)) < 0)
            r->why = "a negative size";
    get_text(r, h->error);
    if (!r->why && (h->from < 0 || h->to < 0 || h->src_device < 0 || h->dst_device < 0 || h->dtype < 0 ||
                    h->dtype >= DT_DTYPE_COUNT || (m->nextra && h->error[0]) || h->offset > h->total ||
                    (!m->nextra && h->total)))
        r->why = "bad rank, device, dtype or payload";
}

/* LOST := i64 first_device_id i64 count text error */
static void put_lost(writer *w, const dt__wire_msg *m) {
    put(w, (uint64_t)m->u.lost.first_device_id, 8);
    put(w, (uint64_t)m->u.lost.count, 8);
    put_text(w, m->u.lost.error);
}

static void get_lost(reader *r, dt__wire_msg *m) {
    m->u.lost.first_device_id = (int64_t)get(r, 8);
    m->u.lost.count = (int64_t)get(r, 8);
    get_text(r, m->u.lost.error);
    if (!r->why && (m->u.lost.first_device_id < 0 || m->u.lost.count < 0))
        r->why = "bad device range";
}

/* FAILED := u32 tag u64 group u64 seq i64 first_device_id i64 count text error */
static void put_failed(writer *w, const dt__wire_msg *m) {
    put(w, m->u.failed.tag, 4);
    put(w, m->u.failed.group, 8);
    put(w, m->u.failed.seq, 8);
    put(w, (uint64_t)m->u.failed.first_device_id, 8);
    put(w, (uint64_t)m->u.failed.count, 8);
    put_text(w, m->u.failed.error);
}

static void get_failed(reader *r, dt__wire_msg *m) {
    m->u.failed.tag = (uint32_t)get(r, 4);
    m->u.failed.group = get(r, 8);
    m->u.failed.seq = get(r, 8);
    m->u.failed.first_device_id = (int64_t)get(r, 8);
    m->u.failed.count = (int64_t)get(r, 8);
    get_text(r, m->u.failed.error);
    if (!r->why && (m->u.failed.first_device_id < 0 || m->u.failed.count < 0))
        r->why = "bad device range";
}

/* PEER := u32 node_index i64 first_device_id i64 count u32 port text address
 *         i64 cuda_first i64 cuda_count */
static void put_peer(writer *w, const dt__wire_msg *m) {
    put(w, m->u.peer.node_index, 4);
    put(w, (uint64_t)m->u.peer.first_device_id, 8);
    put(w, (uint64_t)m->u.peer.count, 8);
    put(w, m->u.peer.port, 4);
    put_text(w, m->u.peer.address);
    put(w, (uint64_t)m->u.peer.cuda_first, 8);
    put(w, (uint64_t)m->u.peer.cuda_count, 8);
}

static void get_peer(reader *r, dt__wire_msg *m) {
    m->u.peer.node_index = (uint32_t)get(r, 4);
    m->u.peer.first_device_id = (int64_t)get(r, 8);
    m->u.peer.count = (int64_t)get(r, 8);
    m->u.peer.port = (uint32_t)get(r, 4);
    get_text(r, m->u.peer.address);
    m->u.peer.cuda_first = (int64_t)get(r, 8);
    m->u.peer.cuda_count = (int64_t)get(r, 8);
    if (!r->why &&
        (m->u.peer.first_device_id < 0 || m->u.peer.count < 0 || m->u.peer.cuda_first < 0 ||
         m->u.peer.cuda_count < 0 || m->u.peer.port == 0 || m->u.peer.port > 65535 || !m->u.peer.address[0]))
        r->why = "bad device range, port or address";
}

/* NCCLID := u32 tag u64 group u32 nranks u16 len u8 id[len]  (len is
 *           DT__WIRE_NCCL_ID) */
static void put_ncclid(writer *w, const dt__wire_msg *m) {
    put(w, m->u.ncclid.tag, 4);
    put(w, m->u.ncclid.group, 8);
    put(w, m->u.ncclid.nranks, 4);
    put_bytes(w, m->u.ncclid.id, DT__WIRE_NCCL_ID);
}

static void get_ncclid(reader *r, dt__wire_msg *m) {
    m->u.ncclid.tag = (uint32_t)get(r, 4);
    m->u.ncclid.group = get(r, 8);
    m->u.ncclid.nranks = (uint32_t)get(r, 4);
    size_t n = 0;
    const uint8_t *id = get_bytes(r, DT__WIRE_NCCL_ID, &n);
    if (!r->why && (n != DT__WIRE_NCCL_ID || m->u.ncclid.nranks < 2 || m->u.ncclid.nranks > (1u << 20)))
        r->why = "bad id length or group size";
    else if (id)
        memcpy(m->u.ncclid.id, id, DT__WIRE_NCCL_ID);
}

/* ------------------------------------------------------------- the types */

/* One row per type: its name, how many extra frames it carries (at least,
 * at most), and its payload's writer and reader (NULL: no payload, as
 * STOP, BYE and RELEASE). */
typedef struct kind {
    const char *name;
    uint32_t min_extra, max_extra;
    void (*put)(writer *w, const dt__wire_msg *m);
    void (*get)(reader *r, dt__wire_msg *m);
} kind;

static const kind kinds[DT__WIRE_TYPE_END] = {
    [DT__WIRE_REGISTER] = {"register", 0, 0, put_register, get_register},
    [DT__WIRE_WELCOME] = {"welcome", 0, 0, put_welcome, get_welcome},
    [DT__WIRE_REFUSE] = {"refuse", 0, 0, put_refuse, get_refuse},
    [DT__WIRE_HEARTBEAT] = {"heartbeat", 0, 0, put_heartbeat, get_heartbeat},
    [DT__WIRE_STOP] = {"stop", 0, 0, NULL, NULL},
    [DT__WIRE_BYE] = {"bye", 0, 0, NULL, NULL},
    [DT__WIRE_BATCH] = {"batch", 1, 1, put_batch, get_batch},
    [DT__WIRE_RELEASE] = {"release", 1, 1, NULL, NULL},
    [DT__WIRE_RESULT] = {"result", 0, 1, put_result, get_result},
    [DT__WIRE_DATA] = {"data", 0, 1, put_data, get_data},
    [DT__WIRE_LOST] = {"lost", 0, 0, put_lost, get_lost},
    [DT__WIRE_FAILED] = {"failed", 0, 0, put_failed, get_failed},
    [DT__WIRE_PEER] = {"peer", 0, 0, put_peer, get_peer},
    [DT__WIRE_NCCLID] = {"ncclid", 0, 0, put_ncclid, get_ncclid},
};

const char *dt__wire_type_name(int type) {
    return type > 0 && type < DT__WIRE_TYPE_END && kinds[type].name ? kinds[type].name : "unknown";
}

/* ---------------------------------------------------------------- encode */

size_t dt__wire_encode(const dt__wire_msg *m, uint8_t *buf, size_t cap) {
    if (m->type <= 0 || m->type >= DT__WIRE_TYPE_END) {
        dt__error(DT_EINVAL, "wire: cannot encode a message of type %d", m->type);
        return 0;
    }
    if (m->type == DT__WIRE_REGISTER && m->u.reg.token_len > DT__WIRE_TOKEN_MAX) {
        dt__error(DT_EINVAL, "wire: a cluster token is at most %d bytes, not %zu", DT__WIRE_TOKEN_MAX,
                  m->u.reg.token_len);
        return 0;
    }
    if (m->type == DT__WIRE_DATA && m->u.data.ndim > DT_MAX_NDIM) {
        dt__error(DT_EINVAL, "wire: a data message has at most %d dims, not %u", DT_MAX_NDIM, m->u.data.ndim);
        return 0;
    }
    writer w = {buf, buf + cap, cap < DT__WIRE_HEADER};
    if (!w.full)
        memcpy(w.p, DT__WIRE_MAGIC, 4), w.p += 4;
    put(&w, (uint64_t)dt__wire_version(), 2);
    put(&w, (uint64_t)m->type, 2);
    uint8_t *len_at = w.p;
    put(&w, 0, 4); /* the payload's length, written last */
    put(&w, m->nextra, 4);
    uint8_t *body = w.p;
    if (kinds[m->type].put)
        kinds[m->type].put(&w, m);
    if (w.full) {
        dt__error(DT_EINVAL, "wire: a %s message does not fit in %zu bytes", dt__wire_type_name(m->type),
                  cap);
        return 0;
    }
    writer lw = {len_at, len_at + 4, 0};
    put(&lw, (uint64_t)(w.p - body), 4);
    return (size_t)(w.p - buf);
}

/* ---------------------------------------------------------------- decode */

static _Atomic int version_override; /* dt_debug_wire_version; 0: DT__WIRE_VERSION */

int dt__wire_version(void) {
    int v = atomic_load_explicit(&version_override, memory_order_relaxed);
    return v ? v : DT__WIRE_VERSION;
}

dt_status dt_debug_wire_version(int version) {
    if (version < 0 || version > 65535)
        return dt__error(DT_EINVAL, "dt_debug_wire_version: %d is not a version (0..65535)", version);
    atomic_store_explicit(&version_override, version, memory_order_relaxed);
    return DT_OK;
}

int dt__wire_foreign_version(const void *buf, size_t len, int *type) {
    if (!buf || len < DT__WIRE_HEADER || memcmp(buf, DT__WIRE_MAGIC, 4) != 0)
        return 0;
    reader r = {(const uint8_t *)buf + 4, (const uint8_t *)buf + len, NULL};
    int version = (int)get(&r, 2);
    *type = (int)get(&r, 2);
    return version != dt__wire_version() ? version : 0;
}

/* The header after the magic, checked against this version, the types,
 * the frame's `len` bytes and the type's extra frames; sets m->type and
 * m->nextra. */
static dt_status get_header(reader *r, size_t len, dt__wire_msg *m) {
    uint64_t version = get(r, 2), type = get(r, 2), length = get(r, 4);
    m->nextra = (uint32_t)get(r, 4);
    if (version != (uint64_t)dt__wire_version())
        return dt__error(DT_EINVAL, "wire: message version %llu, this build speaks version %d",
                         (unsigned long long)version, dt__wire_version());
    if (type == 0 || type >= DT__WIRE_TYPE_END)
        return dt__error(DT_EINVAL, "wire: unknown message type %llu", (unsigned long long)type);
    if (length != len - DT__WIRE_HEADER)
        return dt__error(DT_EINVAL, "wire: a %s message says %llu payload bytes, the frame holds %zu",
                         dt__wire_type_name((int)type), (unsigned long long)length, len - DT__WIRE_HEADER);
    if (m->nextra < kinds[type].min_extra || m->nextra > kinds[type].max_extra)
        return dt__error(DT_EINVAL, "wire: a %s message cannot carry %u extra frames",
                         dt__wire_type_name((int)type), m->nextra);
    m->type = (int)type;
    return DT_OK;
}

dt_status dt__wire_decode(const void *buf, size_t len, dt__wire_msg *m) {
    memset(m, 0, sizeof *m);
    if (!buf || len < DT__WIRE_HEADER || memcmp(buf, DT__WIRE_MAGIC, 4) != 0)
        return dt__error(DT_EINVAL, "wire: not a dtorch cluster message (%zu bytes)", len);
    reader r = {(const uint8_t *)buf + 4, (const uint8_t *)buf + len, NULL};
    dt_status st = get_header(&r, len, m);
    if (st != DT_OK)
        return st;
    if (kinds[m->type].get)
        kinds[m->type].get(&r, m);
    if (!r.why && r.p != r.end)
        r.why = "trailing bytes";
    if (r.why) {
        int t = m->type;
        memset(m, 0, sizeof *m);
        return dt__error(DT_EINVAL, "wire: malformed %s message: %s", dt__wire_type_name(t), r.why);
    }
    return DT_OK;
}

/* ---------------------------------------------------------------- tokens */

void dt__wire_derive(const char *token, const char *purpose, uint8_t out[32]) {
    static const char tag[] = "dtorch-cluster-v1";
    uint8_t b[sizeof tag + 64 + DT__WIRE_TOKEN_MAX];
    size_t pl = strnlen(purpose, 63), tl = strnlen(token, DT__WIRE_TOKEN_MAX);
    memcpy(b, tag, sizeof tag); /* with its NUL */
    memcpy(b + sizeof tag, purpose, pl);
    b[sizeof tag + pl] = 0;
    memcpy(b + sizeof tag + pl + 1, token, tl);
    size_t n = sizeof tag + pl + 1 + tl;
    dt__sha256(b, n, out);
    memset(b, 0, n);
}

int dt__wire_token_equal(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
    uint8_t da[32], db[32];
    dt__sha256(a, alen, da);
    dt__sha256(b, blen, db);
    volatile uint8_t diff = 0;
    for (int i = 0; i < 32; i++)
        diff |= (uint8_t)(da[i] ^ db[i]);
    return diff == 0;
}
