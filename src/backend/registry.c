/*
 * The backend registry. Backends register from library constructors (before
 * main, single-threaded), and the tests' CUDA stand-in (cuda_fake.c) later,
 * while other threads may look backends up: a slot is written before the
 * count that publishes it (release), and readers load the count first
 * (acquire), so lookups need no lock. Registrations themselves are not
 * concurrent (constructors; the stand-in under its own lock).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

static const dt__backend *registered[8];
static atomic_int nregistered;

void dt__backend_register(const dt__backend *backend) {
    int n = atomic_load_explicit(&nregistered, memory_order_relaxed);
    if (n < (int)(sizeof registered / sizeof registered[0])) {
        registered[n] = backend;
        atomic_store_explicit(&nregistered, n + 1, memory_order_release);
    }
}

const dt__backend *dt__backend_find(const char *name) {
    if (!name) {
        const dt__backend *torch = dt__backend_find("torch");
        return torch ? torch : &dt__backend_ref;
    }
    if (strcmp(name, "ref") == 0)
        return &dt__backend_ref;
    int n = atomic_load_explicit(&nregistered, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (strcmp(registered[i]->name, name) == 0)
            return registered[i];
    return NULL;
}

const dt__backend *dt__backend_for_device(const dt__backend *be, dt_device_type type) {
    if (!be || type != DT_DEVICE_CUDA)
        return be;
    char name[64];
    snprintf(name, sizeof name, "%s_cuda", be->name);
    const dt__backend *cuda = dt__backend_find(name);
    if (cuda && cuda->device_count && cuda->device_count(DT_DEVICE_CUDA) > 0)
        return cuda;
    return be;
}

void dt__backends_empty_cache(void) {
    int n = atomic_load_explicit(&nregistered, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (registered[i]->empty_cache)
            registered[i]->empty_cache();
}

int dt__thread_rest_on(void) {
    static atomic_int on = -1;
    int v = atomic_load_explicit(&on, memory_order_relaxed);
    if (v < 0) {
        /* Read once; any thread may be first, and all read the same. */
        const char *e = getenv("DTORCH_THREAD_REST");
        v = !(e && e[0] == '0' && e[1] == 0);
        atomic_store_explicit(&on, v, memory_order_relaxed);
    }
    return v;
}

/* Set in a fork child on the thread that forked (the only one there; the
 * core's fork handler, graph.c): its team's threads stayed in the parent,
 * and libgomp would wait for them for ever. */
static _Thread_local int stale_team;

void dt__backends_thread_forked(void) { stale_team = 1; }

void dt__backends_thread_rest(void) {
    if (stale_team || !dt__thread_rest_on())
        return;
    int n = atomic_load_explicit(&nregistered, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (registered[i]->thread_rest)
            registered[i]->thread_rest();
}

void dt__backends_thread_serial(void) {
    int n = atomic_load_explicit(&nregistered, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (registered[i]->thread_serial)
            registered[i]->thread_serial();
}

int64_t dt__backends_cached_bytes(void) {
    int64_t bytes = 0;
    int n = atomic_load_explicit(&nregistered, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (registered[i]->cached_bytes)
            bytes += registered[i]->cached_bytes();
    return bytes;
}
