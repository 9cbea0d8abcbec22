/*
 * dtorch's operators, by family: factories, elementwise and binary ops,
 * reductions, linear algebra, views and shape, nn functional, creation and
 * data-dependent ops, and the operator registry. Included by dtorch/dtorch.h,
 * which declares the handles, statuses, dtypes and conventions they use; a
 * program includes dtorch/dtorch.h.
 *
 * Every op takes its tensor arguments borrowed and returns a new reference,
 * or NULL with dt_last_error() set (nothing is enqueued then). Each op's
 * comment gives its placement rules.
 */
#ifndef DTORCH_DTORCH_OPS_H
#define DTORCH_DTORCH_OPS_H

#include "dtorch/dtorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------- factories */
/* Each factory takes the global shape (`ndim` entries >= 0), the mesh and
 * `dt_mesh_ndim(mesh)` placements (NULL = all Replicate). A Partial placement
 * puts the value on the first coordinate of that mesh dim and zeros
 * elsewhere. All return a new reference or NULL. */

/* Copies `nbytes` of row-major host data (must equal numel * dtype size) at
 * the call; the buffer may be reused at once. */
DT_API dt_tensor *dt_tensor_from_buffer(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape,
                                        const void *data, size_t nbytes, dt_mesh *mesh,
                                        const dt_placement *placements);
/* Distributes a DLPack tensor (a DLManagedTensor *, e.g. from a PyCapsule
 * "dltensor"). Ownership of `dl_managed` passes to dtorch in every case, even
 * on failure. Its values are snapshotted at the call. Requires a backend with
 * DLPack support ("torch"). */
DT_API dt_tensor *dt_tensor_from_dlpack(dt_graph *g, void *dl_managed, dt_mesh *mesh,
                                        const dt_placement *placements);
/* Builds a tensor from what each device holds, as DTensor.from_local does:
 * `data[i]` is the row-major host block of the device at flat mesh index i
 * (row-major mesh order, as in dt_tensor_fetch_local) and `nbytes[i]` its
 * size, which must be that device's local shape (the region that `shape` and
 * the placements give it) times the dtype size. On a Partial mesh dim the
 * blocks are the addends; on a Replicate one they should be equal copies,
 * which is not checked (tests use that to build drifted replicas). The blocks
 * are copied at the call. Mainly for tests: a Partial whose every coordinate
 * holds a different piece. A size mismatch is DT_EINVAL and enqueues
 * nothing. */
DT_API dt_tensor *dt_tensor_from_local_buffers(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape,
                                               dt_mesh *mesh, const dt_placement *placements,
                                               const void *const *data, const size_t *nbytes);
DT_API dt_tensor *dt_full(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_scalar value,
                          dt_mesh *mesh, const dt_placement *placements);
/* Uninitialised values (in practice zeros). */
DT_API dt_tensor *dt_empty(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                           const dt_placement *placements);
/* Uniform [0, 1) and standard normal; floating dtypes only. */
DT_API dt_tensor *dt_rand(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                          const dt_placement *placements);
DT_API dt_tensor *dt_randn(dt_graph *g, dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                           const dt_placement *placements);
/* 1-D values start, start+step, ... below `end` (above when step < 0), sized
 * as torch.arange sizes them. */
DT_API dt_tensor *dt_arange(dt_graph *g, dt_dtype dtype, double start, double end, double step, dt_mesh *mesh,
                            const dt_placement *placements);

/* ------------------------------------------------------------------- ops */
/* Ops validate their arguments and placements at the call, infer the output
 * metadata, enqueue one record and return a new reference. A placement
 * combination an op cannot compute without communication fails with
 * DT_EPLACEMENT and a message naming the op, the placements given, the
 * accepted combinations and the redistribute() that fixes it. Both tensors of
 * a binary op must belong to the same graph and mesh. */

/* Append-only; the rows (and each op's torch name) are in dtorch_ops.def.
 * The ops after DIV are described with dt_binary_ex below. */
typedef enum dt_binary_op {
#define DT_BINARY_OP(E, ...) DT_BINARY_##E,
#include "dtorch/dtorch_ops.def"
    DT_BINARY_COUNT
} dt_binary_op;

/* a op b with torch broadcasting and type promotion (DIV is true division);
 * any dt_binary_op (see dt_binary_ex for the ops after DIV).
 * Per mesh dim it accepts (R,R)->R, (S,S)->S on the same broadcast dim,
 * (S,R)->S and (R,S)->S (the Replicate side is sliced locally), and for
 * Partial: ADD/SUB (P,P)->P, MUL (P,R)->P and (R,P)->P, DIV (P,R)->P. */
DT_API dt_tensor *dt_binary(dt_binary_op op, dt_tensor *a, dt_tensor *b);
/* a op s, or s op a when `scalar_first` is nonzero, as Python's operators
 * compute them (s - a is torch's rsub, s / a is reciprocal(a) * s, as in
 * torch's __rtruediv__; the ops after DIV compute torch.<op>(s, a), and
 * MAXIMUM, MINIMUM and the logical ops take no scalar). Partial inputs are
 * accepted by MUL, and by DIV when the tensor is the dividend. */
DT_API dt_tensor *dt_binary_scalar(dt_binary_op op, dt_tensor *a, dt_scalar s, int scalar_first);
/* -a; keeps every placement. Same as dt_unary(DT_UNARY_NEG, a). */
DT_API dt_tensor *dt_neg(dt_tensor *a);
/* torch.matmul for every rank (see "linear algebra" below). */
DT_API dt_tensor *dt_matmul(dt_tensor *a, dt_tensor *b);
/* dt_reduce(DT_REDUCE_SUM, a, ndims, dims, keepdim, -1) (see "reductions"). */
DT_API dt_tensor *dt_sum(dt_tensor *a, int ndims, const int64_t *dims, int keepdim);
/* Moves `a` to `placements` on `mesh` (NULL = a's mesh). Per mesh dim:
 * S->R all-gather, P->R all-reduce, P->S reduce-scatter, S(i)->S(j)
 * all-to-all, R->S local slice, R->P keep on the first coordinate, S->P via R;
 * nested shards (several mesh dims on one tensor dim) included. With another
 * mesh of the same device type (pipeline stages), Partial sums finish on the
 * source mesh, then each destination device assembles its region from the
 * overlapping source pieces (point-to-point copies). */
DT_API dt_tensor *dt_redistribute(dt_tensor *a, dt_mesh *mesh, const dt_placement *placements);

/* ------------------------------------------------------------ reductions */
/* torch's reductions. Every op takes `dims` (`ndims` entries, negative values
 * count from the end; ndims < 0 means "no dim": torch's x.op() form) and
 * `keepdim`. Placements per mesh dim: R->R; a Shard of a kept dim stays a
 * Shard (renumbered when dims are dropped); Partial only for SUM and MEAN
 * (P->P; not when the sum casts floats to an integer dtype). A Shard of a
 * reduced dim becomes Partial for SUM and MEAN (MEAN divides each local sum
 * by the global count, so the Partial pieces add up to the mean); every
 * other op redistributes by itself there: it reduces locally, all-gathers
 * the per-device results along that mesh dim and reduces them again, giving
 * Replicate on that mesh dim (ARGMAX/ARGMIN carry global indices and pick the
 * smallest index among equal best values, as torch does). */
/* The rows are in dtorch_ops.def. */
typedef enum dt_reduce_op {
#define DT_REDUCE_OP(E, ...) DT_REDUCE_##E,
#include "dtorch/dtorch_ops.def"
    DT_REDUCE_COUNT
} dt_reduce_op;

/* The reduction `op` of `a`. ndims == 0 also means every dim for the ops
 * that take several dims (torch's empty dim list). `dtype` is the result
 * dtype for SUM, MEAN and PROD (torch's dtype= argument) or -1 for torch's
 * default; it must be -1 for the other ops. Errors as torch raises them: a dim
 * out of range is DT_EINDEX, an empty reduced dim for AMAX..ARGMIN is
 * DT_EINDEX, an integer MEAN is DT_EOP. Returns a new reference or NULL. */
DT_API dt_tensor *dt_reduce(dt_reduce_op op, dt_tensor *a, int ndims, const int64_t *dims, int keepdim,
                            int dtype);
/* torch.max(a, dim, keepdim) / torch.min(...) (op DT_REDUCE_MAX or
 * DT_REDUCE_MIN): *values gets the values and *indices the int64 indices of
 * the first best element, both new references (both NULL on failure).
 * Placements as dt_reduce. */
DT_API dt_status dt_reduce_with_indices(dt_reduce_op op, dt_tensor *a, int64_t dim, int keepdim,
                                        dt_tensor **values, dt_tensor **indices);

/* -------------------------------------------------------- linear algebra */
/* Matrix products. Placements are matched per mesh dim through the index
 * each tensor dim carries (M, K, N, a batch dim, an einsum letter): both
 * Replicate -> R; a Shard of an index the output keeps -> Shard of that
 * output dim (the other operand is Replicate, sliced locally, or shards the
 * same index); a Shard of a contracted index (K) on one or both operands ->
 * Partial; Partial with Replicate -> Partial. Sharding a size-1 dim that
 * broadcasts, and nested shards that do not line up, are PlacementErrors.
 *
 * dt_matmul (declared above): torch.matmul for every rank: 1-D.1-D dot,
 * 2-D @ 1-D, 1-D @ 2-D, N-D @ N-D with broadcast batch dims. For 2-D:
 * (R,R)->R, (S0,R)->S0, (R,S1)->S1, (S1,S0)->P, (S1,R)->P, (R,S0)->P,
 * (P,R)->P, (R,P)->P; batch-dim shards propagate. Same dtypes, not bool. */
/* torch.mm: 2-D only. */
DT_API dt_tensor *dt_mm(dt_tensor *a, dt_tensor *b);
/* torch.bmm: a[B,M,K] @ b[B,K,N]; batch shards propagate. */
DT_API dt_tensor *dt_bmm(dt_tensor *a, dt_tensor *b);
/* torch.outer: a[n] x b[m] -> [n,m] (type promotion as torch). (S0,R)->S0,
 * (R,S0)->S1, (P,R)->P, (R,P)->P. */
DT_API dt_tensor *dt_outer(dt_tensor *a, dt_tensor *b);
/* torch.nn.functional.linear: x[..., in] @ weight[out, in].T (+ bias), weight
 * 2-D or 1-D, bias NULL or broadcastable to the output. Column parallel:
 * (S(batch)/R x, S(0) weight) -> S(-1); row parallel: (S(-1), S(1)) -> P.
 * The bias follows the output: Replicate (sliced to the local output region)
 * or the output's Shard; on a mesh dim where the output is Partial a
 * Replicate bias is added on that dim's first coordinate only and a Partial
 * bias is added everywhere. */
DT_API dt_tensor *dt_linear(dt_tensor *x, dt_tensor *weight, dt_tensor *bias);
/* dt_linear for a module's weight (a torch nn.Parameter, which requires
 * grad even under torch.no_grad()): the product eager torch computes for the
 * module. torch's matmul folds an input of 3+ dims into one matrix product
 * when the weight requires grad and runs a batched product when it does not;
 * for a non-contiguous input (a transposed view) the two may round apart
 * (they do with MKL on AVX512 CPUs). dtorch.nn's layers call this one. */
DT_API dt_tensor *dt_linear_param(dt_tensor *x, dt_tensor *weight, dt_tensor *bias);
/* torch.einsum(equation, operands...) for one or two operands (letters
 * a-zA-Z, "...", implicit or explicit output). The equation is copied. */
DT_API dt_tensor *dt_einsum(const char *equation, int n, dt_tensor *const *operands);

/* ------------------------------------------------------- views and shape */
/* Data-movement ops (src/ops/views.c, index.c, views_join.c, views_rearrange.c). dtorch values
 * are immutable, so a "view" is a new symbol with its own value; the backend
 * may share storage underneath (a reshape of a contiguous block copies
 * nothing). All return a new reference or NULL, and record one node (cat and
 * stack of more than two inputs: one node per pairwise step).
 *
 * Placements, per mesh dim, unless an op says otherwise: Replicate stays
 * Replicate; Partial stays Partial (these ops are linear); a Shard follows
 * its tensor dim through the shape change. A Shard whose dim the op slices,
 * flips, rolls, repeats, indexes or concatenates along is a PlacementError
 * naming the redistribute() that fixes it. Errors mirror torch: a bad dim is
 * DT_EINDEX, a bad shape DT_ESHAPE, a bad dtype DT_ETYPE. */

/* a.reshape(shape) (also view, flatten, unflatten): `ndim` sizes, one may be
 * -1 (inferred). A Shard(d) moves to the result dim holding d's leading
 * digits, and is accepted only when every device's block of `a`, read in
 * row-major order, is exactly the block the result's placements give that
 * device (torch.chunk sizes, nested shards included); checked exactly per
 * device, else DT_EPLACEMENT. E.g. flatten of (a, b) with Shard(0) on n
 * devices is accepted when chunking a*b by n gives the same blocks as
 * chunking a then multiplying by b. */
DT_API dt_tensor *dt_reshape(dt_tensor *a, int ndim, const int64_t *shape);
/* Removes the size-1 dims listed in `dims` (ndims entries, negative allowed;
 * a listed dim of another size stays), or every size-1 dim when ndims < 0.
 * A Shard on a removed dim is rejected. */
DT_API dt_tensor *dt_squeeze(dt_tensor *a, int ndims, const int64_t *dims);
/* Inserts a size-1 dim at `dim` (-ndim-1 <= dim <= ndim). */
DT_API dt_tensor *dt_unsqueeze(dt_tensor *a, int64_t dim);
/* a.permute(dims) (also transpose, T, mT): `ndim` must equal a's ndim. Every
 * placement is accepted; Shard(d) becomes Shard(position of d in dims). */
DT_API dt_tensor *dt_permute(dt_tensor *a, int ndim, const int64_t *dims);
/* a.expand(sizes): -1 keeps a size; new leading dims allowed. A Shard on a
 * dim that grows from 1 is rejected. */
DT_API dt_tensor *dt_expand(dt_tensor *a, int ndim, const int64_t *sizes);
/* A value copy that shares the blobs of `a` (no kernel runs). */
DT_API dt_tensor *dt_clone(dt_tensor *a);
/* a.contiguous(): the same value and placements, each device's block laid out
 * row-major (a copy where the block is a strided view, the block itself
 * where it is already contiguous). Values are never changed by a layout, but
 * the kernels that read them may round differently on another layout, so
 * the layout follows eager torch's (docs/decisions.md, "Kernel results may
 * be views"). */
DT_API dt_tensor *dt_contiguous(dt_tensor *a);

/* One input dim of a basic index: elements start, start+step, ... (`len` of
 * them, step >= 1, all within the dim); `drop` = 1 for an integer index
 * (len 1, the dim disappears from the result). */
typedef struct dt_slice {
    int64_t start;
    int64_t step;
    int64_t len;
    int32_t drop;
} dt_slice;

/* a[key] for a basic key (ints, slices, None, ...), given per input dim
 * (`dims` has ndim(a) entries). `new_axes` has bit i set when result dim i
 * is a new size-1 axis (None); the other result dims are the kept input dims
 * in order. Also narrow and select. Accepted: a Shard on a dim taken whole;
 * a Shard on a sliced or integer-indexed dim is rejected. */
DT_API dt_tensor *dt_index(dt_tensor *a, const dt_slice *dims, uint64_t new_axes);
/* a[(:,) * dim + (index,)]: torch advanced indexing along one dim by an int64
 * tensor of any shape; the result's dims dim .. dim+index.ndim-1 come from
 * `index`. Indices are read on the devices: out-of-range ones surface as
 * DT_EKERNEL at the next value read. Per mesh dim (a, index): (R,R)->R,
 * (S(j),R)->S(j') for j != dim, (R,S(k))->S(dim+k), (P,R)->P. */
DT_API dt_tensor *dt_index_tensor(dt_tensor *a, int64_t dim, dt_tensor *index);
/* The value of `a` after a[key] = value for a basic key given as in
 * dt_index (no new axes: a None only changes how `value` broadcasts, so the
 * caller drops those dims of `value`). `value` broadcasts to the selected
 * region (leading size-1 dims beyond it are allowed) and is cast to a's
 * dtype; value NULL means the scalar `s`. The result keeps a's placements.
 * Per mesh dim (a, value): (R,R), (S(d),R) (value sliced locally), (S(d),S)
 * when every device's needed part of value is what it holds, (P,R) and
 * (P, scalar) (the value lands on coordinate 0, zeros elsewhere), (P,P). */
DT_API dt_tensor *dt_setitem(dt_tensor *a, const dt_slice *dims, dt_tensor *value, dt_scalar s);
/* a with a[(:,) * dim + (mask,)] = s: `mask` is bool with the shape of a's
 * dims dim .. dim+mask.ndim-1. The mask must be Replicate, or sharded like a
 * on those dims; a Partial a takes s on coordinate 0 and zeros elsewhere. */
DT_API dt_tensor *dt_setitem_mask(dt_tensor *a, int64_t dim, dt_tensor *mask, dt_scalar s);
/* a with a[(:,) * dim + (index,)] = s for an int64 index (Replicate); a must
 * not be sharded on `dim`. */
DT_API dt_tensor *dt_setitem_index(dt_tensor *a, int64_t dim, dt_tensor *index, dt_scalar s);
/* The value of dst after dst.copy_(src): src broadcast to dst's shape, cast
 * to dst's dtype, on dst's placements. Redistributes src by itself when its
 * placements do not line up with dst's (same mesh required). */
DT_API dt_tensor *dt_copy(dt_tensor *dst, dt_tensor *src);

/* torch.masked_scatter(a, mask, source): a copy of a (broadcast with the
 * bool `mask`) whose True positions take source's elements in order, the
 * k-th True element in row-major order taking source.flatten()[k]. source
 * has a's dtype and any shape. Errors at the call as torch's: shapes that
 * do not broadcast (DT_ESHAPE), a non-bool mask or another source dtype
 * (DT_EOP); fewer source elements than True elements is only known from the
 * values and fails at the read (DT_EKERNEL, ATen's message). `flags`:
 * DT_EW_INPLACE for a.masked_scatter_(): then mask must broadcast to a's
 * shape (DT_EOP otherwise, as torch's expand) and the caller rebinds a.
 * Per mesh dim (a, mask, source): the mask is Replicate and so is the source
 * unless Partial: (R,R,R)->R, (S(d),R,R)->S(d) for a dim d of a that does not
 * broadcast, (P,R,R)->P, (R,R,P)->P, (P,R,P)->P. A device of a sharded result
 * reads the whole mask to know how many True elements precede its block, so
 * a sharded mask or source is a PlacementError (redistribute it to
 * Replicate) rather than a hidden exchange. */
DT_API dt_tensor *dt_masked_scatter(dt_tensor *a, dt_tensor *mask, dt_tensor *source, int flags);

/* torch.cat(ts, dim) with type promotion; 1-D empty inputs are skipped as in
 * torch. Per mesh dim: all inputs Partial -> P; otherwise no Partial, at most
 * one Shard dim j != dim among the inputs -> S(j) (Replicate inputs sliced
 * locally), else R. Inputs all Shard(dim) on one mesh dim (same placements
 * elsewhere) are concatenated locally: the result is S(dim) with a segmented
 * storage order that later ops keep or convert (docs/decisions.md, "segmented
 * cat"). Other inputs Shard(dim) along the cat dim (no Partial on that mesh
 * dim) are all-gathered first and the result sliced back to S(dim). */
DT_API dt_tensor *dt_cat(int n, dt_tensor *const *ts, int64_t dim);
/* torch.stack(ts, dim): equal shapes; placements as cat, the new dim never
 * sharded. */
DT_API dt_tensor *dt_stack(int n, dt_tensor *const *ts, int64_t dim);
/* tril (upper = 0) / triu (upper = 1) with `diagonal`. Every placement is
 * accepted: a device holding rows r0.. and columns c0.. applies the local
 * diagonal diagonal + r0 - c0. */
DT_API dt_tensor *dt_tril(dt_tensor *a, int64_t diagonal, int upper);
/* torch.flip(a, dims); the flipped dims must not be sharded. */
DT_API dt_tensor *dt_flip(dt_tensor *a, int ndims, const int64_t *dims);
/* torch.roll(a, shifts, dims) with `n` pairs; dims NULL (n == 1) rolls the
 * flattened tensor, which then must not be sharded at all. Rolled dims must
 * not be sharded. */
DT_API dt_tensor *dt_roll(dt_tensor *a, int n, const int64_t *shifts, const int64_t *dims);
/* a.repeat(repeats) (n >= ndim(a) entries); a Shard on a dim repeated more
 * than once is rejected. */
DT_API dt_tensor *dt_repeat(dt_tensor *a, int n, const int64_t *repeats);
/* a.repeat_interleave(repeats, dim). A Shard on `dim` is accepted when every
 * device's output block is exactly its input block repeated (checked per
 * device; e.g. always when the mesh size divides the dim). */
DT_API dt_tensor *dt_repeat_interleave(dt_tensor *a, int64_t repeats, int64_t dim);
/* a.repeat_interleave(repeats, dim, output_size=output_size) with a 1-D int64
 * `repeats` (Replicate) whose sum the caller passes as output_size; `dim`
 * must not be sharded. */
DT_API dt_tensor *dt_repeat_interleave_tensor(dt_tensor *a, dt_tensor *repeats, int64_t dim,
                                              int64_t output_size);
/* ------------------------------------------------------ elementwise math */
/* torch's elementwise operators on distributed tensors: binary ops with
 * alpha, rounding modes, comparisons, logical and bitwise ops, pow,
 * maximum/minimum; unary math; casts; where, masked_fill and clamp. Shapes
 * broadcast and dtypes promote exactly as in torch (dt_binary above).
 *
 * Placements, matched per mesh dim (PlacementSignature). Let "broadcast
 * S/R" be the rule of dt_binary without Partial: (R,..,R)->R; every Shard
 * input must shard the same output dim d and the others be Replicate (sliced
 * locally), giving S(d); a Shard of a size-1 dim that broadcasts is
 * rejected. Then:
 *  - comparisons, logical, bitwise, pow, maximum, minimum, remainder and the
 *    rounding divisions: broadcast S/R; Partial is rejected (not linear);
 *  - add/sub with alpha keep dt_binary's Partial rules ((P,P)->P), and a
 *    scalar operand keeps those of dt_binary_scalar (mul, div by: P->P);
 *  - unary ops: R->R, S(d)->S(d); only NEG keeps P (the sole linear one);
 *  - casts: R->R, S(d)->S(d); a Partial is rejected: rounding each part to
 *    the new dtype is not rounding the sum, so the result would not be exact
 *    (casting to the same dtype is a no-op and keeps every placement);
 *  - where (3 inputs), masked_fill (2), clamp (1 to 3): broadcast S/R over
 *    their tensor inputs; no Partial.
 * Violations fail with DT_EPLACEMENT naming the op, the placements, the
 * accepted combinations and the redistribute() that fixes it. */

/* Flags of dt_binary_ex and the other entries below. */
typedef enum dt_ew_flags {
    /* dt_binary_ex with b == NULL: compute op(s, a), torch's function form
     * torch.<op>(s, a) (the scalar as a wrapped number). */
    DT_EW_SCALAR_FIRST = 1 << 0,
    /* In-place form (torch's a.<op>_(...)): the result must have a's shape
     * and its dtype must be castable to a's dtype under torch's rules (no
     * float -> integer, no non-bool -> bool); it comes back cast to a's
     * dtype. The caller rebinds its handle for `a` to the result (dtorch
     * values are immutable); placements are the op's (they may differ from
     * a's). */
    DT_EW_INPLACE = 1 << 1
} dt_ew_flags;

/* The general binary op: a op b (b not NULL), or a op s (b NULL), or s op a
 * (b NULL and DT_EW_SCALAR_FIRST). `alpha` scales the second operand of ADD
 * and SUB (torch's alpha; an integer or bool alpha is required for integer
 * and bool results, a bool alpha only for bool results); for every other op
 * it must be dt_scalar_int(1). Errors as torch raises them, at the call: a
 * bool result for SUB (DT_EOP) and for DIV_TRUNC, DIV_FLOOR, REMAINDER, POW
 * (DT_EUNSUPPORTED, torch's NotImplementedError; a bool tensor to a bool
 * scalar power is accepted); a floating result for the bitwise ops
 * (DT_EUNSUPPORTED); an integer tensor to a
 * negative integer scalar power (DT_EOP); an integer division by a zero
 * scalar (DT_EOP, "ZeroDivisionError"). Comparisons and logical ops return
 * bool (compared in the promoted dtype); MAXIMUM, MINIMUM and the logical
 * ops take two tensors (DT_ETYPE otherwise). `flags`: dt_ew_flags. */
DT_API dt_tensor *dt_binary_ex(dt_binary_op op, dt_tensor *a, dt_tensor *b, dt_scalar s, dt_scalar alpha,
                               int flags);

/* Append-only; the rows, with each op's result dtype, are in dtorch_ops.def. */
typedef enum dt_unary_op {
#define DT_UNARY_OP(E, ...) DT_UNARY_##E,
#include "dtorch/dtorch_ops.def"
    DT_UNARY_COUNT
} dt_unary_op;

/* op(a) with torch's dtype rules (see dt_unary_op). R->R, S(d)->S(d); P->P
 * only for NEG. */
DT_API dt_tensor *dt_unary(dt_unary_op op, dt_tensor *a);
/* dt_unary with dt_ew_flags (DT_EW_INPLACE for a.exp_() etc.). */
DT_API dt_tensor *dt_unary_ex(dt_unary_op op, dt_tensor *a, int flags);
/* torch.round(a, decimals=decimals); `flags` as dt_unary_ex. A non-zero
 * `decimals` needs a floating `a` (DT_EUNSUPPORTED otherwise, as torch). */
DT_API dt_tensor *dt_round(dt_tensor *a, int64_t decimals, int flags);

/* a.to(dtype): a new reference to `a` itself when the dtype is already
 * `dtype`. R->R, S(d)->S(d); Partial rejected (see above). */
DT_API dt_tensor *dt_cast(dt_tensor *a, dt_dtype dtype);

/* torch.where(cond, x, y): `cond` is bool (uint8 accepted, as in torch);
 * x is `a`, or the scalar `sa` when `a` is NULL; y likewise with b/sb.
 * The three broadcast; the dtype is torch's result_type(x, y). Broadcast
 * S/R over the tensor inputs; no Partial. */
DT_API dt_tensor *dt_where(dt_tensor *cond, dt_tensor *a, dt_scalar sa, dt_tensor *b, dt_scalar sb);

/* a.masked_fill(mask, v): v is the 0-d tensor `value`, or the scalar `s`
 * when `value` is NULL. `mask` is bool (uint8 accepted); the result has the
 * broadcast shape of a and mask and a's dtype; a scalar that does not fit
 * a's dtype fails as in torch ("value cannot be converted ... without
 * overflow", DT_EOP). Broadcast S/R over (a, mask[, value]); no Partial.
 * `flags`: DT_EW_INPLACE for masked_fill_. */
DT_API dt_tensor *dt_masked_fill(dt_tensor *a, dt_tensor *mask, dt_tensor *value, dt_scalar s, int flags);

/* Which bounds dt_clamp takes. */
typedef enum dt_clamp_flags {
    DT_CLAMP_MIN = 1 << 8, /* a min bound is given */
    DT_CLAMP_MAX = 1 << 9  /* a max bound is given */
} dt_clamp_flags;

/* torch.clamp(a, min, max): each bound, when its DT_CLAMP_* flag is set, is
 * the tensor (min_t / max_t) or, when that is NULL, the scalar. At least one
 * bound is required (DT_EOP). The dtype is torch's (a floating `a` keeps its
 * dtype; otherwise result_type of a and the bounds); a bool result is
 * DT_EUNSUPPORTED except with one tensor bound. Broadcast S/R over the
 * tensor inputs; no Partial. `flags`: dt_clamp_flags | dt_ew_flags. */
DT_API dt_tensor *dt_clamp(dt_tensor *a, dt_tensor *min_t, dt_scalar min_s, dt_tensor *max_t, dt_scalar max_s,
                           int flags);
/* ------------------------------------------------------ nn functional */
/* torch.nn.functional's operators (inference: no autograd). Like every op
 * they validate at the call, infer the output and return a new reference or
 * NULL. All-Replicate inputs are always accepted; placements are matched per
 * mesh dim as stated per function ("S(d)" a shard of tensor dim d, "P"
 * Partial). Inputs given as NULL are absent (torch's None). Results on a
 * one-device mesh equal eager torch's bit for bit; shard-only results are
 * exact except where a function says otherwise; Partial results are sums. */

/* The rows are in dtorch_ops.def. */
typedef enum dt_activation_kind {
#define DT_ACTIVATION(E, ...) DT_ACT_##E,
#include "dtorch/dtorch_ops.def"
    DT_ACT_COUNT
} dt_activation_kind;

/* act(x) elementwise; `param` as noted on the kind (ignored otherwise).
 * Floating dtypes only, except RELU (integers too, not bool) and
 * SIGMOID/TANH (integers and bool give the default float dtype).
 * Per mesh dim: R->R, S(d)->S(d); Partial is rejected (not linear). Shards
 * of GELU, GELU_TANH, SILU, ELU and SIGMOID may differ from the unsharded
 * result in the last bit: ATen's CPU kernels compute a vectorised body and a
 * scalar tail that round differently, and a shard moves elements between
 * the two. RELU, LEAKY_RELU and TANH are exact. */
DT_API dt_tensor *dt_activation(dt_activation_kind kind, dt_tensor *x, double param);

/* softmax (log_softmax when `log`) over `dim`; `dtype` < 0 keeps x's dtype,
 * else x is cast to it first (torch's dtype=). Floating dtypes only.
 * Per mesh dim: R->R, S(d)->S(d) for d != dim; a shard of `dim` and Partial
 * are rejected. */
DT_API dt_tensor *dt_softmax(dt_tensor *x, int dim, int log, int dtype);

/* layer_norm over the last `nnorm` dims, which must equal
 * `normalized_shape`; `weight`/`bias` (may be NULL) have that shape.
 * Per mesh dim: x R->R or S(d)->S(d) for a d before the normalized dims;
 * weight and bias Replicate; Partial rejected. */
DT_API dt_tensor *dt_layer_norm(dt_tensor *x, int nnorm, const int64_t *normalized_shape, dt_tensor *weight,
                                dt_tensor *bias, double eps);
/* rms_norm: x * rsqrt(mean(x^2 over the normalized dims) + eps) * weight,
 * computed as torch 2.x does (half/bfloat16 upcast to float32, then cast
 * back before the weight). eps NAN means torch's default, the epsilon of
 * x's computation type (float32 for half/bfloat16). Placements as
 * layer_norm. */
DT_API dt_tensor *dt_rms_norm(dt_tensor *x, int nnorm, const int64_t *normalized_shape, dt_tensor *weight,
                              double eps);
/* group_norm of x [N, C, *] with C divisible by num_groups; weight/bias
 * [C] or NULL. Per mesh dim: x R->R or S(0)->S(0); weight and bias
 * Replicate; Partial rejected. */
DT_API dt_tensor *dt_group_norm(dt_tensor *x, int64_t num_groups, dt_tensor *weight, dt_tensor *bias,
                                double eps);
/* batch_norm in inference mode (running statistics, training=False) of
 * x [N, C, *]; running_mean/var required, weight/bias [C] or NULL.
 * Per mesh dim: x S(d)->S(d) for any d (the op is per channel); the [C]
 * inputs Replicate (sliced locally) or S(0) together with x S(1);
 * Partial rejected. */
DT_API dt_tensor *dt_batch_norm(dt_tensor *x, dt_tensor *running_mean, dt_tensor *running_var,
                                dt_tensor *weight, dt_tensor *bias, double momentum, double eps);

/* weight[indices]: indices int32/int64 of any shape, weight [V, D]; the
 * result has indices' shape + [D] and weight's dtype. Per mesh dim
 * (indices, weight): (R,R)->R, (S(d),R)->S(d), (R,S(1))->S(-1) (output's
 * last dim), (R,S(0))->P (vocab-parallel: each device looks up the indices
 * in its vocab range and gives zeros elsewhere), (R,P)->P. An index outside
 * [0, V) fails the kernel ("index out of range in self"), which surfaces as
 * a KernelError at the next read. */
DT_API dt_tensor *dt_embedding(dt_tensor *indices, dt_tensor *weight);

typedef enum dt_conv_padding {
    DT_CONV_PAD_EXPLICIT = 0, /* the padding array */
    DT_CONV_PAD_VALID,        /* torch's padding="valid" */
    DT_CONV_PAD_SAME          /* torch's padding="same" */
} dt_conv_padding;
/* conv2d of x [N, Cin, H, W] (or [Cin, H, W]) with weight
 * [Cout, Cin/groups, kH, kW] and bias [Cout] or NULL; stride, padding and
 * dilation have 2 entries each (padding read only for EXPLICIT). Per mesh
 * dim (x, weight, bias): (R,R,R)->R, (S(0),R,R)->S(0) (batch),
 * (R,S(0),S(0) or R)->S(1) (output channels, groups == 1 only); without
 * bias also (P,R)->P and (R,P)->P. Shards may differ from the unsharded
 * result in the last bits (the backend may pick other algorithms for other
 * sizes). */
DT_API dt_tensor *dt_conv2d(dt_tensor *x, dt_tensor *weight, dt_tensor *bias, const int64_t *stride,
                            const int64_t *padding, const int64_t *dilation, int64_t groups,
                            dt_conv_padding padding_mode);

typedef enum dt_interp_mode {
    DT_INTERP_NEAREST = 0,
    DT_INTERP_NEAREST_EXACT,
    DT_INTERP_LINEAR,    /* 3-D input */
    DT_INTERP_BILINEAR,  /* 4-D input */
    DT_INTERP_BICUBIC,   /* 4-D input */
    DT_INTERP_TRILINEAR, /* 5-D input */
    DT_INTERP_COUNT
} dt_interp_mode;
/* interpolate x [N, C, *spatial] (1 to 3 spatial dims) to `size` (one
 * entry per spatial dim) or by `scale_factors` (exactly one of the two is
 * non-NULL; the output size is trunc(in * scale) as ATen computes it and
 * the scales are passed on, as torch.nn.functional.interpolate does without
 * recompute_scale_factor). align_corners: -1 for None (False), 0 or 1; only
 * the linear modes take it. Per mesh dim: R->R, S(0)->S(0), S(1)->S(1),
 * P->P (interpolation is linear); spatial shards are rejected. Channel
 * shards of the linear modes may differ in the last bit (ATen vectorises
 * across channels). */
DT_API dt_tensor *dt_interpolate(dt_tensor *x, dt_interp_mode mode, const int64_t *size,
                                 const double *scale_factors, int align_corners);

typedef enum dt_pad_mode {
    DT_PAD_CONSTANT = 0,
    DT_PAD_REFLECT,
    DT_PAD_REPLICATE,
    DT_PAD_CIRCULAR,
    DT_PAD_COUNT
} dt_pad_mode;
/* torch.nn.functional.pad: `npad` (even) amounts, last dim first
 * (left, right, top, bottom, ...); negative amounts crop in CONSTANT mode.
 * Per mesh dim: R->R, S(d)->S(d) for a dim that is not padded, P->P unless
 * the mode is CONSTANT with a nonzero value. */
DT_API dt_tensor *dt_pad(dt_tensor *x, int npad, const int64_t *pad, dt_pad_mode mode, double value);

/* dropout: with `training`, x * mask / (1 - p) with a Bernoulli(1 - p) mask
 * drawn from dtorch's random stream (dt_manual_seed) for the global shape,
 * so the values are the same whatever the mesh and placements; without, x
 * itself (a new reference to it). Floating dtypes. Per mesh dim: R->R,
 * S(d)->S(d), P->P (the mask is the same on every device). */
DT_API dt_tensor *dt_dropout(dt_tensor *x, double p, int training);

/* torch.nn.functional.pixel_shuffle: x [..., C * r * r, H, W] (at least 3
 * dims) to [..., C, H * r, W * r] with r = upscale_factor > 0, element
 * (..., c, h * r + i, w * r + j) taken from (..., c * r * r + i * r + j, h, w).
 * Any dtype; it moves elements, so results are exact. Per mesh dim: R->R,
 * S(d)->S(d) for d before the last three (batch dims), P->P (the op is
 * linear); no Shard of the last three dims. */
DT_API dt_tensor *dt_pixel_shuffle(dt_tensor *x, int64_t upscale_factor);

/* softmax(q @ k^T * scale + mask) @ v for q [..., L, E], k [..., S, E],
 * v [..., S, Ev] with equal leading (batch, head) dims; attn_mask (NULL,
 * bool: True keeps, or q's dtype: added) broadcasts to [..., L, S];
 * is_causal masks j > i (not with attn_mask); scale NAN means
 * 1/sqrt(E); dropout_p > 0 drops attention weights with a mask drawn like
 * dt_dropout's. Computed by the fused at::scaled_dot_product_attention
 * when dropout_p == 0, else from ATen ops (torch's math). Per mesh
 * dim: q, k, v (and a mask dim of full size) R or S(d) on a leading dim
 * (the same d) -> S(d); (R,R,P)->P (linear in v); shards of the sequence or
 * embedding dims and other Partials are rejected. */
DT_API dt_tensor *dt_scaled_dot_product_attention(dt_tensor *q, dt_tensor *k, dt_tensor *v,
                                                  dt_tensor *attn_mask, double dropout_p, int is_causal,
                                                  double scale);

/* Ring attention: the same attention (no mask, no dropout) with the
 * sequence dim (-2) of q, k and v sharded along mesh dim `mesh_dim` (the
 * ring), computed without gathering k and v: each device attends its query
 * block to one key/value block at a time, merging by log-sum-exp, while the
 * blocks move one step around the ring on the communication stream (at most
 * three blocks held per device). Causal blocks wholly in a device's future
 * are skipped. q, k and v must have equal placements: Shard(seq) on
 * `mesh_dim`, R or S(d) on a batch/head dim elsewhere; the result has q's.
 * Values match dt_scaled_dot_product_attention to rounding (allclose). */
DT_API dt_tensor *dt_sdpa_ring(dt_tensor *q, dt_tensor *k, dt_tensor *v, int is_causal, double scale,
                               int mesh_dim);

/* 2-D pooling over the last two (spatial) dims of x [N, C, H, W] or
 * [C, H, W], computed by the ATen call torch.nn.functional makes, so a
 * one-device result equals eager torch bit for bit. kernel_size, padding and
 * dilation have 2 entries (H, W); stride has 2 or is NULL for kernel_size
 * (torch's stride=None). Every argument error torch raises is raised at the
 * call, in torch's order and with its exception kind: bad kernel, stride,
 * dilation or padding values, a padding over half the kernel, an output
 * smaller than 1, empty non-batch dims (DT_EOP); an avg_pool2d input of
 * fewer than 3 dims (DT_EINDEX, as torch's size(-3)); a dtype the ATen
 * kernel lacks (DT_EUNSUPPORTED: bool for max; avg takes floating dtypes
 * and int64; the adaptive ones floating dtypes).
 * Per mesh dim: R->R, and S(d)->S(d) for the dims before the last two
 * (batch, channels: every window lies inside one plane); a shard of H or W
 * is rejected (DT_EPLACEMENT naming the redistribute() to Replicate; windows
 * would cross shard edges and halos are not exchanged). Average pooling is
 * linear, so for floating dtypes P->P (the pooled parts sum to the pooled
 * sum up to rounding); max pooling rejects Partial (the max of a sum is not
 * the sum of maxima), and so does an integer avg_pool2d (it divides with
 * truncation). */

/* max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode): *values
 * (x's dtype) and, when `indices` is not NULL, *indices (int64, the flat
 * index of each maximum in its H*W input plane, as torch's
 * return_indices=True, which also computes the values through
 * at::max_pool2d_with_indices). `values` must not be NULL. On success the
 * out-parameters hold new references; on failure they are NULL. */
DT_API dt_status dt_max_pool2d(dt_tensor *x, const int64_t *kernel_size, const int64_t *stride,
                               const int64_t *padding, const int64_t *dilation, int ceil_mode,
                               dt_tensor **values, dt_tensor **indices);
/* avg_pool2d(x, kernel_size, stride, padding, ceil_mode, count_include_pad,
 * divisor_override): `divisor_override` NULL for None (0 is torch's
 * "divisor must be not zero", DT_EOP). */
DT_API dt_tensor *dt_avg_pool2d(dt_tensor *x, const int64_t *kernel_size, const int64_t *stride,
                                const int64_t *padding, int ceil_mode, int count_include_pad,
                                const int64_t *divisor_override);
/* adaptive_avg_pool2d(x, output_size) with 2 sizes >= 0. An output of 1x1 is
 * torch's mean over the last two dims (keepdim), which takes any x of 2 or
 * more dims; other sizes take 3-D or 4-D x with nonzero H and W. */
DT_API dt_tensor *dt_adaptive_avg_pool2d(dt_tensor *x, const int64_t *output_size);
/* adaptive_max_pool2d(x, output_size): *values and, when `indices` is not
 * NULL, *indices (int64, as return_indices=True), as dt_max_pool2d. */
DT_API dt_status dt_adaptive_max_pool2d(dt_tensor *x, const int64_t *output_size, dt_tensor **values,
                                        dt_tensor **indices);

/* ------------------------------------- creation and data-dependent ops */
/* Random integers, scans, sorting and ops whose result shape depends on the
 * values (src/ops/factory.c, sort_scan.c). Like every op they validate at
 * the call and return a new reference or NULL (the two-output ops a status
 * and new references through their out-parameters). */

/* torch.randint(low, high, shape, dtype=dtype): uniform integers in
 * [low, high) drawn from dtorch's random stream (dt_manual_seed) for the
 * global shape, so the values are the same whatever the mesh and placements
 * (each device draws the global tensor and keeps its region). Any dtype;
 * errors as torch's, at the call: low >= high, or a bound outside an
 * integer dtype's range (DT_EOP). Placements as the other factories. */
DT_API dt_tensor *dt_randint(dt_graph *g, dt_dtype dtype, int64_t low, int64_t high, int ndim,
                             const int64_t *shape, dt_mesh *mesh, const dt_placement *placements);

/* torch.cumsum(a, dim, dtype): `dtype` < 0 means torch's default (bool and
 * integers accumulate in int64). Per mesh dim: R->R, S(d)->S(d) for d != dim,
 * P->P (cumsum is linear; not when floats are summed into an integer dtype).
 * S(dim) redistributes by itself: the devices along that mesh dim all-gather
 * the dim, each runs the cumsum of the whole dim on its part of the other
 * dims and keeps its own shard, so the result stays S(dim) and equals the
 * unsharded cumsum bit for bit. */
DT_API dt_tensor *dt_cumsum(dt_tensor *a, int64_t dim, int dtype);

/* torch.sort(a, dim, descending, stable): *values (a's dtype) and *indices
 * (int64); either out-parameter may be NULL when that output is not wanted
 * (argsort passes values = NULL), but not both. On success the non-NULL ones
 * hold new references; on failure they are set to NULL. Per mesh dim: R->R,
 * S(d)->S(d) for d != dim. S(dim) redistributes by itself: the devices along
 * that mesh dim all-gather the dim and sort it whole, so that mesh dim
 * becomes Replicate. Partial is rejected (DT_EPLACEMENT): the order of a sum
 * is not the sum of orders. */
DT_API dt_status dt_sort(dt_tensor *a, int64_t dim, int descending, int stable, dt_tensor **values,
                         dt_tensor **indices);
/* torch.topk(a, k, dim, largest, sorted): values and int64 indices of size k
 * along dim (0 <= k <= size of dim, else DT_EOP "selected index k out of
 * range"; a bool `a` on a CPU mesh too, as torch has no CPU kernel for it);
 * out-parameters and placements as dt_sort. */
DT_API dt_status dt_topk(dt_tensor *a, int64_t k, int64_t dim, int largest, int sorted, dt_tensor **values,
                         dt_tensor **indices);

/* torch.nonzero(a): the int64 [n, ndim] indices of a's nonzero elements in
 * row-major order (NaN counts as nonzero, -0.0 as zero). The shape depends
 * on the values, so this WAITS: it reads a's value (DT_EKERNEL, NULL, when a
 * kernel it depends on failed), computes the indices on the calling thread
 * and distributes them on a's mesh, all Replicate. Any input placements. */
DT_API dt_tensor *dt_nonzero(dt_tensor *a);

/* ------------------------------------------------------------ user kernels */

/* A user kernel: the caller's own code run on each device's local pieces
 * (Python's dtorch.local_map and dtorch.library.custom_op; any C program).
 * `run` is called on the worker thread of each device of the output's mesh,
 * in that device's stream order, once per device: `rank` is the device's
 * flat index in the mesh (row-major), `in_dl` the n_in inputs' local pieces
 * as DLPack DLManagedTensor pointers, NEW references the callee owns (it
 * must call each one's deleter, or hand it to a consumer that does, such as
 * torch.from_dlpack). It returns DT_OK with *out_dl a new DLManagedTensor
 * that the runtime takes over (its local result, which must have the
 * output's dtype and the device's local shape, else the result is poisoned
 * with a message saying both), or an error status with a message in err
 * (at most errlen bytes, NUL-terminated): the output is poisoned and the
 * message surfaces as DT_EKERNEL at the next read, after the op's name, the
 * device and the call site. `release(ctx)` is called once, on any thread
 * (a worker's, the controller's or the caller's), when no kernel can call
 * `run` any more. Only backends with DLPack run user kernels (the torch
 * backend; the ref backend poisons the output with DT_EUNSUPPORTED), and not
 * on worker nodes: the function lives in this process. */
typedef dt_status (*dt_user_run_fn)(void *ctx, int64_t rank, int n_in, void *const *in_dl, void **out_dl,
                                    char *err, size_t errlen);
typedef struct dt_user_kernel {
    const char *name;           /* shown in messages, explain and traces; copied */
    dt_user_run_fn run;         /* required */
    void (*release)(void *ctx); /* optional */
    void *ctx;
} dt_user_kernel;

/* Records one user-kernel node with inputs `in` (0 to 6, all on
 * `mesh`, taken as they are laid out: each device's piece, Partial addends
 * included) and one output of dtype, global shape and placements on `mesh`
 * (NULL: the first input's mesh). The caller states the output's layout; the
 * kernel must produce each device's block of it. On success the runtime owns
 * uk->ctx (release is called once the kernels have run); on failure
 * (DT_EINVAL for a NULL or foreign handle, a bad shape or placements; no
 * node is recorded) release is called before returning. New reference or
 * NULL. Client threads. */
DT_API dt_tensor *dt_user_op(dt_graph *g, const dt_user_kernel *uk, dt_tensor *const *in, int n_in,
                             dt_dtype dtype, int ndim, const int64_t *shape, dt_mesh *mesh,
                             const dt_placement *placements);

/* Called by a user kernel's run function, on its worker thread, while it
 * runs: the worker's native stream (CUDA: the cudaStream_t the device's
 * kernels are queued on, where the function must queue its own work so that
 * it is ordered after the inputs and before the readers of its output), or
 * NULL on a device without one (CPU) and on any other thread. */
DT_API void *dt_user_kernel_stream(void);

/* ------------------------------------------------------- operator registry */

/* One user-facing operator: its torch name, its family, the placement
 * combinations it accepts per mesh dim, and whether it redistributes by
 * itself. docs/operators.md is generated from this table. */
typedef struct dt_op_doc {
    const char *name;
    const char *family;
    const char *signatures;
    int redistributes;
} dt_op_doc;

/* Number of registered operators. */
DT_API int dt_op_doc_count(void);
/* Operator i (0 <= i < count), or NULL. Static storage. */
DT_API const dt_op_doc *dt_op_doc_get(int i);

/* The torch name of a sub-op (dtorch_ops.def): "add" for DT_BINARY_ADD,
 * "div" for DIV and DIV_TRUNC, "floor_divide" for DIV_FLOOR, ...; NULL for
 * a value out of range. Static storage, any thread. */
DT_API const char *dt_binary_op_name(dt_binary_op op);
DT_API const char *dt_unary_op_name(dt_unary_op op);
DT_API const char *dt_reduce_op_name(dt_reduce_op op);
DT_API const char *dt_activation_name(dt_activation_kind kind);

#ifdef __cplusplus
}
#endif

#endif /* DTORCH_DTORCH_OPS_H */
