/*
 * The composition root: when libdtorch is loaded (or a static program
 * starts), each layer's hooks are registered with the layers below it, so
 * that a lower layer reaches a higher one only through what is registered
 * here, never by name (tools/check_layers.py checks that). Runs once,
 * single-threaded, before any graph exists.
 */
#include "core/client/segment.h"
#include "core/records/node.h"
#include "ops/ops.h"

__attribute__((constructor)) static void dt_init(void) {
    dt__ops_register(dt__op_rows);
    /* The segmented-dim gate's conversion, built out of ops. */
    dt__seg_set_regularise(dt__seg_regularise);
}
