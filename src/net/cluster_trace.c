/*
 * The worker nodes' kernel records on the main node (dtorch_cluster.h,
 * dt_cluster_take_trace): each sync's answer from a node that traces
 * carries the records its workers made since its last answer (the layout:
 * subctl.h); they wait here, on the node's clock, until a trace takes them
 * and they move onto ours by the node's clock offset (cluster_beat.c
 * estimates it from the heartbeats).
 *
 * Threads: dt__cluster_trace_add on the cluster thread, the take on a
 * client thread; both under mu.
 */
#include <string.h>

#include "core/records/kernel_rec.h"
#include "net/cluster_int.h"

/* Records kept at most (a trace's worth: the workers' own buffers hold
 * DT__REC_KERNELS_CAP per stream); past it a node's records are dropped. */
#define TRACE_MAX ((size_t)1 << 22)

static void get_text(dt__rd *r, char *out, size_t cap) {
    size_t n = (size_t)dt__rd_get(r, 2);
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return;
    }
    size_t k = n < cap - 1 ? n : cap - 1;
    memcpy(out, r->p, k);
    out[k] = 0;
    r->p += n;
}

void dt__cluster_trace_add(int idx, const void *body, size_t len) {
    dt__rd r = {body, (const uint8_t *)body + len, 0};
    size_t n = (size_t)dt__rd_get(&r, 4);
    if (n > len / 50) /* each record takes at least 50 bytes */
        r.bad = 1;
    pthread_mutex_lock(&C.mu);
    int lost = C.ntrace + n > TRACE_MAX; /* nobody takes them (a C program tracing without the take) */
    if (!r.bad && !lost && C.ntrace + n > C.trace_cap) {
        size_t cap = C.trace_cap ? C.trace_cap : 256;
        while (cap < C.ntrace + n)
            cap *= 2;
        dt_cluster_trace_kernel *v = dt__realloc(C.trace, cap * sizeof *v);
        if (v) {
            C.trace = v;
            C.trace_cap = cap;
        } else {
            lost = 1; /* out of memory: these records are lost */
        }
    }
    size_t at = C.ntrace;
    for (size_t i = 0; i < n && !r.bad && !lost; i++) {
        dt_cluster_trace_kernel *k = &C.trace[at + i];
        memset(k, 0, sizeof *k);
        uint64_t key = dt__rd_get(&r, 8);
        k->node = idx;
        k->device_type = (int32_t)(key >> 56);
        k->stream_kind = (int32_t)((key >> 48) & 0xff);
        k->device_id = (int64_t)(key & 0xffffffffffffull);
        k->seq = dt__rd_get(&r, 8);
        k->begin_ns = (int64_t)dt__rd_get(&r, 8);
        k->end_ns = (int64_t)dt__rd_get(&r, 8);
        k->bytes = (int64_t)dt__rd_get(&r, 8);
        k->line = (int32_t)dt__rd_get(&r, 4);
        get_text(&r, k->op, sizeof k->op);
        get_text(&r, k->kernel, sizeof k->kernel);
        get_text(&r, k->file, sizeof k->file);
    }
    if (!lost && !r.bad && r.p == r.end)
        C.ntrace += n;
    else if (!lost)
        fprintf(stderr, "dtorch main node: dropped worker node %d's malformed trace records\n", idx);
    pthread_mutex_unlock(&C.mu);
}

void dt__cluster_trace_clear(void) {
    dt__free(C.trace);
    C.trace = NULL;
    C.ntrace = C.trace_cap = 0;
}

dt_status dt_cluster_take_trace(dt_cluster_trace_kernel **out, size_t *n) {
    if (!out || !n)
        return dt__error(DT_EINVAL, "dt_cluster_take_trace: NULL argument");
    pthread_mutex_lock(&C.mu);
    for (size_t i = 0; i < C.ntrace; i++) { /* onto this process's clock */
        dt_cluster_trace_kernel *k = &C.trace[i];
        int64_t off = k->node < C.n && C.nodes[k->node].info.clock_rtt_ns >= 0
                          ? C.nodes[k->node].info.clock_offset_ns
                          : 0;
        k->begin_ns -= off;
        k->end_ns -= off;
    }
    *out = C.ntrace ? C.trace : NULL;
    *n = C.ntrace;
    if (!C.ntrace)
        dt__free(C.trace);
    C.trace = NULL;
    C.ntrace = C.trace_cap = 0;
    pthread_mutex_unlock(&C.mu);
    return DT_OK;
}
