/* fmt_stack: what the pprof, folded and speedscope writers read the same
 * way from a model (model.h): which samples are writable, a sample's
 * source frames root first, its off-CPU state and system call name, and the
 * stats line. Not async-signal-safe. */
#ifndef WP_FMT_STACK_H
#define WP_FMT_STACK_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "output.h"

/* One source frame of a stack, with the frame-table entry it belongs to. */
struct wp_fmt_frame {
	const struct wp_sym_frame *f;
	const struct wp_model_loc *loc;
	uint32_t pc; /* index into p.pcs / locs */
};

/* A stack's frames, root first: for each frame-table entry from the root
 * to the leaf, its real function first and the functions inlined into it
 * after, innermost last. Reused across calls. */
struct wp_fmt_stack {
	struct wp_fmt_frame *v;
	size_t n;
	size_t cap;
};

/* Whether sample `s` can be written: its stack id names a stack. Samples
 * that fail this are skipped by every writer (the Sentry writer does the
 * same). */
int wp_fmt_sample_ok(const struct wp_model *m, const struct wp_sample *s);

/* Fills `st` with stack `stack_id`'s frames root first (see above),
 * skipping frame-table indices and frame ranges out of bounds. Returns 0,
 * or -1 on out of memory. */
int wp_fmt_stack_root_first(const struct wp_model *m, uint32_t stack_id, struct wp_fmt_stack *st);

void wp_fmt_stack_free(struct wp_fmt_stack *st);

/* Whether `s` is off-CPU: blocked (not WP_SAMPLE_ON_CPU). */
int wp_fmt_off_cpu(const struct wp_sample *s);

/* The system call of an off-CPU sample that has one: its name, or
 * "syscall_<nr>" (in `buf`) for a number the table does not name; NULL for
 * an on-CPU sample or one without a system call. */
const char *wp_fmt_syscall(const struct wp_sample *s, char *buf, size_t len);

/* Fills `st` (when not NULL) with what the writer wrote: writable samples,
 * threads that have some, frame-table entries they use, the time from the
 * first to the last; `bytes` is the caller's. */
void wp_fmt_stats(const struct wp_model *m, struct wp_out_stats *st);

#endif
