/*
 * Running a user kernel (DT_KC_USER: the caller's dt_user_kernel, public
 * dtorch_ops.h) on a device's worker: each input's local piece goes to the
 * caller's function as a DLPack tensor made by the stream's backend, and the
 * DLPack tensor it returns becomes the output's value after a check of its
 * dtype and shape against the device's block of the output (the lowering's
 * attributes, src/ops/user.c). Any failure poisons the output with the
 * whole message the function gave (a Python traceback can be long), after
 * the op's name, the device and the call site.
 *
 * The function learns the worker's native stream (a CUDA device's
 * cudaStream_t) from dt_user_kernel_stream while it runs.
 *
 * Threads: the stream's worker thread. The caller's function may take its
 * own locks (the extension takes the GIL); no runtime lock is held here.
 */
#include <stdio.h>
#include <string.h>

#include "core/records/blob.h"
#include "core/records/kernel.h"
#include "core/records/kernel_rec.h"
#include "core/records/ufn.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

/* Room for the function's message: a Python traceback of a few frames. */
#define USER_ERR_MAX 16384

/* The worker's native stream while a user kernel's function runs on this
 * thread (dt_user_kernel_stream), NULL otherwise. */
static _Thread_local void *tls_stream;

void *dt_user_kernel_stream(void) { return tls_stream; }

static void fail(dt__krec *k, const dt__stream *s, const char *what) {
    if (k->out->error)
        return;
    size_t cap = strlen(what) + 512;
    char *buf = dt__malloc(cap);
    if (!buf) {
        k->out->error = dt__strdup("a user kernel failed (no memory left for its message)");
        return;
    }
    dt__kernel_failure(buf, cap, k, s, what);
    k->out->error = buf;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* The returned value against the device's block (dtype, ndim, shape in the
 * record's attributes); 0 when it fits, else a message in err. */
static int check_result(const dt__krec *k, dt_dtype dtype, int ndim, const int64_t *shape, char *err,
                        size_t cap) {
    dt__kattr a;
    dt__kattr_unpack(k, &a);
    if ((int32_t)dtype == a.dtype && ndim == a.ndim &&
        memcmp(shape, a.shape, sizeof *shape * (size_t)ndim) == 0)
        return 0;
    char got[256], want[256];
    shape_text(got, sizeof got, ndim, shape);
    shape_text(want, sizeof want, a.ndim, a.shape);
    snprintf(
        err, cap,
        "the function returned a tensor of shape %s and dtype %s; this device's block of the output is %s "
        "of dtype %s (out_meta, or the meta-tensor run, said so)",
        got, dt_dtype_name(dtype), want, dt_dtype_name((dt_dtype)a.dtype));
    return -1;
}

void dt__user_run(dt__krec *k, dt__stream *s) {
    dt__ufn *f = k->handle;
    k->handle = NULL; /* this kernel's reference ends here */
    void *dl[DT_MAX_OP_INPUTS] = {NULL};
    int made = 0;
    char *err = NULL;
    for (int i = 0; i < k->n_in; i++)
        if (k->in[i]->error) {
            k->out->error = dt__strdup(k->in[i]->error);
            goto done;
        }
    if (!s->be->to_dlpack || !s->be->from_dlpack) {
        fail(k, s, "this backend has no DLPack, which user kernels need (DT_EUNSUPPORTED)");
        goto done;
    }
    err = dt__malloc(USER_ERR_MAX);
    if (!err) {
        fail(k, s, "out of memory");
        goto done;
    }
    err[0] = '\0';
    for (; made < k->n_in; made++)
        if (s->be->to_dlpack(k->in[made]->impl, &dl[made], err, USER_ERR_MAX) != DT_OK) {
            fail(k, s, err);
            goto done;
        }
    void *out_dl = NULL;
    made = 0; /* the function owns the inputs now */
    tls_stream = s->be->native_stream ? s->be->native_stream() : NULL;
    dt_status st = f->uk.run(f->uk.ctx, k->rank, k->n_in, dl, &out_dl, err, USER_ERR_MAX);
    tls_stream = NULL;
    err[USER_ERR_MAX - 1] = '\0';
    if (st != DT_OK || !out_dl) {
        if (out_dl && s->be->dlpack_delete)
            s->be->dlpack_delete(out_dl);
        fail(k, s, st != DT_OK ? (err[0] ? err : dt_status_str(st)) : "the function returned no tensor");
        goto done;
    }
    void *impl = NULL;
    dt_dtype dtype;
    int ndim = 0;
    int64_t shape[DT_MAX_NDIM];
    if (s->be->from_dlpack(out_dl, &impl, &dtype, &ndim, shape, err, USER_ERR_MAX) != DT_OK) {
        fail(k, s, err);
        goto done;
    }
    if (check_result(k, dtype, ndim, shape, err, USER_ERR_MAX) != 0) {
        s->be->free(impl);
        fail(k, s, err);
        goto done;
    }
    k->out->impl = impl;
done:
    for (int i = 0; i < made; i++)
        if (s->be->dlpack_delete)
            s->be->dlpack_delete(dl[i]);
    dt__free(err);
    dt__ufn_unref(f);
}
