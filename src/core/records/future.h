/*
 * Futures (future.c): a value or a barrier that kernels complete and a
 * client waits on. The layout is shared with its friends fetch.c (which
 * lowers reads into it), kernel_run.c and kernel_codec.c (the kernels that
 * complete it) and tensor.c (the public fetch entry points); other modules
 * use the functions. The lock is a leaf; each declaration says its
 * thread.
 */
#ifndef DT_CORE_FUTURE_H
#define DT_CORE_FUTURE_H

#include "core/core.h"

struct dt_future {
    uint32_t magic; /* DT__FUTURE_LIVE */
    atomic_int refs;
    uint64_t id; /* unique in the process: its name in encoded kernels */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int ready;         /* written under lock (atomically: also read without it) */
    int remaining;     /* arrivals still expected */
    unsigned fork_gen; /* dt__fork_gen when made (see dt__graph_forked) */
    char *error;       /* first kernel error (owned) */
    dt_status status;
    void (*cb)(void *);
    void *cb_arg;
    /* FETCH: the pieces that assemble the full value. */
    const dt__backend *be;
    dt_dtype dtype;
    int ndim;
    int64_t shape[DT_MAX_NDIM];
    int npieces;
    int accumulate;
    int64_t local; /* dt_tensor_fetch_local's mesh index, or -1 for the global value */
    dt__blob **pieces;
    int64_t *starts; /* npieces * ndim */
    void *assembled; /* backend impl, built on first read */
};

static inline int dt__future_ok(const dt_future *f) { return f && f->magic == DT__FUTURE_LIVE; }
dt_future *dt__future_new(void);
/* Marks `n` more arrivals expected (controller, before kernels are sent). */
void dt__future_expect(dt_future *f, int n);
/* One arrival (worker thread). `piece`, if not NULL, is stored at index i. */
void dt__future_arrive(dt_future *f, int i, dt__blob *piece);
/* Completes a future at once with an error status (e.g. shutdown). */
void dt__future_fail(dt_future *f, dt_status st, const char *msg);

#endif /* DT_CORE_FUTURE_H */
