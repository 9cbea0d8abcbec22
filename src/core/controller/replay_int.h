/*
 * Replay's internals (replay.c: the cache, replaying and capturing
 * templates; replay_sig.c: a node's signature and the meta classes it is
 * made of). Controller only; for those two files.
 */
#ifndef DT_CORE_REPLAY_INT_H
#define DT_CORE_REPLAY_INT_H

#include <string.h>

#include "comm/comm.h"
#include "core/client/tensor.h"
#include "core/controller/lower.h"
#include "core/controller/lower_comm.h"
#include "core/controller/lower_queue.h"
#include "core/controller/replay.h"
#include "core/records/blob.h"
#include "core/records/graph_int.h"
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

static inline int32_t ref_in(int j, int64_t d) { return -1 - (int32_t)(((int64_t)j << DEV_BITS) | d); }
static inline int ref_j(int32_t ref) { return (-1 - ref) >> DEV_BITS; }
static inline int64_t ref_d(int32_t ref) { return (-1 - ref) & (MAX_DEV - 1); }

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
    /* A run image (lower_step.h): the node's one kernel, appended to its
     * mesh's open run by dt__lw_step_replay; no records. */
    dt__step_tpl *img;
    /* A collective record (lower_comm.h): the node's shared collective,
     * replayed by dt__lw_coll_replay with new sequence numbers. */
    dt__coll_tpl *coll;
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
    /* Run images the capture saw (dt__replay_note_image): the first kept. */
    int ncap_img;
    dt__step_tpl cap_img;
    /* Shared collectives the capture saw (dt__replay_note_coll): the first
     * kept, with the groups it read and made. */
    int ncap_coll;
    dt__coll_tpl cap_coll;
    const void *cap_coll_in, *cap_coll_out;
    /* Replay scratch: nrec records and fresh blobs, ncoll sequence numbers. */
    dt__krec **ks;
    dt__blob **fresh;
    uint64_t *seqs;
    int scap;
};

/* Whether the lowering of op reads the attribute block (the union after
 * `text`): the elementwise family leaves it undefined, and reduce and linalg
 * read only the words before it. */
static inline int reads_block(int32_t op) { return (dt__ops[op].flags & DT_OPF_READS_BLOCK) != 0; }

/* ---- replay_sig.c ---- */

/* The most words a meta takes in a signature. */
enum { META_WORDS = 4 + DT_MAX_NDIM + DT_MAX_MESH_NDIM + 2 * DT_MAX_SEGMENTS };
/* Words a template's signature is followed by, zero (dt__replay_end): a
 * check reads up to a meta's words past the template's end before it finds
 * that the lengths differ, so it needs no bound on each word. */
#define SIG_SLACK (META_WORDS + 2)

/* The node's signature into r->sig (its hash not yet taken): 0 when it
 * cannot be cached (out of memory). */
int dt__replay_sig_make(dt__replay *r, const dt__lower *L, const dt__node *n, int passes);
/* Whether the node's signature is template t's (the run's check of a
 * predicted template, without building the signature). */
int dt__replay_sig_same(dt__replay *r, const dt__lower *L, const dt__node *n, int passes, const tpl *t);
/* r->hash of the signature in r->sig. */
void dt__replay_sig_hash(dt__replay *r);
/* The class of meta words w[0, n) (interned on first sight), or 0 when the
 * cache holds too many classes. */
uint64_t dt__replay_intern(dt__replay *r, const uint64_t *w, uint32_t n);
/* Forgets every class (a new epoch). */
void dt__replay_classes_reset(dt__replay *r);

#endif /* DT_CORE_REPLAY_INT_H */
