/*
 * CUDA graphs of repeated run slots (docs/decisions.md, "CUDA graphs of
 * repeated run slots"; opt-in, graph_run.h). A run slot (DT_KC_STEP,
 * core/records/step.h) is K kernels on one stream. Its *key* is what the
 * captured kernels depend on: each image's kop and packed attribute bytes,
 * and each input's source (an earlier image of the slot, or outside) with,
 * for an outside one, its dtype, shape and strides. Per stream the worker
 * remembers a few keys (least recently used out):
 *
 * - first sighting: runs eagerly, notes the outside inputs' addresses;
 * - later: launches a captured *instance* whose static tensors nothing
 *   outside holds, else captures one more (at most GR_INST: with two, a
 *   loop that feeds each step's output to the next, still held while that
 *   step runs, alternates between them), else runs eagerly.
 *
 * An instance: outside inputs whose address was the same at the previous
 * sighting (weights) are captured by address (a share of the impl keeps
 * it); the others get a static copy, refilled before each launch. The
 * kernels' results during capture are the static outputs, overwritten by
 * each launch; the core hands out shares of them (graph_share) and launches
 * again only while every static tensor's storage count is what it was
 * before anything was handed out (graph_held <= base): nothing outside
 * still sees the previous launch's values.
 *
 * Never captured (the slot runs eagerly): a kernel that is not a backend
 * kernel, a random factory (host generator), a chain; an input that failed
 * or lies on the host. A captured slot's kernels run out of place (never
 * DT_KF_INPLACE: docs/decisions.md says why). A failure to capture or launch refuses the key for good (its
 * slots run eagerly, the failing kernel's error surfacing there); no
 * failure here is an abort.
 *
 * Threads: the stream's worker only, but dt__graphs_free.
 */
#include <string.h>

#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/worker/graph_run.h"
#include "core/worker/stream_int.h"

#define GR_KEYS 64 /* keys remembered per stream */
#define GR_INST 2  /* instances captured per key */
/* Captures per key at most: GR_RECAP, and one more every GR_RECAP_EVERY
 * sightings (instances whose outputs stay held, or whose weights moved, are
 * replaced, but a key that never launches costs a capture only so often). */
#define GR_RECAP 8
#define GR_RECAP_EVERY 4
#define GR_EXT (DT__STEP_MAX * DT_MAX_OP_INPUTS)
#define GR_SEEN 4096 /* kernels' fingerprints remembered per stream */

typedef struct gr_inst {
    void *graph;
    void *ext[GR_EXT];       /* a static copy, or (fixed) a share of the captured input */
    uintptr_t addr[GR_EXT];  /* the static copy's address, or the captured one */
    uint8_t fixed[GR_EXT];   /* captured by address */
    void *out[DT__STEP_MAX]; /* the kernels' results: the static outputs */
    int64_t base[GR_EXT + DT__STEP_MAX];
} gr_inst;

typedef struct gr_key {
    uint64_t hash, used;
    uint8_t *bytes;
    size_t len;
    int k, n_ext, ninst, captures, refused; /* k: images */
    long sightings;
    uintptr_t last[GR_EXT]; /* outside inputs' addresses at the last sighting */
    uint8_t moved[GR_EXT];  /* seen at another address than the sighting before */
    gr_inst *inst[GR_INST];
} gr_key;

typedef struct dt__graphs {
    gr_key keys[GR_KEYS];
    uint64_t tick;
    int off;  /* the backend captures nothing */
    int a, k; /* the segment of the slot at hand: its first image, its images */
    int nseen;
    uint64_t seen[GR_SEEN]; /* fingerprints of the kernels seen (build_key), 0: free */
    uint8_t *buf;           /* the key being built */
    size_t cap, len;
    /* This sighting's outside inputs: their blobs and layouts. */
    int n_ext;
    dt__blob *ext[GR_EXT];
    uintptr_t addr[GR_EXT];
} dt__graphs;

/* ------------------------------------------------------------- the key */

static int put(dt__graphs *gs, const void *p, size_t n) {
    if (gs->len + n > gs->cap) {
        size_t cap = gs->cap ? gs->cap * 2 : 4096;
        while (cap < gs->len + n)
            cap *= 2;
        uint8_t *b = dt__realloc(gs->buf, cap);
        if (!b)
            return -1;
        gs->buf = b;
        gs->cap = cap;
    }
    memcpy(gs->buf + gs->len, p, n);
    gs->len += n;
    return 0;
}

/* The image whose output group gr is among images [a, i), or -1. */
static int producer_of(const dt__step *st, int a, int i, const dt__bgroup *gr) {
    for (int p = i - 1; p >= a; p--)
        if (dt__step_img_at(st, p)->gout == gr)
            return p;
    return -1;
}

/* Whether image i is capturable (a backend kernel that reads no host
 * generator) and, unless it starts the segment (i == a), reads nothing that
 * another stream makes (a segment's waits are all before its first kernel:
 * what another stream makes for a later image may depend on this
 * segment's earlier ones, a collective reading them). */
static int joins(const dt__step *st, int a, int i, int d, const dt__stream *s) {
    const dt__step_img *im = dt__step_img_at(st, i);
    const dt__krec *img = im->bc.img;
    if (img->kop >= DT_K_COUNT || img->kop == DT_K_RAND || img->kop == DT_K_RANDN || img->kop == DT_K_CHAIN)
        return 0;
    for (int j = 0; i > a && j < img->n_in; j++) {
        uint64_t seq;
        const dt__stream *p = dt__blob_event(dt__bgroup_ptrs(im->bc.gin[j])[d], &seq);
        if (p && p != s && producer_of(st, a, i, im->bc.gin[j]) < 0)
            return 0;
    }
    return 1;
}

static uint64_t hash_on(uint64_t h, const void *bytes, size_t n) {
    const uint8_t *p = bytes;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static uint64_t hash_of(const uint8_t *p, size_t n) { return hash_on(1469598103934665603ull, p, n); }

/* Whether a kernel of fingerprint h was seen on this stream before. */
static int seen(const dt__graphs *gs, uint64_t h) {
    h |= 1; /* 0 marks a free entry */
    for (size_t e = h % GR_SEEN;; e = (e + 1) % GR_SEEN) {
        if (gs->seen[e] == h)
            return 1;
        if (!gs->seen[e])
            return 0;
    }
}

static void note(dt__graphs *gs, uint64_t h) {
    h |= 1;
    if (gs->nseen >= GR_SEEN / 4 * 3) { /* full: forget them all */
        memset(gs->seen, 0, sizeof gs->seen);
        gs->nseen = 0;
    }
    size_t e = h % GR_SEEN;
    while (gs->seen[e] && gs->seen[e] != h)
        e = (e + 1) % GR_SEEN;
    if (!gs->seen[e]) {
        gs->seen[e] = h;
        gs->nseen++;
    }
}

/* Appends image i's part of the key of the segment that starts at image a
 * (its kop, attribute bytes, each input's source and an outside one's
 * layout) and its outside inputs to gs->ext, waiting for those; 0, or -1
 * when it cannot be captured now. *fp: the same seen from the slot's start,
 * so that it does not depend on a. */
static int put_image(dt__graphs *gs, dt__step *st, int a, int i, int d, dt__stream *s, uint64_t *fp) {
    const dt__backend *be = s->be;
    const dt__step_img *im = dt__step_img_at(st, i);
    const dt__krec *img = im->bc.img;
    int32_t head[3] = {img->kop, (int32_t)img->alen, img->n_in};
    if (put(gs, head, sizeof head) || put(gs, img->attr, img->alen))
        return -1;
    *fp = hash_of(gs->buf + gs->len - sizeof head - img->alen, sizeof head + img->alen);
    for (int j = 0; j < img->n_in; j++) {
        int p = producer_of(st, a, i, im->bc.gin[j]), p0 = producer_of(st, 0, i, im->bc.gin[j]);
        int back = p < 0 ? -1 : i - p;
        if (put(gs, &back, sizeof back))
            return -1;
        if (p0 >= 0) {
            int back0 = i - p0;
            *fp = hash_on(*fp, &back0, sizeof back0);
        }
        if (p >= 0)
            continue;
        dt__blob *b = dt__bgroup_ptrs(im->bc.gin[j])[d];
        dt__event_wait(s, b);
        dt__layout l;
        memset(&l, 0, sizeof l);
        if (b->error || !b->impl || b->be != be || be->layout(b->impl, &l) != 0 || l.host)
            return -1;
        gs->ext[gs->n_ext] = b;
        gs->addr[gs->n_ext++] = l.addr;
        l.addr = 0;
        l.offset = 0; /* a static copy starts its storage */
        if (put(gs, &l, sizeof l))
            return -1;
        if (p0 < 0)
            *fp = hash_on(*fp, &l, sizeof l);
    }
    return 0;
}

/* Builds the key of the segment of slot d that starts at image gs->a into
 * gs->buf (gs->k its images) and its outside inputs into gs->ext, waiting
 * for those; 0, or -1 when it cannot be captured now (gs->k then says how
 * many images run eagerly). The segment ends before the first image that
 * does not join it, or whose own part of the key (its fingerprint) this
 * stream has not seen before: a kernel whose attributes or inputs change
 * every step (a position, a growing cache read) runs alone, eagerly, and
 * the kernels around it make segments that repeat. */
static int build_key(dt__graphs *gs, dt__step *st, int d, dt__stream *s) {
    int a = gs->a, i = a, n = 0;
    uint64_t fp[DT__STEP_MAX];
    gs->len = 0;
    gs->n_ext = 0;
    for (; i < st->k && joins(st, a, i, d, s); i++) {
        size_t at = gs->len;
        int ext_at = gs->n_ext;
        uint64_t h;
        if (put_image(gs, st, a, i, d, s, &h) != 0)
            return -1;
        int known = seen(gs, h);
        if (!known && i > a) {
            gs->len = at;
            gs->n_ext = ext_at;
            break;
        }
        fp[n++] = h;
        if (!known) { /* a kernel new here runs alone */
            i++;
            break;
        }
    }
    for (int j = 0; j < n; j++)
        note(gs, fp[j]);
    gs->k = i > a ? i - a : 1;
    /* One kernel is no graph worth launching. */
    return gs->k >= 2 ? 0 : -1;
}

/* ------------------------------------------------------------ instances */

static void inst_free(const dt__backend *be, gr_inst *in, int n_ext, int n_out) {
    if (!in)
        return;
    for (int i = 0; i < n_out; i++)
        be->free(in->out[i]);
    if (in->graph)
        be->graph_free(in->graph);
    for (int e = 0; e < n_ext; e++)
        be->free(in->ext[e]);
    dt__free(in);
}

static void key_clear(const dt__backend *be, gr_key *key) {
    int n_out = key->k;
    for (int i = 0; i < key->ninst; i++)
        inst_free(be, key->inst[i], key->n_ext, n_out);
    dt__free(key->bytes);
    memset(key, 0, sizeof *key);
}

/* Whether nothing outside the instance holds its static tensors' storage
 * (the previous launch's values), and its weights are where they were. */
static int inst_usable(const dt__backend *be, const gr_inst *in, const dt__graphs *gs, int k) {
    for (int e = 0; e < gs->n_ext; e++) {
        if (in->fixed[e] ? gs->addr[e] != in->addr[e] : be->graph_held(in->ext[e]) > in->base[e])
            return 0;
    }
    for (int i = 0; i < k; i++)
        if (be->graph_held(in->out[i]) > in->base[GR_EXT + i])
            return 0;
    return 1;
}

/* Captures a new instance of `key` from st's slot (its inputs waited for):
 * the instance, its outputs computed, or NULL (the key is then refused,
 * or the backend captures nothing: gs->off). */
static gr_inst *capture(dt__graphs *gs, gr_key *key, dt__step *st, dt__stream *s) {
    const dt__backend *be = s->be;
    gr_inst *in = dt__calloc(1, sizeof *in);
    if (!in)
        return NULL;
    char err[512] = "";
    int n_ext = 0, n_out = 0, ok = 1;
    for (; n_ext < gs->n_ext && ok; n_ext++) {
        void *impl = gs->ext[n_ext]->impl;
        in->fixed[n_ext] = gs->addr[n_ext] != 0 && gs->addr[n_ext] == key->last[n_ext] && !key->moved[n_ext];
        if (in->fixed[n_ext]) {
            in->ext[n_ext] = be->graph_share(impl);
            in->addr[n_ext] = gs->addr[n_ext];
            ok = in->ext[n_ext] != NULL;
        } else {
            dt__layout l;
            ok = be->graph_static(impl, &in->ext[n_ext], err, sizeof err) == DT_OK &&
                 be->layout(in->ext[n_ext], &l) == 0;
            in->addr[n_ext] = ok ? l.addr : 0;
        }
    }
    dt_status bs = ok ? be->graph_begin(s->ctx, &in->graph, err, sizeof err) : DT_EBACKEND;
    if (bs == DT_EUNSUPPORTED)
        gs->off = 1;
    ok = bs == DT_OK;
    for (int i = 0, e = 0; ok && i < gs->k; i++, n_out++) {
        const dt__step_img *im = dt__step_img_at(st, gs->a + i);
        const dt__krec *img = im->bc.img;
        void *ins[DT_MAX_OP_INPUTS] = {NULL};
        for (int j = 0; j < img->n_in; j++) {
            int p = producer_of(st, gs->a, gs->a + i, im->bc.gin[j]);
            ins[j] = p >= 0 ? in->out[p - gs->a] : in->ext[e++];
        }
        dt__kattr_unpack_over(img, &s->kattr, s->kattr_lens);
        /* Out of place, always: a later image's kernel never writes into an
         * earlier one's static output, which is handed out. */
        s->kattr.flags &= ~DT_KF_INPLACE;
        ok = be->run(img->kop, &s->kattr, ins, img->n_in, &in->out[i], err, sizeof err) == DT_OK;
    }
    if (in->graph) {
        ok = be->graph_end(in->graph, err, sizeof err) == DT_OK && ok;
        ok = ok && be->graph_launch(in->graph, err, sizeof err) == DT_OK;
    }
    if (!ok) {
        inst_free(be, in, n_ext, n_out);
        key->refused = 1;
        return NULL;
    }
    for (int e = 0; e < n_ext; e++)
        in->base[e] = in->fixed[e] ? 0 : be->graph_held(in->ext[e]);
    for (int i = 0; i < gs->k; i++)
        in->base[GR_EXT + i] = be->graph_held(in->out[i]);
    key->captures++;
    atomic_fetch_add_explicit(&s->g->graph_captured, 1, memory_order_relaxed);
    return in;
}

/* Launches `in` on this sighting's inputs: 0, or -1 (the key is refused). */
static int launch(dt__graphs *gs, gr_inst *in, const dt__backend *be) {
    char err[512] = "";
    for (int e = 0; e < gs->n_ext; e++)
        if (!in->fixed[e] && gs->addr[e] != in->addr[e] &&
            be->graph_copy(in->ext[e], gs->ext[e]->impl, err, sizeof err) != DT_OK)
            return -1;
    return be->graph_launch(in->graph, err, sizeof err) == DT_OK ? 0 : -1;
}

/* The key's entry (made on a miss, the least recently used one replaced),
 * or NULL when out of memory. *fresh: made now. */
static gr_key *key_find(dt__graphs *gs, const dt__backend *be, int *fresh) {
    uint64_t h = hash_of(gs->buf, gs->len);
    gr_key *old = &gs->keys[0];
    *fresh = 0;
    for (int i = 0; i < GR_KEYS; i++) {
        gr_key *key = &gs->keys[i];
        if (key->bytes && key->hash == h && key->len == gs->len && memcmp(key->bytes, gs->buf, gs->len) == 0)
            return key;
        if (!key->bytes || (old->bytes && key->used < old->used))
            old = key;
    }
    if (old->bytes)
        key_clear(be, old);
    old->bytes = dt__malloc(gs->len);
    if (!old->bytes)
        return NULL;
    memcpy(old->bytes, gs->buf, gs->len);
    old->len = gs->len;
    old->hash = h;
    old->n_ext = gs->n_ext;
    old->k = gs->k;
    *fresh = 1;
    return old;
}

static int slot(dt__graphs *gs, dt__step *st, int d, dt__stream *s, void **given) {
    const dt__backend *be = s->be;
    if (build_key(gs, st, d, s) != 0)
        return 0;
    int fresh;
    gr_key *key = key_find(gs, be, &fresh);
    if (!key)
        return 0;
    key->used = ++gs->tick;
    key->sightings++;
    gr_inst *use = NULL;
    if (!fresh && !key->refused) {
        for (int i = 0; i < key->ninst && !use; i++)
            if (inst_usable(be, key->inst[i], gs, gs->k))
                use = key->inst[i];
        if (use && launch(gs, use, be) != 0) {
            key->refused = 1;
            use = NULL;
        } else if (use) {
            atomic_fetch_add_explicit(&s->g->graph_launched, 1, memory_order_relaxed);
        } else if (key->captures < GR_RECAP + key->sightings / GR_RECAP_EVERY) {
            if (key->ninst == GR_INST) { /* both busy or moved: the older one goes */
                inst_free(be, key->inst[0], key->n_ext, gs->k);
                key->inst[0] = key->inst[1];
                key->ninst = 1;
            }
            use = capture(gs, key, st, s);
            if (use)
                key->inst[key->ninst++] = use;
        }
    }
    for (int e = 0; e < gs->n_ext; e++) /* an input that moved is never a weight */
        key->moved[e] |= !fresh && key->last[e] != gs->addr[e];
    memcpy(key->last, gs->addr, (size_t)gs->n_ext * sizeof gs->addr[0]);
    if (!use)
        return 0;
    for (int i = 0; i < gs->k; i++)
        given[i] = use->out[i];
    return 1;
}

int dt__graph_slot(dt__step *st, int d, dt__stream *s, int a, int *b, void **given) {
    const dt__backend *be = s->be;
    *b = st->k;
    if (!atomic_load_explicit(&s->g->cuda_graph, memory_order_relaxed) || !be->graph_begin)
        return 0;
    dt__graphs *gs = s->graphs;
    if (!gs) {
        gs = s->graphs = dt__calloc(1, sizeof *gs);
        if (!gs)
            return 0;
    }
    if (gs->off)
        return 0;
    gs->a = a;
    gs->k = st->k - a;
    int r = slot(gs, st, d, s, given);
    *b = a + gs->k;
    if (!r)
        atomic_fetch_add_explicit(&s->g->graph_eager, 1, memory_order_relaxed);
    return r;
}

void dt__graphs_free(dt__stream *s) {
    dt__graphs *gs = s->graphs;
    if (!gs)
        return;
    for (int i = 0; i < GR_KEYS; i++)
        if (gs->keys[i].bytes)
            key_clear(s->be, &gs->keys[i]);
    dt__free(gs->buf);
    dt__free(gs);
    s->graphs = NULL;
}
