/*
 * A worker's record of each kernel it runs, for traces (core/records/
 * trace.h): begin and end times, bytes written, the op and its call site.
 * Each stream has its own buffer, made at its first traced kernel.
 *
 * Threads: the stream's worker; the recorder's lock (a leaf) only to add
 * the buffer to the recorder's list.
 */
#include "core/records/blob.h"
#include "core/records/graph_int.h"
#include "core/records/kernel_rec.h"
#include "core/records/trace.h"
#include "core/worker/stream_int.h"

void dt__rec_kernel_ran(dt__stream *s, const dt__krec *k, const char *kernel, int64_t t0) {
    dt__rec *r = s->g->rec;
    if (!r)
        return;
    dt__recbuf *b = s->rec;
    if (!b) {
        b = dt__malloc(sizeof *b);
        if (!b)
            return;
        dt__recbuf_init(b, sizeof(dt__rec_kernel), DT__REC_KERNELS_CAP);
        b->key = dt__rec_stream_key(s->type, s->kind, s->device_id);
        pthread_mutex_lock(&r->lock);
        b->next = r->workers;
        r->workers = b;
        pthread_mutex_unlock(&r->lock);
        s->rec = b;
    }
    dt__rec_kernel *e = dt__recbuf_slot(b);
    if (!e)
        return;
    e->seq = s->completed + 1; /* the number dt__kernel_run completes next */
    e->begin_ns = t0;
    e->end_ns = dt__rec_now();
    e->bytes = k->out && k->out->impl && s->be->nbytes ? (int64_t)s->be->nbytes(k->out->impl) : 0;
    e->op = k->opname;
    e->kernel = kernel;
    e->file = k->site_file;
    e->line = k->site_line;
    e->kop = k->kop;
    dt__recbuf_commit(b);
}
