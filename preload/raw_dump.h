/* raw_dump: the whole raw dump of this process, as a dying process writes
 * it: the file header, META, CTRS, one MODL per module, THRD, the ring's
 * RING section (ring.h) and END!, through output/raw.h's section writer
 * (the layout is there). The runtime's, not the converter's: the converter
 * only reads dumps (output/raw.h). */
#ifndef WP_RAW_DUMP_H
#define WP_RAW_DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "../output/raw.h"
#include "as_safe.h"

struct wp_ring;

/* The flags to write for thread k of a dump's table, given the caller's
 * `arg`: lets a dump compute them as it writes (threads.h's
 * wp_threads_flags) rather than store them in a table others read.
 * async-signal-safe */
typedef uint32_t wp_raw_thread_flags_fn(const void *arg, size_t k);

/* Writes a complete raw dump to `fd` (from its current position): header,
 * META, CTRS, one MODL per module, THRD, the ring (wp_ring_raw_emit), END!. Every array
 * is read defensively: counts are capped (WP_RAW_MAX_*), strings are read up
 * to a bound, NULL pointers are written as empty. `ring` may be mid-update
 * by another thread; see wp_ring_raw_emit. Retries EINTR and short writes;
 * does not fsync or close `fd`; may change errno. Its writer (struct
 * wp_raw_out, 2.1 KiB) is on the stack: about 2.5 KiB in all; a signal
 * handler that may run on a small alternate stack calls wp_raw_write_out()
 * instead. Returns 0, or -1 when a write failed (the file is then unusable).
 * async-signal-safe */
WP_AS_SAFE int wp_raw_write(int fd, const struct wp_raw_meta *meta, const struct wp_ring *ring,
			    const struct wp_module *mods, size_t nr_mods,
			    const struct wp_thread *threads, size_t nr_threads,
			    const struct wp_counters *ctr);

/* wp_raw_write() with the caller's writer `o` (static storage, say) instead
 * of one on the stack: about 0.4 KiB of stack (gcc 12 -O2 -fstack-usage
 * along the deepest path), for a signal handler on a small alternate stack.
 * `o` must not be in use by anyone else meanwhile. Thread k's flags are
 * flags(flags_arg, k), or threads[k].flags when `flags` is NULL.
 * async-signal-safe */
WP_AS_SAFE int wp_raw_write_out(struct wp_raw_out *o, int fd, const struct wp_raw_meta *meta,
				const struct wp_ring *ring, const struct wp_module *mods,
				size_t nr_mods, const struct wp_thread *threads, size_t nr_threads,
				wp_raw_thread_flags_fn *flags, const void *flags_arg,
				const struct wp_counters *ctr);

#endif
