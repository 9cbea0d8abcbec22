/*
 * The composition root: when libdtorch is loaded (or a static program
 * starts), each layer's hooks are registered with the layers below it, so
 * that a lower layer reaches a higher one only through what is registered
 * here, never by name (tools/check_layers.py checks that). Runs once,
 * single-threaded, before any graph exists.
 */
#include <pthread.h>

#include "backend/backend.h"
#include "common/common.h"
#include "core/client/segment.h"
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/node.h"
#include "core/worker/stream.h"
#include "net/net.h"
#include "ops/ops.h"

/* ----------------------------------------------------------------- fork */

/* A forked child has one thread, the one that called fork(). Every global
 * lock of the library is taken before the fork and dropped on both sides
 * after it, so the child never inherits one held by a thread it lacks
 * (order: gates, interned strings, pools; all leaves otherwise). Graphs are
 * not locked: the child never touches a graph of its parent (fork_gen).
 * Registered when the library is loaded, so a fork before the first graph
 * is seen too (the forking thread's OpenMP team, dt__backends_thread_forked).
 * The fork generation (core/records/graph_int.h) marks what the parent made. */
static void fork_prepare(void) {
    dt__debug_fork_lock(1);
    dt__intern_fork_lock(1);
    dt__pool_fork_lock(1);
}

static void fork_parent(void) {
    dt__pool_fork_lock(0);
    dt__intern_fork_lock(0);
    dt__debug_fork_lock(0);
}

static void fork_child(void) {
    fork_parent();
    atomic_fetch_add(&dt__fork_gen, 1);
    dt__stream_forked();
    dt__backends_thread_forked();
}

/* ------------------------------------------------------------ the root */

__attribute__((constructor)) static void dt_init(void) {
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    dt__pool_set_busy_fn(dt__streams_running);
    dt__ops_register(dt__op_rows);
    dt__cluster_port_register(dt__net_port());
    /* The segmented-dim gate's conversion, built out of ops. */
    dt__seg_set_regularise(dt__seg_regularise);
}
