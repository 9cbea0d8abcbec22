/*
 * ZeroMQ pieces shared by the main node (cluster.c) and the worker node
 * (node.c): CURVE keys from the token, sending and receiving one framed
 * message (wire.h). Only compiled with ZeroMQ (DT_HAVE_ZMQ). A socket is
 * used by one thread at a time, as ZeroMQ requires; these helpers take no
 * lock.
 */
#ifndef DT_NET_TRANSPORT_H
#define DT_NET_TRANSPORT_H

#include <zmq.h>

#include "net/wire.h"

/* 1 when libzmq has CURVE. */
int dt__net_has_curve(void);
/* Makes `sock` a CURVE server (server = 1: the main node's listening
 * socket) or client of the main node whose keys `token` derives. Without
 * CURVE in libzmq, does nothing. -1 (thread error set) on failure. */
int dt__net_curve(void *sock, const char *token, int server);
/* Sends `m`, preceded by the routing id frame `rid` (a ROUTER socket) when
 * rid_len > 0. Never blocks: a peer that cannot take it loses it
 * (heartbeats notice a peer that is gone). */
dt_status dt__net_send(void *sock, const void *rid, size_t rid_len, const dt__wire_msg *m);

/* Sends `m` (m->nextra = 1) followed by `extra`, a frame the call takes
 * over (closed, sent or not; no copy of its bytes is made). As
 * dt__net_send otherwise. */
dt_status dt__net_send_extra(void *sock, const void *rid, size_t rid_len, const dt__wire_msg *m,
                             zmq_msg_t *extra);

/* Sends DATA message m (taken over: freed once sent or dropped), its
 * payload in chunks of at most DT__XFER_CHUNK bytes, each a DATA message
 * of its own (h.offset, h.total) whose frame is the payload's bytes, not a
 * copy. As dt__net_send otherwise. */
dt_status dt__net_send_data(void *sock, const void *rid, size_t rid_len, dt__xfer_msg *m);

/* One received message: the routing id (ROUTER), the peer's address, the
 * frame (m's token points into it) and, when m.nextra is 1, the extra frame
 * (`extra`, owned by the caller until dt__net_in_done). */
typedef struct dt__net_in {
    uint8_t rid[256];
    size_t rid_len;
    char peer[64];
    uint8_t frame[DT__WIRE_MAX];
    dt__wire_msg m;
    int has_extra;
    zmq_msg_t extra;
    /* A message of another wire version (dt__net_recv returned -1): its
     * version and type (dt__wire_foreign_version); 0 otherwise. */
    int foreign_version, foreign_type;
} dt__net_in;

/* Delivers DATA header h, whose payload is in's extra frame (moved into the
 * message: no copy), to this process's mailbox (dt__xfer_deliver). Out of
 * memory drops it. */
void dt__net_deliver_data(dt__net_in *in, const dt__xfer_hdr *h);
/* Closes the received extra frame, if any. */
void dt__net_in_done(dt__net_in *in);
/* Receives one message without blocking: 1 received, 0 none waiting, -1 a
 * malformed message (dropped, all its frames read; thread error set). With
 * `router`, the first frame is the routing id. */
int dt__net_recv(void *sock, int router, dt__net_in *in);
/* Lets `sock` take extra frames up to DT__WIRE_FRAME_MAX and queue without
 * a high-water mark (a kernel batch is never dropped for being one too
 * many). -1 (thread error set) on failure. */
int dt__net_bulk(void *sock);

/* This process's CUDA devices as the cluster numbers them (cuda_devices.c):
 * how many the default backend's CUDA variant sees (virtualisation
 * applied; 0 without a GPU, and then, when `why` is given, the reason in
 * it), and the DT__WIRE_REG_* flags a REGISTER carries for them. */
int64_t dt__net_cuda_count(char *why, size_t whylen);
uint32_t dt__net_cuda_flags(void);

/* Milliseconds of a monotonic clock. */
int64_t dt__net_now_ms(void);

#endif /* DT_NET_TRANSPORT_H */
