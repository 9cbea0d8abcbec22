/*
 * Logical CUDA devices (backend/cuda_map.c): parsing of
 * DTORCH_DTENSOR_IN_SAME_DEVICE / DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE
 * and the round-robin map, with fake GPU counts (no GPU needed).
 */
#include <stdlib.h>

#include "backend/cuda_map.h"
#include "test_util.h"

static void test_off(void) {
    dt__cuda_map m;
    char err[256];
    /* Unset, empty and "0" all mean: one logical id per GPU. */
    const char *offs[] = {NULL, "", "0"};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(dt__cuda_map_parse(offs[i], "4", 2, &m, err, sizeof err), 0);
        CHECK_EQ(m.virtual_on, 0);
        CHECK_EQ(dt__cuda_map_count(&m), 2);
        CHECK_EQ(dt__cuda_map_gpu(&m, 0), 0);
        CHECK_EQ(dt__cuda_map_gpu(&m, 1), 1);
        CHECK_EQ(dt__cuda_map_gpu(&m, 2), -1);
        CHECK_EQ(dt__cuda_map_gpu(&m, -1), -1);
    }
    CHECK_EQ(dt__cuda_map_parse(NULL, NULL, 0, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 0);
    CHECK_EQ(dt__cuda_map_gpu(&m, 0), -1);
}

static void test_on(void) {
    dt__cuda_map m;
    char err[256];
    /* Default N is 8, round robin on the GPUs present. */
    CHECK_EQ(dt__cuda_map_parse("1", NULL, 1, &m, err, sizeof err), 0);
    CHECK_EQ(m.virtual_on, 1);
    CHECK_EQ(dt__cuda_map_count(&m), 8);
    for (int64_t i = 0; i < 8; i++)
        CHECK_EQ(dt__cuda_map_gpu(&m, i), 0);
    CHECK_EQ(dt__cuda_map_gpu(&m, 8), -1);
    CHECK_EQ(dt__cuda_map_parse("1", "", 3, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 8);

    CHECK_EQ(dt__cuda_map_parse("1", "4", 1, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 4);
    CHECK_EQ(dt__cuda_map_gpu(&m, 3), 0);
    CHECK_EQ(dt__cuda_map_gpu(&m, 4), -1);

    /* 5 logical ids on 2 GPUs: 0 1 0 1 0. */
    CHECK_EQ(dt__cuda_map_parse("1", "5", 2, &m, err, sizeof err), 0);
    int64_t want[5] = {0, 1, 0, 1, 0};
    for (int64_t i = 0; i < 5; i++)
        CHECK_EQ(dt__cuda_map_gpu(&m, i), want[i]);

    /* Fewer logical ids than GPUs: the first N GPUs. */
    CHECK_EQ(dt__cuda_map_parse("1", "2", 8, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 2);
    CHECK_EQ(dt__cuda_map_gpu(&m, 1), 1);

    /* No GPU: no logical device, whatever N says. */
    CHECK_EQ(dt__cuda_map_parse("1", "8", 0, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 0);
    CHECK_EQ(dt__cuda_map_gpu(&m, 0), -1);
}

static void test_shares(void) {
    dt__cuda_map m;
    char err[256];
    int64_t ids01[2] = {0, 1}, ids02[2] = {0, 2}, ids0123[4] = {0, 1, 2, 3};
    CHECK_EQ(dt__cuda_map_parse("1", "4", 2, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_shares_gpu(&m, 2, ids01), 0);
    CHECK_EQ(dt__cuda_map_shares_gpu(&m, 2, ids02), 1);
    CHECK_EQ(dt__cuda_map_shares_gpu(&m, 4, ids0123), 1);
    CHECK_EQ(dt__cuda_map_shares_gpu(&m, 1, ids02), 0);
    CHECK_EQ(dt__cuda_map_parse(NULL, NULL, 4, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_shares_gpu(&m, 4, ids0123), 0);
}

static void test_bad(void) {
    dt__cuda_map m;
    char err[256];
    const char *bad_same[] = {"2", "yes", "true", " 1", "1 "};
    for (int i = 0; i < 5; i++) {
        CHECK_EQ(dt__cuda_map_parse(bad_same[i], NULL, 1, &m, err, sizeof err), -1);
        CHECK(strstr(err, DT_CUDA_SAME_DEVICE_ENV) != NULL);
        CHECK_EQ(m.virtual_on, 0);
        CHECK_EQ(dt__cuda_map_count(&m), 1);
    }
    const char *bad_num[] = {"0", "-1", "abc", "4x", "+4", " 4", "1048577", "99999999999999999999"};
    for (int i = 0; i < 8; i++) {
        CHECK_EQ(dt__cuda_map_parse("1", bad_num[i], 1, &m, err, sizeof err), -1);
        CHECK(strstr(err, DT_CUDA_NUM_GPU_ENV) != NULL);
        CHECK(strstr(err, bad_num[i]) != NULL);
    }
    /* N is read only when the switch is on. */
    CHECK_EQ(dt__cuda_map_parse("0", "abc", 1, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_parse("1", "1048576", 1, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 1048576);
}

static void test_env(void) {
    dt__cuda_map m;
    char err[256];
    setenv(DT_CUDA_SAME_DEVICE_ENV, "1", 1);
    setenv(DT_CUDA_NUM_GPU_ENV, "4", 1);
    CHECK_EQ(dt__cuda_map_from_env(1, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 4);
    CHECK(dt__cuda_map_env_error(err, sizeof err) == NULL);
    setenv(DT_CUDA_NUM_GPU_ENV, "four", 1);
    CHECK(dt__cuda_map_env_error(err, sizeof err) == err);
    CHECK(strstr(err, "four") != NULL);
    unsetenv(DT_CUDA_NUM_GPU_ENV);
    CHECK_EQ(dt__cuda_map_from_env(2, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 8);
    unsetenv(DT_CUDA_SAME_DEVICE_ENV);
    CHECK_EQ(dt__cuda_map_from_env(2, &m, err, sizeof err), 0);
    CHECK_EQ(dt__cuda_map_count(&m), 2);
}

int main(void) {
    test_off();
    test_on();
    test_shares();
    test_bad();
    test_env();
    if (failures)
        fprintf(stderr, "test_cuda_map: %d failure(s)\n", failures);
    return failures != 0;
}
