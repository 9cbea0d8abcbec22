/*
 * The views operator family (to be filled by the operator-library issue).
 */
#include "core/core.h"
#include "ops/ops.h"

const dt_op_doc dt__docs_views[] = {
    {NULL, NULL, NULL, 0},
};
