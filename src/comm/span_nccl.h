/*
 * Groups spanning nodes over NCCL: whether a cuda group
 * whose ranks live in several processes uses NCCL across them or stages its
 * data through host memory (comm/span.c), and the NCCL unique ids the
 * main node makes for the groups it chose NCCL for and ships to the worker
 * nodes that hold their ranks (a NCCLID message on the control connection,
 * ahead of the first batch that names the group). Pure C, built
 * everywhere, so the choice and the table are tested without NCCL or a GPU.
 *
 * The NCCL path across nodes needs GPUs on two hosts; docs/cuda.md records
 * what has run.
 *
 * Threads: any thread; the table's lock is a leaf.
 */
#ifndef DT_COMM_SPAN_NCCL_H
#define DT_COMM_SPAN_NCCL_H

#include <stddef.h>
#include <stdint.h>

#define DT__SPAN_NCCL_ID 128 /* bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES) */

/* What the choice knows of the process that holds a rank. */
typedef struct dt__span_proc {
    int proc;         /* -1: the main node; else the worker node's index */
    int nccl;         /* NCCL loads there and serves its cuda meshes (dt__comm_nccl_usable) */
    int virtual_gpus; /* its logical CUDA devices share GPUs (DTORCH_DTENSOR_IN_SAME_DEVICE=1) */
    const char *host; /* its host name */
} dt__span_proc;

/* 1 when a cuda group of `n` ranks, rank i held by procs[i], uses NCCL
 * across its processes; 0 (the reason in `why`) when it stages through
 * host memory: DTORCH_SPAN_NCCL=0 says so, or a process holding a rank
 * cannot use NCCL or virtualises its GPUs (NCCL refuses two ranks on one
 * GPU), or two processes holding ranks run on one host (each numbers the
 * host's GPUs from 0, so their ranks may be one GPU). */
int dt__span_nccl_choose(int n, const dt__span_proc *procs, char *why, size_t whylen);

/* The table of unique ids: group `key` of the main node's graph `tag`, of
 * `nranks` ranks. put replaces; get copies out (1) or says there is none
 * (0); clear empties it (a cluster formed or left). */
void dt__span_nccl_put(uint32_t tag, uint64_t key, int nranks, const uint8_t id[DT__SPAN_NCCL_ID]);
int dt__span_nccl_get(uint32_t tag, uint64_t key, int *nranks, uint8_t id[DT__SPAN_NCCL_ID]);
void dt__span_nccl_clear(void);

/* Makes a new NCCL unique id (ncclGetUniqueId: this process becomes the
 * group's bootstrap root, which every rank's process must reach). 0 when
 * NCCL is not built or cannot be loaded (nccl.c). */
int dt__comm_nccl_unique_id(uint8_t id[DT__SPAN_NCCL_ID]);

#endif /* DT_COMM_SPAN_NCCL_H */
