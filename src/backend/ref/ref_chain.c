/*
 * The reference backend's run_chain (backend.h, DT_K_CHAIN): the steps run
 * block by block through ref_run on views of the inputs' blocks, each
 * block's result copied into the output. The blocks are small
 * (REF_CHAIN_BLOCK elements) so that the core's C tests, which use this
 * backend under ASan and TSan, cross many block boundaries.
 *
 * Threads: a worker thread; no state is kept.
 */
#include "backend/ref/ref_int.h"

#define REF_CHAIN_BLOCK 1024

/* A view of elements [off, off + len) of x as a 1-d tensor (no buffer of its
 * own: never freed, never written in place). */
static ref_tensor block_view(const ref_tensor *x, int64_t off, int64_t len) {
    ref_tensor v = *x;
    v.ndim = 1;
    v.shape[0] = len;
    v.numel = len;
    v.data = (unsigned char *)x->data + (size_t)off * esize(x->dtype);
    v.buf = NULL;
    return v;
}

dt_status ref_run_chain(const dt__chain_step *steps, int nsteps, void *const *in, int n_in, int inplace,
                        void **out, int *failed_step, int64_t *blocks, char *err, size_t errlen) {
    *out = NULL;
    *failed_step = -1;
    *blocks = 0;
    if (nsteps < 1 || n_in < 1 || n_in > DT__CHAIN_MAX_IN)
        return fail(err, errlen, DT_EINVAL, "ref: chain: %d steps, %d inputs", nsteps, n_in);
    const ref_tensor *x0 = in[0];
    for (int j = 0; j < n_in; j++) {
        const ref_tensor *x = in[j];
        if (!x || x->numel != x0->numel || !esize(x->dtype))
            return fail(err, errlen, DT_EINVAL, "ref: chain: input %d is missing or of another size", j);
    }
    int odt = steps[nsteps - 1].attr.dtype;
    size_t oes = esize(odt);
    if (!oes)
        return fail(err, errlen, DT_EUNSUPPORTED, "ref: chain: dtype %s", dtname(odt));
    dt__kattr give = {.flags = inplace ? DT_KF_INPLACE : 0};
    ref_tensor *o = donated(&give, x0, odt, x0->ndim, x0->shape);
    if (!o) {
        dt_status st = mk("chain", odt, x0->ndim, x0->shape, &o, err, errlen);
        if (st != DT_OK)
            return st;
    }
    for (int64_t off = 0; off < x0->numel; off += REF_CHAIN_BLOCK) {
        int64_t len = x0->numel - off < REF_CHAIN_BLOCK ? x0->numel - off : REF_CHAIN_BLOCK;
        ref_tensor views[DT__CHAIN_MAX_IN];
        for (int j = 0; j < n_in; j++)
            views[j] = block_view(in[j], off, len);
        ref_tensor *cur = NULL;
        for (int i = 0; i < nsteps; i++) {
            const dt__chain_step *st = &steps[i];
            void *args[DT__CHAIN_MAX_IN];
            for (int j = 0; j < st->n_in; j++)
                args[j] = st->src[j] < 0 ? (void *)cur : (void *)&views[st->src[j]];
            dt__kattr a = st->attr;
            if (i > 0 && st->src[0] < 0)
                a.flags |= DT_KF_INPLACE; /* cur is this block's own */
            void *r = NULL;
            dt_status s = ref_run(st->kop, &a, args, st->n_in, &r, err, errlen);
            ref_free(cur);
            cur = r;
            if (s != DT_OK) {
                ref_free(cur);
                ref_free(o);
                *failed_step = i;
                return s;
            }
        }
        memcpy((unsigned char *)o->data + (size_t)off * oes, cur->data, (size_t)len * oes);
        ref_free(cur);
        ++*blocks;
    }
    *out = o;
    return DT_OK;
}
