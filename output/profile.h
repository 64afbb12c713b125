/* profile: the raw profile handed from capture to the writers. Addresses,
 * deduplicated stacks, timed samples, thread names, the module map and the
 * loss counters; no symbols. Read from a raw dump (output/raw_read.c; tests
 * also build one by hand) and owned by whoever built it. Not used in signal
 * handlers. */
#ifndef WP_PROFILE_H
#define WP_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#include "../symbolize/symbolize.h"

/* One entry of the frame table: a unique address and how it was captured. */
struct wp_pc {
	uint64_t addr;  /* raw address as captured (Sentry's instruction_addr) */
	uint32_t flags; /* WP_PC_* */
};
#define WP_PC_EXACT 0x1 /* the interrupted PC itself: look up addr, not addr - 1 */

/* One sample: one thread at `n` consecutive ticks of the sampler with the
 * same stack, flags and system call (a thread blocked in one place for a
 * second is one entry of n = hz, not hz entries). Formats that count take
 * n as its weight; those that list every tick (Sentry's) expand it, the
 * k-th tick at wp_sample_time(p, s, k). */
struct wp_sample {
	uint64_t t_ns;     /* CLOCK_MONOTONIC time of its first tick */
	uint32_t tid;      /* kernel thread id */
	uint32_t stack_id; /* index into the stack table */
	uint32_t flags;    /* WP_SAMPLE_* */
	uint32_t syscall;  /* syscall number when WP_SAMPLE_SYSCALL is set */
	uint32_t n;        /* ticks it stands for, >= 1 */
	uint32_t tick;     /* n > 1: its ticks' times are p->ticks[tick .. tick + n), the
			    * first equal to t_ns; unused when n == 1 */
};
#define WP_SAMPLE_ON_CPU 0x1    /* running (or runnable) at the tick */
#define WP_SAMPLE_TRUNCATED 0x2 /* stack cut at the depth limit */
#define WP_SAMPLE_SYSCALL 0x4   /* `syscall` holds the blocking system call (x86-64 number) */
#define WP_SAMPLE_PARTIAL 0x8   /* unwinding failed after the first frame(s) */

struct wp_thread {
	uint32_t tid;
	char name[16];       /* kernel comm, latest seen */
	uint64_t nr_signals; /* profiling signals sent to it */
	uint64_t nr_samples; /* samples taken of it (before the window cut) */
	uint64_t last_ns; /* CLOCK_MONOTONIC of its newest sample (the sampler's bookkeeping) */
	uint32_t flags; /* WP_THREAD_* */
};

#define WP_THREAD_LIVE 1u /* alive when the dump was taken: listed even without samples */

/* Loss and health counters: reported in every output so that a partial
 * profile never looks complete. */
struct wp_counters {
	uint64_t nr_ticks; /* sampler ticks run */
	uint64_t nr_ticks_late; /* ticks skipped because the sampler overran */
	uint64_t nr_signals; /* profiling signals sent */
	uint64_t nr_samples; /* samples recorded (before ring overwrite) */
	uint64_t nr_pending; /* ticks lost: the previous signal was still undelivered, or
			      * the thread's timer capture under way (and none recent) */
	uint64_t nr_send_failed; /* ticks lost: the signal could not be sent, or /proc could not
				  * say whether a thread that may be blocked runs (no signal
				  * on a guess) */
	uint64_t nr_unwind_failed; /* samples whose unwinding failed (PC only) */
	uint64_t nr_truncated; /* samples whose stack hit WALLPROF_MAX_DEPTH */
	uint64_t nr_dropped_full; /* samples dropped: stack tables full */
	uint64_t
		nr_overwritten; /* samples overwritten in the ring (older than the window or no room) */
	uint64_t nr_threads_untracked; /* thread sightings with no free slot, or whose thread
					* had no table entry (the table full while a dump
					* reads it, no memory): its counts of that tick lost */
	uint64_t nr_signals_blocked; /* signals sent to threads observed blocked (last resort) */
	uint64_t nr_eintr_retried; /* blocking calls our signal interrupted, retried */
	uint64_t nr_from_wrapper; /* samples unwound from a blocking call's published context */
	uint64_t nr_reused; /* samples that reused the thread's previous stack */
	uint64_t nr_dl_guarded; /* samples cut to the PC: the thread was inside the loader */
	uint64_t nr_site_replayed; /* walks from published registers replayed from the cache */
	uint64_t nr_site_direct; /* of those, checked with plain loads (not process_vm_readv) */
	uint64_t nr_site_mismatch; /* WALLPROF_TEST_SITE_CHECK: replays a real walk contradicted */
	uint64_t nr_from_proc; /* samples of threads blocked outside the wrappers, taken without
				      * a signal from /proc (the blocking PC; see restarts_unseen) */
	uint64_t nr_from_timer; /* samples from a thread's own CPU-time timer (no signal sent) */
	uint64_t nr_held; /* ticks of a running thread given its capture of the tick before */
	uint64_t nr_timers; /* CPU-time timers armed */
	uint64_t nr_exiting; /* ticks lost: the thread ran its end (glibc's teardown after
			      * its function returned, which blocks every signal): no
			      * signal at its first two ticks there */
	uint64_t nr_signal_batches; /* batches of signals a tick sent after waiting for the
				     * next quarter of its period: its signals spread
				     * (tick.c, visit_active) */
	uint64_t nr_ticks_rested; /* ticks the sampler slept through: nothing to visit, the
				   * program's threads all parked (tick.c, rest_until) */
};

/* The counters' keys in the wallprof section of every format (the fields'
 * names without "nr_"; nr_samples is "samples_recorded", beside the
 * "samples" written), in the struct's order, with their offsets and what
 * they tell: a loss (what a report lists as lost: ticks not taken, samples
 * cut short, threads not tracked), of which the dropped ones are ticks of
 * a thread the sampler knew that have no sample (the log line's
 * "dropped"); how samples were taken; or neither. */
enum wp_counter_kind {
	WP_CTR_INFO = 0,
	WP_CTR_LOSS = 1,
	WP_CTR_HOW = 2,
	WP_CTR_DROP = 4 | WP_CTR_LOSS, /* a loss: test with kind & WP_CTR_LOSS */
};
struct wp_counter_key {
	const char *key;
	size_t off;
	enum wp_counter_kind kind;
};
extern const struct wp_counter_key wp_counter_keys[];
extern const size_t wp_nr_counter_keys;

/* Counter i of wp_counter_keys in *c. */
uint64_t *wp_counter_ptr(struct wp_counters *c, size_t i);
uint64_t wp_counter_at(const struct wp_counters *c, size_t i);

/* Ticks of threads the sampler knew that have no sample: the "dropped"
 * of the log line, the sum of the WP_CTR_DROP counters. */
uint64_t wp_counters_dropped(const struct wp_counters *c);

struct wp_profile {
	struct wp_pc *pcs; /* frame table */
	size_t nr_pcs;
	uint32_t *stack_frames; /* all stacks' frame indices, concatenated, leaf first */
	uint32_t *stack_off; /* stack i is stack_frames[stack_off[i] .. stack_off[i+1]) */
	size_t nr_stacks; /* stack_off has nr_stacks + 1 entries */
	struct wp_sample *samples; /* sorted by t_ns (their first ticks) */
	size_t nr_samples; /* entries; the samples they stand for: wp_profile_count() */
	uint64_t *ticks; /* the sampler's tick times that samples with n > 1 refer to,
			  * ascending; NULL when none does */
	size_t nr_ticks;
	struct wp_thread *threads; /* one entry per tid, no order (the raw reader merges a
				    * tid's entries into one: output/raw_read.c) */
	size_t nr_threads;
	struct wp_module *modules;
	size_t nr_modules;

	uint64_t start_ns; /* CLOCK_MONOTONIC start of the window (first sample or earlier) */
	uint64_t end_ns; /* CLOCK_MONOTONIC end of the window */
	int64_t realtime_offset_ns; /* CLOCK_REALTIME = CLOCK_MONOTONIC + this */
	uint32_t pid;
	uint32_t main_tid; /* the thread that ran main() */
	char *cmdline; /* command line, arguments separated by spaces; malloc'd */
	uint32_t hz; /* configured sampling rate */
	uint32_t ring_seconds; /* configured window */
	uint32_t max_depth; /* configured depth limit */
	uint64_t ring_bytes; /* memory reserved for the ring (0 if unknown) */
	uint64_t ring_samples; /* records the ring holds at most (a record: a thread with one
				* stack at one tick or more in a row) */
	int snapshot; /* 0 at exit, n >= 1 for the n-th snapshot */
	int has_profiler_id; /* the dump said which profiler run it is */
	uint8_t profiler_id[16]; /* random, one per profiled process */
	uint32_t chunk; /* n >= 1: the n-th periodic chunk, its samples those of
			   [chunk_from_ns, chunk_to_ns) (CLOCK_MONOTONIC); 0: not a chunk */
	uint32_t tail_chunk; /* not a chunk, but its samples of [chunk_from_ns,
				chunk_to_ns) are chunk tail_chunk (a death by
				signal: no periodic chunk took them); 0: none */
	int chunks_on; /* the process wrote periodic chunks */
	uint64_t chunk_from_ns, chunk_to_ns;
	struct wp_counters counters;
};

/* The time of the k-th tick (k < s->n) of sample `s` of `p`. */
static inline uint64_t wp_sample_time(const struct wp_profile *p, const struct wp_sample *s,
				      uint32_t k)
{
	return k == 0 || s->n <= 1 ? s->t_ns : p->ticks[s->tick + k];
}

/* The time of the last tick of sample `s`. */
static inline uint64_t wp_sample_last(const struct wp_profile *p, const struct wp_sample *s)
{
	return wp_sample_time(p, s, s->n ? s->n - 1 : 0);
}

/* The time of the latest tick of any entry (0 when there is none). */
uint64_t wp_profile_last_ns(const struct wp_profile *p);

/* The samples the entries stand for: the sum of their n. */
uint64_t wp_profile_count(const struct wp_profile *p);

/* Whether the entries hold together: n >= 1; a sample with n > 1 has its
 * ticks in p->ticks, the first at t_ns; entries sorted by t_ns. Returns 0,
 * or -1 naming the first entry that does not in `err`. */
int wp_profile_check(const struct wp_profile *p, char *err, size_t errlen);

/* Keeps only the ticks of [from_ns, to_ns) (to_ns 0: no end), cutting
 * entries that straddle it and dropping those left empty; the entries stay
 * sorted. */
void wp_profile_keep_range(struct wp_profile *p, uint64_t from_ns, uint64_t to_ns);

/* Every tick of every entry, in time order (ties in entry order): what a
 * format that lists each tick writes. `keep` (may be NULL) leaves out the
 * entries it returns 0 for. */
struct wp_tick_iter {
	const struct wp_profile *p;
	int (*keep)(const void *ctx, const struct wp_sample *s);
	const void *ctx;
	uint32_t *order; /* the entries by time, when they are not sorted; else NULL */
	size_t next; /* the next entry (in time order) not yet begun */
	struct wp_tick_iter_run { /* entries begun and not finished: a heap by time */
		uint64_t t;
		uint32_t idx, k;
	} *heap;
	size_t nr_heap, cap_heap;
};

/* Returns 0, or -1 on out of memory. */
int wp_tick_iter_init(struct wp_tick_iter *it, const struct wp_profile *p,
		      int (*keep)(const void *ctx, const struct wp_sample *s), const void *ctx);

/* The next tick: its entry and time. Returns 1, 0 at the end, -1 on out of
 * memory. */
int wp_tick_iter_next(struct wp_tick_iter *it, const struct wp_sample **s, uint64_t *t);

void wp_tick_iter_free(struct wp_tick_iter *it);

/* qsort comparator of samples: by first tick, then tid. */
int wp_cmp_sample(const void *a, const void *b);

/* qsort/bsearch comparator of uint32_t values (tids, pids). */
int wp_cmp_u32(const void *a, const void *b);

/* Whether Sentry's ingestion keeps any of the samples: some thread has at
 * least two (Relay drops threads with fewer, then rejects an empty profile
 * as NotEnoughSamples; Sentry's own SDKs do not send such profiles). */
int wp_profile_sentry_ok(const struct wp_profile *p);

/* Frees every array and string of `p` (not `p` itself). */
void wp_profile_free(struct wp_profile *p);

#endif
