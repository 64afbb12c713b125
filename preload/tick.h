/* tick: the sampler thread (see tick.c). Started at start, in a forked
 * child and after a failed exec; stopped with EV_STOP and joined, or parked
 * with EV_FREEZE for a raw dump. None of it is async-signal-safe. */
#ifndef WP_TICK_H
#define WP_TICK_H

/* Sizes the ring for the configuration (under WALLPROF_RING_MB) and maps
 * it. Returns 0 or -1. At start. */
int wp_tick_alloc_ring(void);

/* Reads the command line for the dumps. At start, and by a restarted
 * sampler. */
void wp_tick_read_cmdline(void);

/* Sets the window's start: CLOCK_MONOTONIC now, and its offset to
 * CLOCK_REALTIME. At start, and by a restarted sampler. */
void wp_tick_mark_start(void);

/* In a forked child, first thing: the program may have forked at any
 * instruction of the parent's sampler, in the middle of replacing its ring
 * or its thread table. Neither was inherited (MADV_DONTFORK); the child
 * forgets them, and its sampler makes its own. Only the forking thread
 * exists: plain stores. */
void wp_tick_forked(void);

/* Starts the sampler thread (g->smp.sampler) with every signal blocked.
 * With `restart`, it starts over first (a forked child, a failed exec): a
 * fresh ring, thread table and counters, and every slot's sampler fields
 * forgotten. Returns 0 or an error number. */
int wp_tick_spawn(int restart);

#endif
