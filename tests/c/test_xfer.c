/*
 * Data between nodes without a network (comm/xfer.h, comm/span.c):
 * the mailbox's waits wake on delivery, on a node's loss and on an abort;
 * a shared message is taken by each of its takers; the node table comes in
 * as a message. A spanning group's collectives (all-gather, reduce-scatter,
 * all-reduce as reduce-scatter then all-gather of the flattened tensor),
 * two ranks in this process and the others played by the test through the
 * outbox and the mailbox (as the transport's thread would), send exactly
 * the expected messages (one per node where the node table allows, the
 * right ranges, uneven, tiny and empty) and give bit for bit what the
 * in-process comm gives for the same inputs, and the float sums in rank
 * order computed here. A rank waiting for a node that is lost, for the
 * parts of a collective whose batch a node could not run (in either round
 * of an all-reduce, shared messages too), or whose peer's input failed,
 * fails with that error and still sends what it owes. All of it for a
 * group of CPU devices and for one of CUDA devices (named by their keys,
 * the node table holding both types' entries). Under ASan/TSan in the
 * sanitizer builds.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/xfer.h"
#include "core/records/blob.h"
#include "core/records/coll.h"
#include "test_util.h"

static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wcond = PTHREAD_COND_INITIALIZER;
static int wakes;

/* Devices 0 .. 6 of each type are ours (keys: comm/xfer.h). */
static int is_local(int64_t key) { return dt__xfer_key_id(key) < 7; }

static void wake(void) {
    pthread_mutex_lock(&wmu);
    wakes++;
    pthread_cond_broadcast(&wcond);
    pthread_mutex_unlock(&wmu);
}

static int wakes_now(void) {
    pthread_mutex_lock(&wmu);
    int n = wakes;
    pthread_mutex_unlock(&wmu);
    return n;
}

/* Waits until `n` wakes were seen in all (the transport's poll), at most
 * 20 s; 0 when they were not. */
static int wait_wakes(int n) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 20;
    pthread_mutex_lock(&wmu);
    int rc = 0;
    while (wakes < n && rc == 0)
        rc = pthread_cond_timedwait(&wcond, &wmu, &until);
    int ok = wakes >= n;
    pthread_mutex_unlock(&wmu);
    if (!ok)
        fprintf(stderr, "test_xfer: %d wakes expected, %d seen\n", n, wakes_now());
    return ok;
}

static dt__xfer_msg *msg(uint64_t seq, int from, int to, int64_t src, const float *v, size_t n) {
    dt__xfer_msg *m = calloc(1, sizeof *m);
    m->h = (dt__xfer_hdr){.tag = 9,
                          .group = 77,
                          .seq = seq,
                          .from = from,
                          .to = to,
                          .src_device = src,
                          .dst_device = 0,
                          .dtype = DT_FLOAT32,
                          .ndim = 1};
    m->h.shape[0] = (int64_t)n;
    float *copy = malloc(n * sizeof *copy + 1);
    memcpy(copy, v, n * sizeof *copy);
    m->data = copy;
    m->len = n * sizeof *copy;
    m->h.total = m->len;
    m->release = free;
    m->arg = copy;
    return m;
}

typedef struct waiter {
    pthread_t t;
    uint64_t seq;
    int64_t src;
    int to, shares;
    dt__xfer_msg *got;
    char err[DT__XFER_TEXT];
} waiter;

static void *wait_main(void *arg) {
    waiter *w = arg;
    w->got = dt__xfer_wait(9, 77, w->seq, 2, w->to, w->src, w->shares ? w->shares : 1, w->err, sizeof w->err);
    return NULL;
}

static void test_mailbox(void) {
    const float v[3] = {1, 2, 3};
    waiter w = {.seq = 1, .src = 7};
    CHECK_EQ(pthread_create(&w.t, NULL, wait_main, &w), 0);
    usleep(20000);
    dt__xfer_deliver(msg(2, 2, 0, 7, v, 3)); /* another sequence number: not it */
    dt__xfer_deliver(msg(1, 2, 0, 7, v, 2));
    pthread_join(w.t, NULL);
    CHECK(w.got && w.got->h.seq == 1 && w.got->len == 2 * sizeof(float));
    CHECK(w.got && memcmp(w.got->data, v, 2 * sizeof(float)) == 0);
    dt__xfer_msg_free(w.got);
    CHECK_EQ(dt__xfer_pending(), 1);
    /* A message that arrived first is taken at once. */
    w = (waiter){.seq = 2, .src = 7};
    wait_main(&w);
    CHECK(w.got && w.got->h.seq == 2);
    dt__xfer_msg_free(w.got);
    /* A message in chunks, out of order, is whole once its last chunk is
     * in; a chunk past its message's end is dropped. */
    float big[10];
    for (int i = 0; i < 10; i++)
        big[i] = (float)i * 1.5f;
    const int cut[4] = {0, 3, 7, 10}, order[3] = {2, 0, 1};
    for (int k = 0; k < 3; k++) {
        int c = order[k];
        dt__xfer_msg *m = msg(8, 2, 0, 7, big + cut[c], (size_t)(cut[c + 1] - cut[c]));
        m->h.offset = (uint64_t)cut[c] * sizeof(float);
        m->h.total = sizeof big;
        m->h.shape[0] = 10;
        dt__xfer_deliver(m);
        if (k == 1) {
            dt__xfer_msg *bad = msg(8, 2, 0, 7, big, 4);
            bad->h.offset = sizeof big - sizeof(float);
            bad->h.total = sizeof big;
            dt__xfer_deliver(bad);
            CHECK_EQ(dt__xfer_pending(), 0); /* not whole yet */
        }
    }
    w = (waiter){.seq = 8, .src = 7};
    wait_main(&w);
    CHECK(w.got && w.got->len == sizeof big && memcmp(w.got->data, big, sizeof big) == 0);
    dt__xfer_msg_free(w.got);
    /* Posting wakes the transport; the outbox comes back oldest first. */
    int before = wakes_now();
    dt__xfer_post(msg(5, 0, 2, 0, v, 1));
    dt__xfer_post(msg(6, 0, 2, 0, v, 1));
    wait_wakes(before + 2);
    dt__xfer_msg *out = dt__xfer_take();
    CHECK(out && out->h.seq == 5 && out->next && out->next->h.seq == 6 && !out->next->next);
    while (out) {
        dt__xfer_msg *next = out->next;
        dt__xfer_msg_free(out);
        out = next;
    }
    CHECK(dt__xfer_take() == NULL);
    /* A wait for a device whose node is lost wakes with the node's error,
     * and later ones fail at once; other devices still wait. */
    w = (waiter){.seq = 3, .src = 5};
    CHECK_EQ(pthread_create(&w.t, NULL, wait_main, &w), 0);
    usleep(20000);
    dt__xfer_lost(4, 2, "worker node 1 (127.0.0.1, pid 42) is lost: no heartbeat for 2300 ms");
    pthread_join(w.t, NULL);
    CHECK(!w.got && strstr(w.err, "worker node 1 (127.0.0.1, pid 42) is lost"));
    w = (waiter){.seq = 4, .src = 4};
    wait_main(&w);
    CHECK(!w.got && strstr(w.err, "worker node 1"));
    dt__xfer_deliver(msg(4, 2, 0, 3, v, 1)); /* a message already here is still taken */
    w = (waiter){.seq = 4, .src = 3};
    wait_main(&w);
    CHECK(w.got != NULL);
    dt__xfer_msg_free(w.got);
}

/* A shared message: each of its takers gets the payload (the last take
 * empties the box), a taker that counts one takes it whole; the node table
 * comes in as a message and names each device's node. */
static void test_shared_and_table(void) {
    const float v[4] = {1, 2, 3, 4};
    dt__xfer_msg *m = msg(11, 2, DT__XFER_SHARED, 7, v, 4);
    dt__xfer_deliver(m);
    waiter w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (waiter){.seq = 11, .src = 7, .to = i, .shares = 3};
        if (i < 2)
            wait_main(&w[i]);
    }
    CHECK_EQ(dt__xfer_pending(), 1); /* the third taker is still to come */
    CHECK(w[0].got && w[1].got && w[0].got->data == w[1].got->data && w[1].got->h.to == 1);
    dt__xfer_msg_free(w[0].got); /* the payload outlives a taker's copy */
    CHECK_EQ(pthread_create(&w[2].t, NULL, wait_main, &w[2]), 0);
    pthread_join(w[2].t, NULL);
    CHECK_EQ(dt__xfer_pending(), 0);
    CHECK(w[2].got && w[2].got->len == sizeof v && memcmp(w[2].got->data, v, sizeof v) == 0);
    CHECK(w[1].got && memcmp(w[1].got->data, v, sizeof v) == 0);
    dt__xfer_msg_free(w[2].got);
    dt__xfer_msg_free(w[1].got);
    dt__xfer_deliver(msg(12, 2, DT__XFER_SHARED, 7, v, 2));
    waiter one = {.seq = 12, .src = 7, .to = 0, .shares = 1};
    wait_main(&one);
    CHECK(one.got && one.got->len == 2 * sizeof(float));
    dt__xfer_msg_free(one.got);
    /* A shared message half taken when the cluster stops: its takers' copies
     * still read it (ASan checks the payload is freed once, last). */
    dt__xfer_deliver(msg(13, 2, DT__XFER_SHARED, 7, v, 4));
    waiter h = {.seq = 13, .src = 7, .to = 0, .shares = 2};
    wait_main(&h);
    CHECK_EQ(dt__xfer_pending(), 1);

    CHECK_EQ(dt__xfer_node_of(3), DT__XFER_NODE_UNKNOWN);
    /* CPU devices on three nodes, CUDA devices on the first two: an entry
     * per type per node, CUDA ones by key (past 2^40, so the message's
     * int64s are checked whole). */
    const int64_t cu = dt__xfer_key(DT_DEVICE_CUDA, 0);
    const int64_t first[5] = {0, 7, 9, cu, cu + 4}, count[5] = {7, 2, 2, 4, 1};
    dt__xfer_msg *t = dt__xfer_layout_msg(5, first, count);
    CHECK(t != NULL);
    if (t) {
        t->h.total = t->len;
        dt__xfer_deliver(t);
    }
    CHECK_EQ(dt__xfer_pending(), 1); /* the table is not a message for a rank */
    CHECK_EQ(dt__xfer_node_of(3), 0);
    CHECK_EQ(dt__xfer_node_of(8), 1);
    CHECK_EQ(dt__xfer_node_of(10), 2);
    CHECK_EQ(dt__xfer_node_of(11), DT__XFER_NODE_UNKNOWN);
    CHECK_EQ(dt__xfer_node_of(cu + 3), 3); /* cuda:3, not cpu:3's entry */
    CHECK_EQ(dt__xfer_node_of(cu + 4), 4);
    CHECK_EQ(dt__xfer_node_of(cu + 5), DT__XFER_NODE_UNKNOWN);
    dt__xfer_stop();
    CHECK(h.got && memcmp(h.got->data, v, sizeof v) == 0);
    dt__xfer_msg_free(h.got);
    int64_t bo, fo, bi, fi;
    dt__xfer_counters(&bo, &fo, &bi, &fi);
    dt__xfer_count(1, 100, 2);
    dt__xfer_count(0, 30, 1);
    int64_t bo2, fo2, bi2, fi2;
    dt__xfer_counters(&bo2, &fo2, &bi2, &fi2);
    CHECK(bo2 - bo == 100 && fo2 - fo == 2 && bi2 - bi == 30 && fi2 - fi == 1);
}

/* ------------------------------------------------- a spanning collective */

/* The test plays the ranks of other nodes: it takes what this process's
 * ranks post, checks each message against what the protocol says it must
 * hold, and delivers the other ranks' messages as their nodes would. */

enum { MAXN = 4, MAXLEN = 16 };
static const dt__backend *be;

typedef struct rank_job {
    pthread_t t;
    dt__comm *c;
    dt__collattr a;
    int r;
    dt__blob *in, *out;
} rank_job;

static const char *const kind_name[] = {"all_gather", "all_reduce", "reduce_scatter"};

static void *run_rank(void *arg) {
    rank_job *j = arg;
    j->c->ops->run(j->c, &j->a, j->r, j->in, j->out, kind_name[j->a.kind]);
    return NULL;
}

static dt__blob *blob_of(const float *v, int64_t n) {
    dt__blob *b = dt__blob_new(be);
    char err[256];
    CHECK_EQ(be->from_host(DT_FLOAT32, 1, &n, v, &b->impl, err, sizeof err), DT_OK);
    return b;
}

/* One spanning collective's set-up: n ranks on devices ids of `type`,
 * `len` elements (each rank's input for a reduction, the gathered total
 * for an all-gather); the chunk ranges along dim 0 and the flattened
 * ranges. */
typedef struct setup {
    int n, kind, len, type;
    int64_t ids[MAXN]; /* their keys (comm/xfer.h): what the messages name */
    int local[MAXN], nlocal;
    int64_t start[MAXN], lens[MAXN]; /* torch.chunk ranges */
    int64_t lo[MAXN + 1];            /* all-reduce ranges */
    int table;                       /* the node table is set */
    uint8_t shapes[MAXN * 8], starts[MAXN * 8], lensb[MAXN * 8];
} setup;

static int node_of(const setup *s, int64_t key) {
    int64_t id = dt__xfer_key_id(key);
    if (!s->table)
        return -1 - (int)id; /* unknown: every device its own */
    return id < 7 ? 0 : id < 9 ? 1 : 2;
}

static void setup_init(setup *s, int n, const int64_t *ids, int kind, int len, int table, int type) {
    memset(s, 0, sizeof *s);
    s->n = n;
    s->kind = kind;
    s->len = len;
    s->table = table;
    s->type = type;
    int c = (len + n - 1) / n;
    for (int r = 0; r < n; r++) {
        s->ids[r] = dt__xfer_key(type, ids[r]);
        s->local[r] = ids[r] < 7;
        s->nlocal += s->local[r];
        s->start[r] = r * c < len ? r * c : len;
        s->lens[r] = ((r + 1) * c < len ? (r + 1) * c : len) - s->start[r];
        s->lo[r] = (int64_t)len * r / n;
    }
    s->lo[n] = len;
    for (int r = 0; r < n; r++) {
        uint8_t *p = s->shapes + 8 * r, *q = s->starts + 8 * r, *l = s->lensb + 8 * r;
        dt__le_put(&p, (uint64_t)(kind == DT_COLL_ALLGATHER ? s->lens[r] : len), 8);
        dt__le_put(&q, (uint64_t)s->start[r], 8);
        dt__le_put(&l, (uint64_t)s->lens[r], 8);
    }
}

static dt__collattr attr_of(const setup *s, uint64_t group, uint64_t seq) {
    return (dt__collattr){.group = group,
                          .seq = seq,
                          .kind = s->kind,
                          .ndim = 1,
                          .n = s->n,
                          .type = DT_DEVICE_CPU,
                          .dtype = DT_FLOAT32,
                          .shapes = s->shapes,
                          .starts = s->starts,
                          .lens = s->lensb};
}

/* An all-reduce of two ranks sends the input whole (one round). */
static int direct(const setup *s) { return s->kind == DT_COLL_ALLREDUCE && s->n == 2; }

/* Rank r's input: its shard for an all-gather, the whole length else. */
static const float *input_of(const setup *s, float in[MAXN][MAXLEN], int r) {
    return s->kind == DT_COLL_ALLGATHER ? in[r] + s->start[r] : in[r];
}

/* The sum in rank order of element e. */
static float rank_sum(const setup *s, float in[MAXN][MAXLEN], int e) {
    float acc = in[0][e];
    for (int q = 1; q < s->n; q++)
        acc = acc + in[q][e];
    return acc;
}

/* One message expected from a local rank (from, to, dst, seq) with these
 * floats, or an error; matched once. */
typedef struct want_msg {
    int from, to;
    int64_t dst;
    uint64_t seq;
    float v[MAXLEN];
    int nv, error, seen;
} want_msg;

/* The messages a local rank r sends to other nodes in `round` (0, or 1 for
 * the all-reduce's second), appended to w. */
static int expect_round(const setup *s, float in[MAXN][MAXLEN], uint64_t seq, int round, int error,
                        want_msg *w, int k) {
    for (int r = 0; r < s->n; r++) {
        if (!s->local[r])
            continue;
        for (int p = 0; p < s->n; p++) {
            if (s->local[p])
                continue;
            int shared = 0, first = 1;
            for (int q = 0; q < s->n; q++)
                if (q != p && !s->local[q] && node_of(s, s->ids[q]) == node_of(s, s->ids[p])) {
                    shared = 1;
                    first &= q > p;
                }
            int whole = s->kind == DT_COLL_ALLGATHER || round == 1 || direct(s);
            if (whole && !first)
                continue;
            want_msg *m = &w[k++];
            *m = (want_msg){.from = r,
                            .to = whole && shared ? DT__XFER_SHARED : p,
                            .dst = s->ids[p],
                            .seq = round ? seq | ((uint64_t)1 << 63) : seq,
                            .error = error};
            if (s->kind == DT_COLL_ALLGATHER) {
                m->nv = (int)s->lens[r];
                memcpy(m->v, input_of(s, in, r), sizeof(float) * (size_t)m->nv);
            } else if (direct(s)) {
                m->nv = s->len;
                memcpy(m->v, in[r], sizeof(float) * (size_t)m->nv);
            } else if (s->kind == DT_COLL_REDUCESCATTER) {
                m->nv = (int)s->lens[p];
                memcpy(m->v, in[r] + s->start[p], sizeof(float) * (size_t)m->nv);
            } else if (round == 0) {
                m->nv = (int)(s->lo[p + 1] - s->lo[p]);
                memcpy(m->v, in[r] + s->lo[p], sizeof(float) * (size_t)m->nv);
            } else {
                m->nv = (int)(s->lo[r + 1] - s->lo[r]);
                for (int i = 0; i < m->nv; i++)
                    m->v[i] = rank_sum(s, in, (int)s->lo[r] + i);
            }
        }
    }
    return k;
}

/* Takes `k` messages from the outbox (waiting for wakes) and matches each
 * against w. */
static void check_posted(const setup *s, want_msg *w, int k, int *wakes_seen) {
    *wakes_seen += k;
    if (!wait_wakes(*wakes_seen)) {
        failures++;
        return;
    }
    int got = 0;
    for (dt__xfer_msg *m = dt__xfer_take(), *next; m; m = next) {
        next = m->next;
        const dt__xfer_hdr *h = &m->h;
        int found = 0;
        for (int i = 0; i < k && !found; i++) {
            want_msg *x = &w[i];
            if (x->seen || x->from != h->from || x->to != h->to || x->dst != h->dst_device ||
                x->seq != h->seq)
                continue;
            found = x->seen = 1;
            CHECK(h->tag == 9 && h->group == 77 && h->src_device == s->ids[h->from]);
            if (x->error) {
                CHECK(h->error[0] && !m->len);
            } else {
                CHECK(!h->error[0] && h->shape[0] == x->nv);
                CHECK_EQ(m->len, (size_t)x->nv * sizeof(float));
                if (m->len == (size_t)x->nv * sizeof(float) && m->len)
                    CHECK(memcmp(m->data, x->v, m->len) == 0);
            }
        }
        if (!found)
            fprintf(stderr, "test_xfer: an unexpected message from %d to %d (device %lld) seq %llx\n",
                    h->from, h->to, (long long)h->dst_device, (unsigned long long)h->seq);
        CHECK(found);
        got++;
        dt__xfer_msg_free(m);
    }
    CHECK_EQ(got, k);
}

/* Delivers remote rank q's message of `round` to this process's ranks:
 * shared when they both need the same bytes, else one per rank. With
 * `error`, the error instead of bytes. */
static void deliver_round(const setup *s, float in[MAXN][MAXLEN], uint64_t seq, int round,
                          const char *error) {
    for (int q = 0; q < s->n; q++) {
        if (s->local[q])
            continue;
        int whole = s->kind == DT_COLL_ALLGATHER || round == 1 || direct(s);
        for (int p = 0; p < s->n; p++) {
            if (!s->local[p])
                continue;
            const float *v;
            int nv;
            float red[MAXLEN];
            if (s->kind == DT_COLL_ALLGATHER) {
                v = input_of(s, in, q);
                nv = (int)s->lens[q];
            } else if (direct(s)) {
                v = in[q];
                nv = s->len;
            } else if (s->kind == DT_COLL_REDUCESCATTER) {
                v = in[q] + s->start[p];
                nv = (int)s->lens[p];
            } else if (round == 0) {
                v = in[q] + s->lo[p];
                nv = (int)(s->lo[p + 1] - s->lo[p]);
            } else {
                nv = (int)(s->lo[q + 1] - s->lo[q]);
                for (int i = 0; i < nv; i++)
                    red[i] = rank_sum(s, in, (int)s->lo[q] + i);
                v = red;
            }
            dt__xfer_msg *m = msg(round ? seq | ((uint64_t)1 << 63) : seq, q, whole ? DT__XFER_SHARED : p,
                                  s->ids[q], v, (size_t)nv);
            m->h.dst_device = s->ids[p];
            if (error) {
                snprintf(m->h.error, sizeof m->h.error, "%s", error);
                m->len = m->h.total = 0;
            }
            dt__xfer_deliver(m);
            if (whole)
                break;
        }
    }
}

typedef struct outcome {
    float v[MAXN][MAXLEN];
    char err[MAXN][700];
} outcome;

/* What befalls the other nodes' ranks in run_coll. */
enum { PLAY, LOSE, FAIL_FIRST, FAIL_SECOND };
#define FAILED_WHY "worker node 3 (127.0.0.1, pid 4242) could not run a batch: test"

/* Runs this process's ranks of s in threads and plays the others (`lose`:
 * LOSE, their node is lost instead; FAIL_FIRST, their node could not run
 * the collective's batch (a FAILED notice for their devices); FAIL_SECOND,
 * the same once the first round was exchanged, so that an all-reduce's
 * ranks wait in the second; `bad`: they send this error for their input). */
static void run_coll(dt__comm *c, uint64_t group, uint64_t seq, const setup *s, float in[MAXN][MAXLEN],
                     outcome *o, int lose, const char *bad) {
    rank_job j[MAXN];
    int wakes_seen = wakes_now();
    dt__collattr a = attr_of(s, group, seq);
    for (int r = 0; r < s->n; r++) {
        if (!s->local[r])
            continue;
        j[r] =
            (rank_job){.c = c,
                       .a = a,
                       .r = r,
                       .in = blob_of(input_of(s, in, r), a.kind == DT_COLL_ALLGATHER ? s->lens[r] : s->len)};
        j[r].out = dt__blob_new(be);
        CHECK_EQ(pthread_create(&j[r].t, NULL, run_rank, &j[r]), 0);
    }
    int spans = s->nlocal < s->n;
    if (spans && lose == LOSE) {
        usleep(30000);
        dt__xfer_lost(dt__xfer_key(s->type, 7), 4,
                      "worker node 3 (127.0.0.1, pid 4242) is lost: no heartbeat for 2300 ms");
    } else if (spans && lose == FAIL_FIRST) {
        usleep(30000);
        dt__xfer_fail_parts(9, 77, seq, dt__xfer_key(s->type, 7), 4, FAILED_WHY);
    } else if (spans && lose == FAIL_SECOND) {
        want_msg w[2 * MAXN * MAXN];
        int k = expect_round(s, in, seq, 0, 0, w, 0);
        check_posted(s, w, k, &wakes_seen);
        deliver_round(s, in, seq, 0, NULL);
        if (s->kind == DT_COLL_ALLREDUCE && !direct(s)) { /* the ranks wait for round 2 now */
            k = expect_round(s, in, seq, 1, 0, w, 0);
            check_posted(s, w, k, &wakes_seen);
        }
        dt__xfer_fail_parts(9, 77, seq, dt__xfer_key(s->type, 7), 4, FAILED_WHY);
    } else if (spans) {
        want_msg w[2 * MAXN * MAXN];
        int k = expect_round(s, in, seq, 0, 0, w, 0);
        check_posted(s, w, k, &wakes_seen);
        deliver_round(s, in, seq, 0, bad);
        if (s->kind == DT_COLL_ALLREDUCE && !direct(s)) {
            k = expect_round(s, in, seq, 1, bad != NULL, w, 0);
            check_posted(s, w, k, &wakes_seen);
            deliver_round(s, in, seq, 1, bad);
        }
    }
    int outlen = s->kind == DT_COLL_REDUCESCATTER ? -1 : s->len;
    for (int r = 0; r < s->n; r++) {
        if (!s->local[r])
            continue;
        pthread_join(j[r].t, NULL);
        const dt__blob *b = j[r].out;
        snprintf(o->err[r], sizeof o->err[r], "%s", b->error ? b->error : "");
        size_t nb = (size_t)(outlen < 0 ? s->lens[r] : outlen) * sizeof(float);
        char err[256];
        if (b->impl && !b->error) {
            CHECK_EQ(be->nbytes(b->impl), nb);
            if (be->nbytes(b->impl) == nb)
                CHECK_EQ(be->to_host(b->impl, o->v[r], nb, err, sizeof err), DT_OK);
        }
        dt__blob_release(j[r].in);
        dt__blob_release(j[r].out);
    }
}

/* Compares a spanning run with the in-process one of the same inputs,
 * rank by rank, and with the rank-order sums. */
static void compare(const setup *s, const outcome *got, const outcome *want, float in[MAXN][MAXLEN],
                    uint64_t seq) {
    for (int r = 0; r < s->n; r++) {
        if (!s->local[r])
            continue;
        CHECK_STREQ(got->err[r], "");
        int n = s->kind == DT_COLL_REDUCESCATTER ? (int)s->lens[r] : s->len;
        for (int i = 0; i < n; i++) {
            int e = s->kind == DT_COLL_REDUCESCATTER ? (int)s->start[r] + i : i;
            float hand = s->kind == DT_COLL_ALLGATHER ? in[0][e] : rank_sum(s, in, e);
            if (memcmp(&got->v[r][i], &want->v[r][i], sizeof(float)) != 0 || got->v[r][i] != hand) {
                fprintf(stderr, "%s n %d len %d seq %llu rank %d [%d]: %.9g, in-process %.9g, by hand %.9g\n",
                        kind_name[s->kind], s->n, s->len, (unsigned long long)seq, r, i, got->v[r][i],
                        want->v[r][i], hand);
                failures++;
            }
        }
    }
}

static void drain_outbox(void) {
    for (dt__xfer_msg *m = dt__xfer_take(), *next; m; m = next) {
        next = m->next;
        dt__xfer_msg_free(m);
    }
}

/* The spanning collectives of a group of devices of `type` (the ref
 * backend computes for either: what differs is the keys the messages, the
 * node table, losses and FAILED notices name), numbered from *seqp on. */
static void spanning(int type, uint64_t *seqp) {
    /* 1e8 + 4 rounds to 1e8, 4 + 4 + 1e8 does not: every order of the adds
     * but the rank order differs somewhere. An all-gather's inputs are the
     * shards of in[0] (every row holds the same values then). */
    float in[MAXN][MAXLEN];
    dt__comm *c = dt__comm_inproc.create(DT_DEVICE_CPU);
    /* Ranks on other nodes: one (device 7); two on one node, interleaved
     * with ours (7, 8); one on each of two nodes (7, 9); of two ranks, one
     * (an all-reduce sends its input whole then). */
    static const int64_t meshes[4][MAXN] = {{0, 1, 7}, {0, 7, 1, 8}, {0, 1, 7, 9}, {0, 7}};
    static const int sizes[4] = {3, 4, 4, 2};
    static const int lens[4] = {7, 12, 2, 0}; /* uneven, even, fewer than the ranks, empty */
    /* The node table: both types' devices on each node (a CPU group's
     * entries come first, a CUDA group's after them). */
    const int64_t cu = dt__xfer_key(DT_DEVICE_CUDA, 0);
    const int64_t first[6] = {0, 7, 9, cu, cu + 7, cu + 9}, count[6] = {7, 2, 2, 7, 2, 2};
    uint64_t seq = *seqp;
    for (int table = 0; table < 2; table++) {
        dt__xfer_set_layout(table ? 6 : 0, first, count);
        for (int mi = 0; mi < 4; mi++) {
            int n = sizes[mi];
            for (int r = 0; r < n; r++)
                for (int i = 0; i < MAXLEN; i++)
                    in[r][i] = i % n == r ? 1e8f : 4.0f + (float)i;
            const int64_t here[MAXN] = {0, 1, 2, 3};
            uint64_t span = 0, one = 0;
            CHECK_EQ(c->ops->group_create(c, n, meshes[mi], &span), DT_OK);
            CHECK_EQ(c->ops->group_create(c, n, here, &one), DT_OK); /* every device ours */
            CHECK_EQ(dt__comm_group_span(c, span, 9, 77, type, type), DT_OK);
            CHECK_EQ(dt__comm_group_span(c, one, 9, 78, type, type), DT_OK);
            for (int kind = DT_COLL_ALLGATHER; kind <= DT_COLL_REDUCESCATTER; kind++)
                for (int li = 0; li < 4; li++) {
                    if (kind == DT_COLL_ALLGATHER)
                        for (int r = 1; r < n; r++)
                            memcpy(in[r], in[0], sizeof in[0]);
                    setup sp, lo;
                    int64_t loc[MAXN];
                    for (int r = 0; r < n; r++)
                        loc[r] = r;
                    setup_init(&sp, n, meshes[mi], kind, lens[li], table, type);
                    setup_init(&lo, n, loc, kind, lens[li], table, type);
                    outcome got, want;
                    memset(&got, 0, sizeof got);
                    memset(&want, 0, sizeof want);
                    seq++;
                    run_coll(c, span, seq, &sp, in, &got, PLAY, NULL);
                    run_coll(c, one, seq, &lo, in, &want, PLAY, NULL);
                    compare(&sp, &got, &want, in, seq);
                    for (int r = 0; r < n; r++)
                        for (int i = 0; i < MAXLEN; i++)
                            in[r][i] = i % n == r ? 1e8f : 4.0f + (float)i;
                }
            /* A peer's input failed: every rank fails with its error, and
             * an all-reduce's ranks send the error on in the second round. */
            setup sp;
            setup_init(&sp, n, meshes[mi], DT_COLL_ALLREDUCE, 7, table, type);
            outcome got;
            run_coll(c, span, ++seq, &sp, in, &got, PLAY, "cpu:7: input failed (test)");
            for (int r = 0; r < n; r++)
                if (sp.local[r])
                    CHECK(
                        strstr(got.err[r], "all_reduce failed in a collective: cpu:7: input failed (test)"));
            c->ops->group_destroy(c, span);
            c->ops->group_destroy(c, one);
        }
    }
    /* The other nodes lost while this process's ranks wait: they fail,
     * naming the node. */
    uint64_t span = 0;
    CHECK_EQ(c->ops->group_create(c, 4, meshes[1], &span), DT_OK);
    CHECK_EQ(dt__comm_group_span(c, span, 9, 77, type, type), DT_OK);
    for (int kind = DT_COLL_ALLGATHER; kind <= DT_COLL_REDUCESCATTER; kind++) {
        setup sp;
        setup_init(&sp, 4, meshes[1], kind, 7, 1, type);
        outcome got;
        run_coll(c, span, ++seq, &sp, in, &got, LOSE, NULL);
        for (int r = 0; r < 4; r++)
            if (sp.local[r])
                CHECK(strstr(got.err[r],
                             "failed in a collective: worker node 3 (127.0.0.1, pid 4242) is lost"));
        drain_outbox();
    }
    c->ops->group_destroy(c, span);
    /* The other nodes could not run the collective's batch (FAILED notices,
     * keyed on the collective and their devices): the ranks here wake with
     * the reason whether they wait for a rank's part, a shared message or,
     * in an all-reduce's second round, a reduced range (numbered seq |
     * DT__XFER_ROUND2), and parts sent to those devices are dropped. */
    dt__xfer_start(&(dt__xfer_hooks){is_local, wake}); /* forgets the loss, and the table */
    dt__xfer_set_layout(6, first, count);
    for (int mode = FAIL_FIRST; mode <= FAIL_SECOND; mode++)
        for (int mi = 0; mi < 3; mi++) {
            int n = sizes[mi];
            CHECK_EQ(c->ops->group_create(c, n, meshes[mi], &span), DT_OK);
            CHECK_EQ(dt__comm_group_span(c, span, 9, 77, type, type), DT_OK);
            for (int kind = DT_COLL_ALLGATHER; kind <= DT_COLL_REDUCESCATTER; kind++) {
                if (mode == FAIL_SECOND && kind != DT_COLL_ALLREDUCE)
                    continue; /* one round: every part came, nothing to fail */
                setup sp;
                setup_init(&sp, n, meshes[mi], kind, 7, 1, type);
                outcome got;
                run_coll(c, span, ++seq, &sp, in, &got, mode, NULL);
                for (int r = 0; r < n; r++)
                    if (sp.local[r] && !strstr(got.err[r], FAILED_WHY)) {
                        fprintf(stderr, "test_xfer: mode %d mesh %d %s rank %d: '%s'\n", mode, mi,
                                kind_name[kind], r, got.err[r]);
                        failures++;
                    }
                drain_outbox();
                CHECK_EQ(dt__xfer_pending(), 0);
            }
            c->ops->group_destroy(c, span);
        }
    dt__xfer_set_layout(0, NULL, NULL);
    c->ops->destroy(c);
    *seqp = seq;
}

static void test_spanning(void) {
    be = dt__backend_find("ref");
    CHECK(be != NULL);
    if (!be)
        return;
    uint64_t seq = 0;
    spanning(DT_DEVICE_CPU, &seq);
    spanning(DT_DEVICE_CUDA, &seq);
}

/* Collective (9, 77, 30) gets no parts from devices 7 and 8 (their node
 * could not run its batch): a wait for one fails with the reason, now and
 * later; other collectives and other senders are untouched; parts for
 * those devices' ranks are dropped, queued or arriving. */
static void test_failed_parts(void) {
    const float v[2] = {4, 5};
    waiter w = {.seq = 30, .src = 7};
    CHECK_EQ(pthread_create(&w.t, NULL, wait_main, &w), 0);
    usleep(20000);
    dt__xfer_msg *to_failed = msg(30, 0, 2, 0, v, 2);
    to_failed->h.dst_device = 8;
    dt__xfer_deliver(to_failed);
    CHECK_EQ(dt__xfer_pending(), 1);
    dt__xfer_fail_parts(9, 77, 30, 7, 2, "worker node 2 could not run a batch");
    pthread_join(w.t, NULL);
    CHECK(!w.got && strstr(w.err, "worker node 2 could not run a batch"));
    CHECK_EQ(dt__xfer_pending(), 0); /* the part for device 8 was dropped */
    w = (waiter){.seq = 30, .src = 8};
    wait_main(&w);
    CHECK(!w.got && strstr(w.err, "could not run a batch"));
    to_failed = msg(30, 0, 2, 0, v, 2);
    to_failed->h.dst_device = 7;
    dt__xfer_deliver(to_failed);
    CHECK_EQ(dt__xfer_pending(), 0);
    dt__xfer_deliver(msg(31, 2, 0, 7, v, 2)); /* the next collective */
    dt__xfer_deliver(msg(30, 2, 0, 5, v, 2)); /* a sender on another node */
    w = (waiter){.seq = 31, .src = 7};
    wait_main(&w);
    CHECK(w.got && w.got->len == sizeof v);
    dt__xfer_msg_free(w.got);
    w = (waiter){.seq = 30, .src = 5};
    wait_main(&w);
    CHECK(w.got && memcmp(w.got->data, v, sizeof v) == 0);
    dt__xfer_msg_free(w.got);
    /* The same collective's second round (an all-reduce's all-gather) and
     * shared messages: a wait for either fails, and a shared message for
     * the failed devices (its dst_device one of them) is dropped, one
     * already half taken too (ASan: its payload outlives the taker's copy
     * and is freed once). */
    const uint64_t seq2 = 30 | DT__XFER_ROUND2;
    w = (waiter){.seq = seq2, .src = 7, .to = 1, .shares = 2};
    CHECK_EQ(pthread_create(&w.t, NULL, wait_main, &w), 0);
    pthread_join(w.t, NULL);
    CHECK(!w.got && strstr(w.err, "could not run a batch"));
    to_failed = msg(seq2, 0, DT__XFER_SHARED, 0, v, 2);
    to_failed->h.dst_device = 7;
    dt__xfer_deliver(to_failed);
    CHECK_EQ(dt__xfer_pending(), 0);
    dt__xfer_msg *half = msg(32, 2, DT__XFER_SHARED, 9, v, 2);
    half->h.dst_device = 8;
    dt__xfer_deliver(half);
    w = (waiter){.seq = 32, .src = 9, .to = 0, .shares = 2};
    wait_main(&w); /* one of two takers: the message stays */
    CHECK(w.got && w.got->len == sizeof v);
    dt__xfer_deliver(msg(33, 2, DT__XFER_SHARED, 9, v, 2)); /* dst_device 0 */
    CHECK_EQ(dt__xfer_pending(), 2);
    dt__xfer_fail_parts(9, 77, 32, 7, 2, "worker node 2 could not run a batch");
    CHECK_EQ(dt__xfer_pending(), 1); /* the half-taken one is gone */
    CHECK(w.got && memcmp(w.got->data, v, sizeof v) == 0);
    dt__xfer_msg_free(w.got);
    w = (waiter){.seq = 33, .src = 9, .to = 1, .shares = 1};
    wait_main(&w);
    CHECK(w.got && memcmp(w.got->data, v, sizeof v) == 0);
    dt__xfer_msg_free(w.got);
    CHECK_EQ(dt__xfer_pending(), 0);
}

int main(void) {
    static const dt__xfer_hooks hooks = {is_local, wake};
    dt__xfer_start(&hooks);
    test_mailbox();
    dt__xfer_start(&hooks); /* forgets the losses */
    test_shared_and_table();
    dt__xfer_start(&hooks);
    test_spanning();
    dt__xfer_start(&hooks);
    test_failed_parts();
    /* An abort wakes a wait for any other node, and stop frees what is left. */
    dt__xfer_deliver(msg(1, 2, 0, 3, (const float[]){1}, 1));
    dt__xfer_abort("the main node is gone");
    waiter w = {.seq = 9, .src = 3};
    wait_main(&w);
    CHECK(!w.got && strstr(w.err, "the main node is gone"));
    dt__xfer_stop();
    CHECK_EQ(dt__xfer_pending(), 0);
    if (failures)
        fprintf(stderr, "test_xfer: %d failures\n", failures);
    return failures != 0;
}
