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

/* Appends one line to `index_path` with one writev on an O_APPEND
 * descriptor (so it lands whole whoever else appends), creating the file
 * when `create`. A `path` or `msg` holding control characters is replaced by
 * a note saying so. Returns 0, or -1 (errno unchanged).
 * async-signal-safe */
int wp_event_append(const char *index_path, unsigned pid, const char *kind, const char *path,
		    unsigned long long lost, const char *msg, size_t len, int create);

#endif
