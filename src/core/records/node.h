/*
 * Nodes: the records of the client->controller queue. One node per
 * client-level op (dt__op, rows in src/ops/ops.def) with its attributes
 * (dt__nattr) and its input and output values. A client thread makes a node
 * (dt__node_new, tensor.c), fills it and submits it (graph.h); from then on
 * it is immutable: the controller, the window's passes and the lowering
 * functions read it, and whoever ends it frees it (any thread). Any module
 * may include it.
 */
#ifndef DT_CORE_NODE_H
#define DT_CORE_NODE_H

#include "core/core.h"

/* Client-level ops: one node record each; the rows (name, lowering and
 * every fact core reads of an op) are src/ops/ops.def. */
typedef enum dt__op {
#define DT_OP(E, ...) DT_OP_##E,
#include "ops/ops.def"
    DT_OP_COUNT
} dt__op;

/* Node attributes: the fields any family may set first, then one block per
 * family that needs many ints (a union: every node belongs to one family).
 * The common fields lead so that an elementwise node's are in the node's
 * first cache lines, the ones the controller reads. */
typedef struct dt__nattr {
    int32_t sub;   /* dt_binary_op */
    int32_t flags; /* DT_KF_* for scalars/sum */
    dt_scalar scalar;
    /* elementwise: alpha of add/sub, y of where, max of clamp. */
    dt_scalar scalar2;
    uint64_t dims_mask;
    uint64_t seed;
    double f[3];
    /* linalg einsum: the equation (interned, never freed). */
    const char *text;
    union {
        /* views family (src/ops/views_int.h says what each holds per kind). */
        struct {
            int64_t v_start[DT_MAX_NDIM];
            int64_t v_step[DT_MAX_NDIM];
            int64_t v_len[DT_MAX_NDIM];
            int64_t v_ints[DT_MAX_NDIM];
            int32_t v_nints;
            int32_t v_dim;
            uint64_t v_mask;
        };
        /* nn family: integer arguments (normalized shape, conv stride/
         * padding/dilation/groups, pad amounts, interpolate sizes). */
        int64_t ints[2 * DT_MAX_NDIM];
        /* creation and data-dependent family: the dim of sort/topk/cumsum
         * (normalised, >= 0) and k of topk. */
        struct {
            int64_t sort_dim;
            int64_t sort_k;
        };
    };
} dt__nattr;

struct dt__node {
    struct dt__node *next;
    int32_t op;
    int32_t n_in;
    dt__tval *out;
    dt__tval *in[DT_MAX_OP_INPUTS];
    const char *site_file; /* interned */
    int32_t site_line;
    void *extra; /* SOURCE: host impl (or blocks, DT__SOURCE_LOCAL); FETCH/SYNC: the dt_future */
    /* While tracing (core/records/trace.h): when and on which client thread the
     * node was recorded; zero otherwise. */
    int64_t rec_t0, rec_t1;
    uint32_t rec_tid;
    dt__nattr a;
};

/* The op table: one row per node op, generated from src/ops/ops.def by
 * src/ops/op_table.c and registered at start-up (src/init.c), so core reads
 * each op's facts without naming the op or the functions that implement
 * them. Every row has every field (ops.def's head says each column). */
typedef dt_status (*dt__lower_fn)(dt__lower *L, dt__node *n);
typedef int (*dt__seg_rule_fn)(const dt__node *n, dt__meta *out);
typedef int (*dt__chainable_fn)(const dt__node *n);
typedef void (*dt__discard_fn)(dt_graph *g, dt__node *n);
typedef struct dt__op_info {
    const char *name;
    /* Returns DT_OK, or the failure (L->status) after which the controller
     * poisons the node's output. */
    dt__lower_fn lower;
    unsigned flags; /* DT_OPF_* */
    /* The nn family's placement and lowering rules (src/ops/nn_int.h),
     * which its lowering reads; NULL for the other families. Core never
     * reads them. */
    const struct dt__nn_rules *rules;
    /* Segmented dims (core/records/seg.h): whether node n passes a
     * segmented input's layout through to out (its output's meta, the
     * descriptor set by the rule), sets it itself, or needs regular inputs
     * (DT__SEG_PASS, DT__SEG_OWN, DT__SEG_REGULAR). Called by the gate
     * (core/client/segment.c) on the client thread for a node with a
     * segmented input, and for every node of a DT_OPF_SEG_OWN op. NULL: the
     * op always takes regular inputs. */
    dt__seg_rule_fn seg_rule;
    /* 1 when node n may be a step of a blocked elementwise chain (the
     * chain pass, passes/chain.c): its kernel is elementwise and computes
     * each element alike however the data is cut in blocks. NULL for an op
     * whose nodes never are. */
    dt__chainable_fn chainable;
    /* Ends a node of graph g that is never lowered: frees what it owns
     * beyond its values (n->extra) and fails what waits on it (a read's
     * future, as cancelled). Called by the client after a failed submit and
     * by the controller after dt_graph_cancel; NULL for an op whose node
     * owns nothing else. */
    dt__discard_fn discard;
} dt__op_info;
/* An op's facts (the flags column of ops.def): what core's generic code
 * (the passes, the schedule, replay, the controller loop, traces) must know
 * of an op it does not name. */
enum {
    /* Its lowering reads the node's attribute block (the union after
     * dt__nattr.text): replay compares it. */
    DT_OPF_READS_BLOCK = 1u << 0,
    /* Lowering it does more than compute its output (frees the host data
     * it owns, completes a read, holds kernels at a test gate, shuts the
     * controller down): the dce pass keeps it when nobody reads its output. */
    DT_OPF_SIDE_EFFECT = 1u << 1,
    /* Lowered in its place: the schedule (sched.c) moves no slot across it
     * (reads, graph-wide waits, test gates, the shutdown). */
    DT_OPF_BARRIER = 1u << 2,
    /* Each output element comes from the inputs' elements at its position
     * only, so its kernels may write the result into in[0]'s storage (the
     * reuse mark, passes/reuse.c, when in[0] has the result's shape and
     * element size). */
    DT_OPF_REUSES_IN0 = 1u << 3,
    /* n->extra is the dt_future (one reference) the caller waits on and the
     * lowering completes: a failed lowering fails it, there being no output
     * to poison, and a trace records no node for it (the caller may read
     * the trace as soon as the future completes). */
    DT_OPF_FUTURE = 1u << 4,
    /* Some of its nodes set their output's segmented-dim descriptor
     * themselves (cat, getitem): the gate asks its seg rule about every
     * node, not only those with a segmented input. */
    DT_OPF_SEG_OWN = 1u << 5,
};
/* The registered rows (DT_OP_COUNT of them); set before any graph exists. */
extern const dt__op_info *dt__ops;
void dt__ops_register(const dt__op_info *rows);

/* A node for `op` with the thread's call site. */
dt__node *dt__node_new(int op);
/* The same with only the first `zeroed` bytes zeroed. DT__NODE_COMMON_BYTES
 * leaves the family union of the attributes (a.v_*, a.ints, a.sort_*)
 * undefined: for the elementwise family, which reads none of it. */
#define DT__NODE_COMMON_BYTES (offsetof(dt__node, a) + offsetof(dt__nattr, ints))
dt__node *dt__node_new_prefix(int op, size_t zeroed);

/* The node record pool (common/pool.h): made on one thread, freed on another. */
extern dt__pool dt__node_pool;
/* Frees a node record (any thread). */
static inline void dt__node_free(dt__node *n) { dt__pool_free(&dt__node_pool, n); }
/* The same with the calling thread's pool lists (common/pool.h). */
static inline void dt__node_free_in(struct dt__pool_lists *mine, dt__node *n) {
    dt__pool_free_in(&dt__node_pool, mine, n);
}

#endif /* DT_CORE_NODE_H */
