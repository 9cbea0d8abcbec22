/*
 * Allocation wrappers, the thread-local error message, status names and the
 * string intern table. The intern table is the only shared state here; it is
 * guarded by its own mutex (a leaf lock: nothing else is taken while held).
 */
#include "common/common.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The embedder's last word before abort (dt_set_abort_callback). Set once,
 * read by any thread that aborts. */
static void (*_Atomic abort_cb)(const char *msg, void *ud);
static void *_Atomic abort_ud;

void dt_set_abort_callback(void (*cb)(const char *msg, void *ud), void *ud) {
    atomic_store(&abort_ud, ud);
    atomic_store(&abort_cb, cb);
}

static _Noreturn void die(const char *msg) {
    void (*cb)(const char *, void *) = atomic_load(&abort_cb);
    if (cb)
        cb(msg, atomic_load(&abort_ud));
    else
        fprintf(stderr, "%s\n", msg);
    abort();
}

void dt__assert_fail(const char *cond, const char *file, int line) {
    char msg[512];
    snprintf(msg, sizeof msg, "dtorch: internal invariant failed: %s (%s:%d)", cond, file, line);
    die(msg);
}

void dt__fatal(const char *what, const char *detail) {
    char msg[1200];
    snprintf(msg, sizeof msg, "dtorch: %s: %s", what, detail ? detail : "");
    die(msg);
}

/* ---------------------------------------------------- allocation faults */

/* Successes left before the armed failure; -1 when disarmed. One failure
 * per arming: the failing allocation disarms it. */
atomic_long dt__fault_left = -1;
static _Thread_local int fault_on;

int dt__fault_scope(int on) {
    int was = fault_on;
    fault_on = on;
    return was;
}

int dt__fault_hit(void) {
    /* The shared counter first: disarmed, no thread-local lookup. */
    if (!dt__fault_armed() || !fault_on)
        return 0;
    long v = atomic_load(&dt__fault_left);
    while (v >= 0)
        if (atomic_compare_exchange_weak(&dt__fault_left, &v, v - 1))
            return v == 0;
    return 0;
}

void dt_debug_fail_allocs(int64_t after_n) {
    atomic_store(&dt__fault_left, after_n < 0 ? -1 : (long)after_n);
}
int dt_debug_fail_allocs_pending(void) { return atomic_load(&dt__fault_left) >= 0; }

void *dt__malloc(size_t n) { return dt__fault_hit() ? NULL : malloc(n ? n : 1); }
void *dt__calloc(size_t n, size_t size) {
    return dt__fault_hit() ? NULL : calloc(n ? n : 1, size ? size : 1);
}
void *dt__realloc(void *p, size_t n) { return dt__fault_hit() ? NULL : realloc(p, n ? n : 1); }
void dt__free(void *p) { free(p); }
char *dt__strdup(const char *s) {
    if (!s)
        return NULL;
    size_t n = strlen(s) + 1;
    char *d = dt__fault_hit() ? NULL : malloc(n);
    if (d)
        memcpy(d, s, n);
    return d;
}

/* ------------------------------------------------------------ errors */

static _Thread_local char tls_msg[1024];
static _Thread_local dt_status tls_status;

const char *dt_status_str(dt_status status) {
    switch (status) {
#define DT__STATUS_CASE(name, value, msg)                                                                    \
    case value:                                                                                              \
        return msg;
        DT_STATUS_MAP(DT__STATUS_CASE)
#undef DT__STATUS_CASE
    default:
        return "unknown status";
    }
}

const char *dt_last_error(void) { return tls_msg; }
dt_status dt_last_status(void) { return tls_status; }
void dt_clear_error(void) {
    tls_msg[0] = '\0';
    tls_status = DT_OK;
}

dt_status dt__error(dt_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg, sizeof tls_msg, fmt, ap);
    va_end(ap);
    tls_status = status;
    return status;
}

void dt__error_append(const char *fmt, ...) {
    size_t len = strlen(tls_msg);
    if (len + 1 >= sizeof tls_msg)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_msg + len, sizeof tls_msg - len, fmt, ap);
    va_end(ap);
}

void dt__sb_init(dt__strbuf *sb) {
    sb->buf[0] = '\0';
    sb->len = 0;
}

void dt__sb_printf(dt__strbuf *sb, const char *fmt, ...) {
    if (sb->len + 1 >= sizeof sb->buf)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sb->buf + sb->len, sizeof sb->buf - sb->len, fmt, ap);
    va_end(ap);
    if (n > 0) {
        sb->len += (size_t)n;
        if (sb->len >= sizeof sb->buf)
            sb->len = sizeof sb->buf - 1;
    }
}

/* ------------------------------------------------------------ interning */

/* Open-addressing set of strings; grows by doubling. Entries live until the
 * process exits: the number of distinct call-site files is small. */
static pthread_mutex_t intern_lock = PTHREAD_MUTEX_INITIALIZER;
static char **intern_slots;
static size_t intern_cap, intern_count;

void dt__intern_fork_lock(int lock) {
    if (lock)
        pthread_mutex_lock(&intern_lock);
    else
        pthread_mutex_unlock(&intern_lock);
}

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int intern_grow(void) {
    size_t ncap = intern_cap ? intern_cap * 2 : 64;
    char **ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return -1;
    for (size_t i = 0; i < intern_cap; i++) {
        if (!intern_slots[i])
            continue;
        size_t j = hash_str(intern_slots[i]) & (ncap - 1);
        while (ns[j])
            j = (j + 1) & (ncap - 1);
        ns[j] = intern_slots[i];
    }
    free(intern_slots);
    intern_slots = ns;
    intern_cap = ncap;
    return 0;
}

const char *dt__intern(const char *s) {
    if (!s)
        return NULL;
    const char *result = NULL;
    pthread_mutex_lock(&intern_lock);
    if ((intern_count + 1) * 2 > intern_cap && intern_grow() != 0)
        goto out;
    size_t j = hash_str(s) & (intern_cap - 1);
    while (intern_slots[j]) {
        if (strcmp(intern_slots[j], s) == 0) {
            result = intern_slots[j];
            goto out;
        }
        j = (j + 1) & (intern_cap - 1);
    }
    intern_slots[j] = dt__strdup(s);
    if (intern_slots[j]) {
        intern_count++;
        result = intern_slots[j];
    }
out:
    pthread_mutex_unlock(&intern_lock);
    return result;
}

/* Frees the intern table at exit so leak checkers see a clean process. */
__attribute__((destructor)) static void intern_cleanup(void) {
    for (size_t i = 0; i < intern_cap; i++)
        free(intern_slots[i]);
    free(intern_slots);
    intern_slots = NULL;
    intern_cap = intern_count = 0;
}

void dt__cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(c, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec dt__deadline_after_ms(int64_t ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

void dt__thread_name(const char *fmt, ...) {
#ifdef __linux__
    char name[16]; /* Linux keeps 15 characters and the NUL */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    pthread_setname_np(pthread_self(), name);
#else
    (void)fmt;
#endif
}
