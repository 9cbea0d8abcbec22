/*
 * One message per mesh per run (docs/decisions.md, "One message per mesh
 * per run"): the nodes that dt__lw_bcast would lower each into one shared
 * record (core/controller/lower_bcast.c) are appended, while they follow one
 * another on one mesh, to one open run (core/records/step.h). Per node the
 * controller packs the kernel's attributes once and makes the output's
 * group, whose members' events are by (run, number): the group names the
 * run's event bases and the kernel's index (core/records/bgroup.h), so
 * nothing is written per device; it links nothing. The streams' counts
 * advance by the run's kernels when it closes. The run is closed (its one slot per device linked on the
 * device's stream) before anything else is bound or linked on one of its
 * streams (a node lowered otherwise, a read, a sync, a replayed record, a
 * collective under DTORCH_OVERLAP=0: dt__stream.in_run, lower_queue.h), at
 * the round's flush, when another mesh's node is appended, and when it holds
 * DT__STEP_MAX kernels. So the streams' order and every consumer's view of
 * the events are those of one record per kernel. A record on other streams
 * (a collective on the communication streams, a copy to another mesh) leaves
 * it open: it names the run's kernels by their numbers, fixed when they
 * were appended, and its worker waits for them as for any event; the run's
 * slots are linked before the flush hands either over.
 *
 * Taken only with blob groups on (every input is named by its group; a
 * value made per device is adopted into one) and for a fresh output. A
 * node that replay is capturing gets its image as its template
 * (dt__replay_note_image): a later node of the same signature is appended
 * by dt__lw_step_replay, a copy of the image bound to its own inputs'
 * groups, without being lowered.
 *
 * Threads: the controller thread only.
 */
#include <string.h>

#include "core/client/tensor.h"
#include "core/controller/lower_queue.h"
#include "core/controller/lower_step.h"
#include "core/records/graph_int.h"
#include "core/records/mesh.h"
#include "core/records/step.h"
#include "core/worker/stream_int.h"

/* Meshes whose streams the graph keeps for the next run (step_ss). */
#define STEP_SS_CACHED ((int)(sizeof((dt_graph *)0)->step_ss / sizeof(void *)))

/* A new run on `mesh` (n devices), its streams looked up; NULL when one
 * cannot be had here (out of memory, a worker node's device, a failed
 * stream: the caller's path reports it). */
static dt__step *step_open(dt__lower *L, const dt_mesh *mesh, int n) {
    /* An earlier run's allocation when a slot gave it back and it fits. */
    dt__step *st = NULL;
    for (int i = 0; !st && i < DT__STEP_SPARES; i++)
        if (atomic_load_explicit(&L->g->step_spare[i], memory_order_relaxed))
            st = atomic_exchange_explicit(&L->g->step_spare[i], NULL, memory_order_acquire);
    if (st && st->n != n) {
        dt__free(st);
        st = NULL;
    }
    if (!st && (st = dt__malloc(DT__STEP_BYTES(n)))) {
        st->memo = (dt__step_memo *)((uint8_t *)st + DT__STEP_MEMO_AT(n));
        st->memo->len = 0;                                 /* nothing packed yet */
        memset(st->memo->hix, 0xff, sizeof st->memo->hix); /* no entries */
    }
    dt__runev *ev = st ? dt__runev_new(L->g->ctl_pools, n) : NULL;
    if (!ev) {
        dt__free(st);
        return NULL;
    }
    st->n = n;
    st->k = 0;
    st->mesh = mesh;
#ifdef DT_POOL_DIRECT
    st->spare = NULL; /* sanitizer builds: every run freed, so ASan sees a use after it (common/pool.h) */
#else
    st->spare = L->g->step_spare;
#endif
    st->ev = ev;
    st->ss = ev->ss;
    st->be = (const dt__backend **)((uint8_t *)st + DT__STEP_HDR + (size_t)n * DT__BCAST_SLOT);
    st->imgs = (uint8_t *)st + DT__STEP_IMGS(n);
    st->nheld = 0;
    st->held = (dt__step_held *)((uint8_t *)st + DT__STEP_HELD_AT(n));
    dt_graph *g = L->g;
    /* The streams the last run on this mesh looked up, while no cluster
     * change can have replaced one (graph_int.h, step_ss). */
    int cached = n <= STEP_SS_CACHED && g->step_ss_uid == mesh->uid && g->step_ss_gen == g->cluster_gen;
    for (int d = 0; d < n; d++) {
        st->ss[d] = cached ? g->step_ss[d] : dt__lw_stream(L, mesh, d);
        if (!st->ss[d] || st->ss[d]->remote) {
            for (int e = 0; e < d; e++)
                st->ss[e]->in_run = 0;
            atomic_init(&ev->refs, 1);
            dt__runev_unref(ev, L->g->ctl_pools);
            dt__free(st);
            return NULL;
        }
        st->be[d] = st->ss[d]->be;
        /* Nothing else is appended on these streams while the run is open
         * (dt__lw_stream_link and dt__lw_bind close it first): its kernel i
         * is number base + i + 1 on each. */
        ev->base[d] = st->ss[d]->appended;
        st->ss[d]->in_run = 1;
    }
    if (!cached && n <= STEP_SS_CACHED) {
        memcpy(g->step_ss, st->ss, sizeof *st->ss * (size_t)n);
        g->step_ss_uid = mesh->uid;
        g->step_ss_gen = g->cluster_gen;
    }
    st->be_all = dt__backend_all(n, st->be);
    return st;
}

/* The entry of st's holds through which an image reads group gr: one the
 * run has (the group is then not held again: one atomic update per run, not
 * per image, on a line the workers also write), found through the hold
 * table (dt__step_memo), else a new one with a hold. */
static int step_hold(dt__step *st, dt__bgroup *gr) {
    uint8_t *hix = &st->memo->hix[dt__step_hold_slot(gr)];
    int e = *hix;
    if (e < st->nheld && st->held[e].gr == gr) {
        st->held[e].uses++;
        return e;
    }
    if (gr->ev == st->ev) /* made by this run: no other thread has seen it yet */
        atomic_store_explicit(&gr->holds, atomic_load_explicit(&gr->holds, memory_order_relaxed) + 1,
                              memory_order_relaxed);
    else
        dt__bgroup_hold(gr);
    st->held[st->nheld] = (dt__step_held){gr, 1};
    *hix = (uint8_t)st->nheld;
    return st->nheld++;
}

/* Attribute bytes copied as one block of constant size (inline stores)
 * when there are no more: both the memo and an image hold
 * DT__KATTR_PACK_MAX. A struct of bytes, so the copy aliases nothing. */
typedef struct step_short {
    uint8_t b[64];
} step_short;
_Static_assert(sizeof(step_short) <= DT__KATTR_PACK_MAX, "a short copy fits");

/* Packs a into image img's attributes, or copies the bytes packed for the
 * last kernel when its dt__kattr had the same bytes (dt__step_memo). */
static void step_pack(dt__step *st, const dt__kattr *a, dt__krec *img) {
    dt__step_memo *mo = st->memo;
    if (mo->len && !memcmp(a, &mo->a, sizeof *a)) {
        img->alen = mo->len;
        if (mo->len <= sizeof(step_short))
            *(step_short *)img->attr = *(const step_short *)mo->bytes;
        else
            memcpy(img->attr, mo->bytes, mo->len);
        return;
    }
    img->alen = (uint32_t)dt__kattr_pack(a, img->attr);
    memcpy(&mo->a, a, sizeof *a);
    memcpy(mo->bytes, img->attr, img->alen);
    mo->len = img->alen;
}

void dt__lw_step_close(dt_graph *g) {
    dt__step *st = g->step_open;
    if (!st)
        return;
    g->step_open = NULL;
    for (int d = 0; d < st->n; d++)
        st->ss[d]->in_run = 0;
    /* The bases are held by the groups the run made (freed with the last). */
    atomic_init(&st->ev->refs, st->k ? st->k : 1);
    if (!st->k) {
        dt__runev_unref(st->ev, g->ctl_pools);
        dt__free(st);
        return;
    }
    atomic_init(&st->left, st->n);
    const char *opname = dt__step_img_at(st, 0)->bc.img->opname;
    for (int d = 0; d < st->n; d++) {
        /* Its kernels' numbers there: the base's successors (step_open). */
        st->ss[d]->appended += (uint64_t)st->k;
        /* One assignment, the rest zero (no string instruction, slow to
         * start for so few bytes). */
        *dt__step_slot(st, d) = (dt__krec){
            .kop = DT_KC_STEP,
            .handle = st,
            .rank = st->k, /* its kernels, for the backlog's count */
            .opname = opname,
        };
        dt__krec *slot = dt__step_slot(st, d);
        /* Linked, not counted: its kernels were counted as they came. */
        dt__lw_stream_put(g, st->ss[d], slot);
    }
    atomic_fetch_add_explicit(&g->step_runs, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g->bcast_nodes, st->k, memory_order_relaxed); /* its nodes, at once */
}

/* The open run on out's mesh that the node being lowered joins (one
 * opened, another mesh's or a full one closed, as needed); NULL when the
 * node is lowered otherwise: the switch or groups off, an output with
 * blobs already, a mesh too large, no run to be had. */
static inline __attribute__((always_inline)) dt__step *step_for(dt__lower *L, const dt__tval *out) {
    dt_graph *g = L->g;
    if (!L->step_on || out->blobs) /* the switches as the round began (dt__lw_bcast_round) */
        return NULL;
    const dt_mesh *mesh = out->meta.mesh;
    int n = (int)mesh->ndev;
    if (n > DT__BGROUP_MAX)
        return NULL;
    dt__step *st = g->step_open;
    if (st && (st->mesh != mesh || st->k == DT__STEP_MAX)) {
        dt__lw_step_close(g);
        st = NULL;
    }
    if (!st && !(st = step_open(L, mesh, n)))
        return NULL;
    g->step_open = st;
    return st;
}

/* Appends the node's kernel to st, reading member d of gin[j] on device d:
 * the output's group made, the attributes packed into the next image (t
 * NULL: from a), or copied from a replay template's bytes (t). Each caller
 * passes t as a constant NULL or not, so the other branch is not compiled. */
static inline __attribute__((always_inline)) dt__krec *step_image(dt__lower *L, dt__step *st, dt__tval *out,
                                                                  int kop, dt__kattr *a,
                                                                  const dt__step_tpl *t, const char *opname,
                                                                  dt__bgroup *const *gin, int n_in) {
    dt_graph *g = L->g;
    int n = st->n;
    dt__bgroup *gr = dt__bgroup_new_all(g->ctl_pools, n, st->be, st->be_all, DT__BGROUP_REFS);
    if (!gr) {
        dt__lw_fail(L, DT_ENOMEM, "out of memory (a run's kernel)");
        return NULL;
    }
    out->grp = gr;
    out->blobs = dt__bgroup_ptrs(gr);
    /* The node's reuse mark (passes/reuse.c), as dt__lw_push_on puts it
     * (a template's bytes have it). */
    if (!t)
        a->flags |= L->kflags;
    /* Its members' events: this kernel's number on each device's stream,
     * by the run's bases (dt__blob_event), nothing written per device. */
    gr->ev = st->ev;
    gr->kidx = st->k;
    dt__step_img *im = dt__step_img_at(st, st->k++);
    dt__krec *img = (dt__krec *)((uint8_t *)im + DT__STEP_IMG_HDR);
    /* The header's fields one by one (a memset of its size is a string
     * instruction, slow to start for so few bytes); in[] and out stay
     * NULL: a worker puts its own blobs there (core/worker/kernel_run.c). */
    img->next = NULL;
    img->wait = 0;
    img->rank = 0;
    for (int j = 0; j < DT_MAX_OP_INPUTS; j++)
        img->in[j] = NULL;
    img->out = NULL;
    img->handle = NULL;
    img->cls = 0;
    if (!t) {
        step_pack(st, a, img);
    } else {
        img->alen = t->alen;
        if (t->alen <= sizeof(step_short))
            *(step_short *)img->attr = *(const step_short *)t->attr;
        else
            memcpy(img->attr, t->attr, t->alen);
    }
    img->kop = kop;
    img->n_in = (int16_t)n_in;
    img->opname = opname ? opname : dt__ops[L->node->op].name;
    img->site_file = L->node->site_file;
    img->site_line = L->node->site_line;
    im->bc.img = img;
    im->gout = gr;
    for (int j = 0; j < n_in; j++) {
        im->bc.gin[j] = gin[j];
        im->hold[j] = (uint8_t)step_hold(st, gin[j]);
    }
    g->kqueued_local += n;
    if (st->k == DT__STEP_MAX) {
        dt__lw_step_close(g);
        return img;
    }
    /* The next image's lines (its header, its kernel's, the start of its
     * attributes), asked for now: the allocation was last read by the
     * workers (a reused run) or never touched (a new one). */
    const uint8_t *next = (const uint8_t *)dt__step_img_at(st, st->k);
#pragma GCC unroll 8
    for (size_t o = 0; o < DT__STEP_IMG_HDR + offsetof(dt__krec, attr) + DT_CACHE_LINE; o += DT_CACHE_LINE)
        __builtin_prefetch(next + o, 1, 3);
    return img;
}

/* The node's kernel appended to its mesh's open run, its attributes a
 * packed, each input named by its group (a value made per device is
 * adopted: groups are on, step_for). 1 when appended (L->status set on a
 * failure), 0 when the caller lowers the node otherwise (nothing made). */
int dt__lw_step_add(dt__lower *L, dt__tval *out, int kop, dt__kattr *a, const char *opname,
                    dt__tval *const *in, int n_in) {
    dt_graph *g = L->g;
    dt__step *st = step_for(L, out);
    if (!st)
        return 0;
    dt__bgroup *gin[DT_MAX_OP_INPUTS];
    for (int j = 0; j < n_in; j++)
        if (!(gin[j] = in[j]->grp) && !(gin[j] = dt__lw_group_of(g, in[j], st->n)))
            return 0; /* out of memory: the other path */
    const dt__krec *img = step_image(L, st, out, kop, a, NULL, opname, gin, n_in);
    if (img && g->replay_cap) /* capturing this node: the image is its template */
        dt__replay_note_image(g->replay_cap, L->node, out, img, in);
    return 1;
}

int dt__lw_step_replay(dt__lower *L, const dt__node *n, const dt__step_tpl *t) {
    dt__tval *out = n->out;
    if (!dt__lw_bcast_out(L, out))
        return 0;
    dt__step *st = step_for(L, out);
    if (!st)
        return 0;
    /* dt__lw_step_add's work, each input's group found as it is checked
     * (one pass; no template is noted: this is a hit). */
    dt__bgroup *gin[DT_MAX_OP_INPUTS];
    for (int j = 0; j < t->n_in; j++) {
        dt__tval *v = n->in[t->from[j]];
        if (!(gin[j] = v->grp) && (!dt__lw_blobs_there(v) || !(gin[j] = dt__lw_group_of(L->g, v, st->n))))
            return 0; /* an earlier failure (the lowering reports it), or out of memory */
    }
    step_image(L, st, out, t->kop, NULL, t, t->opname, gin, t->n_in);
    return 1;
}

int dt__lw_step_add_blob(dt__lower *L, dt__tval *out, int kop, dt__kattr *a, const char *opname,
                         dt__blob *src) {
    dt__step *st = step_for(L, out);
    if (!st)
        return 0;
    int n = st->n;
    dt__blob *each[DT__BGROUP_MAX];
    for (int d = 0; d < n; d++)
        each[d] = src;
    /* No other thread has seen src: its caller's reference and one for
     * each other device, all the group's. */
    atomic_store_explicit(&src->refs, n, memory_order_relaxed);
    dt__bgroup *gr = dt__bgroup_adopt(L->g->ctl_pools, n, each);
    if (!gr) {
        atomic_store_explicit(&src->refs, 1, memory_order_relaxed);
        return 0; /* out of memory: the caller's per-device path */
    }
    if (L->g->replay_cap) /* capturing this node: src is no input's, so no template */
        dt__replay_uncapturable(L->g->replay_cap);
    step_image(L, st, out, kop, a, NULL, opname, &gr, 1);
    /* The run holds the group now (or, out of memory, nothing does): the
     * caller's hold goes, with the last the blob. */
    dt__bgroup_release(gr);
    return 1;
}
