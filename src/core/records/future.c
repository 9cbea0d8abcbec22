/*
 * Futures: a value read or a sync. Workers arrive (under the future's lock,
 * a leaf lock); client threads wait, read and release. The controller holds
 * one reference from lowering until it has sent the kernels, and each kernel
 * holds one until it has arrived.
 */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "core/records/blob.h"
#include "core/records/future.h"
#include "core/records/graph_int.h"
#include "core/records/meta.h"

/* Futures' ids (dt_future.id): unique in the process. */
static _Atomic uint64_t future_ids;

/* Type-stable: a released future's magic stays readable (core.h, handles). */
static dt__pool future_pool = DT__POOL_INIT_STABLE(sizeof(dt_future), 0);

dt_future *dt__future_new(void) {
    dt_future *f = dt__pool_alloc(&future_pool);
    if (!f)
        return NULL;
    f->magic = DT__FUTURE_LIVE;
    atomic_init(&f->refs, 1);
    f->id = atomic_fetch_add_explicit(&future_ids, 1, memory_order_relaxed) + 1;
    f->fork_gen = atomic_load_explicit(&dt__fork_gen, memory_order_relaxed);
    pthread_mutex_init(&f->lock, NULL);
    dt__cond_init_monotonic(&f->cond);
    return f;
}

void dt_future_release(dt_future *f) {
    if (!dt__future_ok(f) || atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1)
        return;
    for (int i = 0; i < f->npieces; i++)
        dt__blob_release(f->pieces[i]);
    dt__free(f->pieces);
    dt__free(f->starts);
    if (f->assembled)
        f->be->free(f->assembled);
    dt__free(f->error);
    pthread_cond_destroy(&f->cond);
    pthread_mutex_destroy(&f->lock);
    f->magic = DT__HANDLE_DEAD;
    dt__pool_free(&future_pool, f);
}

/* Called with the lock held when the last arrival lands; runs the callback
 * after unlocking so it may take other locks. */
static void complete_locked(dt_future *f, void (**cb)(void *), void **arg) {
    /* Atomic: dt_future_wait peeks at it before it takes the lock. */
    __atomic_store_n(&f->ready, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&f->cond);
    *cb = f->cb;
    *arg = f->cb_arg;
    f->cb = NULL;
}

void dt__future_expect(dt_future *f, int n) {
    void (*cb)(void *) = NULL;
    void *arg = NULL;
    pthread_mutex_lock(&f->lock);
    f->remaining += n;
    if (f->remaining == 0 && !f->ready)
        complete_locked(f, &cb, &arg);
    pthread_mutex_unlock(&f->lock);
    if (cb)
        cb(arg);
}

void dt__future_arrive(dt_future *f, int i, dt__blob *piece) {
    void (*cb)(void *) = NULL;
    void *arg = NULL;
    pthread_mutex_lock(&f->lock);
    if (piece && i >= 0) {
        f->pieces[i] = dt__blob_retain(piece);
        if (piece->error && !f->error) {
            f->error = dt__strdup(piece->error);
            f->status = DT_EKERNEL;
        }
    }
    if (--f->remaining == 0)
        complete_locked(f, &cb, &arg);
    pthread_mutex_unlock(&f->lock);
    if (cb)
        cb(arg);
}

void dt__future_fail(dt_future *f, dt_status st, const char *msg) {
    void (*cb)(void *) = NULL;
    void *arg = NULL;
    pthread_mutex_lock(&f->lock);
    f->status = st;
    dt__free(f->error);
    f->error = dt__strdup(msg);
    complete_locked(f, &cb, &arg);
    pthread_mutex_unlock(&f->lock);
    if (cb)
        cb(arg);
}

dt_status dt_future_wait(dt_future *f, int64_t timeout_ms) {
    if (!dt__future_ok(f))
        return dt__error(DT_EINVAL, "future is %s", dt__handle_bad(f));
    /* A fork child has only this thread: no worker will complete a read
     * its parent started, and the lock may have been copied held. A future
     * that was complete before the fork stays readable. */
    if (f->fork_gen != atomic_load_explicit(&dt__fork_gen, memory_order_relaxed) &&
        !__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE))
        return dt__submit_error(DT_EFORKED);
    /* About to block: the client's idle OpenMP team (from eager torch work
     * on this thread) would otherwise throttle the workers' teams. */
    if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE))
        dt__backends_thread_rest();
    pthread_mutex_lock(&f->lock);
    if (timeout_ms < 0) {
        while (!f->ready)
            pthread_cond_wait(&f->cond, &f->lock);
    } else if (!f->ready) {
        struct timespec ts = dt__deadline_after_ms(timeout_ms);
        while (!f->ready)
            if (pthread_cond_timedwait(&f->cond, &f->lock, &ts) == ETIMEDOUT)
                break;
    }
    int ready = f->ready;
    pthread_mutex_unlock(&f->lock);
    return ready ? DT_OK : DT_ETIMEDOUT;
}

int dt_future_is_ready(const dt_future *f) {
    if (!dt__future_ok(f))
        return 0;
    dt_future *mf = (dt_future *)f;
    pthread_mutex_lock(&mf->lock);
    int r = mf->ready;
    pthread_mutex_unlock(&mf->lock);
    return r;
}

dt_status dt_future_on_ready(dt_future *f, void (*fn)(void *), void *arg) {
    if (f && !dt__future_ok(f))
        return dt__error(DT_EINVAL, "future_on_ready: future is a released handle");
    if (!f || !fn)
        return dt__error(DT_EINVAL, "future and callback are required");
    pthread_mutex_lock(&f->lock);
    if (f->cb) {
        pthread_mutex_unlock(&f->lock);
        return dt__error(DT_EINVAL, "future already has a callback");
    }
    int ready = f->ready;
    if (!ready) {
        f->cb = fn;
        f->cb_arg = arg;
    }
    pthread_mutex_unlock(&f->lock);
    if (ready)
        fn(arg);
    return DT_OK;
}

dt_status dt_future_status(dt_future *f) {
    if (!dt__future_ok(f))
        return dt__error(DT_EINVAL, "future is %s", dt__handle_bad(f));
    dt_status w = dt_future_wait(f, -1);
    if (w != DT_OK)
        return w; /* DT_EINVAL, DT_EFORKED: the message is set */
    if (f->status != DT_OK)
        return dt__error(f->status, "%s", f->error ? f->error : dt_status_str(f->status));
    return DT_OK;
}

/* Assembles the full value once (on the calling client thread). */
static dt_status assemble(dt_future *f) {
    dt_status st = dt_future_status(f);
    if (st != DT_OK)
        return st;
    if (!f->pieces)
        return dt__error(DT_EINVAL, "this future is a sync, not a value read");
    pthread_mutex_lock(&f->lock);
    if (!f->assembled) {
        void **impls = dt__malloc((size_t)f->npieces * sizeof *impls);
        if (!impls) {
            pthread_mutex_unlock(&f->lock);
            return dt__error(DT_ENOMEM, "read: out of memory");
        }
        for (int i = 0; i < f->npieces; i++)
            impls[i] = f->pieces[i]->impl;
        char err[512] = "";
        st = f->be->assemble(f->dtype, f->ndim, f->shape, f->npieces, impls, f->starts, f->accumulate,
                             &f->assembled, err, sizeof err);
        dt__free(impls);
        if (st != DT_OK) {
            f->assembled = NULL;
            pthread_mutex_unlock(&f->lock);
            return dt__error(st, "read: assembling the value failed: %s", err);
        }
        pthread_mutex_unlock(&f->lock);
        /* The copy of a large value ran in parallel on this thread and made
         * its team again (see dt_future_wait): give it back now, not at the
         * next blocked read, so the workers run the next step unthrottled. */
        dt__backends_thread_rest();
        return DT_OK;
    }
    pthread_mutex_unlock(&f->lock);
    return DT_OK;
}

dt_status dt_future_read(dt_future *f, void *buf, size_t nbytes) {
    if (!dt__future_ok(f))
        return dt__error(DT_EINVAL, "future is %s", dt__handle_bad(f));
    dt_status st = assemble(f);
    if (st != DT_OK)
        return st;
    size_t want = (size_t)dt__numel(f->ndim, f->shape) * dt_dtype_size(f->dtype);
    if (nbytes != want)
        return dt__error(DT_EINVAL, "read: buffer has %zu bytes, the value needs %zu", nbytes, want);
    char err[512] = "";
    st = f->be->to_host(f->assembled, buf, nbytes, err, sizeof err);
    return st == DT_OK ? DT_OK : dt__error(st, "read: %s", err);
}

dt_status dt_future_to_dlpack(dt_future *f, void **out) {
    if (f && !dt__future_ok(f))
        return dt__error(DT_EINVAL, "to_dlpack: future is a released handle");
    if (!f || !out)
        return dt__error(DT_EINVAL, "future and out are required");
    *out = NULL;
    if (!f->be || !f->be->to_dlpack)
        return dt__error(DT_EUNSUPPORTED, "to_dlpack: the '%s' backend has no DLPack support",
                         f->be ? f->be->name : "?");
    dt_status st = assemble(f);
    if (st != DT_OK)
        return st;
    char err[512] = "";
    st = f->be->to_dlpack(f->assembled, out, err, sizeof err);
    return st == DT_OK ? DT_OK : dt__error(st, "to_dlpack: %s", err);
}

void dt_dlpack_delete(void *dl_managed) {
    if (!dl_managed)
        return;
    const dt__backend *be = dt__backend_find(NULL);
    if (be && be->dlpack_delete)
        be->dlpack_delete(dl_managed);
}
