/*
 * Kernels as lowering builds them (controller only): the builder
 * (dt__kernel) that the op lowering functions fill and dt__lw_push packs
 * into a queued record (kernel_rec.h), the core kernel kinds beyond the
 * backend's dt__kop. Included by the lowering side (src/core
 * lower/fetch/executor, src/ops) and by the kernel runner, which
 * reads core kinds.
 */
#ifndef DT_CORE_KERNEL_H
#define DT_CORE_KERNEL_H

#include "core/core.h"

/* Core-run kernel kinds beyond the backend's dt__kop. */
enum {
    DT_KC_COLLECTIVE = DT_K_COUNT, /* attributes: dt__collattr; run by the comm (comm/inproc.c) */
    DT_KC_FETCH,                   /* handle = dt_future, rank = piece */
    DT_KC_SYNC,                    /* handle = dt_future */
    DT_KC_STOP,                    /* the worker exits */
    DT_KC_ASSEMBLE,                /* attributes: dt__asmattr; places local in[] into a new tensor */
    DT_KC_GATE,                    /* handle = dt_debug_gate: wait for it, then copy in[0] */
    DT_KC_RELEASE, /* handle = dead blobs to free (dt__blob_free_dead); not counted, not numbered */
    DT_KC_BCAST,   /* a device's slot of a device-independent record (core/records/bcast.h): handle */
    DT_KC_USER, /* handle = dt__ufn (core/records/ufn.h); attributes: the device's block (dtype, ndim, shape)
                 */
    DT_KC_STEP, /* a device's slot of a run of shared kernels (core/records/step.h): handle */
    DT_KC_END
};

/* A kernel as lowering builds it (controller only): the op functions fill
 * in[], attr and extra, then dt__lw_push packs it into the compact record
 * below (dt__krec) and frees it. extra: the handle of a FETCH/SYNC (future)
 * or GATE (gate) kernel. */
struct dt__kernel {
    int32_t kop;
    int16_t n_in;
    int32_t rank;
    int32_t site_line;
    dt__blob *in[DT_MAX_OP_INPUTS];
    dt__blob *out;
    const char *opname;
    const char *site_file;
    void *extra;
    dt__kattr attr;
};

/* Test-only: what dt__graph_set_kernel_tap_for_test calls (kernel_rec.h). */
typedef void (*dt__ktap_fn)(void *arg, const void *bytes, size_t len, dt_status st);

/* The kernel builder pool (common/pool.h). */
extern dt__pool dt__kernel_pool;
/* Frees a kernel builder (controller). */
static inline void dt__kernel_free(dt__kernel *k) { dt__pool_free(&dt__kernel_pool, k); }

#endif /* DT_CORE_KERNEL_H */
