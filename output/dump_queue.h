/* dump_queue: the dumps a profiled tree's index still waits on, read from
 * the index as it grows.
 *
 * A descendant's raw dump is converted in the background by the tree's one
 * converter (wallprof --tree, convert/tree.c). The descendant
 * appends (output/event.h, wp_event_append_dump)
 *
 *     <pid> TAB raw TAB <raw dump> TAB 0 TAB <profile> TAB <fallback> LF
 *
 * The converter appends "<pid> TAB taking TAB <raw dump> ..." before it
 * converts it, its own lines (wrote, short, error), then "<pid> TAB done TAB
 * <raw dump> ..." before it deletes the dump. A dump is pending from its
 * "raw" line until a "done" line of the same pid names the same path. A
 * pending dump already taken when a converter starts was being converted
 * by one that died (crashed, killed, past its time): it is not taken again.
 * The root appends "end" when it begins its final exit, its message the
 * CLOCK_MONOTONIC time in ms by which uploads must be done (its exit is
 * delayed by at most WALLPROF_UPLOAD_TIMEOUT for them). A "raw" line naming a path
 * that is still pending replaces the older entry, which is handed back as
 * superseded (a dump is never written over another, so only a damaged or
 * forged index does that).
 *
 * The root reads the queue to wait for its descendants' profiles; the
 * converter reads it as its work list. Not async-signal-safe (malloc). */
#ifndef WP_DUMP_QUEUE_H
#define WP_DUMP_QUEUE_H

#include <stddef.h>
#include <sys/types.h>

struct wp_dump_entry {
	unsigned pid;
	int taken;     /* a converter has appended "taking" for it */
	unsigned tries; /* the converter's: times it found the dump locked */
	char *raw;     /* malloc'd, like the two below */
	char *json;
	char *json_fb;
};

struct wp_dump_queue {
	struct wp_dump_entry *v; /* in the order of their "raw" lines */
	size_t nr, cap;
	int end;   /* the root has appended "end" */
	unsigned end_pid;                   /* the root that appended it */
	unsigned long long end_deadline_ms; /* its message: CLOCK_MONOTONIC ms by which
					       uploads must end (0: none) */
	/* the reader's state */
	int fd;    /* the index, open for reading, or -1 */
	off_t off;               /* bytes taken so far */
	size_t len;              /* bytes of a partial line in buf */
	int skipping;            /* inside a line longer than buf */
	char *buf;
};

/* Opens the index (a regular file; O_NONBLOCK, O_NOFOLLOW) and starts an
 * empty queue over it. Returns 0, or -1 with errno set. */
int wp_dump_queue_open(struct wp_dump_queue *q, const char *index_path);

/* Takes the complete lines appended since the last call. A line holding a
 * NUL byte or one longer than 64 KiB is skipped, as any line not ours. If
 * the index shrank (truncated), it is read again from the start with an
 * empty queue. `superseded(arg, e)` is called for an entry a later "raw"
 * line replaced (the entry is freed after it; NULL: just freed). Returns
 * 0, or -1 when the index cannot be read or memory runs out. */
int wp_dump_queue_read(struct wp_dump_queue *q,
		       void (*superseded)(void *arg, const struct wp_dump_entry *e), void *arg);

/* Removes entry `i` (order kept) and hands it to the caller in *out, who
 * frees it with wp_dump_entry_free. */
void wp_dump_queue_take(struct wp_dump_queue *q, size_t i, struct wp_dump_entry *out);

/* Puts an entry taken with wp_dump_queue_take back, at the end (the take
 * left room for it). */
void wp_dump_queue_put_back(struct wp_dump_queue *q, struct wp_dump_entry *e);

void wp_dump_entry_free(struct wp_dump_entry *e);

/* Frees the entries and the buffer and closes the index. */
void wp_dump_queue_close(struct wp_dump_queue *q);

#endif
