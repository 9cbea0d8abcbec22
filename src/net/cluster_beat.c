/*
 * The main node's heartbeat channel (docs/decisions.md, "Faults: a
 * heartbeat channel, two intervals, batches a node cannot run"): a
 * connection of its own to each worker node, on a ZeroMQ context of its
 * own (so an I/O thread of its own), served by a thread that does nothing
 * else. Kernel batches, reads and data between nodes share the main
 * connection and its context's I/O thread, whose CURVE encryption of tens
 * of MB held heartbeats back past the loss bound on a loaded machine; here
 * a heartbeat waits behind nothing but other heartbeats, and its thread
 * does no work whose length depends on the traffic.
 *
 * Each side sends a heartbeat every half interval; a node not heard from
 * for two intervals is lost, judged at that instant (the poll's timeout is
 * the nearest deadline), so a node's death becomes a loss within two
 * intervals plus scheduling delay, and a false loss needs a silence of four
 * beats. This thread tells every live node about a loss (LOST) on this
 * channel, fails the reads waiting on the lost node, and tells a node the
 * cluster no longer counts to stop.
 *
 * Threads: beat_loop runs on the beat thread, which owns the ROUTER socket
 * `beat` and the reading end of the pipe `bwake`; it takes `mu` (never
 * across a blocking call) and reaps outside it. open/start/stop/close run
 * under `life` (cluster.c); dt__cluster_beat_wake runs under `mu` on any
 * thread. Lock order: cluster.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "core/records/trace.h"
#include "net/cluster_int.h"

dt_status dt__cluster_beat_open(const char *ep) {
    const char *colon = strrchr(ep, ':');
    char bep[220];
    int port = colon ? atoi(colon + 1) : 0;
    if (!colon || port >= 65535)
        return dt__error(DT_EINVAL, "cluster: no next port after %s for the heartbeats", ep);
    /* A given port P puts the heartbeats at P + 1 (a firewall rule can name
     * both); port 0 (a free port: `ep` is the address asked for, not the one
     * bound), at another free port, never at the bound one + 1, which another
     * process may hold. */
    if (port > 0)
        snprintf(bep, sizeof bep, "%.*s:%d", (int)(colon - ep), ep, port + 1);
    else
        snprintf(bep, sizeof bep, "%.*s:*", (int)(colon - ep), ep);
    int64_t max = DT__WIRE_MAX;
    int linger = 200;
    char bound[220];
    size_t blen = sizeof bound;
    if (pipe(C.bwake) != 0) {
        C.bwake[0] = C.bwake[1] = -1;
        return dt__error(DT_EBACKEND, "cluster: pipe: %s", strerror(errno));
    }
    for (int i = 0; i < 2; i++) {
        fcntl(C.bwake[i], F_SETFL, fcntl(C.bwake[i], F_GETFL) | O_NONBLOCK);
        fcntl(C.bwake[i], F_SETFD, FD_CLOEXEC);
    }
    if (!(C.bctx = zmq_ctx_new()) || !(C.beat = zmq_socket(C.bctx, ZMQ_ROUTER)))
        return dt__error(DT_EBACKEND, "cluster: making the heartbeat socket: %s", zmq_strerror(zmq_errno()));
    if (dt__net_curve(C.beat, C.token, 1) != 0)
        return DT_EBACKEND;
    /* Heartbeats are small: a larger frame is not one of ours. */
    zmq_setsockopt(C.beat, ZMQ_MAXMSGSIZE, &max, sizeof max);
    zmq_setsockopt(C.beat, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(C.beat, ZMQ_ROUTER_HANDOVER, &(int){1}, sizeof(int));
    if (zmq_bind(C.beat, bep) != 0)
        return dt__error(DT_EBACKEND, "cluster: cannot listen for heartbeats at %s: %s", bep + 6,
                         zmq_strerror(zmq_errno()));
    if (zmq_getsockopt(C.beat, ZMQ_LAST_ENDPOINT, bound, &blen) != 0 || !strrchr(bound, ':'))
        return dt__error(DT_EBACKEND, "cluster: the heartbeat channel's port is unknown");
    C.beat_port = atoi(strrchr(bound, ':') + 1);
    return DT_OK;
}

void dt__cluster_beat_wake(void) {
    if (C.bwake[1] >= 0) {
        ssize_t w = write(C.bwake[1], "w", 1); /* full pipe: a wake is pending anyway */
        (void)w;
    }
}

/* A worker node's heartbeat, received at `t4` (our clock), echoing our
 * heartbeat sent at t1 = echo_ns that it heard at t2 = echo_recv_ns and
 * sent at t3 = sent_ns (its clock): the round trip is (t4 - t1) - (t3 - t2)
 * and its clock minus ours ((t2 - t1) + (t3 - t4)) / 2, within half the
 * round trip. The exchange of the smallest round trip so far is kept (the
 * least queueing). Under mu. */
static void clock_sample(dt_node_info *info, const dt__wire_msg *m, int64_t t4) {
    int64_t t1 = m->u.heartbeat.echo_ns, t2 = m->u.heartbeat.echo_recv_ns, t3 = m->u.heartbeat.sent_ns;
    if (!t1 || !t2 || t1 > t4)
        return; /* nothing echoed yet, or not one of our readings */
    int64_t rtt = (t4 - t1) - (t3 - t2);
    if (rtt < 0 || (info->clock_rtt_ns >= 0 && rtt >= info->clock_rtt_ns))
        return;
    info->clock_rtt_ns = rtt;
    info->clock_offset_ns = ((t2 - t1) + (t3 - t4)) / 2;
}

/* Heartbeats due, losses, LOST notices; the ms until the next deadline
 * (a heartbeat to send or a node's silence to judge). *lost: a node was
 * lost. Under mu. */
static int64_t beat(int64_t now, int64_t *next_beat, uint64_t *seq, int *lost) {
    if (now >= *next_beat) {
        dt__wire_msg h = {.type = DT__WIRE_HEARTBEAT};
        h.u.heartbeat.seq = ++*seq;
        h.u.heartbeat.sent_ns = dt__rec_now();
        for (int i = 0; i < C.n; i++)
            if (C.nodes[i].info.state == DT_NODE_ALIVE)
                dt__net_send(C.beat, C.nodes[i].rid, C.nodes[i].rid_len, &h);
        *next_beat = now + (C.heartbeat_ms / 2 > 0 ? C.heartbeat_ms / 2 : 1);
    }
    int64_t wait = *next_beat - now, limit = 2 * (int64_t)C.heartbeat_ms;
    for (int i = 0; i < C.n; i++) {
        node *nd = &C.nodes[i];
        if (nd->info.state != DT_NODE_ALIVE)
            continue;
        int64_t silent = now - nd->last_seen;
        if (silent >= limit) {
            char why[96];
            snprintf(why, sizeof why, "is lost: no heartbeat for %lld ms", (long long)silent);
            dt__cluster_lose(nd, why);
            fprintf(stderr, "dtorch main node: %s\n", nd->info.error);
            *lost = 1;
        } else if (limit - silent < wait) {
            wait = limit - silent;
        }
    }
    for (int i = 0; i < C.n; i++)
        if (C.nodes[i].notify_lost) {
            C.nodes[i].notify_lost = 0;
            dt__cluster_data_tell_lost(C.beat, &C.nodes[i]);
        }
    return wait < 0 ? 0 : wait;
}

static void *beat_loop(void *arg) {
    dt__net_in *in = arg;
    dt__thread_name("dt-beat");
    int64_t next_beat = dt__net_now_ms();
    uint64_t seq = 0;
    for (;;) {
        int lost = 0;
        pthread_mutex_lock(&C.mu);
        if (C.beat_stopping) {
            pthread_mutex_unlock(&C.mu);
            break;
        }
        int64_t wait = beat(dt__net_now_ms(), &next_beat, &seq, &lost);
        pthread_mutex_unlock(&C.mu);
        if (lost)
            dt__cluster_reap(-1, 0, NULL); /* the reads waiting on it fail now */
        zmq_pollitem_t items[2] = {{C.beat, 0, ZMQ_POLLIN, 0}, {NULL, C.bwake[0], ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, (long)wait) < 0 && zmq_errno() != EINTR)
            break;
        char c[64];
        while (read(C.bwake[0], c, sizeof c) > 0) {
        }
        int rc;
        while ((rc = dt__net_recv(C.beat, 1, in)) != 0) {
            if (rc < 0 || in->m.type != DT__WIRE_HEARTBEAT)
                continue;
            int64_t now = dt__net_now_ms(), now_ns = dt__rec_now();
            pthread_mutex_lock(&C.mu);
            node *nd = dt__cluster_find(in);
            if (nd && nd->info.state == DT_NODE_ALIVE) {
                nd->last_seen = now;
                clock_sample(&nd->info, &in->m, now_ns);
            } else { /* a node the cluster no longer counts: tell it to go */
                dt__wire_msg s = {.type = DT__WIRE_STOP};
                dt__net_send(C.beat, in->rid, in->rid_len, &s);
            }
            pthread_mutex_unlock(&C.mu);
        }
        dt__net_in_done(in);
    }
    dt__free(in);
    return NULL;
}

dt_status dt__cluster_beat_start(void) {
    dt__net_in *in = dt__calloc(1, sizeof *in);
    if (!in)
        return dt__error(DT_ENOMEM, "cluster: out of memory");
    pthread_mutex_lock(&C.mu);
    C.beat_stopping = 0;
    pthread_mutex_unlock(&C.mu);
    if (pthread_create(&C.beat_thread, NULL, beat_loop, in) != 0) {
        dt__free(in);
        return dt__error(DT_EBACKEND, "cluster: cannot start the heartbeat thread");
    }
    C.beat_running = 1;
    return DT_OK;
}

void dt__cluster_beat_stop(void) {
    if (!C.beat_running)
        return;
    pthread_mutex_lock(&C.mu);
    C.beat_stopping = 1;
    dt__cluster_beat_wake(); /* a full pipe has a wake pending anyway */
    pthread_mutex_unlock(&C.mu);
    pthread_join(C.beat_thread, NULL);
    C.beat_running = 0;
}

void dt__cluster_beat_close(void) {
    if (C.beat)
        zmq_close(C.beat);
    if (C.bctx)
        zmq_ctx_term(C.bctx);
    C.beat = C.bctx = NULL;
    for (int i = 0; i < 2; i++)
        if (C.bwake[i] >= 0)
            close(C.bwake[i]);
    C.bwake[0] = C.bwake[1] = -1;
    C.beat_port = 0;
}
