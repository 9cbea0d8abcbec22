/*
 * The registered op table (node.h). Written once, by src/init.c's
 * constructor before main() or when libdtorch is loaded, then only read.
 */
#include "core/records/node.h"

const dt__op_info *dt__ops;

void dt__ops_register(const dt__op_info *rows) { dt__ops = rows; }
