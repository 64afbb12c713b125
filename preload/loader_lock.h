/* loader_lock: where glibc's loader lock is, so that a handler can tell
 * whether a walk could wait on its own thread.
 *
 * libunwind finds a return address's unwind table with dl_iterate_phdr,
 * which takes the loader's write lock (a recursive mutex in ld.so's
 * _rtld_global). A thread that holds it, or that is between taking its
 * futex word and recording itself as the owner (or between clearing the
 * owner and releasing it), would wait for itself if our handler ran there
 * and walked: dlopen does that in _dl_add_to_namespace_list, and dlopen is
 * not wrapped (test rawblk_dlopen_churn hung so). The lock is found once
 * at start: its fields are the ones of _rtld_global that hold this
 * thread's tid and a count of 1 inside a dl_iterate_phdr callback and are
 * zero outside it. */
#ifndef WP_LOADER_LOCK_H
#define WP_LOADER_LOCK_H

#include <sys/types.h>

#include "as_safe.h"

/* At start: finds the lock. Returns 0, or -1 when it cannot be told apart
 * (another thread in the loader meanwhile, a glibc of another layout):
 * then wp_loader_lock_unsafe answers 0, as if it were always free. Not
 * async-signal-safe. */
int wp_loader_lock_find(void);

/* Whether a walk on thread `tid` could wait on the loader lock forever:
 * the thread owns it, or it is held with no owner recorded (a thread in
 * the few instructions of taking or releasing it: maybe this one). Plain
 * loads of the lock's words. async-signal-safe */
WP_AS_SAFE int wp_loader_lock_unsafe(pid_t tid);

/* Whether a thread other than `tid` owns the lock now. Plain loads (0 when
 * the lock was not found). async-signal-safe */
WP_AS_SAFE int wp_loader_lock_held_by_other(pid_t tid);

/* Whether the lock is held, or being taken or released, by anyone. In a
 * forked child, by a thread of the parent's (glibc does not reset this
 * lock): then it is held for good. Plain loads. async-signal-safe */
WP_AS_SAFE int wp_loader_lock_taken(void);

/* The rule, on the lock's futex word and owner as read. async-signal-safe */
WP_AS_SAFE static inline int wp_loader_lock_unsafe_words(int lock, int owner, pid_t tid)
{
	return owner == tid || (lock != 0 && owner == 0);
}

#endif
