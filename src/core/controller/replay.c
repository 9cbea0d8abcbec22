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
#include <string.h>

#include "comm/comm.h"
#include "core/client/graph_int.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_queue.h"
#include "core/controller/replay.h"
#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/mesh.h"
#include "core/records/node.h"
#include "core/worker/stream_int.h"

#define REF_NONE INT32_MIN
#define DEV_BITS 20
#define MAX_DEV ((int64_t)1 << DEV_BITS)
/* Templates kept at most; the cache is emptied when it would hold more (a
 * program whose signatures never repeat stops costing memory). */
#define MAX_TEMPLATES 8192
/* Successors a template remembers (tpl.next). */
#define NEXT_WAYS 4
/* Records one template holds at most (a larger lowering is not cached). */
#define MAX_RECS 4096
/* A record's header bytes (kernel_rec.h): its image's size before the attributes. */
#define IMG_HDR offsetof(dt__krec, attr)
/* The smallest record class's size (kernel_rec.h). */
#define IMG_SMALL DT__KREC_SMALL
/* Meta classes: at most MAX_CLASSES a cache (then values are signed with
 * their meta words), an index of CLS_BITS bits. */
#define CLS_BITS 20
#define MAX_CLASSES (1u << 16)
/* A class word in a signature: the top bit set, which no meta's first
 * word (dtype | ndim << 32) has. */
#define CLS_MARK ((uint64_t)1 << 63)
static _Atomic uint64_t next_epoch = 1;

static int32_t ref_in(int j, int64_t d) { return -1 - (int32_t)(((int64_t)j << DEV_BITS) | d); }
static int ref_j(int32_t ref) { return (-1 - ref) >> DEV_BITS; }
static int64_t ref_d(int32_t ref) { return (-1 - ref) & (MAX_DEV - 1); }

typedef struct tpl_rec {
    dt__stream *s; /* (the op, its name and rank are in the image) */
    int16_t n_in;
    int16_t coll; /* a collective: its index among the template's collectives; else -1 */
    int32_t in[DT_MAX_OP_INPUTS];
    int32_t out;
    uint32_t alen;
    /* The record's image at t->imgs + ioff, ilen bytes: the captured header
     * with its blobs, call site and link cleared, then its attributes; a
     * replayed record is a copy of it into a record of class cls. */
    uint32_t ioff, ilen;
    int cls;
} tpl_rec;

typedef struct tpl {
    uint64_t hash;
    uint64_t out_cls; /* the class of its output's meta (0: none) */
    uint32_t nsig;
    int usable; /* 0: the signature's lowering cannot be replayed */
    /* One kernel on a one-device mesh making the output, no collective:
     * most of a one-device loop body, replayed by apply_one. */
    int one;
    int nrec, ncoll;
    int block; /* the signature holds the family block (reads_block) */
    int64_t nout;
    uint64_t *sig;
    tpl_rec *recs;
    uint64_t *groups; /* ncoll: each collective's group id */
    int32_t *outs;    /* nout: the output's blob per device */
    uint8_t *imgs;    /* the records' images (tpl_rec.ioff) */
    /* The run: the templates of the cacheable nodes lowered right after
     * this one, the latest first (NULL: none yet); a few, since one template
     * serves several places of a loop body (three projections of one shape,
     * two norms), each with its own successor. Templates are freed only all
     * at once (clear), so a link never dangles. */
    struct tpl *next[NEXT_WAYS];
} tpl;

/* An interned meta: its words are cls_words[off, off + len). */
typedef struct cls_ent {
    uint64_t hash;
    uint64_t id; /* 0: empty slot */
    uint32_t off, len;
} cls_ent;

typedef struct cap_ent {
    dt__stream *s;
    dt__krec *k;
} cap_ent;

struct dt__replay {
    tpl **tab;
    uint32_t cap, n; /* cap a power of two, n at most cap / 2 */
    /* The current node's signature. */
    uint64_t *sig;
    uint32_t nsig, sigcap;
    uint64_t hash;
    uint32_t out_at, out_len; /* where the output's meta words are in sig */
    /* Meta classes (dt__tval.mcls): each distinct string of meta words
     * seen since the last clear, interned. A class is epoch << CLS_BITS |
     * index; epochs come from a process-wide counter, so a class from
     * before a clear (or of another cache) is never taken for a current
     * one. */
    uint64_t epoch;
    struct cls_ent *cls;
    uint32_t cls_cap, ncls;
    uint64_t *cls_words; /* the classes' words, back to back */
    size_t ncw, cwcap;
    /* The round's counts, published by dt__replay_publish (one atomic add
     * each a round, not each node). */
    long hits, run_hits, misses;
    /* The run in progress: the template of the cacheable node lowered last
     * (NULL after a node that is not cached, and after clear). */
    tpl *prev;
    /* The capture in progress. */
    cap_ent *caps;
    int ncap, capcap, cap_over;
    /* Replay scratch: nrec records and fresh blobs, ncoll sequence numbers. */
    dt__krec **ks;
    dt__blob **fresh;
    uint64_t *seqs;
    int scap;
};

/* ------------------------------------------------------------- cache */

static void tpl_free(tpl *t) {
    if (!t)
        return;
    dt__free(t->sig);
    dt__free(t->recs);
    dt__free(t->groups);
    dt__free(t->outs);
    dt__free(t->imgs);
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
    r->epoch = atomic_fetch_add_explicit(&next_epoch, 1, memory_order_relaxed);
    if (!r->tab || !r->caps) {
        dt__replay_free(r);
        return NULL;
    }
    return r;
}

/* Empties the class table: a new epoch, so every class given out so far
 * (in values, in templates) is stale. */
static void classes_reset(dt__replay *r) {
    r->epoch = atomic_fetch_add_explicit(&next_epoch, 1, memory_order_relaxed);
    if (r->ncls)
        memset(r->cls, 0, (size_t)r->cls_cap * sizeof *r->cls);
    r->ncls = 0;
    r->ncw = 0;
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
    classes_reset(r);
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

/* --------------------------------------------------------- signature */

/* The meta's words at w (at most META_WORDS); returns how many. */
enum { META_WORDS = 4 + DT_MAX_NDIM + DT_MAX_MESH_NDIM + 2 * DT_MAX_SEGMENTS };
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
static uint64_t intern(dt__replay *r, const uint64_t *w, uint32_t n) {
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
    v->mcls = intern(r, w, meta_words(w, &v->meta));
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

/* Whether the lowering of op reads the attribute block (the union after
 * `text`): the elementwise family leaves it undefined, and reduce and linalg
 * read only the words before it. */
static inline int reads_block(int32_t op) { return (dt__ops[op].flags & DT_OPF_READS_BLOCK) != 0; }

/* Words a template's signature is followed by, zero (dt__replay_end): a
 * check reads up to a meta's words past the template's end before it finds
 * that the lengths differ, so it needs no bound on each word. */
#define SIG_SLACK (META_WORDS + 2)
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
 * word are as many as its mesh's devices, which the class fixes. */
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
    /* The text is interned: one pointer per text. Compared two words at a
     * time (vectors of two words: SSE2 on x86-64, whatever the target has
     * elsewhere), the differences or-ed, the scalars' padding masked by a
     * constant: no call, no copy, one branch. */
    if (want) {
        const uint8_t *na = (const uint8_t *)&n->a;
        const uint64_t *hw = want->sig + k;
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
        if ((diff[0] | diff[1] | last) != 0)
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
static int signature(dt__replay *r, const dt__lower *L, const dt__node *n, int passes) {
    return sig_walk(r, L, n, passes, NULL);
}

/* Whether n's signature is t's (compared as it is made). */
static int same_signature(dt__replay *r, const dt__lower *L, const dt__node *n, int passes, const tpl *t) {
    return sig_walk(r, L, n, passes, t);
}

/* The current signature's hash (only when the run's prediction missed:
 * dt__replay_begin). Four independent lanes: a signature is tens of words,
 * and one serial multiply chain over them was a quarter of a replay's time. */
static void sig_hash(dt__replay *r) {
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
        if (t->sig[0] == w0 && same_signature(r, L, n, passes, t))
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
        if (!signature(r, L, n, passes)) {
            r->prev = NULL; /* a node that is not cached ends the run */
            return 0;
        }
        sig_hash(r);
        t = lookup(r);
    }
    if (t) {
        follow(r, t);
        n->out->mcls = t->out_cls; /* its meta is t's output words */
        if (!t->usable) {
            r->misses++;
            return 0;
        }
        if (apply(r, L, n, t) == DT_OK) {
            r->hits++;
            if (run)
                r->run_hits++;
        }
        return 1;
    }
    r->misses++;
    r->ncap = 0;
    r->cap_over = 0;
    L->g->replay_cap = r;
    return 2;
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
    t->usable = !r->cap_over && r->ncap <= MAX_RECS && build(r, n, t) != NULL;
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
    t->out_cls = intern(r, r->sig + r->out_at, r->out_len);
    /* insert may empty the table (r->prev with it) before t goes in. */
    if (insert(r, t)) {
        follow(r, t);
        n->out->mcls = t->out_cls;
    } else {
        r->prev = NULL;
    }
}
