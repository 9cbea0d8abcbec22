/*
 * The worker node's heartbeat channel as node.c (the node thread: connect,
 * register, serve) and node_beat.c (the channel and its thread) share it.
 * node_beat.c's comment has the threads; node.c's has the node's life.
 */
#ifndef DT_NET_NODE_INT_H
#define DT_NET_NODE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "net/transport.h"

/* What the beat thread has seen, in nbeat.state: nothing yet (ON), the
 * main node silent for two intervals (GONE), or its STOP. */
enum { BEAT_ON, BEAT_GONE, BEAT_STOP };

/* The heartbeat channel. */
typedef struct nbeat {
    pthread_t t;
    int running;
    void *ctx, *sock;
    int stop[2]; /* node thread -> beat thread: end */
    int wake[2]; /* beat thread -> node thread: `state` changed */
    atomic_int state;
    int hb;
    dt__net_in *in;
} nbeat;

/* What dt_debug_node_clock_skew set: ns this node's clock readings (its
 * heartbeats', its trace records') are moved ahead. Any thread. */
int64_t dt__node_clock_skew(void);

/* A fatal condition of the node: reported on stderr whatever `quiet`, and
 * in the thread error (DT_EINVAL); returns 1, the node's exit status. Node
 * thread (node.c). */
int dt__node_fail(const char *msg);

/* Connects the heartbeat channel to port `port` of the host of `main` (the
 * main node's "HOST:PORT"), with routing id `rid` (the main connection's),
 * heartbeats every half of `hb` ms, and starts its thread. 0, or 1 (the
 * reason printed, dt__node_fail). Node thread; `b`'s pipes are -1 before
 * (dt__node_beat_end leaves them so). */
int dt__node_beat_start(nbeat *b, const char *main, const char *token, const char *rid, size_t rid_len,
                        int hb, int port);
/* Stops the beat thread and frees the channel, whatever part of it was
 * made (node thread). */
void dt__node_beat_end(nbeat *b);

#endif /* DT_NET_NODE_INT_H */
