/*
 * Tests only: a stand-in CUDA backend for machines without a GPU
 * (dt_debug_fake_cuda, dtorch.h), so the logic of CUDA devices on worker
 * nodes (registration, numbering, routing, collectives across nodes) runs
 * in the CPU test suite. It is tests/c/test_cuda_select.c's "ref_cuda"
 * made reachable from a whole process: the default backend ("torch", else
 * "ref") copied under the name "<name>_cuda", whose device_count applies
 * the logical-device map (cuda_map.h, so DTORCH_DTENSOR_IN_SAME_DEVICE works
 * as with the real shim) to a fake GPU count, after CUDA_VISIBLE_DEVICES as
 * the CUDA runtime reads it. Its kernels are the default backend's, on host
 * memory; its streams and events the core's host ones, except that, as the
 * real shim, it refuses a stream for a device id it does not have.
 *
 * Nothing calls it but the tests: dtorch._C._test_fake_cuda(n) and
 * dtorch-node's --debug-fake-gpus=N. A build with a real CUDA backend
 * refuses it.
 *
 * Threads: any thread. `lock` serialises callers; the count is an atomic
 * read by device_count on any thread; registration publishes the copy
 * before any lookup can find it (registry.c).
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda_map.h"
#include "common/common.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static dt__backend stand_in;
static char stand_in_name[64];
static int registered;
static _Atomic int64_t fake_gpus;

int64_t dt__cuda_visible(int64_t n_gpus, const char *visible) {
    if (!visible)
        return n_gpus;
    /* The CUDA runtime takes the listed indices up to the first that is not
     * a GPU of this machine (or repeats one), and ignores the rest. */
    int64_t n = 0;
    unsigned char seen[4096] = {0};
    const char *p = visible;
    while (*p) {
        char *end = NULL;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v >= n_gpus || v >= (long)sizeof seen || seen[v])
            break;
        seen[v] = 1;
        n++;
        p = end;
        if (*p == ',')
            p++;
        else if (*p)
            break;
    }
    return n;
}

static int64_t fake_count(dt_device_type type) {
    if (type == DT_DEVICE_CPU)
        return -1;
    dt__cuda_map m;
    char err[256];
    int64_t gpus = dt__cuda_visible(atomic_load(&fake_gpus), getenv("CUDA_VISIBLE_DEVICES"));
    return dt__cuda_map_from_env(gpus, &m, err, sizeof err) == 0 ? dt__cuda_map_count(&m) : 0;
}

/* As the real shim's (torch_cuda.cpp): a stream only for a logical device
 * this process has, numbered from 0 here whatever its global id (a worker
 * node's graph passes id - its first CUDA id), so a numbering mistake
 * fails at the read as it would on a GPU. */
static char stream_token;

static dt_status fake_stream_new(dt_device_type type, int64_t id, int kind, void **ctx, char *err,
                                 size_t errlen) {
    (void)kind;
    int64_t n = fake_count(type);
    if (type == DT_DEVICE_CUDA && (id < 0 || id >= n)) {
        snprintf(err, errlen, "no logical CUDA device %lld here (%lld devices, stand-in GPUs)", (long long)id,
                 (long long)n);
        return DT_EDEVICE;
    }
    *ctx = &stream_token;
    return DT_OK;
}

dt_status dt_debug_fake_cuda(int n_gpus) {
    if (n_gpus < 0 || n_gpus > 4096)
        return dt__error(DT_EINVAL, "dt_debug_fake_cuda: n_gpus must be in [0, 4096], not %d", n_gpus);
    pthread_mutex_lock(&lock);
    const dt__backend *be = dt__backend_find(NULL);
    dt_status st = DT_OK;
    if (!registered) {
        char name[64];
        snprintf(name, sizeof name, "%s_cuda", be->name);
        if (dt__backend_find(name)) {
            st = dt__error(DT_EINVAL,
                           "dt_debug_fake_cuda: this build has a real CUDA backend ('%s'); the stand-in is "
                           "for machines without one",
                           name);
        } else {
            memcpy(stand_in_name, name, sizeof name);
            stand_in = *be;
            stand_in.name = stand_in_name;
            stand_in.device_count = fake_count;
            stand_in.api_version = DT_BACKEND_API_VERSION;
            stand_in.stream_new = fake_stream_new;
            dt__backend_register(&stand_in);
            registered = dt__backend_find(name) == &stand_in;
            if (!registered)
                st = dt__error(DT_EINTERNAL, "dt_debug_fake_cuda: the backend registry is full");
        }
    }
    if (st == DT_OK)
        atomic_store(&fake_gpus, n_gpus);
    pthread_mutex_unlock(&lock);
    return st;
}
