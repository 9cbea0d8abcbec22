/*
 * Memory accounting (memstats.c): live-blob bytes per device, behind
 * dt_memory_stats. The record is opaque; blob.c and the streams charge it
 * from any thread (atomics, no lock).
 */
#ifndef DT_CORE_MEMSTATS_H
#define DT_CORE_MEMSTATS_H

#include "core/core.h"

/* One device's live-blob byte counts (memstats.c): one record per
 * (device type, id) ever charged, made on first use and kept for the
 * process's life, so a pointer to it stays valid in any blob. */
/* The record of device (type, id), made on first use; NULL when out of
 * memory (thread error set). Any thread. */
dt__memdev *dt__memdev_get(int type, int64_t id);
/* Adds `delta` bytes to a device's live-blob count (any thread). */
void dt__mem_charge(dt__memdev *dev, int64_t delta);

#endif /* DT_CORE_MEMSTATS_H */
