/*
 * Record pools (src/common/pool.c): records come back zeroed (or with the
 * requested prefix zeroed), distinct while live, cache-line aligned outside
 * the sanitizer builds (which use malloc directly), freed on one thread and
 * reused on another, and more pools than the thread-local table holds still
 * give records of their own size.
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

int main(void) {
    test_zeroed_and_distinct();
    test_cross_thread();
    test_many_pools();
    if (failures) {
        fprintf(stderr, "test_pool: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_pool: all passed\n");
    return 0;
}
