/*
 * Logical CUDA devices (docs/decisions.md, "CUDA devices and NCCL, CPU-side increment"): how the ids of cuda
 * meshes map onto the GPUs present. Plain C, no CUDA: the LibTorch CUDA shim (torch/torch_cuda.cpp) and the
 * NCCL comm (comm/nccl.c) use it, and the C tests check it with any GPU count.
 *
 * By default a logical id is a GPU: ids 0 .. n_gpus-1. With
 * DTORCH_DTENSOR_IN_SAME_DEVICE=1, DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE=N
 * (default 8) logical ids 0 .. N-1 exist and id i runs on GPU i % n_gpus
 * (round robin), each logical device with its own streams. Without a GPU
 * there is no logical device either.
 */
#ifndef DT_BACKEND_CUDA_MAP_H
#define DT_BACKEND_CUDA_MAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DT_CUDA_SAME_DEVICE_ENV "DTORCH_DTENSOR_IN_SAME_DEVICE"
#define DT_CUDA_NUM_GPU_ENV "DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE"
#define DT_CUDA_DEFAULT_LOGICAL 8

typedef struct dt__cuda_map {
    int virtual_on;    /* DTORCH_DTENSOR_IN_SAME_DEVICE=1 */
    int64_t n_logical; /* logical ids 0 .. n_logical-1 */
    int64_t n_gpus;    /* GPUs present */
} dt__cuda_map;

/* Builds the map from the two variables' values (NULL: unset) and the GPU
 * count. 0 on success; -1 with a message in err when a value is not one
 * the variables take (same: unset, "", "0" or "1"; num: a decimal integer
 * in 1 .. 2**20), and then *m is the map without virtualisation. */
int dt__cuda_map_parse(const char *same, const char *num, int64_t n_gpus, dt__cuda_map *m, char *err,
                       size_t errlen);
/* The same from the process environment. */
int dt__cuda_map_from_env(int64_t n_gpus, dt__cuda_map *m, char *err, size_t errlen);
/* How many logical CUDA devices exist (0 without a GPU). */
int64_t dt__cuda_map_count(const dt__cuda_map *m);
/* The GPU logical id `id` runs on, or -1 when there is no such id. */
int64_t dt__cuda_map_gpu(const dt__cuda_map *m, int64_t id);
/* 1 when two of the n logical ids run on one GPU (NCCL then cannot serve
 * them: it refuses two ranks on one GPU), else 0. */
int dt__cuda_map_shares_gpu(const dt__cuda_map *m, int n, const int64_t *ids);
/* The message of the environment's bad value, or NULL when it is good. */
const char *dt__cuda_map_env_error(char *buf, size_t len);
/* The GPUs the CUDA runtime shows of `n_gpus` under CUDA_VISIBLE_DEVICES
 * value `visible` (NULL: unset, all of them): the listed indices up to the
 * first that is not one of them or repeats one. (The tests' stand-in,
 * cuda_fake.c, counts its fake GPUs so.) */
int64_t dt__cuda_visible(int64_t n_gpus, const char *visible);

#ifdef __cplusplus
}
#endif

#endif /* DT_BACKEND_CUDA_MAP_H */
