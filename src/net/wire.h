/*
 * The cluster wire format: the framed, versioned messages a main node and
 * its worker nodes (docs/cluster.md) exchange over ZeroMQ, encoded and
 * decoded in this one place (wire.c; docs/decisions.md, "Worker nodes:
 * formation, tokens, heartbeats", says why it is apart). Pure C: nothing
 * here names ZeroMQ, so the decoder is tested (and fuzzed) in the
 * sanitizer builds.
 *
 * A message is one ZeroMQ frame holding a header and a payload, possibly
 * followed by `nextra` frames of raw bytes (tensor payloads, sent without a
 * copy: BATCH, RELEASE and RESULT carry one; their layout is
 * core/controller/remote.h's; DATA carries a value's raw bytes, comm/xfer.h):
 *   header  := "DTNW" u16 version u16 type u32 length u32 nextra
 *   payload := length bytes, laid out per type (wire.c, beside each type's
 *              writer and reader), little-endian.
 * The decoder checks the magic, the version, the type, that the frame holds
 * exactly header + length bytes, and every field against its bounds, so a
 * truncated, corrupt or foreign frame is DT_EINVAL with the reason in the
 * thread error, never a read out of bounds.
 *
 * Threads: every function here is pure and runs on any thread.
 */
#ifndef DT_NET_WIRE_H
#define DT_NET_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "comm/span_nccl.h"
#include "comm/xfer.h"
#include "common/common.h"

#define DT__WIRE_MAGIC "DTNW"
#define DT__WIRE_VERSION 5
#define DT__WIRE_HEADER 16
/* A RESULT's data counters (u.result.data): bytes and messages sent, bytes
 * and messages received. */
enum { DT__WIRE_DATA_BYTES_OUT, DT__WIRE_DATA_MSGS_OUT, DT__WIRE_DATA_BYTES_IN, DT__WIRE_DATA_MSGS_IN };
#define DT__WIRE_TOKEN_MAX 1024 /* bytes of a cluster token */
#define DT__WIRE_TEXT_MAX 512   /* bytes of a host name or a reason, NUL included */
#define DT__WIRE_MAX (DT__WIRE_HEADER + 64 + DT__WIRE_TOKEN_MAX + 2 * DT__WIRE_TEXT_MAX)
#define DT__WIRE_MAX_DEVICES 4096 /* CPU or CUDA devices one node may offer */
#define DT__WIRE_NCCL_ID 128      /* bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES) */
/* Bytes of one extra frame (a batch or a read's piece); only peers that
 * passed the CURVE handshake can send one (when libzmq has CURVE). */
#define DT__WIRE_FRAME_MAX ((int64_t)1 << 36)

/* Message types: append-only (a new type is a new number). */
typedef enum dt__wire_type {
    DT__WIRE_REGISTER = 1,  /* node -> main: join, with the token and the devices offered */
    DT__WIRE_WELCOME = 2,   /* main -> node: accepted; the node's index, devices, heartbeat */
    DT__WIRE_REFUSE = 3,    /* main -> node: refused, with the reason */
    DT__WIRE_HEARTBEAT = 4, /* both ways */
    DT__WIRE_STOP = 5,      /* main -> node: serve no more, exit 0 */
    DT__WIRE_BYE = 6,       /* node -> main: leaving */
    DT__WIRE_BATCH = 7,     /* main -> node: a round's kernels and inputs (1 extra frame) */
    DT__WIRE_RELEASE = 8,   /* main -> node: blobs it may drop (1 extra frame) */
    DT__WIRE_RESULT = 9,    /* node -> main: a read's piece or a sync's arrivals (0 or 1 frame) */
    DT__WIRE_DATA = 10,     /* both ways: a collective's part for a rank of another node (0 or 1 frame) */
    DT__WIRE_LOST = 11,     /* main -> node: a node is lost; waits for its devices fail */
    DT__WIRE_FAILED = 12,   /* main -> node: a collective gets no parts from a node's devices */
    DT__WIRE_PEER = 13,     /* main -> node: where another node takes DATA directly */
    DT__WIRE_NCCLID = 14,   /* main -> node: the NCCL unique id of a group spanning nodes */
    DT__WIRE_TYPE_END
} dt__wire_type;

/* REGISTER flags: NCCL loads in the node's process, and its CUDA devices
 * are logical ones sharing GPUs (DTORCH_DTENSOR_IN_SAME_DEVICE=1), which
 * NCCL cannot serve. The main node decides from them whether a group
 * spanning nodes uses NCCL (dt__cluster_span_nccl, cluster_remote.c); if
 * it does, dt__comm_nccl_span makes that group on each process. */
#define DT__WIRE_REG_NCCL 1u
/* BATCH flags: the main node traces (dtorch.profiler.trace): the node
 * records its kernels and sends their records with each sync's RESULT,
 * as its extra frame (subctl.h has the layout). */
#define DT__WIRE_BATCH_TRACE 1u
#define DT__WIRE_REG_CUDA_VIRTUAL 2u

/* One decoded message. Text fields are NUL-terminated copies; `token`
 * points into the decoded buffer (it is not text). */
typedef struct dt__wire_msg {
    int type;
    uint32_t nextra; /* raw frames that follow this one */
    union {
        struct {
            uint32_t cpu_devices, cuda_devices, pid;
            char host[DT__WIRE_TEXT_MAX];
            const uint8_t *token;
            size_t token_len;
            uint32_t data_port; /* where it takes DATA from other worker nodes (0: nowhere) */
            uint32_t flags;     /* DT__WIRE_REG_*: what its CUDA devices allow */
        } reg;
        struct {
            uint32_t node_index, heartbeat_ms;
            int64_t first_device_id;
            uint32_t beat_port;           /* the main node's heartbeat channel (same host) */
            int64_t first_cuda_device_id; /* its first global CUDA id (none: its count was 0) */
        } welcome;
        struct {
            char reason[DT__WIRE_TEXT_MAX];
        } refuse;
        struct {
            uint64_t seq;
            /* Clock readings (ns, dt__rec_now) for the clock offset
             * (cluster_beat.c): when the sender sent this, and, from a
             * worker node, when the main node sent the last heartbeat it
             * heard (echo_ns, the main node's clock) and when it heard it
             * (echo_recv_ns, its own); 0 when none yet. */
            int64_t sent_ns, echo_ns, echo_recv_ns;
        } heartbeat;
        struct {
            char backend[32]; /* the main graph's backend: the node runs the same */
            uint64_t seq;     /* the batch's number on its node's connection, from 1 */
            uint32_t flags;   /* DT__WIRE_BATCH_* */
        } batch;
        struct {
            uint64_t future; /* the main node's future id; 0: a whole batch failed */
            int32_t rank;    /* the piece of a read, or -1 (a sync) */
            uint32_t count;  /* arrivals */
            int32_t status;  /* dt_status: DT_OK, or the failure with `error` */
            uint64_t batch;  /* future 0: the seq of the batch that failed */
            char error[DT__WIRE_TEXT_MAX];
            /* The node's DATA counters when it sent this (DT__WIRE_DATA_*):
             * what it sent to and received from other nodes, so far. */
            int64_t data[4];
        } result;
        dt__xfer_hdr data; /* the bytes, when no error, in the extra frame */
        struct {
            int64_t first_device_id, count;
            char error[DT__WIRE_TEXT_MAX];
        } lost;
        struct {
            uint32_t node_index, port;
            int64_t first_device_id, count;
            char address[DT__WIRE_TEXT_MAX]; /* its address as the main node sees it */
            int64_t cuda_first, cuda_count;  /* its CUDA devices */
        } peer;
        struct {
            uint32_t tag;
            uint64_t group, seq; /* the collective, as a DATA message names it */
            int64_t first_device_id, count;
            char error[DT__WIRE_TEXT_MAX];
        } failed;
        struct {
            uint32_t tag;    /* the main node's graph */
            uint64_t group;  /* the group, as the batches' kernels name it */
            uint32_t nranks; /* its size */
            uint8_t id[DT__WIRE_NCCL_ID];
        } ncclid;
    } u;
} dt__wire_msg;

/* Encodes `m` (type and the fields of its type; text longer than the limit
 * is cut) into `buf` of `cap` bytes; the encoded length, or 0 (thread error
 * set) for an unknown type, a token over DT__WIRE_TOKEN_MAX, a DATA shape of
 * more than DT_MAX_NDIM dims or a buffer too small. A buffer of DT__WIRE_MAX bytes holds any message. */
size_t dt__wire_encode(const dt__wire_msg *m, uint8_t *buf, size_t cap);
/* The header's version of frame `buf` of `len` bytes when it is a dtorch
 * cluster message (the magic, a whole header) of a version other than the
 * one this process speaks, its type in *type; else 0. Message types and
 * the header are the same in every version, so a REGISTER of another
 * version is known as one: the main node refuses it saying why, and a node
 * that hears a main node of another version says so (docs/cluster.md). */
int dt__wire_foreign_version(const void *buf, size_t len, int *type);
/* The version this process speaks: DT__WIRE_VERSION, or the one
 * dt_debug_wire_version set (tests only). */
int dt__wire_version(void);

/* Decodes one frame of `len` bytes into *m. DT_EINVAL with the reason
 * ("wire: ...") for anything that is not a well-formed message of this
 * version. */
dt_status dt__wire_decode(const void *buf, size_t len, dt__wire_msg *m);
/* The type's name, for messages ("register", ...; "unknown"). */
const char *dt__wire_type_name(int type);

/* SHA-256 of `n` bytes (key derivation and the token comparison). */
void dt__sha256(const void *data, size_t n, uint8_t out[32]);
/* 32 bytes derived from `token` (at most DT__WIRE_TOKEN_MAX bytes are used)
 * for `purpose` (a short label): SHA-256 of "dtorch-cluster-v1", purpose
 * and token, NUL-separated. */
void dt__wire_derive(const char *token, const char *purpose, uint8_t out[32]);
/* 1 when the two tokens are equal. Constant time in the tokens' contents
 * and lengths: it compares their SHA-256 digests with no early exit. */
int dt__wire_token_equal(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen);

#endif /* DT_NET_WIRE_H */
