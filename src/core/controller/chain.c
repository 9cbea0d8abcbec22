/*
 * Blocked elementwise chains: lowering a CHAIN node into one DT_K_CHAIN
 * kernel per device, the kernel's program (chain.h) and running it on a
 * worker. Which nodes make a chain is the window's chain pass
 * (passes/chain.c); how a backend walks the blocks is its run_chain entry
 * (torch_chain.cpp, ref_chain.c).
 *
 * Each step is the kernel its node's own lowering would queue
 * (dt__ew_kernel_spec), so the backend runs the same kernels on each block
 * that the unfused nodes run on the whole tensors.
 *
 * Threads: dt__lower_chain on the controller; dt__chain_run on the stream's
 * worker; dt__chain_check on any thread (the decoder). No locks.
 */
#include <stdio.h>
#include <string.h>

#include "core/client/graph.h"
#include "core/client/tensor.h"
#include "core/controller/chain.h"
#include "core/controller/lower.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/kernel.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"
#include "ops/elementwise.h"

static const char *const kop_names[DT_K_COUNT] = {
#define DT_KOP(E, name) [DT_K_##E] = name,
#include "backend/kernels.def"
};

#define STR_NONE 0xffff
#define STR_MAX 4095

/* ------------------------------------------------------------ the program */

static size_t str_len(const char *s) {
    if (!s)
        return 0;
    size_t n = strlen(s);
    return n > STR_MAX ? STR_MAX : n;
}

static void put_str(uint8_t **p, const char *s) {
    if (!s) {
        dt__le_put(p, STR_NONE, 2);
        return;
    }
    size_t n = str_len(s);
    dt__le_put(p, n, 2);
    memcpy(*p, s, n);
    *p += n;
}

/* A parsed program: the steps for the backend and what names each. */
typedef struct chain_prog {
    int n;
    int32_t flags;
    dt__chain_step st[DT__CHAIN_MAX_STEPS];
    const char *name[DT__CHAIN_MAX_STEPS], *file[DT__CHAIN_MAX_STEPS];
    int name_len[DT__CHAIN_MAX_STEPS], file_len[DT__CHAIN_MAX_STEPS]; /* -1: none */
    int32_t line[DT__CHAIN_MAX_STEPS];
} chain_prog;

static const char *get_str(dt__rd *r, int *len) {
    uint64_t n = dt__rd_get(r, 2);
    if (n == STR_NONE || r->bad) {
        *len = -1;
        return NULL;
    }
    if (n > STR_MAX || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        *len = -1;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p += n;
    *len = (int)n;
    return s;
}

/* 0 when well formed; fills *p when it is not NULL. */
static int parse(const uint8_t *buf, size_t n, chain_prog *p) {
    dt__rd r = {buf, buf + n, 0};
    if (dt__rd_get(&r, 1) != 'C')
        return -1;
    int ns = (int)dt__rd_get(&r, 1);
    int32_t flags = (int32_t)dt__rd_get(&r, 4);
    if (r.bad || ns < 1 || ns > DT__CHAIN_MAX_STEPS)
        return -1;
    if (p) {
        p->n = ns;
        p->flags = flags;
    }
    for (int i = 0; i < ns; i++) {
        int kop = (int)dt__rd_get(&r, 2), nin = (int)dt__rd_get(&r, 1);
        if (r.bad || kop >= DT_K_COUNT || kop == DT_K_CHAIN || nin < 1 || nin > DT__CHAIN_MAX_IN)
            return -1;
        int8_t src[DT__CHAIN_MAX_IN];
        for (int j = 0; j < nin; j++) {
            src[j] = (int8_t)dt__rd_get(&r, 1);
            if (src[j] < -1 || src[j] >= DT__CHAIN_MAX_IN || (src[j] < 0 && i == 0))
                return -1;
        }
        int32_t line = (int32_t)dt__rd_get(&r, 4);
        int nl, fl;
        const char *name = get_str(&r, &nl), *file = get_str(&r, &fl);
        size_t alen = (size_t)dt__rd_get(&r, 2);
        if (r.bad || (size_t)(r.end - r.p) < alen)
            return -1;
        dt__kattr scratch, *a = p ? &p->st[i].attr : &scratch;
        if (dt__kattr_unpack_bytes(r.p, alen, a) != 0)
            return -1;
        r.p += alen;
        if (p) {
            p->st[i].kop = kop;
            p->st[i].n_in = nin;
            memcpy(p->st[i].src, src, sizeof src);
            p->line[i] = line;
            p->name[i] = name;
            p->name_len[i] = nl;
            p->file[i] = file;
            p->file_len[i] = fl;
        }
    }
    return r.p == r.end ? 0 : -1;
}

int dt__chain_check(const uint8_t *buf, size_t n) { return parse(buf, n, NULL); }

/* ------------------------------------------------------------ lowering */

/* The chain's input index of value v, or -1. */
static int input_index(const dt__node *n, const dt__tval *v) {
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j] == v)
            return j;
    return -1;
}

/* Writes the program for `steps` (or only sizes it, out NULL); returns its
 * bytes. */
static size_t build(const dt__node *n, dt__node *const *steps, int ns, int32_t flags, uint8_t *out) {
    size_t len = 6;
    uint8_t *p = out;
    if (p) {
        dt__le_put(&p, 'C', 1);
        dt__le_put(&p, (uint64_t)ns, 1);
        dt__le_put(&p, (uint32_t)flags, 4);
    }
    for (int i = 0; i < ns; i++) {
        const dt__node *s = steps[i];
        int kop;
        const char *opname;
        dt__kattr a = {0};
        dt__ew_kernel_spec(s, &kop, &a, &opname);
        if (!opname)
            opname = dt__ops[s->op].name;
        uint8_t attr[DT__KATTR_PACK_MAX];
        size_t alen = dt__kattr_pack(&a, attr);
        len += 2 + 1 + (size_t)s->n_in + 4 + 2 + str_len(opname) + 2 + str_len(s->site_file) + 2 + alen;
        if (!p)
            continue;
        dt__le_put(&p, (uint64_t)kop, 2);
        dt__le_put(&p, (uint64_t)s->n_in, 1);
        for (int j = 0; j < s->n_in; j++) {
            int src = i > 0 && s->in[j] == steps[i - 1]->out ? -1 : input_index(n, s->in[j]);
            /* Invariant: the pass gave the chain node every outside input. */
            DT_ASSERT(src >= -1);
            dt__le_put(&p, (uint8_t)(int8_t)src, 1);
        }
        dt__le_put(&p, (uint32_t)s->site_line, 4);
        put_str(&p, opname);
        put_str(&p, s->site_file);
        dt__le_put(&p, alen, 2);
        memcpy(p, attr, alen);
        p += alen;
    }
    return len;
}

dt_status dt__lower_chain(dt__lower *L, dt__node *n) {
    dt__node *const *steps = n->extra;
    int ns = (int)n->a.ints[0];
    dt__tval *o = n->out;
    const dt_mesh *mesh = o->meta.mesh;
    if (dt__lw_alloc_blobs(L, o) != DT_OK)
        return L->status;
    /* One program for every device, copied into each kernel. */
    size_t len = build(n, steps, ns, L->kflags, NULL);
    uint8_t *prog = dt__malloc(len);
    if (!prog)
        return dt__lw_fail(L, DT_ENOMEM, "out of memory (chain program)");
    build(n, steps, ns, L->kflags, prog);
    int kop;
    const char *opname;
    dt__kattr tail = {0};
    dt__ew_kernel_spec(steps[ns - 1], &kop, &tail, &opname);
    for (int64_t i = 0; i < mesh->ndev && L->status == DT_OK; i++) {
        dt__stream *s = dt__lw_stream(L, mesh, i);
        dt__krec *k = s ? dt__krec_alloc(len) : NULL;
        if (s && !k)
            dt__lw_fail(L, DT_ENOMEM, "out of memory (kernel record)");
        if (!k)
            break;
        k->kop = DT_K_CHAIN;
        k->n_in = (int16_t)n->n_in;
        for (int j = 0; j < n->n_in; j++)
            k->in[j] = n->in[j]->blobs ? dt__blob_retain(n->in[j]->blobs[i]) : NULL;
        k->out = dt__blob_new(s->be);
        k->opname = opname ? opname : dt__ops[steps[ns - 1]->op].name;
        k->site_file = n->site_file;
        k->site_line = n->site_line;
        memcpy(k->attr, prog, len);
        int ok = k->out != NULL;
        for (int j = 0; j < n->n_in; j++)
            ok = ok && k->in[j];
        if (!ok) {
            dt__krec_discard(k);
            dt__lw_fail(L, DT_ENOMEM, "out of memory (blob record)");
            break;
        }
        dt__lw_push_krec(L->g, s, k);
        o->blobs[i] = dt__blob_retain(k->out);
    }
    dt__free(prog);
    return L->status;
}

/* ------------------------------------------------------------ running */

/* The steps one after the other on the whole tensors, for a backend without
 * run_chain. */
static dt_status run_steps(const dt__backend *be, const chain_prog *p, void *const *in, int n_in, void **out,
                           int *failed, char *err, size_t errlen) {
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

static void poison_step(dt__krec *k, const dt__stream *s, const chain_prog *p, int i, const char *err,
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
    chain_prog p;
    int ok = k->n_in >= 1 && k->n_in <= DT__CHAIN_MAX_IN && parse(k->attr, k->alen, &p) == 0;
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
    void *out = NULL;
    dt_status st = s->be->run_chain
                       ? s->be->run_chain(p.st, p.n, in, k->n_in, inplace, &out, &failed, err, sizeof err)
                       : run_steps(s->be, &p, in, k->n_in, &out, &failed, err, sizeof err);
    if (st != DT_OK) {
        poison_step(k, s, &p, failed, err, st);
        s->be->free(out);
        return 0;
    }
    k->out->impl = out;
    return inplace;
}
