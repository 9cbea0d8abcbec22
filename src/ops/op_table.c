/*
 * The op table's rows, generated from ops.def: one per node op, so none can
 * be missing. Core reads them through dt__ops (core/records/node.h) once
 * src/init.c has registered them; this is the one place that names each
 * op's functions.
 */
#include "core/client/segment.h"
#include "core/controller/lower.h"
#include "core/records/gate.h"
#include "ops/nn_int.h"
#include "ops/ops.h"

const dt__op_info dt__op_rows[DT_OP_COUNT] = {
#define DT_OP(E, name, lower, flags, rules, seg_rule, chainable, discard)                                    \
    [DT_OP_##E] = {name, lower, flags, rules, seg_rule, chainable, discard},
#include "ops/ops.def"
};
