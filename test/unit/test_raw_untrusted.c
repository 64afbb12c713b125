/* test_raw_untrusted: the raw dump reader (output/raw_read.c) on crafted
 * input. Dumps are built in memory with the writer (wp_raw_write for META,
 * CTRS, MODL, THRD; the section framing of raw.h for a RING section whose
 * tables are chosen freely), then corrupted: stacks overlapping the frame
 * arena or each other, extents out of bounds, module paths that the JSON
 * would repeat in every frame, truncation at every offset, bit flips, edits
 * with the checksums fixed up; files that are not regular files. Every case
 * must be refused with a one-line reason or read into a profile whose size,
 * and the JSON written from it, is bounded by the input's size (the bound
 * stated in raw_read.c: JSON <= 16 * B + 64 KiB without symbolization).
 * Also the symbolizer's module lookup over the overlapping module maps a
 * dump can name: the right module, and no scan of the overlapping ones. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../output/output.h"
#include "../../output/raw.h"
#include "../../preload/raw_dump.h"
#include "../../preload/wallprof.h"
#include "../../symbolize/symbolize.h"

#include "check.h"
#include "raw_files.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

/* The bound raw_read.c promises for JSON written without a symbolizer. */
#define JSON_BOUND(b) (16 * (uint64_t)(b) + 65536)

/* ---- crafting dumps ------------------------------------------------------ */

static struct wp_raw_meta meta;
static struct wp_counters ctr;

/* A whole dump of `r` with this file's settings and counters
 * (raw_files.h, craft_dump). */
static unsigned char *build(const struct wp_module *mods, size_t nr_mods,
			    const struct wp_thread *threads, size_t nr_threads,
			    const struct spec *r, size_t *len)
{
	return craft_dump(&meta, &ctr, mods, nr_mods, threads, nr_threads, r, len);
}

/* Offset of the RING payload in a dump built by build(). */
static size_t ring_payload(const unsigned char *d, size_t len)
{
	uint64_t n;
	size_t off = find_section(d, len, WP_RAW_TAG_RING, &n);

	if (!off)
		abort();
	return off + 16;
}

static const struct wp_module app = {
	.path = "/usr/lib/wallprof-test/app",
	.start = 0x400000,
	.end = 0x800000,
	.flags = WP_MOD_MAIN,
};

/* What a profile read from dump `d` may hold at most: no more samples,
 * stacks and frame entries than the RING section's tables, and no more
 * frames in all its stacks than the arena has words. */
static void bounded(const struct wp_profile *p, const unsigned char *d, size_t len)
{
	size_t ring = ring_payload(d, len), i;
	uint64_t c[4]; /* nr_samples, nr_pcs, nr_stacks, nr_words as in the file */

	memcpy(c, d + ring + 10 * 8, sizeof(c));
	REQ(p->nr_samples <= c[0] && p->nr_pcs <= c[1] && p->nr_stacks <= c[2]);
	REQ(p->stack_off && p->stack_off[p->nr_stacks] <= c[3]);
	for (i = 0; i < p->nr_samples; i++)
		REQ(p->samples[i].stack_id < p->nr_stacks);
	for (i = 0; p->stack_off && i < p->stack_off[p->nr_stacks]; i++)
		REQ(p->stack_frames[i] < p->nr_pcs);
}

/* Writes `p` as Sentry JSON (no symbolizer) and returns its size, 0 on failure. */
static size_t json_bytes(const struct wp_profile *p)
{
	char path[PATH_MAX], err[256];
	struct wp_out_stats st;

	pathf(path, "out.json");
	memset(&st, 0, sizeof(st));
	if (wp_out_sentry_write_with(p, NULL, NULL, NULL, path, &st, err, sizeof(err)) < 0) {
		printf("     (json: %s)\n", err);
		return 0;
	}
	unlink(path);
	return st.bytes;
}

/* ---- tests --------------------------------------------------------------- */

/* The report: every stack spans the whole frame arena, every sample uses a
 * different one; the old reader built nst * nw frames from nst * 8 + nw * 4
 * bytes. Overlapping stacks do not hold together: all dropped. */
static void test_overlap_all(void)
{
	struct spec r;
	unsigned char *d;
	size_t len, i;
	struct wp_profile p;
	struct wp_raw_info info;
	char err[256] = "";
	int rc;

	spec_alloc(&r, 2048, 2048, 2048, 2048);
	for (i = 0; i < r.np; i++)
		r.p[i] = (struct rpc){ 0x401000 + i * 16, 0, 0 };
	for (i = 0; i < r.nw; i++)
		r.w[i] = (uint32_t)i;
	for (i = 0; i < r.nst; i++)
		r.st[i] = (struct rstack){ 0, (uint32_t)r.nw };
	for (i = 0; i < r.ns; i++)
		r.s[i] = (struct rsample){ 1000 + i, 7, (uint32_t)i, 0, 0 };
	d = build(&app, 1, NULL, 0, &r, &len);
	rc = wp_raw_read_mem(d, len, &p, &info, err, sizeof(err));
	REQ(rc == 0);
	if (rc == 0) {
		bounded(&p, d, len);
		REQ(p.nr_samples == 0 && info.nr_bad_stacks == r.nst &&
		    info.nr_bad_samples == r.ns);
		printf("     (%zu-byte dump: %zu samples, %zu frames kept)\n", len, p.nr_samples,
		       p.stack_off ? (size_t)p.stack_off[p.nr_stacks] : 0);
		wp_profile_free(&p);
	}
	report("stacks all spanning the whole arena: dropped, frames kept <= arena");
	free(d);
	spec_free(&r);
}

/* Which stacks survive: disjoint and touching extents do, every member of
 * an overlapping group does not, nor an extent past the arena. */
static void test_overlap_cases(void)
{
	static const struct {
		uint32_t off, len;
		int keep;
	} st[] = {
		{ 0, 4, 0 },   /* A overlaps B */
		{ 2, 4, 0 },   /* B */
		{ 6, 2, 1 },   /* C touches B's end: disjoint */
		{ 8, 0, 1 },   /* D empty: overlaps nothing */
		{ 9, 5, 0 },   /* E contains F */
		{ 10, 2, 0 },  /* F */
		{ 14, 2, 1 },  /* G */
		{ 16, 2, 0 },  /* H and I: the same extent twice */
		{ 16, 2, 0 },  /* I */
		{ 22, 3, 0 },  /* J ends past the arena (24 words) */
		{ 18, 4, 1 },  /* K: the rest */
		{ UINT32_MAX, 2, 0 }, /* L: off + len would wrap in 32 bits */
		{ 2, UINT32_MAX, 0 }, /* M: ditto, from the length */
	};
	const size_t n = sizeof(st) / sizeof(*st);
	struct spec r;
	unsigned char *d;
	size_t len, i, kept = 0;
	struct wp_profile p;
	struct wp_raw_info info;
	char err[256] = "";
	int rc;

	spec_alloc(&r, n, 24, n, 24);
	for (i = 0; i < r.np; i++)
		r.p[i] = (struct rpc){ 0x401000 + i * 16, 0, 0 };
	for (i = 0; i < r.nw; i++)
		r.w[i] = (uint32_t)i;
	for (i = 0; i < n; i++) {
		r.st[i] = (struct rstack){ st[i].off, st[i].len };
		/* tid = the stack's index, to tell which samples survived */
		r.s[i] = (struct rsample){ 1000 + i, (uint32_t)i, (uint32_t)i, 0, 0 };
		kept += st[i].keep;
	}
	d = build(&app, 1, NULL, 0, &r, &len);
	rc = wp_raw_read_mem(d, len, &p, &info, err, sizeof(err));
	REQ(rc == 0);
	if (rc == 0) {
		bounded(&p, d, len);
		REQ(p.nr_samples == kept && info.nr_bad_stacks == n - kept &&
		    info.nr_bad_samples == n - kept);
		for (i = 0; i < p.nr_samples; i++) {
			const struct wp_sample *s = &p.samples[i];
			uint32_t o = p.stack_off[s->stack_id], m = p.stack_off[s->stack_id + 1] - o;

			REQ(s->tid < n && st[s->tid].keep);
			/* the frames are the stack's own: words off .. off + len */
			REQ(s->tid < n && m == st[s->tid].len);
			if (s->tid < n && m == st[s->tid].len && m > 0)
				REQ(p.pcs[p.stack_frames[o]].addr ==
				    0x401000 + (uint64_t)st[s->tid].off * 16);
		}
		wp_profile_free(&p);
	}
	report("overlapping, nested, identical, out-of-range extents dropped; disjoint kept");
	free(d);
	spec_free(&r);
}

/* A module path the Sentry writer repeats in every frame of the module:
 * 4 KiB of control characters (6 bytes of JSON each) over 4096 frames is
 * 100 MB of JSON from an 86 KB dump. Refused; an ordinary path is not. */
static void path_dump(const char *path, struct spec *r, unsigned char **d, size_t *len)
{
	struct wp_module m = { .path = (char *)path, .start = 0x1000, .end = 1ull << 40 };
	size_t i;

	spec_alloc(r, 1, 4096, 1, 4096);
	for (i = 0; i < r->np; i++)
		r->p[i] = (struct rpc){ 0x10000 + i * 16, WP_PC_EXACT, 0 };
	for (i = 0; i < r->nw; i++)
		r->w[i] = (uint32_t)i;
	r->st[0] = (struct rstack){ 0, (uint32_t)r->nw };
	r->s[0] = (struct rsample){ 1000, 7, 0, 0, 0 };
	*d = build(&m, 1, NULL, 0, r, len);
}

/* 4096 frames, every `every`-th inside one of 64 modules with 2 KiB paths,
 * the others outside all (or, with `short_path`, all inside a 65th module
 * named /s). Returns what the reader did (0 read, -1 refused); a profile
 * read is written and must be within the JSON bound. */
static int paths_in_64(size_t every, int short_path, size_t *len)
{
	static char paths[64][2048];
	struct wp_module mods[65];
	struct spec r;
	unsigned char *d;
	struct wp_profile p;
	char err[256] = "";
	size_t j;
	int rc;

	spec_alloc(&r, 1, 4096, 1, 4096);
	for (j = 0; j < 64; j++) {
		memset(paths[j], 'a' + (int)(j % 26), sizeof(paths[j]) - 1);
		paths[j][0] = '/';
		paths[j][sizeof(paths[j]) - 1] = 0;
		mods[j] = (struct wp_module){ .path = paths[j],
					      .start = 0x100000 * (j + 1),
					      .end = 0x100000 * (j + 2) };
	}
	mods[64] = (struct wp_module){ .path = "/s", .start = 1ull << 40, .end = 2ull << 40 };
	for (j = 0; j < r.np; j++) {
		uint64_t a = j % every ? 0x10 : 0x100000 * (j % 64 + 1) + j;

		r.p[j] = (struct rpc){ short_path ? (1ull << 40) + j : a, WP_PC_EXACT, 0 };
	}
	for (j = 0; j < r.nw; j++)
		r.w[j] = (uint32_t)j;
	r.st[0] = (struct rstack){ 0, (uint32_t)r.nw };
	r.s[0] = (struct rsample){ 1000, 7, 0, 0, 0 };
	d = build(mods, 65, NULL, 0, &r, len);
	rc = wp_raw_read_mem(d, *len, &p, NULL, err, sizeof(err));
	if (rc == 0) {
		size_t b = json_bytes(&p);

		REQ(b > 0 && b <= JSON_BOUND(*len));
		wp_profile_free(&p);
	} else {
		REQ(strstr(err, "module paths"));
	}
	free(d);
	spec_free(&r);
	return rc;
}

static void test_path_budget(void)
{
	char *ctl = malloc(WP_RAW_PATH_MAX);
	struct spec r;
	unsigned char *d;
	size_t len;
	struct wp_profile p;
	char err[256] = "";
	int rc;

	memset(ctl, 1, WP_RAW_PATH_MAX - 1);
	ctl[0] = '/';
	ctl[WP_RAW_PATH_MAX - 1] = 0;
	path_dump(ctl, &r, &d, &len);
	rc = wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err));
	REQ(rc < 0 && strstr(err, "module paths") && !strchr(err, '\n'));
	if (rc == 0) {
		printf("     (read: %zu-byte dump, JSON %zu bytes)\n", len, json_bytes(&p));
		wp_profile_free(&p);
	} else {
		printf("     (%s)\n", err);
	}
	free(d);
	spec_free(&r);
	report("4 KiB module path of control characters over 4096 frames: refused");

	path_dump("/usr/lib/x86_64-linux-gnu/libwallprof-test.so.1", &r, &d, &len);
	rc = wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err));
	REQ(rc == 0);
	if (rc == 0) {
		size_t b = json_bytes(&p);

		REQ(p.nr_pcs == 4096 && b > 0 && b <= JSON_BOUND(len));
		wp_profile_free(&p);
	}
	free(d);
	spec_free(&r);
	/* The same 4096 frames and 64 modules of 2 KiB paths (a 222 KB dump,
	 * a budget of 1.8 MB): a module is charged for the frames inside it
	 * only. All frames inside: 8.4 MB, refused; one in 2: 4.2 MB, refused;
	 * one in 16: 0.5 MB, read; all in a 65th module with a short path:
	 * read. */
	REQ(paths_in_64(1, 0, &len) < 0);
	REQ(paths_in_64(2, 0, &len) < 0);
	REQ(paths_in_64(16, 0, &len) == 0);
	REQ(paths_in_64(1, 1, &len) == 0);
	printf("     (64 modules: a %zu-byte dump)\n", len);
	free(ctl);
	report("ordinary paths read; long paths charged per frame in their own module");
}

/* One dump made to get the most JSON per byte of input, read; returns the
 * JSON bytes per input byte, 0 when the reader refused it (err says why),
 * -1 when the JSON could not be written. Samples have every flag, an
 * unknown syscall and 20-digit times; `threads` 0: all of one thread, 1:
 * each of a thread of its own with a control-character name and 20-digit
 * counts, 2: of a thread of its own with no entry; frames are in `nmods`
 * modules with paths of `ctl` control characters (1 module with an
 * ordinary path when nmods is 0). */
enum shape { SAMPLES, FRAMES, DEEP, ALL };

static double json_ratio(enum shape shape, size_t n, int threads, size_t nmods, size_t ctl,
			 char *err, size_t errlen)
{
	static char paths[4][WP_RAW_PATH_MAX];
	struct wp_module mods[4];
	struct wp_thread *th = NULL;
	struct spec r;
	unsigned char *d;
	size_t len, i, nth = 0;
	struct wp_profile p;
	double ratio = 0;

	switch (shape) {
	case SAMPLES: /* many samples of one 1-frame stack */
		spec_alloc(&r, n, 1, 1, 1);
		break;
	case FRAMES:  /* many frames, each its own stack and sample */
	case ALL:
		spec_alloc(&r, n, n, n, n);
		break;
	default:      /* one deep stack of big frame ids */
		spec_alloc(&r, 1, n / 8, 1, n);
		break;
	}
	if (threads) {
		th = calloc(r.ns, sizeof(*th));
		nth = threads == 1 ? r.ns : 0;
		for (i = 0; i < r.ns; i++) {
			th[i].tid = 4000000000u - (uint32_t)i;
			memset(th[i].name, 0x1f, sizeof(th[i].name));
			th[i].nr_signals = th[i].nr_samples = INT64_MAX;
		}
	}
	if (nmods == 0) {
		mods[0] = app;
		mods[0].start = 0;
		mods[0].end = UINT64_MAX;
	}
	for (i = 0; i < nmods; i++) {
		memset(paths[i], 0x02, ctl);
		paths[i][0] = '/';
		paths[i][ctl] = 0;
		mods[i] = (struct wp_module){ .path = paths[i],
					      .start = (i + 1) << 40,
					      .end = (i + 2) << 40,
					      .build_id_len = 64 };
		memset(mods[i].build_id, 0xab, 64);
	}
	for (i = 0; i < r.np; i++)
		r.p[i] = (struct rpc){ ((i % (nmods ? nmods : 1)) + 1) << 40 |
					       (0xfffff00000ull + i * 64),
				       WP_PC_EXACT, 0 };
	for (i = 0; i < r.nw; i++)
		r.w[i] = (uint32_t)(shape == DEEP ? r.np - 1 - i % r.np : i);
	for (i = 0; i < r.nst; i++)
		r.st[i] = (struct rstack){ (uint32_t)i, shape == DEEP ? (uint32_t)r.nw : 1 };
	for (i = 0; i < r.ns; i++)
		r.s[i] = (struct rsample){ 1ull << 62 | i, th ? th[i].tid : 4000000000u,
					   (uint32_t)(i % r.nst),
					   WP_SAMPLE_ON_CPU | WP_SAMPLE_SYSCALL |
						   WP_SAMPLE_TRUNCATED | WP_SAMPLE_PARTIAL,
					   4000000000u };
	r.window_ns = UINT64_MAX;
	d = build(mods, nmods ? nmods : 1, th, nth, &r, &len);
	if (wp_raw_read_mem(d, len, &p, NULL, err, errlen) == 0) {
		size_t b;

		bounded(&p, d, len);
		REQ(p.nr_samples == r.ns);
		b = json_bytes(&p);
		ratio = b ? (double)b / (double)len : -1;
		REQ(b > 0 && b <= JSON_BOUND(len));
		wp_profile_free(&p);
	}
	free(th);
	free(d);
	spec_free(&r);
	return ratio;
}

/* The shapes that give the most JSON per byte, each written: under
 * 16 * B + 64 KiB. The last one has everything at once, with module paths
 * as long as the path budget lets through. */
static void test_json_bound(void)
{
	static const struct {
		const char *name;
		enum shape shape;
		size_t n;
		int threads;
	} cases[] = {
		{ "samples, one named thread each", SAMPLES, 20000, 1 },
		{ "samples, one unnamed thread each", SAMPLES, 20000, 2 },
		{ "frames, each its stack and sample", FRAMES, 8000, 0 },
		{ "one deep stack of big frame ids", DEEP, 64000, 0 },
	};
	char err[256] = "";
	double r, worst = 0;
	size_t i, ctl;

	for (i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		r = json_ratio(cases[i].shape, cases[i].n, cases[i].threads, 0, 0, err,
			       sizeof(err));
		printf("     (%s: %.1f bytes of JSON per byte)\n", cases[i].name, r);
		REQ(r > 0);
		worst = r > worst ? r : worst;
	}
	/* a 1023-byte command line of control characters, nothing else */
	memset(meta.cmdline, 0x03, sizeof(meta.cmdline) - 1);
	r = json_ratio(SAMPLES, 1, 0, 0, 0, err, sizeof(err));
	memset(meta.cmdline, 0, sizeof(meta.cmdline));
	printf("     (a long command line alone: %.1f per byte)\n", r);
	REQ(r > 0);
	for (ctl = 400; ctl > 1; ctl -= 4) {
		r = json_ratio(ALL, 4000, 1, 4, ctl, err, sizeof(err));
		if (r != 0)
			break;
		REQ(strstr(err, "module paths"));
	}
	printf("     (everything, with %zu-byte module paths, the longest let through: %.1f "
	       "per byte)\n",
	       ctl, r);
	REQ(r > 0 && ctl > 100);
	worst = r > worst ? r : worst;
	printf("     (most JSON per byte: %.1f)\n", worst);
	report("crafted for the most JSON per input byte: under 16 * B + 64 KiB");
}

/* Truncated at every offset, every bit flipped: refused with a reason and
 * nothing allocated, or read within bounds. The dump has every section,
 * overlapping and out-of-range stacks and a module. */
static void test_prefixes_and_flips(void)
{
	static const struct wp_thread th[2] = { { .tid = 7, .name = "main" },
						{ .tid = 8, .name = "w" } };
	struct spec r;
	unsigned char *d;
	size_t len, i, refused = 0, read_ok = 0;
	struct wp_profile p;
	char err[256], path[PATH_MAX];
	int bit, rc;

	spec_alloc(&r, 12, 6, 6, 16);
	for (i = 0; i < r.np; i++)
		r.p[i] = (struct rpc){ 0x401000 + i * 16, (uint32_t)(i & 1), 0 };
	for (i = 0; i < r.nw; i++)
		r.w[i] = (uint32_t)(i % r.np);
	r.st[0] = (struct rstack){ 0, 3 };
	r.st[1] = (struct rstack){ 3, 3 };
	r.st[2] = (struct rstack){ 5, 4 };  /* overlaps 1 */
	r.st[3] = (struct rstack){ 9, 2 };
	r.st[4] = (struct rstack){ 15, 9 }; /* past the arena */
	r.st[5] = (struct rstack){ 11, 5 };
	for (i = 0; i < r.ns; i++)
		r.s[i] = (struct rsample){ 1000 + i * 1000, 7 + (uint32_t)(i & 1),
					   (uint32_t)(i % r.nst), 0, 0 };
	d = build(&app, 1, th, 2, &r, &len);
	REQ(wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err)) == 0);
	if (!why[0]) {
		bounded(&p, d, len);
		REQ(p.nr_samples == 6); /* stacks 0, 3 and 5 */
		wp_profile_free(&p);
	}
	report("the fixture: 3 of 6 stacks hold together");

	for (i = 0; i < len; i++) {
		err[0] = 0;
		rc = wp_raw_read_mem(d, i, &p, NULL, err, sizeof(err));
		REQ(rc < 0 && err[0] && !strchr(err, '\n') && !p.samples && !p.modules &&
		    !p.cmdline && !p.stack_off);
		if (rc == 0)
			wp_profile_free(&p);
	}
	pathf(path, "cut.raw");
	for (i = 0; i < len; i += 7) {
		err[0] = 0;
		REQ(spit(path, d, i) == 0);
		rc = wp_raw_read(path, &p, NULL, err, sizeof(err));
		REQ(rc < 0 && err[0]);
		if (rc == 0)
			wp_profile_free(&p);
	}
	printf("     (%zu-byte dump, %zu prefixes)\n", len, len);
	report("every prefix refused with a one-line reason (in memory and as a file)");

	for (i = 0; i < len; i++) {
		for (bit = 0; bit < 8; bit++) {
			d[i] ^= (unsigned char)(1u << bit);
			err[0] = 0;
			rc = wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err));
			REQ(rc < 0 && err[0] && !strchr(err, '\n'));
			if (rc == 0)
				wp_profile_free(&p);
			d[i] ^= (unsigned char)(1u << bit);
		}
	}
	report("every bit flipped: refused (checksums)");

	/* With the checksums fixed up: random u32 in the RING payload (counts,
	 * offsets, lengths, ids), reads stay within bounds. */
	{
		size_t ring = ring_payload(d, len);
		unsigned char *e = malloc(len);
		int it;

		for (it = 0; it < 20000; it++) {
			int k, n = 1 + (int)(rnd() % 3);

			memcpy(e, d, len);
			for (k = 0; k < n; k++) {
				size_t at = ring + (size_t)(rnd() % (len - 24 - ring - 4));
				uint32_t v = (uint32_t)rnd();

				if (rnd() % 2)
					v %= 32; /* small values hit the tables */
				memcpy(e + at, &v, 4);
			}
			fix_sums(e, len);
			err[0] = 0;
			rc = wp_raw_read_mem(e, len, &p, NULL, err, sizeof(err));
			if (rc == 0) {
				read_ok++;
				bounded(&p, e, len);
				wp_profile_free(&p);
			} else {
				refused++;
				REQ(err[0] && !strchr(err, '\n'));
			}
		}
		free(e);
		printf("     (20000 edited dumps: %zu read, %zu refused)\n", read_ok, refused);
		REQ(read_ok > 0 && refused > 0);
	}
	report("RING payload edited, checksums fixed: frames kept never exceed the arena");
	free(d);
	spec_free(&r);
}

/* The module map: an unloaded module whose range a live one reuses is left
 * out, checked against the plain definition on random maps with overlaps of
 * every kind. */
static void test_module_shadowing(void)
{
	enum { N = 40 };
	static char paths[N][16];
	struct wp_module mods[N];
	struct spec r;
	int it, i, j;

	spec_alloc(&r, 1, 1, 1, 1);
	r.s[0] = (struct rsample){ 1, 1, 0, 0, 0 };
	r.st[0] = (struct rstack){ 0, 1 };
	for (it = 0; it < 300 && !why[0]; it++) {
		unsigned char *d;
		size_t len, n = 0;
		struct wp_profile p;
		char err[256];
		int want[N];

		for (i = 0; i < N; i++) {
			uint64_t a = rnd() % 64, b = rnd() % 64;

			snprintf(paths[i], sizeof(paths[i]), "/m%d", i);
			mods[i] = (struct wp_module){ .path = paths[i],
						      .start = a * 0x1000,
						      .end = b * 0x1000 + (rnd() % 3) * 0x800,
						      .flags = rnd() % 3 ? WP_MOD_UNLOADED : 0 };
		}
		for (i = 0; i < N; i++) {
			want[i] = 1;
			for (j = 0; j < N && (mods[i].flags & WP_MOD_UNLOADED); j++)
				if (j != i && !(mods[j].flags & WP_MOD_UNLOADED) &&
				    mods[j].start < mods[i].end && mods[i].start < mods[j].end)
					want[i] = 0;
		}
		d = build(mods, N, NULL, 0, &r, &len);
		REQ(wp_raw_read_mem(d, len, &p, NULL, err, sizeof(err)) == 0);
		for (i = 0; !why[0] && i < N; i++) {
			if (!want[i])
				continue;
			REQ(n < p.nr_modules && !strcmp(p.modules[n].path, paths[i]) &&
			    p.modules[n].start == mods[i].start && p.modules[n].end == mods[i].end);
			n++;
		}
		REQ(why[0] || n == p.nr_modules);
		wp_profile_free(&p);
		free(d);
	}
	spec_free(&r);
	report("module map: unloaded modules overlapping a live one left out (300 random maps)");
}

/* The symbolizer's module for an address, over the modules a dump names:
 * the loaded one containing it, else an unloaded one, the lower index
 * first; checked against that rule on random maps of 40 modules with
 * every kind of overlap (files that do not exist: module + offset). */
static void test_sym_module(void)
{
	enum { N = 40 };
	static char paths[N][48];
	struct wp_module mods[N];
	int it, i, k;

	for (it = 0; it < 200 && !why[0]; it++) {
		struct wp_sym *sym;

		for (i = 0; i < N; i++) {
			uint64_t a = rnd() % 64, b = rnd() % 64;

			snprintf(paths[i], sizeof(paths[i]), "/nonexistent/wallprof/m%d", i);
			mods[i] = (struct wp_module){ .path = paths[i],
						      .start = a * 0x1000,
						      .end = b * 0x1000 + (rnd() % 3) * 0x800,
						      .flags = rnd() % 3 ? WP_MOD_UNLOADED : 0 };
		}
		sym = wp_sym_open(mods, N);
		REQ(sym != NULL);
		for (k = 0; sym && k < 300 && !why[0]; k++) {
			uint64_t addr = rnd() % (66 * 0x1000);
			struct wp_sym_result r;
			int want = -1;

			for (i = 0; i < N; i++) {
				int iu = !!(mods[i].flags & WP_MOD_UNLOADED);

				if (addr < mods[i].start || addr >= mods[i].end)
					continue;
				if (want < 0 || iu < !!(mods[want].flags & WP_MOD_UNLOADED))
					want = i;
			}
			REQ(wp_sym_lookup(sym, addr, &r) == 0 && r.module == want);
		}
		if (sym)
			wp_sym_close(sym);
	}
	report("symbolizer: the module of an address on random overlapping maps");
}

/* One (unloaded) module spanning everything and 200000 small ones inside
 * it, which win where they are: the old
 * lookup scanned every module that starts below the address (4 * 10^10
 * steps for 200000 lookups); one lookup is a binary search now. Run in a
 * child with an alarm 20 times what it takes under ASan here. */
static int many_modules(const char *unused)
{
	const size_t n = 200000;
	struct wp_module *m = calloc(n + 1, sizeof(*m));
	struct wp_sym *sym;
	size_t i;

	(void)unused;
	if (!m)
		return 3;
	m[0] = (struct wp_module){ .path = "/nonexistent/wallprof/big",
				   .start = 0,
				   .end = 1ull << 62,
				   .flags = WP_MOD_UNLOADED };
	for (i = 1; i <= n; i++)
		m[i] = (struct wp_module){ .path = "/nonexistent/wallprof/small",
					   .start = 0x100000000ull + i * 0x10000,
					   .end = 0x100000000ull + i * 0x10000 + 0x100 };
	sym = wp_sym_open(m, n + 1);
	if (!sym)
		return 3;
	for (i = 0; i < n; i++) {
		struct wp_sym_result r;

		/* between the small ones, above them all */
		if (wp_sym_lookup(sym, 0x100000000ull + (n + 1 + i) * 0x10000, &r) < 0 ||
		    r.module != 0)
			return 4;
		if (i % 1000 == 0 &&
		    (wp_sym_lookup(sym, 0x100000000ull + (i + 1) * 0x10000 + 8, &r) < 0 ||
		     r.module != (int)i + 1))
			return 5;
	}
	wp_sym_close(sym);
	free(m);
	return 0;
}

__attribute__((noinline, noclone)) void raw_untrusted_marker(void)
{
	__asm__ volatile("" ::: "memory");
}

/* This program's executable named `n` times at different addresses (what
 * a dump listing one file over and over asks for): every copy resolves
 * the same function, and the file's symbols and DWARF are loaded once (a
 * session each took 8 GB for 500 copies of libc with its debug info).
 * Returns 0, or what went wrong. */
static size_t nr_copies;

static int same_file_many(const char *unused)
{
	struct wp_modmap mm = { 0 };
	struct wp_module *m, *exe = NULL;
	struct wp_sym *sym;
	size_t i;
	int rc = 0;

	(void)unused;
	wp_modmap_refresh(&mm);
	for (i = 0; i < mm.nr; i++)
		if (mm.mods[i].flags & WP_MOD_MAIN)
			exe = &mm.mods[i];
	if (!exe || exe->bias == 0)
		return 2; /* not a PIE: nothing to shift */
	m = calloc(nr_copies, sizeof(*m));
	if (!m)
		return 3;
	for (i = 0; i < nr_copies; i++) {
		uint64_t d = (uint64_t)(i + 1) << 40;

		m[i] = *exe;
		m[i].bias += d;
		m[i].start += d;
		m[i].end += d;
	}
	sym = wp_sym_open(m, nr_copies);
	for (i = 0; sym && i < nr_copies && !rc; i++) {
		uint64_t a = (uint64_t)(uintptr_t)&raw_untrusted_marker - exe->bias + m[i].bias;
		struct wp_sym_result r;

		if (wp_sym_lookup(sym, a, &r) < 0)
			rc = 4;
		else if (r.module != (int)i || r.nr_frames < 1 ||
			 !r.frames[r.nr_frames - 1].function ||
			 !strstr(r.frames[r.nr_frames - 1].function, "raw_untrusted_marker"))
			rc = 5;
	}
	if (!sym)
		rc = 3;
	wp_sym_close(sym);
	free(m);
	for (i = 0; i < mm.nr; i++)
		free(mm.mods[i].path);
	free(mm.mods);
	return rc;
}

/* Runs fn(arg) in a child with a 20 s alarm (a reader that blocks or reads
 * without end is killed: a failure, not a hung test) and optionally an
 * address-space limit; returns the child's exit status, or -signal. */
static int in_child(int (*fn)(const char *), const char *arg, size_t as_limit)
{
	int status;
	pid_t pid;

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		alarm(20);
		if (as_limit) {
			struct rlimit rl = { as_limit, as_limit };

			setrlimit(RLIMIT_AS, &rl);
		}
		_exit(fn(arg));
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return -1000;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

static const char *want_err;

/* 0 when wp_raw_read refuses `path` with an error containing want_err. */
static int refuses(const char *path)
{
	struct wp_profile p;
	char err[256] = "";

	if (wp_raw_read(path, &p, NULL, err, sizeof(err)) == 0)
		return 1;
	if (!strstr(err, want_err) || strchr(err, '\n')) {
		printf("     (%s: %s)\n", path, err);
		return 2;
	}
	return 0;
}

static void expect_refused(const char *path, const char *want, size_t as_limit, const char *name)
{
	int rc;

	want_err = want;
	rc = in_child(refuses, path, as_limit);
	if (rc < 0)
		printf("     (%s: the reader was killed by signal %d)\n", path, -rc);
	REQ(rc == 0);
	report(name);
}

static void test_files(void)
{
	char path[PATH_MAX];
	unsigned char junk[4096];
	size_t i;
	int fd;

	expect_refused(tmpdir, "not a regular file (a directory)", 0, "a directory: refused");
	pathf(path, "fifo");
	REQ(mkfifo(path, 0600) == 0);
	expect_refused(path, "not a regular file (a FIFO)", 0,
		       "a FIFO without a writer: refused, not waited on");
	unlink(path);
	/* /dev/zero never ends: the old reader grew its buffer until out of memory */
	if (!UNDER_ASAN)
		expect_refused("/dev/zero", "not a regular file (a character device)", 256u << 20,
			       "/dev/zero: refused, not read");
	else
		printf("skip /dev/zero: no address-space limit under ASan (the plain build runs it)\n");
	pathf(path, "empty.raw");
	REQ(spit(path, "", 0) == 0);
	expect_refused(path, "empty file", 0, "an empty file: refused");
	for (i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)rnd();
	pathf(path, "random.raw");
	REQ(spit(path, junk, sizeof(junk)) == 0);
	expect_refused(path, "not a wallprof raw dump", 0, "random bytes: refused");
	memcpy(junk, WP_RAW_MAGIC, 8);
	memcpy(junk + 8, &(uint32_t){ 2 }, 4);
	memcpy(junk + 12, &(uint32_t){ WP_RAW_BYTE_ORDER }, 4);
	REQ(spit(path, junk, sizeof(junk)) == 0);
	expect_refused(path, "unsupported raw dump version 2", 0,
		       "a valid header with version 2: refused");
	/* 4 GiB of nothing (sparse): refused from its 16 header bytes, never
	 * read into memory (under a 256 MiB address-space limit) */
	pathf(path, "sparse.raw");
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	REQ(fd >= 0 && ftruncate(fd, 4ll << 30) == 0);
	if (fd >= 0)
		close(fd);
	if (!UNDER_ASAN)
		expect_refused(path, "bad magic", 256u << 20,
			       "a 4 GiB foreign file: refused from its header, not read");
	else
		printf("skip 4 GiB file: no address-space limit under ASan (the plain build runs it)\n");
	unlink(path);
	pathf(path, "random.raw");
	unlink(path);
	pathf(path, "empty.raw");
	unlink(path);
}

/* JSON per sample of a run beyond its first (Sentry's format lists every
 * tick; the worst case: a large tid, syscall, truncated and partial). */
#define JSON_PER_TICK 160

/* RING v2's run-length records, crafted: a record stands for no more ticks
 * than the tick table the dump carries (its forgotten ticks are dropped,
 * all but its first, which has its own time); an open record ends at the
 * newest tick, and one whose first tick is newer than that is refused; a
 * count over several ticks without a first tick number is refused; of two
 * records of one thread that share a tick, the later is dropped. The JSON
 * stays within the bound plus JSON_PER_TICK per tick a run adds. */
static void test_runs_untrusted(void)
{
	struct spec r;
	struct wp_profile p;
	struct wp_raw_info info;
	unsigned char *d;
	char err[256] = "";
	size_t len, json, k;
	const uint32_t TICKED = 0x80000000u, OPEN = 0x40000000u;

	spec_alloc(&r, 7, 1, 1, 1);
	r.st[0] = (struct rstack){ 0, 1 };
	r.p[0].addr = 0x400100;
	spec_v2(&r, 100, 1099); /* ticks 1000..1099 at 1000..100000 ns */
	for (k = 0; k < 100; k++)
		r.ticks[k] = 1000 * (k + 1);
	r.window_ns = 1000000000;
	/* thread 1: ticks 1000..1049, 50 samples */
	r.s[0] = (struct rsample){ 1000, 1, 0, 0, 0 };
	r.count[0] = TICKED | 50, r.tickno[0] = 1000;
	/* thread 1 again, ticks 1040..1059: shares ticks with the first: dropped */
	r.s[1] = (struct rsample){ 41000, 1, 0, 0, 0 };
	r.count[1] = TICKED | 20, r.tickno[1] = 1040;
	/* thread 2: open from tick 1090, so 1090..1099, 10 samples */
	r.s[2] = (struct rsample){ 91000, 2, 0, 0, 0 };
	r.count[2] = TICKED | OPEN | 1, r.tickno[2] = 1090;
	/* thread 3: 2^30 - 1 ticks from 1050: ends far past the newest, so
	 * none of its ticks but the first is known: 1 sample at its own time */
	r.s[3] = (struct rsample){ 51000, 3, 0, 0, 0 };
	r.count[3] = TICKED | 0x3fffffff, r.tickno[3] = 1050;
	/* thread 4: open from a tick newer than the newest: refused */
	r.s[4] = (struct rsample){ 99000, 4, 0, 0, 0 };
	r.count[4] = TICKED | OPEN | 1, r.tickno[4] = 2000;
	/* thread 5: 5 ticks, but no first tick number: refused */
	r.s[5] = (struct rsample){ 99000, 5, 0, 0, 0 };
	r.count[5] = 5;
	/* thread 6: ticks 900..1009: the table knows 1000..1009; its first
	 * at its own time, the 99 between forgotten */
	r.s[6] = (struct rsample){ 500, 6, 0, 0, 0 };
	r.count[6] = TICKED | 110, r.tickno[6] = 900;
	d = build(NULL, 0, NULL, 0, &r, &len);
	REQ(wp_raw_read_mem(d, len, &p, &info, err, sizeof(err)) == 0);
	if (!err[0]) {
		REQ(wp_profile_check(&p, err, sizeof(err)) == 0);
		REQ(wp_profile_count(&p) == 50 + 10 + 1 + 1 + 10);
		REQ(info.nr_bad_samples == 3);
		REQ(p.end_ns == 100000 && p.start_ns == 500);
		json = json_bytes(&p);
		REQ(json > 0 && json <= JSON_BOUND(len) + JSON_PER_TICK * (wp_profile_count(&p) -
									   p.nr_samples));
		wp_profile_free(&p);
	} else {
		printf("     (%s)\n", err);
	}
	free(d);
	report("RING v2 runs: bounded by the tick table, overlaps and impossible counts dropped");

	/* Random counts, first ticks and flags over a random table: never
	 * more than one sample per thread per tick of the table (and one per
	 * record at its own time), and the JSON within the bound. */
	for (int round = 0; round < 200; round++) {
		uint64_t tids = 1 + rnd() % 8;

		for (k = 0; k < r.ns; k++) {
			r.s[k] = (struct rsample){ rnd() % 200000, (uint32_t)(rnd() % tids), 0,
						   (uint32_t)rnd() & 0xf, (uint32_t)rnd() };
			r.count[k] = (uint32_t)rnd();
			r.tickno[k] = (uint32_t)(1000 + rnd() % 150);
		}
		for (k = 0; k < r.nt; k++)
			r.ticks[k] = rnd() % 200000;
		d = build(NULL, 0, NULL, 0, &r, &len);
		err[0] = 0;
		if (wp_raw_read_mem(d, len, &p, &info, err, sizeof(err)) == 0) {
			REQ(wp_profile_check(&p, NULL, 0) == 0);
			/* the ticks of the table, and a record's own time for the
			 * first tick of one the table has forgotten */
			REQ(wp_profile_count(&p) <= tids * r.nt + r.ns);
			json = json_bytes(&p);
			REQ(json > 0 &&
			    json <= JSON_BOUND(len) +
					    JSON_PER_TICK * (wp_profile_count(&p) - p.nr_samples));
			wp_profile_free(&p);
		}
		free(d);
	}
	spec_free(&r);
	report("RING v2 runs, random: one sample per thread and tick at most, JSON bounded");
}

int main(void)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char path[PATH_MAX];

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_raw_untrusted.XXXXXX", base);
	if (!mkdtemp(tmpdir)) {
		printf("FAIL mkdtemp %s: %s\n", tmpdir, strerror(errno));
		printf("raw_untrusted: 0 passed, 1 failed\n");
		return 1;
	}
	meta.pid = 4242;
	meta.main_tid = 7;
	meta.hz = 100;
	meta.ring_seconds = 30;
	meta.max_depth = 128;
	meta.signal = 11;
	test_overlap_all();
	test_overlap_cases();
	test_path_budget();
	test_json_bound();
	test_runs_untrusted();
	test_prefixes_and_flips();
	test_module_shadowing();
	test_sym_module();
	{
		char name[128];
		int rc = in_child(many_modules, NULL, 0);

		if (rc)
			printf("     (the child ended with %d)\n", rc);
		REQ(rc == 0);
		report("symbolizer: 200000 lookups among 200001 nested modules, in bounded time");
		/* 3000 copies in 512 MiB of address space (not under ASan: 100) */
		nr_copies = UNDER_ASAN ? 100 : 3000;
		rc = in_child(same_file_many, NULL, UNDER_ASAN ? 0 : 512u << 20);
		if (rc)
			printf("     (the child ended with %d)\n", rc);
		REQ(rc == 0);
		snprintf(name, sizeof(name),
			 "symbolizer: one file named %zu times resolves in each, loaded once",
			 nr_copies);
		report(name);
	}
	test_files();
	pathf(path, "cut.raw");
	unlink(path);
	rmdir(tmpdir);
	printf("raw_untrusted: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
