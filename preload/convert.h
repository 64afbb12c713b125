/* convert: hands a raw dump to the converter program (`wallprof`, its --library mode) in
 * a process of its own, and relays what it reports. The profiled process
 * only captures: symbolization and JSON never run in it.
 *
 * The converter is started with a clone of our own (CLONE_VM|CLONE_VFORK,
 * system calls only, so a signal handler may start it) whose exit signal is
 * none: the program never gets a SIGCHLD for it and its wait()/waitpid(-1)
 * never see it (only __WCLONE waits do, ours). It gets the dump as fd 3,
 * locked (flock LOCK_EX) for as long as it runs (the tree's converter gets
 * the tree's index instead, locked: there is one per tree); stdin and stderr are /dev/null,
 * stdout is the report pipe (or /dev/null), nothing else is inherited, every
 * signal disposition is the default, the mask empty. */
#ifndef WP_CONVERT_H
#define WP_CONVERT_H

#include <stdint.h>

#include "wallprof.h"

/* In the constructor: finds the converter (WALLPROF_CONVERTER, else
 * wallprof beside this library, else in ../bin from it) and
 * prepares its command line and environment (PATH, HOME, TMPDIR, the
 * DEBUGINFOD_* variables, and what uploads need: WALLPROF_SENTRY_*,
 * WALLPROF_PYROSCOPE_*, WALLPROF_SPOOL_*, the proxy and CA variables, as
 * they were at start). Not async-signal-safe. */
void wp_convert_init(const struct wp_config *c);

/* The converter found, or NULL. async-signal-safe */
WP_AS_SAFE const char *wp_convert_program(void);

/* One conversion in flight. */
/* pidfd and report are descriptors only while pid is set: a struct that
 * never started a conversion may be all zeros (WP_CONV_NONE sets them). */
#define WP_CONV_NONE { .pid = 0, .pidfd = -1, .report = -1 }

struct wp_conv {
	int pid;        /* 0: none */
	int pidfd;      /* -1 when pidfd_open is not available */
	int final;      /* a final event (wrote, short, error) was relayed */
	int report;     /* read end of its report pipe, -1 when detached */
	int in_private; /* both are in the sampler's private table (fds.c) */
	size_t len;     /* bytes of a partial line in buf */
	/* a report line: a path and a message of at most 1 KiB (convert/job.c) */
	char buf[WP_PATH_MAX + 1536];
	char raw[WP_PATH_MAX];
	char line[WP_PATH_MAX + 200]; /* our own message, off the stack */
	/* the command line, built here: each dump path has its own struct */
	char args[4 * WP_PATH_MAX + 256];
	char *argv[24];
};

/* What the converter is asked to do. */
struct wp_conv_req {
	int raw_fd;           /* the dump, open and locked; the converter inherits it */
	const char *raw;      /* its name */
	const char *json;     /* the profile to write */
	const char *fallback; /* where to write it when `json` cannot be, or NULL */
	int detach;           /* nobody waits: events go to `index`; idle priority */
	const char *index;    /* the tree's index, or NULL */
};

/* Starts the converter. Returns 0, or -1 with nothing running (no
 * converter, no process): the caller says so and the dump stays.
 * async-signal-safe */
WP_AS_SAFE int wp_convert_start(struct wp_conv *cv, const struct wp_conv_req *rq);

/* Makes sure the tree's converter runs (wallprof --tree, detached,
 * at idle priority) on the dumps pending in the tree's index `index`
 * (output/event.h): starts it with the index's lock, unless a converter
 * already holds that lock. Returns 1 when one was started, 0 when one
 * already runs, -1 when none could be started (no converter, no index, no
 * process). async-signal-safe */
WP_AS_SAFE int wp_convert_ensure_tree(struct wp_conv *cv, const char *index);

/* Waits until the conversion ends or CLOCK_MONOTONIC reaches `deadline_ns`,
 * relaying each line it reports through the log (`as_safe`: with
 * wp_log_raw, from a program thread's exit or signal handler; else with
 * wp_log_event, from the sampler). Past the deadline it is killed and one
 * line says the raw dump stays. Returns 0 when it ended by itself, -1 when
 * killed. A detached conversion is not waited for: returns 0 at once.
 * async-signal-safe when `as_safe` */
WP_AS_SAFE int wp_convert_wait(struct wp_conv *cv, uint64_t deadline_ns, int as_safe);

/* Whether a converter's relayed line already said where the uploads stand
 * ("upload: ..."): the tree's report then does not say it again.
 * async-signal-safe */
WP_AS_SAFE int wp_convert_said_upload(void);

/* Done with the conversion (not waited for): its descriptors are closed.
 * async-signal-safe */
WP_AS_SAFE void wp_convert_forget(struct wp_conv *cv);

/* In a forked child: the parent's conversion is none of its business. Its
 * descriptors are closed if they are in the table the child copied; if the
 * parent's sampler started it in its private table, which the child does
 * not have, only their numbers are forgotten (in the child they may be the
 * program's). async-signal-safe */
WP_AS_SAFE void wp_convert_forked(struct wp_conv *cv);

/* Relays what the converter reported so far without waiting; returns 1 once
 * it has ended (and is reaped), else 0. Sampler thread. */
int wp_convert_poll(struct wp_conv *cv);

#endif
