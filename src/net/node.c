/*
 * The worker node (dt_node_run, dtorch_cluster.h): connects to the main
 * node, registers with the token, then serves its batches until the main
 * node says stop or goes silent for two intervals. Heartbeats go both ways
 * on a connection of their own (the main node's second port, given in the
 * welcome), in a ZeroMQ context of their own, from a thread of their own
 * (node_beat.c).
 *
 * A refused token shows in one of two ways: with CURVE the main node cannot
 * open the handshake of a node whose token differs (its keys are derived
 * from the token), so the connection closes before it is usable; the
 * node's socket monitor sees that and says so. Without CURVE the main node
 * compares the token and answers REFUSE. Either way the node exits 1.
 *
 * Threads: the calling thread (the node thread) runs everything but the
 * heartbeats, with the DEALER socket to the main node, the ROUTER other
 * worker nodes send data to, a DEALER per such peer and the monitor's PAIR
 * socket. The beat thread (node_beat.c) owns the heartbeat channel's
 * socket; it tells the node thread that the main node went silent or said
 * stop through `state` (an atomic) and a pipe. No lock (the mailbox's,
 * comm/xfer.c, is a leaf).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "backend/backend.h"
#include "comm/span_nccl.h"
#include "comm/xfer.h"
#include "dtorch/dtorch_cluster.h"
#include "net/node_int.h"
#include "net/subctl.h"
#include "net/transport.h"

/* A worker node that takes DATA directly (a PEER message). */
typedef struct peer {
    int64_t first, count;           /* its CPU devices */
    int64_t cuda_first, cuda_count; /* its CUDA devices */
    void *sock; /* DEALER to its data port: CURVE, nothing queued before the connection is up */
} peer;

typedef struct nodectx {
    void *ctx, *sock, *mon;
    void *data; /* ROUTER: DATA from other worker nodes */
    peer *peers;
    int npeers, cappeers;
    uint32_t index;
    int64_t cuda_first; /* the global id of its CUDA device 0 (the welcome's) */
    const char *token;
    int quiet;
    int relay_only; /* DTORCH_DIRECT_DATA=0: no data port, no peers; all data via the main node */
    const char *main;
    dt__subctl *sub; /* made by the first batch */
    char name[200];  /* "worker node I (host H, pid P)", for errors that name it */
    char rid[96];    /* its routing id, on both connections to the main node */
    size_t rid_len;
    nbeat beat;
    /* DATA this node sent to and received from other nodes (directly or
     * through the main node), DT__WIRE_DATA_*; every RESULT carries them. */
    int64_t counts[4];
} nodectx;

static void say(const nodectx *n, const char *fmt, const char *a) {
    if (!n->quiet) {
        fprintf(stderr, "dtorch-node: ");
        fprintf(stderr, fmt, a);
        fputc('\n', stderr);
    }
}

int dt__node_fail(const char *msg) {
    /* msg may be the thread's own error buffer (dt_last_error()), which
     * dt__error writes: copied first, so the message is never formatted
     * into itself. */
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", msg);
    fprintf(stderr, "dtorch-node: %s\n", copy);
    dt__error(DT_EINVAL, "%s", copy);
    return 1;
}

/* The monitor's next event (0 when none waiting). */
static int mon_event(void *mon) {
    zmq_msg_t a;
    zmq_msg_init(&a);
    if (zmq_msg_recv(&a, mon, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&a);
        return 0;
    }
    int ev = 0;
    if (zmq_msg_size(&a) >= 2) {
        const uint8_t *d = zmq_msg_data(&a);
        ev = d[0] | d[1] << 8;
    }
    while (zmq_msg_more(&a)) { /* the endpoint frame */
        zmq_msg_close(&a);
        zmq_msg_init(&a);
        if (zmq_msg_recv(&a, mon, ZMQ_DONTWAIT) < 0)
            break;
    }
    zmq_msg_close(&a);
    return ev;
}

#define GONE (-1) /* enroll: the main node went away while registering us */

/* Registers; 0 with in->m the welcome, GONE, else the exit status. */
static int enroll(nodectx *n, const dt__wire_msg *reg, int timeout_ms, dt__net_in *in) {
    if (dt__net_send(n->sock, NULL, 0, reg) != DT_OK)
        return dt__node_fail(dt_last_error());
    int64_t deadline = dt__net_now_ms() + timeout_ms;
    int connected = 0, handshaken = 0, gone = 0;
    for (;;) {
        int64_t left = deadline - dt__net_now_ms();
        if (left <= 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "no answer from the main node at %s after %d ms%s", n->main, timeout_ms,
                     connected ? "" : " (nothing listens there)");
            return dt__node_fail(msg);
        }
        zmq_pollitem_t it[2] = {{n->sock, 0, ZMQ_POLLIN, 0}, {n->mon, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, (long)left) < 0 && zmq_errno() != EINTR)
            return dt__node_fail("polling the connection failed");
        int ev;
        while ((ev = mon_event(n->mon)) != 0) {
            if (ev == ZMQ_EVENT_CONNECTED)
                connected = 1;
            else if (ev == ZMQ_EVENT_DISCONNECTED && handshaken)
                /* The main node took the connection and dropped it: it
                 * ended, perhaps after registering us but before its
                 * welcome left. The REGISTER is not sent again, so waiting
                 * for it to come back would wait for nothing. */
                gone = 1;
            else if (ev == ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
                handshaken = 1;
            else if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH || ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
                     ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL ||
                     (ev == ZMQ_EVENT_DISCONNECTED && connected && !handshaken && dt__net_has_curve())) {
                char msg[600];
                snprintf(
                    msg, sizeof msg,
                    "refused by the main node at %s: the encrypted handshake failed, so the cluster token "
                    "does not match the main node's (set the same DTORCH_CLUSTER_TOKEN on both hosts), or "
                    "what listens there is not a dtorch main node",
                    n->main);
                return dt__node_fail(msg);
            }
        }
        int rc;
        while ((rc = dt__net_recv(n->sock, 0, in)) != 0) {
            if (rc < 0 && in->foreign_version) {
                char msg[400];
                snprintf(msg, sizeof msg,
                         "refused: the main node at %s speaks cluster wire version %d, this worker node "
                         "(dtorch %s) version %d: run the same dtorch version on every host",
                         n->main, in->foreign_version, dt_version(), dt__wire_version());
                return dt__node_fail(msg);
            }
            if (rc < 0)
                continue; /* a malformed message: ignored */
            if (in->m.type == DT__WIRE_WELCOME)
                return 0;
            if (in->m.type == DT__WIRE_REFUSE) {
                char msg[700];
                snprintf(msg, sizeof msg, "refused by the main node at %s: %s", n->main,
                         in->m.u.refuse.reason);
                return dt__node_fail(msg);
            }
            if (in->m.type == DT__WIRE_STOP) {
                say(n, "the main node said stop before registering%s", "");
                return 0;
            }
        }
        if (gone)
            return GONE;
    }
}

/* ------------------------------------------- data between nodes (xfer.h) */

/* This node's devices and the wake pipe of its outbox (one node per
 * process serves at a time). */
static _Atomic int64_t own_first, own_count; /* atomics: the C tests run two nodes as threads */
static _Atomic int64_t own_cuda_first, own_cuda_count;
static int data_pipe[2] = {-1, -1};
static int data_pipe_err;
static pthread_once_t data_pipe_once = PTHREAD_ONCE_INIT;

/* 1 when the device of key `key` (comm/xfer.h) is this node's. */
static int node_is_local(int64_t key) {
    int cuda = dt__xfer_key_type(key) == DT_DEVICE_CUDA;
    int64_t id = dt__xfer_key_id(key);
    int64_t first = atomic_load_explicit(cuda ? &own_cuda_first : &own_first, memory_order_relaxed);
    return id >= first &&
           id < first + atomic_load_explicit(cuda ? &own_cuda_count : &own_count, memory_order_relaxed);
}

static void make_data_pipe(void) {
    if (pipe(data_pipe) != 0) {
        data_pipe_err = 1;
        return;
    }
    for (int i = 0; i < 2; i++) {
        fcntl(data_pipe[i], F_SETFL, fcntl(data_pipe[i], F_GETFL) | O_NONBLOCK);
        fcntl(data_pipe[i], F_SETFD, FD_CLOEXEC);
    }
}

static void node_wake(void) {
    ssize_t w = write(data_pipe[1], "d", 1); /* full pipe: a wake is pending anyway */
    (void)w;
}

/* Binds the socket other worker nodes send DATA to (every interface, a
 * free port; CURVE with the cluster's server key, so only token holders
 * connect): its port, or 0 (then they send through the main node). */
static int data_open(nodectx *n) {
    char bound[200];
    size_t blen = sizeof bound;
    int zero = 0;
    if (!(n->data = zmq_socket(n->ctx, ZMQ_ROUTER)) || dt__net_curve(n->data, n->token, 1) != 0 ||
        dt__net_bulk(n->data) != 0 || zmq_setsockopt(n->data, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(n->data, "tcp://*:0") != 0 ||
        zmq_getsockopt(n->data, ZMQ_LAST_ENDPOINT, bound, &blen) != 0 || !strrchr(bound, ':')) {
        if (n->data)
            zmq_close(n->data);
        n->data = NULL;
        return 0;
    }
    return atoi(strrchr(bound, ':') + 1);
}

/* Connects to another worker node's data port (a PEER message). Any
 * failure leaves its messages to the main node's relay. */
static void add_peer(nodectx *n, const dt__wire_msg *m) {
    if (m->u.peer.node_index == n->index || n->relay_only)
        return;
    if (n->npeers == n->cappeers) {
        int cap = n->cappeers ? 2 * n->cappeers : 8;
        peer *v = dt__realloc(n->peers, (size_t)cap * sizeof *v);
        if (!v)
            return;
        n->peers = v;
        n->cappeers = cap;
    }
    char ep[DT__WIRE_TEXT_MAX + 32];
    snprintf(ep, sizeof ep, "tcp://%s:%u", m->u.peer.address, m->u.peer.port);
    int zero = 0, one = 1;
    void *s = zmq_socket(n->ctx, ZMQ_DEALER);
    /* IMMEDIATE: a message is taken only by a connection that is up, so
     * one to a node not (or no longer) reachable goes through the main
     * node instead (send_data). */
    if (!s || zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_setsockopt(s, ZMQ_IMMEDIATE, &one, sizeof one) != 0 || dt__net_bulk(s) != 0 ||
        dt__net_curve(s, n->token, 0) != 0 || zmq_connect(s, ep) != 0) {
        if (s)
            zmq_close(s);
        return;
    }
    n->peers[n->npeers++] =
        (peer){m->u.peer.first_device_id, m->u.peer.count, m->u.peer.cuda_first, m->u.peer.cuda_count, s};
}

/* The socket that reaches the node of the device of key `key` directly
 * and can take a message now, or NULL. */
static void *direct(nodectx *n, int64_t key) {
    int cuda = dt__xfer_key_type(key) == DT_DEVICE_CUDA;
    int64_t dev = dt__xfer_key_id(key);
    for (int i = 0; i < n->npeers; i++) {
        int64_t first = cuda ? n->peers[i].cuda_first : n->peers[i].first;
        int64_t count = cuda ? n->peers[i].cuda_count : n->peers[i].count;
        if (dev >= first && dev < first + count) {
            zmq_pollitem_t it = {n->peers[i].sock, 0, ZMQ_POLLOUT, 0};
            return zmq_poll(&it, 1, 0) > 0 && (it.revents & ZMQ_POLLOUT) ? n->peers[i].sock : NULL;
        }
    }
    return NULL;
}

/* Sends this node's ranks' messages: straight to another worker node when
 * it is connected, else through the main node. */
static void send_data(nodectx *n) {
    char c[64];
    while (read(data_pipe[0], c, sizeof c) > 0) {
    }
    for (dt__xfer_msg *m = dt__xfer_take(), *next; m; m = next) {
        next = m->next;
        m->next = NULL;
        if (node_is_local(m->h.dst_device)) {
            dt__xfer_deliver(m);
            continue;
        }
        void *to = direct(n, m->h.dst_device);
        n->counts[DT__WIRE_DATA_BYTES_OUT] += m->h.error[0] || !m->data ? 0 : (int64_t)m->len;
        n->counts[DT__WIRE_DATA_MSGS_OUT]++;
        if (dt__net_send_data(to ? to : n->sock, NULL, 0, m) != DT_OK)
            fprintf(stderr, "dtorch-node: %s\n", dt_last_error());
    }
}

/* A DATA message from another node, counted, then into the mailbox. */
static void take_data(nodectx *n, dt__net_in *in) {
    n->counts[DT__WIRE_DATA_BYTES_IN] += in->has_extra ? (int64_t)zmq_msg_size(&in->extra) : 0;
    n->counts[DT__WIRE_DATA_MSGS_IN]++;
    dt__net_deliver_data(in, &in->m.u.data);
}

/* A DATA message for one of this node's ranks (its frame moves into the
 * mailbox), or a LOST one. */
static void on_data(nodectx *n, dt__net_in *in) {
    if (in->m.type == DT__WIRE_LOST) {
        dt__xfer_lost(in->m.u.lost.first_device_id, in->m.u.lost.count, in->m.u.lost.error);
        return;
    }
    if (in->m.type == DT__WIRE_FAILED) {
        dt__xfer_fail_parts(in->m.u.failed.tag, in->m.u.failed.group, in->m.u.failed.seq,
                            in->m.u.failed.first_device_id, in->m.u.failed.count, in->m.u.failed.error);
        return;
    }
    take_data(n, in);
}

static void free_payload(void *data, void *hint) {
    (void)hint;
    dt__free(data);
}

/* Sends the reads and syncs that completed, each with the data counters:
 * the messages their work queued go first (a collective completes before
 * its messages have left), so a sync's answer counts them. */
static void answer(nodectx *n) {
    dt__wire_msg m;
    void *payload;
    size_t plen;
    send_data(n);
    while (n->sub && dt__subctl_next(n->sub, &m, &payload, &plen)) {
        memcpy(m.u.result.data, n->counts, sizeof n->counts);
        zmq_msg_t x;
        if (payload && zmq_msg_init_data(&x, payload, plen, free_payload, NULL) == 0) {
            if (dt__net_send_extra(n->sock, NULL, 0, &m, &x) != DT_OK)
                fprintf(stderr, "dtorch-node: %s\n", dt_last_error());
        } else {
            if (payload) {
                dt__free(payload);
                m.nextra = 0;
                m.u.result.status = DT_ENOMEM;
                snprintf(m.u.result.error, sizeof m.u.result.error,
                         "worker node: out of memory sending a read");
            }
            if (dt__net_send(n->sock, NULL, 0, &m) != DT_OK)
                fprintf(stderr, "dtorch-node: %s\n", dt_last_error());
        }
    }
}

/* A BATCH or RELEASE message (the sub-controller, subctl.h). A batch that
 * cannot run fails every read and sync waiting on this node. */
static void run_message(nodectx *n, dt__net_in *in) {
    if (!in->has_extra)
        return;
    const void *body = zmq_msg_data(&in->extra);
    size_t len = zmq_msg_size(&in->extra);
    if (in->m.type == DT__WIRE_RELEASE) {
        if (n->sub)
            dt__subctl_release(n->sub, body, len);
        return;
    }
    if (n->sub || (n->sub = dt__subctl_new(n->cuda_first)))
        dt__subctl_trace(n->sub, (in->m.u.batch.flags & DT__WIRE_BATCH_TRACE) != 0);
    if (!n->sub || dt__subctl_batch(n->sub, in->m.u.batch.backend, body, len) != DT_OK) {
        /* The main node fails the batch's reads and tells every node that
         * its collectives' parts from here will not come. */
        dt__wire_msg r = {.type = DT__WIRE_RESULT};
        r.u.result.status = dt_last_status() != DT_OK ? dt_last_status() : DT_EINVAL;
        r.u.result.batch = in->m.u.batch.seq;
        snprintf(r.u.result.error, sizeof r.u.result.error, "could not run a batch: %s", dt_last_error());
        memcpy(r.u.result.data, n->counts, sizeof n->counts);
        fprintf(stderr, "dtorch-node: %s\n", r.u.result.error);
        if (n->sub) {
            char why[DT__WIRE_TEXT_MAX];
            snprintf(why, sizeof why, "%.199s %.300s", n->name, r.u.result.error);
            dt__subctl_failed(n->sub, why);
        }
        dt__net_send(n->sock, NULL, 0, &r);
    }
}

/* Serves after the welcome: batches, reads, data; the beat thread says
 * when the main node went silent or said stop. The exit status. */
static int serve(nodectx *n, dt__net_in *in) {
    /* This thread copies the batches' host values in and the reads' bytes
     * out: on itself, so it has no idle team beside the workers'. */
    dt__backends_thread_serial();
    for (;;) {
        int st = atomic_load(&n->beat.state);
        if (st == BEAT_GONE) {
            say(n, "the main node at %s is gone (no heartbeat for two intervals): exiting", n->main);
            return 0;
        }
        if (st == BEAT_STOP) {
            say(n, "the main node at %s said stop: exiting", n->main);
            return 0;
        }
        /* Woken by messages, this node's outbox, completed reads and the
         * beat thread; the timeout only bounds the wait. */
        zmq_pollitem_t it[6] = {
            {n->sock, 0, ZMQ_POLLIN, 0},         {n->mon, 0, ZMQ_POLLIN, 0},
            {NULL, data_pipe[0], ZMQ_POLLIN, 0}, {NULL, n->beat.wake[0], ZMQ_POLLIN, 0},
            {n->data, 0, ZMQ_POLLIN, 0},         {NULL, n->sub ? dt__subctl_fd(n->sub) : -1, ZMQ_POLLIN, 0}};
        int nit = 4 + (n->data != NULL);
        if (n->sub)
            it[nit++] = it[5];
        if (zmq_poll(it, nit, 1000) < 0 && zmq_errno() != EINTR)
            return dt__node_fail("polling the connection failed");
        while (mon_event(n->mon) != 0) {
        }
        answer(n); /* the outbox first */
        int rc;
        while ((rc = dt__net_recv(n->sock, 0, in)) != 0) {
            if (rc < 0)
                continue;
            if (in->m.type == DT__WIRE_STOP) {
                say(n, "the main node at %s said stop: exiting", n->main);
                return 0;
            }
            if (in->m.type == DT__WIRE_BATCH || in->m.type == DT__WIRE_RELEASE)
                run_message(n, in);
            else if (in->m.type == DT__WIRE_DATA || in->m.type == DT__WIRE_LOST ||
                     in->m.type == DT__WIRE_FAILED)
                on_data(n, in);
            else if (in->m.type == DT__WIRE_PEER)
                add_peer(n, &in->m);
            else if (in->m.type == DT__WIRE_NCCLID) /* before the batch that names its group */
                dt__span_nccl_put(in->m.u.ncclid.tag, in->m.u.ncclid.group, (int)in->m.u.ncclid.nranks,
                                  in->m.u.ncclid.id);
        }
        dt__net_in_done(in);
        while (n->data && (rc = dt__net_recv(n->data, 1, in)) != 0) /* from other worker nodes */
            if (rc > 0 && in->m.type == DT__WIRE_DATA)
                take_data(n, in);
        dt__net_in_done(in);
    }
}

/* --------------------------------------------------------------- the run */

/* The options, checked. */
typedef struct nodeargs {
    const char *token;
    int cpus, cudas; /* the devices offered ('all' CUDA devices counted) */
} nodeargs;

/* --cuda-devices against what this host can offer: those the default
 * backend's CUDA variant sees (after CUDA_VISIBLE_DEVICES and device
 * virtualisation); asking for more, or for any without a GPU, is a bad
 * argument here. 0 with *cudas the count, or the exit status (2). */
static int check_cuda(int *cudas) {
    if (*cudas < DT_NODE_CUDA_ALL || *cudas > DT__WIRE_MAX_DEVICES) {
        fprintf(stderr, "dtorch-node: --cuda-devices must be in [0, %d] or 'all'\n", DT__WIRE_MAX_DEVICES);
        return 2;
    }
    if (!*cudas)
        return 0;
    char why[400];
    int64_t seen = dt__net_cuda_count(why, sizeof why);
    if (seen == 0) {
        fprintf(stderr, "dtorch-node: --cuda-devices: no CUDA device can be offered: %s\n", why);
        dt__error(DT_EDEVICE, "no CUDA device can be offered: %s", why);
        return 2;
    }
    if (*cudas > seen) {
        fprintf(stderr,
                "dtorch-node: --cuda-devices=%d: this host's CUDA backend sees %lld device%s "
                "(CUDA_VISIBLE_DEVICES and DTORCH_DTENSOR_IN_SAME_DEVICE apply)\n",
                *cudas, (long long)seen, seen == 1 ? "" : "s");
        dt__error(DT_EDEVICE, "--cuda-devices=%d: the CUDA backend sees %lld", *cudas, (long long)seen);
        return 2;
    }
    if (*cudas == DT_NODE_CUDA_ALL)
        *cudas = seen > DT__WIRE_MAX_DEVICES ? DT__WIRE_MAX_DEVICES : (int)seen;
    return 0;
}

/* Checks the options before anything is made: 0 with *a filled, else the
 * exit status (1 without a token, 2 for a bad argument). */
static int check_options(const dt_node_options *opts, nodeargs *a) {
    if (!opts || !opts->main_address || !*opts->main_address) {
        fprintf(stderr, "dtorch-node: --main-node-address=HOST:PORT is required\n");
        return 2;
    }
    a->token = opts->token ? opts->token : getenv("DTORCH_CLUSTER_TOKEN");
    if (!a->token || !*a->token) {
        dt__node_fail("no cluster token: set DTORCH_CLUSTER_TOKEN or pass --token (the main node's secret)");
        return 1;
    }
    if (strlen(a->token) > DT__WIRE_TOKEN_MAX) {
        dt__node_fail("the cluster token is longer than 1024 bytes");
        return 2;
    }
    a->cpus = opts->cpu_devices ? opts->cpu_devices : 1;
    if (a->cpus < 0 || a->cpus > DT__WIRE_MAX_DEVICES) {
        fprintf(stderr, "dtorch-node: --cpu-devices must be in [1, %d]\n", DT__WIRE_MAX_DEVICES);
        return 2;
    }
    a->cudas = opts->cuda_devices;
    int rc = check_cuda(&a->cudas);
    if (rc != 0)
        return rc;
    const char *colon = strrchr(opts->main_address, ':');
    if (!colon || colon == opts->main_address || !colon[1] ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1)) {
        fprintf(stderr, "dtorch-node: --main-node-address must be HOST:PORT, not '%s'\n", opts->main_address);
        return 2;
    }
    return 0;
}

/* Makes the connection to the main node (ZeroMQ brings it up in the
 * background), with a monitor on it, and the wake pipe of the outbox. 0,
 * or the exit status (1). */
static int connect_main(nodectx *n) {
    int zero = 0, linger = 200;
    if (!(n->ctx = zmq_ctx_new()) || !(n->sock = zmq_socket(n->ctx, ZMQ_DEALER)) ||
        !(n->mon = zmq_socket(n->ctx, ZMQ_PAIR)))
        return dt__node_fail("cannot make ZeroMQ sockets");
    zmq_setsockopt(n->sock, ZMQ_LINGER, &linger, sizeof linger);
    if (dt__net_bulk(n->sock) != 0)
        return dt__node_fail(dt_last_error());
    /* Our own routing id, so that a connection that drops and comes back
     * (ZeroMQ reconnects by itself) is still this node to the main node. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    n->rid_len = (size_t)snprintf(n->rid, sizeof n->rid, "dtorch-node/%d/%lld.%09ld", (int)getpid(),
                                  (long long)ts.tv_sec, ts.tv_nsec);
    zmq_setsockopt(n->sock, ZMQ_ROUTING_ID, n->rid, n->rid_len);
    zmq_setsockopt(n->mon, ZMQ_LINGER, &zero, sizeof zero);
    if (dt__net_curve(n->sock, n->token, 0) != 0)
        return dt__node_fail(dt_last_error());
    if (zmq_socket_monitor(n->sock, "inproc://dtorch-node-monitor", ZMQ_EVENT_ALL) != 0 ||
        zmq_connect(n->mon, "inproc://dtorch-node-monitor") != 0)
        return dt__node_fail("cannot monitor the connection");
    char ep[300];
    snprintf(ep, sizeof ep, "tcp://%s", n->main);
    if (zmq_connect(n->sock, ep) != 0) {
        char msg[400];
        snprintf(msg, sizeof msg, "cannot connect to '%s': %s", n->main, zmq_strerror(zmq_errno()));
        return dt__node_fail(msg);
    }
    pthread_once(&data_pipe_once, make_data_pipe);
    if (data_pipe_err)
        return dt__node_fail("cannot make a pipe");
    return 0;
}

/* Takes the welcome `w`: this node's index and global device ids (said
 * unless quiet), and its name for errors (`host` as registered). */
static void take_welcome(nodectx *n, const nodeargs *a, const dt__wire_msg *w, const char *host) {
    char line[400], cuda_line[160] = "";
    int64_t first = w->u.welcome.first_device_id, cf = w->u.welcome.first_cuda_device_id;
    if (a->cudas)
        snprintf(cuda_line, sizeof cuda_line, "; %d CUDA devices, global cuda ids %lld..%lld", a->cudas,
                 (long long)cf, (long long)cf + a->cudas - 1);
    snprintf(line, sizeof line,
             "worker node %u of the main node at %s: %d CPU devices, global ids %lld..%lld%s",
             w->u.welcome.node_index, n->main, a->cpus, (long long)first, (long long)first + a->cpus - 1,
             cuda_line);
    say(n, "%s", line);
    atomic_store_explicit(&own_first, first, memory_order_relaxed);
    atomic_store_explicit(&own_count, (int64_t)a->cpus, memory_order_relaxed);
    atomic_store_explicit(&own_cuda_first, cf, memory_order_relaxed);
    atomic_store_explicit(&own_cuda_count, (int64_t)a->cudas, memory_order_relaxed);
    n->cuda_first = cf;
    n->index = w->u.welcome.node_index;
    snprintf(n->name, sizeof n->name, "worker node %u (host %.127s, pid %d)", w->u.welcome.node_index, host,
             (int)getpid());
}

#define WELCOMED (-2) /* join: registered; serve */

/* Registers this node's devices (and its data port) and takes the
 * welcome: WELCOMED with the welcome in in->m, else the exit status (0:
 * the main node said stop or went away first). */
static int join(nodectx *n, const nodeargs *a, int timeout_ms, dt__net_in *in) {
    dt__wire_msg reg = {.type = DT__WIRE_REGISTER};
    reg.u.reg.cpu_devices = (uint32_t)a->cpus;
    reg.u.reg.cuda_devices = (uint32_t)a->cudas;
    reg.u.reg.flags = a->cudas ? dt__net_cuda_flags() : 0;
    reg.u.reg.pid = (uint32_t)getpid();
    if (gethostname(reg.u.reg.host, sizeof reg.u.reg.host - 1) != 0)
        snprintf(reg.u.reg.host, sizeof reg.u.reg.host, "?");
    reg.u.reg.token = (const uint8_t *)n->token;
    reg.u.reg.token_len = strlen(n->token);
    reg.u.reg.data_port = n->relay_only ? 0 : (uint32_t)data_open(n);
    int rc = enroll(n, &reg, timeout_ms, in);
    if (rc == GONE) {
        say(n, "the main node at %s is gone (it closed the connection while registering): exiting", n->main);
        return 0;
    }
    if (rc != 0 || in->m.type != DT__WIRE_WELCOME)
        return rc;
    take_welcome(n, a, &in->m, reg.u.reg.host);
    return WELCOMED;
}

/* Starts the mailbox and the heartbeat channel the welcome in in->m
 * describes, then serves. The exit status. */
static int start_serving(nodectx *n, dt__net_in *in) {
    dt__span_nccl_clear(); /* ids of an earlier cluster (the C tests' nodes share a process) */
    /* The mailbox first: the beat thread may hear of a loss at once. */
    static const dt__xfer_hooks hooks = {node_is_local, node_wake};
    dt__xfer_start(&hooks);
    int rc = dt__node_beat_start(&n->beat, n->main, n->token, n->rid, n->rid_len,
                                 (int)in->m.u.welcome.heartbeat_ms, (int)in->m.u.welcome.beat_port);
    return rc != 0 ? rc : serve(n, in);
}

/* Ends whatever the run made, in order: the beat thread, the mailbox, the
 * sub-controller (its work finishes first), the sockets; frees `in`. */
static void node_close(nodectx *n, dt__net_in *in) {
    dt__node_beat_end(&n->beat);
    /* Ranks waiting for another node's data fail: the cluster is gone. */
    dt__xfer_abort("this worker node left the cluster (its main node stopped or went away)");
    dt__subctl_free(n->sub);
    dt__xfer_stop();
    if (in)
        dt__net_in_done(in);
    if (n->sock)
        zmq_socket_monitor(n->sock, NULL, 0);
    if (n->mon)
        zmq_close(n->mon);
    for (int i = 0; i < n->npeers; i++)
        zmq_close(n->peers[i].sock);
    dt__free(n->peers);
    if (n->data)
        zmq_close(n->data);
    if (n->sock)
        zmq_close(n->sock);
    if (n->ctx)
        zmq_ctx_term(n->ctx);
    dt__free(in);
}

int dt_node_run(const dt_node_options *opts) {
    nodeargs a;
    int rc = check_options(opts, &a);
    if (rc != 0)
        return rc;
    /* DTORCH_DIRECT_DATA=0 turns the direct links off (docs/cluster.md): the
     * main node then sees, and counts, every message of this node. */
    const char *direct_data = getenv("DTORCH_DIRECT_DATA");
    nodectx n = {.quiet = opts->quiet,
                 .main = opts->main_address,
                 .token = a.token,
                 .relay_only = direct_data && strcmp(direct_data, "0") == 0};
    n.beat.stop[0] = n.beat.stop[1] = n.beat.wake[0] = n.beat.wake[1] = -1;
    dt__net_in *in = dt__calloc(1, sizeof *in);
    rc = in ? connect_main(&n) : dt__node_fail("cannot make ZeroMQ sockets");
    if (rc == 0)
        rc = join(&n, &a, opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : 60000, in);
    if (rc == WELCOMED)
        rc = start_serving(&n, in);
    node_close(&n, in);
    return rc;
}
