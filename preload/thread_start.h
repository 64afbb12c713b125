/* thread_start: the interposed pthread_create and thrd_create (see
 * thread_start.c), which tell the runtime when each program thread begins. */
#ifndef WP_THREAD_START_H
#define WP_THREAD_START_H

/* Once sampling has started (from the constructor): in a fork()ed child,
 * the start records that other threads of the parent held are freed. Not
 * async-signal-safe. */
void wp_thread_start_init(void);

#endif
