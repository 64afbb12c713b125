/* proc_mem: the memory a walk of proc_unwind reads (see proc_unwind.c), never
 * with a direct load of the program's memory: the walked thread may return
 * and overwrite its stack, or exit and have it unmapped, meanwhile. Its
 * stack is copied page by page on first use, the pages of the modules'
 * read-only segments are cached for the epoch, our own immutable tables are
 * read directly, and every other word through process_vm_readv. A read
 * that fails is an error returned, never a fault.
 *
 * Sampler thread only; not async-signal-safe. */
#ifndef WP_PROC_MEM_H
#define WP_PROC_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define WP_PM_PAGE 4096ull

/* Starts a walk: memory is read through thread `via` (a live thread of
 * ours: not the pid, whose leader may have exited), and the stack window
 * is the pages from the one holding `sp` up (at least 64 KiB above it),
 * none copied yet. */
void wp_pm_begin(pid_t via, uint64_t sp);

/* Allocates the read-only page cache if it is not yet (without it, those
 * pages are read through the kernel every time). */
void wp_pm_cache_init(void);

/* Copies `len` bytes at `addr` with process_vm_readv, uncached. Returns 0,
 * or -1 when any of them is unreadable. */
int wp_pm_read(uint64_t addr, void *buf, size_t len);

/* Reads `len` (<= 8) bytes at `addr` as the walked thread may have left
 * them: through the stack window, the page cache, our own tables or the
 * kernel. Returns 0 or -1. */
int wp_pm_read_word(uint64_t addr, void *out, size_t len);

/* [lo, hi) is part of a module's read-only segment: its pages may be
 * cached until wp_pm_forget(). Returns 0, or -1 on out of memory. */
int wp_pm_add_ro(uint64_t lo, uint64_t hi);

/* The buffers [a, a + alen) and [b, b + blen) are ours and immutable until
 * wp_pm_forget(): read with plain loads. Registers both, or neither
 * (returns -1, out of memory); 0 otherwise. */
int wp_pm_add_own(const void *a, size_t alen, const void *b, size_t blen);

/* The modules changed: forgets the read-only and own ranges and empties
 * the page cache (kept allocated). */
void wp_pm_forget(void);

/* In a forked child: everything above is the parent's sampler's, maybe
 * caught in the middle of a change. Forgotten, not freed (the copies stay
 * in the child's heap); the next session allocates its own. */
void wp_pm_forked(void);

#endif
