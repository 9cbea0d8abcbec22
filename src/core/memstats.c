/*
 * Per-device accounting of live blob bytes (dt_memory_stats). Counters are
 * atomics in a fixed table per device type; any thread updates them (the
 * worker that produces a blob, whoever frees it). Device ids beyond the table
 * are not counted.
 */
#include "core/core.h"

#define MEM_MAX_IDS 4096

static _Atomic int64_t mem_current[2][MEM_MAX_IDS];
static _Atomic int64_t mem_peak[2][MEM_MAX_IDS];

void dt__mem_charge(int type, int64_t id, int64_t delta) {
    if (type < 0 || type > 1 || id < 0 || id >= MEM_MAX_IDS || delta == 0)
        return;
    int64_t now = atomic_fetch_add(&mem_current[type][id], delta) + delta;
    int64_t peak = atomic_load(&mem_peak[type][id]);
    while (now > peak && !atomic_compare_exchange_weak(&mem_peak[type][id], &peak, now)) {
    }
}

dt_status dt_memory_stats(dt_device_type type, int64_t device_id, int64_t *current_bytes, int64_t *peak_bytes) {
    if ((type != DT_DEVICE_CPU && type != DT_DEVICE_CUDA) || device_id < 0)
        return dt__error(DT_EINVAL, "memory_stats: device %lld is not a valid device", (long long)device_id);
    int64_t c = 0, p = 0;
    if (device_id < MEM_MAX_IDS) {
        c = atomic_load(&mem_current[type][device_id]);
        p = atomic_load(&mem_peak[type][device_id]);
    }
    if (current_bytes)
        *current_bytes = c;
    if (peak_bytes)
        *peak_bytes = p;
    return DT_OK;
}

void dt_reset_peak_memory_stats(void) {
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < MEM_MAX_IDS; i++)
            atomic_store(&mem_peak[t][i], atomic_load(&mem_current[t][i]));
}

void dt_empty_cache(void) { dt__backends_empty_cache(); }

int64_t dt_memory_cached_bytes(void) { return dt__backends_cached_bytes(); }
