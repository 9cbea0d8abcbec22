/*
 * Capture and replay (replay.h says what a template is and when one is
 * used; docs/decisions.md "Replay" says why per node).
 *
 * A node's signature is a string of 64-bit words: op, input count, whether
 * the window's passes ran, the overlap setting, the attributes (the family
 * block only for ops that read it), the output's meta (dtype, shape, mesh uid, placements,
 * segments), each input's meta class (one word: the interned meta words;
 * docs/decisions.md "Replay, third step"), and which input blobs are one
 * blob. The cache maps
 * signatures to templates, open addressing on the signature's hash with the
 * signature compared word for word, so a hash collision is a miss, never a
 * wrong hit.
 *
 * A template's blob references: k >= 0 is the output of its record k (a blob
 * the lowering made); ref_in(j, d) is blob d of input j.
 *
 * Threads: controller only; no locks. The values' mcls fields it writes are
 * controller-only (a node's values belong to its graph).
 */
#include "core/controller/replay_int.h"

/* ------------------------------------------------------------- cache */

static void tpl_free(tpl *t) {
    if (!t)
        return;
    dt__free(t->sig);
    dt__free(t->recs);
    dt__free(t->groups);
    dt__free(t->outs);
    dt__free(t->imgs);
    dt__free(t->img);
    dt__free(t->coll);
    dt__free(t);
}

dt__replay *dt__replay_new(void) {
    dt__replay *r = dt__calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->cap = 256;
    r->tab = dt__calloc(r->cap, sizeof *r->tab);
    r->capcap = 64;
    r->caps = dt__calloc((size_t)r->capcap, sizeof *r->caps);
    dt__replay_classes_reset(r);
    if (!r->tab || !r->caps) {
        dt__replay_free(r);
        return NULL;
    }
    return r;
}

/* Templates and classes go together: a template's signature names its
 * inputs' classes. */
static void clear(dt__replay *r) {
    for (uint32_t i = 0; i < r->cap; i++) {
        tpl_free(r->tab[i]);
        r->tab[i] = NULL;
    }
    r->n = 0;
    r->prev = NULL;
    dt__replay_classes_reset(r);
}

void dt__replay_publish(dt__replay *r, dt_graph *g) {
    if (r->hits)
        atomic_fetch_add_explicit(&g->replay_hits, r->hits, memory_order_relaxed);
    if (r->run_hits)
        atomic_fetch_add_explicit(&g->replay_run_hits, r->run_hits, memory_order_relaxed);
    if (r->misses)
        atomic_fetch_add_explicit(&g->replay_misses, r->misses, memory_order_relaxed);
    r->hits = r->run_hits = r->misses = 0;
}

void dt__replay_clear(dt__replay *r) {
    if (r->n || r->ncls)
        clear(r);
}

void dt__replay_free(dt__replay *r) {
    if (!r)
        return;
    if (r->tab)
        clear(r);
    dt__free(r->tab);
    dt__free(r->cls);
    dt__free(r->cls_words);
    dt__free(r->sig);
    dt__free(r->caps);
    dt__free(r->ks);
    dt__free(r->fresh);
    dt__free(r->seqs);
    dt__free(r);
}

static tpl *lookup(const dt__replay *r) {
    uint32_t mask = r->cap - 1;
    for (uint32_t i = (uint32_t)r->hash & mask;; i = (i + 1) & mask) {
        tpl *t = r->tab[i];
        if (!t)
            return NULL;
        if (t->hash == r->hash && t->nsig == r->nsig && !memcmp(t->sig, r->sig, r->nsig * sizeof *r->sig))
            return t;
    }
}

static void put_tab(tpl **tab, uint32_t cap, tpl *t) {
    uint32_t mask = cap - 1;
    uint32_t i = (uint32_t)t->hash & mask;
    while (tab[i])
        i = (i + 1) & mask;
    tab[i] = t;
}

/* Takes t (freed when it cannot be stored: returns 0). */
static int insert(dt__replay *r, tpl *t) {
    if (r->n + 1 > r->cap / 2) {
        if (r->cap * 2 > 2 * MAX_TEMPLATES) {
            /* t names classes the clear makes stale: it could never match. */
            clear(r);
            tpl_free(t);
            return 0;
        } else {
            tpl **tab = dt__calloc((size_t)r->cap * 2, sizeof *tab);
            if (!tab) {
                tpl_free(t);
                return 0;
            }
            for (uint32_t i = 0; i < r->cap; i++)
                if (r->tab[i])
                    put_tab(tab, r->cap * 2, r->tab[i]);
            dt__free(r->tab);
            r->tab = tab;
            r->cap *= 2;
        }
    }
    put_tab(r->tab, r->cap, t);
    r->n++;
    return 1;
}

/* ------------------------------------------------------------ replay */

static int reserve_scratch(dt__replay *r, int nrec, int ncoll) {
    int need = nrec > ncoll ? nrec : ncoll;
    if (need <= r->scap)
        return 1;
    int cap = r->scap ? r->scap : 64;
    while (cap < need)
        cap *= 2;
    dt__krec **ks = dt__realloc(r->ks, (size_t)cap * sizeof *ks);
    if (ks)
        r->ks = ks;
    dt__blob **fresh = ks ? dt__realloc(r->fresh, (size_t)cap * sizeof *fresh) : NULL;
    if (fresh)
        r->fresh = fresh;
    uint64_t *seqs = fresh ? dt__realloc(r->seqs, (size_t)cap * sizeof *seqs) : NULL;
    if (!seqs)
        return 0;
    r->seqs = seqs;
    r->scap = cap;
    return 1;
}

static dt__blob *resolve(const dt__replay *r, const dt__node *n, int32_t ref) {
    return ref >= 0 ? r->fresh[ref] : n->in[ref_j(ref)]->blobs[ref_d(ref)];
}

/* Record q as t's record tr, with node n's call site (not its blobs):
 * one copy of the record's image. */
static inline void fill(dt__krec *q, const tpl *t, const tpl_rec *tr, const dt__node *n) {
    /* The smallest class (most records) as one constant-size copy, inline:
     * the record holds IMG_SMALL bytes and the images have that much slack. */
    if (tr->cls == 0)
        memcpy(q, t->imgs + tr->ioff, IMG_SMALL);
    else
        memcpy(q, t->imgs + tr->ioff, tr->ilen);
    q->site_file = n->site_file;
    q->site_line = n->site_line;
}

/* apply for a template with t->one: the record and its blob, then the
 * record filled and queued, without the scratch arrays. */
static dt_status apply_one(dt__lower *L, const dt__node *n, const tpl *t) {
    const tpl_rec *tr = &t->recs[0];
    dt__pool_lists *mine = L->g->ctl_pools;
    /* A raw record is filled before anything can fail: its class (from
     * the image) is what dt__krec_free reads. */
    dt__krec *q = dt__krec_alloc_raw(mine, tr->cls, tr->alen);
    if (q)
        fill(q, t, tr, n);
    dt__blob *b = q ? dt__blob_new_in(mine, tr->s->be) : NULL;
    if (!b) {
        dt__krec_free(q);
        return dt__lw_fail(L, DT_ENOMEM, "out of memory (replay)");
    }
    for (int i = 0; i < tr->n_in; i++)
        q->in[i] = dt__blob_retain(n->in[ref_j(tr->in[i])]->blobs[ref_d(tr->in[i])]);
    q->out = b; /* the blob's creation reference */
    dt__lw_bind(L->g, tr->s, q);
    dt__lw_stream_link(L->g, tr->s, q); /* the image's link is NULL */
    dt__tval *o = n->out;
    if (!o->blobs) {
        o->blobs = o->inl;
    } else if (o->blobs[0]) {
        dt__blob_release(o->blobs[0]);
    }
    o->blobs[0] = dt__blob_retain(b);
    return DT_OK;
}

/* Queues t's records for n. DT_ENOMEM (L->status set, nothing queued) when
 * out of memory. */
static dt_status apply(dt__replay *r, dt__lower *L, const dt__node *n, const tpl *t) {
    if (t->one)
        return apply_one(L, n, t);
    dt__tval *o = n->out;
    if (!o->blobs && t->nout <= DT__TVAL_INLINE) {
        /* A small mesh's blob array lives in the value: no allocation. */
        memset(o->inl, 0, sizeof o->inl);
        o->blobs = o->inl;
    }
    if (!reserve_scratch(r, t->nrec, t->ncoll) || (!o->blobs && dt__lw_alloc_blobs(L, o) != DT_OK))
        return dt__lw_fail(L, DT_ENOMEM, "out of memory (replay)");
    /* Every record and fresh blob first, each record filled from its image
     * as it is made: out of memory, what was made is freed and nothing is
     * queued. */
    dt__pool_lists *mine = L->g->ctl_pools;
    int k = 0;
    for (; k < t->nrec; k++) {
        const tpl_rec *tr = &t->recs[k];
        dt__krec *q = dt__krec_alloc_raw(mine, tr->cls, tr->alen);
        if (q)
            fill(q, t, tr, n); /* its class first: dt__krec_free reads it */
        dt__blob *b = q && tr->out == k ? dt__blob_new_in(mine, tr->s->be) : NULL;
        if (!q || (tr->out == k && !b)) {
            dt__krec_free(q);
            break;
        }
        r->ks[k] = q;
        r->fresh[k] = b;
    }
    if (k < t->nrec) {
        for (int i = 0; i < k; i++) {
            dt__krec_free(r->ks[i]);
            dt__blob_release(r->fresh[i]);
        }
        return dt__lw_fail(L, DT_ENOMEM, "out of memory (replay)");
    }
    /* Nothing fails from here on. Each collective takes its group's next
     * number, in the order lowering took them, on every rank alike. */
    for (int c = 0; c < t->ncoll; c++) {
        r->seqs[c] = dt__graph_group_next_seq(L->g, t->groups[c]);
        atomic_fetch_add_explicit(&dt__collectives_lowered, 1, memory_order_relaxed);
    }
    for (k = 0; k < t->nrec; k++) {
        const tpl_rec *tr = &t->recs[k];
        dt__krec *q = r->ks[k];
        if (tr->coll >= 0) {
            uint8_t *p = q->attr + 8; /* dt__coll_krec: group, then seq (little-endian) */
            dt__le_put(&p, r->seqs[tr->coll], 8);
        }
        for (int i = 0; i < tr->n_in; i++)
            q->in[i] = dt__blob_retain(resolve(r, n, tr->in[i]));
        /* A fresh blob's creation reference moves into its producer. */
        q->out = tr->out == k ? r->fresh[k] : dt__blob_retain(resolve(r, n, tr->out));
        dt__lw_bind(L->g, tr->s, q);
        dt__lw_stream_link(L->g, tr->s, q); /* the image's link is NULL */
    }
    for (int64_t d = 0; d < t->nout; d++) {
        dt__blob *b = t->outs[d] == REF_NONE ? NULL : dt__blob_retain(resolve(r, n, t->outs[d]));
        dt__blob *old = o->blobs[d];
        o->blobs[d] = b;
        if (old)
            dt__blob_release(old);
    }
    return DT_OK;
}

/* n lowered with template t (a hit, or a sighting of an unreplayable
 * signature): the run goes on with t. */
static inline void follow(dt__replay *r, tpl *t) {
    tpl *p = r->prev;
    r->prev = t;
    if (!p || p->next[0] == t)
        return;
    /* t goes first; the others move down, the oldest (or t's old place) is
     * dropped. */
    int i = 1;
    while (i < NEXT_WAYS - 1 && p->next[i] != t)
        i++;
    for (; i > 0; i--)
        p->next[i] = p->next[i - 1];
    p->next[0] = t;
}

/* The run's prediction: the previous node's successor whose signature is
 * n's, checked as n's words are made (the op word first, which tells most
 * apart, and no copy); NULL when none is. */
static tpl *predict(dt__replay *r, const dt__lower *L, const dt__node *n, int passes) {
    uint64_t w0 = (uint64_t)(uint32_t)n->op | (uint64_t)(uint32_t)n->n_in << 32;
    for (int i = 0; i < NEXT_WAYS && r->prev->next[i]; i++) {
        tpl *t = r->prev->next[i];
        if (t->sig[0] == w0 && dt__replay_sig_same(r, L, n, passes, t))
            return t;
    }
    return NULL;
}

int dt__replay_begin(dt__replay *r, dt__lower *L, const dt__node *n, int passes) {
    /* The run's prediction first: a node that followed the last one's
     * template before, compared word for word, with no signature built, no
     * hash and no table probe. No match is a miss of the prediction only:
     * the signature is built and the table decides. */
    tpl *t = r->prev ? predict(r, L, n, passes) : NULL;
    int run = t != NULL;
    if (!run) {
        if (!dt__replay_sig_make(r, L, n, passes)) {
            r->prev = NULL; /* a node that is not cached ends the run */
            return 0;
        }
        dt__replay_sig_hash(r);
        t = lookup(r);
    }
    if (t) {
        follow(r, t);
        n->out->mcls = t->out_cls; /* its meta is t's output words */
        if (!t->usable) {
            r->misses++;
            return 0;
        }
        /* A run image is appended to the open run, or (what the signature
         * does not hold forbids a run now) the node is lowered as a miss. */
        if ((t->img && !dt__lw_step_replay(L, n, t->img)) ||
            (t->coll && !dt__lw_coll_replay(L, n, t->coll))) {
            r->misses++;
            return 0;
        }
        if (t->img || t->coll ? L->status == DT_OK : apply(r, L, n, t) == DT_OK) {
            r->hits++;
            if (run)
                r->run_hits++;
        }
        return 1;
    }
    r->misses++;
    r->ncap = 0;
    r->cap_over = 0;
    r->ncap_img = 0;
    r->ncap_coll = 0;
    L->g->replay_cap = r;
    return 2;
}

void dt__replay_uncapturable(dt__replay *r) { r->cap_over = 1; }

void dt__replay_note_image(dt__replay *r, const dt__node *n, const dt__tval *out, const dt__krec *img,
                           dt__tval *const *in) {
    if (r->ncap_img++ || out != n->out || img->alen > sizeof r->cap_img.attr) {
        r->cap_over = 1; /* a second image, or not the node's output */
        return;
    }
    dt__step_tpl *c = &r->cap_img;
    for (int j = 0; j < img->n_in; j++) {
        int k = 0;
        while (k < n->n_in && n->in[k] != in[j])
            k++;
        if (k == n->n_in) {
            r->cap_over = 1; /* a value the lowering made: not the node's */
            return;
        }
        c->from[j] = (int8_t)k;
    }
    c->kop = img->kop;
    c->n_in = img->n_in;
    c->opname = img->opname;
    c->alen = img->alen;
    memcpy(c->attr, img->attr, img->alen);
}

void dt__replay_note_coll(dt__replay *r, int md, int stream_kind, const uint8_t *attr, uint32_t alen,
                          const struct dt__bgroup *gin, const struct dt__bgroup *gout) {
    if (r->ncap_coll++ || alen > sizeof r->cap_coll.attr) {
        r->cap_over = 1; /* a second collective */
        return;
    }
    dt__coll_tpl *c = &r->cap_coll;
    c->md = md;
    c->stream_kind = stream_kind;
    c->alen = alen;
    memcpy(c->attr, attr, alen);
    r->cap_coll_in = gin;
    r->cap_coll_out = gout;
}

void dt__replay_note(dt__replay *r, dt__stream *s, dt__krec *k) {
    if (r->ncap == r->capcap) {
        if (r->capcap >= MAX_RECS) {
            r->cap_over = 1;
            return;
        }
        /* Not the lowering's allocation: an injected fault is not spent here. */
        int scope = dt__fault_scope(0);
        cap_ent *p = dt__realloc(r->caps, (size_t)r->capcap * 2 * sizeof *p);
        dt__fault_scope(scope);
        if (!p) {
            r->cap_over = 1;
            return;
        }
        r->caps = p;
        r->capcap *= 2;
    }
    r->caps[r->ncap++] = (cap_ent){s, k};
}

/* ----------------------------------------------------------- capture */

/* The template reference for blob b of the capture's first `upto` records
 * and n's inputs; REF_NONE when it is neither (or names one blob on two
 * devices). */
static int32_t classify(const dt__replay *r, const dt__node *n, const dt__blob *b, int upto) {
    for (int k = 0; k < upto; k++)
        if (r->caps[k].k->out == b)
            return k;
    int32_t ref = REF_NONE;
    int64_t dev = -1;
    for (int j = 0; j < n->n_in; j++) {
        const dt__tval *v = n->in[j];
        for (int64_t d = 0; d < v->meta.mesh->ndev; d++) {
            if (v->blobs[d] != b)
                continue;
            if (ref == REF_NONE) {
                ref = ref_in(j, d);
                dev = d;
            } else if (d != dev) {
                return REF_NONE;
            }
        }
    }
    return ref;
}

/* Fills t from the capture: t, or NULL when it cannot be replayed (out of
 * memory included: the signature is then kept as not replayable). */
static tpl *build(dt__replay *r, const dt__node *n, tpl *t) {
    int nrec = r->ncap;
    /* Template refs name a device in DEV_BITS bits. */
    if (n->out->meta.mesh->ndev >= MAX_DEV)
        return NULL;
    for (int j = 0; j < n->n_in; j++)
        if (n->in[j]->meta.mesh->ndev >= MAX_DEV)
            return NULL;
    size_t ilen = 0;
    int ncoll = 0;
    for (int k = 0; k < nrec; k++) {
        const dt__krec *q = r->caps[k].k;
        if (q->handle || !q->out)
            return NULL;
        ilen += (IMG_HDR + q->alen + 7) / 8 * 8;
        if (q->kop == DT_KC_COLLECTIVE)
            ncoll++;
    }
    t->recs = dt__calloc((size_t)(nrec ? nrec : 1), sizeof *t->recs);
    t->imgs = dt__malloc(ilen + IMG_SMALL); /* fill's slack */
    t->groups = dt__calloc((size_t)(ncoll ? ncoll : 1), sizeof *t->groups);
    t->nout = n->out->meta.mesh->ndev;
    t->outs = dt__calloc((size_t)t->nout, sizeof *t->outs);
    uint64_t *seqs = dt__calloc((size_t)(ncoll ? ncoll : 1), sizeof *seqs);
    if (!t->recs || !t->imgs || !t->groups || !t->outs || !seqs) {
        dt__free(seqs);
        return NULL;
    }
    size_t ioff = 0;
    int ok = 1;
    for (int k = 0; k < nrec && ok; k++) {
        const dt__krec *q = r->caps[k].k;
        tpl_rec *tr = &t->recs[k];
        tr->s = r->caps[k].s;
        tr->n_in = q->n_in;
        tr->coll = -1;
        tr->alen = q->alen;
        tr->cls = dt__krec_class(q->alen);
        tr->ioff = (uint32_t)ioff;
        tr->ilen = (uint32_t)(IMG_HDR + q->alen);
        dt__krec *img = (dt__krec *)(t->imgs + ioff);
        memcpy(img, q, tr->ilen);
        img->next = NULL;
        img->wait = 0;
        memset(img->in, 0, sizeof img->in);
        img->out = NULL;
        img->site_file = NULL;
        img->site_line = 0;
        img->handle = NULL;
        img->cls = (uint8_t)tr->cls;
        ioff += (tr->ilen + 7) / 8 * 8;
        for (int i = 0; i < q->n_in && ok; i++) {
            tr->in[i] = classify(r, n, q->in[i], k);
            ok = tr->in[i] != REF_NONE;
        }
        /* An output no earlier record made and no input holds is fresh. */
        tr->out = classify(r, n, q->out, k);
        if (tr->out == REF_NONE)
            tr->out = k;
        if (q->kop == DT_KC_COLLECTIVE && ok) {
            if (q->alen < 16) {
                ok = 0;
                break;
            }
            const uint8_t *p = q->attr;
            uint64_t group = dt__le_get(&p, 8), seq = dt__le_get(&p, 8);
            int c = 0;
            while (c < t->ncoll && !(t->groups[c] == group && seqs[c] == seq))
                c++;
            if (c == t->ncoll) {
                t->groups[c] = group;
                seqs[c] = seq;
                t->ncoll++;
            }
            tr->coll = (int16_t)c;
        }
    }
    for (int64_t d = 0; d < t->nout && ok; d++) {
        const dt__blob *b = n->out->blobs ? n->out->blobs[d] : NULL;
        t->outs[d] = b ? classify(r, n, b, nrec) : REF_NONE;
        ok = !b || t->outs[d] != REF_NONE;
    }
    dt__free(seqs);
    t->nrec = nrec;
    t->one = ok && nrec == 1 && t->ncoll == 0 && t->nout == 1 && t->recs[0].out == 0 && t->outs[0] == 0;
    return ok ? t : NULL;
}

void dt__replay_end(dt__replay *r, dt__lower *L, const dt__node *n, dt_status st) {
    L->g->replay_cap = NULL;
    /* A failure may be passing (out of memory): the next sighting tries
     * again. Either way the run is cut until the next template. */
    tpl *t = st == DT_OK ? dt__calloc(1, sizeof *t) : NULL;
    if (t)
        t->sig = dt__calloc(r->nsig + SIG_SLACK, sizeof *t->sig); /* the slack zero */
    if (!t || !t->sig) {
        dt__free(t);
        r->prev = NULL;
        return;
    }
    memcpy(t->sig, r->sig, r->nsig * sizeof *t->sig);
    t->nsig = r->nsig;
    t->block = reads_block(n->op);
    t->hash = r->hash;
    int only = !r->cap_over && !r->ncap;
    if (only && r->ncap_img && !r->ncap_coll) {
        /* One run image and nothing else: the template is the image. */
        t->img = dt__malloc(sizeof *t->img);
        if (t->img)
            memcpy(t->img, &r->cap_img, sizeof *t->img);
        t->usable = t->img != NULL;
    } else if (only && r->ncap_coll && !r->ncap_img) {
        /* One shared collective and nothing else, from the node's input 0
         * (as its group) to its output: the template is the record. */
        if (n->n_in >= 1 && (const void *)n->in[0]->grp == r->cap_coll_in &&
            (const void *)n->out->grp == r->cap_coll_out && (t->coll = dt__malloc(sizeof *t->coll)))
            memcpy(t->coll, &r->cap_coll, sizeof *t->coll);
        t->usable = t->coll != NULL;
    } else {
        t->usable =
            !r->cap_over && !r->ncap_img && !r->ncap_coll && r->ncap <= MAX_RECS && build(r, n, t) != NULL;
    }
    if (!t->usable) {
        /* Only the signature is kept: the next sighting lowers at once. */
        dt__free(t->recs);
        dt__free(t->groups);
        dt__free(t->outs);
        dt__free(t->imgs);
        t->recs = NULL;
        t->groups = NULL;
        t->outs = NULL;
        t->imgs = NULL;
        t->nrec = t->ncoll = 0;
    }
    t->out_cls = dt__replay_intern(r, r->sig + r->out_at, r->out_len);
    /* insert may empty the table (r->prev with it) before t goes in. */
    if (insert(r, t)) {
        follow(r, t);
        n->out->mcls = t->out_cls;
    } else {
        r->prev = NULL;
    }
}
