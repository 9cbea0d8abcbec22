/*
 * Kernels as queued on a stream (dt__krec), their packed attributes, and
 * the codec that serialises a batch of them (kernel_rec.c,
 * kernel_codec.c). Lowering builds dt__kernel records (kernel.h);
 * dt__lw_push packs each into one of these.
 */
#ifndef DT_KERNEL_REC_H
#define DT_KERNEL_REC_H

#include <string.h>

#include "core/core.h"
#include "core/records/kernel.h"

/* Stream kinds: each device has a compute stream and, created on first use,
 * a communication stream for collectives, so that a redistribute overlaps
 * independent compute. */
enum { DT_STREAM_COMPUTE = 0, DT_STREAM_COMM = 1, DT_STREAM_KINDS = 2 };

/* Little-endian fields of packed records and encodings. */
/* n is at most 8. On a little-endian host the bytes are the value's own first n: one copy
 * (a store or a load where n is a constant), not a byte loop. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define DT__LE_HOST 1
#else
#define DT__LE_HOST 0
#endif
static inline void dt__le_put(uint8_t **p, uint64_t v, int n) {
    if (DT__LE_HOST) {
        memcpy(*p, &v, (size_t)n);
    } else {
        for (int i = 0; i < n; i++)
            (*p)[i] = (uint8_t)(v >> (8 * i));
    }
    *p += n;
}

static inline uint64_t dt__le_get(const uint8_t **p, int n) {
    uint64_t v = 0;
    if (DT__LE_HOST) {
        memcpy(&v, *p, (size_t)n);
    } else {
        for (int i = 0; i < n; i++)
            v |= (uint64_t)(*p)[i] << (8 * i);
    }
    *p += n;
    return v;
}

/* A bounds-checked little-endian reader: past the end a read gives 0 and
 * sets bad, so a parser checks once at the end. */
typedef struct dt__rd {
    const uint8_t *p, *end;
    int bad;
} dt__rd;

static inline uint64_t dt__rd_get(dt__rd *r, int n) {
    if (r->bad || r->end - r->p < n) {
        r->bad = 1;
        return 0;
    }
    return dt__le_get(&r->p, n);
}

/* A kernel as queued on a stream: self-contained but for its handle.
 *
 * It names its blobs by id (dt__blob.id); in[] and out are the bound blobs,
 * a cache of the names' resolution (as a file descriptor and its open file),
 * so the worker does no lookup. Its attributes are a compact record sized to
 * what it holds (kernel_codec.c): a backend kernel's dt__kattr packed, which
 * the worker unpacks over its stream's previous kernel's before `run`
 * (dt__kattr_unpack_over); a collective's dt__collattr
 * (group id, sequence number, kind, dims, per-rank shapes and ranges). No
 * pointer to another kernel's data: collectives meet their peers inside the
 * comm (comm/inproc.c). `handle` is the one in-process object a kernel may
 * hold: a FETCH/SYNC kernel's future (encoded by its id) or a GATE kernel's
 * gate (not encodable).
 *
 * Records come from a few pools of size classes (`cls`; a record larger
 * than the largest class is a plain allocation). */
struct dt__krec {
    struct dt__krec *next;
    int32_t kop;
    int16_t n_in;
    int16_t wait; /* some input comes from another stream: wait on its event */
    int32_t rank;
    int32_t site_line;
    dt__blob *in[DT_MAX_OP_INPUTS];
    dt__blob *out;
    const char *opname;    /* static or interned */
    const char *site_file; /* interned */
    void *handle;
    uint32_t alen; /* bytes of attr */
    uint8_t cls;
    uint8_t attr[]; /* packed attributes */
};

/* A kernel record with room for `alen` attribute bytes: header fields zero,
 * attributes undefined; NULL when out of memory. Any thread. */
dt__krec *dt__krec_alloc(size_t alen);
/* The same with the calling thread's pool lists (common/pool.h; NULL:
 * looked up). */
dt__krec *dt__krec_alloc_in(struct dt__pool_lists *mine, size_t alen);
/* The size class a record with `alen` attribute bytes comes from. */
int dt__krec_class(size_t alen);
/* A record of class `cls` (dt__krec_class(alen)) with room for `alen`
 * attribute bytes, nothing in it set: the caller writes the whole header,
 * `cls` and `alen` included (a replay copies a captured record's image,
 * core/controller/replay.c). NULL when out of memory. Any thread. */
static inline dt__krec *dt__krec_alloc_raw(struct dt__pool_lists *mine, int cls, size_t alen);
/* The records' pools, one per size class (kernel_rec.c); past the last
 * class a record is a plain allocation (dt__krec_alloc_big). */
#define DT__KREC_CLASSES 3
#define DT__KREC_SMALL 160 /* class 0's record size */
#define DT__KREC_MALLOC 255
extern dt__pool dt__krec_pools[DT__KREC_CLASSES];
dt__krec *dt__krec_alloc_big(size_t alen);
static inline dt__krec *dt__krec_alloc_raw(struct dt__pool_lists *mine, int cls, size_t alen) {
    if (cls != DT__KREC_MALLOC)
        return (dt__krec *)dt__pool_alloc_in(&dt__krec_pools[cls], mine, 0);
    return dt__krec_alloc_big(alen);
}
/* Frees a record (not what it references). Any thread. */
void dt__krec_free(dt__krec *k);
/* Bytes dt__krec_alloc takes for `alen` attribute bytes (the test that
 * measures what a kernel costs in memory). */
size_t dt__krec_footprint(size_t alen);

/* Packs a builder's attributes: the bytes needed (pack_size), then writes
 * them (pack). Lossless: every field of the dt__kattr that is not zero is
 * kept, so unpack gives back the same attributes. */
size_t dt__kattr_pack_size(const dt__kattr *a);
/* Returns the bytes written. */
size_t dt__kattr_pack(const dt__kattr *a, uint8_t *out);
/* The most bytes pack writes for attributes without text. */
#define DT__KATTR_PACK_MAX (2 + 7 * 4 + 2 * 8 + 2 * 20 + 3 * 8 + 5 + 8 * (4 * DT_MAX_NDIM + 2 * DT_MAX_NDIM))
/* 0 when `n` bytes are well-formed packed attributes (decoding). */
int dt__kattr_check(const uint8_t *buf, size_t n);
/* Unpacks a backend kernel's attributes onto the caller's dt__kattr (a
 * record made by pack or validated by dt__kernel_decode). */
void dt__kattr_unpack(const dt__krec *k, dt__kattr *a);
/* The arrays of a dt__kattr (shape start gshape step ints). */
#define DT__KATTR_ARRAYS 5
/* As dt__kattr_unpack onto a dt__kattr that holds the previous unpack (all
 * zero at first) with its arrays' lengths in lens[DT__KATTR_ARRAYS]: clears
 * only the array entries the previous kernel set past this one's, not the
 * whole record (a worker's per-stream scratch, stream_int.h). */
void dt__kattr_unpack_over(const dt__krec *k, dt__kattr *a, uint8_t *lens);
/* The same from `n` bytes of packed attributes; nonzero when malformed. */
int dt__kattr_unpack_bytes(const uint8_t *buf, size_t n, dt__kattr *a);

/* Frees a record that will not run with its references and its handle
 * (future or gate reference). NULL is ignored. Any thread. */
void dt__krec_discard(dt__krec *k);

/* A batch of queued kernels: per stream (device type, id, kind), kernels in
 * order. The codec's unit: what one controller round hands its streams. */
typedef struct dt__kbatch_stream {
    int type;
    int64_t device_id;
    int kind;
    dt__krec *head, *tail;
} dt__kbatch_stream;

typedef struct dt__kbatch {
    int n;
    dt__kbatch_stream *s; /* n entries (owned) */
} dt__kbatch;

/* Drops what a batch still holds (records, via dt__krec_discard) and its
 * array. */
void dt__kbatch_free(dt__kbatch *b);

/* How a decoder names things in its own process. Each callback returns a
 * reference the kernel takes over, or NULL/failure, which fails the decode. */
typedef struct dt__kresolver {
    void *ctx;
    /* The existing blob `id` that a kernel reads. */
    dt__blob *(*input)(void *ctx, uint64_t id);
    /* A new blob for output `id` of a kernel on a device of `type`; later
     * kernels of the batch that read `id` get it from input(). */
    dt__blob *(*output)(void *ctx, uint64_t id, int type);
    /* The future `id` names (FETCH/SYNC kernels); NULL callback: refused. */
    struct dt_future *(*future)(void *ctx, uint64_t id);
    /* The local group for group `id` of the encoding, held by the comm of
     * `type`: `n` devices in rank order, the first of type t0, the last of
     * t1, the others of t0; NULL callback: batches with collectives
     * refused. */
    dt_status (*group)(void *ctx, uint64_t id, int type, int t0, int t1, int n, const int64_t *device_ids,
                       uint64_t *local);
} dt__kresolver;

/* A growable byte buffer (the encoding). */
typedef struct dt__bytes {
    uint8_t *p;
    size_t len, cap;
    int failed; /* out of memory while writing */
} dt__bytes;
void dt__bytes_free(dt__bytes *b);
/* Room for n more bytes at the end of b: NULL (b->failed set) when out of
 * memory. */
uint8_t *dt__bytes_room(dt__bytes *b, size_t n);
/* Appends v as n little-endian bytes. */
void dt__bytes_put(dt__bytes *b, uint64_t v, int n);

/* Group `id` of the batch's graph: its comm's device type, ranks, devices,
 * and first and last ranks' device types; 0 when unknown (the controller's
 * group cache, dt__graph_group_lookup in core/controller/lower_comm.h). */
typedef int (*dt__kgroup_fn)(void *ctx, uint64_t id, int *type, int *n, const int64_t **device_ids, int *t0,
                             int *t1);
/* Serialises batch `b` into `out` (appended), the collectives' groups read
 * through `groups(ctx, ...)`. DT_EINVAL (thread error set) for kernels that
 * cannot leave the process (a test's gate); DT_ENOMEM. Format:
 * kernel_codec.c. */
dt_status dt__kernel_encode(const dt__kbatch *b, dt__kgroup_fn groups, void *ctx, dt__bytes *out);
/* Rebuilds a batch from `len` bytes, binding names through `r`. A truncated,
 * corrupt or unsupported buffer is DT_EINVAL with the reason in the thread
 * error (never a crash); *out is then empty. */
dt_status dt__kernel_decode(const void *buf, size_t len, const dt__kresolver *r, dt__kbatch *out);
/* Queues a batch on g's streams (made on first use) and hands them over;
 * the records move to the streams (b is left empty). The controller thread,
 * or in a test a thread standing in for it while no op is recorded on g. */
dt_status dt__kbatch_push(struct dt_graph *g, dt__kbatch *b);

/* Test-only: g's tap (kernel.h, dt__ktap_fn) is called with each controller
 * round's kernels, encoded (or the encoder's failure, bytes NULL), on the
 * controller thread before they are handed over. Call right after
 * dt_graph_create. */
void dt__graph_set_kernel_tap_for_test(struct dt_graph *g, dt__ktap_fn fn, void *arg);

/* The kernel record of rank `rank` of `c` in group `group`, number `seq`;
 * NULL when out of memory. */
dt__krec *dt__coll_krec(const dt__coll *c, uint64_t group, uint64_t seq, int rank);

/* The attributes of c's kernels (the same bytes for every rank: the rank is
 * the record's, not its attributes'): their size, and written at p. */
size_t dt__coll_attr_size(const dt__coll *c);
void dt__coll_pack(const dt__coll *c, uint64_t group, uint64_t seq, uint8_t *p);

/* A local assembly's attributes (DT_KC_ASSEMBLE): the result's dtype and
 * shape, and where each of its n inputs goes in it. */
typedef struct dt__asmattr {
    dt_dtype dtype;
    int ndim, n;
    int64_t shape[DT_MAX_NDIM];
    int64_t starts[DT_MAX_OP_INPUTS * DT_MAX_NDIM]; /* n * ndim */
} dt__asmattr;
/* 0 when `len` bytes are well-formed assembly attributes for a kernel of
 * `n_in` inputs (a filled). */
int dt__asmattr_parse(const uint8_t *buf, size_t len, int n_in, dt__asmattr *a);
/* A DT_KC_ASSEMBLE record placing n (0..DT_MAX_OP_INPUTS) inputs at
 * starts[n * ndim] of a new tensor of `shape`; inputs, output and names
 * unset. NULL when out of memory. */
dt__krec *dt__asm_krec(dt_dtype dtype, int ndim, const int64_t *shape, int n, const int64_t *starts);

/* A collective kernel's attributes, as read from its record (kernel_codec.c):
 * the per-rank arrays stay in the record, little-endian (dt__collattr_at). */
typedef struct dt__collattr {
    uint64_t group, seq; /* the comm's group; the collective's number in it */
    int kind, ndim, dim_a, dim_b, n;
    int type; /* the device type whose comm holds the group */
    dt_dtype dtype;
    const uint8_t *shapes; /* n * ndim: each rank's input shape */
    const uint8_t *starts; /* n: each rank's range along dim_b (sliced kinds) */
    const uint8_t *lens;
} dt__collattr;
/* Entry i of one of a dt__collattr's arrays. */
int64_t dt__collattr_at(const uint8_t *arr, size_t i);
/* 0 when `len` bytes hold well-formed collective attributes (a filled,
 * its arrays pointing into buf). */
int dt__collattr_parse(const uint8_t *buf, size_t len, dt__collattr *a);
/* Reads a DT_KC_COLLECTIVE record's attributes. */
void dt__collattr_read(const dt__krec *k, dt__collattr *a);

#endif /* DT_KERNEL_REC_H */
