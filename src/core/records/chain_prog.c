/*
 * The program of a DT_K_CHAIN kernel (chain_prog.h): its writer, for the
 * CHAIN node's lowering, and its reader, for the kernel decoder and the
 * worker. Kept in one file so that the format has one owner.
 *
 * Threads: any thread (pure functions over bytes). No locks.
 */
#include <string.h>

#include "core/records/chain_prog.h"
#include "core/records/kernel_rec.h"

#define STR_NONE 0xffff
#define STR_MAX 4095

/* ------------------------------------------------------------ writing */

static size_t str_len(const char *s) {
    if (!s)
        return 0;
    size_t n = strlen(s);
    return n > STR_MAX ? STR_MAX : n;
}

static void put_str(uint8_t **p, const char *s) {
    if (!s) {
        dt__le_put(p, STR_NONE, 2);
        return;
    }
    size_t n = str_len(s);
    dt__le_put(p, n, 2);
    memcpy(*p, s, n);
    *p += n;
}

void dt__chain_put_head(uint8_t **p, int nsteps, int32_t flags) {
    dt__le_put(p, 'C', 1);
    dt__le_put(p, (uint64_t)nsteps, 1);
    dt__le_put(p, (uint32_t)flags, 4);
}

size_t dt__chain_step_bytes(int n_in, const char *opname, const char *site_file, size_t alen) {
    return 2 + 1 + (size_t)n_in + 4 + 2 + str_len(opname) + 2 + str_len(site_file) + 2 + alen;
}

void dt__chain_put_step(uint8_t **p, int kop, int n_in, const int8_t *src, int32_t site_line,
                        const char *opname, const char *site_file, const uint8_t *attr, size_t alen) {
    dt__le_put(p, (uint64_t)kop, 2);
    dt__le_put(p, (uint64_t)n_in, 1);
    for (int j = 0; j < n_in; j++)
        dt__le_put(p, (uint8_t)src[j], 1);
    dt__le_put(p, (uint32_t)site_line, 4);
    put_str(p, opname);
    put_str(p, site_file);
    dt__le_put(p, alen, 2);
    memcpy(*p, attr, alen);
    *p += alen;
}

/* ------------------------------------------------------------ reading */

static const char *get_str(dt__rd *r, int *len) {
    uint64_t n = dt__rd_get(r, 2);
    if (n == STR_NONE || r->bad) {
        *len = -1;
        return NULL;
    }
    if (n > STR_MAX || (uint64_t)(r->end - r->p) < n) {
        r->bad = 1;
        *len = -1;
        return NULL;
    }
    const char *s = (const char *)r->p;
    r->p += n;
    *len = (int)n;
    return s;
}

int dt__chain_parse(const uint8_t *buf, size_t n, dt__chain_prog *p) {
    dt__rd r = {buf, buf + n, 0};
    if (dt__rd_get(&r, 1) != 'C')
        return -1;
    int ns = (int)dt__rd_get(&r, 1);
    int32_t flags = (int32_t)dt__rd_get(&r, 4);
    if (r.bad || ns < 1 || ns > DT__CHAIN_MAX_STEPS)
        return -1;
    if (p) {
        p->n = ns;
        p->flags = flags;
    }
    for (int i = 0; i < ns; i++) {
        int kop = (int)dt__rd_get(&r, 2), nin = (int)dt__rd_get(&r, 1);
        if (r.bad || kop >= DT_K_COUNT || kop == DT_K_CHAIN || nin < 1 || nin > DT__CHAIN_MAX_IN)
            return -1;
        int8_t src[DT__CHAIN_MAX_IN];
        for (int j = 0; j < nin; j++) {
            src[j] = (int8_t)dt__rd_get(&r, 1);
            if (src[j] < -1 || src[j] >= DT__CHAIN_MAX_IN || (src[j] < 0 && i == 0))
                return -1;
        }
        int32_t line = (int32_t)dt__rd_get(&r, 4);
        int nl, fl;
        const char *name = get_str(&r, &nl), *file = get_str(&r, &fl);
        size_t alen = (size_t)dt__rd_get(&r, 2);
        if (r.bad || (size_t)(r.end - r.p) < alen)
            return -1;
        dt__kattr scratch, *a = p ? &p->st[i].attr : &scratch;
        if (dt__kattr_unpack_bytes(r.p, alen, a) != 0)
            return -1;
        r.p += alen;
        if (p) {
            p->st[i].kop = kop;
            p->st[i].n_in = nin;
            memcpy(p->st[i].src, src, sizeof src);
            p->line[i] = line;
            p->name[i] = name;
            p->name_len[i] = nl;
            p->file[i] = file;
            p->file_len[i] = fl;
        }
    }
    return r.p == r.end ? 0 : -1;
}

int dt__chain_check(const uint8_t *buf, size_t n) { return dt__chain_parse(buf, n, NULL); }
