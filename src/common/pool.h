/*
 * Object pools for fixed-size records made on one thread and freed on
 * another (see pool.c). Any thread may call these.
 */
#ifndef DT_POOL_H
#define DT_POOL_H

#include <pthread.h>
#include <stddef.h>
#include <string.h>

#include "common/common.h"

typedef struct dt__pool {
    pthread_mutex_t lock;
    void *head;  /* shared free list, guarded by lock */
    void *slabs; /* every slab of records, guarded by lock (freed at exit) */
    size_t size;
    int slot;       /* index of this pool's thread-local list */
    int registered; /* set once, then read without the lock */
    /* Type-stable (handle records): always slabs, never malloc, even in the
     * sanitizer builds, so a released handle's magic stays readable. Under
     * ASan a free record is poisoned except its free-list link and the 8
     * bytes at keep_off (where the handle's magic lies). */
    int stable;
    size_t keep_off;
    /* slot + 1 once registered with a slot, else 0: the fast paths' one
     * load (set after registered and slot, with release order). */
    int fast;
} dt__pool;

#define DT__POOL_INIT(record_size)                                                                           \
    { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, (record_size), 0, 0, 0, 0, 0 }
/* A type-stable pool whose records keep the 8 bytes at `magic_off` readable. */
#define DT__POOL_INIT_STABLE(record_size, magic_off)                                                         \
    { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, (record_size), 0, 0, 1, (magic_off), 0 }

/* A zeroed record of the pool's size, or NULL when out of memory. */
void *dt__pool_alloc(dt__pool *p);
/* A record whose first `zeroed` bytes are zero and the rest undefined (for
 * hot paths that set every other field themselves). */
void *dt__pool_alloc_prefix(dt__pool *p, size_t zeroed);
/* Returns a record to the pool. NULL is ignored. */
void dt__pool_free(dt__pool *p, void *obj);
/* Calls fn on every record of a stable pool, live or free (a free one
 * keeps only its magic readable), under the pool's lock: fn must not use
 * the pool. Nothing for other pools. */
void dt__pool_each(dt__pool *p, void (*fn)(void *rec, void *arg), void *arg);
/* Registers the probe of whether threads that use the pools still run (the
 * core's workers; src/init.c registers it at start-up): the exit-time
 * cleanup then leaves the pools alone. Without one, the pools are freed. */
void dt__pool_set_busy_fn(int (*busy)(void));

/* A thread's own lists of every pool. A long-lived thread that allocates
 * and frees many records (the controller) looks them up once and passes
 * them to the _in forms, which then need no thread-local lookup (in a
 * shared library each costs a call to __tls_get_addr). Only the thread
 * that looked them up may pass them. */
typedef struct dt__pool_lists dt__pool_lists;
dt__pool_lists *dt__pool_my_lists(void);
/* dt__pool_alloc_prefix and dt__pool_free with the calling thread's lists
 * (dt__pool_my_lists; NULL: looked up). A caller that zeroes a constant
 * size itself passes zeroed 0: the compiler then inlines the stores. */
void *dt__pool_alloc_in_slow(dt__pool *p, dt__pool_lists *mine, size_t zeroed);
void dt__pool_free_in_slow(dt__pool *p, dt__pool_lists *mine, void *obj);

/* The layout behind dt__pool_lists, for the inline paths below (pool.c
 * owns it otherwise). A free record's first word links the next. */
#define DT__POOL_MAX 16
#define DT__POOL_BATCH 64
typedef struct dt__pool_list {
    void *head;
    int n;
    /* The record DT__POOL_BATCH + 1 from the list's bottom, set by the
     * free that makes it so, so that a full list hands its bottom batch
     * (this record's successors) to the shared list by one cut, without
     * walking records another core may have evicted (pool.c, give_back).
     * A record's place from the bottom does not change while it is on the
     * list, and the list grows one record at a time but for a refill
     * (which clears this: NULL, not known) and shrinks below that place
     * before it can grow past it again, so whenever n > BATCH the record
     * here is the one at that place, or NULL. */
    void *above;
} dt__pool_list;
struct dt__pool_lists {
    int registered;
    dt__pool_list lists[DT__POOL_MAX];
};
/* Sanitizer builds use malloc directly (pool.c says why): no inline path. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define DT_POOL_DIRECT 1
#endif

/* The caller's list of pool p once p has its slot (NULL: not yet, no
 * lists, or a sanitizer build). */
static inline dt__pool_list *dt__pool_slot_list(dt__pool *p, dt__pool_lists *mine) {
#ifdef DT_POOL_DIRECT
    (void)p;
    (void)mine;
    return NULL;
#else
    int f = __atomic_load_n(&p->fast, __ATOMIC_ACQUIRE);
    return mine && f ? &mine->lists[f - 1] : NULL;
#endif
}

/* The list an inline allocation may use: the slot's, while no allocation
 * fault is armed. */
static inline dt__pool_list *dt__pool_fast_list(dt__pool *p, dt__pool_lists *mine) {
    dt__pool_list *l = dt__pool_slot_list(p, mine);
    return l && !dt__fault_armed() ? l : NULL;
}

/* A record from the caller's list without a call when it has one (the
 * first `zeroed` bytes zero). */
static inline void *dt__pool_alloc_in(dt__pool *p, dt__pool_lists *mine, size_t zeroed) {
    dt__pool_list *l = dt__pool_fast_list(p, mine);
    if (!l || !l->head)
        return dt__pool_alloc_in_slow(p, mine, zeroed);
    void *obj = l->head;
    l->head = *(void **)obj;
    l->n--;
    if (zeroed)
        memset(obj, 0, zeroed < p->size ? zeroed : p->size);
    return obj;
}

/* A record back to the caller's list without a call while it is short. */
static inline void dt__pool_free_in(dt__pool *p, dt__pool_lists *mine, void *obj) {
    /* A free cannot fail: no fault check (dt__pool_fast_list's is for allocations). */
    dt__pool_list *l = obj ? dt__pool_slot_list(p, mine) : NULL;
    if (!l || l->n + 1 >= 2 * DT__POOL_BATCH) {
        dt__pool_free_in_slow(p, mine, obj);
        return;
    }
    *(void **)obj = l->head;
    l->head = obj;
    if (++l->n == DT__POOL_BATCH + 1)
        l->above = obj;
}

/* Takes (1) or drops (0) every pool's lock, around fork() (graph.c). */
void dt__pool_fork_lock(int lock);

#endif /* DT_POOL_H */
