/* timers: per-thread CPU-time timers that sample running threads.
 *
 * A thread the sampler sees running gets a POSIX timer on its own CPU clock
 * that sends it the sampling signal every 1/hz of its CPU time
 * (SIGEV_THREAD_ID): the kernel fires it on the thread's own CPU, so no
 * signal crosses CPUs and the sampler needs no /proc probe for a thread
 * that keeps running. The handler's capture (a "timer capture", unasked)
 * waits in the slot for the sampler's next tick (sample.c).
 *
 * Timer ids are the process's: a timer of ours would take the id the
 * program's next timer_create would have got. So ours are created with ids
 * the program never gets (INT_MAX - 1 - slot), through the kernel's
 * PR_TIMER_CREATE_RESTORE_IDS mode, which is process-wide (the interposed
 * timer_create and timer_delete wait while the sampler has it on), and the
 * kernel's next id is put back, which can be done exactly only while the
 * process holds no timer but ours. On a kernel without that mode, while
 * the program holds timers, or when the signal-queue limit is near, no new
 * timer is made and the sampler signals running threads as before.
 *
 * The sampler's, but for wp_timers_forget_all (a forked child's first
 * thread) and the interposers' side, wp_sampler_timer_create and
 * wp_sampler_timer_delete (sampler.h). */
#ifndef WP_TIMERS_H
#define WP_TIMERS_H

#include <signal.h>
#include <stdint.h>
#include <time.h>

struct wp_slot;

/* Whether this kernel lets us place timer ids; the cap on our timers. At
 * start. */
void wp_timers_init(void);

/* Whether `s` may get a timer: timers are on, under the cap, and the
 * thread has none. */
int wp_timers_wanted(const struct wp_slot *s);

/* Arms a timer for the slot's thread. Returns 0, or -1 (no timer: the
 * sampler goes on signalling it). */
int wp_timers_arm(struct wp_slot *s);

/* Deletes the slot's timer, if it has one (its thread is gone, or the
 * sampler starts over). */
void wp_timers_disarm(struct wp_slot *s);

/* Every slot's timer deleted: a sampler that starts over after a failed
 * exec (the timers survive it, the slots' memory of them does not). */
void wp_timers_disarm_all(void);

/* A forked child: the parent's timers are not its own (timers are not
 * inherited); the slots forget them. */
void wp_timers_forget_all(void);

#endif
