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

/* Appends the line that leaves a dump to the tree's converter:
 *
 *     <pid> TAB raw TAB <raw dump> TAB 0 TAB <profile> TAB <fallback> LF
 *
 * (output/dump_queue.h). Every path must be absolute and printable:
 * returns -1 otherwise, or when the line could not be written whole, and
 * the caller converts the dump itself. async-signal-safe */
int wp_event_append_dump(const char *index_path, unsigned pid, const char *raw, const char *json,
			 const char *json_fb);

#endif
