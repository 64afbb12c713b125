/* threads: the table of every thread the sampler has seen (latest name,
 * signal and sample counts: what the dump lists), and what /proc tells
 * about the process's threads. The table belongs to the sampler thread
 * (after it has stopped, to the exiting thread), the only one that writes
 * it; a raw dump reads it while the sampler is parked, or while it runs on
 * when it would not park in time: what a dump reads never moves, never
 * changes thread and is never freed under it (threads.c says how). Only
 * the functions tagged
 * WP_AS_SAFE are async-signal-safe; the others run on the sampler thread or
 * on a program thread's exit path (stdio formatting, malloc, /proc reads). */
#ifndef WP_THREADS_H
#define WP_THREADS_H

#include <stddef.h>
#include <stdint.h>

#include "../output/profile.h"
#include "as_safe.h"

struct wp_slot;

/* Maps the buffer /proc/self/task is listed into. Returns 0 or -1. At
 * start. Not async-signal-safe. */
int wp_threads_alloc(void);

/* The table entry of the slot's thread, made on first use (one per thread
 * lifetime: a slot reset gets a new one), newest last; or NULL without
 * memory, or when the table is full while a raw dump reads it (counted in
 * nr_threads_untracked: the caller's counts of that thread are lost). The entry
 * is the thread's for good (the slot names it by a serial number); the
 * pointer is valid until the next wp_threads_of, wp_threads_prune or
 * wp_threads_restart, which may copy the table to its other buffer.
 * Sampler. Not async-signal-safe (grows the table). */
struct wp_thread *wp_threads_of(struct wp_slot *s);

/* Lists /proc/self/task: claims slots for threads no wrapper or
 * pthread_create hook registered (raw clone, threads started before us),
 * and releases the slots of threads no longer listed. Sampler. */
void wp_threads_scan(void);

/* Whether a thread of the program (not ours, not the exited main thread)
 * is still alive; confirmed by a fresh listing before answering no.
 * Sampler. */
int wp_threads_user_left(void);

/* Notes where the kernel marks the leader's end as a thread (the word its
 * clear-child-tid points at, read with PR_GET_TID_ADDRESS), for
 * wp_threads_leader_ended. Called on the leader, at start and in a fork
 * child; on another thread it notes nothing. */
void wp_threads_note_leader(void);

/* The leader's word: 1 if it says the leader has ended as a thread, 0 if
 * not, -1 when it is not known. A load. Any thread. */
int wp_threads_leader_word_ended(void);

/* Whether the thread group's leader has ended as a thread (a zombie while
 * the other threads live on). A load when the leader's word is known (a
 * program thread's exit path asks, at every exit that leaves no counted
 * thread), else as wp_threads_leader_ended_proc. A program that moved its
 * leader's clear-child-tid elsewhere (set_tid_address) is answered "alive"
 * for ever here; the sampler asks /proc too. Any thread. */
int wp_threads_leader_ended(void);

/* The same from /proc/self/task/PID/stat (three system calls). Any thread,
 * not in a signal handler (snprintf). */
int wp_threads_leader_ended_proc(void);

/* What that file says: 1 the leader has ended as a thread (a zombie), 0 it
 * is still running (its own destructors, say, after our key's), -1 it
 * cannot be read. */
int wp_threads_leader_proc(void);

/* Whether every thread of the program but `self` and the exited leader is
 * gone from /proc/self/task, waiting up to 50 ms for those still listed. A
 * program thread's exit path. */
int wp_threads_others_gone(uint32_t self);

/* Forgets threads that are gone and whose samples all left the window
 * (before `now`); the others stay, in order, each the same thread's. The
 * table's memory follows: a buffer over four times the room the kept
 * entries need is remapped smaller, so after a burst of threads the table
 * shrinks back at the next prunes. Does nothing once a raw dump has asked
 * the sampler to hold still (EV_FREEZE). Sampler. */
void wp_threads_prune(uint64_t now);

/* Re-reads the names of live threads from /proc. Sampler, or the exiting
 * thread; not in a signal handler. */
void wp_threads_refresh_names(void);

/* The same for a share of them: `every` calls read each of the n live
 * threads' names once, n / every a call (one call in every / n when there
 * are fewer threads than calls), from where the last call stopped.
 * Sampler. */
void wp_threads_refresh_some(size_t every);

/* The table as a dump reads it: `nr` entries in the order they were made
 * (a tid reused by a later thread has an entry per thread, the newest
 * last), and their serial numbers. */
struct wp_threads_view {
	const struct wp_thread *e;
	const uint64_t *id;
	size_t nr;
};

/* The published table, buffer and count from one load, into `v`. Its
 * entries stay where they are, each the same thread's, while the caller
 * reads them provided that, before this call, EV_FREEZE was set (by the
 * caller: a raw dump on any thread), or the sampler is parked, stopped, or
 * the caller itself. The sampler may update their counts and names
 * meanwhile (a name may be read torn, never unterminated); entries it
 * makes after the load are not in `v`. Their `flags` are 0: a dump takes
 * wp_threads_flags. async-signal-safe */
WP_AS_SAFE void wp_threads_view(struct wp_threads_view *v);

/* The flags a dump writes for entry k of the view `view` (a struct
 * wp_threads_view): WP_THREAD_LIVE when a live slot names it now. Computed
 * as the dump writes, into the dump's own output: the table is never
 * written by a dump (a wp_raw_thread_flags_fn). async-signal-safe */
WP_AS_SAFE uint32_t wp_threads_flags(const void *view, size_t k);

/* A restarted sampler starts a new table, empty (slots forget their entries
 * with wp_slot_reset, WP_SLOT_SAMPLER). */
void wp_threads_restart(void);

/* In a forked child, before its sampler starts: the table's two buffers
 * stayed with the parent (MADV_DONTFORK; a rebuild may have been replacing
 * one as the program forked). The child's table starts empty, with no
 * buffer (the first rebuild maps one). */
void wp_threads_forked(void);

#endif
