/* handler: our signal handlers for sampling and snapshots, and the
 * bookkeeping of the program's own handlers running on each thread (which
 * frames they run from, whether the caller is inside one, the restart our
 * signal left for them to undo). The fatal-signal handler is dump.c's. */
#ifndef WP_HANDLER_H
#define WP_HANDLER_H

#include <signal.h>
#include <stdint.h>

#include "as_safe.h"

/* Picks the sampling signal (WALLPROF_SIGNAL, else the first free of
 * SIGPROF, SIGVTALRM, SIGPWR, SIGSTKFLT) and installs our handler for it,
 * keeping the program's disposition as its view (g->sig.prog_act). Returns
 * 0, or -1 after one line saying profiling is off. At start. Not
 * async-signal-safe. */
int wp_handler_pick_signal(void);

/* Installs the snapshot handler when the program has nothing on that
 * signal, not even SIG_IGN. At start. Not async-signal-safe. */
void wp_handler_install_snapshot(void);

/* The sigaction of our sampling handler, with SA_ONSTACK when `onstack`
 * (the program asked for it on that signal). async-signal-safe */
WP_AS_SAFE void wp_handler_sampling_action(struct sigaction *act, int onstack);

/* A handler of the program's is about to run from our frame `frame`.
 * Returns what to give wp_handler_frame_pop() when it returns.
 * async-signal-safe */
WP_AS_SAFE uint32_t wp_handler_frame_push(uintptr_t frame);
WP_AS_SAFE void wp_handler_frame_pop(uint32_t depth);

/* A handler of the program's starts / returned on this thread: counted for
 * the wrappers' EINTR rule (wp_block_ours) and marked over a published call
 * so that the sampler watches the thread. enter returns what to give
 * leave. async-signal-safe */
WP_AS_SAFE uint32_t wp_handler_program_enter(void);
WP_AS_SAFE void wp_handler_program_leave(uint32_t seq);

/* A handler of the program's without SA_RESTART returned at the point
 * where our signal had the kernel restart a wrapped call: the context `uc`
 * is moved past the `syscall` with -EINTR, as without us. async-signal-safe */
WP_AS_SAFE void wp_handler_undo_restart(void *uc);

/* Whether the caller runs inside a handler of the program's (or on the
 * alternate signal stack), where only async-signal-safe work may be done.
 * async-signal-safe */
WP_AS_SAFE int wp_handler_in_program(void);

#endif
