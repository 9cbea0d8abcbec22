/*
 * Capture and replay (docs/decisions.md, "Replay: per-node templates, keyed on a full signature"): the
 * controller's cache of lowered nodes. A node's lowering is a function of
 * its op, attributes, the layouts (metas) of its inputs and output, which
 * input blobs are the same blob, whether the window's passes ran (the reuse
 * mark, DT_KF_REUSE, follows from the op and the layouts) and the graph's
 * overlap setting: every value is immutable and every lowering
 * function reads only those (window.h, passes/dce.c). So the kernels it made
 * once, with their blobs named relative to the node (input j on device d,
 * or "the output of the node's k-th kernel"), are a template: a later node
 * with the same signature gets copies of those records bound to its own
 * input blobs and fresh output blobs, without lowering again. Collectives get
 * their group's next sequence number, so (group, seq) pairs still match on
 * every rank.
 *
 * A node lowered as one image of a run of shared records (lower_step.c)
 * has that image as its template: a hit appends a copy of it to the mesh's
 * open run, reading the new node's inputs' groups (dt__lw_step_replay), so
 * a repeated step costs per node its check and one image, and one message
 * per mesh per run; what the signature does not hold (the switches, taps,
 * recording) is asked again at each hit.
 *
 * Runs: each template remembers the templates that followed it; a node is
 * compared first with the previous node's successors, so a loop body after
 * its first node is found without a hash or table probe (docs/decisions.md,
 * "Replay runs"). The comparison is the full signature either way.
 *
 * What is never cached: nodes that own something (n->extra: sources, reads,
 * syncs, gates, chains), lowerings that made a kernel with a handle (future,
 * assembly, gate) or named a blob that is neither an input's nor made by one
 * of its own kernels, and failed lowerings. Nothing is captured or replayed
 * while explain or traces record (core/records/trace.h).
 *
 * Threads: controller only (one cache per graph, in the controller loop).
 * Nothing here locks.
 */
#ifndef DT_CORE_REPLAY_H
#define DT_CORE_REPLAY_H

#include "core/controller/lower.h"

typedef struct dt__replay dt__replay;

/* A new, empty cache; NULL when out of memory (the controller then lowers
 * every node). */
dt__replay *dt__replay_new(void);
/* Frees the cache (NULL is ignored). Templates hold no references. */
void dt__replay_free(dt__replay *r);

/* Adds the round's hits and misses to g's counters (dt_graph_get_replay_
 * stats); the controller calls it once a round, before the round's kernels
 * are handed over, so a read that waits for them sees the counts. */
void dt__replay_publish(dt__replay *r, dt_graph *g);
/* Drops every template (replay turned off); cheap when there is none. */
void dt__replay_clear(dt__replay *r);

/* Before node n is lowered (`passes`: whether the window's passes ran on
 * its round; the lowering then takes the reuse mark, dt__reuse_mark):
 *  1  n was replayed: its kernels are queued and its output has its blobs;
 *  0  lower it normally;
 *  2  lower it normally while the cache captures its kernels; then call
 *     dt__replay_end with the lowering's status. */
int dt__replay_begin(dt__replay *r, dt__lower *L, const dt__node *n, int passes);
void dt__replay_end(dt__replay *r, dt__lower *L, const dt__node *n, dt_status st);
/* Called by dt__lw_stream_append for every record queued while a capture is
 * on (g->replay_cap). */
void dt__replay_note(dt__replay *r, dt__stream *s, dt__krec *k);
/* The node being captured (n, output `out`) was appended to a run of
 * shared records as image img reading `in` (core/controller/lower_step.c):
 * when that image is all its lowering made, the template is the image
 * (replayed by dt__lw_step_replay into the open run, without lowering). */
void dt__replay_note_image(dt__replay *r, const dt__node *n, const dt__tval *out, const dt__krec *img,
                           dt__tval *const *in);
/* The node being captured made shared collective record `attr` (alen bytes
 * as packed) over mesh dim md on streams of `stream_kind`, reading group
 * gin and making group gout (core/controller/lower_coll.c): when that record
 * is all its lowering made, from its input 0 to its output, the template is
 * the record (replayed by dt__lw_coll_replay). */
struct dt__bgroup;
void dt__replay_note_coll(dt__replay *r, int md, int stream_kind, const uint8_t *attr, uint32_t alen,
                          const struct dt__bgroup *gin, const struct dt__bgroup *gout);
/* The node being captured made what a template cannot hold (a kernel
 * reading a blob that is no input's, a run's image of a blob it made, a
 * shared collective of per-device blobs): its template
 * keeps only the signature (unusable: later sightings are lowered at once). */
void dt__replay_uncapturable(dt__replay *r);

#endif /* DT_CORE_REPLAY_H */
