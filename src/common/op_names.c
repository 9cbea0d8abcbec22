/*
 * The sub-op names of the public enums (dt_binary_op_name, dt_unary_op_name,
 * dt_reduce_op_name), from the public X-macro rows of dtorch_ops.def. At the
 * bottom of the library so that every layer — the 'ref' backend's messages
 * as much as the operator families — can name a sub-op. Any thread.
 */
#include "dtorch/dtorch_ops.h"

static const char *const binary_names[DT_BINARY_COUNT] = {
#define DT_BINARY_OP(E, name, ...) [DT_BINARY_##E] = #name,
#include "dtorch/dtorch_ops.def"
};

static const char *const unary_names[DT_UNARY_COUNT] = {
#define DT_UNARY_OP(E, name, ...) [DT_UNARY_##E] = #name,
#include "dtorch/dtorch_ops.def"
};

static const char *const reduce_names[DT_REDUCE_COUNT] = {
#define DT_REDUCE_OP(E, name, ...) [DT_REDUCE_##E] = name,
#include "dtorch/dtorch_ops.def"
};

const char *dt_binary_op_name(dt_binary_op op) {
    return (unsigned)op < DT_BINARY_COUNT ? binary_names[op] : NULL;
}

const char *dt_unary_op_name(dt_unary_op op) {
    return (unsigned)op < DT_UNARY_COUNT ? unary_names[op] : NULL;
}

const char *dt_reduce_op_name(dt_reduce_op op) {
    return (unsigned)op < DT_REDUCE_COUNT ? reduce_names[op] : NULL;
}
