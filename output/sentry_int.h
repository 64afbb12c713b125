/* sentry_int: what the Sentry writer's files share (sentry.c writes the
 * profile, sentry_head.c what surrounds it). Not async-signal-safe. */
#ifndef WP_SENTRY_INT_H
#define WP_SENTRY_INT_H

#include <stddef.h>
#include <stdint.h>

#include "jw.h"
#include "output.h"

/* What the raw profile becomes: which stacks, pcs and threads are written. */
struct wp_sentry_plan {
	const struct wp_profile *p;
	wp_out_lookup_fn lookup;
	void *lctx;
	uint64_t nr_written;  /* samples (ticks) written: those with a valid stack id */
	uint64_t nr_truncated;/* ... of which WP_SAMPLE_TRUNCATED */
	uint32_t *stack_map;  /* raw stack id -> output stack id, or NONE */
	size_t nr_out_stacks;
	uint32_t *pc_first;   /* raw pc -> its first output frame, or NONE if unused */
	uint32_t *pc_count;   /* raw pc -> number of output frames (1 + inlined) */
	size_t nr_frames;
	uint8_t *mod_used;    /* module -> some written frame lies in it */
	uint32_t *tids;       /* distinct tids of the written samples, ascending */
	size_t nr_tids;
	uint32_t *thr_by_tid; /* p->threads indices sorted by tid (one entry per tid) */
	uint64_t base_ns;     /* monotonic time of elapsed 0 (the window start) */
	uint64_t last_elapsed;
	uint64_t first_ns;    /* monotonic time of the first and last written sample */
	uint64_t last_ns;
	int chunk;            /* v2: only the threads in busy are written */
	uint32_t *busy;       /* tids with >= 2 samples with a non-empty stack, ascending */
	size_t nr_busy;
};

/* CLOCK_REALTIME of monotonic time `t_ns`, never negative. */
static inline int64_t wp_sentry_unix_ns(const struct wp_sentry_plan *pl, uint64_t t_ns)
{
	int64_t t = (int64_t)t_ns + pl->p->realtime_offset_ns;

	return t < 0 ? 0 : t;
}

/* Writes the document's opening brace and head: a v1 profile's version,
 * event_id, platform, release, environment, timestamp, device, os, runtime,
 * client_sdk and transaction, or a chunk's version, chunk_id, profiler_id,
 * platform, release, environment and client_sdk. 0 or -1 (w failed). */
int wp_sentry_head(struct wp_jw *w, const struct wp_sentry_plan *pl,
		   const struct wp_out_opts *opts);

/* Writes a v1 profile's wallprof section, the closing brace and a newline. */
int wp_sentry_tail(struct wp_jw *w, const struct wp_sentry_plan *pl);

/* Checks the options' ids (lowercase hex of the right length, not all
 * zero). Returns 0, or -1 with a one-line reason in `err`. */
int wp_sentry_opts_check(const struct wp_out_opts *o, char *err, size_t errlen);

#endif
