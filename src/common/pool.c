/*
 * Object pools for the per-op records (nodes, tensors, values, kernels,
 * blobs). Each record is made on one thread and freed on another (client ->
 * controller -> worker), which is malloc's slow path: cross-thread frees
 * contend on arena locks. A pool keeps freed records on the freeing thread's
 * own list and moves them to a shared list in batches, and an allocating
 * thread refills its own list from the shared one a batch at a time, so the
 * shared lock is taken once per batch, not once per record.
 *
 * Threads: any. Lock: each pool's mutex, a leaf lock. A thread's cached
 * records go back to the shared list when the thread exits (pthread key
 * destructor), so nothing is lost with short-lived client threads.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/common.h"
#include "common/pool.h"

#define BATCH DT__POOL_BATCH
#define MAX_POOLS DT__POOL_MAX

/* A free record. The shared list holds whole batches: the first record of
 * each carries the link to the next batch and its record count, so moving a
 * batch in or out under the lock is O(1) and never walks records that
 * another core touched last (each would be a cache miss). */
typedef struct free_rec {
    struct free_rec *next;
    struct free_rec *next_batch; /* first record of a shared batch only */
    long n;                      /* first record of a shared batch only */
} free_rec;

/* A thread's list of one pool (pool.h's dt__pool_list: head is a
 * free_rec), and its lists of every pool in one thread-local block, so each
 * call resolves thread-local storage once (in a shared library every
 * distinct TLS variable costs a lookup). */
typedef dt__pool_list tls_list;
typedef struct dt__pool_lists tls_block;
static _Thread_local tls_block tls;

__attribute__((noinline)) static tls_block *my_block(void) { return &tls; }
static dt__pool *pools[MAX_POOLS];
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;

void dt__pool_fork_lock(int lock) {
    /* register_lock first (my_list takes no pool lock under it); pool locks
     * are leaves, so taking them all here cannot deadlock. */
    if (lock) {
        pthread_mutex_lock(&register_lock);
        for (int i = 0; i < MAX_POOLS; i++)
            if (pools[i])
                pthread_mutex_lock(&pools[i]->lock);
    } else {
        for (int i = MAX_POOLS - 1; i >= 0; i--)
            if (pools[i])
                pthread_mutex_unlock(&pools[i]->lock);
        pthread_mutex_unlock(&register_lock);
    }
}

/* Moves the list's records but `keep` to the shared list as one batch:
 * all of them (keep 0), or, when the list is full (2 * BATCH) and knows its
 * record BATCH + 1 from the bottom, its bottom BATCH records by one cut,
 * keeping the ones freed last (likeliest in this core's cache). Else the
 * top n - keep records, found by walking them. */
static void give_back(dt__pool *p, tls_list *l, int keep) {
    if (l->n <= keep)
        return;
    free_rec *first, *above = l->above;
    int moved = l->n - keep;
    if (!keep) {
        first = l->head;
        l->head = NULL;
    } else if (above && moved == BATCH && l->n == 2 * BATCH) {
        first = above->next; /* BATCH from the bottom: the batch's top */
        above->next = NULL;
    } else {
        free_rec *last = first = l->head;
        for (int i = 1; i < moved; i++)
            last = last->next;
        l->head = last->next;
        last->next = NULL;
    }
    l->n -= moved; /* BATCH or none: the next free to BATCH + 1 sets above */
    first->n = moved;
    pthread_mutex_lock(&p->lock);
    first->next_batch = p->head;
    p->head = first;
    pthread_mutex_unlock(&p->lock);
}

static void thread_exit(void *unused) {
    (void)unused;
    for (int i = 0; i < MAX_POOLS; i++)
        if (pools[i])
            give_back(pools[i], &tls.lists[i], 0);
}

static void make_key(void) { pthread_key_create(&exit_key, thread_exit); }

/* The calling thread's lists, the thread registered for its exit. */
static tls_block *my_registered_block(void) {
    tls_block *b = my_block();
    if (!b->registered) {
        pthread_once(&exit_once, make_key);
        pthread_setspecific(exit_key, (void *)1);
        b->registered = 1;
    }
    return b;
}

dt__pool_lists *dt__pool_my_lists(void) { return my_registered_block(); }

/* Returns the calling thread's list for pool p (`b`: its lists, NULL:
 * looked up), registering the pool and the thread on first use; NULL for a
 * pool that found no slot (more than MAX_POOLS pools), which then allocates
 * with calloc and frees with free. */
static tls_list *my_list(dt__pool *p, tls_block *b) {
    if (!__atomic_load_n(&p->registered, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&register_lock);
        if (!p->registered) {
            p->slot = -1; /* no slot left: the pool uses malloc directly */
            for (int i = 0; i < MAX_POOLS; i++) {
                if (!pools[i]) {
                    pools[i] = p;
                    p->slot = i;
                    break;
                }
            }
            __atomic_store_n(&p->registered, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&p->fast, p->slot + 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&register_lock);
    }
    if (p->slot < 0)
        return NULL;
    return &(b ? b : my_registered_block())->lists[p->slot];
}

/* Sanitizer builds use malloc directly, so ASan sees every use after free
 * and TSan every race on a record, instead of the pool hiding them. Stable
 * pools (handle records) keep their slabs there too, so a released handle's
 * magic stays readable; ASan then sees the free record poisoned but for its
 * link and its magic. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
/* A stable pool's free record: poisoned but for its link and its magic, so
 * ASan still reports any other use after free. */
static void poison_free(const dt__pool *p, char *obj) {
    size_t lo = (sizeof(free_rec) + 7) / 8 * 8;
    if (p->keep_off > lo)
        ASAN_POISON_MEMORY_REGION(obj + lo, p->keep_off - lo);
    size_t hi = p->keep_off + 8 > lo ? p->keep_off + 8 : lo;
    if (p->size > hi)
        ASAN_POISON_MEMORY_REGION(obj + hi, p->size - hi);
}
#define POISON_FREE(p, obj) poison_free((p), (char *)(obj))
#define UNPOISON(p, obj) ASAN_UNPOISON_MEMORY_REGION((obj), (p)->size)
#else
#define POISON_FREE(p, obj) ((void)0)
#define UNPOISON(p, obj) ((void)0)
#endif

/* New records come in slabs of BATCH, cache-line aligned: a record handed
 * between threads then spans as few lines as its size allows and shares none
 * with another, and a thread that runs ahead of the one freeing pays one
 * allocation per BATCH records. Slabs go back to the system only at exit. */
typedef struct slab {
    struct slab *next;
} slab;
#define LINE 64

static int refill_from_slab(dt__pool *p, tls_list *l) {
    size_t rsize = (p->size < sizeof(free_rec) ? sizeof(free_rec) : p->size);
    rsize = (rsize + LINE - 1) / LINE * LINE;
    char *mem = aligned_alloc(LINE, (BATCH + 1) * rsize); /* the first slot holds the slab link */
    if (!mem)
        return -1;
    slab *sl = (slab *)mem;
    pthread_mutex_lock(&p->lock);
    sl->next = p->slabs;
    p->slabs = sl;
    pthread_mutex_unlock(&p->lock);
    free_rec *head = NULL;
    for (int i = BATCH; i >= 1; i--) {
        free_rec *r = (free_rec *)(mem + (size_t)i * rsize);
        r->next = head;
        head = r;
    }
    l->head = head;
    l->n = BATCH;
    return 0;
}

/* Every record of a stable pool's slabs, live or free, under its lock (the
 * slabs only grow): `fn` reads the magic at keep_off first. */
void dt__pool_each(dt__pool *p, void (*fn)(void *rec, void *arg), void *arg) {
    size_t rsize = (p->size < sizeof(free_rec) ? sizeof(free_rec) : p->size);
    rsize = (rsize + LINE - 1) / LINE * LINE;
    pthread_mutex_lock(&p->lock);
    for (slab *sl = p->stable ? p->slabs : NULL; sl; sl = sl->next)
        for (int i = 1; i <= BATCH; i++)
            fn((char *)sl + (size_t)i * rsize, arg);
    pthread_mutex_unlock(&p->lock);
}

void *dt__pool_alloc(dt__pool *p) { return dt__pool_alloc_in_slow(p, NULL, p->size); }
void *dt__pool_alloc_prefix(dt__pool *p, size_t zeroed) { return dt__pool_alloc_in_slow(p, NULL, zeroed); }
void dt__pool_free(dt__pool *p, void *obj) { dt__pool_free_in_slow(p, NULL, obj); }

/* The list of pool p in `mine` (the caller's lists) without a call, once
 * the pool has its slot; else my_list. */
static inline tls_list *list_in(dt__pool *p, tls_block *mine) {
#ifndef DT_POOL_DIRECT
    tls_list *l = dt__pool_slot_list(p, mine);
    if (l)
        return l;
#endif
    return my_list(p, mine);
}

void *dt__pool_alloc_in_slow(dt__pool *p, dt__pool_lists *mine, size_t zeroed) {
    if (dt__fault_armed() && dt__fault_hit())
        return NULL;
#ifdef DT_POOL_DIRECT
    if (!p->stable)
        return calloc(1, p->size);
#endif
    tls_list *l = list_in(p, mine);
    if (!l) {
        DT_ASSERT(!p->stable); /* invariant: MAX_POOLS has a slot for every stable pool */
        return calloc(1, p->size);
    }
    if (!l->head) {
        pthread_mutex_lock(&p->lock);
        free_rec *b = p->head;
        if (b)
            p->head = b->next_batch;
        pthread_mutex_unlock(&p->lock);
        l->head = b;
        l->n = b ? (int)b->n : 0;
        l->above = NULL; /* a batch of more than BATCH (a thread's at its exit): not known */
    }
    if (!l->head && refill_from_slab(p, l) != 0)
        return NULL;
    free_rec *obj = l->head;
    UNPOISON(p, obj);
    l->head = obj->next;
    l->n--;
    if (zeroed)
        memset(obj, 0, zeroed < p->size ? zeroed : p->size);
    return obj;
}

void dt__pool_free_in_slow(dt__pool *p, dt__pool_lists *mine, void *obj) {
    if (!obj)
        return;
#ifdef DT_POOL_DIRECT
    if (!p->stable) {
        free(obj);
        return;
    }
#endif
    tls_list *l = list_in(p, mine);
    if (!l) {
        free(obj);
        return;
    }
    free_rec *r = obj;
    r->next = l->head;
    l->head = r;
    POISON_FREE(p, r);
    if (++l->n == BATCH + 1)
        l->above = r;
    if (l->n >= 2 * BATCH)
        give_back(p, l, BATCH);
}

/* Frees the slabs at exit so leak checkers see a clean process; not
 * while a program that never shut its graphs down still has workers running
 * (they may be using the pools). */
static int (*busy_fn)(void);

void dt__pool_set_busy_fn(int (*busy)(void)) { busy_fn = busy; }

__attribute__((destructor)) static void pools_cleanup(void) {
    if (busy_fn && busy_fn())
        return;
    for (int i = 0; i < MAX_POOLS; i++) {
        if (!pools[i])
            continue;
        thread_exit(NULL);
        for (slab *sl = pools[i]->slabs, *next; sl; sl = next) {
            next = sl->next;
            free(sl);
        }
        pools[i]->slabs = NULL;
        pools[i]->head = NULL;
    }
}
