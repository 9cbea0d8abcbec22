/*
 * The workers' buffer donation (src/core/worker/kernel_stream.c): an elementwise
 * kernel may write its result into its first input's buffer only when it
 * holds the last reference to that input. Checked on the 'ref' backend
 * (which writes in place when asked and the buffer has one owner, as torch's
 * in-place ATen ops do) with expectations computed here:
 *  - an input the client still holds, or that another queued kernel still
 *    reads, keeps its old values (fails if donation ignores the count);
 *  - a chain whose intermediates are dropped before their consumers run is
 *    computed in one buffer (the device's peak grows by one buffer, not
 *    two) and gives the right values.
 * A test gate holds the chain until the controller has seen the drops, so
 * which kernels may donate does not depend on timing. Also: a device's blob
 * that shares a source's storage (the ref backend's whole-tensor SLICE, as
 * a view) is still charged to that device (core/records/blob.c). Runs under
 * ASan/UBSan and TSan.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static dt_mesh *one_device(int64_t id) {
    int64_t shape[1] = {1};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, &id, NULL, &m) == DT_OK);
    return m;
}

static void expect_values(dt_tensor *t, const float *want, int64_t n, const char *what) {
    float *got = calloc((size_t)(n ? n : 1), sizeof *got);
    dt_status st = dt_tensor_read(t, got, (size_t)n * sizeof *got);
    CHECK(st == DT_OK);
    for (int64_t i = 0; st == DT_OK && i < n; i++)
        if (got[i] != want[i]) {
            fprintf(stderr, "%s: element %lld: got %g, want %g\n", what, (long long)i, got[i], want[i]);
            failures++;
            break;
        }
    free(got);
}

#define NV 1000

/* Inputs that are still referenced keep their values. */
static void test_referenced_inputs_survive(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = one_device(0);
    int64_t shape[1] = {NV};
    float v[NV], want[NV];
    for (int i = 0; i < NV; i++)
        v[i] = (float)(i % 17) - 8.0f;

    /* Held by the client: x + 1, x * y, -x, 2 - x all leave x alone. */
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, v, sizeof v, m, NULL);
    dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, x, dt_scalar_float(1), 0);
    dt_tensor *z = dt_binary(DT_BINARY_MUL, x, y);
    dt_tensor *w = dt_neg(x);
    dt_tensor *q = dt_binary_scalar(DT_BINARY_SUB, x, dt_scalar_float(2), 1);
    CHECK(x && y && z && w && q);
    expect_values(x, v, NV, "x after x + 1, x * y, -x, 2 - x");
    for (int i = 0; i < NV; i++)
        want[i] = v[i] + 1.0f;
    expect_values(y, want, NV, "x + 1");
    for (int i = 0; i < NV; i++)
        want[i] = v[i] * (v[i] + 1.0f);
    expect_values(z, want, NV, "x * (x + 1)");
    for (int i = 0; i < NV; i++)
        want[i] = -v[i];
    expect_values(w, want, NV, "-x");
    for (int i = 0; i < NV; i++)
        want[i] = 2.0f - v[i];
    expect_values(q, want, NV, "2 - x");
    dt_tensor_release(q);
    dt_tensor_release(w);
    dt_tensor_release(z);
    dt_tensor_release(y);

    /* Dropped by the client but still read by a later kernel: the first
     * reader must not write over it. */
    dt_tensor *a = dt_binary_scalar(DT_BINARY_MUL, x, dt_scalar_float(1), 0); /* a fresh buffer */
    dt_tensor *b = dt_binary_scalar(DT_BINARY_ADD, a, dt_scalar_float(100), 0);
    dt_tensor *c = dt_binary_scalar(DT_BINARY_MUL, a, dt_scalar_float(3), 0);
    dt_tensor *d = dt_neg(a);
    dt_tensor_release(a);
    for (int i = 0; i < NV; i++)
        want[i] = v[i] + 100.0f;
    expect_values(b, want, NV, "a + 100 (a dropped, read again later)");
    for (int i = 0; i < NV; i++)
        want[i] = v[i] * 3.0f;
    expect_values(c, want, NV, "a * 3 after a + 100");
    for (int i = 0; i < NV; i++)
        want[i] = -v[i];
    expect_values(d, want, NV, "-a after a * 3");
    dt_tensor_release(d);
    dt_tensor_release(c);
    dt_tensor_release(b);
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* Waits until the controller has taken everything pushed before this call:
 * a read on an idle device completes only after its node was lowered, and a
 * second read pushed after that completes only after a later round, whose
 * releases (taken first in each round) include every drop made before the
 * first read was pushed. */
static void controller_round_trip(dt_tensor *idle) {
    for (int i = 0; i < 2; i++) {
        dt_future *f = dt_tensor_fetch(idle);
        CHECK(f && dt_future_wait(f, -1) == DT_OK);
        dt_future_release(f);
    }
}

/* A chain whose intermediates are dropped before they are consumed runs in
 * one buffer and is right. */
static void test_donated_chain(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = one_device(5), *other = one_device(6);
    enum { n = 1 << 16 };
    int64_t shape[1] = {n}, one[1] = {1};
    float *v = malloc(n * sizeof *v), *want = malloc(n * sizeof *want);
    for (int i = 0; i < n; i++)
        v[i] = (float)(i % 1001) * 0.25f - 50.0f;
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, v, n * sizeof *v, m, NULL);
    dt_tensor *idle = dt_full(g, DT_FLOAT32, 1, one, dt_scalar_float(0), other, NULL);
    CHECK(x && idle && dt_graph_sync(g) == DT_OK);

    dt_debug_gate *gate = NULL;
    CHECK(dt_debug_gate_create(&gate) == DT_OK);
    dt_tensor *t = dt_debug_gated(x, gate); /* a copy of x, made when the gate opens */
    dt_tensor *u = dt_binary_scalar(DT_BINARY_ADD, t, dt_scalar_float(1), 0);
    dt_tensor_release(t);
    dt_tensor *s = dt_binary_scalar(DT_BINARY_MUL, u, dt_scalar_float(2), 0);
    dt_tensor_release(u);
    dt_tensor *w = dt_neg(s);
    dt_tensor_release(s);
    dt_tensor *r = dt_binary(DT_BINARY_SUB, w, x); /* x is still the client's: w's buffer is reused */
    dt_tensor_release(w);
    CHECK(r != NULL);
    controller_round_trip(idle);

    int64_t before = 0, peak = 0;
    CHECK(dt_memory_stats(DT_DEVICE_CPU, 5, &before, NULL) == DT_OK);
    dt_reset_peak_memory_stats();
    CHECK(!dt_debug_gate_is_open(gate));
    dt_debug_gate_open(gate);
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK(dt_memory_stats(DT_DEVICE_CPU, 5, NULL, &peak) == DT_OK);
    /* x (held) plus one buffer for t, u, s, w and r in turn. */
    if (peak - before != (int64_t)(n * sizeof(float))) {
        fprintf(stderr, "donated chain: peak grew by %lld bytes, want one buffer (%lld)\n",
                (long long)(peak - before), (long long)(n * sizeof(float)));
        failures++;
    }
    for (int i = 0; i < n; i++)
        want[i] = -((v[i] + 1.0f) * 2.0f) - v[i];
    expect_values(r, want, n, "-((x + 1) * 2) - x");
    expect_values(x, v, n, "x after the chain");
    dt_debug_gate_release(gate);
    dt_tensor_release(r);
    dt_tensor_release(idle);
    dt_tensor_release(x);
    free(want);
    free(v);
    dt_mesh_release(other);
    dt_mesh_release(m);
    dt_graph_release(g);
}

static int64_t current(int64_t id) {
    int64_t cur = -1;
    CHECK(dt_memory_stats(DT_DEVICE_CPU, id, &cur, NULL) == DT_OK);
    return cur;
}

#define CHECK_BYTES(id, want, what)                                                                          \
    do {                                                                                                     \
        int64_t got_ = current(id);                                                                          \
        if (got_ != (want)) {                                                                                \
            fprintf(stderr, "%s: device %d holds %lld bytes, want %lld\n", what, (int)(id), (long long)got_, \
                    (long long)(want));                                                                      \
            failures++;                                                                                      \
        }                                                                                                    \
    } while (0)

/* A device's value is charged to it even where it shares its storage: the
 * ref backend's whole-tensor SLICE of a source (the host copy) shares the
 * buffer, as a view would, but the source is on no device's account, so
 * each device of a Replicate is charged its blob (core/records/blob.c). */
static void test_sources_are_charged(void) {
    dt_graph *g = ref_graph();
    int64_t ids[2] = {21, 22}, mshape[1] = {2}, shape[1] = {NV};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &m) == DT_OK);
    const int64_t bytes = NV * (int64_t)sizeof(float);
    int64_t base0 = current(21), base1 = current(22);
    float v[NV];
    for (int i = 0; i < NV; i++)
        v[i] = (float)i;
    dt_tensor *x = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, v, sizeof v, m, NULL);
    CHECK(x && dt_graph_sync(g) == DT_OK);
    CHECK_BYTES(21, base0 + bytes, "a Replicate source on its first device");
    CHECK_BYTES(22, base1 + bytes, "a Replicate source on its second device");
    expect_values(x, v, NV, "the source");
    dt_tensor_release(x);
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK_BYTES(21, base0, "after the source was dropped");
    CHECK_BYTES(22, base1, "after the source was dropped");
    dt_mesh_release(m);
    dt_graph_release(g);
}

int main(void) {
    test_referenced_inputs_survive();
    test_donated_chain();
    test_sources_are_charged();
    if (failures) {
        fprintf(stderr, "test_kernel_stream: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_kernel_stream: all passed\n");
    return 0;
}
