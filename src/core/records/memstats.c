/*
 * Per-device accounting of live blob bytes (dt_memory_stats), keyed by
 * (device type, id) without a cap: a record per device is made the first
 * time a stream starts on it (or stats ask for it) and kept for the
 * process's life, so blobs and streams hold plain pointers to it.
 *
 * Threads: dt__mem_charge runs on any thread (the worker that produces a
 * blob, whoever frees it) and touches only the record's atomics. The table
 * (an open-addressing hash with linear probing, at most half full) and the
 * list of records are guarded by mem_lock, a leaf lock taken only when a
 * stream starts and by the dt_memory_* calls.
 */
#include <pthread.h>

#include "core/records/memstats.h"

struct dt__memdev {
    int type;
    int64_t id;
    _Atomic int64_t current, peak;
    struct dt__memdev *next; /* guarded by mem_lock: every record, for resets */
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static dt__memdev **mem_table; /* guarded by mem_lock */
static size_t mem_cap, mem_n;
static dt__memdev *mem_all;

static size_t mem_hash(int type, int64_t id) {
    uint64_t h = ((uint64_t)id * 2 + (uint64_t)type) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h ^ (h >> 31));
}

/* The record of (type, id) or NULL (mem_lock held). */
static dt__memdev *find_locked(int type, int64_t id) {
    if (!mem_cap)
        return NULL;
    for (size_t i = mem_hash(type, id) & (mem_cap - 1); mem_table[i]; i = (i + 1) & (mem_cap - 1))
        if (mem_table[i]->id == id && mem_table[i]->type == type)
            return mem_table[i];
    return NULL;
}

static void put_locked(dt__memdev **table, size_t cap, dt__memdev *d) {
    size_t i = mem_hash(d->type, d->id) & (cap - 1);
    while (table[i])
        i = (i + 1) & (cap - 1);
    table[i] = d;
}

dt__memdev *dt__memdev_get(int type, int64_t id) {
    pthread_mutex_lock(&mem_lock);
    dt__memdev *d = find_locked(type, id);
    if (d) {
        pthread_mutex_unlock(&mem_lock);
        return d;
    }
    if ((mem_n + 1) * 2 > mem_cap) {
        size_t ncap = mem_cap ? mem_cap * 2 : 16;
        dt__memdev **nt = dt__calloc(ncap, sizeof *nt);
        if (!nt) {
            pthread_mutex_unlock(&mem_lock);
            dt__error(DT_ENOMEM, "memory stats: out of memory");
            return NULL;
        }
        for (size_t i = 0; i < mem_cap; i++)
            if (mem_table[i])
                put_locked(nt, ncap, mem_table[i]);
        dt__free(mem_table);
        mem_table = nt;
        mem_cap = ncap;
    }
    d = dt__calloc(1, sizeof *d);
    if (!d) {
        pthread_mutex_unlock(&mem_lock);
        dt__error(DT_ENOMEM, "memory stats: out of memory");
        return NULL;
    }
    d->type = type;
    d->id = id;
    put_locked(mem_table, mem_cap, d);
    mem_n++;
    d->next = mem_all;
    mem_all = d;
    pthread_mutex_unlock(&mem_lock);
    return d;
}

void dt__mem_charge(dt__memdev *d, int64_t delta) {
    if (!d || delta == 0)
        return;
    int64_t now = atomic_fetch_add(&d->current, delta) + delta;
    int64_t peak = atomic_load(&d->peak);
    while (now > peak && !atomic_compare_exchange_weak(&d->peak, &peak, now)) {
    }
}

dt_status dt_memory_stats(dt_device_type type, int64_t device_id, int64_t *current_bytes,
                          int64_t *peak_bytes) {
    if ((type != DT_DEVICE_CPU && type != DT_DEVICE_CUDA) || device_id < 0)
        return dt__error(DT_EINVAL, "memory_stats: device %lld is not a valid device", (long long)device_id);
    int64_t c = 0, p = 0;
    pthread_mutex_lock(&mem_lock);
    dt__memdev *d = find_locked((int)type, device_id);
    if (d) {
        c = atomic_load(&d->current);
        p = atomic_load(&d->peak);
    }
    pthread_mutex_unlock(&mem_lock);
    if (current_bytes)
        *current_bytes = c;
    if (peak_bytes)
        *peak_bytes = p;
    return DT_OK;
}

void dt_reset_peak_memory_stats(void) {
    pthread_mutex_lock(&mem_lock);
    for (dt__memdev *d = mem_all; d; d = d->next)
        atomic_store(&d->peak, atomic_load(&d->current));
    pthread_mutex_unlock(&mem_lock);
}

void dt_empty_cache(void) { dt__backends_empty_cache(); }

int64_t dt_memory_cached_bytes(void) { return dt__backends_cached_bytes(); }
