/* convert: the `wallprof` command. The profiled process only captures;
 * this program starts it (record) and turns its raw dumps (output/raw.h)
 * into profiles, summaries and comparisons:
 *
 *   main.c     the command line: which subcommand, --help, --version
 *   record.c   `wallprof record`: runs a program under the library
 *   convert.c  `wallprof convert`: a dump or a profile converted by hand, and
 *              the library's internal modes (--library, --tree)
 *   job.c      one dump converted for the library (--library): events instead
 *              of messages, the dump deleted once its profiles are written
 *   tree.c     every dump a profiled tree's descendants leave (--tree), one
 *              after the other in one process that keeps its symbolizer
 *              sessions from dump to dump
 *   report.c   `wallprof report`: a summary of a profile
 *   diff.c     `wallprof diff`: what changed between two profiles
 *   upload_cmd.c  `wallprof upload`: flushes the upload spool (upload/)
 *   charge.c   what report and diff charge a sample to; their tables
 *   tally.c    counts by key in first-seen order
 *
 * Nothing here runs in the profiled process. */
#ifndef WP_CONVERT_CONVERT_H
#define WP_CONVERT_CONVERT_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

struct wp_sym_pool;
struct wp_format;

/* Exit statuses of every subcommand but record (which has the program's). */
enum { WP_EXIT_OK = 0, WP_EXIT_FAIL = 1, WP_EXIT_USAGE = 2 };

/* The subcommands; argv[0] is the subcommand's name, the options follow.
 * Each returns the exit status. */
int wp_cmd_record(int argc, char **argv);
int wp_cmd_convert(int argc, char **argv);
int wp_cmd_report(int argc, char **argv);
int wp_cmd_diff(int argc, char **argv);
int wp_cmd_upload(int argc, char **argv);

/* One line "wallprof: ..." on stderr; returns `status`. */
int wp_cli_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The formats of a comma-separated list of names ("sentry,pprof"), each
 * once, into `out` (room for `max`). Returns how many, or -1 with a
 * one-line reason in `err` (an unknown or empty name, too many). */
int wp_cv_parse_formats(const char *list, const struct wp_format **out, size_t max, char *err,
			size_t errlen);

#define WP_CV_MAX_FORMATS 8

/* tally.c: counts by key (an interned string, compared by pointer) in the
 * order keys were first seen, for report and diff. Zeroed to start. */
struct wp_tally_entry {
	const void *key;
	unsigned long long n, on; /* samples; of which on CPU */
	unsigned long long n2, on2; /* diff: the same in the second profile */
	size_t order;             /* when first seen */
	const void *extra;        /* the caller's */
};
struct wp_tally {
	struct wp_tally_entry *e;
	size_t n, cap;
	uint32_t *index;
};
/* The entry of `key`, added with zero counts when new; NULL on out of memory.
 * Entries move when one is added: do not keep pointers across adds. */
struct wp_tally_entry *wp_tally_add(struct wp_tally *t, const void *key);
/* The entry of `key`, or NULL. */
const struct wp_tally_entry *wp_tally_get(const struct wp_tally *t, const void *key);
/* The entry with the most samples, the first seen among equals; NULL when empty. */
const struct wp_tally_entry *wp_tally_max(const struct wp_tally *t);
void wp_tally_free(struct wp_tally *t);

/* charge.c: per stack of a model, what a sample of it is charged to: the
 * innermost in-app frame (one of the main executable), else the leaf. */
struct wp_model;
struct wp_charge {
	const char **label; /* per stack: that frame's name (interned in the model;
			       " [inlined]" appended for an inlined frame);
			       `none` for a stack without frames */
	const char **line;  /* per stack: its "file:line", or NULL */
	const char **app;   /* per stack: the innermost in-app frame's name, or NULL */
	const char *none;   /* "(no stack)" */
};
/* Returns 0, or -1 on out of memory (then wp_charge_free). */
int wp_charge_build(struct wp_model *m, struct wp_charge *c);
void wp_charge_free(struct wp_charge *c);

/* A table printed in aligned columns (two spaces in front, trailing blanks
 * cut) or as Markdown; the first row is the header. */
struct wp_table {
	size_t ncols;      /* set by the caller, at most 16 */
	const char *align; /* one 'l' or 'r' per column */
	char **cells;      /* row-major, malloc'd */
	size_t n, cap;
};
/* Appends one cell (printf). Returns 0, or -1 on out of memory. */
int wp_table_cell(struct wp_table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the table on stdout and empties it. */
void wp_table_print(struct wp_table *t, int markdown);

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
	const char *formats;  /* comma-separated formats, NULL: "sentry"; each written
				 beside `out` with its suffix (formats.h) */
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

/* Whether events go to a tree's index (wp_cv_report_to). */
int wp_cv_to_index(void);

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

/* cache_config.c: the debug cache from WALLPROF_DEBUG_CACHE (a directory,
 * or "off"; default $XDG_CACHE_HOME/wallprof/debug, else
 * ~/.cache/wallprof/debug) and WALLPROF_DEBUG_CACHE_MAX_MB (default 1024),
 * handed to the symbolizer, the first time only (later calls return 0). Returns 0, or -1 with a
 * one-line reason in `err` (a bad value, a directory others can write:
 * the cache is off then). */
int wp_cv_debug_cache_load(char *err, size_t errlen);
/* The same for a command run by hand (convert, report, diff): the reason
 * on stderr, one "wallprof:" line. */
void wp_cv_debug_cache_by_hand(void);

/* send.c: uploads. Reads the upload settings from the environment the
 * library passed (WALLPROF_SENTRY_*, WALLPROF_PYROSCOPE_*, WALLPROF_SPOOL_*,
 * WALLPROF_UPLOAD_TIMEOUT, WALLPROF_SEND_ARGS, WALLPROF_CHUNK_SECONDS) the
 * first time, one event per bad value. Returns 1 when something is to be
 * sent somewhere, 0 otherwise. */
int wp_cv_send_load(void);
/* A string variable of the environment without control characters, at
 * most `max - 1` bytes, into `out` ("" when unset, or with one event when
 * it is not such a string). */
void wp_cv_env_str(const char *name, char *out, size_t max);
/* A 0/1 variable of the environment; `def` when unset or (with one event)
 * anything else. */
int wp_cv_env_flag(const char *name, int def);
/* Puts one request in this run's spool: 1, or -1 with an event. */
struct wp_upload_item;
int wp_cv_send_put(const char *run, const struct wp_upload_item *it);

/* pyroscope.c: reads WALLPROF_PYROSCOPE_* (one event per bad value);
 * returns 1 when pushes are to be made. */
int wp_cv_pyroscope_load(void);
/* Puts the push of `m` in the spool's run `run` (`what` names it in
 * messages): 1, 0 when there is nothing worth sending (fewer than 2
 * samples), -1 with an event when it could not. */
int wp_cv_pyroscope_put(const struct wp_model *m, const char *run, const char *what);

/* The part of `m` no periodic chunk took (m->p.tail_chunk: the process
 * ended between two periods), as that chunk: a shallow copy of `m` but for
 * its samples, those of chunk_from_ns on (a sample that straddles it cut),
 * for writers, which only read. Returns 0, or -1 out of memory (no
 * samples then). Freed with wp_cv_tail_free, which frees only that. */
int wp_cv_tail_model(const struct wp_model *m, struct wp_model *t);
void wp_cv_tail_free(struct wp_model *t);

/* Whether some destination is set (after wp_cv_send_load). */
int wp_cv_send_on(void);
/* Sends `m` (a chunk; or, when chunks are off, an exit, exec or snapshot
 * profile) to every destination through the spool, then flushes the spool
 * for up to WALLPROF_UPLOAD_TIMEOUT seconds; events say what was not sent.
 * Returns 1 when it is dealt with (spooled, sent or waiting, for some
 * destination; or nothing in it worth sending, such as a tail of a tick),
 * 0 when nothing is to be sent at all (no destination; a profile the
 * chunks already carry), -1 when it could not be spooled (the caller
 * writes files instead). */
int wp_cv_send_model(const struct wp_model *m);
/* The first process of the tree is exiting: every flush from now on ends
 * by `deadline_ms` (CLOCK_MONOTONIC), whatever WALLPROF_UPLOAD_TIMEOUT
 * would allow (the root's exit is delayed by at most that, once); 0 lifts
 * it. */
void wp_cv_send_cap(double deadline_ms);

/* Tree mode (--tree): converts every dump pending in the index `index`
 * (output/dump_queue.h), in order, while `lock_fd` (an open descriptor of
 * the index, flock-held: the tree's one converter) stays locked; waits for
 * more, and ends when the root has said "end" and nothing is pending, or
 * after `linger_s` seconds with nothing new (0: 3 s; the library asks for
 * more than its chunk period, so that one converter, its symbolizer
 * sessions kept, serves a process's chunks). A dump that takes longer than
 * `timeout_s` ends us (SIGALRM), and the next converter skips it.
 * `platform`, `formats`: as in wp_cv_job. Returns the exit status. */
int wp_cv_tree(const char *index, int lock_fd, const char *platform, const char *formats,
	       unsigned timeout_s, unsigned linger_s);

#endif
