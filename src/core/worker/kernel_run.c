/*
 * Running and dropping one kernel record on a stream's worker: the backend
 * call (charging its output, core/records/blob.c) and poisoning on failure, the local
 * assembly of a cross-mesh copy's pieces, collectives (and point-to-point
 * copies) through the comm, the core kernels (fetch, sync, gate) and, after
 * dt_graph_cancel, dropping a kernel without running it. The worker loop
 * that calls dt__kernel_run / dt__kernel_drop is in core/worker/kernel_stream.c.
 *
 * Threads: the stream's worker thread. Locks: an input from another stream
 * is waited for on its producer's ev_lock (dt__event_wait); futures and
 * collectives take their own locks; no stream lock is held here.
 */
#include <stdio.h>
#include <string.h>

#include "comm/comm.h"
#include "core/records/bcast.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/memstats.h"
#include "core/records/step.h"
#include "core/records/trace.h"
#include "core/records/ufn.h"
#include "core/worker/chain_run.h"
#include "core/worker/graph_run.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

/* From backend/kernels.def: a name per kernel op. */
static const char *const kop_names[DT_K_COUNT] = {
#define DT_KOP(E, name) [DT_K_##E] = name,
#include "backend/kernels.def"
};

void dt__kernel_failure(char *buf, size_t cap, const dt__krec *k, const dt__stream *s, const char *what) {
    const char *op = k->opname ? k->opname : "kernel", *dev = s->type == DT_DEVICE_CUDA ? "cuda" : "cpu";
    if (k->site_file)
        snprintf(buf, cap, "%s failed on %s:%lld (created at %s:%d): %s", op, dev, (long long)s->device_id,
                 k->site_file, k->site_line, what);
    else
        snprintf(buf, cap, "%s failed on %s:%lld: %s", op, dev, (long long)s->device_id, what);
}

/* Poisons k->out with a message naming the op, the device and the call site. */
static void poison(dt__krec *k, const dt__stream *s, const char *what) {
    if (!k->out || k->out->error)
        return;
    char buf[1024];
    dt__kernel_failure(buf, sizeof buf, k, s, what);
    k->out->error = dt__strdup(buf);
}

/* Where an instantiated kernel came from: the shared record and the
 * device index of its slot (core/records/bcast.h). */
typedef struct slot_of {
    dt__bcast *bc;
    int d;
    /* A run's image whose input 0's group other images of the run read
     * too (core/records/step.h, dt__step_sole_use): never taken over. */
    int shared0;
    /* A captured run's launch computed this kernel's result: the graph's
     * static output, of which the kernel's output gets a share
     * (core/worker/graph_run.c); NULL: run it. */
    void *given;
} slot_of;

/* 1 when k holds the only reference left to its input 0: its own, or, for
 * a shared record's slot that borrows it (`so`, core/records/bcast.h), the
 * group's on the member while the record is the group's only holder. The
 * kernel then takes the group's reference over (dt__bgroup.taken): it drops it when
 * done, as a per-device kernel drops its input, so the buffer it wrote into
 * is not held by a second reference until the group goes. */
static int sole_input(const dt__krec *k, const slot_of *so) {
    dt__bgroup *gr = so ? so->bc->gin[0] : NULL;
    if (atomic_load(&k->in[0]->refs) != 1 || (gr && (so->shared0 || atomic_load(&gr->holds) != 1)))
        return 0;
    if (gr)
        atomic_fetch_or_explicit(&gr->taken, 1ull << so->d, memory_order_relaxed);
    return 1;
}

/* Runs a backend kernel; returns 1 when it was allowed to write into in[0]
 * (DT_KF_INPLACE). `so`: the slot k was instantiated from, or NULL. */
static int run_backend(dt__krec *k, dt__stream *s, const slot_of *so) {
    void *in[DT_MAX_OP_INPUTS] = {NULL};
    for (int i = 0; i < k->n_in; i++) {
        if (k->in[i]->error) {
            /* Carry the first failure unchanged to everything downstream. */
            k->out->error = dt__strdup(k->in[i]->error);
            return 0;
        }
        in[i] = k->in[i]->impl;
    }
    /* The record's packed attributes, for the backend: unpacked over the
     * stream's previous kernel's, which costs only what they differ in. */
    dt__kattr *a = &s->kattr;
    dt__kattr_unpack_over(k, a, s->kattr_lens);
    /* The kernel holds the only reference left to in[0]: its tensor was
     * released and no other kernel will read it, so its buffer may be reused
     * (peak memory of a chain of ops stays at one buffer). Which kernels may
     * is the window's reuse pass's call (DT_KF_REUSE). */
    if ((a->flags & DT_KF_REUSE) && k->n_in > 0 && sole_input(k, so))
        a->flags |= DT_KF_INPLACE;
    char err[512] = "";
    void *out = NULL;
    dt_status st = s->be->run(k->kop, a, in, k->n_in, &out, err, sizeof err);
    if (st != DT_OK) {
        char what[600];
        snprintf(what, sizeof what, "%s (%s kernel: %s)", err[0] ? err : dt_status_str(st), kop_names[k->kop],
                 dt_status_str(st));
        poison(k, s, what);
        s->be->free(out);
        return 0;
    }
    k->out->impl = out;
    return (a->flags & DT_KF_INPLACE) != 0;
}

/* Places the kernel's inputs (local pieces: received copies and slices
 * made here) into one new tensor, in input order. */
static void run_assemble(dt__krec *k, dt__stream *s) {
    dt__asmattr a;
    if (dt__asmattr_parse(k->attr, k->alen, k->n_in, &a) != 0) {
        poison(k, s, "malformed assembly attributes");
        return;
    }
    void *impls[DT_MAX_OP_INPUTS] = {NULL};
    for (int i = 0; i < k->n_in; i++) {
        if (k->in[i]->error) {
            k->out->error = dt__strdup(k->in[i]->error);
            return;
        }
        impls[i] = k->in[i]->impl;
    }
    char err[512] = "";
    void *out = NULL;
    dt_status st =
        s->be->assemble(a.dtype, a.ndim, a.shape, k->n_in, impls, a.starts, 0, &out, err, sizeof err);
    if (st == DT_OK)
        k->out->impl = out;
    else
        poison(k, s, err[0] ? err : dt_status_str(st));
}

/* Runs a collective kernel's rank through the graph's comm. */
static void run_collective(dt__krec *k, dt__stream *s) {
    dt__collattr a;
    dt__collattr_read(k, &a);
    /* The comm that holds the kernel's group (the ranks' device type, or
     * the CPU's for a copy between types), made before the kernel was queued
     * (dt__lw_group, or a decoder's resolver); the queue's hand-over
     * publishes it. */
    dt__comm *c = (unsigned)a.type < DT_DEVICE_TYPES
                      ? atomic_load_explicit(&s->g->comm[a.type], memory_order_acquire)
                      : NULL;
    if (c)
        c->ops->run(c, &a, k->rank, k->in[0], k->out, k->opname);
    else if (!k->out->error)
        poison(k, s, "no communication back end for this device type");
    dt__coll_logent *log = s->g->coll_log; /* test use: dt_debug_coll_log */
    if (log) {
        int i = atomic_fetch_add_explicit(&s->g->coll_log_n, 1, memory_order_relaxed);
        if (i < s->g->coll_log_cap)
            log[i] = (dt__coll_logent){s->device_id, s->kind, k->rank, a.group, a.seq};
    }
}

/* A kernel's name in traces. */
/* A gate kernel (core/records/gate.h): waits for the gate, then copies its
 * input, so the gated value shares no storage with it. */
static void gate_run(dt__krec *k, dt__stream *s) {
    dt_debug_gate *gate = k->handle;
    dt__debug_gate_wait(gate, &s->g->gates_bypassed);
    dt__debug_gate_unref(gate);
    k->handle = NULL;
    const dt__blob *in = k->in[0];
    if (in->error) {
        k->out->error = dt__strdup(in->error);
        return;
    }
    /* A fresh copy (assemble of one piece covering the whole block), so the
     * gated value shares no storage with its input. */
    static const int64_t zero[DT_MAX_NDIM];
    void *impl = in->impl, *out = NULL;
    char err[512] = "";
    dt__kattr a;
    dt__kattr_unpack(k, &a);
    dt_status st = s->be->assemble(a.dtype, a.ndim, a.shape, 1, &impl, zero, 0, &out, err, sizeof err);
    if (st == DT_OK) {
        k->out->impl = out;
    } else {
        char buf[700];
        snprintf(buf, sizeof buf, "%s failed on device %lld: %s", k->opname, (long long)s->device_id,
                 err[0] ? err : dt_status_str(st));
        k->out->error = dt__strdup(buf);
    }
}

/* Charges a new output to its device (s's worker thread). Storage is counted once: an output
 * written into its donated input's buffer takes that input's charge (and base) over; a view of
 * an input on this device's account (the backend says they share storage) is charged nothing
 * and holds that input, whose charge then lasts as long as the storage is seen; anything else is
 * charged its storage's bytes, which for a view of the kernel's own temporary is more than its
 * elements'. An input on no device's account (a source: the host copy from_torch made, which
 * each device's blob of a Replicate shares) or on another device's (an in-process copy may
 * share a host buffer) is not a base: that output is charged here, as before views, so a
 * device's value is always counted on that device. */
static void blob_account(dt__krec *k, const dt__stream *s, int inplace) {
    dt__blob *out = k->out;
    if (!out || !out->impl || out->charged || out->base)
        return;
    if (inplace && k->n_in > 0 && k->in[0]->impl && s->be->same_storage &&
        s->be->same_storage(out->impl, k->in[0]->impl)) {
        dt__blob *in = k->in[0];
        out->charged = in->charged;
        out->mem = in->mem;
        out->base = in->base;
        in->charged = 0;
        in->base = NULL;
        atomic_fetch_add_explicit(&s->g->kernels_in_place, 1, memory_order_relaxed);
        return;
    }
    if (!s->mem)
        return;
    out->mem = s->mem;
    if (s->be->same_storage)
        for (int i = 0; i < k->n_in; i++) {
            dt__blob *in = k->in[i];
            if (in->impl && in->mem == s->mem && in->be == s->be &&
                s->be->same_storage(out->impl, in->impl)) {
                out->base = dt__blob_retain(in);
                return;
            }
        }
    out->charged =
        (int64_t)(s->be->storage_nbytes ? s->be->storage_nbytes(out->impl) : s->be->nbytes(out->impl));
    dt__mem_charge(out->mem, out->charged);
}

static const char *kernel_name(int kop) {
    if (kop < DT_K_COUNT)
        return kop_names[kop];
    return kop == DT_KC_COLLECTIVE ? "collective"
           : kop == DT_KC_ASSEMBLE ? "assemble"
           : kop == DT_KC_USER     ? "user"
                                   : "gate";
}

/* A device-independent record's slot (core/records/bcast.h), instantiated:
 * the shared image's kernel with the slot's blobs, in `buf` (the slot's
 * references move into it; the inputs it borrows from groups the shared
 * record holds stay borrowed). The caller lets go of the shared record
 * once the kernel is done with those inputs. */
typedef union bcast_buf {
    dt__krec k;
    uint8_t bytes[sizeof(dt__krec) + DT__KATTR_PACK_MAX];
} bcast_buf;

static dt__krec *bcast_local(dt__krec *slot, bcast_buf *buf) {
    dt__bcast *b = slot->handle;
    const dt__krec *img = b->img;
    dt__krec *k = &buf->k;
    memcpy(k, img, offsetof(dt__krec, attr) + img->alen);
    k->next = NULL;
    k->rank = slot->rank; /* a collective's comm rank (lower_coll.c), else 0 */
    if (b->coll_ids)      /* and its group's id and sequence number */
        memcpy(k->attr, img->attr + img->alen + (size_t)dt__bcast_slot_index(b, slot) * 16, 16);
    k->n_in = slot->n_in;
    k->wait = slot->wait;
    memcpy(k->in, slot->in, sizeof k->in);
    k->out = slot->out;
    return k;
}

static void kernel_exec(dt__krec *k, dt__stream *s, const slot_of *so);
static void kernel_drop(dt__krec *k, dt__stream *s, const slot_of *so);

/* Image `im` of a run (core/records/step.h) on device d, instantiated in
 * `buf` as a shared record's slot would be: its blobs are member d of the
 * groups it names (the inputs borrowed from the groups the run holds, the
 * output with its kernel's reference). It waits on whatever input another
 * stream made (the controller did not look). */
static dt__krec *step_local(const dt__step_img *im, int d, bcast_buf *buf) {
    const dt__krec *img = im->bc.img;
    dt__krec *k = &buf->k;
    memcpy(k, img, offsetof(dt__krec, attr) + img->alen);
    k->wait = 1;
    for (int j = 0; j < k->n_in; j++)
        k->in[j] = dt__bgroup_ptrs(im->bc.gin[j])[d];
    k->out = dt__bgroup_ptrs(im->gout)[d];
    return k;
}

/* A run's slot: its kernels in order, each run (or dropped) as an
 * instantiated shared record's slot; then the slot lets go of the run. */
static void step_each(dt__krec *slot, dt__stream *s, void (*fn)(dt__krec *, dt__stream *, const slot_of *)) {
    dt__step *st = slot->handle;
    int d = dt__step_slot_index(st, slot);
    /* A repeated segment may be one launch of a captured graph (graph_run.c). */
    void *given[DT__STEP_MAX];
    for (int a = 0, b = st->k; a < st->k; a = b) {
        int launched = fn == kernel_exec && dt__graph_slot(st, d, s, a, &b, given);
        for (int i = a; i < b; i++) {
            dt__step_img *im = dt__step_img_at(st, i);
            bcast_buf buf;
            slot_of so = {&im->bc, d, im->bc.img->n_in > 0 && !dt__step_sole_use(st, im, 0),
                          launched ? given[i - a] : NULL};
            fn(step_local(im, d, &buf), s, &so);
        }
    }
    dt__step_unref(st);
}

void dt__kernel_run(dt__krec *k, dt__stream *s) {
    if (k->kop == DT_KC_STEP) {
        step_each(k, s, kernel_exec);
        return;
    }
    if (k->kop == DT_KC_BCAST) {
        bcast_buf buf;
        slot_of so = {k->handle, dt__bcast_slot_index(k->handle, k), 0, NULL};
        kernel_exec(bcast_local(k, &buf), s, &so);
        dt__bcast_unref(so.bc);
        return;
    }
    kernel_exec(k, s, NULL);
    dt__krec_free(k);
}

/* Runs k and releases its blobs; the record itself stays the caller's.
 * `so`: the slot k was instantiated from, or NULL. */
static void kernel_exec(dt__krec *k, dt__stream *s, const slot_of *so) {
    /* Tracing (core/records/trace.h): one load when off. Reads and syncs are not traced:
     * a sync's arrival is what a reader of the records waits for. */
    int traced = dt__rec_enabled(DT__REC_TRACE) && k->kop != DT_KC_FETCH && k->kop != DT_KC_SYNC;
    if (k->wait && !(so && so->given)) /* a launch waited before it began */
        for (int i = 0; i < k->n_in; i++)
            dt__event_wait(s, k->in[i]);
    int64_t t0 = traced ? dt__rec_now() : 0; /* after the waits for other streams */
    int inplace = 0;
    switch (so && so->given ? DT_KC_STEP : k->kop) {
    case DT_KC_STEP: /* the result of a launch (graph_run.c) */
        k->out->impl = s->be->graph_share(so->given);
        if (!k->out->impl)
            poison(k, s, "out of memory for a captured graph's output");
        break;
    case DT_KC_COLLECTIVE:
        atomic_fetch_add_explicit(&s->n_comm, 1, memory_order_relaxed);
        run_collective(k, s);
        if (k->out && !k->out->impl && !k->out->error)
            poison(k, s, "collective produced no value");
        break;
    case DT_KC_FETCH:
        dt__future_arrive(k->handle, k->rank, k->in[0]);
        dt_future_release(k->handle);
        break;
    case DT_KC_SYNC:
        dt__future_arrive(k->handle, -1, NULL);
        dt_future_release(k->handle);
        break;
    case DT_KC_ASSEMBLE:
        run_assemble(k, s);
        break;
    case DT_KC_GATE:
        gate_run(k, s);
        break;
    case DT_KC_USER:
        dt__user_run(k, s);
        break;
    case DT_K_CHAIN:
        inplace = dt__chain_run(k, s);
        break;
    default:
        inplace = run_backend(k, s, so);
        break;
    }
    if (k->out) {
        blob_account(k, s, inplace);
        /* The backend's event (when it has events) is recorded before the
         * host count says the kernel completed: a consumer that sees the
         * count finds the event. */
        if (s->record_events && (k->out->impl || k->out->error) &&
            s->be->event_new(s->ctx, &k->out->bev) == DT_OK &&
            s->be->event_record(k->out->bev, s->ctx) != DT_OK) {
            s->be->event_free(k->out->bev);
            k->out->bev = NULL;
        }
    }
    if (t0)
        dt__rec_kernel_ran(s, k, k->kop == DT_KC_USER ? k->opname : kernel_name(k->kop), t0);
    /* Every kernel the controller appended counts, in order: this one's
     * number is its output's event (events.c). */
    dt__event_complete(s, ++s->completed);
    atomic_fetch_add_explicit(&s->n_run, 1, memory_order_relaxed);
    dt__krec_release_blobs(k, so ? so->bc : NULL, so ? so->d : -1);
}

void dt__kernel_drop(dt__krec *k, dt__stream *s) {
    if (k->kop == DT_KC_STEP) {
        step_each(k, s, kernel_drop);
        return;
    }
    if (k->kop == DT_KC_BCAST) {
        bcast_buf buf;
        slot_of so = {k->handle, dt__bcast_slot_index(k->handle, k), 0, NULL};
        kernel_drop(bcast_local(k, &buf), s, &so);
        dt__bcast_unref(so.bc);
        return;
    }
    kernel_drop(k, s, NULL);
    dt__krec_free(k);
}

/* After dt_graph_cancel: k is released without running. Its output is
 * poisoned and made ready (a kernel waiting for it wakes), a read or sync
 * fails, and a collective still meets its peers, so ranks that do run are
 * not left waiting for this one. */
static void kernel_drop(dt__krec *k, dt__stream *s, const slot_of *so) {
    static const char msg[] = "cancelled: the graph was cancelled (dt_graph_cancel) before this ran";
    atomic_fetch_add_explicit(&s->g->dropped, 1, memory_order_relaxed);
    if (k->out)
        poison(k, s, msg);
    switch (k->kop) {
    case DT_KC_COLLECTIVE:
        /* Peers read the published input: it must be ready (producers
         * elsewhere run or drop, so this wait ends). The poisoned output
         * tells the collective to meet its peers and compute nothing. */
        if (k->wait)
            for (int i = 0; i < k->n_in; i++)
                dt__event_wait(s, k->in[i]);
        run_collective(k, s);
        break;
    case DT_KC_FETCH:
    case DT_KC_SYNC:
        dt__future_fail(k->handle, DT_ECANCELLED, msg);
        dt__future_arrive(k->handle, -1, NULL);
        dt_future_release(k->handle);
        break;
    case DT_KC_GATE:
        dt__debug_gate_drop(k);
        break;
    case DT_KC_USER:
        dt__ufn_unref(k->handle);
        k->handle = NULL;
        break;
    default:
        break;
    }
    /* A dropped kernel still completes its number: consumers on other
     * streams wait on it (events.c). */
    dt__event_complete(s, ++s->completed);
    dt__krec_release_blobs(k, so ? so->bc : NULL, so ? so->d : -1);
}
