/*
 * The recording layer (core/records/trace.c) on the 'ref' backend: the bounded
 * buffer (fill, overflow counted, read back, reset), one writer thread
 * appending while a reader reads (the sanitizer builds check the
 * publication), and on a graph: explain records for an all-gather and a
 * reduce-scatter with their mesh dim, name and bytes, nothing recorded while
 * off, trace records whose kernels name recorded nodes, with ordered times.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/records/trace.h"
#include "dtorch/dtorch_record.h"
#include "test_util.h"

typedef struct item {
    uint64_t v, twice;
} item;

static void test_buffer(void) {
    dt__recbuf b;
    dt__recbuf_init(&b, sizeof(item), 1000);
    for (uint64_t i = 0; i < 1010; i++) {
        item *it = dt__recbuf_slot(&b);
        if (i < 1000)
            CHECK(it != NULL);
        else
            CHECK(it == NULL);
        if (!it)
            continue;
        CHECK_EQ(it->v, 0); /* slots come zeroed */
        it->v = i;
        it->twice = 2 * i;
        dt__recbuf_commit(&b);
    }
    CHECK_EQ(dt__recbuf_count(&b), 1000);
    CHECK_EQ(atomic_load(&b.dropped), 10);
    int bad = 0;
    for (size_t i = 0; i < dt__recbuf_count(&b); i++) {
        const item *it = dt__recbuf_at(&b, i);
        bad += it->v != i || it->twice != 2 * i;
    }
    CHECK_EQ(bad, 0);
    dt__recbuf_reset(&b);
    CHECK_EQ(dt__recbuf_count(&b), 0);
    CHECK_EQ(atomic_load(&b.dropped), 0);
    item *it = dt__recbuf_slot(&b);
    CHECK(it != NULL);
    dt__recbuf_commit(&b);
    CHECK_EQ(dt__recbuf_count(&b), 1);
    dt__recbuf_free(&b);
}

static void *writer(void *arg) {
    dt__recbuf *b = arg;
    for (uint64_t i = 0; i < 200000; i++) {
        item *it = dt__recbuf_slot(b);
        if (!it)
            continue;
        it->v = i;
        it->twice = 2 * i;
        dt__recbuf_commit(b);
    }
    return NULL;
}

/* A reader sees only whole records while the writer appends. */
static void test_concurrent(void) {
    dt__recbuf b;
    dt__recbuf_init(&b, sizeof(item), 150000);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, writer, &b) == 0);
    size_t seen = 0;
    int bad = 0;
    while (seen < 150000) {
        size_t n = dt__recbuf_count(&b);
        for (; seen < n; seen++) {
            const item *it = dt__recbuf_at(&b, seen);
            bad += it->v != seen || it->twice != 2 * seen;
        }
    }
    pthread_join(t, NULL);
    CHECK_EQ(bad, 0);
    CHECK_EQ(atomic_load(&b.dropped), 50000);
    dt__recbuf_free(&b);
}

static void test_explain(dt_graph *g) {
    const int64_t mshape[2] = {2, 2}, ids[4] = {0, 1, 2, 3}, shape[2] = {6, 4};
    const char *names[2] = {"dp", "tp"};
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 2, mshape, ids, names, &mesh) == DT_OK);
    float x[24];
    for (int i = 0; i < 24; i++)
        x[i] = (float)i;
    dt_placement s0r[2] = {S(0), R()}, rr[2] = {R(), R()}, rp[2] = {R(), P()}, rs1[2] = {R(), S(1)};
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, mesh, s0r);
    CHECK(a);

    /* Off: nothing. */
    dt_tensor *off = dt_redistribute(a, NULL, rr);
    dt_explain_record *recs = NULL;
    size_t n = 99;
    int64_t dropped = -1;
    CHECK(dt_graph_take_explain(g, &recs, &n, &dropped) == DT_OK);
    CHECK_EQ(n, 0);
    CHECK(recs == NULL);
    CHECK_EQ(dropped, 0);

    CHECK(dt_record_enable(DT_RECORD_EXPLAIN, 1) == DT_OK);
    CHECK(dt_record_enabled(DT_RECORD_EXPLAIN));
    dt_set_call_site("test_record.c", 123);
    dt_tensor *gathered = dt_redistribute(a, NULL, rr); /* S(0) -> R on "dp": all-gather of 3x4 floats */
    dt_tensor *p = dt_tensor_from_buffer(g, DT_FLOAT32, 2, shape, x, sizeof x, mesh, rp);
    dt_set_call_site("test_record.c", 124);
    dt_tensor *scattered = dt_redistribute(p, NULL, rs1); /* P -> S(1) on "tp": reduce-scatter of 6x4 */
    dt_set_call_site(NULL, 0);
    CHECK(dt_graph_take_explain(g, &recs, &n, &dropped) == DT_OK);
    CHECK(dt_record_enable(DT_RECORD_EXPLAIN, 0) == DT_OK);
    CHECK(!dt_record_enabled(DT_RECORD_EXPLAIN));
    CHECK_EQ(n, 2);
    if (n == 2) {
        CHECK_STREQ(recs[0].file, "test_record.c");
        CHECK_EQ(recs[0].line, 123);
        CHECK_STREQ(dt_comm_kind_name(recs[0].kind), "all_gather");
        CHECK_EQ(recs[0].mesh_dim, 0);
        CHECK_STREQ(recs[0].mesh_dim_name, "dp");
        CHECK_STREQ(recs[0].op, "redistribute");
        CHECK_EQ(recs[0].bytes, 3 * 4 * 4);
        CHECK_EQ(recs[1].line, 124);
        CHECK_STREQ(dt_comm_kind_name(recs[1].kind), "reduce_scatter");
        CHECK_EQ(recs[1].mesh_dim, 1);
        CHECK_STREQ(recs[1].mesh_dim_name, "tp");
        CHECK_EQ(recs[1].bytes, 6 * 4 * 4);
    }
    dt_record_free(recs);
    float got[24];
    CHECK(dt_tensor_read(gathered, got, sizeof got) == DT_OK);
    CHECK(memcmp(got, x, sizeof x) == 0);
    /* Off again: the next take finds nothing. */
    dt_tensor *later = dt_redistribute(a, NULL, rr);
    CHECK(dt_graph_take_explain(g, &recs, &n, NULL) == DT_OK);
    CHECK_EQ(n, 0);
    CHECK(dt_record_enable((dt_record_kind)7, 1) == DT_EINVAL);
    CHECK(dt_comm_kind_name(DT_COMM_KINDS) == NULL);
    dt_tensor_release(later);
    dt_tensor_release(scattered);
    dt_tensor_release(p);
    dt_tensor_release(gathered);
    dt_tensor_release(off);
    dt_tensor_release(a);
    dt_mesh_release(mesh);
}

static void test_trace(dt_graph *g) {
    const int64_t ids[2] = {0, 1}, shape[1] = {8}, mshape[1] = {2};
    dt_mesh *mesh = NULL;
    CHECK(dt_mesh_create(DT_DEVICE_CPU, 1, mshape, ids, NULL, &mesh) == DT_OK);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    dt_placement s0 = S(0), r = R();
    dt_tensor *a = dt_tensor_from_buffer(g, DT_FLOAT32, 1, shape, x, sizeof x, mesh, &s0);
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK(dt_record_enable(DT_RECORD_TRACE, 1) == DT_OK);
    dt_set_call_site("trace.c", 7);
    dt_tensor *b = dt_redistribute(a, NULL, &r);
    dt_set_call_site(NULL, 0);
    CHECK(dt_graph_sync(g) == DT_OK);
    CHECK(dt_record_enable(DT_RECORD_TRACE, 0) == DT_OK);
    dt_trace_node *nodes = NULL;
    dt_trace_kernel *ks = NULL;
    size_t nn = 0, nk = 0;
    int64_t dropped = -1;
    CHECK(dt_graph_take_trace(g, &nodes, &nn, &ks, &nk, &dropped) == DT_OK);
    CHECK_EQ(dropped, 0);
    CHECK_EQ(nn, 1); /* the redistribute (syncs are not traced) */
    if (nn == 1) {
        CHECK_STREQ(nodes[0].op, "redistribute");
        CHECK_STREQ(nodes[0].file, "trace.c");
        CHECK_EQ(nodes[0].line, 7);
        CHECK_EQ(nodes[0].n_shapes, 2);
        CHECK_EQ(nodes[0].ndim[0], 1);
        CHECK_EQ(nodes[0].shape[0][0], 8);
        CHECK(nodes[0].client_thread >= 1);
        CHECK(nodes[0].client_begin_ns <= nodes[0].client_end_ns);
        CHECK(nodes[0].client_end_ns <= nodes[0].lower_begin_ns);
        CHECK(nodes[0].lower_begin_ns <= nodes[0].lower_end_ns);
    }
    CHECK_EQ(nk, 2); /* one all-gather kernel per device */
    for (size_t i = 0; i < nk && nn == 1; i++) {
        CHECK_EQ(ks[i].node, nodes[0].id);
        CHECK_STREQ(ks[i].kernel, "collective");
        CHECK_EQ(ks[i].line, 7);
        CHECK_EQ(ks[i].bytes, 8 * 4);
        CHECK(ks[i].begin_ns <= ks[i].end_ns);
        CHECK(ks[i].begin_ns >= nodes[0].lower_begin_ns);
    }
    dt_record_free(nodes);
    dt_record_free(ks);
    /* Off: nothing more. */
    dt_tensor *c = dt_redistribute(b, NULL, &s0);
    CHECK(dt_graph_take_trace(g, &nodes, &nn, &ks, &nk, NULL) == DT_OK);
    CHECK_EQ(nn, 0);
    CHECK_EQ(nk, 0);
    CHECK(dt_graph_take_trace(g, NULL, &nn, &ks, &nk, NULL) == DT_EINVAL);
    dt_tensor_release(c);
    dt_tensor_release(b);
    dt_tensor_release(a);
    dt_mesh_release(mesh);
}

int main(void) {
    test_buffer();
    test_concurrent();
    dt_graph_options opt = {0};
    opt.backend = "ref";
    dt_graph *g = NULL;
    CHECK(dt_graph_create(&opt, &g) == DT_OK);
    if (g) {
        test_explain(g);
        test_trace(g);
        dt_graph_release(g);
    }
    if (failures)
        fprintf(stderr, "test_record: %d failure(s)\n", failures);
    else
        printf("test_record: ok\n");
    return failures != 0;
}
