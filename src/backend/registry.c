/*
 * The backend registry. Backends register from library constructors (before
 * main, single-threaded), so lookups after that need no lock.
 */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"

static const dt__backend *registered[8];
static int nregistered;

void dt__backend_register(const dt__backend *backend) {
    if (nregistered < (int)(sizeof registered / sizeof registered[0]))
        registered[nregistered++] = backend;
}

const dt__backend *dt__backend_find(const char *name) {
    if (!name) {
        const dt__backend *torch = dt__backend_find("torch");
        return torch ? torch : &dt__backend_ref;
    }
    if (strcmp(name, "ref") == 0)
        return &dt__backend_ref;
    for (int i = 0; i < nregistered; i++)
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
    for (int i = 0; i < nregistered; i++)
        if (registered[i]->empty_cache)
            registered[i]->empty_cache();
}

int64_t dt__backends_cached_bytes(void) {
    int64_t n = 0;
    for (int i = 0; i < nregistered; i++)
        if (registered[i]->cached_bytes)
            n += registered[i]->cached_bytes();
    return n;
}
