/* convert: the converter program, wallprof-convert. The profiled process only
 * captures; this program turns its raw dumps (output/raw.h) into profiles:
 *
 *   main.c   the command line; a dump converted by hand
 *   job.c    one dump converted for the library (--library): events instead
 *            of messages, the dump deleted once its profile is written
 *   tree.c   every dump a profiled tree's descendants leave (--tree), one
 *            after the other in one process that keeps its symbolizer
 *            sessions from dump to dump
 *
 * Nothing here runs in the profiled process. */
#ifndef WP_CONVERT_CONVERT_H
#define WP_CONVERT_CONVERT_H

#include <stdarg.h>

struct wp_sym_pool;

/* The library's log levels, the first field of a report line. */
enum { WP_CV_ERROR = 1, WP_CV_INFO = 2, WP_CV_DEBUG = 3 };

/* One dump to convert. */
struct wp_cv_job {
	const char *raw;      /* the dump's name (messages, deletion) */
	const char *source;   /* what is read: raw, or /dev/fd/N */
	int fd;               /* the dump, open (deleted only if raw still names it), or -1 */
	const char *out;      /* the profile */
	const char *fallback; /* second try when out cannot be written, or NULL */
	const char *platform; /* the profile's platform, NULL: "native" */
	int keep_dump;        /* 1: the caller deletes the dump (after its own line) */
};

/* Whether `path` still names the file open as `fd` (nobody replaced it). */
int wp_cv_same_file(const char *path, int fd);

/* CLOCK_MONOTONIC in milliseconds. */
double wp_cv_mono_ms(void);

/* RAW with a trailing ".raw" replaced by ".json" (or ".json" appended),
 * malloc'd; NULL on out of memory. */
char *wp_cv_json_name(const char *raw);

/* Where events go: the tree's index `index`, as lines of process `pid`
 * (error and info levels only), or with index NULL our stdout, the report
 * pipe the library reads. */
void wp_cv_report_to(const char *index, unsigned pid);

/* One event, "<level> TAB <kind> TAB <path> TAB <lost> TAB <message>" on
 * the report pipe, or a line in the index (output/event.h). Control
 * characters in the message become '?'. */
void wp_cv_event(int level, const char *kind, const char *path, unsigned long long lost,
		 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Library mode: converts one dump, reports one final event ("wrote",
 * "short" or "error", perhaps an "info" after it), deletes the dump once a
 * profile is written or it is too short for one (unless j->keep_dump).
 * Symbolizes through `pool` when not NULL (sessions kept for the next
 * dump). Returns 0 when the dump is dealt with (a profile written, or too
 * short for one), 1 when no profile was written and the dump stays. */
int wp_cv_library(const struct wp_cv_job *j, struct wp_sym_pool *pool);

/* Tree mode (--tree): converts every dump pending in the index `index`
 * (output/dump_queue.h), in order, while `lock_fd` (an open descriptor of
 * the index, flock-held: the tree's one converter) stays locked; waits for
 * more, and ends when the root has said "end" and nothing is pending, or
 * after a while with nothing new. A dump that takes longer than
 * `timeout_s` ends us (SIGALRM), and the next converter skips it.
 * `platform`: as in wp_cv_job. Returns the exit status. */
int wp_cv_tree(const char *index, int lock_fd, const char *platform, unsigned timeout_s);

#endif
