/*
 * Data between nodes (docs/decisions.md, "Data between nodes"): the process's mailbox and outbox
 * for the point-to-point messages of collectives whose ranks live in
 * several processes (inproc.c's spanning groups), independent of the
 * transport. Pure C: the sanitizer builds test it without ZeroMQ.
 *
 * A rank's worker posts each message it owes a rank of another node
 * (dt__xfer_post: queued, never blocking) and the transport's thread (the
 * main node's cluster thread, a worker node's thread) takes the outbox
 * (dt__xfer_take), sends each message and delivers the ones that arrive
 * for this node's ranks (dt__xfer_deliver). A rank that needs a peer's
 * message waits for it on a condition (dt__xfer_wait), which wakes when it
 * arrives, when the peer's node is lost (dt__xfer_lost: the main node saw
 * its heartbeats stop and told every node) or when this node's cluster
 * ends (dt__xfer_abort): never a spin, never a hang.
 *
 * Routing is the transport's: between two worker nodes straight when
 * their connection is up, otherwise through the main node
 * (docs/decisions.md).
 *
 * Shared messages: a part that several ranks of one node need (an
 * all-gather's input, an all-reduce's reduced range) travels to that node
 * once, addressed to DT__XFER_SHARED instead of a rank, and each of the
 * node's ranks that needs it takes it from the mailbox (dt__xfer_wait with
 * `shares`, the number of them): they read one payload. To send that way
 * a rank must know which devices share a node: the node table
 * (dt__xfer_node_of, by device key), which the main node sets here and
 * sends every worker node (dt__xfer_layout_msg) when a node joins, ahead
 * of any batch that could use it on the same connection. A shared message's dst_device is
 * one of the receiving ranks' devices, so the transport routes it, as any
 * message, to the node that owns dst_device (straight or relayed).
 *
 * Threads: every function on any thread. The hooks are called without the
 * mailbox's lock held; dt__xfer_lost and dt__xfer_abort may be called with
 * other locks held (the mailbox's lock is a leaf).
 */
#ifndef DT_COMM_XFER_H
#define DT_COMM_XFER_H

#include <stddef.h>
#include <stdint.h>

#include "common/common.h"

#define DT__XFER_TEXT 512 /* bytes of an error, NUL included (wire.h's text) */

/* Device keys: how the mailbox and the wire (DATA, LOST, FAILED) name a
 * device, whatever its type. CPU device id i is key i (what it always
 * was); CUDA device id i is DT__XFER_CUDA_KEY + i. So each node's devices
 * of one type are one range of keys, and a key says its type. Ids stay
 * below 2^40: a cluster has at most 2^32 nodes of DT__WIRE_MAX_DEVICES. */
#define DT__XFER_CUDA_KEY ((int64_t)1 << 40)
static inline int64_t dt__xfer_key(int type, int64_t id) {
    return type == DT_DEVICE_CUDA ? DT__XFER_CUDA_KEY + id : id;
}
static inline int dt__xfer_key_type(int64_t key) {
    return key >= DT__XFER_CUDA_KEY ? DT_DEVICE_CUDA : DT_DEVICE_CPU;
}
static inline int64_t dt__xfer_key_id(int64_t key) {
    return key >= DT__XFER_CUDA_KEY ? key - DT__XFER_CUDA_KEY : key;
}

/* One message's header: which collective (main node's graph tag and group
 * id, sequence number), from which rank to which, the devices, and the
 * payload's description: a value (dtype, shape; the bytes follow) or the
 * failure of the sender's input (error, no bytes). */
typedef struct dt__xfer_hdr {
    uint32_t tag;
    uint64_t group, seq;
    int32_t from, to;
    int64_t src_device, dst_device;
    uint64_t offset, total; /* this chunk's place in the payload of `total` bytes */
    int32_t dtype;
    uint32_t ndim;
    int64_t shape[DT_MAX_NDIM];
    char error[DT__XFER_TEXT];
} dt__xfer_hdr;

/* A message with its payload: `len` bytes at `data`, owned by whoever
 * `release(arg)` lets go of (NULL: nothing to release). */
typedef struct dt__xfer_msg {
    struct dt__xfer_msg *next;
    dt__xfer_hdr h;
    const void *data;
    size_t len;
    void (*release)(void *arg);
    void *arg;
    /* The mailbox's own (xfer.c): a shared message's takers still to come
     * and the reference count its takers' views hold. */
    int left;
    struct xfer_share *share;
} dt__xfer_msg;

/* `to` of a message for every rank of the receiving node that needs it
 * (its dst_device: any of them, for the routing). Not a rank (ranks are
 * below a group's size, an int32), and not negative, which the wire
 * refuses (net/wire.c). */
#define DT__XFER_SHARED INT32_MAX
/* dt__xfer_node_of: a device whose node this process does not know. */
#define DT__XFER_NODE_UNKNOWN (-2)

/* A collective's second round of messages (an all-reduce's all-gather,
 * comm/span.c) is numbered seq | DT__XFER_ROUND2, apart from the first
 * round's among the same ranks; it is still collective seq for
 * dt__xfer_fail_parts. Sequence numbers never reach this bit. */
#define DT__XFER_ROUND2 ((uint64_t)1 << 63)

/* Frees m and lets go of its payload. */
void dt__xfer_msg_free(dt__xfer_msg *m);

/* How this process reaches other nodes: is_local(key) is 1 when the device
 * of key `key` (dt__xfer_key) is this process's; wake() tells the transport's thread that the
 * outbox has work. NULL (no cluster): every device is local. */
typedef struct dt__xfer_hooks {
    int (*is_local)(int64_t key);
    void (*wake)(void);
} dt__xfer_hooks;
/* Installs the hooks (copied) and forgets losses and aborts of an earlier
 * cluster. */
void dt__xfer_start(const dt__xfer_hooks *h);
/* Removes the hooks and frees every queued message. */
void dt__xfer_stop(void);

/* 1 when the device of key `key` is this process's (always, without a
 * cluster). */
int dt__xfer_is_local(int64_t key);

/* Queues m (taken over) for the transport. A node that is gone, or no
 * transport: m is freed. */
void dt__xfer_post(dt__xfer_msg *m);
/* The transport's thread: every queued message, oldest first (NULL when
 * none); each is the caller's to send and free. */
dt__xfer_msg *dt__xfer_take(void);
/* The transport's thread: m (taken over) arrived for one of this
 * process's ranks: a whole message, or one chunk of it (h.offset, m->len
 * bytes of h.total), kept until the last chunk has come (a chunk that does
 * not fit its message is dropped). */
void dt__xfer_deliver(dt__xfer_msg *m);
/* The transport sends a payload in chunks of at most this many bytes, so
 * that a large one does not hold back every other message on the
 * connection: each chunk counts as a sign of life, as a heartbeat does. */
#define DT__XFER_CHUNK ((size_t)1 << 20)
/* Waits for the message of (tag, group, seq) from rank `from` (on device
 * src_device) to rank `to`, or the shared one (DT__XFER_SHARED) that
 * `shares` ranks of this node take (each calls this once with the same
 * `shares`; the last one's take removes it), and returns it (the caller's
 * to free; a shared message's payload lives until every taker freed its
 * copy). NULL with the reason in `err` when src_device's node is lost, the
 * cluster ended, or out of memory. */
dt__xfer_msg *dt__xfer_wait(uint32_t tag, uint64_t group, uint64_t seq, int32_t from, int32_t to,
                            int64_t src_device, int shares, char *err, size_t errlen);
/* The devices of keys [first, first + count) are on a node that is gone (`why`
 * names it): waits for them fail, now and later. */
void dt__xfer_lost(int64_t first, int64_t count, const char *why);
/* Collective (tag, group, seq) gets no part from the devices of keys
 * [first, first + count): their node could not run the batch that holds their
 * ranks (`why` names it). Waits for those parts fail with `why`, now and
 * later, and parts sent to those devices' ranks are dropped (they will
 * never be taken). Kept until dt__xfer_start or dt__xfer_stop. */
void dt__xfer_fail_parts(uint32_t tag, uint64_t group, uint64_t seq, int64_t first, int64_t count,
                         const char *why);
/* Every other node is gone (`why`): waits for remote messages fail, now
 * and later, until dt__xfer_start. */
void dt__xfer_abort(const char *why);
/* Messages waiting in the mailbox, whole (tests). */
size_t dt__xfer_pending(void);

/* The node table: entry i is the devices of keys [first[i], first[i] +
 * count[i]) (dt__xfer_key), all of one type on one node (the main node's
 * and every worker node's, lost ones too: ids are never reused). A node
 * with devices of both types has an entry for each: the table says which
 * devices of one type share a node, which is what shared messages need (a
 * group's ranks are of one type, but for a copy between device types,
 * which has one receiver). Replaces the table; dt__xfer_start empties it. */
void dt__xfer_set_layout(int n, const int64_t *first, const int64_t *count);
/* The index of the node table's entry that holds the device of key `key`,
 * or DT__XFER_NODE_UNKNOWN: two keys of one type on one node have the same
 * index. */
int dt__xfer_node_of(int64_t key);
/* The message that carries the node table to a worker node (group 0, which
 * no collective uses: dt__xfer_deliver takes it in as the table); NULL when
 * out of memory. */
dt__xfer_msg *dt__xfer_layout_msg(int n, const int64_t *first, const int64_t *count);

/* Traffic counters (dt_cluster_counters): DATA payload bytes and frames
 * the transport sent (`out`: 1) or received (0). Only the main node's
 * transport counts (net/cluster_data.c): worker nodes' direct messages to
 * each other are not in them. Any thread. */
void dt__xfer_count(int out, size_t bytes, size_t frames);
void dt__xfer_counters(int64_t *bytes_out, int64_t *frames_out, int64_t *bytes_in, int64_t *frames_in);

#endif /* DT_COMM_XFER_H */
