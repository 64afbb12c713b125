/* sigmask: the sampling signal belongs to the profiler. The program's signal
 * masks never block it (a thread that blocks every signal is still sampled),
 * its sigwait sets never take it, and the program still sees the masks it
 * set (see sigmask.c). */
#ifndef WP_SIGMASK_H
#define WP_SIGMASK_H

#include <signal.h>

#include "as_safe.h"
#include "test_hooks.h"

/* Non-zero on a thread while the library runs its own code there (the
 * sampler and dumper threads for good; our handler while it unwinds, since
 * libunwind masks signals around its locks): the mask calls then leave the
 * sampling signal alone (the sampler's are answered from its fixed mask,
 * libunwind's in our handler's walk from wp_sigmask_capture_begin's). */
extern __thread int wp_sigmask_bypass __attribute__((tls_model("initial-exec")));

/* The library's own mask changes: the system call, past the wrappers (the
 * sampler thread must really block everything). async-signal-safe */
WP_AS_SAFE int wp_sigmask_raw(int how, const sigset_t *set, sigset_t *old);

/* The calling thread's mask stays as it is now, for good: its later
 * pthread_sigmask and sigprocmask calls report that mask and change nothing,
 * without a system call. For the sampler, whose mask blocks every signal
 * (but glibc's two internal ones): libunwind blocks and restores signals
 * around its cache lock, two system calls per walk, about 100 a tick when
 * many threads wait in wrapped calls. Not async-signal-safe. */
void wp_sigmask_fix_mine(void);

/* Our handler's walk begins / ends. libunwind blocks every signal around
 * each of its locks, two system calls each time, about fifty times in a
 * cold walk (none in a walk its trace cache answers); in our handler that
 * changes nothing but the synchronous signals (sampling_mask). So during
 * the walk, libunwind's first mask call blocks every signal but SIGSYS for
 * real, and it and the later ones report that mask and change nothing;
 * the end puts the handler's mask back (a second system call, only if
 * there was a first). A fault in the rest of the walk now ends the process
 * by its default action, as one inside libunwind's locks did. The mask
 * calls of anyone else, and of a handler of the program's that runs in
 * the walk, stay as they are. async-signal-safe */
WP_AS_SAFE void wp_sigmask_capture_begin(void);
WP_AS_SAFE void wp_sigmask_capture_end(void);

#if WP_TESTING
/* WALLPROF_TEST_WALK_MASK_STRICT=1: a mask call that would reach the system
 * from libunwind in our handler's walk aborts the process (test build). */
extern int wp_test_walk_mask_strict;
#endif

/* Resolves the real calls; from the constructor. Not async-signal-safe. */
void wp_sigmask_init(void);

/* The sampling signal these calls keep to the profiler (0: none yet).
 * Called once the signal is chosen. */
void wp_sigmask_set_signal(int sig);

/* `set` without the sampling signal, in `*tmp` (returns tmp), or `set`
 * itself when it does not hold it. For the sets of sigwait and friends.
 * async-signal-safe */
WP_AS_SAFE const sigset_t *wp_sigmask_wait_set(const sigset_t *set, sigset_t *tmp);

/* A sampling signal that is not ours (the program's own SIGPROF, say)
 * arrived while the program believes this thread blocks it: it is kept
 * and raised again when the program unblocks it. Returns 1 when kept,
 * 0 when the program's handler should run now. async-signal-safe */
WP_AS_SAFE int wp_sigmask_defer(const siginfo_t *si);

/* What a handler of the program's sets aside while it runs: whether the
 * program blocked the sampling signal, and our own state on the thread
 * (our walk's, wp_sigmask_capture_begin, and wp_sigmask_bypass), so that a
 * handler that runs in the middle of our walk (a SIGSYS, a fault) makes the
 * program's mask calls, and keeps making them if it leaves by longjmp. */
struct wp_sigmask_view {
	int blocked, capture, bypass;
};

/* A handler of the program's with `mask` as its sa_mask starts / ends
 * (the sigaction trampoline): the kernel must not block the sampling signal
 * while it runs, so the program's view does. Returns / takes the view to
 * restore. async-signal-safe */
WP_AS_SAFE struct wp_sigmask_view wp_sigmask_handler_enter(const sigset_t *mask);
WP_AS_SAFE void wp_sigmask_handler_leave(struct wp_sigmask_view prev);

/* A kept signal of the program's that the wait set `set` (as the program
 * passed it) asks for: returns its number and fills *info, or 0.
 * async-signal-safe */
WP_AS_SAFE int wp_sigmask_take_deferred(const sigset_t *set, siginfo_t *info);

#endif
