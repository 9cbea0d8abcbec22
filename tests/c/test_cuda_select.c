/*
 * Runtime selection for CUDA devices (issue 12 item 2) without a GPU: a
 * graph gives its CUDA devices the registered "<backend>_cuda" backend only
 * while that one sees a device, cuda meshes are satisfiable exactly for the
 * ids it counts, bad virtualisation variables are named at the mesh check,
 * and collectives among CUDA devices stay in process while NCCL cannot
 * serve them. The stand-in "ref_cuda" is the ref backend with a device
 * count that applies the logical-device map to a fake GPU count, as the
 * LibTorch CUDA shim does (torch/torch_cuda.cpp).
 */
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda_map.h"
#include "comm/comm.h"
#include "comm/span_nccl.h"
#include "core/client/graph.h"
#include "test_util.h"

static int64_t fake_gpus;

static int64_t fake_count(dt_device_type type) {
    if (type == DT_DEVICE_CPU)
        return -1;
    dt__cuda_map m;
    char err[256];
    return dt__cuda_map_from_env(fake_gpus, &m, err, sizeof err) == 0 ? dt__cuda_map_count(&m) : 0;
}

static dt__backend fake;

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static int satisfied(dt_graph *g, int n, int first) {
    int64_t shape[1] = {n}, ids[16];
    for (int i = 0; i < n; i++)
        ids[i] = first + i;
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CUDA, 1, shape, ids, NULL, &m) == DT_OK);
    int ok = dt_graph_satisfy(g, m);
    dt_mesh_release(m);
    return ok;
}

static void test_no_gpu(void) {
    fake_gpus = 0;
    CHECK(dt__backend_for_device(&dt__backend_ref, DT_DEVICE_CUDA) == &dt__backend_ref);
    CHECK(dt__backend_for_device(&dt__backend_ref, DT_DEVICE_CPU) == &dt__backend_ref);
    dt_graph *g = ref_graph();
    CHECK_EQ(satisfied(g, 1, 0), 0);
    dt_graph_release(g);
}

static void test_gpus(void) {
    fake_gpus = 2;
    CHECK(dt__backend_for_device(&dt__backend_ref, DT_DEVICE_CUDA) == &fake);
    CHECK(dt__backend_for_device(&dt__backend_ref, DT_DEVICE_CPU) == &dt__backend_ref);
    /* Only "ref"'s own CUDA variant: another backend's name finds none. */
    CHECK(dt__backend_for_device(&fake, DT_DEVICE_CUDA) == &fake);
    dt_graph *g = ref_graph();
    CHECK_STREQ(dt_graph_backend(g), "ref");
    CHECK_EQ(satisfied(g, 2, 0), 1);
    CHECK_EQ(satisfied(g, 1, 1), 1);
    CHECK_EQ(satisfied(g, 1, 2), 0);
    CHECK_EQ(satisfied(g, 3, 0), 0);

    /* One GPU as 4 logical devices. */
    fake_gpus = 1;
    setenv(DT_CUDA_SAME_DEVICE_ENV, "1", 1);
    setenv(DT_CUDA_NUM_GPU_ENV, "4", 1);
    CHECK_EQ(satisfied(g, 4, 0), 1);
    CHECK_EQ(satisfied(g, 5, 0), 0);
    unsetenv(DT_CUDA_NUM_GPU_ENV);
    CHECK_EQ(satisfied(g, 8, 0), 1);
    CHECK_EQ(satisfied(g, 9, 0), 0);

    /* A bad value: no device, and the mesh check names the variable. */
    setenv(DT_CUDA_NUM_GPU_ENV, "lots", 1);
    CHECK_EQ(satisfied(g, 1, 0), 0);
    int64_t shape[1] = {1}, ids[1] = {0};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CUDA, 1, shape, ids, NULL, &m) == DT_OK);
    CHECK_EQ(dt__graph_check_mesh(g, m), DT_EDEVICE);
    CHECK(strstr(dt_last_error(), DT_CUDA_NUM_GPU_ENV "='lots' is not valid") != NULL);
    /* Fixed: the same graph sees the device again. */
    setenv(DT_CUDA_NUM_GPU_ENV, "2", 1);
    CHECK_EQ(dt__graph_check_mesh(g, m), DT_OK);
    unsetenv(DT_CUDA_NUM_GPU_ENV);
    unsetenv(DT_CUDA_SAME_DEVICE_ENV);
    dt_mesh_release(m);
    dt_graph_release(g);
}

static void test_comm_choice(void) {
    /* No torch_cuda backend (and no GPU) here: NCCL cannot serve. */
    CHECK_EQ(dt__comm_nccl_usable(), 0);
    CHECK(dt__comm_for(DT_DEVICE_CUDA) == &dt__comm_inproc);
    CHECK(dt__comm_for(DT_DEVICE_CPU) == &dt__comm_inproc);
}

/* NCCL across nodes or host staging (span_nccl.h), for a group of ranks
 * held by the main node (-1) and worker nodes: NCCL only when every process
 * holding a rank can use it, none virtualises its GPUs and no two of them
 * share a host; DTORCH_SPAN_NCCL=0 forces staging. */
static void test_span_choice(void) {
    char why[300];
    dt__span_proc p[4] = {{-1, 1, 0, "main"}, {0, 1, 0, "a"}, {0, 1, 0, "a"}, {1, 1, 0, "b"}};
    CHECK_EQ(dt__span_nccl_choose(4, p, why, sizeof why), 1);
    CHECK_STREQ(why, "");
    p[3].nccl = 0;
    CHECK_EQ(dt__span_nccl_choose(4, p, why, sizeof why), 0);
    CHECK(strstr(why, "worker node 1 cannot use NCCL") != NULL);
    p[3].nccl = 1;
    p[0].virtual_gpus = 1;
    CHECK_EQ(dt__span_nccl_choose(4, p, why, sizeof why), 0);
    CHECK(strstr(why, "the main node runs several logical devices on one GPU") != NULL);
    p[0].virtual_gpus = 0;
    p[3].host = "main"; /* worker node 1 beside the main node */
    CHECK_EQ(dt__span_nccl_choose(4, p, why, sizeof why), 0);
    CHECK(strstr(why, "the main node and worker node 1 run on one host (main)") != NULL);
    p[3].host = "b";
    setenv("DTORCH_SPAN_NCCL", "0", 1);
    CHECK_EQ(dt__span_nccl_choose(4, p, why, sizeof why), 0);
    CHECK_STREQ(why, "DTORCH_SPAN_NCCL=0");
    unsetenv("DTORCH_SPAN_NCCL");
    /* Two ranks of one node on one host: its own GPUs, distinct. */
    CHECK_EQ(dt__span_nccl_choose(2, p + 1, why, sizeof why), 1);
}

/* The unique ids the main node ships: kept per (graph tag, group key),
 * replaced by a later put, gone after clear. */
static void test_span_ids(void) {
    uint8_t a[DT__SPAN_NCCL_ID], b[DT__SPAN_NCCL_ID], got[DT__SPAN_NCCL_ID];
    for (int i = 0; i < DT__SPAN_NCCL_ID; i++)
        a[i] = (uint8_t)i, b[i] = (uint8_t)(255 - i);
    int n = 0;
    dt__span_nccl_clear();
    CHECK_EQ(dt__span_nccl_get(1, 7, &n, got), 0);
    dt__span_nccl_put(1, 7, 4, a);
    dt__span_nccl_put(2, 7, 3, b);
    CHECK_EQ(dt__span_nccl_get(1, 7, &n, got), 1);
    CHECK_EQ(n, 4);
    CHECK(!memcmp(got, a, sizeof a));
    CHECK_EQ(dt__span_nccl_get(2, 7, &n, got), 1);
    CHECK_EQ(n, 3);
    CHECK(!memcmp(got, b, sizeof b));
    CHECK_EQ(dt__span_nccl_get(1, 8, &n, got), 0);
    dt__span_nccl_put(1, 7, 5, b);
    CHECK_EQ(dt__span_nccl_get(1, 7, &n, got), 1);
    CHECK_EQ(n, 5);
    CHECK(!memcmp(got, b, sizeof b));
    dt__span_nccl_clear();
    CHECK_EQ(dt__span_nccl_get(1, 7, &n, got), 0);
}

int main(void) {
    fake = dt__backend_ref;
    fake.name = "ref_cuda";
    fake.device_count = fake_count;
    dt__backend_register(&fake);
    test_no_gpu();
    test_gpus();
    test_comm_choice();
    test_span_choice();
    test_span_ids();
    if (failures)
        fprintf(stderr, "test_cuda_select: %d failure(s)\n", failures);
    return failures != 0;
}
