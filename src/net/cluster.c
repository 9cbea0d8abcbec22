/*
 * The main node (dtorch_cluster.h): listens for worker nodes, registers
 * them and serves their kernel batches, reads and data; the heartbeats and
 * loss detection are cluster_beat.c's, on a connection of their own.
 *
 * Threads. One cluster per process (the struct below). The cluster thread
 * (loop()) owns the ROUTER socket and the receiving end of the wake pipe:
 * it alone sends and receives on them. The beat thread (cluster_beat.c)
 * owns the heartbeat channel's socket; it marks nodes lost. API calls run
 * on any thread; they read and change the node table under `mu` and reach
 * the cluster thread through the sending end of the wake pipe, which they
 * use under `mu`.
 * Lock order: `life` (listen/shutdown, held across the threads' start and
 * join) before `mu`, before the mailbox's lock (comm/xfer.c, a leaf); the
 * cluster and beat threads take only `mu`, never across a blocking ZeroMQ
 * call, and never complete a future or drop a value while holding it (a
 * release takes `mu`).
 *
 * Remote streams (core/controller/remote.h): the controller queues a worker node's
 * batch (dt__cluster_ship) with the futures it completes; the cluster
 * thread sends it, then the releases gathered since, and completes the
 * futures as the node's RESULT messages come back. A node lost (or the
 * cluster shut down) fails its pending futures with the node's error.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "backend/backend.h"
#include "comm/span_nccl.h"
#include "comm/xfer.h"
#include "dtorch/dtorch_cluster.h"
#include "net/cluster_int.h"
#include "net/transport.h"

dt__cluster_state dt__C = {.life = PTHREAD_MUTEX_INITIALIZER,
                           .mu = PTHREAD_MUTEX_INITIALIZER,
                           .once = PTHREAD_ONCE_INIT,
                           .bwake = {-1, -1}};

static void init_cond(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&C.changed, &a);
    pthread_condattr_destroy(&a);
}

int dt_cluster_available(void) { return 1; }
int dt_cluster_has_curve(void) { return dt__net_has_curve(); }

/* ------------------------------------------------------- cluster thread */

node *dt__cluster_find(const dt__net_in *in) {
    for (int i = 0; i < C.n; i++)
        if (C.nodes[i].rid_len == in->rid_len && memcmp(C.nodes[i].rid, in->rid, in->rid_len) == 0)
            return &C.nodes[i];
    return NULL;
}

static void refuse(const dt__net_in *in, const char *why) {
    dt__wire_msg r = {.type = DT__WIRE_REFUSE};
    snprintf(r.u.refuse.reason, sizeof r.u.refuse.reason, "%s", why);
    dt__net_send(C.router, in->rid, in->rid_len, &r);
}

/* A REGISTER of another wire version (another dtorch): refused, saying
 * which versions met; the node, hearing a reply of our version, says so
 * too and exits 1 (node.c). */
static void refuse_version(const dt__net_in *in) {
    char why[300];
    snprintf(why, sizeof why,
             "this main node runs dtorch %s (cluster wire version %d), the worker node speaks version %d: "
             "run the same dtorch version on every host",
             dt_version(), dt__wire_version(), in->foreign_version);
    fprintf(stderr, "dtorch main node: refused a worker node from %s: %s\n",
            in->peer[0] ? in->peer : "an unknown address", why);
    pthread_mutex_lock(&C.mu);
    C.refused++;
    refuse(in, why);
    pthread_cond_broadcast(&C.changed);
    pthread_mutex_unlock(&C.mu);
}

/* Under mu. */
static void on_register(const dt__net_in *in, int64_t now) {
    const dt__wire_msg *m = &in->m;
    if (!dt__wire_token_equal(m->u.reg.token, m->u.reg.token_len, (const uint8_t *)C.token,
                              strlen(C.token))) {
        C.refused++;
        fprintf(stderr, "dtorch main node: refused a worker node from %s: wrong cluster token\n",
                in->peer[0] ? in->peer : "an unknown address");
        refuse(in, "the cluster token does not match the main node's (set the same DTORCH_CLUSTER_TOKEN on "
                   "both hosts)");
        return;
    }
    node *nd = dt__cluster_find(in);
    if (nd && nd->info.state != DT_NODE_ALIVE) {
        refuse(in, "this worker node was marked lost; start a new one");
        return;
    }
    if (!nd) {
        if (C.n == C.cap) {
            int cap = C.cap ? 2 * C.cap : 8;
            node *v = dt__realloc(C.nodes, (size_t)cap * sizeof *v);
            if (!v) {
                refuse(in, "the main node is out of memory");
                return;
            }
            C.nodes = v;
            C.cap = cap;
        }
        nd = &C.nodes[C.n];
        memset(nd, 0, sizeof *nd);
        memcpy(nd->rid, in->rid, in->rid_len);
        nd->rid_len = in->rid_len;
        nd->info.index = C.n++;
        nd->info.state = DT_NODE_ALIVE;
        nd->info.clock_rtt_ns = -1; /* no clock exchange yet (cluster_beat.c) */
        nd->info.cpu_devices = (int)m->u.reg.cpu_devices;
        nd->info.first_device_id = C.cpu_total;
        nd->info.pid = (int)m->u.reg.pid;
        nd->data_port = m->u.reg.data_port;
        snprintf(nd->info.address, sizeof nd->info.address, "%s", in->peer[0] ? in->peer : "?");
        snprintf(nd->info.host, sizeof nd->info.host, "%.127s", m->u.reg.host);
        C.cpu_total += m->u.reg.cpu_devices;
        /* Its CUDA devices follow every CUDA device numbered before it
         * (node-major, as CPU ids). */
        nd->info.cuda_devices = (int)m->u.reg.cuda_devices;
        nd->info.first_cuda_device_id = C.cuda_total;
        nd->flags = m->u.reg.flags;
        C.cuda_total += m->u.reg.cuda_devices;
        C.alive++;
        atomic_fetch_add(&C.generation, 1); /* under mu: node_of sees the node first */
        pthread_cond_broadcast(&C.changed);
    }
    nd->last_seen = now; /* its heartbeats start once it has the welcome */
    dt__wire_msg w = {.type = DT__WIRE_WELCOME};
    w.u.welcome.node_index = (uint32_t)nd->info.index;
    w.u.welcome.first_device_id = nd->info.first_device_id;
    w.u.welcome.heartbeat_ms = (uint32_t)C.heartbeat_ms;
    w.u.welcome.beat_port = (uint32_t)C.beat_port;
    w.u.welcome.first_cuda_device_id = nd->info.first_cuda_device_id;
    dt__net_send(C.router, in->rid, in->rid_len, &w);
    dt__cluster_data_welcome(in->rid, in->rid_len);
    dt__cluster_data_peers(nd);
}

void dt__cluster_wake(void) {
    if (!C.woken && C.wake_tx) {
        C.woken = 1;
        zmq_send(C.wake_tx, "send", 4, ZMQ_DONTWAIT);
    }
}

void dt__cluster_lose(node *nd, const char *why) {
    nd->info.state = DT_NODE_LOST;
    snprintf(nd->info.error, sizeof nd->info.error, "worker node %d (%.63s, host %.127s, pid %d) %.95s",
             nd->info.index, nd->info.address, nd->info.host, nd->info.pid, why);
    C.alive--;
    dt__cluster_data_lost(nd);
    dt__cluster_sent_free(nd);
    nd->notify_lost = 1;
    dt__cluster_beat_wake();
    dt__cluster_wake(); /* its pending reads fail */
    pthread_cond_broadcast(&C.changed);
}

/* Liveness is the heartbeat channel's alone (cluster_beat.c): a message
 * here read late, behind bulk traffic, says nothing of when its sender was
 * last alive. */
static void on_message(dt__net_in *in, int64_t now) {
    pthread_mutex_lock(&C.mu);
    node *nd = dt__cluster_find(in);
    int alive = nd && nd->info.state == DT_NODE_ALIVE;
    if (nd && in->m.type == DT__WIRE_RESULT) {
        /* Its counters only grow; answers arrive in order on its connection. */
        const int64_t *d = in->m.u.result.data;
        int64_t *mine[4] = {[DT__WIRE_DATA_BYTES_OUT] = &nd->info.data_bytes_sent,
                            [DT__WIRE_DATA_MSGS_OUT] = &nd->info.data_messages_sent,
                            [DT__WIRE_DATA_BYTES_IN] = &nd->info.data_bytes_received,
                            [DT__WIRE_DATA_MSGS_IN] = &nd->info.data_messages_received};
        for (int k = 0; k < 4; k++)
            if (d[k] > *mine[k])
                *mine[k] = d[k];
    }
    if (in->m.type == DT__WIRE_RESULT || in->m.type == DT__WIRE_DATA) {
        pthread_mutex_unlock(&C.mu);
        if (alive && in->m.type == DT__WIRE_RESULT)
            dt__cluster_on_result(in);
        else if (alive)
            dt__cluster_on_data(in);
        return;
    }
    switch (in->m.type) {
    case DT__WIRE_REGISTER:
        on_register(in, now);
        break;
    case DT__WIRE_BYE:
        if (alive)
            dt__cluster_lose(nd, "left the cluster");
        break;
    default: /* not a message a worker node sends here: ignored */
        break;
    }
    pthread_mutex_unlock(&C.mu);
}

static void *loop(void *arg) {
    (void)arg;
    dt__thread_name("dt-cluster");
    /* It copies the reads' bytes into values: on itself, so it has no
     * idle team beside the client's and the workers'. */
    dt__backends_thread_serial();
    dt__net_in *in = C.in;
    for (;;) {
        /* Woken by messages and by the wake pipe (batches to send, losses
         * to reap, stop); the timeout only bounds the wait. */
        zmq_pollitem_t items[2] = {{C.router, 0, ZMQ_POLLIN, 0}, {C.wake_rx, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, 1000) < 0 && zmq_errno() != EINTR)
            break;
        int stop = 0;
        char cmd[8];
        if (items[1].revents & ZMQ_POLLIN) /* "stop", or "send" (queued batches) */
            while (zmq_recv(C.wake_rx, cmd, sizeof cmd, ZMQ_DONTWAIT) >= 0)
                stop |= cmd[0] == 's' && cmd[1] == 't';
        if (stop)
            break;
        int rc;
        while ((rc = dt__net_recv(C.router, 1, in)) != 0) {
            if (rc > 0)
                on_message(in, dt__net_now_ms());
            else if (in->foreign_version && in->foreign_type == DT__WIRE_REGISTER)
                refuse_version(in);
            else
                fprintf(stderr, "dtorch main node: dropped a message: %s\n", dt_last_error());
        }
        dt__net_in_done(in);
        dt__cluster_send_out();
        dt__cluster_send_data();
        dt__cluster_reap(-1, 0, NULL); /* reads and syncs of nodes lost meanwhile */
    }
    /* Stop: every live node is told so (exit 0) before the sockets close. */
    pthread_mutex_lock(&C.mu);
    dt__wire_msg s = {.type = DT__WIRE_STOP};
    for (int i = 0; i < C.n; i++)
        if (C.nodes[i].info.state == DT_NODE_ALIVE) {
            dt__net_send(C.router, C.nodes[i].rid, C.nodes[i].rid_len, &s);
            C.nodes[i].info.state = DT_NODE_STOPPED;
            C.alive--;
        }
    pthread_cond_broadcast(&C.changed);
    outmsg *q = C.out;
    C.out = C.out_last = NULL;
    pthread_mutex_unlock(&C.mu);
    dt__xfer_abort("the main node's cluster was shut down");
    dt__cluster_reap(-1, 0, NULL);
    while (q) {
        outmsg *o = q;
        q = o->next;
        dt__free(o->body);
        dt__free(o->keys);
        dt__free(o->ctl);
        dt__free(o);
    }
    return NULL;
}

/* ------------------------------------------------------------------ API */

/* "HOST:PORT" -> "tcp://HOST:PORT"; NULL/"" -> loopback, a free port. */
static dt_status endpoint(const char *address, char *out, size_t cap) {
    if (!address || !*address)
        address = "127.0.0.1:0";
    const char *colon = strrchr(address, ':');
    if (!colon || colon == address || !colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
        strlen(colon + 1) > 5 || atoi(colon + 1) > 65535)
        return dt__error(DT_EINVAL, "cluster: the main node's address must be 'HOST:PORT', not '%s'",
                         address);
    int port = atoi(colon + 1);
    if (port == 65535) /* the heartbeats take port + 1 (cluster_beat.c) */
        return dt__error(DT_EINVAL,
                         "cluster: port 65535 leaves no next port for the heartbeats; use a lower one");
    int hl = (int)(colon - address);
    if (snprintf(out, cap, "tcp://%.*s:%s", hl, address, port ? colon + 1 : "*") >= (int)cap)
        return dt__error(DT_EINVAL, "cluster: address '%s' is too long", address);
    return DT_OK;
}

static void close_all(void) {
    dt__cluster_beat_close();
    if (C.router)
        zmq_close(C.router);
    if (C.wake_tx)
        zmq_close(C.wake_tx);
    if (C.wake_rx)
        zmq_close(C.wake_rx);
    if (C.ctx)
        zmq_ctx_term(C.ctx);
    C.router = C.wake_tx = C.wake_rx = C.ctx = NULL;
    for (int i = 0; i < C.n; i++) {
        dt__free(C.nodes[i].rel);
        dt__cluster_sent_free(&C.nodes[i]);
    }
    dt__free(C.nodes);
    C.nodes = NULL;
    if (C.in)
        dt__net_in_done(C.in);
    dt__free(C.in);
    C.in = NULL;
    dt__cluster_trace_clear();
    C.n = C.cap = C.alive = C.refused = C.corrupt = 0;
    C.cpu_total = C.cuda_local = C.cuda_total = 0;
    C.flags = 0;
    memset(C.token, 0, sizeof C.token);
}

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

/* dt_cluster_listen's arguments, checked. */
typedef struct listen_args {
    const char *token;
    int heartbeat_ms, cpu_devices, private_nodes;
    char ep[200]; /* "tcp://HOST:PORT", PORT "*" for a free one */
} listen_args;

/* Checks the token, the devices, the heartbeat interval and the address
 * before anything is made. */
static dt_status check_listen(const char *address, const dt_cluster_options *opts, listen_args *a) {
    dt_cluster_options o = opts ? *opts : (dt_cluster_options){0};
    a->token = o.token ? o.token : getenv("DTORCH_CLUSTER_TOKEN");
    if (!a->token || !*a->token)
        return dt__error(DT_EINVAL,
                         "cluster: no cluster token: set DTORCH_CLUSTER_TOKEN (or pass a token) to "
                         "the secret the worker nodes are started with");
    if (strlen(a->token) > DT__WIRE_TOKEN_MAX)
        return dt__error(DT_EINVAL, "cluster: the token is longer than %d bytes", DT__WIRE_TOKEN_MAX);
    if (o.cpu_devices < 0 || o.cpu_devices > DT__WIRE_MAX_DEVICES)
        return dt__error(DT_EINVAL, "cluster: cpu_devices must be in [0, %d], not %d", DT__WIRE_MAX_DEVICES,
                         o.cpu_devices);
    a->cpu_devices = o.cpu_devices;
    a->private_nodes = o.private_nodes != 0;
    a->heartbeat_ms = o.heartbeat_ms ? o.heartbeat_ms : env_int("DTORCH_HEARTBEAT_MS", 1000);
    if (a->heartbeat_ms < 10 || a->heartbeat_ms > 600000)
        return dt__error(DT_EINVAL, "cluster: the heartbeat interval must be in [10, 600000] ms, not %d",
                         a->heartbeat_ms);
    return endpoint(address, a->ep, sizeof a->ep);
}

/* Takes the cluster's token, heartbeat and devices (under life). Our own
 * CUDA devices take the first CUDA ids; counted once, as a worker node
 * counts its own when it registers. Outside mu: a backend's count may
 * initialise CUDA. */
static void configure(const listen_args *a) {
    pthread_mutex_lock(&C.mu);
    snprintf(C.token, sizeof C.token, "%s", a->token);
    C.heartbeat_ms = a->heartbeat_ms;
    C.cpu_devices = a->cpu_devices;
    C.cpu_total = a->cpu_devices;
    atomic_store_explicit(&C.private_nodes, a->private_nodes, memory_order_release);
    pthread_mutex_unlock(&C.mu);
    int64_t cuda = dt__net_cuda_count(NULL, 0);
    uint32_t flags = dt__net_cuda_flags();
    pthread_mutex_lock(&C.mu);
    C.cuda_local = C.cuda_total = cuda;
    C.flags = flags;
    pthread_mutex_unlock(&C.mu);
}

/* Makes the cluster thread's receive buffer, the ROUTER socket worker
 * nodes connect to (CURVE with the token's server key) and the wake pipe's
 * two ends (under life). */
static dt_status make_sockets(void) {
    int zero = 0, one = 1;
    if (!(C.in = dt__calloc(1, sizeof *C.in)))
        return dt__error(DT_ENOMEM, "cluster: out of memory");
    if (!(C.ctx = zmq_ctx_new()) || !(C.router = zmq_socket(C.ctx, ZMQ_ROUTER)) ||
        !(C.wake_rx = zmq_socket(C.ctx, ZMQ_PAIR)) || !(C.wake_tx = zmq_socket(C.ctx, ZMQ_PAIR)))
        return dt__error(DT_EBACKEND, "cluster: making ZeroMQ sockets: %s", zmq_strerror(zmq_errno()));
    if (dt__net_curve(C.router, C.token, 1) != 0)
        return DT_EBACKEND;
    zmq_setsockopt(C.router, ZMQ_LINGER, &(int){500}, sizeof(int));
    zmq_setsockopt(C.wake_tx, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(C.wake_rx, ZMQ_LINGER, &zero, sizeof zero);
    /* A reconnecting node keeps its routing id (node.c sets it): the new
     * connection takes the old one's place. Frames up to
     * DT__WIRE_FRAME_MAX (kernel batches, read pieces) come only from peers
     * that passed the CURVE handshake; a header frame larger than any
     * message of this version is dropped (transport_zmq.c). */
    zmq_setsockopt(C.router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    if (dt__net_bulk(C.router) != 0)
        return DT_EBACKEND;
    return DT_OK;
}

/* Binds the ROUTER at `ep`, the wake pipe and the heartbeat channel, then
 * records where the ROUTER listens (C.address; under life). */
static dt_status bind_sockets(const char *ep) {
    static const char wake[] = "inproc://dtorch-cluster-wake";
    char bound[200];
    size_t blen = sizeof bound;
    if (zmq_bind(C.router, ep) != 0)
        return dt__error(DT_EBACKEND, "cluster: cannot listen at %s: %s", ep + 6, zmq_strerror(zmq_errno()));
    if (zmq_getsockopt(C.router, ZMQ_LAST_ENDPOINT, bound, &blen) != 0 || strncmp(bound, "tcp://", 6) != 0)
        return dt__error(DT_EBACKEND, "cluster: the bound address is unknown");
    if (zmq_bind(C.wake_rx, wake) != 0 || zmq_connect(C.wake_tx, wake) != 0)
        return dt__error(DT_EBACKEND, "cluster: the wake pipe: %s", zmq_strerror(zmq_errno()));
    dt_status st = dt__cluster_beat_open(ep);
    if (st != DT_OK)
        return st;
    pthread_mutex_lock(&C.mu);
    snprintf(C.address, sizeof C.address, "%.159s", bound + 6);
    pthread_mutex_unlock(&C.mu);
    return DT_OK;
}

/* Starts the cluster thread, then the beat thread; stops the first when
 * the second cannot start (under life). */
static dt_status start_threads(void) {
    if (pthread_create(&C.thread, NULL, loop, NULL) != 0)
        return dt__error(DT_EBACKEND, "cluster: cannot start the cluster thread");
    dt_status st = dt__cluster_beat_start();
    if (st != DT_OK) {
        pthread_mutex_lock(&C.mu);
        zmq_send(C.wake_tx, "stop", 4, 0);
        pthread_mutex_unlock(&C.mu);
        pthread_join(C.thread, NULL);
    }
    return st;
}

dt_status dt_cluster_listen(const char *address, const dt_cluster_options *opts) {
    pthread_once(&C.once, init_cond);
    listen_args a;
    dt_status st = check_listen(address, opts, &a);
    if (st != DT_OK)
        return st;
    pthread_mutex_lock(&C.life);
    if (C.listening) {
        pthread_mutex_unlock(&C.life);
        return dt__error(DT_EINVAL, "cluster: this process is already the main node of a cluster at %s",
                         C.address);
    }
    configure(&a);
    if ((st = make_sockets()) == DT_OK && (st = bind_sockets(a.ep)) == DT_OK &&
        (st = start_threads()) == DT_OK) {
        C.listening = 1;
        C.pid = getpid();
        dt__span_nccl_clear();
        dt__cluster_data_start();
    } else { /* whatever was made, and the address bound before a later step failed */
        pthread_mutex_lock(&C.mu);
        close_all();
        C.address[0] = 0;
        pthread_mutex_unlock(&C.mu);
    }
    pthread_mutex_unlock(&C.life);
    return st;
}

void dt_cluster_shutdown(void) {
    pthread_mutex_lock(&C.life);
    if (!C.listening) {
        pthread_mutex_unlock(&C.life);
        return;
    }
    if (C.pid != getpid()) {
        /* A forked child (its exit handlers): the cluster thread and the
         * ZeroMQ context are the parent's, so nothing of them is touched;
         * the child only forgets it had a cluster. */
        pthread_mutex_lock(&C.mu);
        C.router = C.wake_tx = C.wake_rx = C.ctx = NULL;
        C.beat = C.bctx = NULL;
        C.bwake[0] = C.bwake[1] = -1;
        C.beat_running = 0;
        C.in = NULL;
        C.nodes = NULL;
        C.n = C.cap = C.alive = 0;
        C.address[0] = 0;
        C.listening = 0;
        pthread_mutex_unlock(&C.mu);
        pthread_mutex_unlock(&C.life);
        return;
    }
    pthread_mutex_lock(&C.mu);
    zmq_send(C.wake_tx, "stop", 4, 0);
    pthread_mutex_unlock(&C.mu);
    pthread_join(C.thread, NULL);
    dt__cluster_beat_stop();
    dt__xfer_stop();
    pthread_mutex_lock(&C.mu);
    close_all();
    C.address[0] = 0;
    C.listening = 0;
    atomic_fetch_add(&C.generation, 1); /* the ids are this process's again */
    pthread_cond_broadcast(&C.changed);
    pthread_mutex_unlock(&C.mu);
    pthread_mutex_unlock(&C.life);
}

dt_status dt_cluster_address(char *buf, size_t cap) {
    pthread_mutex_lock(&C.mu);
    dt_status st = DT_OK;
    if (!C.address[0])
        st = dt__error(DT_EINVAL, "cluster: this process is not a main node (dt_cluster_listen)");
    else if (!buf || snprintf(buf, cap, "%s", C.address) >= (int)cap)
        st = dt__error(DT_EINVAL, "cluster: a buffer of %zu bytes cannot hold the address", cap);
    pthread_mutex_unlock(&C.mu);
    return st;
}

dt_status dt_cluster_wait(int num_nodes, int timeout_ms) {
    pthread_once(&C.once, init_cond);
    if (num_nodes < 0 || timeout_ms < 0)
        return dt__error(DT_EINVAL, "cluster: wait for %d nodes, %d ms: both must be >= 0", num_nodes,
                         timeout_ms);
    pthread_mutex_lock(&C.mu);
    if (!C.address[0]) {
        pthread_mutex_unlock(&C.mu);
        return dt__error(DT_EINVAL, "cluster: this process is not a main node (dt_cluster_listen)");
    }
    struct timespec dl;
    clock_gettime(CLOCK_MONOTONIC, &dl);
    dl.tv_sec += timeout_ms / 1000;
    dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (dl.tv_nsec >= 1000000000L) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000L;
    }
    int rc = 0;
    while (C.alive < num_nodes && C.address[0] && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&C.changed, &C.mu, &dl);
    dt_status st = DT_OK;
    if (C.alive < num_nodes)
        st = dt__error(DT_ETIMEDOUT,
                       "cluster: %d of %d worker nodes are connected to %s after %d ms (%d refused, %d lost)",
                       C.alive, num_nodes, C.address[0] ? C.address : "(shut down)", timeout_ms, C.refused,
                       C.n - C.alive);
    pthread_mutex_unlock(&C.mu);
    return st;
}

int dt_cluster_num_nodes(void) {
    pthread_mutex_lock(&C.mu);
    int n = C.n;
    pthread_mutex_unlock(&C.mu);
    return n;
}

int dt_cluster_num_alive(void) {
    pthread_mutex_lock(&C.mu);
    int n = C.alive;
    pthread_mutex_unlock(&C.mu);
    return n;
}

int64_t dt_cluster_cpu_devices(void) {
    pthread_mutex_lock(&C.mu);
    int64_t n = C.cpu_total;
    pthread_mutex_unlock(&C.mu);
    return n;
}

int64_t dt_cluster_cuda_devices(void) {
    pthread_mutex_lock(&C.mu);
    int64_t n = C.address[0] ? C.cuda_total : 0;
    pthread_mutex_unlock(&C.mu);
    return n;
}

dt_status dt_cluster_node(int index, dt_node_info *out) {
    pthread_mutex_lock(&C.mu);
    dt_status st = DT_OK;
    if (index < 0 || index >= C.n || !out)
        st = dt__error(DT_EINDEX, "cluster: worker node %d does not exist (%d registered)", index, C.n);
    else
        *out = C.nodes[index].info;
    pthread_mutex_unlock(&C.mu);
    return st;
}

dt_status dt_cluster_remove(int index) {
    dt__wire_msg *m = dt__calloc(1, sizeof *m);
    outmsg *o = m ? dt__calloc(1, sizeof *o) : NULL;
    pthread_mutex_lock(&C.mu);
    dt_status st = DT_OK;
    if (!o)
        st = dt__error(DT_ENOMEM, "cluster: out of memory removing worker node %d", index);
    else if (!C.address[0])
        st = dt__error(DT_EINVAL, "cluster: this process is not a main node (dt_cluster_listen)");
    else if (index < 0 || index >= C.n)
        st = dt__error(DT_EINDEX, "cluster: worker node %d does not exist (%d registered)", index, C.n);
    else if (C.nodes[index].info.state != DT_NODE_ALIVE)
        st = dt__error(DT_EINVAL, "cluster: worker node %d is not alive (%s)", index,
                       C.nodes[index].info.error[0] ? C.nodes[index].info.error : "stopped");
    if (st == DT_OK) {
        /* As a lost node (its pending reads and collectives fail), then
         * marked removed; nothing more goes to it but the STOP below. */
        dt__cluster_lose(&C.nodes[index], "was removed from the cluster (MainNode.remove)");
        C.nodes[index].info.state = DT_NODE_REMOVED;
        m->type = DT__WIRE_STOP;
        o->node = index;
        o->ctl = m;
        m = NULL;
        dt__cluster_queue(o);
        o = NULL;
    }
    pthread_mutex_unlock(&C.mu);
    dt__free(m);
    dt__free(o);
    return st;
}

dt_status dt_debug_cluster_corrupt_batch(int node) {
    pthread_mutex_lock(&C.mu);
    dt_status st = DT_OK;
    if (node < 0 || node >= C.n)
        st = dt__error(DT_EINDEX, "cluster: worker node %d does not exist (%d registered)", node, C.n);
    else
        C.corrupt = node + 1;
    pthread_mutex_unlock(&C.mu);
    return st;
}
