/*
 * The main node's half of remote streams (core/controller/remote.h): the batches the
 * controller queues for worker nodes (dt__cluster_ship), the releases of
 * the values they hold, and the futures their RESULT messages complete.
 * The cluster thread (cluster.c's loop) sends and receives; see
 * cluster_int.h for the state and cluster.c for the threads and locks.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "comm/span_nccl.h"
#include "core/controller/remote.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/kernel_rec.h"
#include "core/records/trace.h"
#include "net/cluster_int.h"

static void free_body(void *data, void *hint) {
    (void)hint;
    dt__free(data);
}

void dt__cluster_sent_free(node *nd) {
    while (nd->sent) {
        sentb *b = nd->sent;
        nd->sent = b->next;
        dt__free(b->keys);
        dt__free(b);
    }
}

/* Fails and drops every pending future of a node that is not alive (or of
 * node `only` when >= 0, with `why`: those of its batch `batch` when not
 * 0), one node at a time, so that each read gets its own node's error
 * when several nodes were lost at once. Never under mu. */
void dt__cluster_reap(int only, uint64_t batch, const char *why) {
    for (;;) {
        pend *dead = NULL;
        int node = -1;
        char msg[DT__WIRE_TEXT_MAX + 600] = "";
        pthread_mutex_lock(&C.mu);
        for (pend **pp = &C.pend; *pp;) {
            pend *p = *pp;
            int gone = only >= 0 ? p->node == only && (!batch || p->batch == batch)
                                 : p->node >= C.n || C.nodes[p->node].info.state != DT_NODE_ALIVE;
            if (gone && (node < 0 || p->node == node)) {
                *pp = p->next;
                p->next = dead;
                dead = p;
                if (node < 0) {
                    node = p->node;
                    if (why)
                        snprintf(msg, sizeof msg, "%s", why);
                    else if (p->node < C.n && C.nodes[p->node].info.error[0])
                        snprintf(msg, sizeof msg, "%s", C.nodes[p->node].info.error);
                    else
                        snprintf(msg, sizeof msg, "worker node %d (%s) was stopped: the cluster is shut down",
                                 p->node, p->node < C.n ? C.nodes[p->node].info.address : "?");
                }
            } else {
                pp = &p->next;
            }
        }
        pthread_mutex_unlock(&C.mu);
        if (!dead)
            return;
        while (dead) {
            pend *p = dead;
            dead = p->next;
            dt__future_fail(p->f, DT_EKERNEL, msg);
            for (int i = 0; i < p->remaining; i++)
                dt_future_release(p->f);
            dt__free(p);
        }
    }
}

/* A read's piece from its bytes: i32 dtype u32 ndim i64 shape[] data. */
static dt__blob *piece(const dt_future *f, const dt__net_in *in) {
    dt__blob *b = dt__blob_new(f->be);
    if (!b)
        return NULL;
    const dt__wire_msg *m = &in->m;
    char err[600] = "";
    if (m->u.result.status != DT_OK) {
        snprintf(err, sizeof err, "%s",
                 m->u.result.error[0] ? m->u.result.error : dt_status_str(m->u.result.status));
    } else if (!in->has_extra) {
        snprintf(err, sizeof err, "a worker node's read came back without its bytes");
    } else {
        const uint8_t *p = zmq_msg_data((zmq_msg_t *)&in->extra);
        size_t len = zmq_msg_size((zmq_msg_t *)&in->extra);
        int64_t shape[DT_MAX_NDIM];
        uint32_t dtype = 0, ndim = DT_MAX_NDIM + 1;
        if (len >= 8) {
            dtype = (uint32_t)dt__le_get(&p, 4);
            ndim = (uint32_t)dt__le_get(&p, 4);
            len -= 8;
        }
        if (ndim > DT_MAX_NDIM || len < 8 * (size_t)ndim || dtype >= DT_DTYPE_COUNT) {
            snprintf(err, sizeof err, "a worker node's read came back malformed");
        } else {
            int64_t numel = 1;
            for (uint32_t d = 0; d < ndim; d++) {
                shape[d] = (int64_t)dt__le_get(&p, 8);
                numel *= shape[d];
            }
            len -= 8 * (size_t)ndim;
            if (numel < 0 || (size_t)numel * dt_dtype_size((dt_dtype)dtype) != len)
                snprintf(err, sizeof err, "a worker node's read came back with %zu bytes for its shape", len);
            else if (f->be->from_host((dt_dtype)dtype, (int)ndim, shape, p, &b->impl, err, sizeof err) !=
                         DT_OK &&
                     !err[0])
                snprintf(err, sizeof err, "storing a worker node's read failed");
        }
    }
    if (err[0] && !(b->error = dt__strdup(err))) {
        dt__blob_release(b);
        return NULL;
    }
    return b;
}

/* Batch `seq` of node idx could not run there (the node says why): its
 * reads and syncs fail, and so do the waits, on every node, for the parts
 * its ranks would have sent. */
static void batch_failed(int idx, uint64_t seq, const char *error) {
    char why[DT__WIRE_TEXT_MAX];
    sentb *b = NULL;
    pthread_mutex_lock(&C.mu);
    node *nd = &C.nodes[idx];
    snprintf(why, sizeof why, "worker node %d (%.63s, host %.127s, pid %d) %.250s", idx, nd->info.address,
             nd->info.host, nd->info.pid, error[0] ? error : "could not run a batch");
    for (sentb **pp = &nd->sent; *pp; pp = &(*pp)->next)
        if ((*pp)->seq == seq) {
            b = *pp;
            *pp = b->next;
            break;
        }
    pthread_mutex_unlock(&C.mu);
    dt__cluster_reap(idx, seq, why); /* seq 0 (unknown): every read waiting on the node */
    if (b)
        dt__cluster_data_failed(idx, b, why);
}

void dt__cluster_on_result(dt__net_in *in) {
    const dt__wire_msg *m = &in->m;
    int idx = -1;
    pthread_mutex_lock(&C.mu);
    node *nd = dt__cluster_find(in);
    if (nd)
        idx = nd->info.index;
    pthread_mutex_unlock(&C.mu);
    if (idx < 0)
        return;
    if (m->u.result.rank < 0 && in->has_extra) /* a sync's answer: the kernels the node traced */
        dt__cluster_trace_add(idx, zmq_msg_data(&in->extra), zmq_msg_size(&in->extra));
    if (m->u.result.future == 0) { /* a batch the node could not run */
        batch_failed(idx, m->u.result.batch, m->u.result.error);
        return;
    }
    pthread_mutex_lock(&C.mu);
    pend *p = NULL, **pp;
    for (pp = &C.pend; *pp; pp = &(*pp)->next)
        if ((*pp)->node == idx && (*pp)->f->id == m->u.result.future) {
            p = *pp;
            break;
        }
    /* The node ran this batch, so it ran every batch before it (it takes
     * them in order and says at once when it cannot run one): their
     * collectives need no notice any more. */
    sentb *done = NULL;
    while (p && C.nodes[idx].sent && C.nodes[idx].sent->seq <= p->batch) {
        sentb *b = C.nodes[idx].sent;
        C.nodes[idx].sent = b->next;
        b->next = done;
        done = b;
    }
    int n = 0, last = 0;
    if (p) {
        n = (int)m->u.result.count < p->remaining ? (int)m->u.result.count : p->remaining;
        p->remaining -= n;
        if ((last = p->remaining == 0))
            *pp = p->next;
    }
    pthread_mutex_unlock(&C.mu);
    while (done) {
        sentb *b = done;
        done = b->next;
        dt__free(b->keys);
        dt__free(b);
    }
    if (!p)
        return;
    dt_future *f = p->f;
    if (last)
        dt__free(p);
    if (m->u.result.rank >= 0 && n == 1 && m->u.result.rank < f->npieces && f->pieces) {
        dt__blob *b = piece(f, in);
        if (!b)
            dt__future_fail(f, DT_ENOMEM, "out of memory storing a worker node's read");
        dt__future_arrive(f, m->u.result.rank, b);
        dt__blob_release(b);
    } else if (m->u.result.status != DT_OK) {
        dt__future_fail(f, (dt_status)m->u.result.status, m->u.result.error);
    } else {
        for (int i = 0; i < n; i++)
            dt__future_arrive(f, -1, NULL);
    }
    for (int i = 0; i < n; i++)
        dt_future_release(f);
}

/* One node's releases, taken with the batches queued before them. */
typedef struct relout {
    uint8_t *rel;
    size_t n, rid_len;
    uint8_t rid[256];
    int alive;
} relout;

/* Takes every node's releases (under mu, with the batches: a release
 * recorded after a batch was queued leaves after it). */
static relout *take_releases(int *count) {
    relout *r = C.n ? dt__calloc((size_t)C.n, sizeof *r) : NULL;
    *count = r ? C.n : 0;
    for (int i = 0; r && i < C.n; i++) {
        node *nd = &C.nodes[i];
        r[i].rel = nd->rel;
        r[i].n = nd->rel_n;
        r[i].rid_len = nd->rid_len;
        memcpy(r[i].rid, nd->rid, nd->rid_len);
        r[i].alive = nd->info.state == DT_NODE_ALIVE;
        nd->rel = NULL;
        nd->rel_n = nd->rel_cap = 0;
    }
    return r;
}

/* Sends the queued batches, then each node's releases (a value is released
 * only after every batch that reads it was queued). */
void dt__cluster_send_out(void) {
    pthread_mutex_lock(&C.mu);
    outmsg *q = C.out;
    C.out = C.out_last = NULL;
    C.woken = 0;
    int nrel = 0;
    relout *rels = take_releases(&nrel); /* out of memory: they wait for the next pass */
    pthread_mutex_unlock(&C.mu);
    while (q) {
        outmsg *o = q;
        q = o->next;
        if (o->ctl) {
            pthread_mutex_lock(&C.mu);
            node nd = C.nodes[o->node];
            pthread_mutex_unlock(&C.mu);
            int stop = o->ctl->type == DT__WIRE_STOP; /* dt_cluster_remove's, to a removed node */
            if ((nd.info.state == DT_NODE_ALIVE || stop) &&
                dt__net_send(C.router, nd.rid, nd.rid_len, o->ctl) != DT_OK)
                fprintf(stderr, "dtorch main node: %s\n", dt_last_error());
            dt__free(o->ctl);
            dt__free(o);
            continue;
        }
        /* Out of memory for sb: a failure of this batch would leave its
         * peers waiting (the keys are dropped). */
        sentb *sb = o->nkeys ? dt__calloc(1, sizeof *sb) : NULL;
        pthread_mutex_lock(&C.mu);
        node nd = C.nodes[o->node]; /* a copy: the table may grow meanwhile */
        if (C.corrupt == o->node + 1 && o->len) {
            o->len--; /* dt_debug_cluster_corrupt_batch */
            C.corrupt = 0;
        }
        if (sb && nd.info.state == DT_NODE_ALIVE) { /* kept before it leaves: the answer may come first */
            *sb = (sentb){NULL, o->seq, o->tag, o->keys, o->nkeys};
            sentb **pp = &C.nodes[o->node].sent;
            while (*pp)
                pp = &(*pp)->next;
            *pp = sb;
            o->keys = NULL;
            sb = NULL;
        }
        pthread_mutex_unlock(&C.mu);
        dt__free(sb); /* not kept: the node is gone, and its peers' waits fail with it */
        dt__free(o->keys);
        dt__wire_msg b = {.type = DT__WIRE_BATCH, .nextra = 1};
        snprintf(b.u.batch.backend, sizeof b.u.batch.backend, "%s", o->backend);
        b.u.batch.seq = o->seq;
        b.u.batch.flags = dt__rec_enabled(DT__REC_TRACE) ? DT__WIRE_BATCH_TRACE : 0;
        zmq_msg_t x;
        if (zmq_msg_init_data(&x, o->body, o->len, free_body, NULL) != 0) {
            dt__free(o->body);
            zmq_msg_init(&x);
        }
        if (nd.info.state == DT_NODE_ALIVE &&
            dt__net_send_extra(C.router, nd.rid, nd.rid_len, &b, &x) != DT_OK)
            fprintf(stderr, "dtorch main node: %s\n", dt_last_error());
        else if (nd.info.state != DT_NODE_ALIVE)
            zmq_msg_close(&x);
        dt__free(o);
    }
    for (int i = 0; i < nrel; i++) {
        relout *r = &rels[i];
        if (!r->n) {
            dt__free(r->rel);
            continue;
        }
        /* The count goes in front: the list was kept with 4 bytes of room. */
        uint8_t *p = r->rel;
        dt__le_put(&p, r->n, 4);
        zmq_msg_t x;
        dt__wire_msg m = {.type = DT__WIRE_RELEASE, .nextra = 1};
        if (!r->alive || zmq_msg_init_data(&x, r->rel, 4 + 12 * r->n, free_body, NULL) != 0)
            dt__free(r->rel);
        else
            dt__net_send_extra(C.router, r->rid, r->rid_len, &m, &x);
    }
    dt__free(rels);
}

void dt__cluster_queue(outmsg *o) {
    if (C.out_last)
        C.out_last->next = o;
    else
        C.out = o;
    C.out_last = o;
}

int dt__cluster_private(void) { return atomic_load_explicit(&C.private_nodes, memory_order_acquire); }

uint64_t dt__cluster_generation(void) { return atomic_load_explicit(&C.generation, memory_order_acquire); }

int dt__cluster_node_of(dt_device_type type, int64_t id) {
    pthread_mutex_lock(&C.mu);
    int idx = -1;
    for (int i = 0; C.address[0] && i < C.n && idx < 0; i++) {
        const dt_node_info *in = &C.nodes[i].info;
        int64_t first = type == DT_DEVICE_CUDA ? in->first_cuda_device_id : in->first_device_id;
        int64_t count = type == DT_DEVICE_CUDA ? in->cuda_devices : in->cpu_devices;
        if (id >= first && id < first + count)
            idx = i;
    }
    pthread_mutex_unlock(&C.mu);
    return idx;
}

int dt__cluster_span_nccl(uint32_t tag, uint64_t key, int n, const int64_t *ids) {
    dt__span_proc *procs = dt__calloc((size_t)n, sizeof *procs);
    char hosts[2][DT__WIRE_TEXT_MAX] = {{0}};
    if (!procs)
        return 0;
    int remote = 0, spans = 0; /* a rank on a worker node; ranks in two processes */
    pthread_mutex_lock(&C.mu);
    /* This host's name for the main node's ranks: a worker node on the
     * same host is then seen as sharing its GPUs. */
    if (gethostname(hosts[0], sizeof hosts[0] - 1) != 0)
        hosts[0][0] = 0;
    for (int i = 0; i < n && C.address[0]; i++) {
        int idx = -1;
        for (int k = 0; k < C.n && idx < 0; k++)
            if (ids[i] >= C.nodes[k].info.first_cuda_device_id &&
                ids[i] < C.nodes[k].info.first_cuda_device_id + C.nodes[k].info.cuda_devices)
                idx = k;
        uint32_t f = idx < 0 ? C.flags : C.nodes[idx].flags;
        procs[i] = (dt__span_proc){idx, (f & DT__WIRE_REG_NCCL) != 0, (f & DT__WIRE_REG_CUDA_VIRTUAL) != 0,
                                   idx < 0 ? hosts[0] : C.nodes[idx].info.host};
        remote |= idx >= 0;
        spans |= i > 0 && idx != procs[0].proc;
    }
    char why[300];
    /* A group within one worker node uses that node's own NCCL groups. */
    int nccl = remote && spans && dt__span_nccl_choose(n, procs, why, sizeof why);
    uint8_t uid[DT__WIRE_NCCL_ID];
    /* The main node makes the id (every rank's process reaches it already);
     * outside mu: ncclGetUniqueId opens the bootstrap socket. */
    pthread_mutex_unlock(&C.mu);
    if (nccl && !dt__comm_nccl_unique_id(uid))
        nccl = 0;
    if (nccl) {
        dt__span_nccl_put(tag, key, n, uid);
        pthread_mutex_lock(&C.mu);
        for (int i = 0; i < n; i++) {
            int first = 1; /* one message per node */
            for (int j = 0; j < i; j++)
                first &= procs[j].proc != procs[i].proc;
            if (procs[i].proc < 0 || !first)
                continue;
            outmsg *o = dt__calloc(1, sizeof *o);
            dt__wire_msg *m = o ? dt__calloc(1, sizeof *m) : NULL;
            if (!m) { /* that node stages while the others wait in NCCL: a hang, as any OOM in a collective */
                dt__free(o);
                continue;
            }
            m->type = DT__WIRE_NCCLID;
            m->u.ncclid.tag = tag;
            m->u.ncclid.group = key;
            m->u.ncclid.nranks = (uint32_t)n;
            memcpy(m->u.ncclid.id, uid, sizeof uid);
            o->node = procs[i].proc;
            o->ctl = m;
            dt__cluster_queue(o);
        }
        dt__cluster_wake();
        pthread_mutex_unlock(&C.mu);
    }
    dt__free(procs);
    return nccl;
}

void dt__cluster_ship(int idx, const char *backend, void *body, size_t len, dt_future **futs,
                      const int *counts, int n, uint32_t tag, dt__span_key *keys, int nkeys) {
    outmsg *o = dt__calloc(1, sizeof *o);
    pend **ps = dt__calloc((size_t)(n ? n : 1), sizeof *ps);
    for (int i = 0; ps && i < n; i++)
        if (!(ps[i] = dt__calloc(1, sizeof **ps)))
            o = (dt__free(o), NULL);
    char why[DT__WIRE_TEXT_MAX + 64] = "";
    pthread_mutex_lock(&C.mu);
    if (!o || !ps)
        snprintf(why, sizeof why, "out of memory sending to worker node %d", idx);
    else if (idx < 0 || idx >= C.n || !C.address[0])
        snprintf(why, sizeof why, "worker node %d is not in the cluster (it was shut down)", idx);
    else if (C.nodes[idx].info.state != DT_NODE_ALIVE)
        snprintf(why, sizeof why, "%s",
                 C.nodes[idx].info.error[0] ? C.nodes[idx].info.error : "worker node stopped");
    if (!why[0]) {
        o->node = idx;
        snprintf(o->backend, sizeof o->backend, "%s", backend ? backend : "");
        o->body = body;
        o->len = len;
        o->seq = ++C.nodes[idx].batches;
        o->tag = tag;
        o->keys = keys;
        o->nkeys = nkeys;
        keys = NULL;
        dt__cluster_queue(o);
        for (int i = 0; i < n; i++) {
            ps[i]->f = futs[i];
            ps[i]->node = idx;
            ps[i]->remaining = counts[i];
            ps[i]->batch = o->seq;
            ps[i]->next = C.pend;
            C.pend = ps[i];
        }
        dt__cluster_wake();
    }
    pthread_mutex_unlock(&C.mu);
    dt__free(keys);
    if (why[0]) {
        int oom = !o || !ps;
        for (int i = 0; ps && i < n; i++)
            dt__free(ps[i]);
        dt__free(o);
        dt__free(body);
        for (int i = 0; i < n; i++) {
            /* A read of the node's values fails; a sync (no pieces) has
             * nothing left to wait for there: what the node ran before it
             * was lost or stopped failed its own reads. */
            if (futs[i]->pieces || oom)
                dt__future_fail(futs[i], DT_EKERNEL, why);
            for (int c = 0; c < counts[i]; c++) {
                if (!futs[i]->pieces && !oom)
                    dt__future_arrive(futs[i], -1, NULL);
                dt_future_release(futs[i]);
            }
        }
    }
    dt__free(ps);
}

void dt__cluster_release(int idx, uint32_t tag, uint64_t id) {
    pthread_mutex_lock(&C.mu);
    if (C.address[0] && idx >= 0 && idx < C.n && C.nodes[idx].info.state == DT_NODE_ALIVE) {
        node *nd = &C.nodes[idx];
        if (nd->rel_cap - nd->rel_n < 1) {
            size_t cap = nd->rel_cap ? 2 * nd->rel_cap : 64;
            uint8_t *v = dt__realloc(nd->rel, 4 + 12 * cap);
            if (v) {
                nd->rel = v;
                nd->rel_cap = cap;
            }
        }
        if (nd->rel_n < nd->rel_cap) {
            uint8_t *p = nd->rel + 4 + 12 * nd->rel_n++;
            dt__le_put(&p, tag, 4);
            dt__le_put(&p, id, 8);
        }
    }
    pthread_mutex_unlock(&C.mu);
}
