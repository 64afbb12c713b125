/* Unit tests of the HTML flame graph's writer (output/html.c) and its data
 * (output/html_data.c): the runs and the trie of a small profile exactly,
 * the size of a full 30 s ring of 64 threads, hostile names that must not
 * end the page's <script> elements, a diff's second data object, a failing
 * sink. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "mem_sink.h"
#include "../../output/formats.h"
#include "../../output/html_data.h"
#include "../../output/raw.h"

/* ---- models built by hand ---------------------------------------------- */

/* A model of `nr_funcs` functions, one location and one frame each
 * ("fn_<i>" unless `names` gives them), with room for the stacks and
 * samples the caller fills in. */
static void model_init(struct wp_model *m, size_t nr_funcs, const char *const *names,
		       size_t nr_stacks, size_t stack_frames, size_t nr_samples)
{
	size_t i;
	char buf[96];

	memset(m, 0, sizeof(*m));
	m->p.pcs = calloc(nr_funcs, sizeof(*m->p.pcs));
	m->locs = calloc(nr_funcs, sizeof(*m->locs));
	m->frames = calloc(nr_funcs, sizeof(*m->frames));
	m->p.nr_pcs = m->nr_frames = nr_funcs;
	for (i = 0; i < nr_funcs; i++) {
		m->p.pcs[i].addr = 0x400000 + 16 * i;
		m->locs[i].module = -1;
		m->locs[i].module_offset = m->p.pcs[i].addr;
		m->locs[i].first = (uint32_t)i;
		m->locs[i].nr = 1;
		if (names) {
			m->frames[i].function = names[i] ? strdup(names[i]) : NULL;
		} else {
			snprintf(buf, sizeof(buf), "project::module_%zu::function_%zu(int)", i % 40,
				 i);
			m->frames[i].function = strdup(buf);
			snprintf(buf, sizeof(buf), "/src/project/module_%zu.cc", i % 40);
			m->frames[i].file = strdup(buf);
			m->frames[i].line = (int)(10 + i % 500);
		}
	}
	m->p.stack_off = calloc(nr_stacks + 1, sizeof(uint32_t));
	m->p.stack_frames = calloc(stack_frames + 1, sizeof(uint32_t));
	m->p.samples = calloc(nr_samples + 1, sizeof(struct wp_sample));
	m->p.hz = 101;
	m->p.pid = 4242;
	m->p.cmdline = strdup("./app --serve");
}

static void model_free(struct wp_model *m)
{
	size_t i;

	for (i = 0; i < m->nr_frames; i++) {
		free((char *)m->frames[i].function);
		free((char *)m->frames[i].file);
	}
	free(m->frames);
	free(m->locs);
	wp_profile_free(&m->p);
	memset(m, 0, sizeof(*m));
}

/* Appends a stack (`n` frame-table indices, leaf first). */
static void add_stack(struct wp_model *m, const uint32_t *pcs, size_t n)
{
	size_t off = m->p.stack_off[m->p.nr_stacks];

	memcpy(m->p.stack_frames + off, pcs, n * sizeof(*pcs));
	m->p.stack_off[++m->p.nr_stacks] = (uint32_t)(off + n);
}

static void add_sample(struct wp_model *m, uint64_t tick, uint32_t tid, uint32_t stack, int on_cpu,
		       int syscall)
{
	struct wp_sample *s = &m->p.samples[m->p.nr_samples++];

	s->t_ns = 1000000000ull + tick * (1000000000ull / 101);
	s->n = 1;
	s->tid = tid;
	s->stack_id = stack;
	s->flags = on_cpu ? WP_SAMPLE_ON_CPU : 0;
	if (!on_cpu && syscall >= 0) {
		s->flags |= WP_SAMPLE_SYSCALL;
		s->syscall = (uint32_t)syscall;
	}
}

static void set_threads(struct wp_model *m, uint32_t first_tid, size_t n)
{
	size_t i;

	m->p.threads = calloc(n, sizeof(*m->p.threads));
	m->p.nr_threads = n;
	for (i = 0; i < n; i++) {
		m->p.threads[i].tid = first_tid + (uint32_t)i;
		snprintf(m->p.threads[i].name, sizeof(m->p.threads[i].name), "worker-%u",
			 (unsigned)(i % 1000));
	}
	m->p.start_ns = m->p.nr_samples ? m->p.samples[0].t_ns : 0;
	m->p.end_ns = m->p.nr_samples ? m->p.samples[m->p.nr_samples - 1].t_ns : 0;
}

/* Writes the page of `m` (base `b` or NULL) into the memory sink. */
static int page(const struct wp_model *m, const struct wp_model *b, struct wp_out_stats *st)
{
	struct wp_format_opts o = { 0 };
	struct wp_out_sink s;
	char err[256];

	o.base = b;
	mem_sink(&s, err, sizeof(err));
	memset(st, 0, sizeof(*st));
	return wp_out_html(m, &o, &s, st);
}

/* The JSON string value of `key` in the data object after `from`, copied
 * (malloc'd), or NULL. */
static char *field(const char *from, const char *key)
{
	char pat[64];
	const char *a, *b;
	char *out;

	snprintf(pat, sizeof(pat), "\"%s\":\"", key);
	a = strstr(from, pat);
	if (!a)
		return NULL;
	a += strlen(pat);
	b = strchr(a, '"');
	if (!b)
		return NULL;
	out = strndup(a, (size_t)(b - a));
	return out;
}

/* Packed numbers (html_data.h) back. Returns how many. */
static size_t unpack(const char *s, uint64_t *out, size_t max)
{
	static const char end[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";
	static const char more[] = "ghijklmnopqrstuvwxyz0123456789-_";
	uint64_t v = 0;
	unsigned shift = 0;
	size_t n = 0;

	for (; *s && n < max; s++) {
		const char *e = strchr(end, *s), *m = strchr(more, *s);

		if (e) {
			out[n++] = v | (uint64_t)(e - end) << shift;
			v = 0;
			shift = 0;
		} else if (m) {
			v |= (uint64_t)(m - more) << shift;
			shift += 5;
		} else {
			return (size_t)-1;
		}
	}
	return n;
}

/* ---- tests ------------------------------------------------------------- */

/* Two threads; runs and trie nodes are exactly what html_data.h says. */
static void test_runs(void)
{
	struct wp_model m;
	struct wp_out_stats st;
	uint32_t s0[] = { 2, 1, 0 }, s1[] = { 3, 1, 0 };
	uint64_t v[64];
	char *nodes, *runs0, *p2;
	size_t n;

	model_init(&m, 4, NULL, 2, 6, 16);
	add_stack(&m, s0, 3);
	add_stack(&m, s1, 3);
	/* thread 10: ticks 0,1,2 stack 0 on-CPU; 5,6 stack 1 in read (0);
	 * thread 11: tick 1 stack 1 off-CPU, no system call */
	add_sample(&m, 0, 10, 0, 1, -1);
	add_sample(&m, 1, 10, 0, 1, -1);
	add_sample(&m, 1, 11, 1, 0, -1);
	add_sample(&m, 2, 10, 0, 1, -1);
	add_sample(&m, 5, 10, 1, 0, 0);
	add_sample(&m, 6, 10, 1, 0, 0);
	set_threads(&m, 10, 2);
	REQ(page(&m, NULL, &st) == 0);
	REQ(st.nr_samples == 6 && st.nr_threads == 2 && st.bytes == mem_len);
	nodes = field(mem_buf, "nodes");
	REQ(nodes != NULL);
	/* fn_0 (root), fn_1, fn_2 | fn_3 below fn_1: (1,f0) (1,f1) (1,f2) (2,f3) */
	n = nodes ? unpack(nodes, v, 64) : 0;
	REQ(n == 8);
	REQ(v[0] == 1 && v[2] == 1 && v[4] == 1 && v[6] == 2);
	REQ(v[3] != v[1] && v[5] != v[7]);
	p2 = strstr(mem_buf, "\"runs\":[\"");
	REQ(p2 != NULL);
	runs0 = p2 ? strndup(p2 + 9, strcspn(p2 + 9, "\"")) : NULL;
	n = runs0 ? unpack(runs0, v, 64) : 0;
	/* node 3 on-CPU from tick 0 for 3; node 4 in syscalls[0] 2 ticks later, 2 */
	REQ(n == 8);
	REQ(v[0] == 3 && v[1] == 0 && v[2] == 0 && v[3] == 3);
	REQ(v[4] == 4 && v[5] == 2 && v[6] == 2 && v[7] == 2);
	REQ(strstr(mem_buf, "\"syscalls\":[\"read\"]") != NULL);
	REQ(p2 && strstr(p2, "\",\"EBBB\"]") != NULL); /* thread 11: node 4, state 1, tick 1, 1 */
	REQ(strstr(mem_buf, "\"threads\":[[10,\"worker-0\",5],[11,\"worker-1\",1]]") != NULL);
	free(nodes);
	free(runs0);
	model_free(&m);
	mem_reset();
	report("html_runs");
}

/* How many times `needle` occurs in `hay`, ignoring case. */
static size_t count_ci(const char *hay, const char *needle)
{
	size_t n = 0, k = strlen(needle);

	for (; *hay; hay++)
		if (!strncasecmp(hay, needle, k))
			n++;
	return n;
}

/* Names that would end the <script> or break a JavaScript string. */
static void test_hostile_names(void)
{
	static const char *const names[] = {
		"</script><script>alert(1)</script>",
		"line\xe2\x80\xa8sep\xe2\x80\xa9par",
		"bad\xff\xc3utf8\x01\"quote\\back",
		"<!-- <SCRIPT> &amp;",
		NULL,
	};
	struct wp_model m;
	struct wp_out_stats st;
	uint32_t s0[] = { 0, 1, 2, 3, 4 };
	const char *data;

	model_init(&m, 5, names, 1, 5, 2);
	free(m.p.cmdline);
	m.p.cmdline = strdup("./x </script>\xe2\x80\xa8");
	add_stack(&m, s0, 5);
	add_sample(&m, 0, 7, 0, 1, -1);
	set_threads(&m, 7, 1);
	strcpy(m.p.threads[0].name, "</script>");
	REQ(page(&m, NULL, &st) == 0);
	/* The page's own three <script> elements end, nothing else does. */
	REQ(count_ci(mem_buf, "</script") == 3);
	REQ(count_ci(mem_buf, "<script") == 3);
	REQ(!strstr(mem_buf, "\xe2\x80\xa8") && !strstr(mem_buf, "\xe2\x80\xa9"));
	REQ(!strchr(mem_buf, '\xff') && !strchr(mem_buf, '\x01'));
	data = strstr(mem_buf, "id=\"wp-data\">");
	REQ(data != NULL);
	REQ(data && !strstr(data, "<!--"));
	REQ(strstr(mem_buf,
		   "\"\\u003c/script\\u003e\\u003cscript\\u003ealert(1)\\u003c/script\\u003e\""));
	REQ(strstr(mem_buf, "\"line\\u2028sep\\u2029par\""));
	REQ(strstr(mem_buf, "\"bad\\ufffd\\ufffdutf8\\u0001\\\"quote\\\\back\""));
	REQ(strstr(mem_buf, "\"title\":\"./x \\u003c/script\\u003e\\u2028\""));
	/* The unknown function's label: its address. */
	REQ(strstr(mem_buf, "\"0x400040\""));
	model_free(&m);
	mem_reset();
	report("html_hostile_names");
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng % n);
}

/* A full ring: 30 s at 101 Hz of 64 threads; `busy` of them on CPU in a
 * new stack (of 3000, 20 to 40 deep) most ticks, the others blocked in one
 * of a few stacks that change every few seconds. Returns the page's size. */
static size_t full_ring(int busy, size_t *nr_samples)
{
	enum { FUNCS = 4000, STACKS = 3000, IDLE_STACKS = 3 * 56, TICKS = 3030, THREADS = 64 };
	struct wp_model m;
	struct wp_out_stats st;
	uint32_t buf[64];
	size_t i, t, k, size;

	model_init(&m, FUNCS, NULL, STACKS + IDLE_STACKS, (STACKS + IDLE_STACKS) * 40,
		   (size_t)TICKS * THREADS);
	for (i = 0; i < STACKS + IDLE_STACKS; i++) {
		size_t depth = i < STACKS ? 20 + rnd(21) : 12, d;
		uint32_t f = rnd(5);

		/* root first into buf, then reversed into a leaf-first stack */
		for (d = 0; d < depth; d++) {
			buf[depth - 1 - d] = f;
			f = (f * 7 + 1 + rnd(i < STACKS ? 6 : 2)) % FUNCS;
		}
		add_stack(&m, buf, depth);
	}
	for (t = 0; t < TICKS; t++) {
		for (k = 0; k < THREADS; k++) {
			if ((int)k < busy) {
				int on = rnd(10) < 8;
				add_sample(&m, t, 100 + (uint32_t)k, rnd(STACKS), on,
					   on ? -1 : 202);
			} else {
				uint32_t which = (uint32_t)((t / (101 * (3 + k % 5))) % 3);
				add_sample(&m, t, 100 + (uint32_t)k,
					   STACKS + (uint32_t)(k - (size_t)busy % 56) % 56 * 3 +
						   which,
					   0,
					   which == 0   ? 232
					   : which == 1 ? 202
							: 0);
			}
		}
	}
	set_threads(&m, 100, THREADS);
	REQ(page(&m, NULL, &st) == 0);
	REQ(st.nr_samples == (size_t)TICKS * THREADS && st.nr_threads == THREADS);
	size = mem_len;
	/* TEST_HTML_KEEP=DIR keeps the pages (full-ring-<busy>.html) to time in a browser. */
	if (getenv("TEST_HTML_KEEP")) {
		char path[512];
		FILE *f;

		snprintf(path, sizeof(path), "%s/full-ring-%d.html", getenv("TEST_HTML_KEEP"),
			 busy);
		f = fopen(path, "w");
		REQ(f && fwrite(mem_buf, 1, mem_len, f) == mem_len);
		if (f)
			fclose(f);
	}
	*nr_samples = st.nr_samples;
	model_free(&m);
	mem_reset();
	return size;
}

static void test_full_ring_size(void)
{
	size_t n, typical = full_ring(8, &n), worst;

	printf("     full ring, 64 threads, %zu samples: %zu bytes with 8 busy threads\n", n,
	       typical);
	REQ(typical <= 2 * 1000 * 1000);
	worst = full_ring(64, &n);
	printf("     full ring, 64 threads, %zu samples: %zu bytes with all 64 busy (a new stack every "
	       "sample)\n",
	       n, worst);
	REQ(worst <= 2 * 1000 * 1000);
	report("html_full_ring_size");
}

/* A diff carries the base's data in the second element. */
static void test_diff(void)
{
	struct wp_model a, b;
	struct wp_out_stats st;
	uint32_t s0[] = { 1, 0 };
	const char *base;

	model_init(&a, 2, NULL, 1, 2, 2);
	add_stack(&a, s0, 2);
	add_sample(&a, 0, 1, 0, 1, -1);
	set_threads(&a, 1, 1);
	model_init(&b, 2, NULL, 1, 2, 2);
	add_stack(&b, s0, 2);
	add_sample(&b, 0, 1, 0, 0, 7);
	set_threads(&b, 1, 1);
	REQ(page(&a, &b, &st) == 0);
	base = strstr(mem_buf, "id=\"wp-base\">");
	REQ(base && !strncmp(base + 13, "{\"format\":\"wallprof-html\"", 25));
	REQ(base && strstr(base, "\"syscalls\":[\"poll\"]"));
	REQ(page(&a, NULL, &st) == 0);
	base = strstr(mem_buf, "id=\"wp-base\">");
	REQ(base && !strncmp(base + 13, "null</script>", 13));
	model_free(&a);
	model_free(&b);
	mem_reset();
	report("html_diff");
}

/* A sink that fails midway fails the writer, whatever the place. */
static void test_sink_fails(void)
{
	struct wp_model m;
	struct wp_format_opts o = { 0 };
	struct wp_out_sink s;
	uint32_t s0[] = { 1, 0 };
	char err[256];
	size_t at;
	int bad = 0;

	model_init(&m, 2, NULL, 1, 2, 2);
	add_stack(&m, s0, 2);
	add_sample(&m, 0, 1, 0, 1, -1);
	set_threads(&m, 1, 1);
	for (at = 0; at < 40000; at += 997) {
		struct wp_out_stats st;

		mem_sink(&s, err, sizeof(err));
		mem_fail_after = at;
		if (wp_out_html(&m, &o, &s, &st) == 0 && mem_len < at)
			continue; /* the page is shorter than `at` */
		if (!s.failed || !err[0])
			bad++;
	}
	REQ(bad == 0);
	model_free(&m);
	mem_reset();
	report("html_sink_fails");
}

int main(void)
{
	test_runs();
	test_hostile_names();
	test_full_ring_size();
	test_diff();
	test_sink_fails();
	printf("%d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
