/*
 * The NCCL back end of the communication interface (comm.h). What has run
 * on a GPU and what has not is docs/cuda.md's.
 *
 * Built when CMake finds NCCL's header (/usr/local/cuda or the
 * nvidia-nccl-cu13 wheel: DT_HAVE_NCCL); otherwise only the stub at the end,
 * which says NCCL is not usable. libnccl.so.2 and libcudart are opened at
 * first use (dlopen; DTORCH_NCCL_LIBRARY names another NCCL), so libdtorch
 * links against neither and loads on machines without CUDA; a CUDA torch
 * has both loaded already.
 *
 * Used for cuda meshes when the "torch_cuda" backend is registered, NCCL
 * opens, and device virtualisation is off (dt__comm_nccl_usable): NCCL
 * refuses two ranks on one GPU, so logical devices sharing a GPU
 * (DTORCH_DTENSOR_IN_SAME_DEVICE=1) keep the in-process comm, whose kernels
 * the CUDA backend runs as device-to-device copies and ATen reductions.
 *
 * Groups: group_create (the controller, on a (mesh, mesh dim) group's first
 * use; cached with the graph, core/controller/lower_comm.c) makes one communicator per rank
 * with ncclCommInitAll over the ranks' GPUs. run is each rank's part, on its
 * worker, whose current stream is its device's communication stream; the
 * backend gives buffers (empty), their device pointers (data_ptr) and that
 * stream (native_stream). Uneven shards need no padding: every transfer has
 * the size its two ends both know from the collective's attributes.
 *   allgather      one broadcast per rank (grouped), then cat along dim_a
 *   allreduce      ncclAllReduce (sum)
 *   reducescatter  one ncclReduce per rank of its range along dim_b (grouped)
 *   alltoall       grouped send/recv of each peer's range, then cat along dim_a
 *   shift          send to r+1, receive from r-1 (a ring step)
 * A rank whose input failed or whose kernel was cancelled still takes part
 * (with scratch values), or its peers would wait for ever; its output then
 * carries the error.
 *
 * Completion and timeout: after enqueueing, the worker records an event and
 * sleeps in cudaEventSynchronize (a blocking-sync event: no spin), so a
 * failure is known before the kernel completes and becomes its output's
 * error (a KernelError at the read). A watchdog thread per comm sleeps until
 * the earliest waiting collective's deadline (DTORCH_COMM_TIMEOUT_SECOND,
 * default 600) and aborts that group's communicators (ncclCommAbort) when
 * it passes; the waiting worker then wakes and reports the timeout, and the
 * group fails every later collective. The wait costs the communication
 * stream its queue depth, never the compute stream (decisions.md).
 *
 * Groups spanning nodes (docs/cuda.md: not yet run, it needs GPUs on two
 * hosts). A group some of whose devices are another process's
 * is made in an in-process comm this comm holds (`inner`), whose spanning
 * collectives stage data through host memory (span.c). When the main
 * node chose NCCL for it (span_nccl.h: every process holding a rank can,
 * no virtual GPUs, no two of them on one host) it shipped the group's
 * ncclUniqueId before the batch that names it; dt__comm_nccl_span then
 * makes an NCCL group aliasing the in-process one, with no communicator
 * yet: each local rank's worker calls ncclCommInitRank(n, id, rank) before
 * its first collective of the group (on its device, in its own thread: it
 * blocks until every rank of every process has joined, as a collective
 * does; the timeout does not cover that wait). run serves both: an NCCL
 * group (its own id or an alias) through NCCL, any other through `inner`.
 *
 * Threads and locks: the comm's lock guards its groups, the watchdog's list
 * and the communicators a spanning group's ranks make; a group's `aborted`
 * is atomic. Lock order: comm lock -> nothing.
 */
#include "comm/comm.h"

#include "backend/cuda_map.h"
#include "comm/span_nccl.h"

#if DT_HAVE_NCCL

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/span_nccl.h"
#include "comm/xfer.h"
#include "core/records/blob.h"
#include "core/records/coll.h"

_Static_assert(sizeof(ncclUniqueId) == DT__SPAN_NCCL_ID, "the wire carries an ncclUniqueId of this size");

/* ---------------------------------------------------------- the API */

/* NCCL's and the CUDA runtime's entries, typed from their headers so a
 * signature change is a compile error. */
static struct {
    __typeof__(ncclCommInitAll) *CommInitAll;
    __typeof__(ncclCommInitRank) *CommInitRank;
    __typeof__(ncclGetUniqueId) *GetUniqueId;
    __typeof__(ncclCommAbort) *CommAbort;
    __typeof__(ncclCommDestroy) *CommDestroy;
    __typeof__(ncclGroupStart) *GroupStart;
    __typeof__(ncclGroupEnd) *GroupEnd;
    __typeof__(ncclAllReduce) *AllReduce;
    __typeof__(ncclBroadcast) *Broadcast;
    __typeof__(ncclReduce) *Reduce;
    __typeof__(ncclSend) *Send;
    __typeof__(ncclRecv) *Recv;
    __typeof__(ncclCommGetAsyncError) *CommGetAsyncError;
    __typeof__(ncclGetErrorString) *GetErrorString;
    __typeof__(cudaEventCreateWithFlags) *EventCreateWithFlags;
    __typeof__(cudaEventRecord) *EventRecord;
    __typeof__(cudaEventSynchronize) *EventSynchronize;
    __typeof__(cudaEventDestroy) *EventDestroy;
    __typeof__(cudaGetErrorString) *CudaErrorString;
} api;
static int api_state; /* 0 unknown, 1 loaded, -1 unusable; guarded by api_once */
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static void *sym(void *lib, const char *name, int *ok) {
    void *p = lib ? dlsym(lib, name) : NULL;
    if (!p)
        *ok = 0;
    return p;
}

static void api_load(void) {
    const char *want = getenv("DTORCH_NCCL_LIBRARY");
    void *nccl = dlopen(want && want[0] ? want : "libnccl.so.2", RTLD_NOW | RTLD_GLOBAL);
    void *rt = dlopen("libcudart.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (!rt)
        rt = dlopen("libcudart.so", RTLD_NOW | RTLD_GLOBAL);
    int ok = nccl && rt;
#define LOAD(lib, field, name) *(void **)(&api.field) = sym(lib, name, &ok)
    LOAD(nccl, CommInitAll, "ncclCommInitAll");
    LOAD(nccl, CommInitRank, "ncclCommInitRank");
    LOAD(nccl, GetUniqueId, "ncclGetUniqueId");
    LOAD(nccl, CommAbort, "ncclCommAbort");
    LOAD(nccl, CommDestroy, "ncclCommDestroy");
    LOAD(nccl, GroupStart, "ncclGroupStart");
    LOAD(nccl, GroupEnd, "ncclGroupEnd");
    LOAD(nccl, AllReduce, "ncclAllReduce");
    LOAD(nccl, Broadcast, "ncclBroadcast");
    LOAD(nccl, Reduce, "ncclReduce");
    LOAD(nccl, Send, "ncclSend");
    LOAD(nccl, Recv, "ncclRecv");
    LOAD(nccl, CommGetAsyncError, "ncclCommGetAsyncError");
    LOAD(nccl, GetErrorString, "ncclGetErrorString");
    LOAD(rt, EventCreateWithFlags, "cudaEventCreateWithFlags");
    LOAD(rt, EventRecord, "cudaEventRecord");
    LOAD(rt, EventSynchronize, "cudaEventSynchronize");
    LOAD(rt, EventDestroy, "cudaEventDestroy");
    LOAD(rt, CudaErrorString, "cudaGetErrorString");
#undef LOAD
    api_state = ok ? 1 : -1; /* the libraries stay open for the process's life */
}

static int api_ok(void) {
    pthread_once(&api_once, api_load);
    return api_state == 1;
}

int dt__comm_nccl_usable(void) {
    dt__cuda_map m;
    char err[256];
    if (dt__cuda_map_from_env(1, &m, err, sizeof err) != 0 || m.virtual_on)
        return 0;
    return dt__backend_find("torch_cuda") != NULL && api_ok();
}

static int timeout_seconds(void) {
    const char *s = getenv("DTORCH_COMM_TIMEOUT_SECOND");
    char *end = NULL;
    long v = s && s[0] ? strtol(s, &end, 10) : 0;
    return end && !*end && v > 0 && v < 1000000000L ? (int)v : 600;
}

/* ---------------------------------------------------------- groups */

typedef struct ngroup {
    uint64_t id;
    int n;
    ncclComm_t *comms; /* one per rank (a spanning group: this process's, made at first use) */
    atomic_int aborted;
    struct ngroup *next;
    /* Spanning nodes: the in-process group id it stands for (the one the
     * kernels name), and the unique id its ranks join with. */
    uint64_t alias;
    int span;
    ncclUniqueId uid;
} ngroup;

/* A collective waiting for its event (on its worker's stack). */
typedef struct waiter {
    struct timespec deadline;
    ngroup *gr;
    int expired;
    struct waiter *next;
} waiter;

typedef struct ncomm {
    dt__comm base;
    pthread_mutex_t lock; /* groups, waiters, stop */
    pthread_cond_t cond;  /* the watchdog sleeps here */
    ngroup *groups;
    waiter *waiters;
    int stop, started;
    pthread_t watchdog;
    dt__comm *inner; /* groups spanning nodes staged through host memory (in-process comm) */
} ncomm;

static _Atomic uint64_t ngroup_ids;

static int ts_before(const struct timespec *a, const struct timespec *b) {
    return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void abort_group(ngroup *gr) {
    if (atomic_exchange(&gr->aborted, 1))
        return;
    for (int i = 0; i < gr->n; i++)
        if (gr->comms[i])
            api.CommAbort(gr->comms[i]);
}

static void *watchdog_main(void *arg) {
    ncomm *c = arg;
    dt__thread_name("dt-nccl-watch");
    pthread_mutex_lock(&c->lock);
    while (!c->stop) {
        waiter *first = NULL;
        for (waiter *w = c->waiters; w; w = w->next)
            if (!w->expired && (!first || ts_before(&w->deadline, &first->deadline)))
                first = w;
        if (!first) {
            pthread_cond_wait(&c->cond, &c->lock);
            continue;
        }
        struct timespec limit = first->deadline;
        if (pthread_cond_timedwait(&c->cond, &c->lock, &limit) != ETIMEDOUT)
            continue;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        for (waiter *w = c->waiters; w; w = w->next)
            if (!w->expired && !ts_before(&now, &w->deadline)) {
                w->expired = 1;
                /* Under the lock: the waiter stays listed (so its group stays
                 * alive) until its worker wakes, which the abort causes. */
                abort_group(w->gr);
            }
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static dt__comm *nccl_create(dt_device_type type) {
    ncomm *c = dt__calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base.ops = &dt__comm_nccl;
    c->base.type = type;
    if (!(c->inner = dt__comm_inproc.create(type))) {
        dt__free(c);
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    if (pthread_create(&c->watchdog, NULL, watchdog_main, c) == 0)
        c->started = 1;
    return &c->base;
}

static void group_free(ngroup *gr) {
    /* An aborted group's communicators are gone already (ncclCommAbort frees them). */
    for (int i = 0; i < gr->n && !atomic_load(&gr->aborted); i++)
        if (gr->comms[i])
            api.CommDestroy(gr->comms[i]);
    dt__free(gr->comms);
    dt__free(gr);
}

static void nccl_destroy(dt__comm *base) {
    ncomm *c = (ncomm *)base;
    pthread_mutex_lock(&c->lock);
    c->stop = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    if (c->started)
        pthread_join(c->watchdog, NULL);
    for (ngroup *gr = c->groups, *next; gr; gr = next) {
        next = gr->next;
        group_free(gr);
    }
    dt__comm_inproc.destroy(c->inner);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    dt__free(c);
}

/* Numbers gr and lists it in c. */
static void add_group(ncomm *c, ngroup *gr) {
    pthread_mutex_lock(&c->lock);
    gr->id = atomic_fetch_add(&ngroup_ids, 1) + 1;
    gr->next = c->groups;
    c->groups = gr;
    pthread_mutex_unlock(&c->lock);
}

static dt_status nccl_group_create(dt__comm *base, int n, const int64_t *device_ids, uint64_t *out) {
    ncomm *c = (ncomm *)base;
    /* Another process's devices: the in-process comm's group, staged
     * through host memory unless dt__comm_nccl_span finds a unique id. */
    for (int i = 0; i < n; i++)
        if (!dt__xfer_is_local(dt__xfer_key(DT_DEVICE_CUDA, device_ids[i]))) {
            c->inner->first_id = base->first_id;
            return dt__comm_inproc.group_create(c->inner, n, device_ids, out);
        }
    if (!api_ok())
        return dt__error(DT_EBACKEND, "collectives: NCCL could not be loaded");
    dt__cuda_map m;
    char err[256];
    ngroup *gr = dt__calloc(1, sizeof *gr);
    int *devs = dt__calloc((size_t)n, sizeof *devs);
    if (gr)
        gr->comms = dt__calloc((size_t)n, sizeof *gr->comms);
    if (!gr || !devs || !gr->comms) {
        if (gr)
            dt__free(gr->comms);
        dt__free(gr);
        dt__free(devs);
        return dt__error(DT_ENOMEM, "collectives: out of memory (NCCL group)");
    }
    /* Without virtualisation a logical id is its GPU; the map says so and
     * bounds it (the mesh check has already refused ids past the count). */
    dt__cuda_map_from_env(INT64_MAX, &m, err, sizeof err);
    for (int i = 0; i < n; i++)
        devs[i] = (int)dt__cuda_map_gpu(&m, device_ids[i] - base->first_id);
    gr->n = n;
    ncclResult_t rc = api.CommInitAll(gr->comms, n, devs);
    dt__free(devs);
    if (rc != ncclSuccess) {
        dt__free(gr->comms);
        dt__free(gr);
        return dt__error(DT_EBACKEND, "collectives: ncclCommInitAll failed: %s", api.GetErrorString(rc));
    }
    add_group(c, gr);
    *out = gr->id | (uint64_t)1 << 63; /* apart from the in-process comm's ids */
    return DT_OK;
}

static ngroup *unlink_or_find(ncomm *c, uint64_t id, int unlink) {
    pthread_mutex_lock(&c->lock);
    ngroup **pp = &c->groups;
    while (*pp && ((*pp)->id | (uint64_t)1 << 63) != id && !((*pp)->span && (*pp)->alias == id))
        pp = &(*pp)->next;
    ngroup *gr = *pp;
    if (gr && unlink)
        *pp = gr->next;
    pthread_mutex_unlock(&c->lock);
    return gr;
}

static void nccl_group_destroy(dt__comm *base, uint64_t id) {
    ngroup *gr = unlink_or_find((ncomm *)base, id, 1);
    if (gr)
        group_free(gr);
    if (!(id >> 63)) /* an in-process group (a spanning one: its alias too) */
        dt__comm_inproc.group_destroy(((ncomm *)base)->inner, id);
}

dt_status dt__comm_nccl_span(dt__comm *base, uint64_t id, uint32_t tag, uint64_t key, int t0, int t1) {
    ncomm *c = (ncomm *)base;
    if (id >> 63) /* an NCCL group of this process's GPUs only */
        return DT_OK;
    int nranks = 0;
    uint8_t uid[DT__SPAN_NCCL_ID];
    if (!dt__span_nccl_get(tag, key, &nranks, uid))
        return dt__comm_group_span(c->inner, id, tag, key, t0, t1); /* host staging */
    ngroup *gr = dt__calloc(1, sizeof *gr);
    if (gr && !(gr->comms = dt__calloc((size_t)nranks, sizeof *gr->comms))) {
        dt__free(gr);
        gr = NULL;
    }
    if (!gr)
        return dt__error(DT_ENOMEM, "collectives: out of memory (NCCL group)");
    gr->n = nranks;
    gr->span = 1;
    gr->alias = id;
    memcpy(&gr->uid, uid, sizeof gr->uid);
    add_group(c, gr);
    return DT_OK;
}

int dt__comm_nccl_unique_id(uint8_t id[DT__SPAN_NCCL_ID]) {
    ncclUniqueId u;
    if (!api_ok() || api.GetUniqueId(&u) != ncclSuccess)
        return 0;
    memcpy(id, &u, sizeof u);
    return 1;
}

/* Rank r of spanning group gr joins its communicator, on its own worker (its
 * device current) before its first collective; 0 with the reason in err. */
static int join(ncomm *c, ngroup *gr, int r, char *err, size_t errlen) {
    pthread_mutex_lock(&c->lock);
    ncclComm_t have = gr->comms[r];
    pthread_mutex_unlock(&c->lock);
    if (have)
        return 1;
    ncclComm_t comm = NULL;
    ncclResult_t rc = api.CommInitRank(&comm, gr->n, gr->uid, r);
    if (rc != ncclSuccess) {
        snprintf(err, errlen, "ncclCommInitRank of rank %d of %d across nodes failed: %s", r, gr->n,
                 api.GetErrorString(rc));
        return 0;
    }
    pthread_mutex_lock(&c->lock);
    gr->comms[r] = comm;
    pthread_mutex_unlock(&c->lock);
    return 1;
}

/* ---------------------------------------------------------- run */

static int nccl_type(dt_dtype t, ncclDataType_t *out) {
    /* bool is moved as bytes, never summed (nccl_run refuses its reductions). */
    static const struct {
        dt_dtype dt;
        ncclDataType_t nt;
    } map[] = {{DT_FLOAT32, ncclFloat32},   {DT_FLOAT64, ncclFloat64}, {DT_FLOAT16, ncclFloat16},
               {DT_BFLOAT16, ncclBfloat16}, {DT_INT32, ncclInt32},     {DT_INT64, ncclInt64},
               {DT_INT8, ncclInt8},         {DT_UINT8, ncclUint8},     {DT_BOOL, ncclUint8}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].dt == t) {
            *out = map[i].nt;
            return 1;
        }
    return 0;
}

/* One rank's buffers: up to n received pieces and n sent slices. */
typedef struct job {
    const dt__backend *be;
    const dt__collattr *a;
    int r, n;
    void **recv, **send; /* impls, owned unless borrowed[i] */
    char err[512];
} job;

static size_t numel_of(const int64_t *shape, int ndim) {
    size_t k = 1;
    for (int d = 0; d < ndim; d++)
        k *= (size_t)shape[d];
    return k;
}

/* Rank p's input shape, with dim_b narrowed to rank q's range when q >= 0. */
static void shape_of(const dt__collattr *a, int p, int q, int64_t *shape) {
    for (int d = 0; d < a->ndim; d++)
        shape[d] = dt__collattr_at(a->shapes, (size_t)p * (size_t)a->ndim + (size_t)d);
    if (q >= 0)
        shape[a->dim_b] = dt__collattr_at(a->lens, (size_t)q);
}

static int make_empty(job *j, int p, int q, void **out) {
    int64_t shape[DT_MAX_NDIM];
    shape_of(j->a, p, q, shape);
    return j->be->empty(j->a->dtype, j->a->ndim, shape, out, j->err, sizeof j->err) == DT_OK;
}

/* src narrowed along dim_b to rank q's range, as a contiguous impl. */
static int make_slice(job *j, void *src, int q, void **out) {
    dt__kattr k;
    memset(&k, 0, sizeof k);
    k.dtype = j->a->dtype;
    k.ndim = j->a->ndim;
    shape_of(j->a, j->r, q, k.shape);
    k.start[j->a->dim_b] = dt__collattr_at(j->a->starts, (size_t)q);
    return j->be->run(DT_K_SLICE, &k, &src, 1, out, j->err, sizeof j->err) == DT_OK;
}

/* src (rank r's input) as a contiguous impl: NCCL reads a pointer and a
 * count, and a kernel result may be a strided view (backend.h). SLICE of
 * the whole tensor is src.contiguous(), a copy on the worker's stream. */
static int make_contiguous(job *j, void *src, void **out) {
    dt__kattr k;
    memset(&k, 0, sizeof k);
    k.dtype = j->a->dtype;
    k.ndim = j->a->ndim;
    shape_of(j->a, j->r, -1, k.shape);
    return j->be->run(DT_K_SLICE, &k, &src, 1, out, j->err, sizeof j->err) == DT_OK;
}

static int cat_into(job *j, void **pieces, void **out) {
    dt__kattr k;
    memset(&k, 0, sizeof k);
    k.dtype = j->a->dtype;
    k.dim = j->a->dim_a;
    return j->be->run(DT_K_CAT, &k, pieces, j->n, out, j->err, sizeof j->err) == DT_OK;
}

#define NCHECK(call)                                                                                         \
    do {                                                                                                     \
        ncclResult_t nrc_ = (call);                                                                          \
        if (nrc_ != ncclSuccess) {                                                                           \
            snprintf(j->err, sizeof j->err, "NCCL: %s", api.GetErrorString(nrc_));                           \
            ok = 0;                                                                                          \
        }                                                                                                    \
    } while (0)

/* Enqueues rank r's part on `stream`; *result gets its output impl. */
static int enqueue(job *j, ngroup *gr, void *src, cudaStream_t stream, void **result) {
    const dt__collattr *a = j->a;
    int r = j->r, n = j->n, ok = 1;
    ncclComm_t comm = gr->comms[r];
    ncclDataType_t dt = ncclFloat32;
    nccl_type(a->dtype, &dt);
    int64_t shape[DT_MAX_NDIM];
    shape_of(a, r, -1, shape);
    size_t mine = numel_of(shape, a->ndim);
    switch (a->kind) {
    case DT_COLL_ALLREDUCE:
        if (!make_empty(j, r, -1, result))
            return 0;
        NCHECK(
            api.AllReduce(j->be->data_ptr(src), j->be->data_ptr(*result), mine, dt, ncclSum, comm, stream));
        return ok;
    case DT_COLL_ALLGATHER:
        for (int p = 0; p < n && ok; p++)
            ok = p == r || make_empty(j, p, -1, &j->recv[p]);
        if (!ok)
            return 0;
        NCHECK(api.GroupStart());
        for (int p = 0; p < n && ok; p++) {
            shape_of(a, p, -1, shape);
            void *buf = j->be->data_ptr(p == r ? src : j->recv[p]);
            NCHECK(api.Broadcast(buf, buf, numel_of(shape, a->ndim), dt, p, comm, stream));
        }
        NCHECK(api.GroupEnd());
        j->recv[r] = src; /* borrowed: cat reads it, the cleanup skips it */
        ok = ok && cat_into(j, j->recv, result);
        j->recv[r] = NULL;
        return ok;
    case DT_COLL_REDUCESCATTER:
        for (int q = 0; q < n && ok; q++)
            ok = make_slice(j, src, q, &j->send[q]);
        if (!ok || !make_empty(j, r, r, result))
            return 0;
        NCHECK(api.GroupStart());
        for (int q = 0; q < n && ok; q++) {
            shape_of(a, r, q, shape);
            NCHECK(api.Reduce(j->be->data_ptr(j->send[q]), q == r ? j->be->data_ptr(*result) : NULL,
                              numel_of(shape, a->ndim), dt, ncclSum, q, comm, stream));
        }
        NCHECK(api.GroupEnd());
        return ok;
    case DT_COLL_ALLTOALL:
        for (int q = 0; q < n && ok; q++)
            ok = make_slice(j, src, q, &j->send[q]) && (q == r || make_empty(j, q, r, &j->recv[q]));
        if (!ok)
            return 0;
        NCHECK(api.GroupStart());
        for (int q = 0; q < n && ok; q++) {
            if (q == r)
                continue;
            shape_of(a, r, q, shape);
            NCHECK(api.Send(j->be->data_ptr(j->send[q]), numel_of(shape, a->ndim), dt, q, comm, stream));
            shape_of(a, q, r, shape);
            NCHECK(api.Recv(j->be->data_ptr(j->recv[q]), numel_of(shape, a->ndim), dt, q, comm, stream));
        }
        NCHECK(api.GroupEnd());
        j->recv[r] = j->send[r];
        j->send[r] = NULL;
        return ok && cat_into(j, j->recv, result);
    case DT_COLL_SHIFT: {
        int from = (r + n - 1) % n, to = (r + 1) % n;
        if (!make_empty(j, from, -1, result))
            return 0;
        shape_of(a, from, -1, shape);
        NCHECK(api.GroupStart());
        NCHECK(api.Send(j->be->data_ptr(src), mine, dt, to, comm, stream));
        NCHECK(api.Recv(j->be->data_ptr(*result), numel_of(shape, a->ndim), dt, from, comm, stream));
        NCHECK(api.GroupEnd());
        return ok;
    }
    default:
        snprintf(j->err, sizeof j->err, "unknown collective kind %d", a->kind);
        return 0;
    }
}

/* Sleeps until the enqueued work completes or the watchdog aborts it. */
static int wait_done(ncomm *c, job *j, ngroup *gr, cudaStream_t stream) {
    cudaEvent_t ev = NULL;
    if (api.EventCreateWithFlags(&ev, cudaEventBlockingSync | cudaEventDisableTiming) != cudaSuccess ||
        api.EventRecord(ev, stream) != cudaSuccess) {
        snprintf(j->err, sizeof j->err, "CUDA: could not record the collective's event");
        if (ev)
            api.EventDestroy(ev);
        return 0;
    }
    waiter w;
    memset(&w, 0, sizeof w);
    w.gr = gr;
    clock_gettime(CLOCK_REALTIME, &w.deadline);
    int secs = timeout_seconds();
    w.deadline.tv_sec += secs;
    pthread_mutex_lock(&c->lock);
    w.next = c->waiters;
    c->waiters = &w;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->lock);
    cudaError_t crc = api.EventSynchronize(ev);
    pthread_mutex_lock(&c->lock);
    waiter **pp = &c->waiters;
    while (*pp != &w)
        pp = &(*pp)->next;
    *pp = w.next;
    pthread_mutex_unlock(&c->lock);
    api.EventDestroy(ev);
    ncclResult_t async = ncclSuccess;
    if (!w.expired && !atomic_load(&gr->aborted))
        api.CommGetAsyncError(gr->comms[j->r], &async);
    if (w.expired)
        snprintf(j->err, sizeof j->err,
                 "the collective did not complete within DTORCH_COMM_TIMEOUT_SECOND=%d s; its NCCL "
                 "communicators were aborted",
                 secs);
    else if (atomic_load(&gr->aborted))
        snprintf(j->err, sizeof j->err,
                 "a collective of this group timed out; its NCCL communicators are aborted");
    else if (crc != cudaSuccess)
        snprintf(j->err, sizeof j->err, "CUDA: %s", api.CudaErrorString(crc));
    else if (async != ncclSuccess)
        snprintf(j->err, sizeof j->err, "NCCL: %s", api.GetErrorString(async));
    else
        return 1;
    abort_group(gr);
    return 0;
}

static void nccl_run(dt__comm *base, const dt__collattr *a, int r, dt__blob *in, dt__blob *out,
                     const char *opname) {
    ncomm *c = (ncomm *)base;
    ngroup *gr = unlink_or_find(c, a->group, 0);
    if (!gr && !(a->group >> 63)) { /* a group spanning nodes, staged through host memory */
        dt__comm_inproc.run(c->inner, a, r, in, out, opname);
        return;
    }
    const dt__backend *be = in->be;
    ncclDataType_t dt = ncclFloat32;
    const char *bad = NULL;
    if (!gr || gr->n != a->n || r < 0 || r >= a->n)
        bad = "the kernel names a group this comm does not have";
    else if (!be || !be->empty || !be->data_ptr || !be->native_stream || !be->native_stream())
        bad = "the NCCL comm needs the torch_cuda backend on a CUDA worker";
    else if (!nccl_type(a->dtype, &dt) || (a->dtype == DT_BOOL && a->kind != DT_COLL_ALLGATHER &&
                                           a->kind != DT_COLL_ALLTOALL && a->kind != DT_COLL_SHIFT))
        bad = "NCCL has no reduction for this dtype";
    else if (atomic_load(&gr->aborted))
        bad = "a collective of this group timed out; its NCCL communicators are aborted";
    char joined[300] = "";
    if (!bad && gr->span && !join(c, gr, r, joined, sizeof joined))
        bad = joined;
    /* Every rank sees the same attributes, so all of them stop here alike. */
    if (bad) {
        if (!out->error) {
            char buf[700];
            snprintf(buf, sizeof buf, "%s failed in a collective: %s", opname, bad);
            out->error = dt__strdup(buf);
        }
        return;
    }
    job j;
    memset(&j, 0, sizeof j);
    j.be = be;
    j.a = a;
    j.r = r;
    j.n = a->n;
    j.recv = dt__calloc((size_t)a->n, sizeof *j.recv);
    j.send = dt__calloc((size_t)a->n, sizeof *j.send);
    void *src = in->error ? NULL : in->impl, *scratch = NULL, *result = NULL;
    int ok = j.recv && j.send;
    /* A failed input still meets its peers with a buffer of the right size. */
    if (ok && !src)
        ok = make_empty(&j, r, -1, &scratch) && (src = scratch) != NULL;
    else if (ok && !be->data_ptr(src))
        ok = make_contiguous(&j, src, &scratch) && (src = scratch) != NULL;
    cudaStream_t stream = (cudaStream_t)be->native_stream();
    ok = ok && enqueue(&j, gr, src, stream, &result);
    ok = wait_done(c, &j, gr, stream) && ok;
    for (int p = 0; p < a->n; p++) {
        if (j.recv)
            be->free(j.recv[p]);
        if (j.send)
            be->free(j.send[p]);
    }
    be->free(scratch);
    dt__free(j.recv);
    dt__free(j.send);
    char buf[700];
    if (out->error) {
        be->free(result); /* cancelled: it only met its peers */
    } else if (in->error) {
        be->free(result);
        out->error = dt__strdup(in->error);
    } else if (!ok) {
        be->free(result);
        snprintf(buf, sizeof buf, "%s failed in a collective: %s", opname, j.err[0] ? j.err : "NCCL error");
        out->error = dt__strdup(buf);
    } else {
        out->impl = result;
    }
}

const dt__comm_ops dt__comm_nccl = {
    "nccl", nccl_create, nccl_destroy, nccl_group_create, nccl_group_destroy, nccl_run,
};

#else /* !DT_HAVE_NCCL */

/* Built without NCCL's header: never chosen. */
int dt__comm_nccl_usable(void) { return 0; }

int dt__comm_nccl_unique_id(uint8_t id[DT__SPAN_NCCL_ID]) {
    (void)id;
    return 0;
}

dt_status dt__comm_nccl_span(dt__comm *base, uint64_t id, uint32_t tag, uint64_t key, int t0, int t1) {
    (void)base, (void)id, (void)tag, (void)key, (void)t0, (void)t1;
    return DT_OK;
}

const dt__comm_ops dt__comm_nccl = {"nccl (not built)", NULL, NULL, NULL, NULL, NULL};

#endif
