/*
 * Small shared pieces: allocation, thread-local errors, interned strings.
 * Any thread may call every function here.
 */
#ifndef DT_COMMON_H
#define DT_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dtorch/dtorch.h"

#define DT_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Internal invariant check: only for the library's own invariants, never for
 * caller mistakes (those return a status). */
#define DT_ASSERT(cond)                                                                                      \
    do {                                                                                                     \
        if (!(cond))                                                                                         \
            dt__assert_fail(#cond, __FILE__, __LINE__);                                                      \
    } while (0)
_Noreturn void dt__assert_fail(const char *cond, const char *file, int line);
/* Ends the process for a state the library cannot report (e.g. out of
 * memory while reporting an out-of-memory failure): calls the abort
 * callback (dt_set_abort_callback), then abort(). */
_Noreturn void dt__fatal(const char *what, const char *detail);

/* Allocation: aborting on out-of-memory would kill the user's process, so
 * callers check NULL where they can report DT_ENOMEM. */
void *dt__malloc(size_t n);
void *dt__calloc(size_t n, size_t size);
void *dt__realloc(void *p, size_t n);
void dt__free(void *p);
char *dt__strdup(const char *s);

/* Test-only allocation faults (dt_debug_fail_allocs): the calling thread's
 * allocations may be made to fail while its scope is on (the controller
 * turns it on around each lowering). dt__fault_hit() is 1 when the next
 * allocation must fail; it also serves the pools. Any thread.
 * dt__fault_scope returns the scope it replaces. dt__fault_armed is 1 while
 * a failure is armed: a thread may leave its scope alone while it is 0
 * (arming happens before the work it is meant for is handed over). */
int dt__fault_scope(int on);
int dt__fault_hit(void);
#ifndef __cplusplus
#include <stdatomic.h>
/* Successes left before the armed failure; -1 when disarmed (common.c). */
extern atomic_long dt__fault_left;
static inline int dt__fault_armed(void) {
    return atomic_load_explicit(&dt__fault_left, memory_order_relaxed) >= 0;
}
#endif

/* Sets the calling thread's error and returns `status` so callers can write
 * `return dt__error(DT_EINVAL, "...", ...)`. */
dt_status dt__error(dt_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends to the calling thread's error message. */
void dt__error_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Returns a process-lifetime copy of `s`, the same pointer for equal strings.
 * Used for call-site file names so kernels can point at them without owning
 * them. NULL for NULL. */
const char *dt__intern(const char *s);
/* Takes (1) or drops (0) the intern table's lock, around fork() (graph.c). */
void dt__intern_fork_lock(int lock);

/* A small growable string buffer for messages. */
typedef struct dt__strbuf {
    char buf[1024];
    size_t len;
} dt__strbuf;
void dt__sb_init(dt__strbuf *sb);
void dt__sb_printf(dt__strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Timed waits: condition variables on the monotonic clock (so a wall-clock
 * change cannot stretch or cut a timeout), and the absolute deadline `ms`
 * milliseconds from now on that clock, for pthread_cond_timedwait. */
void dt__cond_init_monotonic(pthread_cond_t *c);

/* Names the calling thread (what top -H, ps -L, gdb and /proc show): the
 * printf-formatted name, cut to the 15 characters Linux keeps. Nothing
 * elsewhere. */
void dt__thread_name(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
struct timespec dt__deadline_after_ms(int64_t ms);

#endif /* DT_COMMON_H */
