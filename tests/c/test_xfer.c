/*
 * Data between nodes without a network (dist/xfer.h, dist/coll_span.c):
 * the mailbox's waits wake on delivery, on a node's loss and on an abort;
 * and a spanning group's collectives, two of its three ranks in this
 * process and the third played by the test through the outbox and the
 * mailbox (as the transport's thread would), give bit for bit what the
 * in-process comm gives for the same three inputs, and the float sums in
 * rank order computed here. A rank waiting for a node that is lost fails
 * with the node's error, and one waiting for the parts of a collective
 * whose batch a node could not run fails with that reason. Under ASan/TSan
 * in the sanitizer builds.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/blob.h"
#include "dist/coll.h"
#include "dist/comm.h"
#include "dist/xfer.h"
#include "test_util.h"

static pthread_mutex_t wmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wcond = PTHREAD_COND_INITIALIZER;
static int wakes;

static int is_local(int64_t id) { return id < 3; } /* devices 0, 1 and 2 are ours */

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

/* Waits until `n` wakes were seen in all (the transport's poll). */
static void wait_wakes(int n) {
    pthread_mutex_lock(&wmu);
    while (wakes < n)
        pthread_cond_wait(&wcond, &wmu);
    pthread_mutex_unlock(&wmu);
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
    dt__xfer_msg *got;
    char err[DT__XFER_TEXT];
} waiter;

static void *wait_main(void *arg) {
    waiter *w = arg;
    w->got = dt__xfer_wait(9, 77, w->seq, 2, 0, w->src, w->err, sizeof w->err);
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

/* ------------------------------------------------- a spanning collective */

enum { N = 3, LEN = 6 };
static const dt__backend *be;

typedef struct rank_job {
    pthread_t t;
    dt__comm *c;
    dt__collattr a;
    int r;
    dt__blob *in, *out;
} rank_job;

static void *run_rank(void *arg) {
    rank_job *j = arg;
    j->c->ops->run(j->c, &j->a, j->r, j->in, j->out, "all_reduce");
    return NULL;
}

static dt__blob *blob_of(const float *v, int64_t n) {
    dt__blob *b = dt__blob_new(be);
    char err[256];
    CHECK_EQ(be->from_host(DT_FLOAT32, 1, &n, v, &b->impl, err, sizeof err), DT_OK);
    return b;
}

static void read_blob(const dt__blob *b, float *v, size_t n) {
    char err[256];
    CHECK(b->impl && !b->error);
    if (b->impl)
        CHECK_EQ(be->to_host(b->impl, v, n * sizeof *v, err, sizeof err), DT_OK);
}

static uint8_t shapes[N * 8], starts[N * 8], lens[N * 8];

static dt__collattr attr(uint64_t group, uint64_t seq, int kind) {
    for (int r = 0; r < N; r++) {
        uint8_t *p = shapes + 8 * r, *s = starts + 8 * r, *l = lens + 8 * r;
        dt__le_put(&p, LEN, 8);
        dt__le_put(&s, 2 * r, 8);
        dt__le_put(&l, 2, 8);
    }
    return (dt__collattr){.group = group,
                          .seq = seq,
                          .kind = kind,
                          .ndim = 1,
                          .n = N,
                          .type = DT_DEVICE_CPU,
                          .dtype = DT_FLOAT32,
                          .shapes = shapes,
                          .starts = starts,
                          .lens = lens};
}

/* Runs ranks [0, nrun) of `kind` in threads; the others' parts come from
 * the test (remote rank 2: takes ranks 0 and 1's messages, checks them,
 * delivers its own) unless `lose` is set, then rank 2's node is lost. */
static void run_coll(dt__comm *c, uint64_t group, uint64_t seq, int kind, int nrun, float in[N][LEN],
                     float out[N][LEN], int lose, char errs[N][700]) {
    rank_job j[N];
    int wakes0 = wakes_now();
    dt__collattr a = attr(group, seq, kind);
    for (int r = 0; r < nrun; r++) {
        j[r] = (rank_job){.c = c, .a = a, .r = r, .in = blob_of(in[r], LEN)};
        j[r].out = dt__blob_new(be);
        CHECK_EQ(pthread_create(&j[r].t, NULL, run_rank, &j[r]), 0);
    }
    if (nrun < N && !lose) {
        int sliced = kind == DT_COLL_REDUCESCATTER;
        wait_wakes(wakes0 + 2);
        int seen = 0;
        for (dt__xfer_msg *m = dt__xfer_take(), *next; m; m = next) {
            next = m->next;
            const dt__xfer_hdr *h = &m->h;
            CHECK(h->to == 2 && h->dst_device == 7 && h->group == 77 && h->tag == 9 && h->seq == seq);
            CHECK(h->from == 0 || h->from == 1);
            size_t n = sliced ? 2 : LEN;
            CHECK_EQ(m->len, n * sizeof(float));
            if (m->len == n * sizeof(float) && (h->from == 0 || h->from == 1))
                CHECK(memcmp(m->data, in[h->from] + (sliced ? 4 : 0), m->len) == 0);
            seen++;
            dt__xfer_msg_free(m);
        }
        CHECK_EQ(seen, 2);
        for (int to = 0; to < 2; to++) {
            dt__xfer_msg *m = msg(seq, 2, to, 7, in[2] + (sliced ? 2 * to : 0), sliced ? 2 : LEN);
            m->h.dst_device = to;
            dt__xfer_deliver(m);
        }
    } else if (lose) {
        usleep(30000);
        dt__xfer_lost(7, 1, "worker node 3 (127.0.0.1, pid 4242) is lost: no heartbeat for 2300 ms");
    }
    for (int r = 0; r < nrun; r++) {
        pthread_join(j[r].t, NULL);
        if (errs)
            snprintf(errs[r], 700, "%s", j[r].out->error ? j[r].out->error : "");
        else
            read_blob(j[r].out, out[r], kind == DT_COLL_REDUCESCATTER ? 2 : LEN);
        dt__blob_release(j[r].in);
        dt__blob_release(j[r].out);
    }
}

static void drain_outbox(void) {
    for (dt__xfer_msg *m = dt__xfer_take(), *next; m; m = next) {
        next = m->next;
        dt__xfer_msg_free(m);
    }
}

static void test_spanning(void) {
    be = dt__backend_find("ref");
    CHECK(be != NULL);
    if (!be)
        return;
    float in[N][LEN];
    for (int r = 0; r < N; r++)
        for (int i = 0; i < LEN; i++)            /* 1e8 + 4 rounds to 1e8, 4 + 4 + 1e8 does not: every */
            in[r][i] = i % N == r ? 1e8f : 4.0f; /* order of the adds but 0, 1, 2 differs somewhere */
    dt__comm *c = dt__comm_inproc.create(DT_DEVICE_CPU);
    const int64_t ids[N] = {0, 1, 7}, here[N] = {0, 1, 2};
    uint64_t span = 0, one = 0;
    CHECK_EQ(c->ops->group_create(c, N, ids, &span), DT_OK);
    CHECK_EQ(c->ops->group_create(c, N, here, &one), DT_OK); /* every device ours */
    CHECK_EQ(dt__comm_group_span(c, span, 9, 77, DT_DEVICE_CPU, DT_DEVICE_CPU), DT_OK);
    CHECK_EQ(dt__comm_group_span(c, one, 9, 78, DT_DEVICE_CPU, DT_DEVICE_CPU), DT_OK);
    for (int kind = DT_COLL_ALLREDUCE; kind <= DT_COLL_REDUCESCATTER; kind++)
        for (uint64_t seq = 1; seq <= 3; seq++) {
            float got[N][LEN], want[N][LEN];
            run_coll(c, span, seq, kind, 2, in, got, 0, NULL);
            run_coll(c, one, seq, kind, N, in, want, 0, NULL);
            for (int r = 0; r < 2; r++)
                for (int i = 0; i < (kind == DT_COLL_ALLREDUCE ? LEN : 2); i++) {
                    int e = kind == DT_COLL_ALLREDUCE ? i : 2 * r + i;
                    float rank_order = (in[0][e] + in[1][e]) + in[2][e];
                    if (got[r][i] != want[r][i] || got[r][i] != rank_order) {
                        fprintf(stderr,
                                "kind %d seq %llu rank %d [%d]: %.9g, in-process %.9g, by hand %.9g\n", kind,
                                (unsigned long long)seq, r, i, got[r][i], want[r][i], rank_order);
                        failures++;
                    }
                }
        }
    /* Rank 2's node lost while ranks 0 and 1 wait: both fail, naming it. */
    char errs[N][700];
    run_coll(c, span, 4, DT_COLL_ALLREDUCE, 2, in, NULL, 1, errs);
    for (int r = 0; r < 2; r++)
        CHECK(strstr(errs[r],
                     "all_reduce failed in a collective: worker node 3 (127.0.0.1, pid 4242) is lost"));
    drain_outbox();
    c->ops->group_destroy(c, span);
    c->ops->group_destroy(c, one);
    c->ops->destroy(c);
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
}

int main(void) {
    static const dt__xfer_hooks hooks = {is_local, wake};
    dt__xfer_start(&hooks);
    test_mailbox();
    dt__xfer_start(&hooks); /* forgets the losses */
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
