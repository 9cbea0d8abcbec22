/*
 * Running a DT_K_CHAIN kernel (chain_run.c): the worker's side of a blocked
 * elementwise chain, whose program is core/records/chain_prog.h. Called by
 * the kernel runner (kernel_run.c) on the stream's worker thread.
 */
#ifndef DT_CORE_CHAIN_RUN_H
#define DT_CORE_CHAIN_RUN_H

#include "core/core.h"

/* Runs a DT_K_CHAIN record on stream s's worker; its output gets the value
 * or an error naming the failing step. Returns 1 when the backend was
 * allowed to write into in[0] (kernel_run.c's accounting). */
int dt__chain_run(dt__krec *k, const dt__stream *s);

#endif /* DT_CORE_CHAIN_RUN_H */
