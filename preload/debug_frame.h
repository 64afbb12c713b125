/* debug_frame: a module's .debug_frame for proc_unwind's remote walk, read
 * from its file (inflated with zlib, loaded on first need, when compressed)
 * and rewritten in the form of .eh_frame with a search table, which
 * libunwind's table search reads (see debug_frame.c).
 *
 * Sampler thread only; not async-signal-safe. */
#ifndef WP_DEBUG_FRAME_H
#define WP_DEBUG_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* A module's .debug_frame in .eh_frame's form, malloc'd. */
struct wp_debug_frame {
	uint8_t *data;  /* CIEs then FDEs, .eh_frame's encoding */
	size_t len;     /* bytes of data */
	int32_t *tab;   /* pairs (start - lo, FDE offset in data), sorted by start */
	size_t nr;      /* pairs in tab (>= 1) */
};

/* Rewrites the `n` bytes of .debug_frame at `d` (untrusted: read within
 * their bounds whatever they hold) for a module loaded at bias `bias` whose
 * code spans [lo, hi): FDEs whose function lies outside it, or whose CIE
 * is not one this reader takes (64-bit DWARF, an augmentation), are left
 * out. Returns 0 with *out filled, or -1 (no FDE kept, out of memory) with
 * *out zeroed. */
int wp_debug_frame_convert(const uint8_t *d, size_t n, uint64_t bias, uint64_t lo, uint64_t hi,
			   struct wp_debug_frame *out);

/* The .debug_frame (or .zdebug_frame, or a compressed one) of the file
 * `path`, read only if it is still the file mapped (device `dev`, inode
 * `ino`), converted as above. The file is opened and closed within the
 * call (a private descriptor table is expected: see proc_unwind.c).
 * Returns 0 or -1 (no such section, unreadable, zlib missing for a
 * compressed one: *out zeroed). */
int wp_debug_frame_load(const char *path, uint64_t dev, uint64_t ino, uint64_t bias, uint64_t lo,
			uint64_t hi, struct wp_debug_frame *out);

/* Frees `df`'s buffers and zeroes it. */
void wp_debug_frame_free(struct wp_debug_frame *df);

#endif
