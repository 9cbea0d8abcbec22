/*
 * Device-independent records (core/records/bcast.h, core/controller/lower_bcast.c)
 * end to end on the ref backend: a loop of elementwise ops on meshes of 2
 * and 4 devices, Replicate and Shard (even and uneven), gives bitwise the
 * values of the per-device path and of a host reference, and is lowered as
 * one record per node (dt_debug_bcast_nodes); with the switch off none is;
 * so is a column-parallel matmul.
 * A kernel that fails names its op, a device and the call site; the graph
 * keeps working. Work queued behind a closed gate is dropped by
 * dt_graph_cancel with every slot freed. Device memory is back where it
 * started once the values are released. Run under ASan and TSan too (no
 * leaked shared records, no races between the workers that share one).
 * Blob groups (core/records/bgroup.h, dt_graph_set_bgroup): the same values
 * and memory per device with them on and off (2 to 12 devices: past the
 * groups' pool too), through a
 * chain that adopts a per-device value, reads groups and writes dropped ones
 * in place; a kernel error and a cancellation with groups.
 * Runs of shared records (core/records/step.h, dt_graph_set_step): the
 * same chain in runs gives the same values and memory per device as one
 * shared record per node. Their events by (run, number) (bgroup.h): every
 * value's event on every device (dt_debug_event: stream and number) is the
 * one records per node give, with consumers on other streams in the middle
 * of a run (a collective, a copy to another mesh, a read); a failing kernel
 * in the middle of a run names its own call site; a cancelled run's
 * kernels are dropped.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtorch/dtorch.h"
#include "dtorch/dtorch_ops.h"
#include "dtorch/dtorch_replay.h"
#include "test_util.h"

#define MAXN 16

static dt_graph *ref_graph(int bcast) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    CHECK(dt_graph_set_bcast(g, bcast) == DT_OK);
    CHECK(dt_graph_set_bgroup(g, 1) == DT_OK);
    return g;
}

static dt_mesh *mesh1d(int n) {
    int64_t shape[1] = {n}, ids[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m) == DT_OK);
    return m;
}

/* steps times: y = ((y * x) + 0.5) - x, then 3 - y (reversed scalar); x and
 * y laid out by `pl`. Writes y's value into out. */
static void loop(int bcast, int ndev, int n, dt_placement pl, int steps, float *out, int64_t *nodes) {
    dt_graph *g = ref_graph(bcast);
    dt_mesh *m = mesh1d(ndev);
    int64_t shape[1] = {n};
    float host[MAXN];
    for (int i = 0; i < n; i++)
        host[i] = (float)(i % 5) * 0.25f - 0.5f;
    dt_placement p[1] = {pl};
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, host, (size_t)n * sizeof *host, m, p);
    dt_tensor *y = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(1), m, p);
    CHECK(x && y);
    for (int s = 0; s < steps; s++) {
        dt_tensor *a = dt_binary(DT_BINARY_MUL, y, x);
        dt_tensor *b = dt_binary_scalar(DT_BINARY_ADD, a, dt_scalar_float(0.5), 0);
        dt_tensor *c = dt_binary(DT_BINARY_SUB, b, x);
        dt_tensor *d = dt_binary_scalar(DT_BINARY_SUB, c, dt_scalar_float(3), 1);
        dt_tensor_release(a);
        dt_tensor_release(b);
        dt_tensor_release(c);
        dt_tensor_release(y);
        y = d;
    }
    CHECK(y && dt_tensor_read(y, out, (size_t)n * sizeof *out) == DT_OK);
    *nodes = dt_debug_bcast_nodes(g);
    dt_tensor_release(x);
    dt_tensor_release(y);
    dt_mesh_release(m);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
}

static void test_same_values(void) {
    const dt_placement R = {DT_PLACEMENT_REPLICATE, 0}, S0 = {DT_PLACEMENT_SHARD, 0};
    struct {
        int ndev, n;
        dt_placement pl;
    } cases[] = {{2, 8, R}, {2, 8, S0}, {4, 8, S0}, {4, 7, S0}, {4, 6, R}, {3, 5, S0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int n = cases[c].n, steps = 20;
        float off[MAXN] = {0}, on[MAXN] = {0}, want[MAXN];
        int64_t n_off = -1, n_on = -1;
        loop(0, cases[c].ndev, n, cases[c].pl, steps, off, &n_off);
        loop(1, cases[c].ndev, n, cases[c].pl, steps, on, &n_on);
        for (int i = 0; i < n; i++) {
            float x = (float)(i % 5) * 0.25f - 0.5f, y = 1;
            for (int s = 0; s < steps; s++)
                y = 3 - (((y * x) + 0.5f) - x);
            want[i] = y;
        }
        CHECK(memcmp(off, on, (size_t)n * sizeof *on) == 0);
        CHECK(memcmp(want, on, (size_t)n * sizeof *on) == 0);
        CHECK_EQ(n_off, 0);
        /* Every node, one record each; on a Replicate mesh x's host copy and
         * y's fill too (the same kernel on every device). */
        CHECK_EQ(n_on, 4 * steps + (cases[c].pl.kind == DT_PLACEMENT_REPLICATE ? 2 : 0));
    }
}

/* x [4, 8] Replicate @ w [8, 6] Shard(1) on 2 devices (column-parallel): one
 * shared LINALG record; the same values as per device and the host's. */
static void matmul(int bcast, float *out, int64_t *nodes) {
    dt_graph *g = ref_graph(bcast);
    dt_mesh *m = mesh1d(2);
    int64_t xs[2] = {4, 8}, ws[2] = {8, 6};
    float hx[32], hw[48];
    for (int i = 0; i < 32; i++)
        hx[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 48; i++)
        hw[i] = (float)(i % 5) * 0.5f - 1.0f;
    dt_placement r[1] = {{DT_PLACEMENT_REPLICATE, 0}}, s1[1] = {{DT_PLACEMENT_SHARD, 1}};
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 2, xs, hx, sizeof hx, m, r);
    dt_tensor *w = dt_tensor_from_buffer(g, DT_FLOAT32, 2, ws, hw, sizeof hw, m, s1);
    dt_tensor *y = dt_matmul(x, w);
    CHECK(y && dt_tensor_read(y, out, 24 * sizeof *out) == DT_OK);
    *nodes = dt_debug_bcast_nodes(g);
    dt_tensor_release(y);
    dt_tensor_release(w);
    dt_tensor_release(x);
    dt_mesh_release(m);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
}

static void test_matmul(void) {
    float off[24], on[24], want[24];
    int64_t n_off = -1, n_on = -1;
    matmul(0, off, &n_off);
    matmul(1, on, &n_on);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 6; j++) {
            float acc = 0;
            for (int k = 0; k < 8; k++)
                acc += ((float)((i * 8 + k) % 7) - 3.0f) * ((float)((k * 6 + j) % 5) * 0.5f - 1.0f);
            want[i * 6 + j] = acc;
        }
    CHECK(memcmp(off, on, sizeof on) == 0);
    CHECK(memcmp(want, on, sizeof on) == 0);
    CHECK_EQ(n_off, 0);
    CHECK_EQ(n_on, 2); /* the product, and x's host copy (Replicate) */
}

/* A kernel that fails (the ref backend has no floor_divide) poisons its
 * output with the op, a device and the call site; later work is fine. */
static void test_kernel_error(int step) { /* in a run, or one shared record per node */
    dt_graph *g = ref_graph(1);
    CHECK(dt_graph_set_step(g, step) == DT_OK);
    dt_mesh *m = mesh1d(2);
    int64_t shape[1] = {4};
    dt_placement s0[1] = {{DT_PLACEMENT_SHARD, 0}};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), m, s0);
    dt_set_call_site("bcast_site.py", 42);
    dt_tensor *bad = dt_binary(DT_BINARY_DIV_FLOOR, x, x);
    dt_set_call_site(NULL, 0);
    CHECK(x && bad);
    float got[4];
    CHECK(dt_tensor_read(bad, got, sizeof got) == DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "floor_divide failed on cpu:") != NULL);
    CHECK(strstr(dt_last_error(), "bcast_site.py:42") != NULL);
    dt_tensor *ok = dt_binary(DT_BINARY_ADD, x, x);
    CHECK(ok && dt_tensor_read(ok, got, sizeof got) == DT_OK);
    for (int i = 0; i < 4; i++)
        CHECK_FEQ(got[i], 4.0f);
    CHECK(dt_debug_bcast_nodes(g) == 2);
    dt_tensor_release(ok);
    dt_tensor_release(bad);
    dt_tensor_release(x);
    dt_mesh_release(m);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
}

/* Records queued behind a closed gate are dropped, not run, by
 * dt_graph_cancel: every slot completes its number and the shared records
 * are freed (ASan: no leak). `step`: the adds as runs of shared records
 * (one slot per device per run) or as one shared record each (one slot per
 * device per add): either way every slot is dropped, not run. */
static void test_cancel(int step) {
    dt_graph *g = ref_graph(1);
    CHECK(dt_graph_set_step(g, step) == DT_OK);
    dt_mesh *m = mesh1d(4);
    int64_t shape[1] = {8};
    dt_tensor *a = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(1), m, NULL);
    CHECK(a && dt_graph_sync(g) == DT_OK);
    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK);
    dt_tensor *t = dt_debug_gated(a, gate);
    const int n = 500;
    for (int i = 0; i < n; i++) {
        dt_tensor *y = dt_binary(DT_BINARY_ADD, t, a);
        dt_tensor_release(t);
        t = y;
    }
    CHECK(t);
    dt_future *ft = dt_tensor_fetch(t);
    CHECK(ft && dt_future_wait(ft, 0) == DT_ETIMEDOUT);
    /* The adds are lowered (queued behind the gate) before the cancel, so
     * the workers drop their slots; a hang guard, not a timing check. */
    for (int i = 0; i < 60000 && dt_debug_bcast_nodes(g) < n + 1; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK_EQ(dt_debug_bcast_nodes(g), n + 1); /* a's fill (Replicate) and the adds */
    CHECK(dt_graph_cancel(g, -1) == DT_OK);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    CHECK(!dt_debug_gate_is_open(gate));
    CHECK(dt_future_wait(ft, -1) == DT_OK && dt_future_status(ft) == DT_ECANCELLED);
    dt_graph_stats s;
    CHECK(dt_graph_get_stats(g, &s, 0) == DT_OK);
    CHECK(s.in_flight == 0);
    CHECK(s.cancelled >= 4 * n); /* every device's slot of every add */
    dt_future_release(ft);
    dt_tensor_release(t);
    dt_tensor_release(a);
    dt_debug_gate_release(gate);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* Each device's output is charged to that device while it lives and
 * uncharged when it is freed, as with per-device records. */
static void test_memory(void) {
    dt_graph *g = ref_graph(1);
    dt_mesh *m = mesh1d(2);
    int64_t shape[1] = {1024};
    dt_placement s0[1] = {{DT_PLACEMENT_SHARD, 0}};
    int64_t before[2], after[2], live[2], peak;
    for (int d = 0; d < 2; d++)
        CHECK(dt_memory_stats(DT_DEVICE_CPU, d, &before[d], &peak) == DT_OK);
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(1), m, s0);
    dt_tensor *y = dt_binary(DT_BINARY_ADD, x, x);
    CHECK(x && y && dt_graph_sync(g) == DT_OK);
    for (int d = 0; d < 2; d++) {
        CHECK(dt_memory_stats(DT_DEVICE_CPU, d, &live[d], &peak) == DT_OK);
        CHECK_EQ(live[d] - before[d], 2 * 512 * 4); /* x's and y's halves */
    }
    dt_tensor_release(y);
    dt_tensor_release(x);
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK(dt_debug_bcast_nodes(g) == 1);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    for (int d = 0; d < 2; d++) {
        CHECK(dt_memory_stats(DT_DEVICE_CPU, d, &after[d], &peak) == DT_OK);
        CHECK_EQ(after[d], before[d]);
    }
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* What one run of the groups' chain saw. */
typedef struct chain_run {
    float out[MAXN];
    int64_t in_place, nodes, runs, live[12], after[12];
} chain_run;

/* x (per device, from a buffer: adopted by the first shared record that
 * reads it) and y = x * 2 (a group); 6 times y = (y + x) * 0.5 - 0.25, whose
 * dropped intermediates are written in place. Memory per device is taken
 * while x and y live. (Views of members, `base`: test_bcast.py, the ref
 * backend has no view kernel.) */
static void group_chain(int bgroup, int step, int ndev, int n, dt_placement pl, chain_run *r) {
    dt_graph *g = ref_graph(1);
    CHECK(dt_graph_set_bgroup(g, bgroup) == DT_OK);
    CHECK(dt_graph_set_step(g, step) == DT_OK);
    dt_mesh *m = mesh1d(ndev);
    int64_t shape[1] = {n}, before[12], peak;
    for (int d = 0; d < ndev; d++)
        CHECK(dt_memory_stats(DT_DEVICE_CPU, d, &before[d], &peak) == DT_OK);
    float host[MAXN];
    for (int i = 0; i < n; i++)
        host[i] = (float)(i % 7) * 0.5f - 1.0f;
    dt_placement p[1] = {pl};
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, host, (size_t)n * sizeof *host, m, p);
    dt_tensor *y = dt_binary_scalar(DT_BINARY_MUL, x, dt_scalar_float(2), 0);
    CHECK(x && y);
    for (int s = 0; s < 6; s++) {
        dt_tensor *a = dt_binary(DT_BINARY_ADD, y, x);
        dt_tensor *b = dt_binary_scalar(DT_BINARY_MUL, a, dt_scalar_float(0.5), 0);
        dt_tensor *c = dt_binary_scalar(DT_BINARY_SUB, b, dt_scalar_float(0.25), 0);
        dt_tensor_release(a);
        dt_tensor_release(b);
        dt_tensor_release(y);
        y = c;
    }
    CHECK(y && dt_graph_sync(g) == DT_OK);
    for (int d = 0; d < ndev; d++) {
        CHECK(dt_memory_stats(DT_DEVICE_CPU, d, &r->live[d], &peak) == DT_OK);
        r->live[d] -= before[d];
    }
    CHECK(dt_tensor_read(y, r->out, (size_t)n * sizeof *r->out) == DT_OK);
    dt_graph_stats st;
    CHECK(dt_graph_get_stats(g, &st, 0) == DT_OK);
    r->in_place = st.kernels_in_place;
    r->nodes = dt_debug_bcast_nodes(g);
    r->runs = dt_debug_step_runs(g);
    dt_tensor_release(y);
    dt_tensor_release(x);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    for (int d = 0; d < ndev; d++) {
        CHECK(dt_memory_stats(DT_DEVICE_CPU, d, &r->after[d], &peak) == DT_OK);
        r->after[d] -= before[d];
    }
    dt_mesh_release(m);
    dt_graph_release(g);
}

static const struct {
    int ndev, n;
    dt_placement pl;
} chain_cases[] = {
    {2, 8, {DT_PLACEMENT_REPLICATE, 0}}, {2, 8, {DT_PLACEMENT_SHARD, 0}},
    {4, 7, {DT_PLACEMENT_SHARD, 0}},     {3, 5, {DT_PLACEMENT_SHARD, 0}},
    {4, 6, {DT_PLACEMENT_REPLICATE, 0}}, {12, 12, {DT_PLACEMENT_SHARD, 0}}}; /* 12: past the pool */
#define N_CHAIN_CASES (sizeof chain_cases / sizeof chain_cases[0])

/* Groups on (`step`: in runs or not) as off: each device's values, the
 * nodes shared, memory per device while the values live and after. */
static void chains_alike(int step, const chain_run *off, const chain_run *on, size_t c) {
    int n = chain_cases[c].n;
    for (int i = 0; i < n; i++) {
        float x = (float)(i % 7) * 0.5f - 1.0f, y = x * 2;
        for (int s = 0; s < 6; s++)
            y = (y + x) * 0.5f - 0.25f;
        CHECK(on->out[i] == y);
    }
    CHECK(memcmp(off->out, on->out, sizeof on->out) == 0);
    CHECK_EQ(off->nodes, 19); /* the chain's adds, scales and subtractions */
    /* In runs, x's host copy to every device of a Replicate mesh too. */
    CHECK_EQ(on->nodes, 19 + (step && chain_cases[c].pl.kind == DT_PLACEMENT_REPLICATE));
    CHECK(step ? on->runs > 0 : on->runs == 0);
    CHECK_EQ(off->runs, 0);
    for (int d = 0; d < chain_cases[c].ndev; d++) {
        CHECK_EQ(on->live[d], off->live[d]);
        CHECK(on->live[d] > 0);
        CHECK_EQ(on->after[d], 0);
        CHECK_EQ(off->after[d], 0);
    }
}

/* Runs of shared records (core/records/step.h) as one record per node. */
static void test_runs_as_without(void) {
    for (size_t c = 0; c < N_CHAIN_CASES; c++) {
        chain_run off = {0}, on = {0};
        group_chain(1, 0, chain_cases[c].ndev, chain_cases[c].n, chain_cases[c].pl, &off);
        group_chain(1, 1, chain_cases[c].ndev, chain_cases[c].n, chain_cases[c].pl, &on);
        chains_alike(1, &off, &on, c);
    }
}

static void test_groups_as_without(void) {
    for (size_t c = 0; c < N_CHAIN_CASES; c++) {
        chain_run off = {0}, on = {0};
        group_chain(0, 0, chain_cases[c].ndev, chain_cases[c].n, chain_cases[c].pl, &off);
        group_chain(1, 0, chain_cases[c].ndev, chain_cases[c].n, chain_cases[c].pl, &on);
        chains_alike(0, &off, &on, c);
        /* Which dropped buffers are written in place depends on whether the
         * controller has let go of them when their reader runs, both ways:
         * test_bgroup.py compares the counts where that is settled. */
        CHECK(on.in_place > 0 && off.in_place > 0);
    }
}

/* A kernel that fails on grouped inputs poisons every member of its
 * output's group, and what reads that group carries the error. */
static void test_group_error(void) {
    dt_graph *g = ref_graph(1);
    dt_mesh *m = mesh1d(4);
    int64_t shape[1] = {8};
    dt_placement s0[1] = {{DT_PLACEMENT_SHARD, 0}};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), m, s0);
    dt_tensor *y = dt_binary(DT_BINARY_ADD, x, x); /* x adopted, y a group */
    dt_set_call_site("group_site.py", 7);
    dt_tensor *bad = dt_binary(DT_BINARY_DIV_FLOOR, y, y);
    dt_set_call_site(NULL, 0);
    dt_tensor *after = dt_binary(DT_BINARY_ADD, bad, y);
    CHECK(x && y && bad && after);
    float got[8];
    CHECK(dt_tensor_read(after, got, sizeof got) == DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "floor_divide failed on cpu:") != NULL);
    CHECK(strstr(dt_last_error(), "group_site.py:7") != NULL);
    dt_tensor *ok = dt_binary(DT_BINARY_MUL, y, y);
    CHECK(ok && dt_tensor_read(ok, got, sizeof got) == DT_OK);
    for (int i = 0; i < 8; i++)
        CHECK_FEQ(got[i], 16.0f);
    CHECK_EQ(dt_debug_bcast_nodes(g), 4);
    dt_tensor_release(ok);
    dt_tensor_release(after);
    dt_tensor_release(bad);
    dt_tensor_release(y);
    dt_tensor_release(x);
    dt_mesh_release(m);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
}

/* Runs with consumers on other streams in the middle: x (Shard, 4 devices)
 * -> a run of adds and scales; kernel 1's output gathered (a collective on
 * the communication streams), a per-device add (a Replicate input sliced)
 * and a copy to a mesh of devices 4 and 5, each while a run is open; then a
 * read and more of the run; an amax over the sharded dim last (reduce.c
 * gathers the local maxima on the compute streams: the same mesh dim's
 * collectives on the other kind of stream; the ref backend has no amax
 * kernel, so its value fails, but its event is the compute stream's number
 * after the gather's either way). Fills ev[value][device] =
 * (kind, device id, number) and the values. */
#define EV_VALUES 13
typedef struct ev_run {
    int kind[EV_VALUES][4];
    int64_t dev[EV_VALUES][4];
    uint64_t seq[EV_VALUES][4];
    float out[5][8];
    int64_t runs, colls;
} ev_run;

static void events_prog(int bcast, int step, ev_run *r) {
    dt_graph *g = ref_graph(bcast);
    CHECK(dt_graph_set_step(g, step) == DT_OK);
    dt_mesh *m = mesh1d(4);
    int64_t shape2[1] = {2}, ids2[2] = {4, 5}, shape[1] = {8};
    dt_mesh *m2 = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape2, ids2, NULL, &m2) == DT_OK);
    float host[8];
    for (int i = 0; i < 8; i++)
        host[i] = (float)i * 0.5f - 1.0f;
    dt_placement s0[1] = {{DT_PLACEMENT_SHARD, 0}}, rep[1] = {{DT_PLACEMENT_REPLICATE, 0}};
    dt_tensor *v[EV_VALUES] = {NULL};
    v[0] = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, host, sizeof host, m, s0);
    v[1] = dt_binary_scalar(DT_BINARY_MUL, v[0], dt_scalar_float(2), 0);
    v[2] = dt_binary(DT_BINARY_ADD, v[1], v[0]);
    v[3] = dt_binary_scalar(DT_BINARY_SUB, v[2], dt_scalar_float(1), 0);
    v[4] = dt_redistribute(v[2], m, rep); /* waits on kernel 1 of the run */
    v[5] = dt_binary(DT_BINARY_MUL, v[3], v[1]);
    v[10] = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(0.25), m, rep);
    v[9] = dt_binary(DT_BINARY_ADD, v[3], v[10]); /* per device (a Replicate input sliced) */
    v[6] = dt_redistribute(v[3], m2, s0);         /* another mesh's streams */
    int64_t dim0[1] = {0};
    dt_tensor *part = dt_sum(v[3], 1, dim0, 1); /* Partial: its all-reduce reads kernel 2 */
    v[11] = dt_redistribute(part, m, rep);
    dt_tensor_release(part);
    CHECK(v[0] && v[1] && v[2] && v[3] && v[4] && v[5] && v[6] && v[9] && v[10] && v[11]);
    CHECK(dt_tensor_read(v[5], r->out[0], sizeof r->out[0]) == DT_OK);
    v[7] = dt_binary(DT_BINARY_ADD, v[5], v[3]);
    v[8] = dt_binary_scalar(DT_BINARY_MUL, v[7], dt_scalar_float(0.5), 0);
    v[12] = dt_reduce(DT_REDUCE_AMAX, v[3], 1, dim0, 0, -1);
    CHECK(v[7] && v[8] && v[12]);
    CHECK(dt_tensor_read(v[4], r->out[1], sizeof r->out[1]) == DT_OK);
    CHECK(dt_tensor_read(v[6], r->out[2], sizeof r->out[2]) == DT_OK);
    CHECK(dt_tensor_read(v[9], r->out[3], sizeof r->out[3]) == DT_OK);
    CHECK(dt_tensor_read(v[11], r->out[4], sizeof(float)) == DT_OK);
    for (int i = 0; i < EV_VALUES; i++)
        for (int d = 0; d < (i == 6 ? 2 : 4); d++)
            CHECK(dt_debug_event(v[i], d, &r->kind[i][d], &r->dev[i][d], &r->seq[i][d]) == DT_OK);
    r->runs = dt_debug_step_runs(g);
    r->colls = dt_debug_bcast_collectives(g);
    for (int i = 0; i < EV_VALUES; i++)
        dt_tensor_release(v[i]);
    dt_mesh_release(m2);
    dt_mesh_release(m);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
}

/* Events by (run, number) are those of one record per kernel; a shared
 * collective's (one record for all ranks) those of one kernel per rank. */
static void test_run_events(void) {
    ev_run off, on, per;
    memset(&off, 0, sizeof off);
    memset(&on, 0, sizeof on);
    memset(&per, 0, sizeof per);
    events_prog(1, 0, &off);
    events_prog(1, 1, &on);
    events_prog(0, 0, &per);
    CHECK_EQ(off.runs, 0);
    CHECK(on.runs >= 2);
    CHECK_EQ(on.colls, 3); /* the gather, the all-reduce and amax's gather */
    CHECK_EQ(per.colls, 0);
    CHECK(memcmp(off.out, on.out, sizeof on.out) == 0);
    CHECK(memcmp(per.out, on.out, sizeof on.out) == 0);
    float sum = 0;
    for (int i = 0; i < 8; i++)
        sum += ((float)i * 0.5f - 1.0f) * 3 - 1;
    CHECK(on.out[4][0] == sum);
    for (int i = 0; i < 8; i++) {
        float x = (float)i * 0.5f - 1.0f, y1 = x * 2, y2 = y1 + x, y3 = y2 - 1;
        CHECK(on.out[0][i] == y3 * y1);
        CHECK(on.out[1][i] == y2);
        CHECK(on.out[2][i] == y3);
        CHECK(on.out[3][i] == y3 + 0.25f);
    }
    for (int i = 0; i < EV_VALUES; i++)
        for (int d = 0; d < (i == 6 ? 2 : 4); d++) {
            CHECK_EQ(on.kind[i][d], off.kind[i][d]);
            CHECK_EQ(on.dev[i][d], off.dev[i][d]);
            CHECK_EQ((int64_t)on.seq[i][d], (int64_t)off.seq[i][d]);
            CHECK_EQ(per.kind[i][d], off.kind[i][d]);
            CHECK_EQ(per.dev[i][d], off.dev[i][d]);
            CHECK_EQ((int64_t)per.seq[i][d], (int64_t)off.seq[i][d]);
        }
    /* The collectives on the communication streams (kind 1), in order. */
    for (int d = 0; d < 4; d++)
        CHECK(on.kind[4][d] == 1 && on.kind[11][d] == 1 && on.seq[11][d] > on.seq[4][d]);
    /* The run's kernels on device 3's compute stream, numbered in order. */
    CHECK(on.kind[1][3] == 0 && on.dev[1][3] == 3);
    CHECK_EQ((int64_t)on.seq[2][3], (int64_t)on.seq[1][3] + 1);
    CHECK_EQ((int64_t)on.seq[3][3], (int64_t)on.seq[2][3] + 1);
    CHECK(on.seq[5][3] > on.seq[3][3] && on.seq[8][3] == on.seq[7][3] + 1);
}

/* The same with collectives on the compute streams (DTORCH_OVERLAP=0 when
 * the graphs are made): a shared collective closes the open run there
 * before it is numbered. Every value's event and value as per rank. */
static void test_run_events_overlap_off(void) {
    ev_run off, on, per;
    memset(&off, 0, sizeof off);
    memset(&on, 0, sizeof on);
    memset(&per, 0, sizeof per);
    setenv("DTORCH_OVERLAP", "0", 1);
    events_prog(1, 0, &off);
    events_prog(1, 1, &on);
    events_prog(0, 0, &per);
    unsetenv("DTORCH_OVERLAP");
    CHECK_EQ(on.colls, 3);
    CHECK(memcmp(off.out, on.out, sizeof on.out) == 0);
    CHECK(memcmp(per.out, on.out, sizeof on.out) == 0);
    for (int i = 0; i < EV_VALUES; i++)
        for (int d = 0; d < (i == 6 ? 2 : 4); d++) {
            CHECK_EQ(on.kind[i][d], per.kind[i][d]);
            CHECK_EQ(on.dev[i][d], per.dev[i][d]);
            CHECK_EQ((int64_t)on.seq[i][d], (int64_t)per.seq[i][d]);
            CHECK_EQ((int64_t)off.seq[i][d], (int64_t)per.seq[i][d]);
        }
    for (int d = 0; d < 4; d++) /* the collectives on the compute streams */
        CHECK(on.kind[4][d] == 0 && on.kind[11][d] == 0);
}

/* Kernel 2 of a run of 4 fails on every device: its error names its own
 * call site (not the run's first kernel's), what reads it carries that, and
 * the run's other kernels are unaffected. */
static void test_run_error_line(void) {
    dt_graph *g = ref_graph(1);
    dt_mesh *m = mesh1d(4);
    int64_t shape[1] = {8};
    dt_placement s0[1] = {{DT_PLACEMENT_SHARD, 0}};
    dt_tensor *x = dt_full(g, DT_FLOAT32, 1, shape, dt_scalar_float(2), m, s0);
    CHECK(x && dt_graph_sync(g) == DT_OK);
    dt_set_call_site("run_site.py", 10);
    dt_tensor *a = dt_binary(DT_BINARY_ADD, x, x);
    dt_set_call_site("run_site.py", 11);
    dt_tensor *bad = dt_binary(DT_BINARY_DIV_FLOOR, a, a);
    dt_set_call_site("run_site.py", 12);
    dt_tensor *after = dt_binary(DT_BINARY_ADD, bad, a);
    dt_tensor *ok = dt_binary(DT_BINARY_MUL, a, x);
    dt_set_call_site(NULL, 0);
    CHECK(a && bad && after && ok);
    float got[8];
    CHECK(dt_tensor_read(after, got, sizeof got) == DT_EKERNEL);
    CHECK(strstr(dt_last_error(), "floor_divide failed on cpu:") != NULL);
    CHECK(strstr(dt_last_error(), "run_site.py:11") != NULL);
    CHECK(dt_tensor_read(ok, got, sizeof got) == DT_OK);
    for (int i = 0; i < 8; i++)
        CHECK_FEQ(got[i], 8.0f);
    CHECK(dt_debug_step_runs(g) >= 1);
    dt_tensor_release(ok);
    dt_tensor_release(after);
    dt_tensor_release(bad);
    dt_tensor_release(a);
    dt_tensor_release(x);
    dt_mesh_release(m);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
}

/* Collectives over one dim of a 2-D mesh (each coordinate of the other dim
 * its own group): one shared record with per-slot groups and numbers
 * (core/controller/lower_coll.c). x (4 x 6) on a rows x cols mesh as
 * [Shard(0), Shard(1)]; all-reduces along each mesh dim (row and column
 * sums), a gather to Replicate along both, a Partial made Shard (a
 * reduce-scatter where the plan takes one), each read by a shared record
 * after. Fills the values, every value's event on every device, and what
 * each device's streams ran: (stream kind, group, number, rank) in order. */
#define C2_VALUES 9
#define C2_NOTES 64
typedef struct c2_run {
    float out[4][24];
    int kind[C2_VALUES][6];
    int64_t dev[C2_VALUES][6];
    uint64_t seq[C2_VALUES][6];
    int nnotes[6];
    uint64_t note[6][C2_NOTES][4];
    int64_t colls;
} c2_run;

static void coll2d_prog(int bcast, int rows, int cols, c2_run *r) {
    dt_graph *g = ref_graph(bcast);
    int64_t mshape[2] = {rows, cols}, ids[6] = {0, 1, 2, 3, 4, 5}, shape[2] = {4, 6};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 2, mshape, ids, NULL, &m) == DT_OK);
    CHECK(dt_debug_coll_log(g, 1024) == DT_OK);
    float host[24];
    for (int i = 0; i < 24; i++)
        host[i] = (float)i * 0.5f - 3.0f;
    dt_placement ss[2] = {{DT_PLACEMENT_SHARD, 0}, {DT_PLACEMENT_SHARD, 1}};
    dt_placement s0r[2] = {{DT_PLACEMENT_SHARD, 0}, {DT_PLACEMENT_REPLICATE, 0}};
    dt_placement rs1[2] = {{DT_PLACEMENT_REPLICATE, 0}, {DT_PLACEMENT_SHARD, 1}};
    dt_placement rr[2] = {{DT_PLACEMENT_REPLICATE, 0}, {DT_PLACEMENT_REPLICATE, 0}};
    dt_placement s00[2] = {{DT_PLACEMENT_SHARD, 0}, {DT_PLACEMENT_SHARD, 0}};
    dt_tensor *v[C2_VALUES] = {NULL};
    int64_t dim0[1] = {0}, dim1[1] = {1};
    /* Held while recorded: the schedule (sched.c) then sees the whole program
     * in one window in both runs, so each stream's numbers do not depend on
     * how far the controller got (compared below). */
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    v[0] = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, host, sizeof host, m, ss);
    dt_tensor *rsum = dt_sum(v[0], 1, dim1, 1); /* [Shard(0), Partial] */
    dt_tensor *csum = dt_sum(v[0], 1, dim0, 1); /* [Partial, Shard(1)] */
    dt_tensor *rsum1 = dt_sum(v[0], 1, dim1, 0);
    v[1] = dt_redistribute(rsum, m, s0r);  /* all-reduce along mesh dim 1: one group per row */
    v[2] = dt_redistribute(csum, m, rs1);  /* along mesh dim 0: one group per column */
    v[3] = dt_redistribute(v[0], m, rr);   /* gathers along both */
    v[4] = dt_redistribute(rsum1, m, s00); /* a Partial made Shard */
    v[5] = dt_binary_scalar(DT_BINARY_MUL, v[1], dt_scalar_float(2), 0);
    v[6] = dt_binary(DT_BINARY_ADD, v[2], v[2]);
    v[7] = dt_binary_scalar(DT_BINARY_SUB, v[3], dt_scalar_float(1), 0);
    v[8] = dt_binary_scalar(DT_BINARY_MUL, v[4], dt_scalar_float(3), 0);
    dt_tensor_release(rsum);
    dt_tensor_release(csum);
    dt_tensor_release(rsum1);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    for (int i = 0; i < C2_VALUES; i++)
        CHECK(v[i] != NULL);
    CHECK(dt_tensor_read(v[5], r->out[0], 4 * sizeof(float)) == DT_OK);
    CHECK(dt_tensor_read(v[6], r->out[1], 6 * sizeof(float)) == DT_OK);
    CHECK(dt_tensor_read(v[7], r->out[2], 24 * sizeof(float)) == DT_OK);
    CHECK(dt_tensor_read(v[8], r->out[3], 4 * sizeof(float)) == DT_OK);
    int ndev = rows * cols;
    for (int i = 0; i < C2_VALUES; i++)
        for (int d = 0; d < ndev; d++)
            CHECK(dt_debug_event(v[i], d, &r->kind[i][d], &r->dev[i][d], &r->seq[i][d]) == DT_OK);
    CHECK(dt_graph_sync(g) == DT_OK);
    int64_t n = dt_debug_coll_noted(g, -1, NULL, NULL, NULL, NULL, NULL);
    CHECK(n > 0 && n < 1024);
    for (int64_t i = 0; i < n; i++) {
        int64_t dev = -1;
        int kind = -1, rank = -1;
        uint64_t group = 0, seq = 0;
        dt_debug_coll_noted(g, i, &dev, &kind, &group, &seq, &rank);
        CHECK(dev >= 0 && dev < ndev);
        if (dev < 0 || dev >= ndev || r->nnotes[dev] == C2_NOTES)
            continue;
        uint64_t *e = r->note[dev][r->nnotes[dev]++];
        e[0] = (uint64_t)kind;
        e[1] = group;
        e[2] = seq;
        e[3] = (uint64_t)rank;
    }
    /* Group ids count up across graphs: each as its place in creation order. */
    uint64_t gids[64];
    int ng = 0;
    for (int d = 0; d < ndev; d++)
        for (int i = 0; i < r->nnotes[d]; i++) {
            int k = 0;
            while (k < ng && gids[k] != r->note[d][i][1])
                k++;
            if (k == ng && ng < 64)
                gids[ng++] = r->note[d][i][1];
        }
    for (int d = 0; d < ndev; d++)
        for (int i = 0; i < r->nnotes[d]; i++) {
            uint64_t below = 0;
            for (int k = 0; k < ng; k++)
                below += gids[k] < r->note[d][i][1];
            r->note[d][i][1] = below;
        }
    r->colls = dt_debug_bcast_collectives(g);
    for (int i = 0; i < C2_VALUES; i++)
        dt_tensor_release(v[i]);
    dt_mesh_release(m);
    CHECK(dt_graph_shutdown(g) == DT_OK);
    dt_graph_release(g);
}

/* A 2-D mesh's collectives as shared records meet in the same groups, under
 * the same numbers and ranks, with the same events and values, as one
 * kernel per rank; and agree with the host. */
static void test_coll_2d(int rows, int cols) {
    c2_run *off = calloc(1, sizeof *off), *on = calloc(1, sizeof *on);
    CHECK(off && on);
    if (!off || !on) {
        free(off);
        free(on);
        return;
    }
    coll2d_prog(0, rows, cols, off);
    coll2d_prog(1, rows, cols, on);
    CHECK_EQ(off->colls, 0);
    /* The two all-reduces, the gathers, the Partial's; on 3 x 2 the rows'
     * blocks are uneven (2, 2 and 0 rows of x), so the groups along mesh dim 1
     * are not alike and stay per rank: the columns' all-reduce and the
     * second gather are shared. */
    CHECK(on->colls >= (rows == 3 ? 2 : 4));
    CHECK(memcmp(off->out, on->out, sizeof on->out) == 0);
    for (int i = 0; i < 4; i++) {
        float row = 0;
        for (int j = 0; j < 6; j++)
            row += (float)(i * 6 + j) * 0.5f - 3.0f;
        CHECK(on->out[0][i] == row * 2);
        CHECK(on->out[3][i] == row * 3);
    }
    for (int j = 0; j < 6; j++) {
        float col = 0;
        for (int i = 0; i < 4; i++)
            col += (float)(i * 6 + j) * 0.5f - 3.0f;
        CHECK(on->out[1][j] == col + col);
    }
    for (int i = 0; i < 24; i++)
        CHECK(on->out[2][i] == (float)i * 0.5f - 4.0f);
    for (int i = 0; i < C2_VALUES; i++)
        for (int d = 0; d < rows * cols; d++) {
            CHECK_EQ(on->kind[i][d], off->kind[i][d]);
            CHECK_EQ(on->dev[i][d], off->dev[i][d]);
            CHECK_EQ((int64_t)on->seq[i][d], (int64_t)off->seq[i][d]);
        }
    for (int d = 0; d < rows * cols; d++) {
        CHECK(on->nnotes[d] >= 4);
        CHECK_EQ(on->nnotes[d], off->nnotes[d]);
        CHECK(memcmp(on->note[d], off->note[d], sizeof on->note[d]) == 0);
    }
    free(off);
    free(on);
}

int main(void) {
    test_same_values();
    test_matmul();
    test_kernel_error(0);
    test_kernel_error(1);
    test_cancel(0);
    test_cancel(1);
    test_memory();
    test_groups_as_without();
    test_group_error();
    test_runs_as_without();
    test_run_events();
    test_run_events_overlap_off();
    test_run_error_line();
    test_coll_2d(2, 2);
    test_coll_2d(2, 3);
    test_coll_2d(3, 2);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    return failures ? 1 : 0;
}
