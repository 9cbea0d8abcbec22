/*
 * Misuse armor of the public C API, as SQLite's safety checks: every entry
 * point that takes a handle accepts NULL or a released handle without
 * crashing; entries that return a status or an object report
 * DT_EINVAL (NULL object, dt_last_status() == DT_EINVAL); getters return a
 * neutral value; release/retain of NULL are no-ops.
 *
 * Each NULL case runs in a child process (fork), so one crash names its entry
 * point instead of ending the whole test. The children fork before any graph
 * exists, so they are single-threaded (safe under ASan and TSan).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

/* 1 when the entry reported bad input: a NULL result and DT_EINVAL. */
static int einval_obj(const void *p) { return p == NULL && dt_last_status() == DT_EINVAL; }
static int einval(dt_status st) { return st == DT_EINVAL && dt_last_status() == DT_EINVAL; }

typedef int (*case_fn)(void);

/* Runs fn in a child: 0 = passed, 1 = returned failure, else crashed. */
static void run_case(const char *name, case_fn fn) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        dt_clear_error();
        int ok = fn();
        if (!ok)
            fprintf(stderr, "%s: last error: %s\n", name, dt_last_error());
        _exit(ok ? 0 : 1);
    }
    int ws = 0;
    if (pid < 0 || waitpid(pid, &ws, 0) != pid) {
        fprintf(stderr, "%s: could not run (fork)\n", name);
        failures++;
        return;
    }
    if (WIFSIGNALED(ws)) {
        fprintf(stderr, "%s: crashed with signal %d (expected DT_EINVAL)\n", name, WTERMSIG(ws));
        failures++;
    } else if (WEXITSTATUS(ws) != 0) {
        fprintf(stderr, "%s: exited %d: expected DT_EINVAL / a neutral value\n", name, WEXITSTATUS(ws));
        failures++;
    }
}

static const int64_t shape2[1] = {2};
static const int64_t dims1[1] = {0};
static const dt_scalar one = {DT_SCALAR_INT, 1, 0.0};

#define CASE(name, expr)                                                                                     \
    static int case_##name(void) { return (expr); }
/* Handles and getters. */
CASE(mesh_retain, (dt_mesh_retain(NULL), 1))
CASE(mesh_release, (dt_mesh_release(NULL), 1))
CASE(mesh_ndim, dt_mesh_ndim(NULL) == 0)
CASE(mesh_size, dt_mesh_size(NULL, 0) == 0)
CASE(mesh_shape, dt_mesh_shape(NULL) == NULL)
CASE(mesh_ids, dt_mesh_ids(NULL) == NULL)
CASE(mesh_dim_name, dt_mesh_dim_name(NULL, 0) == NULL)
CASE(mesh_equal, (dt_mesh_equal(NULL, NULL), 1))
CASE(mesh_device_type, (dt_mesh_device_type(NULL), 1))
CASE(tensor_dtype, (dt_tensor_dtype(NULL), 1))
CASE(mesh_create_out, einval(dt_mesh_create(DT_DEVICE_CPU, 1, shape2, NULL, NULL, NULL)))
CASE(graph_create_out, einval(dt_graph_create(NULL, NULL)))
CASE(graph_retain, (dt_graph_retain(NULL), 1))
CASE(graph_release, (dt_graph_release(NULL), 1))
CASE(graph_shutdown, einval(dt_graph_shutdown(NULL)))
CASE(graph_sync, einval(dt_graph_sync(NULL)))
CASE(graph_backend, dt_graph_backend(NULL) == NULL)
CASE(graph_satisfy, dt_graph_satisfy(NULL, NULL) == 0)
CASE(graph_sync_future, einval_obj(dt_graph_sync_future(NULL)))
CASE(graph_get_stats, einval(dt_graph_get_stats(NULL, NULL, 0)))
CASE(graph_set_chains, einval(dt_graph_set_chains(NULL, 1)))
CASE(graph_cancel, einval(dt_graph_cancel(NULL, 0)))
CASE(graph_wait_capacity, einval(dt_graph_wait_capacity(NULL, 0)))
CASE(graph_set_deferred_backpressure, (dt_graph_set_deferred_backpressure(NULL, 1), 1))
CASE(debug_hold_controller, einval(dt_debug_hold_controller(NULL, 1)))
CASE(tensor_retain, (dt_tensor_retain(NULL), 1))
CASE(tensor_release, (dt_tensor_release(NULL), 1))
CASE(tensor_ndim, dt_tensor_ndim(NULL) == 0)
CASE(tensor_shape, dt_tensor_shape(NULL) == NULL)
CASE(tensor_numel, dt_tensor_numel(NULL) == 0)
CASE(tensor_mesh, dt_tensor_mesh(NULL) == NULL)
CASE(tensor_placements, dt_tensor_placements(NULL) == NULL)
CASE(tensor_graph, dt_tensor_graph(NULL) == NULL)
CASE(tensor_id, dt_tensor_id(NULL) == 0)
CASE(tensor_site, (dt_tensor_site(NULL, NULL, NULL), 1))
CASE(tensor_lineage, dt_tensor_lineage(NULL, NULL) == -1)
CASE(tensor_lineage_op, dt_tensor_lineage_op(NULL) == NULL)
CASE(tensor_recompute, einval_obj(dt_tensor_recompute(NULL, NULL, 0, NULL)))
CASE(tensor_mark_lost, einval(dt_tensor_mark_lost(NULL, "why")))
CASE(tensor_read, einval(dt_tensor_read(NULL, NULL, 0)))
CASE(tensor_fetch, einval_obj(dt_tensor_fetch(NULL)))
CASE(tensor_fetch_local, einval_obj(dt_tensor_fetch_local(NULL, 0)))
CASE(future_shape, dt_future_shape(NULL, NULL) < 0)
CASE(future_wait, einval(dt_future_wait(NULL, 0)))
CASE(future_is_ready, dt_future_is_ready(NULL) == 0)
CASE(future_on_ready, einval(dt_future_on_ready(NULL, NULL, NULL)))
CASE(future_read, einval(dt_future_read(NULL, NULL, 0)))
CASE(future_to_dlpack, einval(dt_future_to_dlpack(NULL, NULL)))
CASE(future_status, einval(dt_future_status(NULL)))
CASE(future_release, (dt_future_release(NULL), 1))
CASE(dlpack_delete, (dt_dlpack_delete(NULL), 1))
CASE(memory_stats_out, (dt_memory_stats(DT_DEVICE_CPU, 0, NULL, NULL), 1))
CASE(op_doc_get, dt_op_doc_get(-1) == NULL)
CASE(gate_create, einval(dt_debug_gate_create(NULL)))
CASE(gate_open, (dt_debug_gate_open(NULL), 1))
CASE(gate_is_open, dt_debug_gate_is_open(NULL) == 0)
CASE(gate_release, (dt_debug_gate_release(NULL), 1))
CASE(gated, einval_obj(dt_debug_gated(NULL, NULL)))
CASE(debug_segments, dt_debug_segments(NULL, NULL, NULL, NULL) == -1)
CASE(debug_segment_mesh_dims, dt_debug_segment_mesh_dims(NULL, NULL) == -1)
CASE(debug_chain_blocks, dt_debug_chain_blocks(NULL) == -1)
/* Factories with a NULL graph or mesh. */
CASE(from_buffer, einval_obj(dt_tensor_from_buffer(NULL, DT_FLOAT32, 1, shape2, NULL, 0, NULL, NULL)))
CASE(from_dlpack, einval_obj(dt_tensor_from_dlpack(NULL, NULL, NULL, NULL)))
CASE(from_local,
     einval_obj(dt_tensor_from_local_buffers(NULL, DT_FLOAT32, 1, shape2, NULL, NULL, NULL, NULL)))
CASE(full, einval_obj(dt_full(NULL, DT_FLOAT32, 1, shape2, one, NULL, NULL)))
CASE(empty, einval_obj(dt_empty(NULL, DT_FLOAT32, 1, shape2, NULL, NULL)))
CASE(rand, einval_obj(dt_rand(NULL, DT_FLOAT32, 1, shape2, NULL, NULL)))
CASE(randn, einval_obj(dt_randn(NULL, DT_FLOAT32, 1, shape2, NULL, NULL)))
CASE(arange, einval_obj(dt_arange(NULL, DT_FLOAT32, 0, 2, 1, NULL, NULL)))
CASE(randint, einval_obj(dt_randint(NULL, DT_INT64, 0, 5, 1, shape2, NULL, NULL)))
/* Ops with NULL tensors. */
CASE(binary, einval_obj(dt_binary(DT_BINARY_ADD, NULL, NULL)))
CASE(binary_scalar, einval_obj(dt_binary_scalar(DT_BINARY_ADD, NULL, one, 0)))
CASE(binary_ex, einval_obj(dt_binary_ex(DT_BINARY_ADD, NULL, NULL, one, one, 0)))
CASE(neg, einval_obj(dt_neg(NULL)))
CASE(matmul, einval_obj(dt_matmul(NULL, NULL)))
CASE(sum, einval_obj(dt_sum(NULL, 1, dims1, 0)))
CASE(redistribute, einval_obj(dt_redistribute(NULL, NULL, NULL)))
CASE(reduce, einval_obj(dt_reduce(DT_REDUCE_SUM, NULL, 1, dims1, 0, -1)))
CASE(reduce_with_indices, einval(dt_reduce_with_indices(DT_REDUCE_MAX, NULL, 0, 0, NULL, NULL)))
CASE(mm, einval_obj(dt_mm(NULL, NULL)))
CASE(bmm, einval_obj(dt_bmm(NULL, NULL)))
CASE(outer, einval_obj(dt_outer(NULL, NULL)))
CASE(linear, einval_obj(dt_linear(NULL, NULL, NULL)))
CASE(linear_param, einval_obj(dt_linear_param(NULL, NULL, NULL)))
CASE(einsum_null_list, einval_obj(dt_einsum("i->i", 1, NULL)))
CASE(einsum_null_eq, einval_obj(dt_einsum(NULL, 0, NULL)))
CASE(reshape, einval_obj(dt_reshape(NULL, 1, shape2)))
CASE(squeeze, einval_obj(dt_squeeze(NULL, 0, NULL)))
CASE(unsqueeze, einval_obj(dt_unsqueeze(NULL, 0)))
CASE(permute, einval_obj(dt_permute(NULL, 1, dims1)))
CASE(expand, einval_obj(dt_expand(NULL, 1, shape2)))
CASE(clone, einval_obj(dt_clone(NULL)))
CASE(contiguous, einval_obj(dt_contiguous(NULL)))
CASE(index, einval_obj(dt_index(NULL, NULL, 0)))
CASE(index_tensor, einval_obj(dt_index_tensor(NULL, 0, NULL)))
CASE(setitem, einval_obj(dt_setitem(NULL, NULL, NULL, one)))
CASE(setitem_mask, einval_obj(dt_setitem_mask(NULL, 0, NULL, one)))
CASE(setitem_index, einval_obj(dt_setitem_index(NULL, 0, NULL, one)))
CASE(copy, einval_obj(dt_copy(NULL, NULL)))
CASE(masked_scatter, einval_obj(dt_masked_scatter(NULL, NULL, NULL, 0)))
CASE(cat_null_list, einval_obj(dt_cat(1, NULL, 0)))
CASE(stack_null_list, einval_obj(dt_stack(1, NULL, 0)))
CASE(tril, einval_obj(dt_tril(NULL, 0, 0)))
CASE(user_op, einval_obj(dt_user_op(NULL, NULL, NULL, 0, DT_FLOAT32, 0, NULL, NULL, NULL)))
CASE(flip, einval_obj(dt_flip(NULL, 1, dims1)))
CASE(roll, einval_obj(dt_roll(NULL, 1, dims1, dims1)))
CASE(repeat, einval_obj(dt_repeat(NULL, 1, shape2)))
CASE(repeat_interleave, einval_obj(dt_repeat_interleave(NULL, 2, 0)))
CASE(repeat_interleave_tensor, einval_obj(dt_repeat_interleave_tensor(NULL, NULL, 0, -1)))
CASE(unary, einval_obj(dt_unary(DT_UNARY_EXP, NULL)))
CASE(unary_ex, einval_obj(dt_unary_ex(DT_UNARY_EXP, NULL, 0)))
CASE(round, einval_obj(dt_round(NULL, 0, 0)))
CASE(cast, einval_obj(dt_cast(NULL, DT_FLOAT32)))
CASE(where, einval_obj(dt_where(NULL, NULL, one, NULL, one)))
CASE(masked_fill, einval_obj(dt_masked_fill(NULL, NULL, NULL, one, 0)))
CASE(clamp, einval_obj(dt_clamp(NULL, NULL, one, NULL, one, DT_CLAMP_MIN)))
CASE(activation, einval_obj(dt_activation(DT_ACT_RELU, NULL, 0)))
CASE(softmax, einval_obj(dt_softmax(NULL, 0, 0, -1)))
CASE(layer_norm, einval_obj(dt_layer_norm(NULL, 1, shape2, NULL, NULL, 1e-5)))
CASE(rms_norm, einval_obj(dt_rms_norm(NULL, 1, shape2, NULL, 1e-5)))
CASE(group_norm, einval_obj(dt_group_norm(NULL, 1, NULL, NULL, 1e-5)))
CASE(batch_norm, einval_obj(dt_batch_norm(NULL, NULL, NULL, NULL, NULL, 0.1, 1e-5)))
CASE(embedding, einval_obj(dt_embedding(NULL, NULL)))
CASE(conv2d, einval_obj(dt_conv2d(NULL, NULL, NULL, NULL, NULL, NULL, 1, 0)))
CASE(interpolate, einval_obj(dt_interpolate(NULL, 0, NULL, NULL, 0)))
CASE(pad, einval_obj(dt_pad(NULL, 0, NULL, 0, 0)))
CASE(dropout, einval_obj(dt_dropout(NULL, 0.5, 1)))
CASE(pixel_shuffle, einval_obj(dt_pixel_shuffle(NULL, 2)))
CASE(sdpa, einval_obj(dt_scaled_dot_product_attention(NULL, NULL, NULL, NULL, 0, 0, 0)))
CASE(sdpa_ring, einval_obj(dt_sdpa_ring(NULL, NULL, NULL, 0, 0, 0)))
CASE(max_pool2d, einval(dt_max_pool2d(NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL)))
CASE(avg_pool2d, einval_obj(dt_avg_pool2d(NULL, NULL, NULL, NULL, 0, 0, NULL)))
CASE(adaptive_avg_pool2d, einval_obj(dt_adaptive_avg_pool2d(NULL, NULL)))
CASE(adaptive_max_pool2d, einval(dt_adaptive_max_pool2d(NULL, NULL, NULL, NULL)))
CASE(cumsum, einval_obj(dt_cumsum(NULL, 0, -1)))
CASE(sort, einval(dt_sort(NULL, 0, 0, 0, NULL, NULL)))
CASE(topk, einval(dt_topk(NULL, 1, 0, 1, 1, NULL, NULL)))
CASE(nonzero, einval_obj(dt_nonzero(NULL)))
CASE(nonzero_read, einval_obj(dt_nonzero_read(NULL, NULL)))
#undef CASE

/* ------------------------------------------------------ released handles */

/* A released handle is DT_EINVAL too, its getters neutral and its
 * retain/release no-ops. Each case makes its own live handles (the child
 * starts with no graph), releases one and uses it. */
static int says_released(void) { return strstr(dt_last_error(), "released handle") != NULL; }
static int dead_einval_obj(const void *p) { return einval_obj(p) && says_released(); }
static int dead_einval(dt_status st) { return einval(st) && says_released(); }

static dt_graph *live_graph(void) {
    dt_graph *g = NULL;
    return dt_graph_create(NULL, &g) == DT_OK ? g : NULL;
}
static dt_mesh *live_mesh(void) {
    dt_mesh *m = NULL;
    return dt_mesh_create(DT_DEVICE_CPU, 1, (const int64_t[]){1}, (const int64_t[]){0}, NULL, &m) == DT_OK
               ? m
               : NULL;
}
static dt_tensor *live_tensor(dt_graph *g, dt_mesh *m) {
    return dt_full(g, DT_FLOAT32, 1, shape2, one, m, NULL);
}

static int dead_mesh(void) {
    /* m2 is made first: a mesh made after m's release could reuse its record. */
    dt_mesh *m2 = live_mesh();
    dt_mesh *m = live_mesh();
    dt_graph *g = live_graph();
    if (!m || !m2 || !g)
        return 0;
    dt_mesh_release(m);
    dt_mesh_retain(m);
    dt_mesh_release(m); /* a double release: nothing happens */
    int ok = dt_mesh_ndim(m) == 0 && dt_mesh_size(m, -1) == 0 && dt_mesh_shape(m) == NULL &&
             dt_mesh_ids(m) == NULL && dt_mesh_dim_name(m, 0) == NULL && dt_mesh_equal(m, m) == 0 &&
             dt_mesh_device_type(m) == DT_DEVICE_CPU && dt_graph_satisfy(g, m) == 0;
    ok = ok && dead_einval_obj(dt_full(g, DT_FLOAT32, 1, shape2, one, m, NULL));
    dt_tensor *t = live_tensor(g, m2);
    ok = ok && t && dead_einval_obj(dt_redistribute(t, m, NULL));
    dt_tensor_release(t);
    dt_mesh_release(m2);
    ok = ok && dt_graph_sync(g) == DT_OK;
    dt_graph_release(g);
    return ok;
}

static int dead_graph(void) {
    dt_graph *g = live_graph();
    dt_mesh *m = live_mesh();
    if (!g || !m)
        return 0;
    dt_graph_release(g);
    dt_graph_retain(g);
    dt_graph_release(g); /* a double release */
    dt_graph_stats stats;
    int ok = dead_einval(dt_graph_shutdown(g)) && dead_einval(dt_graph_sync(g)) &&
             dead_einval(dt_graph_cancel(g, 0)) && dead_einval(dt_graph_wait_capacity(g, 0)) &&
             dead_einval(dt_graph_get_stats(g, &stats, 0)) && dead_einval(dt_debug_hold_controller(g, 1)) &&
             dead_einval(dt_graph_set_chains(g, 0)) && dead_einval_obj(dt_graph_sync_future(g)) &&
             dt_graph_backend(g) == NULL && dt_graph_satisfy(g, m) == 0 && dt_debug_chain_blocks(g) == -1 &&
             dead_einval_obj(dt_full(g, DT_FLOAT32, 1, shape2, one, m, NULL));
    dt_graph_set_deferred_backpressure(g, 1);
    dt_mesh_release(m);
    return ok;
}

/* A released tensor with a live one of the same graph beside it. */
typedef struct {
    dt_graph *g;
    dt_mesh *m;
    dt_tensor *live, *dead;
} dead_fixture;

static int dead_tensor_setup(dead_fixture *fx) {
    fx->g = live_graph();
    fx->m = live_mesh();
    fx->live = fx->g && fx->m ? live_tensor(fx->g, fx->m) : NULL;
    fx->dead = fx->live ? live_tensor(fx->g, fx->m) : NULL;
    if (!fx->dead)
        return 0;
    dt_tensor_release(fx->dead);
    return 1;
}

static int dead_tensor_teardown(dead_fixture *fx, int ok) {
    dt_tensor_release(fx->live);
    ok = ok && dt_graph_sync(fx->g) == DT_OK;
    dt_mesh_release(fx->m);
    dt_graph_release(fx->g);
    return ok;
}

static int dead_tensor_handle(void) {
    dead_fixture fx;
    if (!dead_tensor_setup(&fx))
        return 0;
    dt_tensor_retain(fx.dead);
    dt_tensor_release(fx.dead); /* a double release */
    float buf[2];
    int ok = dt_tensor_ndim(fx.dead) == 0 && dt_tensor_shape(fx.dead) == NULL &&
             dt_tensor_numel(fx.dead) == 0 && dt_tensor_mesh(fx.dead) == NULL &&
             dt_tensor_placements(fx.dead) == NULL && dt_tensor_graph(fx.dead) == NULL &&
             dt_tensor_id(fx.dead) == 0 && dt_tensor_dtype(fx.dead) == DT_FLOAT32 &&
             dt_debug_segments(fx.dead, NULL, NULL, NULL) == -1 &&
             dt_debug_segment_mesh_dims(fx.dead, NULL) == -1 && dead_einval_obj(dt_tensor_fetch(fx.dead)) &&
             dead_einval_obj(dt_tensor_fetch_local(fx.dead, 0)) &&
             dead_einval(dt_tensor_read(fx.dead, buf, sizeof buf));
    const char *file = "x";
    int line = 1;
    dt_tensor_site(fx.dead, &file, &line);
    ok = ok && file == NULL && line == 0;
    /* Recovery's entries refuse it too; a local value has no lineage. */
    ok = ok && dt_tensor_lineage(fx.dead, NULL) == -1 && dt_tensor_lineage_op(fx.dead) == NULL &&
         dead_einval_obj(dt_tensor_recompute(fx.dead, NULL, 0, dt_tensor_mesh(fx.live))) &&
         dead_einval(dt_tensor_mark_lost(fx.dead, "why")) && dt_tensor_lineage(fx.live, NULL) == -1;
    /* The live tensor is the one value on its devices; the dead one is not listed. */
    dt_tensor *found[2] = {NULL, NULL};
    ok = ok && dt_tensors_on_devices(DT_DEVICE_CPU, 0, 64, found, 2) == 1 && found[0] == fx.live &&
         dt_tensors_on_devices(DT_DEVICE_CPU, 64, 8, NULL, 0) == 0 &&
         dt_tensors_on_devices(DT_DEVICE_CUDA, 0, 64, NULL, 0) == 0;
    dt_tensor_release(found[0]);
    /* The live tensor still reads its value. */
    ok = ok && dt_tensor_read(fx.live, buf, sizeof buf) == DT_OK && buf[0] == 1.0f && buf[1] == 1.0f;
    return dead_tensor_teardown(&fx, ok);
}

/* One entry of every op family, the dead tensor first and second. */
static int dead_tensor_ops(void) {
    dead_fixture fx;
    if (!dead_tensor_setup(&fx))
        return 0;
    dt_tensor *a = fx.dead, *l = fx.live;
    dt_tensor *pair[2] = {l, a};
    dt_tensor *v = NULL, *ix = NULL;
    const int64_t sh[1] = {2};
    int ok =
        dead_einval_obj(dt_neg(a)) && dead_einval_obj(dt_unary(DT_UNARY_EXP, a)) &&
        dead_einval_obj(dt_binary(DT_BINARY_ADD, l, a)) && dead_einval_obj(dt_binary(DT_BINARY_ADD, a, l)) &&
        dead_einval_obj(dt_binary_scalar(DT_BINARY_ADD, a, one, 0)) && dead_einval_obj(dt_matmul(l, a)) &&
        dead_einval_obj(dt_sum(a, 1, dims1, 0)) && dead_einval_obj(dt_reshape(a, 1, sh)) &&
        dead_einval_obj(dt_clone(a)) && dead_einval_obj(dt_contiguous(a)) &&
        dead_einval_obj(dt_cat(2, pair, 0)) && dead_einval_obj(dt_redistribute(a, NULL, NULL)) &&
        dead_einval_obj(dt_cumsum(a, 0, -1)) && dead_einval(dt_sort(a, 0, 0, 0, &v, &ix)) &&
        dead_einval_obj(dt_nonzero(a)) && dead_einval_obj(dt_layer_norm(a, 1, sh, NULL, NULL, 1e-5)) &&
        dead_einval_obj(dt_layer_norm(l, 1, sh, a, NULL, 1e-5)) &&
        dead_einval_obj(dt_where(a, l, one, l, one)) && dead_einval_obj(dt_flip(a, 1, dims1));
    return dead_tensor_teardown(&fx, ok);
}

static int dead_future(void) {
    dead_fixture fx;
    if (!dead_tensor_setup(&fx))
        return 0;
    dt_future *f = dt_tensor_fetch(fx.live);
    int ok = f && dt_future_wait(f, -1) == DT_OK;
    /* The fetch kernel drops its own reference just after the arrival that
     * ends the wait: the sync lets it, so the second release below is the
     * client's extra one (refused), not the kernel's reference. */
    ok = ok && dt_graph_sync(fx.g) == DT_OK;
    dt_future_release(f);
    dt_future_release(f); /* a double release */
    float buf[2];
    int64_t shape[DT_MAX_NDIM];
    void *dl = NULL;
    ok = ok && dead_einval(dt_future_wait(f, 0)) && dead_einval(dt_future_read(f, buf, sizeof buf)) &&
         dead_einval(dt_future_status(f)) && dt_future_is_ready(f) == 0 && dt_future_shape(f, shape) < 0 &&
         dead_einval(dt_future_on_ready(f, NULL, NULL)) && dead_einval(dt_future_to_dlpack(f, &dl)) &&
         dead_einval_obj(dt_nonzero_read(fx.live, f));
    return dead_tensor_teardown(&fx, ok);
}

static int dead_gate(void) {
    dead_fixture fx;
    if (!dead_tensor_setup(&fx))
        return 0;
    dt_debug_gate *gate = NULL;
    int ok = dt_debug_gate_create(&gate) == DT_OK;
    dt_debug_gate_release(gate);
    dt_debug_gate_release(gate); /* a double release */
    dt_debug_gate_open(gate);
    ok = ok && dt_debug_gate_is_open(gate) == 0 && dead_einval_obj(dt_debug_gated(fx.live, gate)) &&
         dead_einval_obj(dt_debug_gated(fx.dead, NULL));
    return dead_tensor_teardown(&fx, ok);
}

static const struct {
    const char *name;
    case_fn fn;
} cases[] = {
#define C(name)                                                                                              \
    { "dt_" #name "(NULL ...)", case_##name }
    C(mesh_retain),
    C(mesh_release),
    C(mesh_ndim),
    C(mesh_size),
    C(mesh_shape),
    C(mesh_ids),
    C(mesh_dim_name),
    C(mesh_equal),
    C(mesh_device_type),
    C(tensor_dtype),
    C(mesh_create_out),
    C(graph_create_out),
    C(graph_retain),
    C(graph_release),
    C(graph_shutdown),
    C(graph_sync),
    C(graph_backend),
    C(graph_satisfy),
    C(graph_sync_future),
    C(graph_get_stats),
    C(graph_set_chains),
    C(graph_cancel),
    C(graph_wait_capacity),
    C(graph_set_deferred_backpressure),
    C(debug_hold_controller),
    C(tensor_retain),
    C(tensor_release),
    C(tensor_ndim),
    C(tensor_shape),
    C(tensor_numel),
    C(tensor_mesh),
    C(tensor_placements),
    C(tensor_graph),
    C(tensor_id),
    C(tensor_site),
    C(tensor_lineage),
    C(tensor_lineage_op),
    C(tensor_recompute),
    C(tensor_mark_lost),
    C(tensor_read),
    C(tensor_fetch),
    C(tensor_fetch_local),
    C(future_shape),
    C(future_wait),
    C(future_is_ready),
    C(future_on_ready),
    C(future_read),
    C(future_to_dlpack),
    C(future_status),
    C(future_release),
    C(dlpack_delete),
    C(memory_stats_out),
    C(op_doc_get),
    C(gate_create),
    C(gate_open),
    C(gate_is_open),
    C(gate_release),
    C(gated),
    C(debug_segments),
    C(debug_chain_blocks),
    C(debug_segment_mesh_dims),
    C(from_buffer),
    C(from_dlpack),
    C(from_local),
    C(full),
    C(empty),
    C(rand),
    C(randn),
    C(arange),
    C(randint),
    C(binary),
    C(binary_scalar),
    C(binary_ex),
    C(neg),
    C(matmul),
    C(sum),
    C(redistribute),
    C(reduce),
    C(reduce_with_indices),
    C(mm),
    C(bmm),
    C(outer),
    C(linear),
    C(linear_param),
    C(einsum_null_list),
    C(einsum_null_eq),
    C(reshape),
    C(squeeze),
    C(unsqueeze),
    C(permute),
    C(expand),
    C(clone),
    C(contiguous),
    C(index),
    C(index_tensor),
    C(setitem),
    C(setitem_mask),
    C(setitem_index),
    C(copy),
    C(masked_scatter),
    C(cat_null_list),
    C(stack_null_list),
    C(tril),
    C(user_op),
    C(flip),
    C(roll),
    C(repeat),
    C(repeat_interleave),
    C(repeat_interleave_tensor),
    C(unary),
    C(unary_ex),
    C(round),
    C(cast),
    C(where),
    C(masked_fill),
    C(clamp),
    C(activation),
    C(softmax),
    C(layer_norm),
    C(rms_norm),
    C(group_norm),
    C(batch_norm),
    C(embedding),
    C(conv2d),
    C(interpolate),
    C(pad),
    C(dropout),
    C(pixel_shuffle),
    C(sdpa),
    C(sdpa_ring),
    C(max_pool2d),
    C(avg_pool2d),
    C(adaptive_avg_pool2d),
    C(adaptive_max_pool2d),
    C(cumsum),
    C(sort),
    C(topk),
    C(nonzero),
    C(nonzero_read),
#undef C
    {"a released mesh", dead_mesh},
    {"a released graph", dead_graph},
    {"a released tensor's getters, fetch and read", dead_tensor_handle},
    {"ops with a released tensor", dead_tensor_ops},
    {"a released future", dead_future},
    {"a released gate", dead_gate},
};

int main(void) {
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++)
        run_case(cases[i].name, cases[i].fn);
    if (failures) {
        fprintf(stderr, "test_handles: %d of %d case(s) failed\n", failures, n);
        return 1;
    }
    printf("test_handles: all %d passed\n", n);
    return 0;
}
