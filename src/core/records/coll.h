/*
 * A collective as the planner describes it (core/controller/lower_comm.c): what lowering
 * (redistribute.c, ring_attention.c) fills and dt__lw_collective (lower.c)
 * turns into one kernel per rank. Controller thread only.
 */
#ifndef DT_COLL_H
#define DT_COLL_H

#include "core/core.h"

typedef enum dt__coll_kind {
    DT_COLL_ALLGATHER = 0, /* cat along dim_a */
    DT_COLL_ALLREDUCE,     /* sum in rank order */
    DT_COLL_REDUCESCATTER, /* slice each peer along dim_b to my range, sum */
    DT_COLL_ALLTOALL,      /* slice each peer along dim_b to my range, cat along dim_a */
    DT_COLL_SHIFT,         /* a ring step: rank r gets rank r-1's input (mod n), whole */
    DT_COLL_SENDRECV,      /* point to point, 2 ranks: rank 1 gets rank 0's input, whole; rank 0
                              (the sender) has no output, rank 1 (the receiver) no input */
    DT_COLL_KINDS
} dt__coll_kind;

/* The communication interface and collective kernels' attributes:
 * src/comm/comm.h. */

/* The planner's description of one collective (controller only): lowering
 * fills it and dt__lw_collective turns it into one kernel per rank. */
struct dt__coll {
    int n;
    int kind;
    int dim_a, dim_b, ndim;
    dt_device_type type; /* whose comm holds the group */
    dt_dtype dtype;
    int64_t (*shapes)[DT_MAX_NDIM]; /* n: each rank's input shape */
    int64_t *starts, *lens;         /* n: each rank's range along dim_b */
};

/* A collective of `n` ranks on devices of `type`; NULL when out of memory. */
dt__coll *dt__coll_new(dt_device_type type, int kind, int n, int ndim, dt_dtype dtype);
void dt__coll_free(dt__coll *c);

/* A description in the caller's storage, for up to DT__COLL_BUF ranks (a
 * shared collective's, core/controller/lower_coll.c: never freed). */
#define DT__COLL_BUF 8
typedef struct dt__coll_buf {
    dt__coll c;
    int64_t shapes[DT__COLL_BUF][DT_MAX_NDIM];
    int64_t starts[DT__COLL_BUF], lens[DT__COLL_BUF];
} dt__coll_buf;
/* b's description of n (<= DT__COLL_BUF) ranks, as dt__coll_new makes one. */
dt__coll *dt__coll_on(dt__coll_buf *b, dt_device_type type, int kind, int n, int ndim, dt_dtype dtype);
/* 1 when a and b describe the same kernels (the same bytes packed, but for
 * the group and sequence number). */
int dt__coll_same(const dt__coll *a, const dt__coll *b);

#endif /* DT_COLL_H */
