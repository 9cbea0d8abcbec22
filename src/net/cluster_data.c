/*
 * The main node's half of data between nodes (comm/xfer.h): it sends its
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

#include "comm/xfer.h"
#include "core/controller/remote.h"
#include "net/cluster_int.h"

static atomic_llong relayed; /* DATA chunks relayed between two worker nodes */

int64_t dt__cluster_relayed(void) { return atomic_load(&relayed); }

/* The worker node of the device of key `key` (comm/xfer.h), or -1 (ours). */
static int node_of_key(int64_t key) {
    return dt__cluster_node_of((dt_device_type)dt__xfer_key_type(key), dt__xfer_key_id(key));
}

static int main_is_local(int64_t key) { return node_of_key(key) < 0; }

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
        int idx = node_of_key(m->h.dst_device);
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
    int idx = node_of_key(h->dst_device);
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

/* Node nd's devices of type t as a range of device keys (comm/xfer.h). */
static void key_range(const node *nd, int t, int64_t *first, int64_t *count) {
    *first = dt__xfer_key(t, t == DT_DEVICE_CUDA ? nd->info.first_cuda_device_id : nd->info.first_device_id);
    *count = t == DT_DEVICE_CUDA ? nd->info.cuda_devices : nd->info.cpu_devices;
}

void dt__cluster_data_lost(const node *nd) {
    for (int t = 0; t < DT_DEVICE_TYPES; t++) {
        int64_t first, count;
        key_range(nd, t, &first, &count);
        if (count)
            dt__xfer_lost(first, count, nd->info.error);
    }
}

/* LOST messages about nd (one per device type it has) to `rid`. */
static void send_lost(void *sock, const uint8_t *rid, size_t rid_len, const node *nd) {
    dt__wire_msg l = {.type = DT__WIRE_LOST};
    snprintf(l.u.lost.error, sizeof l.u.lost.error, "%s", nd->info.error);
    for (int t = 0; t < DT_DEVICE_TYPES; t++) {
        key_range(nd, t, &l.u.lost.first_device_id, &l.u.lost.count);
        if (l.u.lost.count || t == DT_DEVICE_CPU)
            dt__net_send(sock, rid, rid_len, &l);
    }
}

void dt__cluster_data_tell_lost(void *sock, const node *nd) {
    for (int i = 0; i < C.n; i++)
        if (C.nodes[i].info.state == DT_NODE_ALIVE)
            send_lost(sock, C.nodes[i].rid, C.nodes[i].rid_len, nd);
}

void dt__cluster_data_failed(int idx, sentb *b, const char *why) {
    int64_t first[DT_DEVICE_TYPES], count[DT_DEVICE_TYPES];
    pthread_mutex_lock(&C.mu);
    for (int t = 0; t < DT_DEVICE_TYPES; t++)
        key_range(&C.nodes[idx], t, &first[t], &count[t]);
    pthread_mutex_unlock(&C.mu);
    dt__wire_msg f = {.type = DT__WIRE_FAILED};
    f.u.failed.tag = b->tag;
    snprintf(f.u.failed.error, sizeof f.u.failed.error, "%s", why);
    for (int k = 0; k < b->nkeys; k++)
        for (int t = 0; t < DT_DEVICE_TYPES; t++) {
            if (!count[t] && t != DT_DEVICE_CPU)
                continue;
            dt__xfer_fail_parts(b->tag, b->keys[k].group, b->keys[k].seq, first[t], count[t], why);
            f.u.failed.group = b->keys[k].group;
            f.u.failed.seq = b->keys[k].seq;
            f.u.failed.first_device_id = first[t];
            f.u.failed.count = count[t];
            /* Every live node, the one that failed too: parts sent to its
             * ranks are dropped there. */
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
 * ones too; an entry for each device type of each node, as key ranges:
 * comm/xfer.h) into this process's mailbox and to every live worker node:
 * a new node's devices are in it before any batch that uses them leaves
 * on the same connection. Under mu. */
static void send_layout(void) {
    int n = (C.n + 1) * DT_DEVICE_TYPES;
    int64_t *first = dt__calloc((size_t)n, sizeof *first);
    int64_t *count = dt__calloc((size_t)n, sizeof *count);
    if (first && count) {
        for (int t = 0; t < DT_DEVICE_TYPES; t++) {
            first[t] = dt__xfer_key(t, 0);
            count[t] = t == DT_DEVICE_CUDA ? C.cuda_local : C.cpu_devices;
        }
        for (int i = 0; i < C.n; i++)
            for (int t = 0; t < DT_DEVICE_TYPES; t++)
                key_range(&C.nodes[i], t, &first[(i + 1) * DT_DEVICE_TYPES + t],
                          &count[(i + 1) * DT_DEVICE_TYPES + t]);
        dt__xfer_set_layout(n, first, count);
        for (int i = 0; i < C.n; i++) {
            if (C.nodes[i].info.state != DT_NODE_ALIVE)
                continue;
            dt__xfer_msg *m = dt__xfer_layout_msg(n, first, count);
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
        if (C.nodes[i].info.state == DT_NODE_LOST)
            send_lost(C.router, rid, rid_len, &C.nodes[i]);
}

/* Tells node `to` where node `about` takes DATA (under mu). */
static void tell_peer(const node *to, const node *about) {
    dt__wire_msg p = {.type = DT__WIRE_PEER};
    p.u.peer.node_index = (uint32_t)about->info.index;
    p.u.peer.first_device_id = about->info.first_device_id;
    p.u.peer.count = about->info.cpu_devices;
    p.u.peer.port = about->data_port;
    p.u.peer.cuda_first = about->info.first_cuda_device_id;
    p.u.peer.cuda_count = about->info.cuda_devices;
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
