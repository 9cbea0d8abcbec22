/*
 * The client -> controller queue (src/core/client/graph.c: queue_push,
 * dt__graph_take, wake_controller, close_queue), tested through the public
 * API without clocks:
 *  - several client threads push onto one graph at once while its
 *    controller is held: nothing is lowered meanwhile (every pushed record is
 *    in flight), and once released each thread's records run in the order it
 *    pushed them (each thread runs a chain of non-commuting ops whose value
 *    the test computes itself);
 *  - no lost wake-up: 3000 times, a sleeping controller is woken by one push
 *    (an op and a read with a 60 s limit; a lost wake-up would time out);
 *  - pushes racing a shutdown: each push either lands (and is counted in
 *    `submitted`) or fails with DT_ESHUTDOWN, never both, nothing is lost or
 *    leaked, and once one push has failed every later one fails too;
 *  - tensors dropped after the queue closed are freed with the graph.
 * Runs on the 'ref' backend under ASan/UBSan and TSan.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "dtorch/dtorch.h"
#include "test_util.h"

static dt_graph *ref_graph(void) {
    dt_graph_options o = {.backend = "ref"};
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&o, &g) == DT_OK);
    return g;
}

static dt_mesh *mesh1(int64_t id) {
    int64_t shape[1] = {1}, ids[1] = {id};
    dt_mesh *m = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, shape, ids, NULL, &m) == DT_OK);
    return m;
}

static dt_graph_stats stats(dt_graph *g) {
    dt_graph_stats s;
    memset(&s, 0, sizeof s);
    CHECK(dt_graph_get_stats(g, &s, 0) == DT_OK);
    return s;
}

/* One step of a thread's chain: add, negate or subtract, which do not
 * commute, so a reordering changes the result. Returns the new tensor (the
 * old one is released) and applies the same step to *want. */
static dt_tensor *step(dt_tensor *x, int thread, int j, int64_t *want) {
    dt_tensor *y;
    switch (j % 3) {
    case 0:
        y = dt_binary_scalar(DT_BINARY_ADD, x, dt_scalar_int(thread * 10 + j % 7), 0);
        *want += thread * 10 + j % 7;
        break;
    case 1:
        y = dt_neg(x);
        *want = -*want;
        break;
    default:
        y = dt_binary_scalar(DT_BINARY_SUB, x, dt_scalar_int(3), 0);
        *want -= 3;
        break;
    }
    dt_tensor_release(x);
    return y;
}

/* --------------------------------------------------- several producers */

enum { PRODUCERS = 4, CHAIN = 300 };

typedef struct producer_arg {
    dt_graph *g;
    dt_mesh *m;
    int thread;
    dt_tensor *result;
    int64_t want;
    int pushed; /* records pushed (ops) */
} producer_arg;

static void *producer(void *p) {
    producer_arg *a = p;
    int64_t shape[1] = {1};
    a->want = a->thread;
    dt_tensor *x = dt_full(a->g, DT_INT64, 1, shape, dt_scalar_int(a->thread), a->m, NULL);
    a->pushed = x != NULL;
    for (int j = 0; j < CHAIN && x; j++) {
        x = step(x, a->thread, j, &a->want);
        a->pushed += x != NULL;
    }
    a->result = x;
    return NULL;
}

static void test_producers_keep_their_order(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1(0);
    dt_graph_stats s0 = stats(g);
    CHECK(dt_debug_hold_controller(g, 1) == DT_OK);
    pthread_t th[PRODUCERS];
    producer_arg args[PRODUCERS];
    for (int i = 0; i < PRODUCERS; i++) {
        args[i] = (producer_arg){.g = g, .m = m, .thread = i + 1};
        CHECK(pthread_create(&th[i], NULL, producer, &args[i]) == 0);
    }
    int64_t pushed = 0;
    for (int i = 0; i < PRODUCERS; i++) {
        pthread_join(th[i], NULL);
        pushed += args[i].pushed;
        CHECK_EQ(args[i].pushed, CHAIN + 1);
    }
    /* Held: every record pushed is still in flight, none lowered. */
    dt_graph_stats s = stats(g);
    CHECK_EQ(s.submitted - s0.submitted, pushed);
    CHECK(s.in_flight >= pushed);
    CHECK(dt_debug_hold_controller(g, 0) == DT_OK);
    for (int i = 0; i < PRODUCERS; i++) {
        int64_t got = 0;
        CHECK(dt_tensor_read(args[i].result, &got, sizeof got) == DT_OK);
        CHECK_EQ(got, args[i].want);
        dt_tensor_release(args[i].result);
    }
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* ------------------------------------------------------------ wake-up */

static void test_no_lost_wakeup(void) {
    dt_graph *g = ref_graph();
    dt_mesh *m = mesh1(0);
    int64_t shape[1] = {1};
    dt_tensor *x = dt_full(g, DT_INT64, 1, shape, dt_scalar_int(0), m, NULL);
    int64_t want = 0;
    for (int i = 0; i < 3000 && x; i++) {
        x = step(x, 1, i, &want);
        /* The controller went to sleep after the last round (or is about
         * to): this push must wake it. */
        dt_future *f = dt_tensor_fetch(x);
        dt_status st = dt_future_wait(f, 60000);
        if (st != DT_OK) {
            fprintf(stderr, "wake-up %d: the read did not complete (status %d)\n", i, (int)st);
            failures++;
            dt_future_release(f);
            break;
        }
        int64_t got = 0;
        CHECK(dt_future_read(f, &got, sizeof got) == DT_OK);
        dt_future_release(f);
        if (got != want) {
            CHECK_EQ(got, want);
            break;
        }
    }
    dt_tensor_release(x);
    dt_mesh_release(m);
    dt_graph_release(g);
}

/* ------------------------------------------------- pushes racing close */

typedef struct racer_arg {
    dt_graph *g;
    dt_tensor *x;
    atomic_int *started;
    int landed;   /* ops that returned a tensor */
    int refused;  /* ops refused with DT_ESHUTDOWN */
    int misorder; /* a push landed after one was refused */
    int other;    /* any other failure */
} racer_arg;

static void *racer(void *p) {
    racer_arg *a = p;
    atomic_fetch_add(a->started, 1);
    dt_tensor *x = a->x;
    int64_t want = 0;
    for (int j = 0; j < 200000 && a->refused < 50; j++) {
        dt_tensor *y = dt_binary_scalar(DT_BINARY_ADD, x, dt_scalar_int(1), 0);
        if (y) {
            a->landed++;
            a->misorder += a->refused > 0;
            dt_tensor_release(x); /* after the close: onto the closed release stack */
            x = y;
            want++;
        } else if (dt_last_status() == DT_ESHUTDOWN) {
            a->refused++;
        } else {
            a->other++;
            break;
        }
    }
    (void)want;
    a->x = x;
    return NULL;
}

static void test_pushes_racing_shutdown(void) {
    for (int round = 0; round < 3; round++) {
        dt_graph *g = ref_graph();
        dt_mesh *m = mesh1(round);
        int64_t shape[1] = {4};
        atomic_int started;
        atomic_init(&started, 0);
        racer_arg args[3];
        pthread_t th[3];
        dt_graph_stats s0 = stats(g);
        for (int i = 0; i < 3; i++) {
            args[i] = (racer_arg){.g = g, .started = &started};
            args[i].x = dt_full(g, DT_INT64, 1, shape, dt_scalar_int(0), m, NULL);
            CHECK(args[i].x != NULL);
        }
        dt_graph_stats s1 = stats(g);
        for (int i = 0; i < 3; i++)
            CHECK(pthread_create(&th[i], NULL, racer, &args[i]) == 0);
        while (atomic_load(&started) < 3)
            sched_yield(); /* bounded: the threads start at once */
        CHECK(dt_graph_shutdown(g) == DT_OK);
        int64_t landed = 0;
        for (int i = 0; i < 3; i++) {
            pthread_join(th[i], NULL);
            landed += args[i].landed;
            CHECK_EQ(args[i].misorder, 0);
            CHECK_EQ(args[i].other, 0);
            CHECK(args[i].refused > 0);
        }
        /* Exactly the pushes that landed were counted. */
        dt_graph_stats s = stats(g);
        CHECK_EQ(s1.submitted - s0.submitted, 3);
        CHECK_EQ(s.submitted - s1.submitted, landed);
        /* Nothing more gets in; dropping values now is harmless. */
        CHECK(dt_neg(args[0].x) == NULL && dt_last_status() == DT_ESHUTDOWN);
        for (int i = 0; i < 3; i++)
            dt_tensor_release(args[i].x);
        dt_mesh_release(m);
        dt_graph_release(g); /* frees what the closed release stack holds (LeakSanitizer) */
    }
}

int main(void) {
    test_producers_keep_their_order();
    test_no_lost_wakeup();
    test_pushes_racing_shutdown();
    if (failures) {
        fprintf(stderr, "test_queue: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_queue: all passed\n");
    return 0;
}
