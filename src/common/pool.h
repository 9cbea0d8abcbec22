/*
 * Object pools for fixed-size records made on one thread and freed on
 * another (see pool.c). Any thread may call these.
 */
#ifndef DT_POOL_H
#define DT_POOL_H

#include <pthread.h>
#include <stddef.h>

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
} dt__pool;

#define DT__POOL_INIT(record_size)                                                                           \
    { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, (record_size), 0, 0, 0, 0 }
/* A type-stable pool whose records keep the 8 bytes at `magic_off` readable. */
#define DT__POOL_INIT_STABLE(record_size, magic_off)                                                         \
    { PTHREAD_MUTEX_INITIALIZER, NULL, NULL, (record_size), 0, 0, 1, (magic_off) }

/* A zeroed record of the pool's size, or NULL when out of memory. */
void *dt__pool_alloc(dt__pool *p);
/* A record whose first `zeroed` bytes are zero and the rest undefined (for
 * hot paths that set every other field themselves). */
void *dt__pool_alloc_prefix(dt__pool *p, size_t zeroed);
/* Returns a record to the pool. NULL is ignored. */
void dt__pool_free(dt__pool *p, void *obj);
/* Whether worker threads still run (defined by the core; weak so the pool
 * stands alone): the exit-time cleanup then leaves the pools alone. */
int dt__pool_busy(void) __attribute__((weak));

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
void *dt__pool_alloc_in(dt__pool *p, dt__pool_lists *mine, size_t zeroed);
void dt__pool_free_in(dt__pool *p, dt__pool_lists *mine, void *obj);

/* Takes (1) or drops (0) every pool's lock, around fork() (graph.c). */
void dt__pool_fork_lock(int lock);

#endif /* DT_POOL_H */
