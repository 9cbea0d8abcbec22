/*
 * The worker node's heartbeat channel (node_int.h): a connection of its own
 * to the main node's second port (given in the welcome), in a ZeroMQ
 * context of its own, from a thread of its own, so that a heartbeat waits
 * behind nothing but other heartbeats (cluster_beat.c says why). Each side
 * sends one every half interval; the main node not heard from for two
 * intervals is gone. A STOP on this channel ends the node as one on the
 * main connection does, and a LOST is taken at once (the waits for the
 * lost node's parts fail).
 *
 * Threads: beat_loop runs on the beat thread, which owns the channel's
 * DEALER socket; it tells the node thread that the main node went silent
 * or said stop through `state` (an atomic) and the pipe `wake`, and the
 * node thread (dt__node_beat_start, dt__node_beat_end) stops it through
 * the pipe `stop`. No lock (the mailbox's, comm/xfer.c, is a leaf).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "comm/xfer.h"
#include "core/records/trace.h"
#include "dtorch/dtorch_cluster.h"
#include "net/node_int.h"

static _Atomic int64_t clock_skew; /* dt_debug_node_clock_skew */

void dt_debug_node_clock_skew(int64_t ns) { atomic_store(&clock_skew, ns); }

int64_t dt__node_clock_skew(void) { return atomic_load_explicit(&clock_skew, memory_order_relaxed); }

/* This node's clock as its heartbeats give it (dt__rec_now, as the traces). */
static int64_t clock_ns(void) { return dt__rec_now() + dt__node_clock_skew(); }

/* The beat thread: beats and listens until the main node is silent for two
 * intervals or says stop (then `state` says which and `wake` gets a byte),
 * or the node thread writes to `stop`. */
static void *beat_loop(void *arg) {
    nbeat *b = arg;
    dt__thread_name("dt-node-beat");
    int64_t now = dt__net_now_ms(), last_heard = now, next_beat = now;
    int64_t limit = 2 * (int64_t)b->hb, half = b->hb / 2 > 0 ? b->hb / 2 : 1;
    uint64_t seq = 0;
    int64_t echo = 0, echo_recv = 0; /* the main node's last heartbeat: its sending time, our receipt */
    int state = BEAT_ON, stop = 0;
    while (state == BEAT_ON && !stop) {
        now = dt__net_now_ms();
        if (now >= next_beat) {
            dt__wire_msg h = {.type = DT__WIRE_HEARTBEAT};
            h.u.heartbeat.seq = ++seq;
            h.u.heartbeat.echo_ns = echo;
            h.u.heartbeat.echo_recv_ns = echo_recv;
            h.u.heartbeat.sent_ns = clock_ns();
            dt__net_send(b->sock, NULL, 0, &h);
            next_beat = now + half;
        }
        if (now - last_heard >= limit) {
            state = BEAT_GONE;
            break;
        }
        int64_t wait = next_beat - now;
        if (last_heard + limit - now < wait)
            wait = last_heard + limit - now;
        zmq_pollitem_t it[2] = {{b->sock, 0, ZMQ_POLLIN, 0}, {NULL, b->stop[0], ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, (long)(wait < 0 ? 0 : wait)) < 0 && zmq_errno() != EINTR)
            break;
        stop = (it[1].revents & ZMQ_POLLIN) != 0;
        int rc;
        while (!stop && (rc = dt__net_recv(b->sock, 0, b->in)) != 0) {
            if (rc < 0)
                continue;
            if (b->in->m.type == DT__WIRE_HEARTBEAT) {
                last_heard = dt__net_now_ms();
                echo_recv = clock_ns();
                echo = b->in->m.u.heartbeat.sent_ns;
            } else if (b->in->m.type == DT__WIRE_STOP)
                state = BEAT_STOP;
            else if (b->in->m.type == DT__WIRE_LOST) /* at once: the waits for its parts fail */
                dt__xfer_lost(b->in->m.u.lost.first_device_id, b->in->m.u.lost.count, b->in->m.u.lost.error);
        }
        dt__net_in_done(b->in);
    }
    if (state != BEAT_ON) {
        atomic_store(&b->state, state);
        ssize_t w = write(b->wake[1], "b", 1); /* one byte into an empty pipe */
        (void)w;
    }
    return NULL;
}

static void nonblocking_pipe(int fd[2]) {
    for (int i = 0; i < 2; i++) {
        fcntl(fd[i], F_SETFL, fcntl(fd[i], F_GETFL) | O_NONBLOCK);
        fcntl(fd[i], F_SETFD, FD_CLOEXEC);
    }
}

int dt__node_beat_start(nbeat *b, const char *main, const char *token, const char *rid, size_t rid_len,
                        int hb, int port) {
    const char *colon = strrchr(main, ':');
    char ep[320];
    snprintf(ep, sizeof ep, "tcp://%.*s:%d", (int)(colon - main), main, port);
    int64_t max = DT__WIRE_MAX;
    int zero = 0;
    b->hb = hb;
    atomic_init(&b->state, BEAT_ON);
    if (pipe(b->stop) != 0) {
        b->stop[0] = b->stop[1] = -1;
        return dt__node_fail("cannot make a pipe");
    }
    if (pipe(b->wake) != 0) {
        b->wake[0] = b->wake[1] = -1;
        return dt__node_fail("cannot make a pipe");
    }
    nonblocking_pipe(b->stop);
    nonblocking_pipe(b->wake);
    if (!(b->in = dt__calloc(1, sizeof *b->in)) || !(b->ctx = zmq_ctx_new()) ||
        !(b->sock = zmq_socket(b->ctx, ZMQ_DEALER)))
        return dt__node_fail("cannot make the heartbeat socket");
    zmq_setsockopt(b->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(b->sock, ZMQ_MAXMSGSIZE, &max, sizeof max);
    zmq_setsockopt(b->sock, ZMQ_ROUTING_ID, rid, rid_len);
    if (dt__net_curve(b->sock, token, 0) != 0)
        return dt__node_fail(dt_last_error());
    if (zmq_connect(b->sock, ep) != 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot connect the heartbeat channel to '%s': %s", ep + 6,
                 zmq_strerror(zmq_errno()));
        return dt__node_fail(msg);
    }
    if (pthread_create(&b->t, NULL, beat_loop, b) != 0)
        return dt__node_fail("cannot start the heartbeat thread");
    b->running = 1;
    return 0;
}

void dt__node_beat_end(nbeat *b) {
    if (b->running) {
        ssize_t w = write(b->stop[1], "s", 1); /* the only byte it gets */
        (void)w;
        pthread_join(b->t, NULL);
        b->running = 0;
    }
    if (b->in)
        dt__net_in_done(b->in);
    dt__free(b->in);
    if (b->sock)
        zmq_close(b->sock);
    if (b->ctx)
        zmq_ctx_term(b->ctx);
    for (int i = 0; i < 2; i++) {
        if (b->stop[i] >= 0)
            close(b->stop[i]);
        if (b->wake[i] >= 0)
            close(b->wake[i]);
    }
    memset(b, 0, sizeof *b);
    b->stop[0] = b->stop[1] = b->wake[0] = b->wake[1] = -1;
}
