/* tree: the profiled process tree and its one report.
 *
 * The process the user started is the root; every process it starts that
 * inherits the preload is a descendant. Descendants say nothing on their own
 * stderr (the program may read it: a test runner parsing its workers' output,
 * `git` relaying a hook's stderr); what they would have said goes, one line
 * per event, into the tree's index file beside the root's profile:
 *
 *     <pid> TAB <kind> TAB <path or empty> TAB <samples lost> TAB <message> LF
 *
 * kinds: "wrote" (a file was written: profile, snapshot, raw dump),
 * "short" (too short for a profile), "error", "info"; "raw" (a dump left
 * for the tree's converter, the profile to write as the message), "done"
 * (the converter is through with it, after its own lines) and "end" (the
 * root's: it waits no longer; output/event.h). The root reads the index at
 * its exit, after waiting for the dumps still pending (starting the
 * tree's converter if none runs), and prints one summary (files written,
 * fallbacks, losses).
 * The root is told to its descendants by
 * WALLPROF_TREE="<pid>.<start time>:<index path>", set in the environment at
 * start (the start time, from /proc/self/stat, tells an exec'd root from a
 * process that reuses its pid). */
#ifndef WP_TREE_H
#define WP_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "wallprof.h"

/* In wp_config_load, before anything is logged: reads WALLPROF_TREE and
 * decides whether this process is the root (no WALLPROF_TREE, or one naming
 * this very process: an exec'd root). */
void wp_tree_load(void);

/* In the constructor, once the configuration is final: a new root (not an
 * exec'd one) that lets children be profiled removes a stale index and
 * exports WALLPROF_TREE for its descendants. */
void wp_tree_export(const struct wp_config *c);

/* Whether this process is the root. async-signal-safe */
WP_AS_SAFE int wp_tree_is_root(void);

/* In a fork()ed child: it is a descendant from now on. async-signal-safe */
WP_AS_SAFE void wp_tree_forked(void);

/* Appends one event line to the index: descendants create it, the root
 * adds to an existing one (a tree without descendants has no index) unless
 * `create` (a line its closed or replaced stderr could not show). `path`
 * may be NULL; a `path` or `msg` with control characters is replaced by a
 * note saying so. Returns 0, or -1 when no line was written.
 * async-signal-safe */
WP_AS_SAFE int wp_tree_record(const char *kind, const char *path, unsigned long long lost,
			      const char *msg, size_t len, int create);

/* The index's path, or NULL when this process has none (a root that does
 * not follow its children). async-signal-safe */
WP_AS_SAFE const char *wp_tree_index(void);

/* The root, as its final exit begins: appends "end" to the index (when
 * there is one), its message the CLOCK_MONOTONIC time in ms by which the
 * tree's converter must have ended its uploads (output/dump_queue.h). */
void wp_tree_exiting(uint64_t upload_deadline_ms);

/* The root at its final exit: one summary of its descendants' lines in the
 * index, at info level (nothing when there is no index). Dumps that
 * descendants left for the tree's converter ("raw" lines without their
 * "done") are waited for until CLOCK_MONOTONIC `deadline_ns`, the
 * converter started if none runs; those still pending then are counted as
 * not converted. */
void wp_tree_report(uint64_t deadline_ns);

#endif
