/*
 * Groups spanning nodes over NCCL: the choice and the unique-id table
 * (span_nccl.h). Threads: any; `lock` guards the table and is a leaf.
 */
#include "comm/span_nccl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"

static const char *who(const dt__span_proc *p, char *buf, size_t len) {
    if (p->proc < 0)
        snprintf(buf, len, "the main node");
    else
        snprintf(buf, len, "worker node %d", p->proc);
    return buf;
}

int dt__span_nccl_choose(int n, const dt__span_proc *procs, char *why, size_t whylen) {
    char a[48], b[48];
    const char *env = getenv("DTORCH_SPAN_NCCL");
    if (env && !strcmp(env, "0")) {
        snprintf(why, whylen, "DTORCH_SPAN_NCCL=0");
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (!procs[i].nccl) {
            snprintf(why, whylen, "%s cannot use NCCL (no libnccl, no torch_cuda backend, or no GPU)",
                     who(&procs[i], a, sizeof a));
            return 0;
        }
        if (procs[i].virtual_gpus) {
            snprintf(why, whylen,
                     "%s runs several logical devices on one GPU (DTORCH_DTENSOR_IN_SAME_DEVICE=1), which "
                     "NCCL refuses",
                     who(&procs[i], a, sizeof a));
            return 0;
        }
        for (int j = 0; j < i; j++)
            if (procs[j].proc != procs[i].proc && procs[i].host && procs[j].host &&
                !strcmp(procs[i].host, procs[j].host)) {
                snprintf(why, whylen, "%s and %s run on one host (%s), where their ranks may share a GPU",
                         who(&procs[j], a, sizeof a), who(&procs[i], b, sizeof b), procs[i].host);
                return 0;
            }
    }
    if (why && whylen)
        why[0] = 0;
    return 1;
}

typedef struct ident {
    struct ident *next;
    uint32_t tag;
    uint64_t key;
    int nranks;
    uint8_t id[DT__SPAN_NCCL_ID];
} ident;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ident *table;

void dt__span_nccl_put(uint32_t tag, uint64_t key, int nranks, const uint8_t id[DT__SPAN_NCCL_ID]) {
    pthread_mutex_lock(&lock);
    ident *e = table;
    while (e && (e->tag != tag || e->key != key))
        e = e->next;
    if (!e && (e = dt__calloc(1, sizeof *e))) {
        e->tag = tag;
        e->key = key;
        e->next = table;
        table = e;
    }
    /* Out of memory: that process's ranks would stage through host memory
     * while the others wait in NCCL, a hang like any collective out of
     * memory on one rank. */
    if (e) {
        e->nranks = nranks;
        memcpy(e->id, id, DT__SPAN_NCCL_ID);
    }
    pthread_mutex_unlock(&lock);
}

int dt__span_nccl_get(uint32_t tag, uint64_t key, int *nranks, uint8_t id[DT__SPAN_NCCL_ID]) {
    pthread_mutex_lock(&lock);
    ident *e = table;
    while (e && (e->tag != tag || e->key != key))
        e = e->next;
    if (e) {
        *nranks = e->nranks;
        memcpy(id, e->id, DT__SPAN_NCCL_ID);
    }
    pthread_mutex_unlock(&lock);
    return e != NULL;
}

void dt__span_nccl_clear(void) {
    pthread_mutex_lock(&lock);
    while (table) {
        ident *e = table;
        table = e->next;
        dt__free(e);
    }
    pthread_mutex_unlock(&lock);
}
