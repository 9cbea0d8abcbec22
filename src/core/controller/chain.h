/*
 * Blocked elementwise chains (issue 14): the CHAIN node the window's chain
 * pass puts in place of a run of elementwise nodes (passes/chain.c), its
 * lowering into one DT_K_CHAIN kernel per device, the kernel's program (its
 * record's attribute bytes) and running it on a worker (chain.c).
 *
 * The program, little-endian (kernel_rec.h's dt__le_*):
 *   prog := u8 'C' u8 nsteps u32 flags step[nsteps]
 *   step := u16 kop u8 n_in i8 src[n_in] i32 site_line str opname str site_file
 *           u16 alen u8 attr[alen]
 *   str  := u16 len (0xffff: none) u8 bytes[len]
 * flags: DT_KF_REUSE when the node's reuse mark allows writing the result
 * into in[0]; src as dt__chain_step's; attr a packed dt__kattr. The step's
 * op name and call site make a failing step's error name that step, as
 * the unfused kernel's would.
 */
#ifndef DT_CORE_CHAIN_H
#define DT_CORE_CHAIN_H

#include "core/core.h"
#include "core/records/kernel_rec.h"

/* The chain pass fuses tensors of at least this many elements (globally):
 * below it the unfused kernels' fast paths for tiny operands win. */
#define DT__CHAIN_MIN_NUMEL 8192

/* Lowers a CHAIN node (controller). */
dt_status dt__lower_chain(dt__lower *L, dt__node *n);
/* 0 when `n` bytes are a well-formed program (the kernel decoder). */
int dt__chain_check(const uint8_t *buf, size_t n);
/* Runs a DT_K_CHAIN record on stream s's worker; its output gets the value
 * or an error naming the failing step. Returns 1 when the backend was
 * allowed to write into in[0] (kernel_run.c's accounting). */
int dt__chain_run(dt__krec *k, const dt__stream *s);

#endif /* DT_CORE_CHAIN_H */
