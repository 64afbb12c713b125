/* preload: internal API of the injected runtime (configuration, logging,
 * module map). Only the constructor, the sampler thread and the dump path use
 * these; the signal handlers use none of them unless marked. */
#ifndef WP_PRELOAD_H
#define WP_PRELOAD_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "../symbolize/symbolize.h"
#include "as_safe.h"

enum wp_log_level { WP_LOG_QUIET, WP_LOG_ERROR, WP_LOG_INFO, WP_LOG_DEBUG };

#define WP_PATH_MAX 4096

struct wp_config {
	unsigned hz;             /* WALLPROF_HZ: ticks per second */
	char output[WP_PATH_MAX];/* WALLPROF_OUTPUT: template with %p, %n */
	unsigned ring_seconds;   /* WALLPROF_RING_SECONDS: window kept */
	unsigned max_depth;      /* WALLPROF_MAX_DEPTH: frames per stack */
	unsigned max_threads;    /* WALLPROF_MAX_THREADS: threads tracked at once */
	unsigned ring_mb;        /* WALLPROF_RING_MB: hard cap on the ring's memory */
	int signal;              /* WALLPROF_SIGNAL: sampling signal */
	int snapshot_signal;     /* WALLPROF_SNAPSHOT_SIGNAL: 0 = off */
	int log_level;           /* WALLPROF_LOG */
	char platform[32];       /* WALLPROF_SENTRY_PLATFORM */
	char formats[64]; /* WALLPROF_FORMAT: the converter's -f list, "sentry" by default */
	int enabled; /* WALLPROF_ENABLE=0 turns the library into a no-op */
	int test_signal_blocked; /* WALLPROF_TEST_SIGNAL_BLOCKED=1: tests only, see README */
	int test_site_check; /* WALLPROF_TEST_SITE_CHECK=1: tests only, see README */
	unsigned test_handler_delay_us; /* WALLPROF_TEST_HANDLER_DELAY_US: tests only, see README */
	unsigned test_scan_hold_us; /* WALLPROF_TEST_SCAN_HOLD_US: tests only, see README */
	unsigned test_enter_signal; /* WALLPROF_TEST_ENTER_SIGNAL: tests only, see README */
	unsigned test_rest_wake_delay_us; /* WALLPROF_TEST_REST_WAKE_DELAY_US: tests only */
	int test_walk_mask_strict; /* WALLPROF_TEST_WALK_MASK_STRICT=1: tests only */
	int test_warmup_report; /* WALLPROF_TEST_WARMUP_REPORT=1: tests only */
	unsigned test_fork_reset_hold_us; /* WALLPROF_TEST_FORK_RESET_HOLD_US: tests only */
	unsigned test_loader_hold_us; /* WALLPROF_TEST_LOADER_HOLD_US: tests only */
	int follow_children; /* WALLPROF_FOLLOW_CHILDREN: exec'd children inherit the preload */
	int cpu_timers; /* WALLPROF_CPU_TIMERS: running threads sampled by CPU-time timers */
	int log_explicit; /* WALLPROF_LOG was set: it applies to every process of the tree */
	int debuginfod; /* WALLPROF_DEBUGINFOD=1 */
	char tmpdir[256]; /* $TMPDIR if absolute and short enough, else "/tmp" */
	char converter[WP_PATH_MAX]; /* WALLPROF_CONVERTER: the converter program, "" = look */
	unsigned convert_timeout; /* WALLPROF_CONVERT_TIMEOUT: seconds an exit waits for it */
	unsigned chunk_seconds; /* WALLPROF_CHUNK_SECONDS: a chunk every this often, 0 = off */
	unsigned upload_timeout; /* WALLPROF_UPLOAD_TIMEOUT: seconds uploads may add to the exit */
};

#define WP_DEFAULT_HZ 101
#define WP_DEFAULT_OUTPUT "wallprof.%p.json"
#define WP_DEFAULT_RING_SECONDS 30
#define WP_DEFAULT_MAX_DEPTH 128
#define WP_DEFAULT_MAX_THREADS 16384
#define WP_DEFAULT_RING_MB 64
#define WP_MAX_RING_MB 4096
#define WP_MAX_HZ 10000
#define WP_MAX_RING_SECONDS 3600
#define WP_MAX_MAX_DEPTH 1024
#define WP_MAX_MAX_THREADS 65536
#define WP_DEFAULT_CONVERT_TIMEOUT 60
#define WP_MAX_CONVERT_TIMEOUT 3600
#define WP_MAX_CHUNK_SECONDS 60 /* Sentry refuses chunks over 66 s */
#define WP_DEFAULT_UPLOAD_TIMEOUT 5
#define WP_MAX_UPLOAD_TIMEOUT 300

/* Reads every WALLPROF_* variable (and TMPDIR) once, with getenv, in the
 * constructor: later the program may change its environment under us. A bad
 * value logs one line naming the variable and the value used instead. */
void wp_config_load(struct wp_config *c);

/* Parses a signal spec: "SIGPROF", "PROF", "27", "SIGRTMIN+3", "RTMAX-1".
 * Returns the number, 0 for "off"/"none"/"0" when allow_off, -1 if invalid. */
int wp_config_parse_signal(const char *s, int allow_off);

/* Signal name for messages ("SIGPROF", "SIGRTMIN+3"), in `buf` (cut to
 * `len` as snprintf would). async-signal-safe */
WP_AS_SAFE const char *wp_signal_name(int sig, char *buf, size_t len);

/* Logging (log.c): one line "wallprof: ..." on stderr with write(2), no
 * stdio, when `level` <= wp_log_level. Only while fd 2 is still the file it
 * was at start; once the program has closed it (coreutils do at exit) or
 * given the number to another file (a daemon), the line goes to the file
 * stderr was at start, opened again by its path, when that was a terminal
 * or a regular file still under that path; else to the tree's index. Never
 * into whatever file now has number 2. wp_log_level is WALLPROF_LOG when
 * set; else info in the root of the profiled tree and quiet in its
 * descendants, whose error and info lines go to the tree's index instead
 * (tree.h) for the root's report. */
extern int wp_log_level;

/* In wp_config_load, first: WALLPROF_LOG (into `level` and whether it was
 * set, `explicit_`), and which file stderr is (and its path, when this
 * process may speak). */
void wp_log_init(int *level, int *explicit_);

void wp_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* wp_log with the index line's kind ("wrote", "short"; see tree.h), the
 * file it is about (or NULL) and the samples lost. The root records its
 * "wrote" and "short" events too, in an index its descendants created. */
void wp_log_event(int level, const char *kind, const char *path, unsigned long long lost,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* wp_log for a signal handler: `msg` (no prefix, no newline) written with one
 * system call, or recorded in the tree's index as wp_log_event would.
 * async-signal-safe (on a thread of the program's) */
WP_AS_SAFE void wp_log_raw(int level, const char *kind, const char *path, unsigned long long lost,
			   const char *msg, size_t len);

/* In a fork()ed child: a descendant from now on (quiet unless WALLPROF_LOG
 * was set). async-signal-safe */
WP_AS_SAFE void wp_log_forked(void);

/* Module map: every ELF object ever loaded, kept after dlclose. The raw
 * dump has it as it is; the reader leaves out an unloaded object whose
 * range a live one reuses. */
struct wp_modmap {
	struct wp_module *mods;
	size_t nr, cap;
	unsigned long long adds, subs; /* dl_iterate_phdr generation last seen */
};

/* Rescans loaded objects when the loader's add/remove counters moved.
 * Returns the number of new modules. Not async-signal-safe. */
int wp_modmap_refresh(struct wp_modmap *m);

/* Descriptors (fds.c). The sampler thread calls wp_fds_go_private() first:
 * from then on it works in a private copy of the descriptor table holding
 * none of the program's descriptors, so its opens never take a number the
 * program would have got. Returns 0, or -1 (unsupported kernel: it stays in
 * the shared table). */
int wp_fds_go_private(void);

/* Whether the calling thread works in the private table (its descriptor
 * numbers mean nothing in the program's, nor in a forked child's).
 * async-signal-safe */
WP_AS_SAFE int wp_fds_private_here(void);

/* The program's current fd 2 as a descriptor this thread can write to (from
 * a private table: a duplicate through pidfd_getfd), or -1. Give it back with
 * wp_fds_stderr_done(). */
int wp_fds_stderr(void);
void wp_fds_stderr_done(int fd);

#endif
