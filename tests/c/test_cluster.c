/*
 * The cluster in one process (dtorch_cluster.h): a main node and worker
 * nodes run as threads (dt_node_run), each with its own ZeroMQ context,
 * over loopback, so the sanitizer builds see the cluster thread, the
 * registration, heartbeats and the stop. Process-level behaviour (a node
 * killed, the main node gone) is tests/python/test_cluster.py's.
 */
#include <pthread.h>
#include <stdlib.h>

#include "dtorch/dtorch_cluster.h"
#include "test_node.h"
#include "test_util.h"
#ifdef DT_TEST_HAVE_ZMQ
#include <zmq.h>

#include "net/transport.h"
#endif

#ifdef DT_TEST_HAVE_ZMQ
/* A main node that takes a registration and ends before it welcomes the
 * node (a main process killed at that moment): the node must see it go
 * and exit 0 rather than wait out its connect timeout. */
static void test_main_gone_while_registering(void) {
    void *ctx = zmq_ctx_new(), *router = zmq_socket(ctx, ZMQ_ROUTER);
    CHECK_EQ(dt__net_curve(router, "c-test-token", 1), 0);
    CHECK_EQ(zmq_bind(router, "tcp://127.0.0.1:*"), 0);
    char ep[200];
    size_t len = sizeof ep;
    CHECK_EQ(zmq_getsockopt(router, ZMQ_LAST_ENDPOINT, ep, &len), 0);
    node_thread n;
    start_node(&n, ep + 6, "c-test-token", 1, 60000);
    zmq_pollitem_t it = {router, 0, ZMQ_POLLIN, 0};
    CHECK_EQ(zmq_poll(&it, 1, 30000), 1);
    dt__net_in *in = malloc(sizeof *in);
    CHECK_EQ(dt__net_recv(router, 1, in), 1);
    CHECK_EQ(in->m.type, DT__WIRE_REGISTER);
    free(in);
    int64_t t0 = dt__net_now_ms();
    zmq_close(router); /* no welcome */
    zmq_ctx_term(ctx);
    pthread_join(n.t, NULL);
    CHECK_EQ(n.rc, 0);
    CHECK(dt__net_now_ms() - t0 < 20000);
}
#endif

int main(void) {
    if (!dt_cluster_available()) {
        printf("test_cluster: built without ZeroMQ: skipped\n");
        return 0;
    }
    dt_cluster_options o = {.cpu_devices = 2, .token = "c-test-token", .heartbeat_ms = 100};
    CHECK_EQ(dt_cluster_listen("127.0.0.1:0", &o), DT_OK);
    CHECK_EQ(dt_cluster_listen("127.0.0.1:0", &o), DT_EINVAL); /* one cluster per process */
    char addr[200];
    CHECK_EQ(dt_cluster_address(addr, sizeof addr), DT_OK);
    CHECK(strncmp(addr, "127.0.0.1:", 10) == 0 && atoi(addr + 10) > 0);
    CHECK_EQ(dt_cluster_wait(1, 50), DT_ETIMEDOUT);
    CHECK(strstr(dt_last_error(), "0 of 1 worker nodes") != NULL);

    node_thread a, bad;
    start_node(&a, addr, "c-test-token", 3, 30000);
    start_node(&bad, addr, "a-wrong-token", 1, 30000);
    CHECK_EQ(dt_cluster_wait(1, 30000), DT_OK);
    pthread_join(bad.t, NULL);
    CHECK_EQ(bad.rc, 1);
    node_thread b;
    start_node(&b, addr, "c-test-token", 4, 30000);
    CHECK_EQ(dt_cluster_wait(2, 30000), DT_OK);
    CHECK_EQ(dt_cluster_num_nodes(), 2);
    CHECK_EQ(dt_cluster_num_alive(), 2);
    CHECK_EQ(dt_cluster_cpu_devices(), 2 + 3 + 4);
    dt_node_info n0, n1;
    CHECK_EQ(dt_cluster_node(0, &n0), DT_OK);
    CHECK_EQ(dt_cluster_node(1, &n1), DT_OK);
    CHECK_EQ(dt_cluster_node(2, &n1), DT_EINDEX);
    CHECK_EQ(dt_cluster_node(1, &n1), DT_OK);
    CHECK_EQ(n0.cpu_devices, 3); /* a registered before b was started */
    CHECK_EQ(n0.first_device_id, 2);
    CHECK_EQ(n1.cpu_devices, 4);
    CHECK_EQ(n1.first_device_id, 5);
    CHECK_STREQ(n0.address, "127.0.0.1");
    CHECK_EQ(n0.state, DT_NODE_ALIVE);
    /* Several heartbeat intervals: both stay alive. */
    struct timespec ts = {0, 400 * 1000000L};
    nanosleep(&ts, NULL);
    CHECK_EQ(dt_cluster_num_alive(), 2);
    dt_cluster_shutdown();
    pthread_join(a.t, NULL);
    pthread_join(b.t, NULL);
    CHECK_EQ(a.rc, 0);
    CHECK_EQ(b.rc, 0);
    CHECK_EQ(dt_cluster_address(addr, sizeof addr), DT_EINVAL);
    CHECK_EQ(dt_cluster_num_nodes(), 0);
    dt_cluster_shutdown(); /* a no-op now */

    /* A node that finds nobody listening gives up after its timeout with 1;
     * bad options are 2; the main node refuses a bad address or token. */
    CHECK_EQ(dt_cluster_listen(NULL, &o), DT_OK);
    CHECK_EQ(dt_cluster_address(addr, sizeof addr), DT_OK);
    dt_cluster_shutdown();
    node_thread none;
    start_node(&none, addr, "c-test-token", 1, 300);
    pthread_join(none.t, NULL);
    CHECK_EQ(none.rc, 1);
    dt_node_options bad_opts = {.main_address = "no-port", .token = "t", .quiet = 1};
    CHECK_EQ(dt_node_run(&bad_opts), 2);
    CHECK_EQ(dt_cluster_listen("nonsense", &o), DT_EINVAL);
    o.token = "";
    CHECK_EQ(dt_cluster_listen(NULL, &o), DT_EINVAL);
#ifdef DT_TEST_HAVE_ZMQ
    test_main_gone_while_registering();
#endif
    if (failures)
        fprintf(stderr, "test_cluster: %d failures\n", failures);
    return failures != 0;
}
