/*
 * Record pools (src/common/pool.c): records come back zeroed (or with the
 * requested prefix zeroed), distinct while live, cache-line aligned outside
 * the sanitizer builds (which use malloc directly), freed on one thread and
 * reused on another, and more pools than the thread-local table holds still
 * give records of their own size. A thread's list hands whole batches to
 * the shared list without losing or doubling a record.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pool.h"
#include "test_util.h"

enum { N = 1000 };

typedef struct rec {
    uint64_t words[24]; /* 192 bytes: three cache lines */
} rec;

static dt__pool pool = DT__POOL_INIT(sizeof(rec));

static int all_zero(const void *p, size_t n) {
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i])
            return 0;
    return 1;
}

static void test_zeroed_and_distinct(void) {
    rec **rs = calloc(N, sizeof *rs);
    for (int i = 0; i < N; i++) {
        rs[i] = dt__pool_alloc(&pool);
        CHECK(rs[i] != NULL);
        CHECK(all_zero(rs[i], sizeof(rec)));
        memset(rs[i], 0xab, sizeof(rec)); /* dirty it for the next round */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        CHECK_EQ((uintptr_t)rs[i] % 64, 0);
#endif
    }
    /* Live records never overlap. */
    for (int i = 1; i < N; i++)
        for (int j = 0; j < i; j += 97)
            CHECK(rs[i] != rs[j]);
    for (int i = 0; i < N; i++)
        dt__pool_free(&pool, rs[i]);
    /* Reused records are zeroed again; a prefix request zeroes only that. */
    for (int i = 0; i < N; i++) {
        rs[i] = dt__pool_alloc(&pool);
        CHECK(all_zero(rs[i], sizeof(rec)));
        memset(rs[i], 0xcd, sizeof(rec));
    }
    for (int i = 0; i < N; i++)
        dt__pool_free(&pool, rs[i]);
    rec *p = dt__pool_alloc_prefix(&pool, 16);
    CHECK(all_zero(p, 16));
    dt__pool_free(&pool, p);
    dt__pool_free(&pool, NULL); /* ignored */
    free(rs);
}

/* Made on one thread, freed on another, as nodes and kernels are. */
static rec *handoff[N];

static void *freer(void *arg) {
    (void)arg;
    for (int i = 0; i < N; i++)
        dt__pool_free(&pool, handoff[i]);
    return NULL;
}

static void test_cross_thread(void) {
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < N; i++) {
            handoff[i] = dt__pool_alloc(&pool);
            CHECK(handoff[i] != NULL && all_zero(handoff[i], sizeof(rec)));
            handoff[i]->words[0] = (uint64_t)i;
        }
        pthread_t t;
        CHECK_EQ(pthread_create(&t, NULL, freer, NULL), 0);
        pthread_join(t, NULL);
    }
}

/* More pools than the thread-local table has slots: each still hands out
 * records of its own size (a pool that found no slot must not share
 * another's list). */
typedef struct small {
    uint64_t a;
} small;
typedef struct large {
    uint64_t words[64];
} large;
static dt__pool many[12] = {
    DT__POOL_INIT(sizeof(small)), DT__POOL_INIT(sizeof(large)), DT__POOL_INIT(sizeof(small)),
    DT__POOL_INIT(sizeof(large)), DT__POOL_INIT(sizeof(small)), DT__POOL_INIT(sizeof(large)),
    DT__POOL_INIT(sizeof(small)), DT__POOL_INIT(sizeof(large)), DT__POOL_INIT(sizeof(small)),
    DT__POOL_INIT(sizeof(large)), DT__POOL_INIT(sizeof(small)), DT__POOL_INIT(sizeof(large)),
};

static void test_many_pools(void) {
    void *got[12][8];
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 12; i++) {
            got[i][k] = dt__pool_alloc(&many[i]);
            CHECK(got[i][k] != NULL);
            /* Writing the whole record must not touch any other live record. */
            memset(got[i][k], i + 1, many[i].size);
        }
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 12; i++) {
            const unsigned char *c = got[i][k];
            int intact = 1;
            for (size_t b = 0; b < many[i].size; b++)
                intact &= c[b] == (unsigned char)(i + 1);
            if (!intact) {
                fprintf(stderr, "%s:%d: pool %d record %d was overwritten\n", __FILE__, __LINE__, i, k);
                failures++;
            }
        }
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 12; i++)
            dt__pool_free(&many[i], got[i][k]);
}

/* One thread's walk of allocations and frees, through the calls and the
 * inline forms, that takes its list across BATCH + 1 and 2 * BATCH many
 * times (each crossing of 2 * BATCH hands a batch to the shared list, by
 * the cut or the walk). Its own pool, first taken to exactly M records (M
 * a multiple of the slabs' BATCH): with fewer than M live there is always a
 * free one, so every record handed out later is one of those M (a record
 * lost by a wrong cut would force a new slab) and none is handed out twice
 * (a record both kept and moved). Sanitizer builds allocate directly: only
 * the second holds there. */
static dt__pool walk_pool = DT__POOL_INIT(sizeof(rec));

static void test_batches_by_cut(void) {
    enum { M = 6 * DT__POOL_BATCH };
    void **live = calloc(M, sizeof *live), **first = calloc(M, sizeof *first);
    dt__pool_lists *mine = dt__pool_my_lists();
    for (int i = 0; i < M; i++)
        live[i] = first[i] = dt__pool_alloc(&walk_pool);
    int nlive = M, foreign = 0, twice = 0;
    uint32_t x = 12345;
    /* Bursts of frees and allocations of random length, alternating. */
    for (int step = 0; step < 4000; step++) {
        x = x * 1103515245u + 12345u;
        int burst = 1 + (int)((x >> 16) % (3 * DT__POOL_BATCH / 2));
        int freeing = step % 2 == 0;
        for (int b = 0; b < burst; b++) {
            int inl = (x >> (b % 13)) & 1;
            if (freeing && nlive > 0) {
                int i = (int)((x >> 8) % (uint32_t)nlive);
                void *r = live[i];
                live[i] = live[--nlive];
                ((rec *)r)->words[5] = 0xfeed; /* dirty past the free list's words */
                if (inl)
                    dt__pool_free_in(&walk_pool, mine, r);
                else
                    dt__pool_free(&walk_pool, r);
            } else if (!freeing && nlive < M) {
                rec *r = inl ? dt__pool_alloc_in(&walk_pool, mine, sizeof(rec)) : dt__pool_alloc(&walk_pool);
                CHECK(r != NULL && all_zero(r, sizeof *r));
                for (int j = 0; j < nlive; j++)
                    twice += live[j] == r;
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
                int known = 0;
                for (int j = 0; j < M && !known; j++)
                    known = first[j] == r;
                foreign += !known;
#endif
                live[nlive++] = r;
            }
        }
    }
    CHECK_EQ(twice, 0);
    CHECK_EQ(foreign, 0);
    while (nlive > 0)
        dt__pool_free_in(&walk_pool, mine, live[--nlive]);
    free(live);
    free(first);
}

/* A batch of more than BATCH on the shared list (a thread's records at its
 * exit): the thread that takes it cannot know its record BATCH + 1 from the
 * bottom, so when it fills its list it hands a batch over by walking, not
 * by cutting at the record it knew before (taken since). */
static dt__pool exit_pool = DT__POOL_INIT(sizeof(rec));
static void *exit_recs[100];

static void *exit_freer(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++)
        dt__pool_free(&exit_pool, exit_recs[i]);
    return NULL; /* its list of 100 goes to the shared list whole */
}

static void test_exit_batch(void) {
    enum { M = 6 * DT__POOL_BATCH };
    void **live = calloc(M, sizeof *live), **first = calloc(M, sizeof *first);
    for (int i = 0; i < M; i++)
        live[i] = first[i] = dt__pool_alloc(&exit_pool);
    /* This thread's list to BATCH + 1 and back to empty: the record it
     * knew at BATCH + 1 is live again. */
    for (int i = 0; i <= DT__POOL_BATCH; i++)
        dt__pool_free(&exit_pool, live[M - 1 - i]);
    for (int i = 0; i <= DT__POOL_BATCH; i++)
        live[M - 1 - i] = dt__pool_alloc(&exit_pool);
    for (int i = 0; i < 100; i++)
        exit_recs[i] = live[i];
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, exit_freer, NULL), 0);
    pthread_join(t, NULL);
    /* One taken (the list refilled with the 100), then enough freed to
     * fill it (not the live record it knew): a batch goes to the shared
     * list. */
    enum { REST = 100 + 2 * DT__POOL_BATCH - 99 };
    live[0] = dt__pool_alloc(&exit_pool);
    for (int i = 100; i < REST; i++)
        dt__pool_free(&exit_pool, live[i]);
    /* Everything back, then taken again: M distinct records, each one of
     * the first M. */
    dt__pool_free(&exit_pool, live[0]);
    for (int i = REST; i < M; i++)
        dt__pool_free(&exit_pool, live[i]);
    int nlive = 0;
    for (int i = 0; i < M; i++)
        live[i] = dt__pool_alloc(&exit_pool);
    for (int i = 0; i < M; i++) {
        int known = 0;
        for (int j = 0; j < M && !known; j++)
            known = first[j] == live[i];
        nlive += known;
        for (int j = 0; j < i; j++)
            CHECK(live[j] != live[i]);
    }
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
    CHECK_EQ(nlive, M);
#endif
    for (int i = 0; i < M; i++)
        dt__pool_free(&exit_pool, live[i]);
    free(live);
    free(first);
}

int main(void) {
    test_zeroed_and_distinct();
    test_cross_thread();
    test_many_pools();
    test_batches_by_cut();
    test_exit_batch();
    if (failures) {
        fprintf(stderr, "test_pool: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_pool: all passed\n");
    return 0;
}
