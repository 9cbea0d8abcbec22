/*
 * ZeroMQ pieces shared by the main node (cluster.c) and the worker node
 * (node.c): CURVE keys from the token, sending and receiving one framed
 * message (wire.h). Only compiled with ZeroMQ (DT_HAVE_ZMQ). A socket is
 * used by one thread at a time, as ZeroMQ requires; these helpers take no
 * lock.
 */
#ifndef DT_NET_TRANSPORT_H
#define DT_NET_TRANSPORT_H

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

/* One received message: the routing id (ROUTER), the peer's address and
 * the frame (m's token points into it). */
typedef struct dt__net_in {
    uint8_t rid[256];
    size_t rid_len;
    char peer[64];
    uint8_t frame[DT__WIRE_MAX];
    dt__wire_msg m;
} dt__net_in;
/* Receives one message without blocking: 1 received, 0 none waiting, -1 a
 * malformed message (dropped, all its frames read; thread error set). With
 * `router`, the first frame is the routing id. */
int dt__net_recv(void *sock, int router, dt__net_in *in);

/* Milliseconds of a monotonic clock. */
int64_t dt__net_now_ms(void);

#endif /* DT_NET_TRANSPORT_H */
