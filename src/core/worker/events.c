/*
 * Events between streams: an event is (producer stream, kernel number). The
 * producing worker publishes how many of its kernels have completed
 * (dt__event_complete, a release store); a consumer on another stream spins
 * briefly on that count and then sleeps on the producer's own
 * ev_lock/ev_cond, so no worker ever waits on a graph-wide lock and
 * recording an event costs nothing beyond the count's store. A backend with
 * event slots (backend.h) adds its own event on top: the host wait then only
 * covers the producer's launch, and the device queue waits on the backend's
 * event.
 *
 * Threads: dt__event_complete runs on the producing worker, dt__event_wait
 * on the consuming worker, dt__event_query on any thread. Locks: a stream's
 * ev_lock is a leaf: the producer takes it only to broadcast, the consumer
 * only to sleep, neither holding any other lock.
 */
#include <sched.h>

#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/worker/stream.h"
#include "core/worker/stream_int.h"

/* ------------------------------------------------------------ events */

static int has_events(const dt__backend *be) { return be->api_version >= 2 && be->event_wait; }

void dt__event_complete(dt__stream *s, uint64_t n) {
    /* seq_cst on both sides (done then ev_waiters here, ev_waiters then done
     * in the waiter): one of the two always sees the other's store. */
    atomic_store(&s->done, n);
    if (atomic_load(&s->ev_waiters) > 0) {
        pthread_mutex_lock(&s->ev_lock);
        pthread_cond_broadcast(&s->ev_cond);
        pthread_mutex_unlock(&s->ev_lock);
    }
}

/* Whether kernel `seq` of stream p (NULL: none) has completed on the host. */
static int host_done(const dt__stream *p, uint64_t seq) {
    return !p || atomic_load_explicit(&p->done, memory_order_acquire) >= seq;
}

void dt__event_wait(dt__stream *s, const dt__blob *b) {
    uint64_t seq;
    dt__stream *p = dt__blob_event(b, &seq);
    if (p && p != s && !host_done(p, seq)) {
        /* A short bounded spin saves the sleep when the producer is about to
         * finish (dt__spin_until_changed's reasoning: each probe yields). */
        for (int i = 0; i < DT_SPIN_PROBES && !host_done(p, seq); i++)
            sched_yield();
        if (!host_done(p, seq)) {
            pthread_mutex_lock(&p->ev_lock);
            atomic_fetch_add(&p->ev_waiters, 1);
            while (atomic_load(&p->done) < seq)
                pthread_cond_wait(&p->ev_cond, &p->ev_lock);
            atomic_fetch_sub(&p->ev_waiters, 1);
            pthread_mutex_unlock(&p->ev_lock);
        }
    }
    /* The device queue waits for the data (CUDA: cudaStreamWaitEvent). A
     * failure leaves the host wait above, which is the stronger one for
     * backends that run kernels synchronously. Another backend's event means
     * nothing here: that piece is staged through host memory, which waits. */
    if (p && p != s && b->bev && b->be == s->be && has_events(s->be))
        (void)s->be->event_wait(s->ctx, b->bev);
}

int dt__event_query(const dt__blob *b) {
    uint64_t seq;
    dt__stream *p = dt__blob_event(b, &seq);
    if (!host_done(p, seq))
        return 0;
    if (b->bev && b->be->api_version >= 2 && b->be->event_query)
        return b->be->event_query(b->bev) != 0;
    return 1;
}
