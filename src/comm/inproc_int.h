/*
 * The in-process comm's groups (inproc.c), shared with its spanning
 * half (span.c): a group some of whose ranks live on other nodes.
 */
#ifndef DT_COMM_INPROC_INT_H
#define DT_COMM_INPROC_INT_H

#include "comm/comm.h"
#include "core/records/blob.h"

typedef struct span_pub span_pub; /* span.c: a rank's host copy, or its error */

typedef struct rendezvous {
    uint64_t seq;
    int busy, arrived, departed;
    dt__blob **slots; /* n: each rank's input (this process's ranks only, in a spanning group) */
    /* A spanning group's all-reduce (span.c): 2n published host copies
     * (each local rank's input, then its reduced range) and how many local
     * ranks reached each of its two stages. NULL in other groups. */
    span_pub **pub;
    int staged[2];
} rendezvous;

typedef struct group {
    uint64_t id;
    int n;
    int64_t *ids; /* device ids; in a spanning group, device keys (comm/xfer.h) */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    rendezvous rv[2]; /* even and odd sequence numbers */
    struct group *next;
    /* Spanning nodes (dt__comm_group_span): the main node's name for the
     * group (graph tag, group id), which ranks are this process's, and how
     * many. Set before the group's first collective. */
    int span, nlocal;
    uint32_t tag;
    uint64_t key;
    unsigned char *local;
} group;

/* The view the computations work on: one collective's attributes, the
 * peers' published inputs and the computing rank's backend. */
typedef struct coll_view {
    const dt__collattr *a;
    int kind, n;
    dt__blob **slots;
    const dt__backend *be;
} coll_view;

/* Peer p's input sliced along dim_b to rank r's range, or whole. */
dt_status dt__coll_slice_peer(const coll_view *c, int p, int r, int whole, void **out, char *err,
                              size_t errlen);
/* Rank r's output of a gather or reduction kind; pre[p] (when pre and it
 * are not NULL) replaces peer p's sliced input. */
dt_status dt__coll_compute(const coll_view *c, int r, void *const *pre, void **out, char *err, size_t errlen);
/* span.c: rank r's part of a collective of a spanning group. */
/* Puts rank r's input in the rendezvous of a->seq and waits until `expect`
 * ranks of this process have arrived; the rendezvous. */
rendezvous *dt__coll_arrive(group *gr, const dt__collattr *a, int r, dt__blob *in, int expect);

/* Rank leaves rendezvous rv; the `expect`-th to leave releases its n slots
 * and frees it for the next sequence number. */
void dt__coll_depart(group *gr, rendezvous *rv, int n, int expect);

/* Sets out's error to "OPNAME failed in a collective: ERR". */
void dt__coll_fail(dt__blob *out, const char *opname, const char *err);

void dt__coll_span_run(group *gr, const dt__collattr *a, int r, dt__blob *in, dt__blob *out,
                       const char *opname);
/* Frees rv's published copies (the last rank to depart, under the group's
 * lock). */
void dt__coll_span_clear(rendezvous *rv, int n);

#endif /* DT_COMM_INPROC_INT_H */
