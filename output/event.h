/* event: one line of a profiled tree's index file, appended whole.
 *
 *     <pid> TAB <kind> TAB <path or empty> TAB <samples lost> TAB <message> LF
 *
 * Written by the profiled processes (preload/tree.c) and by the converter
 * for the dumps it turns into profiles in the background; read by the root's
 * report (preload/tree.h says who writes what). */
#ifndef WP_EVENT_H
#define WP_EVENT_H

#include <stddef.h>

#define WP_EVENT_FIELDS 5

/* Appends one line to `index_path` with one writev on an O_APPEND
 * descriptor (so it lands whole whoever else appends), creating the file
 * when `create`. A `path` or `msg` holding control characters is replaced by
 * a note saying so. Returns 0, or -1 (errno unchanged).
 * async-signal-safe */
int wp_event_append(const char *index_path, unsigned pid, const char *kind, const char *path,
		    unsigned long long lost, const char *msg, size_t len, int create);

/* Splits one line (without its LF) in place into its WP_EVENT_FIELDS
 * fields at the first four tabs (the message, last, may hold more). The
 * same layout serves the converter's report on its pipe, whose first field
 * is the level instead of the pid. Returns 0, or -1 when the line has fewer
 * fields (not one of ours). async-signal-safe */
int wp_event_split(char *line, size_t len, char *f[WP_EVENT_FIELDS]);

/* ---- the dumps an index still waits on ----------------------------------
 *
 * A descendant's raw dump is converted in the background by the tree's
 * converter (wallprof-convert --tree): the descendant appends
 *
 *     <pid> TAB raw TAB <raw dump> TAB 0 TAB <profile to write> LF
 *
 * and the converter, once it has dealt with the dump (its own lines:
 * wrote, short, error), appends "<pid> TAB done TAB <raw dump> TAB 0 TAB"
 * and a word. A dump is pending from its "raw" line until a "done" line
 * of the same process names the same path. A later "raw" line for a path still pending (two
 * processes under one output name) supersedes the earlier one: that
 * process's dump was overwritten. The root reads the queue to wait for
 * its descendants' profiles; the converter reads it as its work list. Not
 * async-signal-safe (malloc). */
struct wp_event_dump {
	unsigned pid;
	char *raw;  /* malloc'd */
	char *json; /* malloc'd */
};

struct wp_event_queue {
	struct wp_event_dump *v; /* in the order of their "raw" lines */
	size_t nr, cap;
};

/* Takes one split line into the queue: "raw" adds, "done" removes; other
 * kinds are ignored. When a "raw" line supersedes a pending dump, that
 * dump is moved to *superseded (the caller frees it with
 * wp_event_dump_free) and 1 is returned; else 0, or -1 on out of memory
 * (the line is not taken). */
int wp_event_queue_feed(struct wp_event_queue *q, char *const f[WP_EVENT_FIELDS],
			struct wp_event_dump *superseded);

/* Removes entry `i` (order kept) and hands it to the caller in *out. */
void wp_event_queue_take(struct wp_event_queue *q, size_t i, struct wp_event_dump *out);

void wp_event_dump_free(struct wp_event_dump *d);
void wp_event_queue_free(struct wp_event_queue *q);

#endif
