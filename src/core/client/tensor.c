/*
 * The tensor handles (the client's symbols), the records of values and
 * nodes, call sites, random seeds, and reads (dt_tensor_fetch). Split from
 * graph.c, which keeps the graph's life and its queue.
 *
 * Threads: client threads (any thread); dt__tval_free and
 * dt__tval_free_list_deferred on the controller. A released symbol's value goes to
 * the controller through the graph's release stack (graph.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/client/graph.h"
#include "core/client/segment.h"
#include "core/client/tensor.h"
#include "core/records/bgroup.h"
#include "core/records/blob.h"
#include "core/records/cluster_port.h"
#include "core/records/future.h"
#include "core/records/graph_int.h"
#include "core/records/mesh.h"
#include "core/records/meta.h"
#include "core/records/node.h"
#include "core/records/trace.h"
#include "core/worker/stream.h"

static _Atomic uint64_t next_tensor_id = 1;

dt__pool dt__node_pool = DT__POOL_INIT(sizeof(dt__node));
/* A symbol and its value share one record, value first: the client never
 * touches the record after dropping the symbol, and the controller frees it
 * with the value, so one allocation serves both. */
typedef struct dt__symrec {
    /* Recovery (dt_tensor_lineage, dt_tensor_recompute, dt_tensor_mark_lost):
     * a copy of the node that made a value living on a worker node's
     * devices (NULL otherwise, or when its op is not pure), and the reason
     * reads of a value lost with its node fail; both freed with the value.
     * First: in the line of the value's controller fields, which the
     * controller reads when it frees the value. */
    struct lineage *lineage;
    char *lost;
    dt__tval v;
    struct dt_tensor t;
    const char *site_file; /* the user's line that made it (dt_tensor_site) */
    int site_line;
} dt__symrec;
_Static_assert(offsetof(dt__symrec, v) + offsetof(dt__tval, grp) + sizeof(void *) <= DT_CACHE_LINE,
               "a value's controller fields in its record's first line");

/* The record that holds value v. */
static inline dt__symrec *symrec_of_value(dt__tval *v) {
    return (dt__symrec *)((char *)v - offsetof(dt__symrec, v));
}

/* A value's producer as the client submitted it: the node's op and
 * attributes (its pointers are not followed) and its inputs' value ids, so
 * no input is kept alive by it. */
typedef struct lineage {
    dt__node n;
    uint64_t in_id[DT_MAX_OP_INPUTS];
} lineage;
/* Type-stable, for the symbol's magic (core.h, handles). */
dt__pool dt__tval_pool = DT__POOL_INIT_STABLE(sizeof(dt__symrec), offsetof(dt__symrec, t));
static _Thread_local const char *tls_site_file;
static _Thread_local int tls_site_line;

/* ------------------------------------------------------------ call sites */

void dt_set_call_site(const char *file, int line) {
    /* Most calls repeat the previous file: skip the intern lookup then. */
    if (file && tls_site_file && (file == tls_site_file || strcmp(file, tls_site_file) == 0)) {
        tls_site_line = line;
        return;
    }
    tls_site_file = dt__intern(file);
    tls_site_line = line;
}

/* ---------------------------------------------------------------- seeds */

static _Atomic uint64_t rng_seed = 0x5eed;
static _Atomic uint64_t rng_counter;

void dt_manual_seed(uint64_t seed) {
    atomic_store(&rng_seed, seed);
    atomic_store(&rng_counter, 0);
}

/* splitmix64 of (seed, call index): each random call gets an independent
 * generator seed that does not depend on placement. */
uint64_t dt__next_random_seed(void) {
    uint64_t z = atomic_load(&rng_seed) * 0x9e3779b97f4a7c15ull + atomic_fetch_add(&rng_counter, 1) + 1;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (z ^ (z >> 31)) & 0x7fffffffffffffffull;
}

/* -------------------------------------------------------------- tensors */

dt__node *dt__node_new(int op) { return dt__node_new_prefix(op, sizeof(dt__node)); }

dt__node *dt__node_new_prefix(int op, size_t zeroed) {
    dt__node *n = dt__pool_alloc_prefix(&dt__node_pool, zeroed);
    if (!n)
        return NULL;
    n->op = op;
    n->site_file = tls_site_file;
    n->site_line = tls_site_line;
    if (dt__rec_enabled(DT__REC_TRACE))
        n->rec_t0 = dt__rec_now(); /* the client slice's start (core/records/trace.h) */
    return n;
}

dt_tensor *dt__tensor_new(dt_graph *g, const dt__meta *m) {
    /* The atomic operations come before the record is written: each one
     * waits until earlier stores have reached the cache, and the record's
     * lines usually arrive from the controller's core (it freed them). The
     * stores then complete in the background until the queue push. */
    uint64_t id = atomic_fetch_add_explicit(&next_tensor_id, 1, memory_order_relaxed);
    dt_mesh_retain(m->mesh);
    dt_graph_retain(g);
    /* Every field is set below: no zeroing first. */
    dt__symrec *rec = dt__pool_alloc_prefix(&dt__tval_pool, 0);
    if (!rec) {
        dt_graph_release(g);
        dt_mesh_release(m->mesh);
        dt__error(DT_ENOMEM, "tensor: out of memory");
        return NULL;
    }
    dt_tensor *t = &rec->t;
    dt__tval *v = &rec->v;
    v->meta = *m;
    v->id = id;
    v->blobs = NULL;
    v->grp = NULL;
    v->next_release = NULL;
    v->mcls = 0;
    v->wgen = 0;
    t->magic = DT__TENSOR_LIVE;
    atomic_init(&t->refs, 1);
    t->graph = g;
    t->v = v;
    rec->site_file = NULL; /* dt__client_submit_raw: its node's */
    rec->site_line = 0;
    rec->lineage = NULL;
    rec->lost = NULL;
    return t;
}

void dt_tensor_site(const dt_tensor *t, const char **file, int *line) {
    const dt__symrec *rec =
        dt__tensor_ok(t) ? (const dt__symrec *)((const char *)t - offsetof(dt__symrec, t)) : NULL;
    if (file)
        *file = rec ? rec->site_file : NULL;
    if (line)
        *line = rec ? rec->site_line : 0;
}

/* ------------------------------------------------- values on some devices */

typedef struct tlist {
    dt_tensor **v;
    int64_t n, cap;
} tlist;

typedef struct on_devices {
    dt_device_type type;
    int64_t first, count;
    tlist hits, drop; /* drop: references to release that may be the last */
} on_devices;

/* Appends t to l; 0 when out of memory. The pool's lock is held: no pool call. */
static int tlist_push(tlist *l, dt_tensor *t) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 64;
        dt_tensor **v = dt__realloc(l->v, (size_t)cap * sizeof *v);
        if (!v)
            return 0;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = t;
    return 1;
}

/* A live symbol with a piece on one of the devices, retained into q->hits
 * (one whose last reference is being dropped is skipped). */
static void visit_symbol(void *rec, void *arg) {
    on_devices *q = arg;
    dt_tensor *t = &((dt__symrec *)rec)->t;
    if (!dt__tensor_ok(t))
        return;
    int refs = atomic_load(&t->refs);
    do
        if (refs <= 0)
            return;
    while (!atomic_compare_exchange_weak(&t->refs, &refs, refs + 1));
    const dt_mesh *m = t->v->meta.mesh;
    int hit = 0;
    for (int64_t i = 0; m->type == q->type && i < m->ndev; i++)
        hit |= m->ids[i] >= q->first && m->ids[i] < q->first + q->count;
    if (hit && tlist_push(&q->hits, t))
        return;
    /* Ours back: a plain decrement unless it may be the last reference
     * (dropped meanwhile on another thread), which is released after the
     * walk, outside the lock. */
    refs = atomic_load(&t->refs);
    while (refs > 1 && !atomic_compare_exchange_weak(&t->refs, &refs, refs - 1)) {
    }
    if (refs <= 1 && !tlist_push(&q->drop, t))
        atomic_fetch_sub(&t->refs, 1); /* out of memory: leaked rather than freed under the lock */
}

int64_t dt_tensors_on_devices(dt_device_type type, int64_t first, int64_t count, dt_tensor **out,
                              int64_t cap) {
    on_devices q = {type, first, count, {NULL, 0, 0}, {NULL, 0, 0}};
    dt__pool_each(&dt__tval_pool, visit_symbol, &q);
    for (int64_t i = 0; i < q.drop.n; i++)
        dt_tensor_release(q.drop.v[i]);
    for (int64_t i = 0; i < q.hits.n; i++)
        if (out && i < cap)
            out[i] = q.hits.v[i];
        else
            dt_tensor_release(q.hits.v[i]);
    dt__free(q.drop.v);
    dt__free(q.hits.v);
    return q.hits.n;
}

dt_tensor *dt__tval_tensor(dt__tval *v) { return &symrec_of_value(v)->t; }

/* ------------------------------------------------------------- lineage */

static dt__symrec *symrec_of(const dt_tensor *t) {
    return dt__tensor_ok(t) ? (dt__symrec *)((char *)t - offsetof(dt__symrec, t)) : NULL;
}

/* A copy of n when its output has a piece on a worker node's device and its
 * op is pure: it computes the output from its inputs and attributes alone
 * (no host data or callable in n->extra, no side effect); else NULL (also
 * when out of memory: the value is then a reload value). Client thread,
 * before n is queued. */
static lineage *lineage_of(const dt__node *n, const dt__tval *out, uint64_t gen) {
    dt_mesh *m = out->meta.mesh;
    uint_fast64_t known = atomic_load_explicit(&m->on_node, memory_order_relaxed);
    int remote = (int)(known & 1);
    if (known >> 1 != gen) { /* once per mesh and cluster generation: node_of takes a lock */
        remote = 0;
        for (int64_t i = 0; i < m->ndev && !remote; i++)
            remote = dt__port_node_of(m->type, m->ids[i]) >= 0;
        atomic_store_explicit(&m->on_node, gen << 1 | (uint_fast64_t)remote, memory_order_relaxed);
    }
    if (!remote || n->extra || (dt__ops[n->op].flags & (DT_OPF_SIDE_EFFECT | DT_OPF_FUTURE | DT_OPF_BARRIER)))
        return NULL;
    lineage *l = dt__malloc(sizeof *l);
    if (!l)
        return NULL;
    l->n = *n;
    for (int i = 0; i < DT_MAX_OP_INPUTS; i++)
        l->in_id[i] = i < n->n_in && n->in[i] ? n->in[i]->id : 0;
    return l;
}

static void symrec_extras_free(dt__symrec *rec) {
    if (!rec->lineage && !rec->lost)
        return; /* the usual value (no lineage kept): no calls into free */
    dt__free(rec->lineage);
    dt__free(rec->lost);
    rec->lineage = NULL;
    rec->lost = NULL;
}

int dt_tensor_lineage(const dt_tensor *t, uint64_t *in_ids) {
    const dt__symrec *rec = symrec_of(t);
    if (!rec || !rec->lineage)
        return -1;
    for (int i = 0; i < rec->lineage->n.n_in; i++)
        in_ids[i] = rec->lineage->in_id[i];
    return rec->lineage->n.n_in;
}

const char *dt_tensor_lineage_op(const dt_tensor *t) {
    const dt__symrec *rec = symrec_of(t);
    return rec && rec->lineage ? dt__ops[rec->lineage->n.op].name : NULL;
}

dt_tensor *dt_tensor_recompute(const dt_tensor *t, dt_tensor *const *inputs, int n_in, dt_mesh *mesh) {
    const dt__symrec *rec = symrec_of(t);
    if (!rec) {
        dt__error(DT_EINVAL, "recompute: tensor is %s", dt__handle_bad(t));
        return NULL;
    }
    if (!rec->lineage || n_in != rec->lineage->n.n_in) {
        dt__error(DT_EINVAL, "recompute: %s",
                  rec->lineage ? "wrong number of inputs" : "the value has no recorded producer");
        return NULL;
    }
    if (!dt__mesh_ok(mesh) || mesh->type != t->v->meta.mesh->type || mesh->ndev != t->v->meta.mesh->ndev) {
        dt__error(DT_EINVAL, "recompute: the new mesh must have the value's device type and device count");
        return NULL;
    }
    for (int i = 0; i < n_in; i++)
        if (rec->lineage->in_id[i] == 0 ? inputs[i] != NULL
                                        : !dt__tensor_ok(inputs[i]) || inputs[i]->graph != t->graph) {
            dt__error(DT_EINVAL, "recompute: input %d is released or of another graph", i);
            return NULL;
        }
    dt__meta m = t->v->meta;
    m.mesh = mesh;
    dt_tensor *out = dt__tensor_new(t->graph, &m);
    dt__node *n = out ? dt__node_new(rec->lineage->n.op) : NULL;
    if (!n) {
        if (out)
            dt__error(DT_ENOMEM, "recompute: out of memory");
        return out ? dt__client_submit_raw(out, NULL) : NULL;
    }
    n->n_in = n_in;
    n->a = rec->lineage->n.a;
    n->site_file = rec->lineage->n.site_file;
    n->site_line = rec->lineage->n.site_line;
    n->out = out->v;
    for (int i = 0; i < n_in; i++)
        n->in[i] = inputs[i] ? inputs[i]->v : NULL;
    return dt__client_submit(out, n);
}

dt_status dt_tensor_mark_lost(dt_tensor *t, const char *why) {
    dt__symrec *rec = symrec_of(t);
    if (!rec)
        return dt__error(DT_EINVAL, "mark_lost: tensor is %s", dt__handle_bad(t));
    if (!why)
        return dt__error(DT_EINVAL, "mark_lost: no reason given");
    char *copy = dt__strdup(why);
    if (!copy)
        return dt__error(DT_ENOMEM, "mark_lost: out of memory");
    dt__free(rec->lost);
    rec->lost = copy;
    return DT_OK;
}

/* A node that will not be queued: what it owns beyond its values (a
 * source's host data) is freed by its op's discard (src/ops/ops.def). */
static void discard(dt_graph *g, dt__node *n) {
    if (dt__ops[n->op].discard)
        dt__ops[n->op].discard(g, n);
}

dt_tensor *dt__client_submit(dt_tensor *t, dt__node *n) {
    /* Segmented inputs (segment.c): the output's layout, or regular inputs
     * first. The temporaries are released after the node is queued. */
    dt_tensor *tmp[DT_MAX_OP_INPUTS];
    int ntmp = 0;
    if (n && dt__seg_gate(t, n, tmp, &ntmp) != DT_OK) {
        discard(t->graph, n);
        dt__node_free(n);
        n = NULL;
    }
    t = dt__client_submit_raw(t, n);
    for (int i = 0; i < ntmp; i++)
        dt_tensor_release(tmp[i]);
    return t;
}

dt_tensor *dt__client_submit_raw(dt_tensor *t, dt__node *n) {
    if (!n) {
        if (dt_last_status() == DT_OK)
            dt__error(DT_ENOMEM, "out of memory");
    } else {
        dt__symrec *rec = (dt__symrec *)((char *)t - offsetof(dt__symrec, t));
        rec->site_file = n->site_file;
        rec->site_line = n->site_line;
        uint64_t gen = t->graph->local_only ? 0 : dt__port_generation();
        if (gen != 0)
            rec->lineage = lineage_of(n, t->v, gen);
        dt_status st = dt__graph_submit(t->graph, n);
        if (st == DT_OK)
            return t;
        dt__submit_error(st);
        discard(t->graph, n);
        dt__node_free(n);
    }
    dt_graph *g = t->graph;
    t->magic = DT__HANDLE_DEAD;
    dt__tval_free(t->v); /* the symbol's record too */
    dt_graph_release(g);
    return NULL;
}

/* `mine`: the calling thread's pool lists (NULL: looked up). */
/* g: the controller's graph, whose workers free the blobs they made
 * (dt__blob_release_ctl); NULL: freed here. */
static inline __attribute__((always_inline)) void tval_free_keep_mesh(dt__tval *v, dt_graph *g,
                                                                      dt__pool_lists *mine) {
    symrec_extras_free(symrec_of_value(v));
    if (v->grp) {
        /* One hold of the whole group; the last drops its members. */
        if (!g)
            dt__bgroup_release(v->grp);
        else if (dt__bgroup_unhold(v->grp)) {
            for (int64_t i = 0; i < v->meta.mesh->ndev; i++)
                if (!dt__bgroup_taken(v->grp, (int)i))
                    dt__blob_release_ctl(g, v->blobs[i], mine);
            dt__bgroup_member_gone(v->grp, mine);
        }
        dt__pool_free_in(&dt__tval_pool, mine, symrec_of_value(v));
        return;
    }
    if (v->blobs)
        for (int64_t i = 0; i < v->meta.mesh->ndev; i++) {
            if (g)
                dt__blob_release_ctl(g, v->blobs[i], mine);
            else
                dt__blob_release_in(v->blobs[i], mine);
        }
    if (v->blobs != v->inl)
        dt__free(v->blobs);
    dt__pool_free_in(&dt__tval_pool, mine, symrec_of_value(v));
}

void dt__tval_free(dt__tval *v) {
    if (!v)
        return;
    dt_mesh *mesh = v->meta.mesh;
    tval_free_keep_mesh(v, NULL, NULL);
    dt_mesh_release(mesh);
}

void dt__graph_flush_releases(dt_graph *g) {
    if (g->defer_n) {
        if (atomic_fetch_sub_explicit(&g->defer_mesh->refs, g->defer_n - 1, memory_order_acq_rel) ==
            g->defer_n - 1)
            DT_ASSERT(!"a deferred mesh reference was not counted"); /* invariant: refcount bug */
        dt_mesh_release(g->defer_mesh);
    }
    g->defer_mesh = NULL;
    g->defer_n = 0;
}

void dt__tval_free_list_deferred(dt_graph *g, dt__tval *list) {
    for (dt__tval *v = list, *next; v; v = next) {
        next = v->next_release;
        dt_mesh *mesh = v->meta.mesh;
        tval_free_keep_mesh(v, g, g->ctl_pools);
        if (mesh != g->defer_mesh || g->defer_n >= 4096)
            dt__graph_flush_releases(g);
        g->defer_mesh = mesh;
        g->defer_n++;
    }
}

void dt_tensor_retain(dt_tensor *t) {
    if (dt__tensor_ok(t))
        atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

void dt_tensor_release(dt_tensor *t) {
    if (!dt__tensor_ok(t) || atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
        return;
    t->magic = DT__HANDLE_DEAD; /* before the value goes to the controller, which frees the record */
    dt_graph *g = t->graph;
    if (dt__graph_forked(g))
        return; /* a parent's graph (fork child): its controller is not here; leaked */
    dt__tval *v = t->v;
    dt__tval *h = atomic_load_explicit(&g->rhead, memory_order_relaxed);
    do {
        if (h == DT__R_CLOSED)
            break;
        v->next_release = h;
    } while (
        !atomic_compare_exchange_weak_explicit(&g->rhead, &h, v, memory_order_seq_cst, memory_order_relaxed));
    if (h == DT__R_CLOSED) {
        /* Shut down: once the controller has returned, nothing else can
         * touch the value (a timed-out cancel may return before that). */
        pthread_mutex_lock(&g->bl_lock);
        while (!g->ctl_exited)
            pthread_cond_wait(&g->bl_cond, &g->bl_lock);
        pthread_mutex_unlock(&g->bl_lock);
        dt__tval_free(v);
    } else {
        dt__graph_wake(g);
    }
    /* t shares v's record: the controller may have freed it by now. */
    dt_graph_release(g);
}

dt_dtype dt_tensor_dtype(const dt_tensor *t) { return dt__tensor_ok(t) ? t->v->meta.dtype : DT_FLOAT32; }
/* The getters take NULL or a released tensor and return a neutral value (0 or NULL). */
int dt_tensor_ndim(const dt_tensor *t) { return dt__tensor_ok(t) ? t->v->meta.ndim : 0; }
const int64_t *dt_tensor_shape(const dt_tensor *t) { return dt__tensor_ok(t) ? t->v->meta.shape : NULL; }
int64_t dt_tensor_numel(const dt_tensor *t) {
    return dt__tensor_ok(t) ? dt__numel(t->v->meta.ndim, t->v->meta.shape) : 0;
}
dt_mesh *dt_tensor_mesh(const dt_tensor *t) { return dt__tensor_ok(t) ? t->v->meta.mesh : NULL; }
const dt_placement *dt_tensor_placements(const dt_tensor *t) {
    return dt__tensor_ok(t) ? t->v->meta.pl : NULL;
}
dt_graph *dt_tensor_graph(const dt_tensor *t) { return dt__tensor_ok(t) ? t->graph : NULL; }
uint64_t dt_tensor_id(const dt_tensor *t) { return dt__tensor_ok(t) ? t->v->id : 0; }

/* -------------------------------------------------------------- reads */

static dt_future *fetch(dt_tensor *t, int64_t local) {
    const dt__symrec *rec = symrec_of(t);
    if (rec->lost) { /* lost with its worker node (dt_tensor_mark_lost) */
        dt_future *f = dt__future_new();
        if (f)
            dt__future_fail(f, DT_EKERNEL, rec->lost);
        else
            dt__error(DT_ENOMEM, "fetch: out of memory");
        return f;
    }
    dt_future *f = dt__future_new();
    dt__node *n = dt__node_new(DT_OP_FETCH);
    if (!f || !n) {
        dt_future_release(f);
        dt__node_free(n);
        dt__error(DT_ENOMEM, "fetch: out of memory");
        return NULL;
    }
    /* A value read is in user order (segment.c). */
    dt_tensor *reg = t->v->meta.seg.n ? dt__seg_regular(t) : NULL;
    if (t->v->meta.seg.n && !reg) {
        dt_future_release(f);
        dt__node_free(n);
        return NULL;
    }
    if (reg)
        t = reg;
    const dt__meta *m = &t->v->meta;
    f->be = dt__graph_be(t->graph, t->v->meta.mesh->type);
    f->dtype = m->dtype;
    f->ndim = m->ndim;
    f->local = local;
    if (local < 0) {
        memcpy(f->shape, m->shape, sizeof f->shape);
    } else {
        int64_t coord[DT_MAX_MESH_NDIM], start[DT_MAX_NDIM];
        dt__mesh_coord(m->mesh, local, coord);
        dt__local_region(m, coord, start, f->shape);
    }
    atomic_fetch_add(&f->refs, 1); /* held by the controller and kernels */
    n->in[0] = t->v;
    n->n_in = 1;
    n->extra = f;
    dt_status st = dt__graph_submit(t->graph, n);
    if (st != DT_OK) {
        dt__node_free(n);
        dt__submit_error(st);
        dt__future_fail(f, st, dt_last_error());
        dt_future_release(f);
    }
    if (reg)
        dt_tensor_release(reg);
    return f;
}

dt_future *dt_tensor_fetch(dt_tensor *t) {
    if (!dt__tensor_ok(t)) {
        dt__error(DT_EINVAL, "tensor is %s", dt__handle_bad(t));
        return NULL;
    }
    return fetch(t, -1);
}

dt_future *dt_tensor_fetch_local(dt_tensor *t, int64_t mesh_index) {
    if (!dt__tensor_ok(t)) {
        dt__error(DT_EINVAL, "tensor is %s", dt__handle_bad(t));
        return NULL;
    }
    int64_t n = t->v->meta.mesh->ndev;
    if (mesh_index < 0 || mesh_index >= n) {
        dt__error(DT_EINDEX, "fetch_local: mesh index %lld out of range for a mesh of %lld devices",
                  (long long)mesh_index, (long long)n);
        return NULL;
    }
    return fetch(t, mesh_index);
}

int dt_future_shape(const dt_future *f, int64_t *shape) {
    if (!dt__future_ok(f) || !f->be)
        return -1;
    for (int d = 0; d < f->ndim; d++)
        shape[d] = f->shape[d];
    return f->ndim;
}

dt_status dt_tensor_read(dt_tensor *t, void *buf, size_t nbytes) {
    dt_future *f = dt_tensor_fetch(t);
    if (!f)
        return dt_last_status();
    dt_status st = dt_future_read(f, buf, nbytes);
    dt_future_release(f);
    return st;
}
