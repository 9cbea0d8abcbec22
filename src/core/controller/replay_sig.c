/*
 * A node's replay signature (replay_int.h; replay.c's head comment says what
 * it holds) and the meta classes that keep it short: each distinct string
 * of a value's meta words is interned once, and a signature carries its
 * class, one word.
 *
 * Threads: controller only; no locks.
 */
#include "core/controller/replay_int.h"

static _Atomic uint64_t next_epoch = 1;

/* Empties the class table: a new epoch, so every class given out so far
 * (in values, in templates) is stale. */
void dt__replay_classes_reset(dt__replay *r) {
    r->epoch = atomic_fetch_add_explicit(&next_epoch, 1, memory_order_relaxed);
    if (r->ncls)
        memset(r->cls, 0, (size_t)r->cls_cap * sizeof *r->cls);
    r->ncls = 0;
    r->ncw = 0;
}

/* --------------------------------------------------------- signature */

/* The meta's words: written at w (want NULL), or compared with want's
 * (0 at the first difference). Returns how many (at most META_WORDS).
 * Always inlined: the two uses are two functions. */
#define MW(x)                                                                                                \
    do {                                                                                                     \
        uint64_t x_ = (x);                                                                                   \
        if (want) {                                                                                          \
            if (want[k] != x_)                                                                               \
                return 0;                                                                                    \
            k++;                                                                                             \
        } else {                                                                                             \
            w[k++] = x_;                                                                                     \
        }                                                                                                    \
    } while (0)
static inline __attribute__((always_inline)) uint32_t meta_walk(uint64_t *w, const uint64_t *want,
                                                                const dt__meta *m) {
    const dt_mesh *mesh = m->mesh;
    int mnd = mesh ? mesh->ndim : 0;
    uint32_t k = 0;
    MW((uint64_t)(uint32_t)m->dtype | (uint64_t)(uint32_t)m->ndim << 32);
    for (int d = 0; d < m->ndim; d++)
        MW((uint64_t)m->shape[d]);
    MW(mesh ? mesh->uid : 0);
    for (int d = 0; d < mnd; d++)
        MW((uint64_t)(uint32_t)m->pl[d].kind | (uint64_t)(uint32_t)m->pl[d].dim << 32);
    MW((uint64_t)(uint8_t)m->seg.n);
    if (m->seg.n > 0) {
        MW((uint64_t)(uint8_t)m->seg.dim | (uint64_t)(uint8_t)m->seg.nmd << 8);
        for (int q = 0; q < m->seg.nmd; q++)
            MW((uint64_t)(uint8_t)m->seg.mds[q]);
        for (int q = 0; q < m->seg.n; q++)
            MW((uint64_t)m->seg.len[q]);
    }
    return k;
}
#undef MW

static inline __attribute__((always_inline)) uint32_t meta_words(uint64_t *w, const dt__meta *m) {
    return meta_walk(w, NULL, m);
}

static uint64_t words_hash(const uint64_t *w, uint32_t n) {
    uint64_t h = 0x243f6a8885a308d3ull ^ n;
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ w[i]) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

/* ----------------------------------------------------------- classes */

static uint64_t intern_new(dt__replay *r, const uint64_t *w, uint32_t n, uint64_t h);

/* The class of the meta words w[0, n): found, or made; 0 when the table is
 * full or out of memory (the value is then signed with its words). */
uint64_t dt__replay_intern(dt__replay *r, const uint64_t *w, uint32_t n) {
    uint64_t h = words_hash(w, n);
    if (r->cls_cap) {
        uint32_t mask = r->cls_cap - 1;
        for (uint32_t i = (uint32_t)h & mask; r->cls[i].id; i = (i + 1) & mask) {
            const cls_ent *e = &r->cls[i];
            if (e->hash == h && e->len == n && !memcmp(r->cls_words + e->off, w, n * sizeof *w))
                return e->id;
        }
    }
    if (r->ncls + 1 >= MAX_CLASSES)
        return 0;
    /* Not the lowering's allocations: an injected fault is not spent here. */
    int scope = dt__fault_scope(0);
    uint64_t id = intern_new(r, w, n, h);
    dt__fault_scope(scope);
    return id;
}

/* intern's insertion of a new class. */
static uint64_t intern_new(dt__replay *r, const uint64_t *w, uint32_t n, uint64_t h) {
    if (2 * (r->ncls + 1) > r->cls_cap) {
        uint32_t cap = r->cls_cap ? 2 * r->cls_cap : 256;
        cls_ent *tab = dt__calloc(cap, sizeof *tab);
        if (!tab)
            return 0;
        for (uint32_t i = 0; i < r->cls_cap; i++) {
            if (!r->cls[i].id)
                continue;
            uint32_t j = (uint32_t)r->cls[i].hash & (cap - 1);
            while (tab[j].id)
                j = (j + 1) & (cap - 1);
            tab[j] = r->cls[i];
        }
        dt__free(r->cls);
        r->cls = tab;
        r->cls_cap = cap;
    }
    if (r->ncw + n > r->cwcap) {
        size_t cap = r->cwcap ? 2 * r->cwcap : 4096;
        while (cap < r->ncw + n)
            cap *= 2;
        uint64_t *p = dt__realloc(r->cls_words, cap * sizeof *p);
        if (!p)
            return 0;
        r->cls_words = p;
        r->cwcap = cap;
    }
    memcpy(r->cls_words + r->ncw, w, n * sizeof *w);
    uint32_t i = (uint32_t)h & (r->cls_cap - 1);
    while (r->cls[i].id)
        i = (i + 1) & (r->cls_cap - 1);
    r->cls[i] = (cls_ent){h, r->epoch << CLS_BITS | ++r->ncls, (uint32_t)r->ncw, n};
    r->ncw += n;
    return r->cls[i].id;
}

/* value_class's slow path: interns v's meta. */
static __attribute__((noinline)) uint64_t value_class_new(dt__replay *r, dt__tval *v) {
    uint64_t w[META_WORDS];
    v->mcls = dt__replay_intern(r, w, meta_words(w, &v->meta));
    return v->mcls;
}

/* v's class, interned on first use (and again after a clear); 0: none. */
static inline uint64_t value_class(dt__replay *r, dt__tval *v) {
    if (v->mcls && v->mcls >> CLS_BITS == r->epoch)
        return v->mcls;
    return value_class_new(r, v);
}

/* --------------------------------------------------------- signature */

static int reserve_sig(dt__replay *r, size_t words) {
    if (words <= r->sigcap)
        return 1;
    size_t cap = r->sigcap ? r->sigcap : 256;
    while (cap < words)
        cap *= 2;
    uint64_t *p = dt__realloc(r->sig, cap * sizeof *p);
    if (!p)
        return 0;
    r->sig = p;
    r->sigcap = (uint32_t)cap;
    return 1;
}

/* The attribute words: the record's bytes before the family block, as they
 * are (the client zeroes them before it sets any: node.h,
 * DT__NODE_COMMON_BYTES; so padding is zero and equal bytes are equal
 * attributes). A random op's seed is among them; it is 0 in every cached
 * node (sig_walk). */
enum { HEAD_BYTES = offsetof(dt__nattr, ints), HEAD_WORDS = HEAD_BYTES / 8 };
_Static_assert(HEAD_BYTES % 8 == 0, "the attribute words are whole words");
/* But for the padding after each scalar's kind: a dt_scalar is copied by
 * assignment from the caller's, padding and all, so those two words keep
 * their kind's 32 bits only. */
enum { SC1 = offsetof(dt__nattr, scalar) / 8, SC2 = offsetof(dt__nattr, scalar2) / 8 };
_Static_assert(offsetof(dt__nattr, scalar) % 8 == 0 && offsetof(dt__nattr, scalar2) % 8 == 0 &&
                   offsetof(dt_scalar, kind) == 0 && offsetof(dt_scalar, i) == 8 && sizeof(dt_scalar) == 24,
               "a scalar's padding is the high half of its first word");
#define KIND_MASK 0xffffffffull
/* Two signature words as one vector (GCC and Clang vector extensions). */
typedef uint64_t dt__w2 __attribute__((vector_size(16)));

/* n's signature, one walk for two uses. Without `want` (build) its words
 * go to r->sig (r->nsig, out_at and out_len set; not its hash: sig_hash);
 * 0 when n is not to be cached. With `want` (check) each part is compared
 * with want's signature as it is made (the attributes and the block with
 * one memcmp each), nothing is stored, and the walk stops at the first
 * difference; 1 when n's signature is want's, word for word. The run's
 * prediction is checked so (dt__replay_begin). Always inlined: each use is
 * its own function, without the other's branches. A check reads no further
 * than SIG_SLACK words past want's end: the parts before the inputs have a
 * fixed length or are a meta's words, and an input's words after its class
 * word are at most as many as its mesh's devices, which the class fixes. */
/* Whether the attribute words before the family block (HEAD_WORDS of
 * them: the scalars' padding masked) are hw's, the template's. Compared two
 * words at a time (vectors of two words: SSE2 on x86-64, whatever the target
 * has elsewhere), the differences or-ed, the padding masked by a constant:
 * no call, no copy, one branch. */
static inline __attribute__((always_inline)) int head_same(const dt__nattr *attr, const uint64_t *hw) {
    const uint8_t *na = (const uint8_t *)attr;
    dt__w2 diff = {0, 0};
#pragma GCC unroll 16
    for (int i = 0; i + 2 <= HEAD_WORDS; i += 2) {
        dt__w2 a, b;
        memcpy(&a, na + 8 * i, sizeof a);
        memcpy(&b, hw + i, sizeof b);
        if (i == (SC1 & ~1) || i == (SC2 & ~1))
            a &= (dt__w2){i == SC1 || i == SC2 ? KIND_MASK : ~0ull,
                          i + 1 == SC1 || i + 1 == SC2 ? KIND_MASK : ~0ull};
        diff |= a ^ b;
    }
    uint64_t last = 0;
    if (HEAD_WORDS % 2) {
        memcpy(&last, na + 8 * (HEAD_WORDS - 1), 8);
        if (HEAD_WORDS - 1 == SC1 || HEAD_WORDS - 1 == SC2)
            last &= KIND_MASK;
        last ^= hw[HEAD_WORDS - 1];
    }
    return (diff[0] | diff[1] | last) == 0;
}

/* Which blobs an input holds, as one word, when they are its group's own
 * members (own_group): every one there, none another group's. Bit 42 is in
 * no per-device word, so the two forms never match each other. */
#define GRP_WORD ((uint64_t)3 << 41)
/* The same for loose blobs (loose(): every one there, none a group's
 * member) read after inputs that are all own groups: they share no blob
 * with them (the per-device words would each be the presence bit alone).
 * Bit 43 is in neither other form. */
#define LOOSE_WORD ((uint64_t)5 << 41)

/* 1 when v's blobs are the members its group was made with
 * (dt__bgroup_new: all there, and none of them another such group's); an
 * adopted group's member array points elsewhere (at blobs an own group or a
 * per-device value may also hold: those inputs are signed device by
 * device). One load, of member 0's pointer. */
static inline int own_group(const dt__tval *v) {
    return v->grp && v->blobs[0] ==
                         (const dt__blob *)((const uint8_t *)v->grp + DT__BGROUP_MEMBERS(v->meta.mesh->ndev));
}

/* 1 when v's blobs are all there and none a group's member: a loose
 * adopted group (the weights a decode reads), or a value made per device
 * that would be adopted as one (so its signature is the same before and
 * after). */
static inline int loose(const dt__tval *v) {
    if (v->grp)
        return v->grp->loose;
    for (int64_t d = 0; d < v->meta.mesh->ndev; d++)
        if (!v->blobs[d] || v->blobs[d]->grp)
            return 0;
    return 1;
}

/* Input j > 0 (v, no earlier input's value) as one word when the inputs
 * before it are all own groups: own groups share a blob only when they are
 * one group (the first earlier input of v's group, if any, holds every
 * one); loose blobs share none. 0: signed device by device. */
static inline uint64_t one_word(const dt__node *n, int j, const dt__tval *v) {
    int first = -1;
    for (int q = 0; q < j; q++) {
        const dt__tval *u = n->in[q];
        if (!own_group(u))
            return 0;
        if (first < 0 && u->grp == v->grp)
            first = q;
    }
    if (own_group(v))
        return GRP_WORD | (uint64_t)(first + 1);
    return loose(v) ? LOOSE_WORD : 0;
}

#define PUT(x)                                                                                               \
    do {                                                                                                     \
        uint64_t x_ = (x);                                                                                   \
        if (want) {                                                                                          \
            if (want->sig[k] != x_)                                                                          \
                return 0;                                                                                    \
            k++;                                                                                             \
        } else {                                                                                             \
            r->sig[k++] = x_;                                                                                \
        }                                                                                                    \
    } while (0)
/* `bytes` bytes at p as whole words, the last one's tail zero. */
#define PUT_BYTES(p, bytes)                                                                                  \
    do {                                                                                                     \
        uint32_t nw_ = (uint32_t)(((bytes) + 7) / 8);                                                        \
        if (want) {                                                                                          \
            if (memcmp(want->sig + k, (p), (bytes)))                                                         \
                return 0;                                                                                    \
        } else {                                                                                             \
            r->sig[k + nw_ - 1] = 0;                                                                         \
            memcpy(r->sig + k, (p), (bytes));                                                                \
        }                                                                                                    \
        k += nw_;                                                                                            \
    } while (0)
/* A meta's words. */
#define PUT_META(m)                                                                                          \
    do {                                                                                                     \
        if (want) {                                                                                          \
            uint32_t ml_ = meta_walk(NULL, want->sig + k, (m));                                              \
            if (!ml_)                                                                                        \
                return 0;                                                                                    \
            k += ml_;                                                                                        \
            if (k > want->nsig)                                                                              \
                return 0;                                                                                    \
        } else {                                                                                             \
            k += meta_words(r->sig + k, (m));                                                                \
        }                                                                                                    \
    } while (0)
static inline __attribute__((always_inline)) int sig_walk(dt__replay *r, const dt__lower *L,
                                                          const dt__node *n, int passes, const tpl *want) {
    /* A random op's seed is new on every call: its signature never repeats
     * (so no cached node has one). Meshes of MAX_DEV devices or more are
     * refused by build (template refs). */
    if (want) {
        /* The seed is among the attribute words, 0 in want's; a node
         * without a mesh differs in its output's mesh word. */
        if (n->extra || !n->out)
            return 0;
    } else {
        if (n->extra || n->a.seed || !n->out || !n->out->meta.mesh)
            return 0;
        int64_t ndev = 0;
        for (int j = 0; j < n->n_in; j++) {
            const dt__tval *v = n->in[j];
            if (!v || !v->blobs)
                return 0;
            ndev += v->meta.mesh->ndev;
        }
        size_t words = 16 + sizeof n->a / 8 + (size_t)(n->n_in + 1) * (2 + META_WORDS) + (size_t)ndev;
        if (!reserve_sig(r, words))
            return 0;
    }
    uint32_t k = 0;
    PUT((uint64_t)(uint32_t)n->op | (uint64_t)(uint32_t)n->n_in << 32);
    /* Whether the window's passes ran, not the reuse mark: the mark is a
     * function of the op and the layouts of in[0] and the output
     * (dt__reuse_mark), all of them in the signature. */
    PUT((uint64_t)(uint32_t)passes | (uint64_t)(L->g->overlap != 0) << 32);
    /* The attributes before the family block (the text is interned: one
     * pointer per text). */
    if (want) {
        if (!head_same(&n->a, want->sig + k))
            return 0;
        k += HEAD_WORDS;
    } else {
        memcpy(r->sig + k, &n->a, HEAD_BYTES);
        r->sig[k + SC1] &= KIND_MASK;
        r->sig[k + SC2] &= KIND_MASK;
        k += HEAD_WORDS;
    }
    /* The family block, for the ops whose lowering reads it (want's op is
     * n's: its first word matched, dt__replay_begin). */
    if (want ? want->block : reads_block(n->op))
        PUT_BYTES((const uint8_t *)&n->a + HEAD_BYTES, sizeof n->a - HEAD_BYTES);
    /* The output's layout in full: it is the new node's, set by the client. */
    if (!want)
        r->out_at = k;
    PUT_META(&n->out->meta);
    if (!want)
        r->out_len = k - r->out_at;
    for (int j = 0; j < n->n_in; j++) {
        dt__tval *v = n->in[j];
        if (want && (!v || !v->blobs))
            return 0;
        /* An input's layout by its class, one word: the same class is the
         * same meta words (interned), and a value made by a replay has its
         * template's output class without interning anything. */
        uint64_t c = value_class(r, v);
        if (c)
            PUT(c | CLS_MARK);
        else
            PUT_META(&v->meta);
        /* Which blobs are one blob: an earlier input that is the same value,
         * else per device the earlier input holding the same blob there (a
         * blob lives on one device; capture refuses a lowering that named
         * one blob on two). */
        int64_t nd = v->meta.mesh->ndev;
        if (j == 0) { /* no earlier input: which blobs are there */
            if (own_group(v)) {
                PUT(GRP_WORD);
                continue;
            }
            for (int64_t d = 0; d < nd; d++)
                PUT((uint64_t)(v->blobs[d] != NULL) << 41);
            continue;
        }
        int same = -1;
        for (int q = 0; q < j && same < 0; q++)
            if (n->in[q] == v)
                same = q;
        if (same >= 0) {
            PUT((uint64_t)(uint32_t)same | (uint64_t)1 << 40);
            continue;
        }
        uint64_t one = one_word(n, j, v);
        if (one) {
            PUT(one);
            continue;
        }
        for (int64_t d = 0; d < nd; d++) {
            uint64_t w = (uint64_t)(v->blobs[d] != NULL) << 41;
            for (int q = 0; q < j; q++) {
                const dt__tval *u = n->in[q];
                if (u->meta.mesh->ndev > d && u->blobs[d] == v->blobs[d]) {
                    w |= (uint64_t)(q + 1);
                    break;
                }
            }
            PUT(w);
        }
    }
    if (want)
        return k == want->nsig;
    r->nsig = k;
    return 1;
}
#undef PUT
#undef PUT_BYTES
#undef PUT_META

/* Builds n's signature into r->sig; 0 when n is not to be cached. */
int dt__replay_sig_make(dt__replay *r, const dt__lower *L, const dt__node *n, int passes) {
    return sig_walk(r, L, n, passes, NULL);
}

/* Whether n's signature is t's (compared as it is made). */
int dt__replay_sig_same(dt__replay *r, const dt__lower *L, const dt__node *n, int passes, const tpl *t) {
    return sig_walk(r, L, n, passes, t);
}

/* The current signature's hash (only when the run's prediction missed:
 * dt__replay_begin). Four independent lanes: a signature is tens of words,
 * and one serial multiply chain over them was a quarter of a replay's time. */
void dt__replay_sig_hash(dt__replay *r) {
    uint64_t h[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull,
                     0x082efa98ec4e6c89ull};
    uint32_t i = 0;
    for (; i + 4 <= r->nsig; i += 4)
        for (int l = 0; l < 4; l++)
            h[l] = (h[l] ^ r->sig[i + l]) * 0x9e3779b97f4a7c15ull;
    for (; i < r->nsig; i++)
        h[0] = (h[0] ^ r->sig[i]) * 0x9e3779b97f4a7c15ull;
    uint64_t x = h[0] ^ (h[1] >> 17) ^ (h[2] << 23) ^ (h[3] >> 41) ^ r->nsig;
    r->hash = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9ull;
}
