/* Unit tests of the ring: deduplication, wrap-around, window expiry,
 * compaction of the frame/stack tables, drops when full, refs. What the ring
 * keeps is looked at as the library hands it on: its raw dump, read back by
 * the raw reader (ring_dump.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../../preload/ring.h"
#include "../../preload/ring_int.h"
#include "ring_dump.h"

static int nr_pass, nr_fail;

#define CHECK(cond, ...)                                            \
	do {                                                        \
		if (cond) {                                         \
			nr_pass++;                                  \
		} else {                                            \
			nr_fail++;                                  \
			printf("FAIL %s:%d: ", __FILE__, __LINE__); \
			printf(__VA_ARGS__);                        \
			printf("\n");                               \
		}                                                   \
	} while (0)

static struct wp_ring *mk(size_t samples, size_t stacks, uint64_t window)
{
	struct wp_ring_config c = {
		.nr_samples = samples,
		.nr_pcs = stacks * 4,
		.nr_stacks = stacks,
		.nr_words = 8192,
		.window_ns = window,
	};
	return wp_ring_create(&c);
}

static void test_dedup(void)
{
	struct wp_ring *r = mk(64, 16, 1000000);
	uint64_t a[] = { 0x1000, 0x2000, 0x3000 };
	uint64_t b[] = { 0x2000, 0x2000, 0x3000 }; /* leaf equal to a caller of a */
	struct wp_profile p = { 0 };

	wp_ring_add(r, 1, 10, WP_SAMPLE_ON_CPU, 0, a, 3, 1);
	wp_ring_add(r, 2, 11, 0, 0, a, 3, 1);
	wp_ring_add(r, 3, 10, 0, 0, b, 3, 1);
	CHECK(wp_ring_nr_samples(r) == 3, "3 samples, got %zu", wp_ring_nr_samples(r));
	CHECK(wp_ring_nr_stacks(r) == 2, "2 unique stacks, got %zu", wp_ring_nr_stacks(r));
	/* 0x2000 exact (leaf of b) and 0x2000 as return address are different frames */
	CHECK(wp_ring_nr_pcs(r) == 4, "4 unique frames, got %zu", wp_ring_nr_pcs(r));
	CHECK(ring_window(r, &p, NULL) == 0, "window");
	CHECK(p.nr_samples == 3 && p.nr_stacks == 2 && p.nr_pcs == 4, "window sizes");
	CHECK(p.samples[0].stack_id == p.samples[1].stack_id, "same stack id for same stack");
	CHECK(p.samples[0].flags == WP_SAMPLE_ON_CPU && p.samples[1].flags == 0, "flags kept");
	CHECK(p.pcs[p.stack_frames[p.stack_off[0]]].flags == WP_PC_EXACT, "leaf is exact");
	CHECK(p.pcs[p.stack_frames[p.stack_off[0] + 1]].flags == 0, "caller is a return address");
	CHECK(p.stack_off[2] == 6, "6 frame refs in 2 stacks, got %u", p.stack_off[2]);
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

static void test_wrap(void)
{
	struct wp_ring *r = mk(8, 16, 1000000000);
	uint64_t s[] = { 0x10, 0x20 };
	struct wp_profile p = { 0 };
	int i;

	for (i = 0; i < 20; i++)
		wp_ring_add(r, (uint64_t)i, 1, 0, 0, s, 2, 1);
	CHECK(wp_ring_nr_samples(r) == 8, "capacity bound, got %zu", wp_ring_nr_samples(r));
	CHECK(wp_ring_stats(r)->nr_overwritten == 12, "12 overwritten, got %llu",
	      (unsigned long long)wp_ring_stats(r)->nr_overwritten);
	CHECK(ring_window(r, &p, NULL) == 0 && p.nr_samples == 8, "window of 8");
	CHECK(p.samples[0].t_ns == 12 && p.samples[7].t_ns == 19, "the newest 8 in order");
	CHECK(p.counters.nr_overwritten == 12, "the dump counts 12 overwritten, got %llu",
	      (unsigned long long)p.counters.nr_overwritten);
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

static void test_window(void)
{
	struct wp_ring *r = mk(1000, 16, 100);
	uint64_t s[] = { 0x10 };
	struct wp_profile p = { 0 };
	int i;

	for (i = 0; i <= 100; i++)
		wp_ring_add(r, (uint64_t)i * 10, 1, 0, 0, s, 1, 1);
	CHECK(wp_ring_stats(r)->nr_overwritten == 0, "expiry is not loss");
	CHECK(ring_window(r, &p, NULL) == 0, "window");
	CHECK(p.nr_samples == 11, "window keeps 11 samples (900..1000), got %zu", p.nr_samples);
	CHECK(p.samples[0].t_ns == 900, "oldest kept is 900, got %llu",
	      (unsigned long long)p.samples[0].t_ns);
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

static void test_compaction(void)
{
	struct wp_ring *r = mk(2, 4, 1000000000);
	struct wp_profile p = { 0 };
	uint64_t s[3];
	int i;

	/* 100 distinct stacks through a table of 4: old ones must be collected. */
	for (i = 0; i < 100; i++) {
		s[0] = 0x1000 + (uint64_t)i;
		s[1] = 0x5000;
		s[2] = 0x6000;
		CHECK(wp_ring_add(r, (uint64_t)i, 1, 0, 0, s, 3, 1) == 0, "add %d", i);
	}
	CHECK(wp_ring_stats(r)->nr_dropped_full == 0, "no drops");
	CHECK(wp_ring_stats(r)->nr_compactions > 0, "compacted");
	CHECK(wp_ring_nr_stacks(r) <= 4, "stack table bounded");
	CHECK(ring_window(r, &p, NULL) == 0 && p.nr_samples == 2, "window after compaction");
	CHECK(p.pcs[p.stack_frames[p.stack_off[p.samples[1].stack_id]]].addr == 0x1000 + 99,
	      "newest sample keeps its own leaf");
	CHECK(p.pcs[p.stack_frames[p.stack_off[p.samples[0].stack_id]]].addr == 0x1000 + 98,
	      "older sample keeps its own leaf");
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

static void test_full_drops(void)
{
	struct wp_ring *r = mk(64, 4, 1000000000);
	struct wp_profile p = { 0 };
	uint64_t s[1];
	int i, dropped = 0;

	/* 8 live distinct stacks cannot fit in 4 slots: drop and count. */
	for (i = 0; i < 8; i++) {
		s[0] = 0x100 + (uint64_t)i;
		dropped += wp_ring_add(r, (uint64_t)i, 1, 0, 0, s, 1, 1) < 0;
	}
	CHECK(dropped == 4, "4 dropped, got %d", dropped);
	CHECK(wp_ring_stats(r)->nr_dropped_full == 4, "drops counted");
	CHECK(wp_ring_nr_samples(r) == 4, "4 kept");
	CHECK(ring_window(r, &p, NULL) == 0 && p.nr_samples == 4 && p.nr_stacks == 4 &&
		      p.counters.nr_dropped_full == 4,
	      "the dump has the 4 kept and counts 4 dropped");
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

static void test_sorted_window(void)
{
	struct wp_ring *r = mk(16, 16, 1000000000);
	uint64_t s[] = { 0x10 };
	struct wp_profile p = { 0 };
	size_t i;
	int sorted = 1;

	/* A late capture is collected after a newer one. */
	wp_ring_add(r, 20, 1, 0, 0, s, 1, 1);
	wp_ring_add(r, 10, 2, 0, 0, s, 1, 1);
	wp_ring_add(r, 30, 1, 0, 0, s, 1, 1);
	CHECK(ring_window(r, &p, NULL) == 0, "window");
	for (i = 1; i < p.nr_samples; i++)
		sorted &= p.samples[i - 1].t_ns <= p.samples[i].t_ns;
	CHECK(sorted && p.nr_samples == 3, "samples sorted by time");
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

static void test_empty(void)
{
	struct wp_ring *r = mk(16, 16, 100);
	struct wp_profile p = { 0 };

	CHECK(ring_window(r, &p, NULL) == 0, "empty window");
	CHECK(p.nr_samples == 0 && p.nr_stacks == 0 && p.stack_off[0] == 0, "empty sizes");
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

static void test_refs(void)
{
	struct wp_ring *r = mk(2, 4, 1000000000), *r2;
	struct wp_ring_ref ref, zero = { 0, 0 };
	struct wp_profile p = { 0 };
	uint64_t a[] = { 0x10, 0x20 }, b[3];
	int i;

	CHECK(wp_ring_add_ref(r, 1, 1, 0, 0, &zero, NULL) < 0, "a zeroed ref is invalid");
	CHECK(wp_ring_add_get_ref(r, 1, 1, 0, 0, a, 2, 1, &ref, NULL) == 0, "add with ref");
	CHECK(wp_ring_add_ref(r, 2, 1, 0, 0, &ref, NULL) == 0, "same stack again by ref");
	CHECK(ring_window(r, &p, NULL) == 0 && p.nr_samples == 2 && p.nr_stacks == 1 &&
		      p.samples[1].stack_id == p.samples[0].stack_id,
	      "the ref'd sample has the same stack");
	wp_profile_free(&p);
	/* Force compactions: the ref must go stale, not point at another stack. */
	for (i = 0; i < 20; i++) {
		b[0] = 0x1000 + (uint64_t)i;
		b[1] = 0x2000;
		b[2] = 0x3000;
		wp_ring_add(r, 3 + (uint64_t)i, 2, 0, 0, b, 3, 1);
	}
	CHECK(wp_ring_stats(r)->nr_compactions > 0, "compacted");
	CHECK(wp_ring_add_ref(r, 100, 1, 0, 0, &ref, NULL) < 0,
	      "a ref from before a compaction is stale");
	/* A ref from another ring never matches, even at the same epoch. */
	r2 = mk(16, 16, 1000000000);
	CHECK(wp_ring_add_get_ref(r2, 1, 1, 0, 0, a, 2, 1, &ref, NULL) == 0,
	      "add in a second ring");
	wp_ring_destroy(r2);
	r2 = mk(16, 16, 1000000000);
	wp_ring_add(r2, 1, 1, 0, 0, b, 3, 1);
	CHECK(wp_ring_add_ref(r2, 2, 1, 0, 0, &ref, NULL) < 0, "a ref from another ring is stale");
	wp_ring_destroy(r2);
	wp_ring_destroy(r);
}

/* The samples of `p` one per tick, in time order (the way Sentry's
 * format lists them), into a new array of n = 1 entries; *nr its size. */
static struct wp_sample *per_tick(const struct wp_profile *p, size_t *nr)
{
	struct wp_sample *v = calloc(wp_profile_count(p) + 1, sizeof(*v));
	struct wp_tick_iter it;
	const struct wp_sample *s;
	uint64_t t;

	*nr = 0;
	if (!v || wp_tick_iter_init(&it, p, NULL, NULL) < 0)
		abort();
	while (wp_tick_iter_next(&it, &s, &t) > 0) {
		v[*nr] = *s;
		v[*nr].t_ns = t;
		v[(*nr)++].n = 1;
	}
	wp_tick_iter_free(&it);
	return v;
}

static struct wp_ring *mk_runs(size_t samples, uint64_t window, uint32_t max_run)
{
	struct wp_ring_config c = {
		.nr_samples = samples,
		.nr_pcs = 64,
		.nr_stacks = 16,
		.nr_words = 8192,
		.window_ns = window,
		.max_run = max_run,
	};
	return wp_ring_create(&c);
}

/* One sample of thread `tid` at tick time t, with the thread's ref and run
 * as the sampler keeps them. */
static void add_run(struct wp_ring *r, uint64_t t, uint32_t tid, uint32_t flags,
		    const uint64_t *pcs, unsigned n, struct wp_ring_ref *ref,
		    struct wp_ring_run *run)
{
	if (wp_ring_add_ref(r, t, tid, flags, 0, ref, run) < 0)
		wp_ring_add_get_ref(r, t, tid, flags, 0, pcs, n, 1, ref, run);
}

/* Issue 14: a thread whose stack does not change extends one record; the
 * reader gives one sample per tick back, each at its tick's time. */
static void test_runs(void)
{
	struct wp_ring *r = mk_runs(1024, 1000000000000ull, 100);
	uint64_t a[] = { 0x10, 0x20 }, b[] = { 0x30, 0x20 }, c[] = { 0x40, 0x20 };
	struct wp_ring_ref ra = { 0, 0 }, rb = { 0, 0 };
	struct wp_ring_run na = { 0, 0 }, nb = { 0, 0 };
	struct wp_profile p = { 0 };
	struct wp_sample *x;
	size_t i, nx, of_a = 0, of_b = 0, times_ok = 1;
	int t;

	/* Ticks 10 ms apart, with jitter: thread 1 blocked in one place for
	 * 1000 ticks; thread 2 alternating between two stacks. */
	for (t = 0; t < 1000; t++) {
		uint64_t now =
			5000000ull + (uint64_t)t * 10000000ull + (uint64_t)(t * 37 % 11) * 1000;

		add_run(r, now, 1, 0, a, 2, &ra, &na);
		if (t % 2) {
			memset(&rb, 0, sizeof(rb));
			add_run(r, now, 2, WP_SAMPLE_ON_CPU, b, 2, &rb, &nb);
		} else {
			wp_ring_add_get_ref(r, now, 2, WP_SAMPLE_ON_CPU, 0, c, 2, 1, &rb, &nb);
		}
	}
	CHECK(wp_ring_nr_samples(r) == 10 + 1000,
	      "thread 1 in 10 records of 100, thread 2 in 1000; got %zu", wp_ring_nr_samples(r));
	CHECK(wp_ring_stats(r)->nr_added == 2000, "2000 samples stored, got %llu",
	      (unsigned long long)wp_ring_stats(r)->nr_added);
	CHECK(ring_window(r, &p, NULL) == 0 && wp_profile_count(&p) == 2000,
	      "2000 samples read back, got %llu", (unsigned long long)wp_profile_count(&p));
	CHECK(p.nr_samples == 10 + 1000, "as 1010 entries, got %zu", p.nr_samples);
	CHECK(wp_profile_check(&p, NULL, 0) == 0, "the entries hold together");
	x = per_tick(&p, &nx);
	for (i = 0; i < nx; i++) {
		uint64_t k = (x[i].t_ns - 5000000ull) / 10000000ull;

		times_ok &= x[i].t_ns == 5000000ull + k * 10000000ull + (k * 37 % 11) * 1000;
		times_ok &= i == 0 || x[i].t_ns >= x[i - 1].t_ns;
		of_a += x[i].tid == 1 && x[i].flags == 0;
		of_b += x[i].tid == 2 && x[i].flags == WP_SAMPLE_ON_CPU;
	}
	free(x);
	CHECK(of_a == 1000 && of_b == 1000, "1000 samples per thread, got %zu and %zu", of_a, of_b);
	CHECK(times_ok, "every sample at its own tick's time");
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

/* A run ends where the thread was not sampled at a tick, or its flags
 * changed; a time that is not a tick never extends one. */
static void test_run_breaks(void)
{
	struct wp_ring *r = mk_runs(64, 1000000000000ull, 100);
	uint64_t a[] = { 0x10 }, other[] = { 0x99 };
	struct wp_ring_ref ref = { 0, 0 }, oref = { 0, 0 };
	struct wp_ring_run run = { 0, 0 }, orun = { 0, 0 };
	struct wp_profile p = { 0 };
	struct wp_sample *x;
	size_t nx;

	add_run(r, 100, 1, 0, a, 1, &ref, &run);
	add_run(r, 200, 1, 0, a, 1, &ref, &run); /* extends */
	add_run(r, 300, 2, 0, other, 1, &oref, &orun); /* tick 300: thread 1 missed it */
	add_run(r, 400, 1, 0, a, 1, &ref, &run); /* new record */
	add_run(r, 500, 1, WP_SAMPLE_SYSCALL, a, 1, &ref, &run); /* flags changed: new */
	add_run(r, 450, 1, WP_SAMPLE_SYSCALL, a, 1, &ref, &run); /* not a tick: new */
	CHECK(wp_ring_nr_samples(r) == 5, "5 records, got %zu", wp_ring_nr_samples(r));
	CHECK(ring_window(r, &p, NULL) == 0 && wp_profile_count(&p) == 6, "6 samples, got %llu",
	      (unsigned long long)wp_profile_count(&p));
	x = per_tick(&p, &nx);
	CHECK(nx == 6 && x[0].t_ns == 100 && x[1].t_ns == 200 && x[4].t_ns == 450 &&
		      x[5].t_ns == 500,
	      "at their ticks");
	free(x);
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

/* A record expires when its last tick leaves the window, and the reader
 * keeps only its samples inside the window. */
static void test_run_window(void)
{
	struct wp_ring *r = mk_runs(64, 100, 8);
	uint64_t a[] = { 0x10 };
	struct wp_ring_ref ref = { 0, 0 };
	struct wp_ring_run run = { 0, 0 };
	struct wp_profile p = { 0 };
	int i;

	for (i = 0; i <= 1000; i++)
		add_run(r, 1000 + (uint64_t)i * 10, 1, 0, a, 1, &ref, &run);
	CHECK(wp_ring_stats(r)->nr_overwritten == 0, "expiry is not loss");
	CHECK(wp_ring_nr_samples(r) <= 3, "at most 3 records of 8 ticks live, got %zu",
	      wp_ring_nr_samples(r));
	CHECK(ring_window(r, &p, NULL) == 0 && wp_profile_count(&p) == 11,
	      "the window's 11 samples, got %llu", (unsigned long long)wp_profile_count(&p));
	CHECK(p.nr_samples && p.samples[0].t_ns == 1000 + 990 * 10, "the oldest at 10900, got %llu",
	      p.nr_samples ? (unsigned long long)p.samples[0].t_ns : 0ull);
	CHECK(p.nr_samples <= 3 && wp_profile_check(&p, NULL, 0) == 0,
	      "as at most 3 entries that hold together, got %zu", p.nr_samples);
	wp_profile_free(&p);
	wp_ring_destroy(r);
}

/* Overwriting a record loses every sample it held, and says so. */
static void test_run_overwrite(void)
{
	struct wp_ring *r = mk_runs(2, 1000000000000ull, 10);
	uint64_t a[] = { 0x10 }, b[] = { 0x20 };
	struct wp_ring_ref ref = { 0, 0 }, rb = { 0, 0 };
	struct wp_ring_run run = { 0, 0 }, nb = { 0, 0 };
	int i;

	for (i = 0; i < 10; i++)
		add_run(r, 100 + (uint64_t)i, 1, 0, a, 1, &ref, &run);
	add_run(r, 200, 2, 0, b, 1, &rb, &nb);
	add_run(r, 201, 3, 0, b, 1, &rb, &nb);
	CHECK(wp_ring_stats(r)->nr_overwritten == 10, "the 10 samples of the record, got %llu",
	      (unsigned long long)wp_ring_stats(r)->nr_overwritten);
	add_run(r, 202, 1, 0, a, 1, &ref, &run); /* its record is gone: a new one */
	CHECK(wp_ring_nr_samples(r) == 2, "2 records");
	wp_ring_destroy(r);
}

static long rss_kib(void)
{
	long pages = 0, rss = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The memory the ring holds follows what it keeps: 4 Mi records (128 MiB)
 * filled one after another, each expiring in 1000 ticks. */
static void test_release(void)
{
	struct wp_ring_config c = {
		.nr_samples = 4u << 20,
		.nr_pcs = 64,
		.nr_stacks = 16,
		.nr_words = 8192,
		.window_ns = 1000,
	};
	struct wp_ring *r = wp_ring_create(&c);
	uint64_t a[] = { 0x10 };
	long before = rss_kib(), peak = 0, now;
	uint64_t i;

	for (i = 0; i < (6u << 20); i++) {
		wp_ring_add(r, 1000 + i, 1, 0, 0, a, 1, 1);
		if (i % 65536 == 0 && (now = rss_kib() - before) > peak)
			peak = now;
	}
	CHECK(peak < 4096, "RSS added under 4 MiB while 6 Mi records went through, got %ld KiB",
	      peak);
	CHECK(wp_ring_nr_samples(r) == 1001, "1001 live, got %zu", wp_ring_nr_samples(r));
	wp_ring_destroy(r);
}

/* Open records: a parked thread's record stands for every tick to the
 * newest without a store per tick; closed, it ends at the tick before the
 * newest; it neither expires nor is extended while open. */
static void test_open(void)
{
	struct wp_ring *r = mk_runs(64, 1000, 100);
	uint64_t a[] = { 0x10 }, b[] = { 0x20 };
	struct wp_ring_ref ref = { 0, 0 }, rb = { 0, 0 };
	struct wp_ring_run run = { 0, 0 }, nb = { 0, 0 };
	struct wp_profile p = { 0 };
	struct wp_sample *x;
	size_t nx, i, ok = 1;
	uint64_t t;

	add_run(r, 100, 1, 0, a, 1, &ref, &run);
	add_run(r, 100, 2, 0, b, 1, &rb, &nb);
	CHECK(wp_ring_run_open(r, &run) == 0, "thread 1's record opened");
	wp_ring_tick(r, 200);
	CHECK(wp_ring_run_open(r, &nb) < 0, "a record that ends before the newest tick stays shut");
	for (t = 300; t <= 1000; t += 100)
		wp_ring_tick(r, t);
	CHECK(ring_window(r, &p, NULL) == 0 && wp_profile_count(&p) == 11,
	      "10 ticks of thread 1, 1 of thread 2, got %llu",
	      (unsigned long long)wp_profile_count(&p));
	x = per_tick(&p, &nx);
	for (i = 0; i < nx; i++)
		ok &= x[i].tid == 2 ? x[i].t_ns == 100 : x[i].t_ns == 100 * (i ? i : 1);
	CHECK(ok && nx == 11 && x[nx - 1].t_ns == 1000 && x[nx - 1].tid == 1,
	      "thread 1 at every tick, to the newest");
	free(x);
	wp_profile_free(&p);
	/* The stores of other threads go on; thread 1's record is not
	 * extended while open (a store for it starts a record of its own). */
	CHECK(wp_ring_stats(r)->nr_overwritten == 0, "nothing expired: the window is 1000 ns");
	wp_ring_tick(r, 1100);
	CHECK(wp_ring_run_ticks(r, &run) == 11, "open: 11 ticks (100..1100)");
	CHECK(wp_ring_run_close(r, &run) == 10, "closed: 10 ticks (100..1000)");
	CHECK(wp_ring_run_ticks(r, &run) == 10, "and stands for them");
	CHECK(wp_ring_run_close(r, &run) == 0, "closing twice gains nothing");
	add_run(r, 1100, 1, 0, a, 1, &ref, &run); /* extends the closed record */
	CHECK(ring_window(r, &p, NULL) == 0 && wp_profile_count(&p) == 12 && p.nr_samples == 2 &&
		      p.samples[0].n + p.samples[1].n == 12 &&
		      (p.samples[0].n == 11 || p.samples[1].n == 11),
	      "thread 1 in one record of 11 ticks (100..1100), thread 2's one, got %llu in %zu",
	      (unsigned long long)wp_profile_count(&p), p.nr_samples);
	wp_profile_free(&p);
	/* Closed, it expires with its last tick. */
	for (t = 1200; t <= 2300; t += 100)
		wp_ring_tick(r, t);
	CHECK(wp_ring_nr_samples(r) == 0, "expired, got %zu records", wp_ring_nr_samples(r));
	wp_ring_destroy(r);
}

/* An open record overwritten for room counts the ticks it was stored with;
 * the ticks it stood for since are its parked thread's sampler's to count
 * (wp_ring_lost: park.c knows when it was opened). */
static void test_open_overwrite(void)
{
	struct wp_ring *r = mk_runs(2, 1000000000000ull, 100);
	uint64_t a[] = { 0x10 }, b[] = { 0x20 };
	struct wp_ring_ref ref = { 0, 0 }, rb = { 0, 0 };
	struct wp_ring_run run = { 0, 0 }, nb = { 0, 0 };
	uint64_t t;

	add_run(r, 10, 1, 0, a, 1, &ref, &run);
	CHECK(wp_ring_run_open(r, &run) == 0, "opened");
	for (t = 20; t <= 50; t += 10)
		wp_ring_tick(r, t);
	add_run(r, 60, 2, 0, b, 1, &rb, &nb);
	add_run(r, 60, 3, 0, b, 1, &rb, &nb);
	CHECK(wp_ring_stats(r)->nr_overwritten == 1, "its stored tick (10), got %llu",
	      (unsigned long long)wp_ring_stats(r)->nr_overwritten);
	CHECK(wp_ring_run_close(r, &run) == 0, "gone: nothing to close");
	wp_ring_lost(r, 4);
	CHECK(wp_ring_stats(r)->nr_overwritten == 5, "and the 4 it stood for since (20..50)");
	wp_ring_destroy(r);
}

static int keep_odd_tid(const void *ctx, const struct wp_sample *s)
{
	(void)ctx;
	return s->tid % 2;
}

/* The tick iterator: every tick of every entry in time order, ties in
 * entry order; entries given out of order are put in order; `keep`. */
static void test_tick_iter(void)
{
	uint64_t ticks[] = { 10, 20, 30, 40, 50 };
	struct wp_sample v[] = {
		{ .t_ns = 10, .tid = 1, .n = 3, .tick = 0 },  /* 10 20 30 */
		{ .t_ns = 20, .tid = 2, .n = 1 },              /* 20 */
		{ .t_ns = 20, .tid = 3, .n = 4, .tick = 1 },  /* 20 30 40 50 */
		{ .t_ns = 45, .tid = 5, .n = 1 },              /* 45 */
	};
	struct wp_profile p = { .samples = v, .nr_samples = 4, .ticks = ticks, .nr_ticks = 5 };
	static const uint32_t want_tid[] = { 1, 1, 2, 3, 1, 3, 3, 5, 3 };
	static const uint64_t want_t[] = { 10, 20, 20, 20, 30, 30, 40, 45, 50 };
	struct wp_tick_iter it;
	const struct wp_sample *s;
	uint64_t t;
	size_t k = 0, ok = 1;
	struct wp_sample tmp;

	CHECK(wp_profile_check(&p, NULL, 0) == 0, "the entries hold together");
	CHECK(wp_tick_iter_init(&it, &p, NULL, NULL) == 0, "iterator");
	while (wp_tick_iter_next(&it, &s, &t) > 0) {
		ok &= k < 9 && s->tid == want_tid[k] && t == want_t[k];
		k++;
	}
	wp_tick_iter_free(&it);
	CHECK(ok && k == 9, "9 ticks in time order, ties in entry order (got %zu)", k);
	/* out of order: the same sequence */
	tmp = v[0], v[0] = v[3], v[3] = tmp;
	CHECK(wp_profile_check(&p, NULL, 0) < 0, "out of order is told");
	CHECK(wp_tick_iter_init(&it, &p, keep_odd_tid, NULL) == 0, "iterator");
	for (k = 0, ok = 1; wp_tick_iter_next(&it, &s, &t) > 0; k++)
		ok &= s->tid % 2 == 1;
	wp_tick_iter_free(&it);
	CHECK(ok && k == 8, "kept: the odd tids' 8 ticks in order (got %zu)", k);
	tmp = v[0], v[0] = v[3], v[3] = tmp;
	/* keep_range: [25, 45) */
	wp_profile_keep_range(&p, 25, 45);
	CHECK(p.nr_samples == 2 && v[0].tid == 1 && v[0].t_ns == 30 && v[0].n == 1 &&
		      v[1].tid == 3 && v[1].t_ns == 30 && v[1].n == 2 && v[1].tick == 2,
	      "cut to [25, 45): thread 1 at 30, thread 3 at 30 and 40");
	CHECK(wp_profile_check(&p, NULL, 0) == 0, "and still holds together");
}

static __attribute__((unused)) long minor_faults(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

/* The frame and stack hash tables fill at random places. Each page of the
 * ring must fault once, writable: a probe that reads an untouched page first
 * maps the zero page, and the insert then takes a second fault that flushes
 * the TLB of every CPU the program runs on (an interrupt each). So the faults
 * taken while filling a fresh ring (no huge pages, no compaction: it would
 * write whole tables) are at most the pages it has in memory afterwards.
 * Under AddressSanitizer, reads of its shadow fault too: not checked. */
static void test_one_fault_per_page(void)
{
#ifndef __SANITIZE_ADDRESS__
	struct wp_ring_config c = {
		.nr_samples = 4096,
		.nr_pcs = 65536,
		.nr_stacks = 16384,
		.nr_words = 65536,
		.window_ns = 1000000000000ull,
	};
	struct wp_ring *r = wp_ring_create(&c);
	long page = sysconf(_SC_PAGESIZE), before, faults;
	size_t i, k, resident = 0, npages;
	unsigned char *vec;
	uint64_t pcs[16], x = 0x9e3779b97f4a7c15ull;

	CHECK(r != NULL, "ring");
	if (!r)
		return;
	madvise(r->map, r->map_len, MADV_NOHUGEPAGE);
	npages = (r->map_len + (size_t)page - 1) / (size_t)page;
	vec = calloc(npages, 1);
	CHECK(vec != NULL, "mincore vector");
	before = minor_faults();
	for (i = 0; i < 2000; i++) {
		for (k = 0; k < 16; k++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			pcs[k] = (x & 0xffffffffff0ull) + 0x400000;
		}
		wp_ring_add(r, 1000000 * (i + 1), 10, 0, 0, pcs, 16, 1);
	}
	faults = minor_faults() - before;
	if (vec && mincore(r->map, r->map_len, vec) == 0)
		for (i = 0; i < npages; i++)
			resident += vec[i] & 1;
	CHECK(r->stats.nr_compactions == 0 && wp_ring_nr_samples(r) == 2000,
	      "2000 samples kept without a compaction (%zu, %llu compactions)",
	      wp_ring_nr_samples(r), (unsigned long long)r->stats.nr_compactions);
	CHECK(resident > 100, "the ring is in memory: %zu pages", resident);
	CHECK(faults <= (long)resident + 16, "%ld faults for %zu resident pages", faults, resident);
	free(vec);
	wp_ring_destroy(r);
#else
	printf("skip: one fault per page (AddressSanitizer's shadow faults too)\n");
#endif
}

int main(void)
{
	test_runs();
	test_run_breaks();
	test_run_window();
	test_run_overwrite();
	test_release();
	test_open();
	test_open_overwrite();
	test_tick_iter();
	test_dedup();
	test_wrap();
	test_window();
	test_compaction();
	test_full_drops();
	test_sorted_window();
	test_empty();
	test_refs();
	test_one_fault_per_page();
	printf("ring: %d passed, %d failed\n", nr_pass, nr_fail);
	return nr_fail != 0;
}
