/* sampler: the runtime's entry points, for the interposers (wallprof.c,
 * thread_start.c, the blocking-call wrappers). Called from the library's
 * constructor, destructor and interposed libc functions; each is
 * implemented in the runtime module named beside it. The runtime never
 * calls the interposers back. */
#ifndef WP_SAMPLER_H
#define WP_SAMPLER_H

#include <pthread.h>

#include <signal.h>
#include <time.h>

#include "as_safe.h"

/* glibc's real sigaction, exported under this name; our own `sigaction`
 * interposes the public one. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* lifecycle.c: reads the configuration, preallocates, installs the signal
 * handlers and starts the sampler thread. Returns 0 when sampling; else
 * -1, after one line on any failure, leaving the program alone. Not
 * async-signal-safe. */
int wp_sampler_start(void);

/* lifecycle.c: stops the sampler, drains the last captures and writes the
 * exit profile. Idempotent; does nothing in a forked child. Not
 * async-signal-safe, except from inside a handler of the program's (an exit
 * or _exit there), where only the raw dump is written (wp_dump_handler). */
void wp_sampler_stop_and_dump(void);

/* sigaction.c: the program's sigaction() for a signal the library uses.
 * Returns 0/-1 when handled here, -2 when the call must go to libc
 * unchanged. async-signal-safe (sigaction is, so its interposer must be) */
WP_AS_SAFE int wp_sampler_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* slots.c: the dynamic loader is entered/left by the calling thread
 * (dlclose, dl_iterate_phdr): samples taken meanwhile keep the PC only,
 * because unwinding could take the loader's lock again. async-signal-safe */
WP_AS_SAFE void wp_sampler_loader_enter(void);
WP_AS_SAFE void wp_sampler_loader_leave(void);

/* Test build: how long the sampler thread's dl_iterate_phdr calls hold the
 * loader's lock (WALLPROF_TEST_LOADER_HOLD_US; 0 elsewhere, and always in
 * the production build). */
unsigned wp_sampler_loader_hold_us(void);

/* slots.c: a wrapped call retried after our signal interrupted it.
 * async-signal-safe */
WP_AS_SAFE void wp_sampler_count_eintr_retry(void);

/* lifecycle.c: main() is about to leave through pthread_exit (or the
 * leader of a child forked from another thread returns from its start
 * routine): the process must end when its last other thread does, on that
 * thread. If no counted thread is left, our threads are stopped now
 * (joined: not async-signal-safe). */
void wp_sampler_main_exiting(void);

/* lifecycle.c: the pthread_exit wrapper, before glibc's pthread_exit: the
 * leader's end is seen by our key's destructor, which runs after the
 * program's cleanup handlers (so that those are sampled); only where the
 * leader holds no value of our key, at once (wp_sampler_main_exiting). */
void wp_sampler_pthread_exit(void);

/* lifecycle.c: exec is about to replace the image: stop and write the
 * profile so far (as "<name>.exec<k>.json"); if exec fails, start sampling
 * again. From a signal handler of the program's, only the raw dump is
 * written, and the sampler stays parked until the exec fails (the thaw is
 * async-signal-safe). */
void wp_sampler_before_exec(void);
void wp_sampler_exec_failed(void);

/* handler.c: the program is about to longjmp/siglongjmp to `env` (a
 * jmp_buf): the handlers of the program's that the jump leaves no longer
 * count as running (an exit from there is not an exit from a handler), and
 * a wrapped call it leaves is retracted. async-signal-safe */
WP_AS_SAFE void wp_sampler_longjmp(const void *env);

/* lifecycle.c: the program's threads (thread_start.c). pthread_create
 * counts a thread it is about to create (returns 0 when not counting:
 * before start, in a child that is not profiled), and takes it back if
 * creation failed; the new thread, first thing, says it began: its end is
 * then seen, and when main() has left by pthread_exit, the last counted
 * thread to end stops our threads, so that glibc's exit(0) runs on a thread
 * of the program. Not async-signal-safe (nor is pthread_create). */
int wp_sampler_thread_created(void);
void wp_sampler_thread_create_failed(void);
void wp_sampler_thread_begins(void);

/* tick.c: pthread_create itself, past our interposer: for our own threads
 * (never counted), and for the interposer to create the program's. Not
 * async-signal-safe. */
int wp_sampler_create_thread_real(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
				  void *arg);

/* threads.c: a thread was renamed; names are re-read at the next tick.
 * async-signal-safe */
WP_AS_SAFE void wp_sampler_names_changed(void);

/* The interposed timer_create (timers.c): the program's own call through
 * `real`, never while the sampler places a timer id of its own (a
 * process-wide kernel mode). It waits only for the sampler's few system
 * calls. Not async-signal-safe (neither is timer_create). */
int wp_sampler_timer_create(int (*real)(clockid_t, struct sigevent *, timer_t *), clockid_t clock,
			    struct sigevent *sev, timer_t *id);

/* The interposed timer_delete (timers.c): the program's own call through
 * `real`; the sampler arms CPU timers only while the program holds no
 * timer (timers.h). Not async-signal-safe (neither is timer_delete). */
int wp_sampler_timer_delete(int (*real)(timer_t), timer_t id);

#endif
