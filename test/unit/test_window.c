/* Unit tests of the window, at the one place it is made: the raw dump's
 * reader (output/raw_read.c). Dumps crafted in memory (raw_files.h) and, for
 * the ring's own part, dumps of a real ring (ring_dump.h):
 * - samples older than the window ending at the newest sample are dropped,
 *   the one exactly a window older kept; the newest is the last valid
 *   sample in ring order; the rest sorted by time, then tid; a ring whose
 *   window is ring_seconds keeps what the window holds, all of it;
 * - only the stacks and frames the window's samples use, numbered in first
 *   use;
 * - samples the ring overwrote or refused are counted from the ring's own
 *   statistics, not the counters section;
 * - threads: one per tid with samples in the window or alive at the dump,
 *   a reused tid's entries merged (counts summed, flags or'ed, the newest
 *   entry's name), newest first;
 * - modules: an unloaded module whose range a live one reuses is left out,
 *   every other kept in order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../output/raw.h"
#include "../../preload/ring.h"

#include "check.h"
#include "raw_files.h"
#include "ring_dump.h"

static struct wp_raw_meta meta;
static struct wp_counters ctr;

/* Reads a crafted dump; an empty profile (and a line) when refused. */
static int read_spec(const struct wp_module *mods, size_t nr_mods, const struct wp_thread *threads,
		     size_t nr_threads, const struct spec *r, struct wp_profile *p,
		     struct wp_raw_info *info)
{
	char err[256] = "";
	size_t len;
	unsigned char *d = craft_dump(&meta, &ctr, mods, nr_mods, threads, nr_threads, r, &len);
	int rc = wp_raw_read_mem(d, len, p, info, err, sizeof(err));

	if (rc < 0)
		printf("     (refused: %s)\n", err);
	free(d);
	return rc;
}

/* One frame per stack: stack k is frame k, at address 0x1000 * (k + 1). */
static void one_frame_stacks(struct spec *r)
{
	size_t k;

	for (k = 0; k < r->nst; k++) {
		r->p[k] = (struct rpc){ 0x1000 * (k + 1), 0, 0 };
		r->st[k] = (struct rstack){ (uint32_t)k, 1 };
		r->w[k] = (uint32_t)k;
	}
}

static void test_cut(void)
{
	struct spec r;
	struct wp_profile p;
	struct wp_raw_info info;

	/* ring order; the window is 1000 ns; the last sample's stack is out of
	 * range (a ring caught mid-update), so the newest is 2000 */
	spec_alloc(&r, 7, 4, 4, 4);
	one_frame_stacks(&r);
	r.window_ns = 1000;
	r.s[0] = (struct rsample){ 100, 1, 0, 0, 0 };
	r.s[1] = (struct rsample){ 999, 1, 0, 0, 0 };
	r.s[2] = (struct rsample){ 1000, 3, 1, WP_SAMPLE_ON_CPU, 0 };
	r.s[3] = (struct rsample){ 1500, 1, 2, WP_SAMPLE_SYSCALL, 7 };
	r.s[4] = (struct rsample){ 1000, 2, 2, 0, 0 }; /* a late capture */
	r.s[5] = (struct rsample){ 2000, 1, 1, 0, 0 };
	r.s[6] = (struct rsample){ 9000, 1, 99, 0, 0 };
	REQ(read_spec(NULL, 0, NULL, 0, &r, &p, &info) == 0);
	REQ(p.nr_samples == 4 && info.nr_bad_samples == 1 && info.nr_ring_samples == 7);
	if (p.nr_samples == 4) {
		REQ(p.samples[0].t_ns == 1000 && p.samples[0].tid == 2);
		REQ(p.samples[1].t_ns == 1000 && p.samples[1].tid == 3 &&
		    p.samples[1].flags == WP_SAMPLE_ON_CPU);
		REQ(p.samples[2].t_ns == 1500 && p.samples[2].flags == WP_SAMPLE_SYSCALL &&
		    p.samples[2].syscall == 7);
		REQ(p.samples[3].t_ns == 2000);
		REQ(p.start_ns == 1000 && p.end_ns == 2000);
	}
	report("window: older than the newest (last valid) minus window_ns dropped, sorted by time, tid");

	/* Stacks 1 and 2 are used in the window, stack 1 first in ring order
	 * (though the first sample by time uses stack 2); stacks 0 and 3 not. */
	REQ(p.nr_stacks == 2 && p.nr_pcs == 2);
	if (p.nr_stacks == 2 && p.nr_pcs == 2) {
		REQ(p.stack_off[0] == 0 && p.stack_off[1] == 1 && p.stack_off[2] == 2);
		REQ(p.pcs[0].addr == 0x2000 && p.pcs[1].addr == 0x3000);
		REQ(p.samples[1].stack_id == 0 && p.samples[0].stack_id == 1 &&
		    p.samples[2].stack_id == 1 && p.samples[3].stack_id == 0);
	}
	report("window: only the stacks and frames its samples use, in first-use (ring) order");
	wp_profile_free(&p);

	/* Every sample within the window: all kept. */
	r.window_ns = 1900;
	r.ns = 6;
	REQ(read_spec(NULL, 0, NULL, 0, &r, &p, NULL) == 0 && p.nr_samples == 6 &&
	    p.nr_stacks == 3);
	wp_profile_free(&p);
	report("window: a window as long as the samples keeps all of them");
	spec_free(&r);
}

static void test_ring_window(void)
{
	struct wp_ring_config c = {
		.nr_samples = 4096,
		.nr_pcs = 256,
		.nr_stacks = 64,
		.nr_words = 8192,
		.window_ns = 2ull * 1000000000, /* ring_seconds = 2 */
	};
	struct wp_ring *r = wp_ring_create(&c);
	struct wp_profile p;
	uint64_t pcs[2], t, newest = 0, old_stack = 0x9000;
	size_t i, want = 0;

	/* 7 s at 100 Hz, two threads; a stack of its own for the first 3 s */
	for (t = 0; r && t < 700; t++) {
		pcs[0] = t < 300 ? old_stack : 0x1000 + (t % 5) * 0x10;
		pcs[1] = 0x5000;
		newest = 1000000000ull + t * 10000000ull;
		wp_ring_add(r, newest, 10 + (uint32_t)(t % 2), 0, 0, pcs, 2, 1);
	}
	for (t = 0; t < 700; t++)
		want += 1000000000ull + t * 10000000ull + c.window_ns >= newest;
	REQ(r && ring_window(r, &p, NULL) == 0);
	REQ(p.nr_samples == want && want == 201);
	for (i = 0; i < p.nr_samples; i++)
		REQ(p.samples[i].t_ns + c.window_ns >= newest);
	for (i = 0; i < p.nr_pcs; i++)
		REQ(p.pcs[i].addr != old_stack);
	REQ(p.nr_stacks == 5 && p.counters.nr_overwritten == 0);
	wp_profile_free(&p);
	wp_ring_destroy(r);
	report("window of a ring (ring_seconds 2): every sample of the last 2 s, no other, "
	       "expiry not counted as loss");

	/* Overwritten inside the window: counted. */
	c.nr_samples = 64;
	r = wp_ring_create(&c);
	for (t = 0; r && t < 100; t++) {
		pcs[0] = 0x1000;
		wp_ring_add(r, 1000 + t, 1, 0, 0, pcs, 1, 1);
	}
	REQ(r && ring_window(r, &p, NULL) == 0);
	REQ(p.nr_samples == 64 && p.samples[0].t_ns == 1000 + 36 &&
	    p.counters.nr_overwritten == 36);
	wp_profile_free(&p);
	wp_ring_destroy(r);
	report("window of a ring: samples overwritten inside the window counted");
}

static void test_counted(void)
{
	struct spec r;
	struct wp_profile p;

	spec_alloc(&r, 1, 1, 1, 1);
	one_frame_stacks(&r);
	r.s[0] = (struct rsample){ 5, 1, 0, 0, 0 };
	r.overwritten = 7;
	r.dropped_full = 3;
	memset(&ctr, 0, sizeof(ctr));
	ctr.nr_overwritten = 999;
	ctr.nr_dropped_full = 998;
	ctr.nr_samples = 11;
	REQ(read_spec(NULL, 0, NULL, 0, &r, &p, NULL) == 0);
	REQ(p.counters.nr_overwritten == 7 && p.counters.nr_dropped_full == 3 &&
	    p.counters.nr_samples == 11);
	wp_profile_free(&p);
	memset(&ctr, 0, sizeof(ctr));
	spec_free(&r);
	report("counters: overwritten and dropped_full are the ring's, the rest the dump's");
}

static const struct wp_thread *thread_of(const struct wp_profile *p, uint32_t tid)
{
	size_t i;

	for (i = 0; i < p->nr_threads; i++)
		if (p->threads[i].tid == tid)
			return &p->threads[i];
	return NULL;
}

static void test_threads(void)
{
	/* in the order the thread table made them, newest last */
	static const struct wp_thread th[] = {
		{ .tid = 5, .name = "five-a", .nr_signals = 1, .nr_samples = 2 },
		{ .tid = 6, .name = "six", .nr_signals = 10, .nr_samples = 10 },
		{ .tid = 9, .name = "nine-old", .nr_signals = 4, .nr_samples = 4 },
		{ .tid = 5, .name = "five-b", .nr_signals = 3, .nr_samples = 4 },
		{ .tid = 7, .name = "seven", .flags = WP_THREAD_LIVE },
		{ .tid = 5,
		  .name = "five-c",
		  .nr_signals = 5,
		  .nr_samples = 6,
		  .flags = WP_THREAD_LIVE },
		{ .tid = 9, .name = "nine-new", .nr_signals = 1, .nr_samples = 0 },
	};
	struct spec r;
	struct wp_profile p;
	const struct wp_thread *t;

	/* samples in the window of tids 5 and 9; of 6 only before it */
	spec_alloc(&r, 4, 1, 1, 1);
	one_frame_stacks(&r);
	r.window_ns = 100;
	r.s[0] = (struct rsample){ 10, 6, 0, 0, 0 };
	r.s[1] = (struct rsample){ 500, 5, 0, 0, 0 };
	r.s[2] = (struct rsample){ 550, 9, 0, 0, 0 };
	r.s[3] = (struct rsample){ 600, 5, 0, 0, 0 };
	REQ(read_spec(NULL, 0, th, sizeof(th) / sizeof(*th), &r, &p, NULL) == 0);
	REQ(p.nr_samples == 3 && p.nr_threads == 3);
	t = thread_of(&p, 5);
	REQ(t && !strcmp(t->name, "five-c") && t->nr_signals == 9 && t->nr_samples == 12 &&
	    t->flags == WP_THREAD_LIVE);
	t = thread_of(&p, 9);
	REQ(t && !strcmp(t->name, "nine-new") && t->nr_signals == 5 && t->nr_samples == 4 &&
	    t->flags == 0);
	t = thread_of(&p, 7);
	REQ(t && !strcmp(t->name, "seven") && t->flags == WP_THREAD_LIVE && t->nr_samples == 0);
	REQ(!thread_of(&p, 6));
	report("threads: a reused tid is one thread (counts summed, flags or'ed, newest name)");
	REQ(p.nr_threads == 3 && p.threads[0].tid == 9 && p.threads[1].tid == 5 &&
	    p.threads[2].tid == 7);
	report("threads: those with samples in the window or alive, newest first; not the others");
	wp_profile_free(&p);
	spec_free(&r);
}

static void test_modules(void)
{
	static const struct wp_module mods[] = {
		{ .path = "/live-a", .start = 0x10000, .end = 0x30000 },
		{ .path = "/gone-over-a",
		  .start = 0x20000,
		  .end = 0x40000,
		  .flags = WP_MOD_UNLOADED },
		{ .path = "/gone-alone",
		  .start = 0x50000,
		  .end = 0x60000,
		  .flags = WP_MOD_UNLOADED },
		{ .path = "/gone-same",
		  .start = 0x70000,
		  .end = 0x80000,
		  .flags = WP_MOD_UNLOADED },
		{ .path = "/live-same", .start = 0x70000, .end = 0x80000 },
		{ .path = "/live-over-a", .start = 0x28000, .end = 0x38000 },
		{ .path = "/gone-touching",
		  .start = 0x38000,
		  .end = 0x50000,
		  .flags = WP_MOD_UNLOADED },
		{ .path = "/gone-inside",
		  .start = 0x12000,
		  .end = 0x13000,
		  .flags = WP_MOD_UNLOADED },
	};
	static const char *const want[] = { "/live-a", "/gone-alone", "/live-same", "/live-over-a",
					    "/gone-touching" };
	struct spec r;
	struct wp_profile p;
	size_t i;

	spec_alloc(&r, 0, 0, 0, 0);
	REQ(read_spec(mods, sizeof(mods) / sizeof(*mods), NULL, 0, &r, &p, NULL) == 0);
	REQ(p.nr_modules == sizeof(want) / sizeof(*want));
	for (i = 0; i < p.nr_modules && i < sizeof(want) / sizeof(*want); i++)
		REQ(!strcmp(p.modules[i].path, want[i]));
	wp_profile_free(&p);
	spec_free(&r);
	report("modules: unloaded ones a live one overlaps left out (not touching ones), order kept");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_cut();
	test_ring_window();
	test_counted();
	test_threads();
	test_modules();
	printf("window: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
