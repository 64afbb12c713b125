/* dump: the raw dumps the library writes (exit, exec, snapshot, fatal
 * signal, exit or exec from a signal handler), each handed to the converter
 * in a process of its own; and the fatal-signal handler (see dump.c). */
#ifndef WP_DUMP_H
#define WP_DUMP_H

#include <signal.h>

#include "as_safe.h"

/* Computes the exit dump's paths, then installs the fatal-signal handler
 * for every terminating signal still at its default action (not the
 * sampling or snapshot signal). At start. Not async-signal-safe. */
void wp_dump_install_fatal(void);

/* (Re)installs our fatal-signal handler for `sig` (the program asked for
 * the default action again: ours is the default plus a dump). Returns what
 * sigaction returns. async-signal-safe */
WP_AS_SAFE int wp_dump_install_fatal_one(int sig);

/* Whether `a` is our fatal-signal handler. async-signal-safe */
WP_AS_SAFE int wp_dump_fatal_ours(const struct sigaction *a);

/* The dump of a fatal signal `sig` (0: none), or of an exit or exec
 * (`exec`) from a signal handler: system calls on memory prepared before,
 * once per process (a second caller waits up to 2 s for the first, then
 * returns). Parks the sampler meanwhile (it stays parked unless an exec
 * fails); the root waits for the converter. async-signal-safe */
WP_AS_SAFE void wp_dump_handler(int sig, int exec);

/* The exit dump (`exec` 0), or the image's before an exec
 * ("<name>.exec<k>"), from a program thread outside any handler of its
 * own, once the sampler is stopped and its last captures collected. At
 * the root's final exit, also the tree's report. Not async-signal-safe. */
void wp_dump_exit(int exec);

/* Whether the process's raw dump is taken or written (by the exit path or a
 * handler path): a failed exec must not restart the sampler under it.
 * async-signal-safe */
WP_AS_SAFE int wp_dump_busy(void);

/* An exec from a signal handler failed: the process goes on, and a later
 * dump may be written again. async-signal-safe */
WP_AS_SAFE void wp_dump_rearm(void);

/* Sampler thread: a snapshot of the window (SIGUSR2), converted in the
 * background; one asked for while another converts waits for it. */
void wp_dump_snapshot(void);

/* Sampler thread, every tick: relays a finished snapshot conversion's
 * report, and starts the next snapshot asked for. */
void wp_dump_snapshot_poll(void);

/* Sampler thread: whether a snapshot is being converted (the polls above
 * report its end). */
int wp_dump_snapshot_converting(void);

/* Sampler thread, every WALLPROF_CHUNK_SECONDS: the samples since the last
 * chunk (or the start) as a dump of their own, "<name>.chunk<k>.raw",
 * converted in the background (by the tree's converter when there is an
 * index). The exit path writes the last chunk itself. */
void wp_dump_chunk(void);

/* Sampler thread, stopping: waits for a snapshot being converted. */
void wp_dump_snapshot_finish(void);

/* In a fork()ed child (its only thread): forgets the parent's conversions
 * and snapshots, computes the child's dump paths. Not async-signal-safe. */
void wp_dump_forked(void);

#endif
