/*
 * User kernels' shared record (ufn.c): the caller's dt_user_kernel (public
 * dtorch_ops.h), reference counted. The USER node holds one reference
 * (src/ops/user.c), each of its kernels one (lowered by the same file, run
 * by core/worker/user_run.c, dropped or discarded by the kernel records'
 * paths); the last unref calls the caller's release. Any module may include
 * it; every function runs on any thread.
 */
#ifndef DT_CORE_UFN_H
#define DT_CORE_UFN_H

#include "core/core.h"
#include "dtorch/dtorch_ops.h"

typedef struct dt__ufn {
    atomic_int refs;
    dt_user_kernel uk; /* uk.name interned */
} dt__ufn;

/* A record holding uk with one reference, or NULL (DT_ENOMEM; the caller
 * still owns uk->ctx). */
dt__ufn *dt__ufn_new(const dt_user_kernel *uk);
/* One more reference; returns f. */
dt__ufn *dt__ufn_retain(dt__ufn *f);
/* Drops one reference (a dt__ufn *, void * for the records that hold it
 * untyped); the last calls uk.release(uk.ctx). NULL is a no-op. */
void dt__ufn_unref(void *f);

#endif /* DT_CORE_UFN_H */
