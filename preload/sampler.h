/* sampler: lifecycle of the injected runtime (see sampler.c). Called from
 * the library's constructor, destructor and interposed libc functions. */
#ifndef WP_SAMPLER_H
#define WP_SAMPLER_H

#include <pthread.h>

#include <signal.h>

/* glibc's real sigaction, exported under this name; our own `sigaction`
 * interposes the public one. */
extern int __sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* Reads the configuration, preallocates, installs the signal handlers and
 * starts the sampler thread. Logs one line and leaves the program alone on
 * any failure. Not async-signal-safe. */
void wp_sampler_start(void);

/* Stops the sampler, drains the last captures and writes the exit profile.
 * Idempotent; does nothing in a forked child. Not async-signal-safe. */
void wp_sampler_stop_and_dump(void);

/* The program's sigaction() for a signal the library uses. Returns 0/-1 when
 * handled here, -2 when the call must go to libc unchanged.
 * async-signal-safe (sigaction is, so its interposer must be) */
int wp_sampler_sigaction(int sig, const struct sigaction *act, struct sigaction *old);

/* The dynamic loader is entered/left by the calling thread (dlopen, dlclose,
 * dl_iterate_phdr): samples taken meanwhile keep the PC only, because
 * unwinding could take the loader's lock again. async-signal-safe */
void wp_sampler_loader_enter(void);
void wp_sampler_loader_leave(void);

/* A wrapped call retried after our signal interrupted it. async-signal-safe */
void wp_sampler_count_eintr_retry(void);

/* main() is about to leave through pthread_exit (or the leader of a child
 * forked from another thread returns from its start routine): the process
 * must end when its last other thread does, on that thread. If no counted
 * thread is left, our threads are stopped now (joined: not from a signal
 * handler). */
void wp_sampler_main_exiting(void);

/* exec is about to replace the image: stop and write the profile so far
 * (as "<name>.exec<k>.json"); if exec fails, start sampling again. From a
 * signal handler of the program's, only the raw dump is written (and
 * sampling stays off if exec fails). */
void wp_sampler_before_exec(void);
void wp_sampler_exec_failed(void);

/* The program is about to longjmp/siglongjmp to `env` (a jmp_buf): the
 * handlers of the program's that the jump leaves no longer count as running
 * (an exit from there is not an exit from a handler). async-signal-safe */
void wp_sampler_longjmp(const void *env);

/* The program's threads (thread_start.c). pthread_create counts a thread it
 * is about to create (returns 0 when not counting: before start, in a child
 * that is not profiled), and takes it back if creation failed; the new
 * thread, first thing, says it began: its end is then seen, and when main()
 * has left by pthread_exit, the last counted thread to end stops our
 * threads, so that glibc's exit(0) runs on a thread of the program. */
int wp_sampler_thread_created(void);
void wp_sampler_thread_create_failed(void);
void wp_sampler_thread_begins(void);

/* In a fork()ed child: frees the start records (thread_start.c). */
void wp_thread_start_forked(void);

/* pthread_create itself, for our own threads (never counted). */
int wp_thread_create_real(pthread_t *t, const pthread_attr_t *attr, void *(*fn)(void *),
			  void *arg);

/* A thread was renamed; names are re-read at the next tick.
 * async-signal-safe */
void wp_sampler_names_changed(void);

#endif
