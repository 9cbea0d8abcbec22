/* The library's version: the values of the header it was built with. */
#include "dtorch/dtorch.h"

const char *dt_version(void) { return DT_VERSION_STRING; }

int dt_version_number(void) { return DT_VERSION_NUMBER; }
