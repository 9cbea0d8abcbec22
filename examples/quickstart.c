/*
 * quickstart.c — examples/quickstart.py through the public C API.
 *
 * A 4x3 random tensor sharded by rows over two CPU devices, then
 * y = (x * 2 + 1).sum(dim=0) and y redistributed to Replicate. Every call
 * returns at once; only dt_tensor_read waits.
 *
 * It also checks itself, because it runs as a CTest test: y is recomputed on
 * the host from the values of x, and the program exits non-zero on a mismatch.
 *
 *     cmake --build build && ./build/quickstart_c
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "dtorch/dtorch.h"

#define ROWS 4
#define COLS 3

/* Reports a failed dtorch call with the thread's error message. */
static int fail(const char *what) {
    fprintf(stderr, "quickstart: %s failed: %s: %s\n", what, dt_status_str(dt_last_status()),
            dt_last_error());
    return 1;
}

static void print_mesh(const dt_mesh *mesh) {
    const int64_t *ids = dt_mesh_ids(mesh);
    printf("DeviceMesh('%s', [", dt_mesh_device_type(mesh) == DT_DEVICE_CUDA ? "cuda" : "cpu");
    for (int64_t i = 0; i < dt_mesh_size(mesh, -1); i++)
        printf("%s%lld", i ? ", " : "", (long long)ids[i]);
    printf("])");
}

static void print_placements(const dt_tensor *t) {
    const dt_placement *p = dt_tensor_placements(t);
    printf("[");
    for (int d = 0; d < dt_mesh_ndim(dt_tensor_mesh(t)); d++) {
        if (d)
            printf(", ");
        switch (p[d].kind) {
        case DT_PLACEMENT_SHARD:
            printf("Shard(dim=%d)", (int)p[d].dim);
            break;
        case DT_PLACEMENT_PARTIAL:
            printf("Partial()");
            break;
        default:
            printf("Replicate()");
            break;
        }
    }
    printf("]");
}

/* Prints the metadata of `t` and its `n` float values (read beforehand). */
static void print_tensor(const char *name, const dt_tensor *t, const float *values, int n) {
    const int64_t *shape = dt_tensor_shape(t);
    printf("%s: shape=(", name);
    for (int d = 0; d < dt_tensor_ndim(t); d++)
        printf("%s%lld", d ? ", " : "", (long long)shape[d]);
    printf("%s), dtype=%s, device_mesh=", dt_tensor_ndim(t) == 1 ? "," : "",
           dt_dtype_name(dt_tensor_dtype(t)));
    print_mesh(dt_tensor_mesh(t));
    printf(", placements=");
    print_placements(t);
    printf("\n  values:");
    for (int i = 0; i < n; i++)
        printf("%s%.6f", i % COLS == 0 && n > COLS ? "\n    " : " ", values[i]);
    printf("\n");
}

int main(void) {
    int rc = 1;
    dt_graph *g = NULL;
    dt_mesh *mesh = NULL;
    dt_tensor *x = NULL, *x2 = NULL, *x21 = NULL, *y = NULL, *yr = NULL;
    const int64_t mesh_shape[] = {2}, ids[] = {0, 1}, shape[] = {ROWS, COLS}, dim0[] = {0};
    const dt_placement shard0[] = {{DT_PLACEMENT_SHARD, 0}};
    const dt_placement replicate[] = {{DT_PLACEMENT_REPLICATE, 0}};
    float xv[ROWS * COLS], yv[COLS], yrv[COLS];

    /* One graph: a controller thread plus one worker per device it uses. NULL
     * options choose the default backend ("torch" when built with LibTorch). */
    if (dt_graph_create(NULL, &g) != DT_OK) {
        fail("dt_graph_create");
        goto done;
    }
    if (dt_mesh_create(DT_DEVICE_CPU, 1, mesh_shape, ids, NULL, &mesh) != DT_OK) {
        fail("dt_mesh_create");
        goto done;
    }

    /* Recording: each call validates, infers the output's metadata and returns. */
    if (!(x = dt_rand(g, DT_FLOAT32, 2, shape, mesh, shard0))) {
        fail("dt_rand");
        goto done;
    }
    if (!(x2 = dt_binary_scalar(DT_BINARY_MUL, x, dt_scalar_float(2.0), 0))) {
        fail("dt_binary_scalar(MUL)");
        goto done;
    }
    if (!(x21 = dt_binary_scalar(DT_BINARY_ADD, x2, dt_scalar_float(1.0), 0))) {
        fail("dt_binary_scalar(ADD)");
        goto done;
    }
    /* Summing over the sharded dim leaves a pending sum: y is Partial. */
    if (!(y = dt_sum(x21, 1, dim0, 0))) {
        fail("dt_sum");
        goto done;
    }
    /* Partial -> Replicate is an all-reduce across the two devices. */
    if (!(yr = dt_redistribute(y, NULL, replicate))) {
        fail("dt_redistribute");
        goto done;
    }
    printf("graph backend: %s\n", dt_graph_backend(g));

    /* Value reads: the only calls that wait. */
    if (dt_tensor_read(x, xv, sizeof xv) != DT_OK) {
        fail("dt_tensor_read(x)");
        goto done;
    }
    if (dt_tensor_read(y, yv, sizeof yv) != DT_OK) {
        fail("dt_tensor_read(y)");
        goto done;
    }
    if (dt_tensor_read(yr, yrv, sizeof yrv) != DT_OK) {
        fail("dt_tensor_read(y replicated)");
        goto done;
    }
    print_tensor("x", x, xv, ROWS * COLS);
    print_tensor("y = (x * 2 + 1).sum(dim=0)", y, yv, COLS);
    print_tensor("y.redistribute([Replicate()])", yr, yrv, COLS);

    /* Self-check: metadata, then values against the host computation. */
    rc = 0;
    if (dt_tensor_ndim(y) != 1 || dt_tensor_shape(y)[0] != COLS || dt_tensor_dtype(y) != DT_FLOAT32) {
        fprintf(stderr, "quickstart: y should be float32 of shape (%d)\n", COLS);
        rc = 1;
    }
    if (dt_tensor_placements(x)[0].kind != DT_PLACEMENT_SHARD || dt_tensor_placements(x)[0].dim != 0 ||
        dt_tensor_placements(y)[0].kind != DT_PLACEMENT_PARTIAL ||
        dt_tensor_placements(yr)[0].kind != DT_PLACEMENT_REPLICATE) {
        fprintf(stderr, "quickstart: expected placements x [Shard(0)], y [Partial()], "
                        "y replicated [Replicate()]\n");
        rc = 1;
    }
    for (int i = 0; i < ROWS * COLS; i++) {
        if (!(xv[i] >= 0.0f && xv[i] < 1.0f)) {
            fprintf(stderr, "quickstart: x[%d] = %.9g is not in [0, 1)\n", i, xv[i]);
            rc = 1;
        }
    }
    for (int j = 0; j < COLS; j++) {
        double want = 0.0;
        for (int i = 0; i < ROWS; i++)
            want += (double)(xv[i * COLS + j] * 2.0f + 1.0f);
        /* The device sums in float32 and in another order: compare loosely. */
        double tol = 1e-5 * fabs(want) + 1e-6;
        if (fabs(yv[j] - want) > tol || fabs(yrv[j] - want) > tol) {
            fprintf(stderr, "quickstart: column %d: expected %.9g, got y %.9g and replicated %.9g\n", j, want,
                    yv[j], yrv[j]);
            rc = 1;
        }
    }
    printf(rc == 0 ? "quickstart: OK (matches the host computation)\n" : "quickstart: MISMATCH\n");

done:
    /* Releases accept NULL; the graph's last reference shuts it down. */
    dt_tensor_release(yr);
    dt_tensor_release(y);
    dt_tensor_release(x21);
    dt_tensor_release(x2);
    dt_tensor_release(x);
    dt_mesh_release(mesh);
    dt_graph_release(g);
    return rc;
}
