/*
 * User kernels' shared record (ufn.h). Threads: any; the count is atomic
 * and the release runs on whichever thread drops the last reference (a
 * worker after the last kernel ran, usually), with no runtime lock held.
 */
#include "core/records/ufn.h"

dt__ufn *dt__ufn_new(const dt_user_kernel *uk) {
    dt__ufn *f = dt__malloc(sizeof *f);
    if (!f) {
        dt__error(DT_ENOMEM, "user kernel: out of memory");
        return NULL;
    }
    atomic_init(&f->refs, 1);
    f->uk = *uk;
    f->uk.name = dt__intern(uk->name && uk->name[0] ? uk->name : "user_kernel");
    return f;
}

dt__ufn *dt__ufn_retain(dt__ufn *f) {
    atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
    return f;
}

void dt__ufn_unref(void *p) {
    dt__ufn *f = p;
    if (!f || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (f->uk.release)
        f->uk.release(f->uk.ctx);
    dt__free(f);
}
