/*
 * The program of a DT_K_CHAIN kernel (its record's attribute bytes): the
 * steps a blocked elementwise chain runs, written by the CHAIN node's
 * lowering (src/ops/elementwise_chain.c) and read by the kernel decoder
 * (kernel_codec.c) and the worker that runs it (core/worker/chain_run.c).
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
 *
 * Threads: pure functions over bytes, any thread.
 */
#ifndef DT_CORE_CHAIN_PROG_H
#define DT_CORE_CHAIN_PROG_H

#include "core/core.h"

/* Bytes of the program's head. */
#define DT__CHAIN_HEAD_BYTES 6

/* A parsed program: the steps for the backend and what names each (the
 * names and files point into the parsed bytes, not 0-terminated). */
typedef struct dt__chain_prog {
    int n;
    int32_t flags;
    dt__chain_step st[DT__CHAIN_MAX_STEPS];
    const char *name[DT__CHAIN_MAX_STEPS], *file[DT__CHAIN_MAX_STEPS];
    int name_len[DT__CHAIN_MAX_STEPS], file_len[DT__CHAIN_MAX_STEPS]; /* -1: none */
    int32_t line[DT__CHAIN_MAX_STEPS];
} dt__chain_prog;

/* The writer: the head, then each step (the caller sizes the buffer with
 * DT__CHAIN_HEAD_BYTES plus dt__chain_step_bytes of each step). Names
 * longer than 4095 bytes are cut; NULL ones are written as none. */
void dt__chain_put_head(uint8_t **p, int nsteps, int32_t flags);
size_t dt__chain_step_bytes(int n_in, const char *opname, const char *site_file, size_t alen);
void dt__chain_put_step(uint8_t **p, int kop, int n_in, const int8_t *src, int32_t site_line,
                        const char *opname, const char *site_file, const uint8_t *attr, size_t alen);
/* The reader: 0 when `n` bytes are a well-formed program, filling *p when
 * it is not NULL; -1 otherwise. */
int dt__chain_parse(const uint8_t *buf, size_t n, dt__chain_prog *p);
/* 0 when `n` bytes are a well-formed program (the kernel decoder). */
int dt__chain_check(const uint8_t *buf, size_t n);

#endif /* DT_CORE_CHAIN_PROG_H */
