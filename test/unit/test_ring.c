/* Unit tests of the ring: deduplication, wrap-around, window expiry,
 * compaction of the frame/stack tables, drops when full, refs. What the ring
 * keeps is looked at as the library hands it on: its raw dump, read back by
 * the raw reader (ring_dump.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../preload/ring.h"
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

	CHECK(wp_ring_add_ref(r, 1, 1, 0, 0, &zero) < 0, "a zeroed ref is invalid");
	CHECK(wp_ring_add_get_ref(r, 1, 1, 0, 0, a, 2, 1, &ref) == 0, "add with ref");
	CHECK(wp_ring_add_ref(r, 2, 1, 0, 0, &ref) == 0, "same stack again by ref");
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
	CHECK(wp_ring_add_ref(r, 100, 1, 0, 0, &ref) < 0,
	      "a ref from before a compaction is stale");
	/* A ref from another ring never matches, even at the same epoch. */
	r2 = mk(16, 16, 1000000000);
	CHECK(wp_ring_add_get_ref(r2, 1, 1, 0, 0, a, 2, 1, &ref) == 0, "add in a second ring");
	wp_ring_destroy(r2);
	r2 = mk(16, 16, 1000000000);
	wp_ring_add(r2, 1, 1, 0, 0, b, 3, 1);
	CHECK(wp_ring_add_ref(r2, 2, 1, 0, 0, &ref) < 0, "a ref from another ring is stale");
	wp_ring_destroy(r2);
	wp_ring_destroy(r);
}

int main(void)
{
	test_dedup();
	test_wrap();
	test_window();
	test_compaction();
	test_full_drops();
	test_sorted_window();
	test_empty();
	test_refs();
	printf("ring: %d passed, %d failed\n", nr_pass, nr_fail);
	return nr_fail != 0;
}
