/* test_raw: unit tests for the raw dump (output/raw.h, wp_ring_raw_write):
 * round trip of a ring against the window its samples make (worked out
 * here from what was added), modules/threads/counters/settings,
 * truncation at every offset, byte flips, checksum-consistent fuzzing, a
 * ring made inconsistent on purpose, a ring written while another thread
 * fills it, injected write failures, and `build/wallprof convert` on a dump
 * with real addresses of this program. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../output/raw.h"
#include "../../preload/raw_dump.h"
#include "../../preload/ring.h"
#include "../../preload/wallprof.h"

#include "check.h"
#include "raw_files.h"
#include "ring_dump.h"

/* ---- fixtures ---- */

static struct wp_ring *mk_ring(size_t samples, uint64_t window)
{
	struct wp_ring_config c = {
		.nr_samples = samples,
		.nr_pcs = 256,
		.nr_stacks = 64,
		.nr_words = 8192,
		.window_ns = window,
	};
	return wp_ring_create(&c);
}

/* fill's stacks, leaf first. */
static const uint64_t s0[] = { 0x401000, 0x402000, 0x403000 };
static const uint64_t s1[] = { 0x401100, 0x402000, 0x403000 };
static const uint64_t s2[] = { 0x7f0000001000, 0x401500 };
static const uint64_t s3[] = { 0x402000, 0x402000, 0x403000, 0x404000 };
static const uint64_t s4[] = { 0xffffffffff600000ull };
static const struct {
	const uint64_t *pcs;
	unsigned n;
} fill_stacks[] = {
	{ s0, 3 }, { s1, 3 }, { s2, 2 }, { s3, 4 }, { s4, 1 },
};
#define FILL_N 40

/* fill's i-th sample. */
static uint32_t fill_tid(int i)
{
	return 100 + (uint32_t)(i % 4);
}

static uint32_t fill_flags(int i)
{
	return (i % 3 == 0) ? WP_SAMPLE_ON_CPU : WP_SAMPLE_SYSCALL;
}

/* 40 samples over 4 threads and 5 stacks, 10 ms apart, the leaf exact
 * every other one; a ring of 32 wraps. */
static void fill(struct wp_ring *r, uint64_t t0)
{
	int i;

	for (i = 0; i < FILL_N; i++)
		wp_ring_add(r, t0 + (uint64_t)i * 10000000ull, fill_tid(i), fill_flags(i),
			    (fill_flags(i) & WP_SAMPLE_SYSCALL) ? 202u : 0u, fill_stacks[i % 5].pcs,
			    fill_stacks[i % 5].n, i % 2);
}

/* The window of a ring that kept the last `keep` samples of fill(r, t0),
 * all within its window, worked out from what fill added (not from the
 * ring): those samples in time order; a stack per distinct (frames, exact
 * leaf), numbered in the order the samples first use them; a frame per
 * distinct (address, exact), numbered in the order those stacks first use
 * them. */
static void fill_window(uint64_t t0, size_t keep, struct wp_profile *p)
{
	int sid[10], i; /* stack id of fill stack k with the leaf exact (2k+1) or not (2k) */
	size_t nw = 0, k;

	memset(p, 0, sizeof(*p));
	p->samples = calloc(keep + 1, sizeof(*p->samples));
	p->stack_off = calloc(11, sizeof(*p->stack_off));
	p->stack_frames = calloc(64, sizeof(*p->stack_frames));
	p->pcs = calloc(64, sizeof(*p->pcs));
	if (!p->samples || !p->stack_off || !p->stack_frames || !p->pcs)
		abort();
	for (k = 0; k < 10; k++)
		sid[k] = -1;
	for (i = FILL_N - (int)keep; i < FILL_N; i++) {
		int key = (i % 5) * 2 + i % 2;
		struct wp_sample *x = &p->samples[p->nr_samples++];

		if (sid[key] < 0) {
			unsigned j;

			sid[key] = (int)p->nr_stacks;
			for (j = 0; j < fill_stacks[i % 5].n; j++) {
				struct wp_pc pc = { fill_stacks[i % 5].pcs[j],
						    j == 0 && i % 2 ? WP_PC_EXACT : 0 };

				for (k = 0; k < p->nr_pcs; k++)
					if (p->pcs[k].addr == pc.addr &&
					    p->pcs[k].flags == pc.flags)
						break;
				if (k == p->nr_pcs)
					p->pcs[p->nr_pcs++] = pc;
				p->stack_frames[nw++] = (uint32_t)k;
			}
			p->stack_off[++p->nr_stacks] = (uint32_t)nw;
		}
		x->t_ns = t0 + (uint64_t)i * 10000000ull;
		x->n = 1;
		x->tid = fill_tid(i);
		x->flags = fill_flags(i);
		x->syscall = (x->flags & WP_SAMPLE_SYSCALL) ? 202u : 0u;
		x->stack_id = (uint32_t)sid[key];
	}
}

static struct wp_module mods[4];
static char long_path[5000];
static struct wp_thread threads[6];
static struct wp_counters ctr;
static struct wp_raw_meta meta;

static void fixtures(void)
{
	uint64_t *c = (uint64_t *)&ctr;
	size_t i;

	memset(long_path, 'x', sizeof(long_path) - 1);
	long_path[0] = '/';
	mods[0] = (struct wp_module){ .path = "/usr/bin/app",
				      .bias = 0x400000,
				      .start = 0x400000,
				      .end = 0x410000,
				      .build_id_len = 20,
				      .flags = WP_MOD_MAIN };
	for (i = 0; i < 20; i++)
		mods[0].build_id[i] = (uint8_t)(0xa0 + i);
	mods[1] = (struct wp_module){ .path = long_path,
				      .bias = 0x7f0000000000,
				      .start = 0x7f0000000000,
				      .end = 0x7f0000100000 };
	/* dlclose'd, and its range reused by mods[1]: left out by the reader */
	mods[2] = (struct wp_module){ .path = "/tmp/plugin.so",
				      .bias = 0x7f0000080000,
				      .start = 0x7f0000080000,
				      .end = 0x7f0000090000,
				      .flags = WP_MOD_UNLOADED };
	mods[3] = (struct wp_module){ .path = "[vdso]",
				      .start = 0x7ffff7fc1000,
				      .end = 0x7ffff7fc3000,
				      .flags = WP_MOD_VDSO,
				      .build_id_len = 70 /* bogus: capped to 64 */ };
	/* 101 appears twice (a reused tid): the newest entry wins; 200 has no samples */
	threads[0] =
		(struct wp_thread){ .tid = 100, .name = "main", .nr_signals = 5, .nr_samples = 10 };
	threads[1] = (struct wp_thread){
		.tid = 101, .name = "old-101", .nr_signals = 1, .nr_samples = 2
	};
	threads[2] = (struct wp_thread){
		.tid = 102, .name = "worker-2", .nr_signals = 7, .nr_samples = 10
	};
	threads[3] =
		(struct wp_thread){ .tid = 200, .name = "idle", .nr_signals = 0, .nr_samples = 0 };
	threads[4] = (struct wp_thread){
		.tid = 101, .name = "new-101", .nr_signals = 3, .nr_samples = 8
	};
	threads[5] = (struct wp_thread){ .tid = 103, .nr_signals = 9, .nr_samples = 10 };
	memcpy(threads[5].name, "sixteen-chars-na", 16); /* no NUL: cut to 15 */
	for (i = 0; i < sizeof(ctr) / 8; i++)
		c[i] = 1000 + i;
	memset(&meta, 0, sizeof(meta));
	meta.pid = 4242;
	meta.main_tid = 100;
	meta.hz = 101;
	meta.ring_seconds = 30;
	meta.max_depth = 128;
	meta.realtime_offset_ns = -123456789012345ll;
	meta.start_ns = 999;
	meta.signal = 11;
	snprintf(meta.cmdline, sizeof(meta.cmdline), "./app --flag value");
}

static int write_dump(const char *path, const struct wp_ring *r, const struct wp_raw_meta *m)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int rc;

	if (fd < 0)
		return -1;
	rc = wp_raw_write(fd, m, r, mods, 4, threads, 6, &ctr);
	close(fd);
	return rc;
}

/* Same samples, stacks, frames (by content and by index) in both. */
static void same_window(const struct wp_profile *a, const struct wp_profile *b)
{
	size_t i, j;

	REQ(a->nr_samples == b->nr_samples);
	REQ(a->nr_stacks == b->nr_stacks);
	REQ(a->nr_pcs == b->nr_pcs);
	if (why[0])
		return;
	for (i = 0; i < a->nr_samples; i++) {
		const struct wp_sample *x = &a->samples[i], *y = &b->samples[i];
		uint32_t xo = a->stack_off[x->stack_id], xn = a->stack_off[x->stack_id + 1] - xo;
		uint32_t yo = b->stack_off[y->stack_id], yn = b->stack_off[y->stack_id + 1] - yo;

		REQ(x->t_ns == y->t_ns && x->tid == y->tid && x->flags == y->flags &&
		    x->syscall == y->syscall && x->stack_id == y->stack_id);
		REQ(xn == yn);
		for (j = 0; j < xn && j < yn; j++) {
			const struct wp_pc *p = &a->pcs[a->stack_frames[xo + j]];
			const struct wp_pc *q = &b->pcs[b->stack_frames[yo + j]];

			REQ(p->addr == q->addr && p->flags == q->flags);
		}
	}
	for (i = 0; i <= a->nr_stacks; i++)
		REQ(a->stack_off[i] == b->stack_off[i]);
	for (i = 0; i < a->stack_off[a->nr_stacks]; i++)
		REQ(a->stack_frames[i] == b->stack_frames[i]);
	for (i = 0; i < a->nr_pcs; i++)
		REQ(a->pcs[i].addr == b->pcs[i].addr && a->pcs[i].flags == b->pcs[i].flags);
}

static const struct wp_thread *thread_of(const struct wp_profile *p, uint32_t tid)
{
	size_t i;

	for (i = 0; i < p->nr_threads; i++)
		if (p->threads[i].tid == tid)
			return &p->threads[i];
	return NULL;
}

/* ---- tests ---- */

static void test_roundtrip(void)
{
	struct wp_ring *r = mk_ring(32, 10ull * 1000000000);
	struct wp_profile snap, p;
	struct wp_raw_info info;
	char path[PATH_MAX], err[256] = "";
	const uint64_t *c;
	int sig = -1, rc;
	size_t i;

	pathf(path, "round.raw");
	fill(r, 5000000000ull);
	REQ(wp_ring_stats(r)->nr_overwritten == 8);
	REQ(write_dump(path, r, &meta) == 0);
	report("write: wp_raw_write of a wrapped ring returns 0");

	fill_window(5000000000ull, 32, &snap);
	rc = wp_raw_read(path, &p, &sig, err, sizeof(err));
	REQ(rc == 0);
	if (rc < 0)
		printf("     (%s)\n", err);
	REQ(sig == 11);
	same_window(&p, &snap);
	REQ(p.nr_samples == 32);
	report("read: the window's samples, stacks and frames, numbered in first-use order");
	if (rc < 0 || p.nr_samples == 0) {
		wp_profile_free(&snap);
		wp_ring_destroy(r);
		return;
	}

	for (i = 1; i < p.nr_samples; i++)
		REQ(p.samples[i - 1].t_ns <= p.samples[i].t_ns);
	REQ(p.start_ns == p.samples[0].t_ns && p.end_ns == p.samples[p.nr_samples - 1].t_ns);
	report("read: sorted by time, start/end span the samples");

	REQ(p.nr_modules == 3);
	if (p.nr_modules == 3) {
		REQ(!strcmp(p.modules[0].path, "/usr/bin/app"));
		REQ(p.modules[0].bias == 0x400000 && p.modules[0].start == 0x400000 &&
		    p.modules[0].end == 0x410000 && p.modules[0].flags == WP_MOD_MAIN);
		REQ(p.modules[0].build_id_len == 20 &&
		    !memcmp(p.modules[0].build_id, mods[0].build_id, 20));
		REQ(strlen(p.modules[1].path) == WP_RAW_PATH_MAX - 1 &&
		    !strncmp(p.modules[1].path, long_path, WP_RAW_PATH_MAX - 1));
		REQ(!strcmp(p.modules[2].path, "[vdso]") && p.modules[2].flags == WP_MOD_VDSO &&
		    p.modules[2].build_id_len == WP_BUILD_ID_MAX);
	}
	report("read: modules round-trip (long path cut, shadowed unloaded module left out)");

	REQ(p.nr_threads == 4);
	REQ(thread_of(&p, 100) && !strcmp(thread_of(&p, 100)->name, "main") &&
	    thread_of(&p, 100)->nr_signals == 5 && thread_of(&p, 100)->nr_samples == 10);
	/* tid 101 was two threads: the newest name, the counts of both */
	REQ(thread_of(&p, 101) && !strcmp(thread_of(&p, 101)->name, "new-101") &&
	    thread_of(&p, 101)->nr_signals == 4 && thread_of(&p, 101)->nr_samples == 10);
	REQ(thread_of(&p, 103) && !strcmp(thread_of(&p, 103)->name, "sixteen-chars-n"));
	REQ(!thread_of(&p, 200));
	report("read: one thread per sampled tid, newest name, counts of a reused tid summed");

	{
		/* A thread alive at the dump is listed without samples (one
		 * that blocks our signal: its losses are accounted). */
		struct wp_profile q;
		char p2[PATH_MAX];

		pathf(p2, "live.raw");
		threads[3].flags = WP_THREAD_LIVE;
		REQ(write_dump(p2, r, &meta) == 0);
		threads[3].flags = 0;
		REQ(wp_raw_read(p2, &q, NULL, err, sizeof(err)) == 0);
		REQ(q.nr_threads == 5 && thread_of(&q, 200) &&
		    !strcmp(thread_of(&q, 200)->name, "idle") &&
		    thread_of(&q, 200)->flags == WP_THREAD_LIVE);
		wp_profile_free(&q);
		report("read: a live thread without samples is listed");
	}

	c = (const uint64_t *)&p.counters;
	for (i = 0; i < sizeof(p.counters) / 8; i++) {
		const uint64_t *want = (const uint64_t *)&ctr;

		if (&c[i] == &p.counters.nr_overwritten)
			REQ(c[i] == 8);
		else if (&c[i] == &p.counters.nr_dropped_full)
			REQ(c[i] == 0);
		else
			REQ(c[i] == want[i]);
	}
	report("read: counters round-trip, overwritten/dropped_full from the ring");

	REQ(p.pid == 4242 && p.main_tid == 100 && p.hz == 101 && p.ring_seconds == 30 &&
	    p.max_depth == 128 && p.realtime_offset_ns == -123456789012345ll && p.snapshot == 0);
	REQ(p.cmdline && !strcmp(p.cmdline, "./app --flag value"));
	report("read: settings and command line into the profile fields");

	wp_profile_free(&p);
	REQ(wp_raw_read_ex(path, &p, &info, err, sizeof(err)) == 0);
	REQ(info.signal == 11 && info.nr_ring_samples == 32 && info.nr_bad_samples == 0 &&
	    info.nr_bad_stacks == 0 && info.dump_ns > 0);
	report("read_ex: info for a clean dump");
	wp_profile_free(&p);
	wp_profile_free(&snap);
	wp_ring_destroy(r);
}

/* A dump with window_ns shrunk after the fact: the reader cuts by the
 * window's rule (samples older than the newest minus the window). */
static void test_window(void)
{
	struct wp_ring *r = mk_ring(64, 10ull * 1000000000);
	char path[PATH_MAX], err[256] = "";
	unsigned char *d;
	size_t len, off;
	uint64_t plen, w = 95000000; /* 9.5 ticks of 10 ms */
	struct wp_profile p;

	pathf(path, "window.raw");
	fill(r, 1000);
	REQ(write_dump(path, r, &meta) == 0);
	d = slurp(path, &len);
	REQ(d != NULL);
	if (d) {
		off = find_section(d, len, WP_RAW_TAG_RING, &plen);
		REQ(off != 0);
		memcpy(d + off + 16 + 32, &w, 8); /* cfg.window_ns */
		fix_sums(d, len);
		REQ(wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err)) == 0);
		/* newest at 1000 + 390 ms: 300 ms .. 390 ms kept */
		REQ(p.nr_samples == 10);
		REQ(p.nr_samples && p.samples[0].t_ns == 1000 + 300000000ull);
		wp_profile_free(&p);
	}
	free(d);
	report("read: window of the dump's window_ns ending at the newest sample");
	wp_ring_destroy(r);
}

/* A chunk (RUN! with a number): only the samples of [from, to), whatever
 * the ring's window holds; its profiler id and range read back. A dump
 * whose range runs backwards is refused. */
static void test_chunk(void)
{
	struct wp_ring *r = mk_ring(64, 10ull * 1000000000);
	struct wp_raw_meta m = meta;
	char path[PATH_MAX], err[256] = "";
	struct wp_profile p;

	pathf(path, "chunk.raw");
	fill(r, 1000);
	for (int i = 0; i < 16; i++)
		m.profiler_id[i] = (uint8_t)(0xa0 + i);
	m.chunk = 3;
	m.chunk_from_ns = 1000 + 100000000ull; /* samples 10 .. 19 */
	m.chunk_to_ns = 1000 + 200000000ull;
	REQ(write_dump(path, r, &m) == 0);
	REQ(wp_raw_read(path, &p, NULL, err, sizeof(err)) == 0);
	REQ(p.nr_samples == 10);
	REQ(p.nr_samples && p.samples[0].t_ns == m.chunk_from_ns);
	REQ(p.nr_samples && p.samples[p.nr_samples - 1].t_ns == 1000 + 190000000ull);
	REQ(p.chunk == 3 && p.has_profiler_id && p.profiler_id[15] == 0xaf);
	REQ(p.chunk_from_ns == m.chunk_from_ns && p.chunk_to_ns == m.chunk_to_ns);
	wp_profile_free(&p);
	{
		/* the dump leaves out the 10 samples before the range */
		size_t len, off;
		uint64_t plen, ns = 0;
		unsigned char *d = slurp(path, &len);

		REQ(d && (off = find_section(d, len, WP_RAW_TAG_RING, &plen)) != 0);
		if (d && off)
			memcpy(&ns, d + off + 16 + 10 * 8, 8);
		REQ(ns == FILL_N - 10);
		free(d);
	}

	m.chunk = 0; /* not a chunk: the whole window, the id still read */
	REQ(write_dump(path, r, &m) == 0);
	REQ(wp_raw_read(path, &p, NULL, err, sizeof(err)) == 0);
	REQ(p.nr_samples == FILL_N && p.chunk == 0 && p.has_profiler_id);
	wp_profile_free(&p);

	m.chunk = 4;
	m.chunk_from_ns = 5000;
	m.chunk_to_ns = 4000;
	REQ(write_dump(path, r, &m) == 0);
	REQ(wp_raw_read(path, &p, NULL, err, sizeof(err)) < 0);
	REQ(strstr(err, "RUN!") != NULL);
	report("read: a chunk keeps only the samples of its range; a backwards range refused");
	wp_ring_destroy(r);
}

static void test_empty(void)
{
	struct wp_ring *r = mk_ring(8, 1000);
	char path[PATH_MAX], err[256] = "";
	struct wp_profile p;
	struct wp_raw_info info;
	int fd;

	pathf(path, "empty.raw");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQ(wp_raw_write(fd, &meta, r, NULL, 5, NULL, 7, NULL) == 0);
	close(fd);
	REQ(wp_raw_read_ex(path, &p, &info, err, sizeof(err)) == 0);
	REQ(p.nr_samples == 0 && p.nr_stacks == 0 && p.nr_pcs == 0 && p.nr_threads == 0 &&
	    p.nr_modules == 0);
	REQ(p.start_ns == meta.start_ns && p.end_ns == info.dump_ns && p.stack_off);
	REQ(p.counters.nr_ticks == 0);
	wp_profile_free(&p);
	report("empty ring, NULL arrays and counters: a valid, empty profile");

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQ(wp_raw_write(fd, NULL, NULL, mods, 1, threads, 1, &ctr) == 0);
	close(fd);
	REQ(wp_raw_read(path, &p, NULL, err, sizeof(err)) == 0);
	REQ(p.nr_samples == 0 && p.pid == 0 && p.cmdline && !p.cmdline[0] && p.nr_modules == 1);
	wp_profile_free(&p);
	report("NULL meta and NULL ring: zeros, still readable");
	wp_ring_destroy(r);
}

static void test_ring_alone(void)
{
	struct wp_ring *r = mk_ring(32, 10ull * 1000000000);
	char path[PATH_MAX];
	unsigned char *d;
	size_t len;
	uint64_t plen = 0, sum, ns = 0;
	uint32_t tag = 0, ver = 0;
	int fd;

	pathf(path, "ring.section");
	fill(r, 1);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQ(wp_ring_raw_write(r, fd) == 0);
	close(fd);
	d = slurp(path, &len);
	REQ(d && len > 24);
	if (d && len > 24) {
		memcpy(&tag, d, 4);
		memcpy(&ver, d + 4, 4);
		memcpy(&plen, d + 8, 8);
		REQ(tag == WP_RAW_TAG_RING && ver == 2 && plen + 24 == len);
		if (plen + 24 == len) {
			memcpy(&sum, d + 16 + plen, 8);
			REQ(sum == wp_raw_checksum(d, 16 + plen));
			memcpy(&ns, d + 16 + 10 * 8, 8);
			REQ(ns == 32);
		}
	}
	free(d);
	report("wp_ring_raw_write: one RING section, length and checksum right");
	wp_ring_destroy(r);
}

/* Every proper prefix and every single-byte change is refused cleanly. */
static void test_corrupt(void)
{
	struct wp_ring *r = mk_ring(16, 10ull * 1000000000);
	char path[PATH_MAX], tpath[PATH_MAX], err[256];
	unsigned char *d;
	size_t len, i, bad = 0, noerr = 0;
	struct wp_profile p;
	static const unsigned char flips[] = { 0x01, 0x80, 0xff };

	pathf(path, "small.raw");
	pathf(tpath, "cut.raw");
	fill(r, 1);
	REQ(write_dump(path, r, &meta) == 0);
	d = slurp(path, &len);
	REQ(d != NULL);
	if (!d) {
		report("corrupt: small dump");
		return;
	}
	for (i = 0; i < len; i++) {
		err[0] = 0;
		if (wp_raw_read_mem(d, i, &p, NULL, err, sizeof(err)) == 0) {
			bad++;
			wp_profile_free(&p);
		} else if (!err[0] || p.samples || p.modules || p.cmdline) {
			noerr++;
		}
	}
	REQ(bad == 0 && noerr == 0);
	printf("     (%zu-byte dump, %zu prefixes)\n", len, len);
	report("truncated at every offset: refused with a reason, output empty");

	for (i = 0; i < len; i += 97) {
		err[0] = 0;
		REQ(spit(tpath, d, i) == 0);
		REQ(wp_raw_read(tpath, &p, NULL, err, sizeof(err)) < 0 && err[0]);
	}
	report("truncated files: refused through wp_raw_read too");

	bad = noerr = 0;
	for (i = 0; i < len; i++) {
		size_t f;

		for (f = 0; f < sizeof(flips); f++) {
			d[i] ^= flips[f];
			err[0] = 0;
			if (wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err)) == 0) {
				bad++;
				wp_profile_free(&p);
			} else if (!err[0]) {
				noerr++;
			}
			d[i] ^= flips[f];
		}
	}
	REQ(bad == 0 && noerr == 0);
	report("every byte flipped (3 patterns): refused");

	REQ(wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err)) == 0);
	wp_profile_free(&p);
	/* trailing garbage */
	{
		unsigned char *e = malloc(len + 3);

		memcpy(e, d, len);
		memcpy(e + len, "xyz", 3);
		REQ(wp_raw_read_mem(e, len + 3, &p, NULL, err, sizeof(err)) < 0 &&
		    strstr(err, "after the end marker"));
		free(e);
	}
	report("bytes after the end marker: refused");

	{
		unsigned char v2[16];

		memcpy(v2, d, 16);
		v2[8] = 2;
		REQ(wp_raw_read_mem(v2, 16, &p, NULL, err, sizeof(err)) < 0 &&
		    strstr(err, "version 2"));
		REQ(wp_raw_read_mem("{\"version\":\"1\"}", 15, &p, NULL, err, sizeof(err)) < 0 &&
		    strstr(err, "not a wallprof raw dump"));
		REQ(wp_raw_read_mem(NULL, 0, &p, NULL, err, sizeof(err)) < 0);
		REQ(spit(tpath, "", 0) == 0);
		REQ(wp_raw_read(tpath, &p, NULL, err, sizeof(err)) < 0 && strstr(err, "empty"));
		REQ(wp_raw_read("/nonexistent/x.raw", &p, NULL, err, sizeof(err)) < 0 &&
		    strstr(err, "No such file"));
		REQ(wp_raw_read(tmpdir, &p, NULL, err, sizeof(err)) < 0 && err[0]);
	}
	report("foreign, newer, empty, missing, directory: clean errors");

	/* A section dropped entirely (checksums intact): missing, not a crash. */
	{
		uint64_t plen;
		size_t off = find_section(d, len, WP_RAW_TAG_THRD, &plen);
		unsigned char *e = malloc(len);
		size_t n = 0, end_off;
		uint64_t v;
		uint32_t cnt;

		REQ(off != 0);
		memcpy(e, d, off);
		n = off;
		memcpy(e + n, d + off + 24 + plen, len - off - 24 - plen);
		n += len - off - 24 - plen;
		/* fix the end marker so only the missing section is wrong */
		end_off = find_section(e, n, WP_RAW_TAG_END, &v);
		if (end_off) {
			v = end_off;
			memcpy(e + end_off + 16, &v, 8);
			memcpy(&cnt, e + end_off + 24, 4);
			cnt--;
			memcpy(e + end_off + 24, &cnt, 4);
		}
		fix_sums(e, n);
		err[0] = 0;
		REQ(wp_raw_read_mem(e, n, &p, NULL, err, sizeof(err)) < 0 &&
		    strstr(err, "missing section 'THRD'"));
		free(e);
	}
	report("a section missing: refused, names it");
	free(d);
	wp_ring_destroy(r);
}

/* Random edits with the checksums recomputed: the parser and the rebuild
 * must cope with any content (success or a clean error, never a crash). */
static void test_fuzz(void)
{
	struct wp_ring *r = mk_ring(16, 10ull * 1000000000);
	char path[PATH_MAX], err[256];
	unsigned char *d, *e;
	size_t len, it, ok = 0, refused = 0, noerr = 0;
	struct wp_profile p;
	struct wp_raw_info info;

	rnd_state = 0x243f6a8885a308d3ull; /* the seed this test always had */
	pathf(path, "fuzz.raw");
	fill(r, 1);
	REQ(write_dump(path, r, &meta) == 0);
	d = slurp(path, &len);
	e = malloc(len);
	REQ(d && e);
	for (it = 0; d && e && it < 20000; it++) {
		unsigned k, n = 1 + (unsigned)(rnd() % 4);

		memcpy(e, d, len);
		for (k = 0; k < n; k++) {
			size_t at = 16 + (size_t)(rnd() % (len - 16));
			uint64_t v = rnd();

			uint32_t big = 0xffffffffu - (uint32_t)(v % 3);

			switch (rnd() % 4) {
			case 0: /* a random byte */
				e[at] = (unsigned char)v;
				break;
			case 1: /* one bit */
				e[at] ^= (unsigned char)(1u << (v % 8));
				break;
			case 2: /* a random u32 (count, index, length) */
				if (at + 4 <= len)
					memcpy(e + at, &v, 4);
				break;
			default: /* a huge u32 */
				if (at + 4 <= len)
					memcpy(e + at, &big, 4);
				break;
			}
		}
		fix_sums(e, len);
		err[0] = 0;
		if (wp_raw_read_mem(e, len, &p, &info, err, sizeof(err)) == 0) {
			size_t i;

			ok++;
			/* whatever came back must be internally consistent */
			for (i = 0; i < p.nr_samples; i++)
				REQ(p.samples[i].stack_id < p.nr_stacks);
			for (i = 0; i < p.stack_off[p.nr_stacks]; i++)
				REQ(p.stack_frames[i] < p.nr_pcs);
			wp_profile_free(&p);
		} else if (err[0]) {
			refused++;
		} else {
			noerr++;
		}
	}
	REQ(noerr == 0 && ok > 0 && refused > 0);
	printf("     (20000 edited dumps: %zu read, %zu refused)\n", ok, refused);
	report("fuzz with checksums fixed up: no crash, consistent output or an error");
	free(d);
	free(e);
	wp_ring_destroy(r);
}

/* A ring whose internals were torn: the writer stays in bounds, the reader
 * drops what does not hold together and counts it. */
static void test_scrambled(void)
{
	static const struct {
		unsigned what;
		const char *name;
	} cases[] = {
		{ WP_RING_SCRAMBLE_SAMPLE_STACK, "a sample's stack id out of range" },
		{ WP_RING_SCRAMBLE_STACK_FRAME, "a stack's frame id out of range" },
		{ WP_RING_SCRAMBLE_STACK_EXTENT, "a stack's extent past the arena" },
		{ WP_RING_SCRAMBLE_COUNTS, "head and counts past capacity" },
		{ 0xf, "all of it" },
	};
	char path[PATH_MAX], err[256], name[128];
	size_t i, k;

	pathf(path, "scrambled.raw");
	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct wp_ring *r = mk_ring(32, 10ull * 1000000000);
		struct wp_profile snap, p;
		struct wp_raw_info info;
		size_t on0 = 0, on1 = 0;

		fill(r, 1);
		REQ(ring_window(r, &snap, NULL) == 0); /* before the damage */
		/* The ring's stacks 0 and 1 are the first two added: 0x401000 as a
		 * return address (fill's i = 0), 0x401100 as an exact PC (i = 1). */
		for (k = 0; k < snap.nr_samples; k++) {
			const struct wp_pc *leaf =
				&snap.pcs[snap.stack_frames
						  [snap.stack_off[snap.samples[k].stack_id]]];

			on0 += leaf->addr == 0x401000 && leaf->flags == 0;
			on1 += leaf->addr == 0x401100 && leaf->flags == WP_PC_EXACT;
		}
		REQ(on0 > 0 && on1 > 0);
		wp_ring_test_scramble(r, cases[i].what);
		REQ(write_dump(path, r, &meta) == 0);
		err[0] = 0;
		REQ(wp_raw_read_ex(path, &p, &info, err, sizeof(err)) == 0);
		if (!why[0]) {
			for (k = 0; k < p.nr_samples; k++)
				REQ(p.samples[k].stack_id < p.nr_stacks);
			switch (cases[i].what) {
			case WP_RING_SCRAMBLE_SAMPLE_STACK:
				REQ(info.nr_bad_samples == 1 && info.nr_bad_stacks == 0);
				REQ(p.nr_samples == snap.nr_samples - 1);
				break;
			case WP_RING_SCRAMBLE_STACK_FRAME:
				REQ(info.nr_bad_stacks == 1 && info.nr_bad_samples == on0);
				REQ(p.nr_samples == snap.nr_samples - on0);
				break;
			case WP_RING_SCRAMBLE_STACK_EXTENT:
				REQ(info.nr_bad_stacks == 1 && info.nr_bad_samples == on1);
				REQ(p.nr_samples == snap.nr_samples - on1);
				break;
			case WP_RING_SCRAMBLE_COUNTS:
				REQ(info.nr_ring_samples == 32);
				break;
			}
			wp_profile_free(&p);
		}
		wp_profile_free(&snap);
		snprintf(name, sizeof(name), "inconsistent ring (%s): writes, reads, drops counted",
			 cases[i].name);
		report(name);
		wp_ring_destroy(r);
	}
}

/* The writer racing a thread that keeps adding (and compacting): every dump
 * must read back. The data race is the point: it is what a fatal signal
 * sees when the sampler could not be stopped. */
static struct wp_ring *race_ring;
static atomic_int race_stop;

static void *adder(void *arg)
{
	uint64_t pcs[8], t = 1;
	unsigned i;

	(void)arg;
	while (!atomic_load_explicit(&race_stop, memory_order_relaxed)) {
		unsigned n = 1 + (unsigned)(t % 8);

		for (i = 0; i < n; i++)
			pcs[i] = 0x400000 + ((t * 7 + i * 13) % 400) * 16;
		wp_ring_add(race_ring, t, 100 + (uint32_t)(t % 7), 0, 0, pcs, n, 1);
		t++;
	}
	return NULL;
}

static void test_race(void)
{
	struct wp_ring_config c = {
		/* 256 live samples use at most 256 of the 300 stacks, 400 distinct
		 * addresses fit in 600 frames: adds succeed, compaction is frequent */
		.nr_samples = 256, .nr_pcs = 600,        .nr_stacks = 300,
		.nr_words = 4096,  .window_ns = 1000000,
	};
	char path[PATH_MAX], err[256];
	pthread_t th;
	int i, ok = 0, started;
	size_t bad_samples = 0, bad_stacks = 0;

	pathf(path, "race.raw");
	race_ring = wp_ring_create(&c);
	atomic_store(&race_stop, 0);
	started = pthread_create(&th, NULL, adder, NULL) == 0;
	REQ(started);
	for (i = 0; started && i < 200; i++) {
		struct wp_profile p;
		struct wp_raw_info info;
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		REQ(wp_raw_write(fd, &meta, race_ring, mods, 4, threads, 6, &ctr) == 0);
		close(fd);
		err[0] = 0;
		if (wp_raw_read_ex(path, &p, &info, err, sizeof(err)) == 0) {
			ok++;
			bad_samples += info.nr_bad_samples;
			bad_stacks += info.nr_bad_stacks;
			wp_profile_free(&p);
		} else {
			printf("     (dump %d: %s)\n", i, err);
		}
	}
	atomic_store(&race_stop, 1);
	if (started)
		pthread_join(th, NULL);
	REQ(ok == 200);
	printf("     (200 dumps during %llu adds, %llu compactions: %zu samples, %zu stacks "
	       "dropped in all)\n",
	       (unsigned long long)wp_ring_stats(race_ring)->nr_added,
	       (unsigned long long)wp_ring_stats(race_ring)->nr_compactions, bad_samples,
	       bad_stacks);
	report("ring written while another thread adds and compacts: every dump reads back");
	wp_ring_destroy(race_ring);
}

static void test_write_failures(void)
{
	struct wp_ring *r = mk_ring(1024, 10ull * 1000000000);
	char path[PATH_MAX], err[256];
	struct wp_profile p;
	int n, fd, pipefd[2];

	pathf(path, "fail.raw");
	for (n = 0; n < 200; n++)
		wp_ring_add(r, (uint64_t)n, 1, 0, 0, (uint64_t[]){ 0x1000 + (uint64_t)n, 0x2000 },
			    2, 1);
	for (n = 1; n <= 4; n++) {
		wp_raw_fail_write_at = n;
		REQ(write_dump(path, r, &meta) < 0);
		REQ(wp_raw_read(path, &p, NULL, err, sizeof(err)) < 0);
	}
	wp_raw_fail_write_at = 0;
	REQ(write_dump(path, r, &meta) == 0);
	REQ(wp_raw_read(path, &p, NULL, err, sizeof(err)) == 0);
	wp_profile_free(&p);
	report("injected write failures: -1, and the partial file is refused");

	REQ(wp_raw_write(-1, &meta, r, NULL, 0, NULL, 0, NULL) < 0);
	fd = open(path, O_RDONLY);
	REQ(wp_raw_write(fd, &meta, r, NULL, 0, NULL, 0, NULL) < 0);
	close(fd);
	REQ(pipe(pipefd) == 0);
	close(pipefd[0]);
	signal(SIGPIPE, SIG_IGN);
	REQ(wp_raw_write(pipefd[1], &meta, r, NULL, 0, NULL, 0, NULL) < 0);
	close(pipefd[1]);
	REQ(wp_ring_raw_write(r, -1) < 0);
	report("bad descriptors (closed, read-only, broken pipe): -1");
	wp_ring_destroy(r);
}

/* ---- the converter on real addresses of this program ---- */

static volatile uint64_t ret_addr;

__attribute__((noinline, noclone)) void raw_test_leaf(void)
{
	ret_addr = (uint64_t)(uintptr_t)__builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline, noclone)) void raw_test_caller(void)
{
	raw_test_leaf();
	__asm__ volatile("" ::: "memory");
}

/* Runs build/wallprof with `args`; its output in `out`. */
static int run_convert(char *const args[], char *out, size_t outlen)
{
	int fds[2], status;
	pid_t pid;
	size_t n = 0;
	ssize_t k;

	if (pipe(fds) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		dup2(fds[1], 2);
		close(fds[0]);
		execv("build/wallprof", args);
		_exit(127);
	}
	close(fds[1]);
	while (n + 1 < outlen && (k = read(fds[0], out + n, outlen - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = 0;
	close(fds[0]);
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int has_function(json_t *root, const char *fn)
{
	json_t *frames = json_object_get(json_object_get(root, "profile"), "frames"), *f;
	size_t i;

	json_array_foreach(frames, i, f)
	{
		const char *s = json_string_value(json_object_get(f, "function"));

		if (s && !strcmp(s, fn))
			return 1;
	}
	return 0;
}

static void test_convert(void)
{
	struct wp_modmap mm = { 0 };
	struct wp_ring *r = mk_ring(256, 10ull * 1000000000);
	struct wp_raw_meta m = meta;
	char raw[PATH_MAX], json[PATH_MAX], defjson[PATH_MAX], out[4096];
	uint64_t pcs[2];
	json_t *root;
	int i, fd, rc;
	size_t k;

	if (access("build/wallprof", X_OK) != 0) {
		printf("skip convert: build/wallprof not built (run from the source root)\n");
		wp_ring_destroy(r);
		return;
	}
	raw_test_caller();
	pcs[0] = (uint64_t)(uintptr_t)&raw_test_leaf + 1; /* exact leaf PC */
	pcs[1] = ret_addr;          /* return address in the caller */
	wp_modmap_refresh(&mm);
	REQ(mm.nr > 0);
	for (i = 0; i < 100; i++)
		wp_ring_add(r, 1000000000ull + (uint64_t)i * 10000000ull, 100 + (uint32_t)(i % 2),
			    WP_SAMPLE_ON_CPU, 0, pcs, 2, 1);
	m.main_tid = 100;
	pathf(raw, "real.raw");
	pathf(json, "real-out.json");
	pathf(defjson, "real.json");
	fd = open(raw, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQ(wp_raw_write(fd, &m, r, mm.mods, mm.nr, threads, 6, &ctr) == 0);
	close(fd);

	rc = run_convert((char *[]){ "wallprof", "convert", raw, "-o", json, "--platform", "native",
				     NULL },
			 out, sizeof(out));
	REQ(rc == 0);
	REQ(strstr(out, "wallprof: wrote ") && strstr(out, "(100 samples, 2 threads, 1.0 s)"));
	REQ(strstr(out, "died of signal 11"));
	root = json_load_file(json, 0, NULL);
	REQ(root != NULL);
	if (root) {
		REQ(has_function(root, "raw_test_leaf"));
		REQ(has_function(root, "raw_test_caller"));
		REQ(json_array_size(json_object_get(json_object_get(root, "profile"), "samples")) ==
		    100);
		json_decref(root);
	}
	if (why[0])
		printf("     (converter said: %s)\n", out);
	report("wallprof convert: symbolizes a dump of this program (function names)");

	rc = run_convert((char *[]){ "wallprof", "convert", raw, NULL }, out, sizeof(out));
	REQ(rc == 0 && access(defjson, F_OK) == 0 && strstr(out, defjson));
	report("wallprof convert: default output RAW.raw -> RAW.json");

	REQ(spit(json, "garbage", 7) == 0);
	rc = run_convert((char *[]){ "wallprof", "convert", json, "-o", defjson, NULL }, out,
			 sizeof(out));
	REQ(rc == 1 && !strncmp(out, "wallprof: ", 10) && strchr(out, '\n') &&
	    strchr(out, '\n')[1] == 0 && strstr(out, "not a wallprof raw dump"));
	rc = run_convert((char *[]){ "wallprof", "convert", NULL }, out, sizeof(out));
	REQ(rc == 2);
	rc = run_convert((char *[]){ "wallprof", "convert", raw, "--bogus", NULL }, out,
			 sizeof(out));
	REQ(rc == 2 && strstr(out, "wallprof: convert: unknown option --bogus"));
	report("wallprof convert: bad input (exit 1) or usage (exit 2): one line");

	for (k = 0; k < mm.nr; k++)
		free(mm.mods[k].path);
	free(mm.mods);
	wp_ring_destroy(r);
}

/* The real use: a process dies of SIGSEGV and its handler writes the dump
 * with nothing but the async-signal-safe writer, then lets it die. */
static char crash_path[PATH_MAX];
static struct wp_ring *crash_ring;
static struct wp_modmap crash_mods;
static struct wp_raw_meta crash_meta;

static void on_fatal(int sig)
{
	int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	crash_meta.signal = sig;
	if (fd >= 0) {
		wp_raw_write(fd, &crash_meta, crash_ring, crash_mods.mods, crash_mods.nr, threads,
			     6, &ctr);
		close(fd);
	}
	/* SA_RESETHAND: returning re-runs the faulting store, which now kills */
}

static void test_fatal_signal(void)
{
	char err[256];
	struct wp_profile p;
	int status = 0, sig = 0, i;
	pid_t pid;

	pathf(crash_path, "crash.raw");
	pid = fork();
	if (pid == 0) {
		struct sigaction sa;
		volatile int *page;
		uint64_t pcs[2];

		crash_ring = mk_ring(256, 10ull * 1000000000);
		wp_modmap_refresh(&crash_mods);
		raw_test_caller();
		pcs[0] = (uint64_t)(uintptr_t)&raw_test_leaf + 1;
		pcs[1] = ret_addr;
		for (i = 0; i < 50; i++)
			wp_ring_add(crash_ring, 1000 + (uint64_t)i * 10000000ull, 100, 0, 0, pcs, 2,
				    1);
		crash_meta = meta;
		memset(&sa, 0, sizeof(sa));
		sa.sa_handler = on_fatal;
		sa.sa_flags = SA_RESETHAND;
		sigaction(SIGSEGV, &sa, NULL);
		page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		*page = 1;
		_exit(0);
	}
	REQ(pid > 0 && waitpid(pid, &status, 0) == pid);
	REQ(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
	REQ(wp_raw_read(crash_path, &p, &sig, err, sizeof(err)) == 0);
	REQ(sig == SIGSEGV && p.nr_samples == 50 && p.nr_modules > 0);
	if (why[0])
		printf("     (status 0x%x, %s)\n", status, err);
	wp_profile_free(&p);
	report("SIGSEGV handler writes the dump, the process still dies of SIGSEGV");
}

static void cleanup(void)
{
	static const char *const names[] = {
		"round.raw", "window.raw",    "empty.raw",     "ring.section", "small.raw",
		"cut.raw",   "fuzz.raw",      "scrambled.raw", "race.raw",     "fail.raw",
		"real.raw",  "real-out.json", "real.json",     "crash.raw",
	};
	char path[PATH_MAX];
	size_t i;

	for (i = 0; i < sizeof(names) / sizeof(*names); i++) {
		pathf(path, names[i]);
		unlink(path);
	}
	rmdir(tmpdir);
}

int main(void)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_raw.XXXXXX", base);
	if (!mkdtemp(tmpdir)) {
		printf("FAIL mkdtemp %s: %s\n", tmpdir, strerror(errno));
		printf("raw: 0 passed, 1 failed\n");
		return 1;
	}
	fixtures();
	test_roundtrip();
	test_window();
	test_chunk();
	test_empty();
	test_ring_alone();
	test_corrupt();
	test_fuzz();
	test_scrambled();
	test_race();
	test_write_failures();
	test_convert();
	test_fatal_signal();
	cleanup();
	printf("raw: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
