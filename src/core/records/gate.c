/*
 * Test gates (gate.h): a gate is a handle the test opens; a gated value's
 * kernels (dt_debug_gated, core/api/debug.c) sleep on it, on their device's
 * worker, until then. Why gates: the runtime's promises about pending values
 * (a timed wait says "not yet", metadata does not wait, flow control bounds
 * what is queued behind a busy device, Ctrl-C interrupts a read) can only be
 * tested without wall-clock bounds if the test decides when a value becomes
 * ready. Nothing spins, and nothing here is on the path of ordinary ops.
 *
 * Threads: gates are created, opened and released on any thread; a gate
 * kernel waits on a worker (dt__debug_gate_wait). Lock order: gates_lock
 * (the list of live gates) -> a gate's lock; both are leaves with respect to
 * the runtime's other locks (a worker takes a gate's lock holding none of
 * its own).
 */
#include "core/records/gate.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/records/node.h"

struct dt_debug_gate {
    uint32_t magic;  /* DT__GATE_LIVE until the creator's release (core.h, handles) */
    atomic_int refs; /* the creator's, one per node and kernel that uses it */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int open;                          /* guarded by lock */
    struct dt_debug_gate *prev, *next; /* guarded by gates_lock */
};

/* Every gate alive, so dt_graph_shutdown can wake their waiters. */
static pthread_mutex_t gates_lock = PTHREAD_MUTEX_INITIALIZER;
static dt_debug_gate *gates;
/* Type-stable: a released gate's magic stays readable. */
static dt__pool gate_pool = DT__POOL_INIT_STABLE(sizeof(dt_debug_gate), 0);

int dt__debug_gate_ok(const dt_debug_gate *gate) { return gate && gate->magic == DT__GATE_LIVE; }

dt_status dt_debug_gate_create(dt_debug_gate **out) {
    if (!out)
        return dt__error(DT_EINVAL, "debug_gate_create: out is NULL");
    *out = NULL;
    dt_debug_gate *gate = dt__pool_alloc(&gate_pool);
    if (!gate)
        return dt__error(DT_ENOMEM, "debug_gate_create: out of memory");
    gate->magic = DT__GATE_LIVE;
    atomic_init(&gate->refs, 1);
    pthread_mutex_init(&gate->lock, NULL);
    pthread_cond_init(&gate->cond, NULL);
    pthread_mutex_lock(&gates_lock);
    gate->next = gates;
    if (gates)
        gates->prev = gate;
    gates = gate;
    pthread_mutex_unlock(&gates_lock);
    *out = gate;
    return DT_OK;
}

dt_debug_gate *dt__debug_gate_retain(dt_debug_gate *gate) {
    atomic_fetch_add_explicit(&gate->refs, 1, memory_order_relaxed);
    return gate;
}

void dt__debug_gate_unref(void *p) {
    dt_debug_gate *gate = p;
    if (atomic_fetch_sub_explicit(&gate->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_mutex_lock(&gates_lock);
    if (gate->prev)
        gate->prev->next = gate->next;
    else
        gates = gate->next;
    if (gate->next)
        gate->next->prev = gate->prev;
    pthread_mutex_unlock(&gates_lock);
    pthread_cond_destroy(&gate->cond);
    pthread_mutex_destroy(&gate->lock);
    dt__pool_free(&gate_pool, gate);
}

/* The caller holds a reference (the gate is alive). */
static void gate_open(dt_debug_gate *gate) {
    pthread_mutex_lock(&gate->lock);
    gate->open = 1;
    pthread_cond_broadcast(&gate->cond);
    pthread_mutex_unlock(&gate->lock);
}

void dt_debug_gate_open(dt_debug_gate *gate) {
    if (dt__debug_gate_ok(gate))
        gate_open(gate);
}

int dt_debug_gate_is_open(const dt_debug_gate *gate) {
    if (!dt__debug_gate_ok(gate))
        return 0;
    dt_debug_gate *g = (dt_debug_gate *)gate;
    pthread_mutex_lock(&g->lock);
    int open = g->open;
    pthread_mutex_unlock(&g->lock);
    return open;
}

void dt_debug_gate_release(dt_debug_gate *gate) {
    if (!dt__debug_gate_ok(gate))
        return;
    /* The creator's handle is dead now, though nodes and kernels may still
     * hold the record (their references are internal). */
    gate->magic = DT__HANDLE_DEAD;
    /* Nobody could open it after this: kernels still waiting would hold
     * their worker forever. */
    gate_open(gate);
    dt__debug_gate_unref(gate);
}

void dt__debug_fork_lock(int lock) {
    if (lock)
        pthread_mutex_lock(&gates_lock);
    else
        pthread_mutex_unlock(&gates_lock);
}

void dt__debug_gate_drop(dt__krec *k) {
    if (k->handle)
        dt__debug_gate_unref(k->handle);
    k->handle = NULL;
}

void dt__debug_node_drop(dt_graph *g, dt__node *n) {
    (void)g;
    if (n->extra)
        dt__debug_gate_unref(n->extra);
    n->extra = NULL;
}

void dt__debug_gates_bypass(dt_graph *g) {
    /* Set before the broadcasts: a gate kernel checks the flag holding its
     * gate's lock, so it either sees the flag or is asleep when woken. */
    atomic_store(&g->gates_bypassed, 1);
    pthread_mutex_lock(&gates_lock);
    for (dt_debug_gate *gate = gates; gate; gate = gate->next) {
        pthread_mutex_lock(&gate->lock);
        pthread_cond_broadcast(&gate->cond);
        pthread_mutex_unlock(&gate->lock);
    }
    pthread_mutex_unlock(&gates_lock);
}

void dt__debug_gate_wait(dt_debug_gate *gate, const atomic_int *bypassed) {
    pthread_mutex_lock(&gate->lock);
    while (!gate->open && !atomic_load(bypassed))
        pthread_cond_wait(&gate->cond, &gate->lock);
    pthread_mutex_unlock(&gate->lock);
}
