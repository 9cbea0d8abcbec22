/*
 * Running a DT_K_CHAIN kernel on a worker (chain_run.h): the program
 * (core/records/chain_prog.h) is parsed and handed to the backend's
 * run_chain, which walks the data in cache-sized blocks (torch_chain.cpp,
 * ref_chain.c), or, for a backend without one, run step after step on the
 * whole tensors. A failing step's error names that step's op and call site,
 * as its unfused kernel's would.
 *
 * Threads: the stream's worker. No locks.
 */
#include <stdio.h>
#include <string.h>

#include "core/records/blob.h"
#include "core/records/chain_prog.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/worker/chain_run.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

static const char *const kop_names[DT_K_COUNT] = {
#define DT_KOP(E, name) [DT_K_##E] = name,
#include "backend/kernels.def"
};

/* The steps one after the other on the whole tensors, for a backend without
 * run_chain. */
static dt_status run_steps(const dt__backend *be, const dt__chain_prog *p, void *const *in, int n_in,
                           void **out, int *failed, char *err, size_t errlen) {
    void *cur = NULL;
    (void)n_in;
    for (int i = 0; i < p->n; i++) {
        const dt__chain_step *st = &p->st[i];
        void *args[DT__CHAIN_MAX_IN];
        for (int j = 0; j < st->n_in; j++)
            args[j] = st->src[j] < 0 ? cur : in[st->src[j]];
        dt__kattr a = st->attr;
        if (i > 0 && st->src[0] < 0)
            a.flags |= DT_KF_INPLACE; /* cur is the chain's own */
        void *r = NULL;
        dt_status s = be->run(st->kop, &a, args, st->n_in, &r, err, errlen);
        be->free(cur);
        cur = r;
        if (s != DT_OK) {
            be->free(r);
            *failed = i;
            return s;
        }
    }
    *out = cur;
    return DT_OK;
}

static void poison_step(dt__krec *k, const dt__stream *s, const dt__chain_prog *p, int i, const char *err,
                        dt_status st) {
    char buf[1024];
    const char *dev = s->type == DT_DEVICE_CUDA ? "cuda" : "cpu";
    const char *why = err[0] ? err : dt_status_str(st);
    if (i < 0 || i >= p->n) {
        snprintf(buf, sizeof buf, "%s failed on %s:%lld (created at %s:%d): %s (chain kernel: %s)", k->opname,
                 dev, (long long)s->device_id, k->site_file ? k->site_file : "?", k->site_line, why,
                 dt_status_str(st));
    } else if (p->file_len[i] >= 0) {
        snprintf(buf, sizeof buf, "%.*s failed on %s:%lld (created at %.*s:%d): %s (%s kernel: %s)",
                 p->name_len[i] < 0 ? 0 : p->name_len[i], p->name[i] ? p->name[i] : "", dev,
                 (long long)s->device_id, p->file_len[i], p->file[i], p->line[i], why,
                 kop_names[p->st[i].kop], dt_status_str(st));
    } else {
        snprintf(buf, sizeof buf, "%.*s failed on %s:%lld: %s (%s kernel: %s)",
                 p->name_len[i] < 0 ? 0 : p->name_len[i], p->name[i] ? p->name[i] : "", dev,
                 (long long)s->device_id, why, kop_names[p->st[i].kop], dt_status_str(st));
    }
    k->out->error = dt__strdup(buf);
}

int dt__chain_run(dt__krec *k, const dt__stream *s) {
    void *in[DT__CHAIN_MAX_IN] = {NULL};
    for (int i = 0; i < k->n_in; i++) {
        if (k->in[i]->error) {
            /* Carry the first failure unchanged to everything downstream. */
            k->out->error = dt__strdup(k->in[i]->error);
            return 0;
        }
        in[i] = k->in[i]->impl;
    }
    dt__chain_prog p;
    int ok = k->n_in >= 1 && k->n_in <= DT__CHAIN_MAX_IN && dt__chain_parse(k->attr, k->alen, &p) == 0;
    for (int i = 0; ok && i < p.n; i++)
        for (int j = 0; j < p.st[i].n_in; j++)
            ok = ok && p.st[i].src[j] < k->n_in;
    if (!ok) {
        poison_step(k, s, &p, -1, "malformed chain program", DT_EINVAL);
        return 0;
    }
    /* As run_backend's: the kernel holds the last reference to in[0]. */
    int inplace = (p.flags & DT_KF_REUSE) && atomic_load(&k->in[0]->refs) == 1;
    char err[512] = "";
    int failed = -1;
    int64_t blocks = 0;
    void *out = NULL;
    dt_status st = s->be->run_chain ? s->be->run_chain(p.st, p.n, in, k->n_in, inplace, &out, &failed,
                                                       &blocks, err, sizeof err)
                                    : run_steps(s->be, &p, in, k->n_in, &out, &failed, err, sizeof err);
    if (st != DT_OK) {
        poison_step(k, s, &p, failed, err, st);
        s->be->free(out);
        return 0;
    }
    k->out->impl = out;
    atomic_fetch_add_explicit(&s->g->chain_blocks, (long)blocks, memory_order_relaxed);
    return inplace;
}
