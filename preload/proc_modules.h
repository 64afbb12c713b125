/* proc_modules: the modules of this process as proc_unwind's walk needs
 * them (see proc_modules.c): the address range of each one's code, its
 * .eh_frame_hdr search table, and its .debug_frame, read on first need.
 * The list comes from /proc/thread-self/maps and the ELF headers in memory,
 * read through proc_mem (no lock of the program's is taken).
 *
 * Sampler thread only; not async-signal-safe. */
#ifndef WP_PROC_MODULES_H
#define WP_PROC_MODULES_H

#include <stddef.h>
#include <stdint.h>

#include "debug_frame.h"

struct wp_pmod {
	uint64_t lo, hi;        /* executable segments, load bias applied */
	uint64_t hdr;           /* .eh_frame_hdr, 0 if none usable */
	uint64_t table, nr_fde; /* its binary-search table */
	uint64_t bias;
	uint64_t dev, ino;      /* the file mapped, for .debug_frame */
	char *path;             /* NULL: no file to read (vdso, deleted) */
	int df_tried;
	struct wp_debug_frame df; /* data NULL: none (yet, if !df_tried) */
};

/* Reads the module list anew (call wp_pmod_free() first). Their read-only
 * segments are registered with proc_mem for its page cache. Memory is read
 * through the thread wp_pm_begin() named. Returns 0, or -1 (maps
 * unreadable, out of memory: the list may be partial, free it). */
int wp_pmod_read(void);

/* Frees the module list and forgets everything proc_mem derived from it
 * (wp_pm_forget). */
void wp_pmod_free(void);

/* In a forked child: forgets, without freeing, the parent's module list
 * (its sampler may have been changing it as the program forked) and what
 * proc_mem derived from it (wp_pm_forked). */
void wp_pmod_forked(void);

/* The module whose code holds `ip`, or NULL. */
struct wp_pmod *wp_pmod_find(uint64_t ip);

/* `m`'s .debug_frame in .eh_frame's form, read on the first call and
 * registered as our own memory with proc_mem; NULL when it has none. */
const struct wp_debug_frame *wp_pmod_debug_frame(struct wp_pmod *m);

#endif
