/*
 * dtorch overlap by schedule: the order the controller lowers a round's
 * nodes in (docs/decisions.md, "Overlap by schedule"; src/core/controller/sched.h).
 * Include after or instead of dtorch.h (it includes it).
 */
#ifndef DTORCH_SCHEDULE_H
#define DTORCH_SCHEDULE_H

#include "dtorch/dtorch.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Turns g's schedule on (1, the default unless DTORCH_SCHEDULE=0 was set
 * when g was made) or off (0: every round is lowered in program order), for
 * the controller rounds that start afterwards. On, compute that does not
 * read a collective's result is lowered ahead of compute that does, so the
 * collective runs on its communication stream meanwhile. Results are the
 * same either way. DT_EINVAL for a bad graph. Any thread. */
DT_API dt_status dt_graph_set_schedule(dt_graph *g, int on);

/* Nodes g's controller has lowered ahead of an older node of the same
 * round (the schedule's reorders), since g was made; -1 for a bad graph.
 * Any thread. */
DT_API int64_t dt_debug_nodes_reordered(dt_graph *g);

#ifdef __cplusplus
}
#endif

#endif /* DTORCH_SCHEDULE_H */
