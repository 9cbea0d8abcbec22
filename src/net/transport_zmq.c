/*
 * ZeroMQ helpers for the cluster (transport.h). CURVE keys: the main
 * node's key pair is derived from the token (wire.c, dt__wire_derive), so a
 * worker node that holds the token knows the server's public key and one
 * that does not cannot complete the handshake; each worker node's own key
 * pair is fresh. Any thread, one socket per thread at a time.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/common.h"
#include "net/transport.h"

int dt__net_has_curve(void) { return zmq_has("curve") ? 1 : 0; }

int64_t dt__net_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int setopt(void *sock, int opt, const void *v, size_t n) {
    if (zmq_setsockopt(sock, opt, v, n) == 0)
        return 0;
    dt__error(DT_EBACKEND, "cluster: zmq_setsockopt(%d): %s", opt, zmq_strerror(zmq_errno()));
    return -1;
}

int dt__net_curve(void *sock, const char *token, int server) {
    if (!dt__net_has_curve())
        return 0;
    uint8_t sec[32];
    char sec_z85[41], pub_z85[41];
    dt__wire_derive(token, "curve-server-secret", sec);
    int rc = -1;
    if (!zmq_z85_encode(sec_z85, sec, 32) || zmq_curve_public(pub_z85, sec_z85) != 0) {
        dt__error(DT_EBACKEND, "cluster: deriving the CURVE keys failed: %s", zmq_strerror(zmq_errno()));
        goto out;
    }
    if (server) {
        int one = 1;
        rc =
            setopt(sock, ZMQ_CURVE_SERVER, &one, sizeof one) || setopt(sock, ZMQ_CURVE_SECRETKEY, sec_z85, 40)
                ? -1
                : 0;
    } else {
        char cpub[41], csec[41];
        if (zmq_curve_keypair(cpub, csec) != 0) {
            dt__error(DT_EBACKEND, "cluster: zmq_curve_keypair: %s", zmq_strerror(zmq_errno()));
            goto out;
        }
        rc = setopt(sock, ZMQ_CURVE_SERVERKEY, pub_z85, 40) || setopt(sock, ZMQ_CURVE_PUBLICKEY, cpub, 40) ||
                     setopt(sock, ZMQ_CURVE_SECRETKEY, csec, 40)
                 ? -1
                 : 0;
        memset(csec, 0, sizeof csec);
    }
out:
    memset(sec, 0, sizeof sec);
    memset(sec_z85, 0, sizeof sec_z85);
    return rc;
}

dt_status dt__net_send(void *sock, const void *rid, size_t rid_len, const dt__wire_msg *m) {
    uint8_t buf[DT__WIRE_MAX];
    size_t n = dt__wire_encode(m, buf, sizeof buf);
    if (!n)
        return DT_EINVAL;
    if (rid_len && zmq_send(sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return dt__error(DT_EBACKEND, "cluster: sending a %s message: %s", dt__wire_type_name(m->type),
                         zmq_strerror(zmq_errno()));
    if (zmq_send(sock, buf, n, ZMQ_DONTWAIT) < 0)
        return dt__error(DT_EBACKEND, "cluster: sending a %s message: %s", dt__wire_type_name(m->type),
                         zmq_strerror(zmq_errno()));
    return DT_OK;
}

dt_status dt__net_send_extra(void *sock, const void *rid, size_t rid_len, const dt__wire_msg *m,
                             zmq_msg_t *extra) {
    uint8_t buf[DT__WIRE_MAX];
    size_t n = dt__wire_encode(m, buf, sizeof buf);
    dt_status st = DT_OK;
    if (!n)
        st = DT_EINVAL;
    else if ((rid_len && zmq_send(sock, rid, rid_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) ||
             zmq_send(sock, buf, n, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
             zmq_msg_send(extra, sock, ZMQ_DONTWAIT) < 0)
        st = dt__error(DT_EBACKEND, "cluster: sending a %s message: %s", dt__wire_type_name(m->type),
                       zmq_strerror(zmq_errno()));
    zmq_msg_close(extra); /* after a send it is empty: closing is a no-op */
    return st;
}

typedef struct shared_msg {
    atomic_int refs; /* chunks not yet sent or dropped */
    dt__xfer_msg *m;
} shared_msg;

static void chunk_done(void *data, void *hint) {
    (void)data;
    shared_msg *s = hint;
    if (atomic_fetch_sub(&s->refs, 1) == 1) {
        dt__xfer_msg_free(s->m);
        dt__free(s);
    }
}

dt_status dt__net_send_data(void *sock, const void *rid, size_t rid_len, dt__xfer_msg *m) {
    dt__wire_msg w = {.type = DT__WIRE_DATA};
    w.u.data = m->h;
    w.u.data.offset = 0;
    w.u.data.total = m->h.error[0] || !m->data ? 0 : m->len;
    size_t n = w.u.data.total ? (m->len + DT__XFER_CHUNK - 1) / DT__XFER_CHUNK : 0;
    shared_msg *s = n ? dt__calloc(1, sizeof *s) : NULL;
    if (!s) {
        if (n) /* out of memory: the receiver's wait ends with our node */
            w.u.data.total = 0,
            snprintf(w.u.data.error, sizeof w.u.data.error, "out of memory sending a part");
        dt_status st = dt__net_send(sock, rid, rid_len, &w);
        dt__xfer_msg_free(m);
        return st;
    }
    atomic_init(&s->refs, (int)n);
    s->m = m;
    dt_status st = DT_OK;
    size_t i = 0;
    for (; i < n && st == DT_OK; i++) {
        size_t off = i * DT__XFER_CHUNK, len = m->len - off < DT__XFER_CHUNK ? m->len - off : DT__XFER_CHUNK;
        zmq_msg_t x;
        if (zmq_msg_init_data(&x, (uint8_t *)m->data + off, len, chunk_done, s) != 0) {
            st = dt__error(DT_ENOMEM, "cluster: out of memory sending a part");
            break; /* chunk i is not made: dropped below */
        }
        w.u.data.offset = off;
        w.nextra = 1;
        st = dt__net_send_extra(sock, rid, rid_len, &w, &x); /* x is closed either way: chunk_done */
    }
    for (; i < n; i++)
        chunk_done(NULL, s);
    return st;
}

int dt__net_bulk(void *sock) {
    int64_t max = DT__WIRE_FRAME_MAX;
    int zero = 0;
    return setopt(sock, ZMQ_MAXMSGSIZE, &max, sizeof max) || setopt(sock, ZMQ_SNDHWM, &zero, sizeof zero) ||
                   setopt(sock, ZMQ_RCVHWM, &zero, sizeof zero)
               ? -1
               : 0;
}

void dt__net_in_done(dt__net_in *in) {
    if (in->has_extra)
        zmq_msg_close(&in->extra);
    in->has_extra = 0;
}

/* Reads and drops the rest of a multipart message. */
static void drain(void *sock, zmq_msg_t *msg) {
    while (zmq_msg_more(msg)) {
        zmq_msg_close(msg);
        zmq_msg_init(msg);
        if (zmq_msg_recv(msg, sock, ZMQ_DONTWAIT) < 0)
            break;
    }
}

int dt__net_recv(void *sock, int router, dt__net_in *in) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    dt__net_in_done(in);
    in->rid_len = 0;
    in->peer[0] = 0;
    in->foreign_version = in->foreign_type = 0;
    if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
        int e = zmq_errno();
        zmq_msg_close(&msg);
        if (e == EAGAIN || e == EINTR)
            return 0;
        dt__error(DT_EBACKEND, "cluster: receiving: %s", zmq_strerror(e));
        return -1;
    }
    if (router) {
        size_t n = zmq_msg_size(&msg);
        if (n > sizeof in->rid || !zmq_msg_more(&msg)) {
            drain(sock, &msg);
            zmq_msg_close(&msg);
            dt__error(DT_EINVAL, "cluster: a message without a routing id");
            return -1;
        }
        memcpy(in->rid, zmq_msg_data(&msg), n);
        in->rid_len = n;
        zmq_msg_close(&msg);
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            dt__error(DT_EINVAL, "cluster: a routing id without a message");
            return -1;
        }
    }
    const char *peer = zmq_msg_gets(&msg, "Peer-Address");
    if (peer) {
        strncpy(in->peer, peer, sizeof in->peer - 1);
        in->peer[sizeof in->peer - 1] = 0;
    }
    size_t n = zmq_msg_size(&msg);
    int more = zmq_msg_more(&msg);
    int rc = 1, rest = 1; /* rest: the frames after this one are still unread */
    if (n > sizeof in->frame) {
        dt__error(DT_EINVAL, "wire: a %zu-byte message is larger than any this version sends", n);
        rc = -1;
    } else {
        memcpy(in->frame, zmq_msg_data(&msg), n);
        if (dt__wire_decode(in->frame, n, &in->m) != DT_OK) {
            in->foreign_version = dt__wire_foreign_version(in->frame, n, &in->foreign_type);
            rc = -1;
        } else if (more && in->m.nextra == 1) {
            rest = 0;
            zmq_msg_init(&in->extra);
            in->has_extra = 1;
            if (zmq_msg_recv(&in->extra, sock, ZMQ_DONTWAIT) < 0) {
                dt__error(DT_EINVAL, "wire: a %s message without its extra frame",
                          dt__wire_type_name(in->m.type));
                rc = -1;
            } else if (zmq_msg_more(&in->extra)) {
                dt__error(DT_EINVAL, "wire: a %s message with frames it does not announce",
                          dt__wire_type_name(in->m.type));
                drain(sock, &in->extra);
                rc = -1;
            }
            if (rc < 0)
                dt__net_in_done(in);
        } else if (more || in->m.nextra) {
            dt__error(DT_EINVAL, "wire: a %s message with frames it does not announce",
                      dt__wire_type_name(in->m.type));
            rc = -1;
        }
    }
    if (rest)
        drain(sock, &msg);
    zmq_msg_close(&msg);
    return rc;
}

static void free_frame(void *arg) {
    zmq_msg_close(arg);
    dt__free(arg);
}

void dt__net_deliver_data(dt__net_in *in, const dt__xfer_hdr *h) {
    dt__xfer_msg *m = dt__calloc(1, sizeof *m);
    zmq_msg_t *z = m && in->has_extra ? dt__calloc(1, sizeof *z) : NULL;
    if (!m || (in->has_extra && !z)) {
        dt__free(m);
        return;
    }
    m->h = *h;
    if (z) {
        zmq_msg_init(z);
        zmq_msg_move(z, &in->extra);
        m->data = zmq_msg_data(z);
        m->len = zmq_msg_size(z);
        m->release = free_frame;
        m->arg = z;
    }
    dt__xfer_deliver(m);
}
