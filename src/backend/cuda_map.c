/*
 * Logical CUDA devices: env parsing and the round-robin map (cuda_map.h).
 * Pure functions of their arguments (and getenv), so any thread.
 */
#include "backend/cuda_map.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LOGICAL ((int64_t)1 << 20)

static int bad(char *err, size_t errlen, const char *var, const char *val, const char *want) {
    if (err && errlen)
        snprintf(err, errlen, "%s='%s' is not valid: expected %s", var, val, want);
    return -1;
}

int dt__cuda_map_parse(const char *same, const char *num, int64_t n_gpus, dt__cuda_map *m, char *err,
                       size_t errlen) {
    m->virtual_on = 0;
    m->n_gpus = n_gpus > 0 ? n_gpus : 0;
    m->n_logical = m->n_gpus;
    if (err && errlen)
        err[0] = 0;
    if (same && same[0] && strcmp(same, "0") != 0) {
        if (strcmp(same, "1") != 0)
            return bad(err, errlen, DT_CUDA_SAME_DEVICE_ENV, same, "0 or 1");
        int64_t n = DT_CUDA_DEFAULT_LOGICAL;
        if (num && num[0]) {
            char *end = NULL;
            errno = 0;
            long long v = strtoll(num, &end, 10);
            if (errno || !end || *end || end == num || num[0] == '+' || num[0] == ' ' || v < 1 ||
                v > MAX_LOGICAL)
                return bad(err, errlen, DT_CUDA_NUM_GPU_ENV, num, "an integer from 1 to 1048576");
            n = (int64_t)v;
        }
        m->virtual_on = 1;
        m->n_logical = m->n_gpus ? n : 0;
    }
    return 0;
}

int dt__cuda_map_from_env(int64_t n_gpus, dt__cuda_map *m, char *err, size_t errlen) {
    return dt__cuda_map_parse(getenv(DT_CUDA_SAME_DEVICE_ENV), getenv(DT_CUDA_NUM_GPU_ENV), n_gpus, m, err,
                              errlen);
}

int64_t dt__cuda_map_count(const dt__cuda_map *m) { return m->n_logical; }

int64_t dt__cuda_map_gpu(const dt__cuda_map *m, int64_t id) {
    if (id < 0 || id >= m->n_logical || m->n_gpus <= 0)
        return -1;
    return m->virtual_on ? id % m->n_gpus : id;
}

int dt__cuda_map_shares_gpu(const dt__cuda_map *m, int n, const int64_t *ids) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (dt__cuda_map_gpu(m, ids[i]) == dt__cuda_map_gpu(m, ids[j]))
                return 1;
    return 0;
}

const char *dt__cuda_map_env_error(char *buf, size_t len) {
    dt__cuda_map m;
    return dt__cuda_map_from_env(1, &m, buf, len) == 0 ? NULL : buf;
}
