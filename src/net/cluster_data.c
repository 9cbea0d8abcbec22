/*
 * The main node's half of data between nodes (dist/xfer.h): it sends its
 * own ranks' messages to the nodes of their receivers, delivers the ones
 * for its own ranks, relays the ones between two worker nodes that are
 * not connected to each other (the frame moves from one socket to the
 * other, no copy), tells each node where the others take data directly
 * (PEER), tells every live node when one is lost (the beat thread,
 * cluster_beat.c) and when one could not run a batch with collectives
 * spanning nodes, and keeps the node table, here and on every worker node.
 * It counts the DATA bytes it sends and receives: its own ranks' and the
 * ones it relays, not those worker nodes send each other directly
 * (dtorch_cluster.h). Cluster thread, except the hooks (any thread) and as
 * each function says; see cluster.c for the locks.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "core/remote.h"
#include "dist/xfer.h"
#include "net/cluster_int.h"

static atomic_llong relayed; /* DATA chunks relayed between two worker nodes */

int64_t dt__cluster_relayed(void) { return atomic_load(&relayed); }

static int main_is_local(int64_t id) { return dt__cluster_node_of(DT_DEVICE_CPU, id) < 0; }

static void main_wake(void) {
    pthread_mutex_lock(&C.mu);
    dt__cluster_wake();
    pthread_mutex_unlock(&C.mu);
}

void dt__cluster_data_start(void) {
    static const dt__xfer_hooks hooks = {main_is_local, main_wake};
    dt__xfer_start(&hooks);
}

/* Node idx's routing id, when it is alive (under mu). */
static int route(int idx, uint8_t *rid, size_t *rid_len) {
    if (idx < 0 || idx >= C.n || C.nodes[idx].info.state != DT_NODE_ALIVE)
        return 0;
    memcpy(rid, C.nodes[idx].rid, C.nodes[idx].rid_len);
    *rid_len = C.nodes[idx].rid_len;
    return 1;
}

void dt__cluster_send_data(void) {
    for (dt__xfer_msg *m = dt__xfer_take(), *next; m; m = next) {
        next = m->next;
        m->next = NULL;
        int idx = dt__cluster_node_of(DT_DEVICE_CPU, m->h.dst_device);
        if (idx < 0) {
            dt__xfer_deliver(m);
            continue;
        }
        uint8_t rid[256];
        size_t rid_len = 0;
        pthread_mutex_lock(&C.mu);
        int alive = route(idx, rid, &rid_len);
        pthread_mutex_unlock(&C.mu);
        if (!alive) { /* its ranks wait for nothing any more */
            dt__xfer_msg_free(m);
            continue;
        }
        size_t bytes = m->h.error[0] || !m->data ? 0 : m->len;
        dt__xfer_count(1, bytes, bytes ? (bytes + DT__XFER_CHUNK - 1) / DT__XFER_CHUNK : 1);
        if (dt__net_send_data(C.router, rid, rid_len, m) != DT_OK)
            fprintf(stderr, "dtorch main node: %s\n", dt_last_error());
    }
}

void dt__cluster_on_data(dt__net_in *in) {
    const dt__xfer_hdr *h = &in->m.u.data;
    size_t bytes = in->has_extra ? zmq_msg_size(&in->extra) : 0;
    dt__xfer_count(0, bytes, 1);
    int idx = dt__cluster_node_of(DT_DEVICE_CPU, h->dst_device);
    if (idx < 0) { /* for one of our ranks */
        dt__net_deliver_data(in, h);
        return;
    }
    uint8_t rid[256];
    size_t rid_len = 0;
    pthread_mutex_lock(&C.mu);
    int alive = route(idx, rid, &rid_len);
    pthread_mutex_unlock(&C.mu);
    if (!alive)
        return;
    dt__wire_msg w = in->m;
    dt_status st;
    atomic_fetch_add(&relayed, 1);
    dt__xfer_count(1, bytes, 1);
    if (in->has_extra) {
        zmq_msg_t x;
        zmq_msg_init(&x);
        zmq_msg_move(&x, &in->extra);
        st = dt__net_send_extra(C.router, rid, rid_len, &w, &x);
    } else {
        st = dt__net_send(C.router, rid, rid_len, &w);
    }
    if (st != DT_OK)
        fprintf(stderr, "dtorch main node: %s\n", dt_last_error());
}

void dt__cluster_data_lost(const node *nd) {
    dt__xfer_lost(nd->info.first_device_id, nd->info.cpu_devices, nd->info.error);
}

void dt__cluster_data_tell_lost(void *sock, const node *nd) {
    dt__wire_msg l = {.type = DT__WIRE_LOST};
    l.u.lost.first_device_id = nd->info.first_device_id;
    l.u.lost.count = nd->info.cpu_devices;
    snprintf(l.u.lost.error, sizeof l.u.lost.error, "%s", nd->info.error);
    for (int i = 0; i < C.n; i++)
        if (C.nodes[i].info.state == DT_NODE_ALIVE)
            dt__net_send(sock, C.nodes[i].rid, C.nodes[i].rid_len, &l);
}

void dt__cluster_data_failed(int idx, sentb *b, const char *why) {
    pthread_mutex_lock(&C.mu);
    int64_t first = C.nodes[idx].info.first_device_id, count = C.nodes[idx].info.cpu_devices;
    pthread_mutex_unlock(&C.mu);
    dt__wire_msg f = {.type = DT__WIRE_FAILED};
    f.u.failed.tag = b->tag;
    f.u.failed.first_device_id = first;
    f.u.failed.count = count;
    snprintf(f.u.failed.error, sizeof f.u.failed.error, "%s", why);
    for (int k = 0; k < b->nkeys; k++) {
        dt__xfer_fail_parts(b->tag, b->keys[k].group, b->keys[k].seq, first, count, why);
        f.u.failed.group = b->keys[k].group;
        f.u.failed.seq = b->keys[k].seq;
        /* Every live node, the one that failed too: parts sent to its ranks
         * are dropped there. */
        pthread_mutex_lock(&C.mu);
        for (int i = 0; i < C.n; i++)
            if (C.nodes[i].info.state == DT_NODE_ALIVE)
                dt__net_send(C.router, C.nodes[i].rid, C.nodes[i].rid_len, &f);
        pthread_mutex_unlock(&C.mu);
    }
    dt__free(b->keys);
    dt__free(b);
}

/* The node table (the main node's devices, then each worker node's, lost
 * ones too) into this process's mailbox and to every live worker node: a
 * new node's devices are in it before any batch that uses them leaves on
 * the same connection. Under mu. */
static void send_layout(void) {
    int64_t *first = dt__calloc((size_t)C.n + 1, sizeof *first);
    int64_t *count = dt__calloc((size_t)C.n + 1, sizeof *count);
    if (first && count) {
        count[0] = C.cpu_devices;
        for (int i = 0; i < C.n; i++) {
            first[i + 1] = C.nodes[i].info.first_device_id;
            count[i + 1] = C.nodes[i].info.cpu_devices;
        }
        dt__xfer_set_layout(C.n + 1, first, count);
        for (int i = 0; i < C.n; i++) {
            if (C.nodes[i].info.state != DT_NODE_ALIVE)
                continue;
            dt__xfer_msg *m = dt__xfer_layout_msg(C.n + 1, first, count);
            if (m && dt__net_send_data(C.router, C.nodes[i].rid, C.nodes[i].rid_len, m) != DT_OK)
                fprintf(stderr, "dtorch main node: %s\n", dt_last_error());
        }
    } else { /* out of memory: no table anywhere, so every part goes to each rank */
        dt__xfer_set_layout(0, NULL, NULL);
    }
    dt__free(first);
    dt__free(count);
}

void dt__cluster_data_welcome(const uint8_t *rid, size_t rid_len) {
    send_layout();
    for (int i = 0; i < C.n; i++)
        if (C.nodes[i].info.state == DT_NODE_LOST) {
            dt__wire_msg l = {.type = DT__WIRE_LOST};
            l.u.lost.first_device_id = C.nodes[i].info.first_device_id;
            l.u.lost.count = C.nodes[i].info.cpu_devices;
            snprintf(l.u.lost.error, sizeof l.u.lost.error, "%s", C.nodes[i].info.error);
            dt__net_send(C.router, rid, rid_len, &l);
        }
}

/* Tells node `to` where node `about` takes DATA (under mu). */
static void tell_peer(const node *to, const node *about) {
    dt__wire_msg p = {.type = DT__WIRE_PEER};
    p.u.peer.node_index = (uint32_t)about->info.index;
    p.u.peer.first_device_id = about->info.first_device_id;
    p.u.peer.count = about->info.cpu_devices;
    p.u.peer.port = about->data_port;
    snprintf(p.u.peer.address, sizeof p.u.peer.address, "%s", about->info.address);
    dt__net_send(C.router, to->rid, to->rid_len, &p);
}

void dt__cluster_data_peers(const node *nd) {
    for (int i = 0; i < C.n; i++) {
        const node *o = &C.nodes[i];
        if (o == nd || o->info.state != DT_NODE_ALIVE)
            continue;
        if (o->data_port)
            tell_peer(nd, o);
        if (nd->data_port)
            tell_peer(o, nd);
    }
}
