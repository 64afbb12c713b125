/* test_formats: unit tests of the pprof, folded and speedscope writers
 * (output/pprof.c, folded.c, speedscope.c) on a model built by hand:
 * inlined frames, unknown functions in and outside modules, a name with
 * ';', a newline and invalid UTF-8, three threads (one nameless), on- and
 * off-CPU samples with and without a system call, and a sample whose stack
 * id is out of range. pprof is decoded by a reader of our own
 * (pprof_decode.h), speedscope parsed with jansson, folded compared line
 * by line.
 *
 * Usage: test_formats
 *        test_formats --convert FORMAT RAW OUT [--threads] [--syscalls]
 *   writes the raw dump RAW in FORMAT (pprof, folded, speedscope) to OUT
 *   ("-": stdout), symbolized: the end-to-end tests' writer until
 *   `wallprof convert` exists (test/e2e/formats.py). */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../output/formats.h"
#include "../../output/model.h"
#include "../../symbolize/symbolize.h"

#include "check.h"
#include "pprof_decode.h"

#define HZ 100
#define PERIOD 10000000ull
#define LIBC_START 0x7f0000000000ull
#define APP_START 0x400000ull

static char tmpdir[PATH_MAX];

/* ---- the model ---------------------------------------------------------- */

static struct wp_module mods[2] = {
	{ .path = "/lib/x86_64-linux-gnu/libc.so.6",
	  .start = LIBC_START,
	  .end = LIBC_START + 0x100000,
	  .build_id = { 1, 2 },
	  .build_id_len = 2 },
	{ .path = "/usr/bin/app",
	  .start = APP_START,
	  .end = APP_START + 0x100000,
	  .build_id = { 0xde, 0xad, 0xbe, 0xef },
	  .build_id_len = 4,
	  .flags = WP_MOD_MAIN },
};

static struct wp_pc pcs[7];
static struct wp_model_loc locs[7] = {
	{ 1, 0x100, 0, 1 },       /* 0 main */
	{ 1, 0x200, 1, 2 },       /* 1 helper inlined into work */
	{ 0, 0x1000, 3, 1 },      /* 2 __read */
	{ 0, 0x500, 4, 1 },       /* 3 unknown in libc */
	{ -1, 0xdead000, 5, 1 },  /* 4 unknown outside every module */
	{ 1, 0x300, 6, 1 },       /* 5 a name to escape */
	{ 1, 0x210, 7, 1 },       /* 6 work again, another address, the same line */
};
static struct wp_sym_frame frames[8] = {
	{ "main", "/src/app.c", 10, 0, 0 },
	{ "helper", "/src/h.c", 5, 3, 1 },
	{ "work", "/src/app.c", 20, 0, 0 },
	{ "__read", "read.c", 25, 0, 0 },
	{ NULL, NULL, 0, 0, 0 },
	{ NULL, NULL, 0, 0, 0 },
	{ "odd;name\nx\xff", NULL, 0, 0, 0 },
	{ "work", "/src/app.c", 20, 0, 0 },
};
/* Stacks, leaf first: S0 main;work;helper  S1 ...;__read  S2 main;libc+0x500
 * S3 main;odd;0xdead000  S4 main;work */
static uint32_t stack_frames_[] = { 1, 0, 2, 1, 0, 3, 0, 4, 5, 0, 6, 0 };
static uint32_t stack_off_[] = { 0, 2, 5, 7, 10, 12 };
static struct wp_thread threads[3] = { { .tid = 100, .name = "main" },
				       { .tid = 101, .name = "worker" },
				       { .tid = 102, .name = "" } };
#define ON WP_SAMPLE_ON_CPU
#define SC WP_SAMPLE_SYSCALL
static struct wp_sample samples[] = {
	{ 1000, 100, 0, ON, 0, 1, 0 },  { 1000, 101, 1, SC, 0, 1, 0 },
	{ 1000, 102, 2, 0, 0, 1, 0 },   { 2000, 100, 0, ON, 0, 1, 0 },
	{ 2000, 101, 1, SC, 0, 1, 0 },  { 2000, 102, 3, SC, 999, 1, 0 },
	{ 3000, 100, 4, ON, 0, 1, 0 },  { 3000, 101, 1, SC, 202, 1, 0 },
	{ 3000, 102, 2, ON, 0, 1, 0 },  { 4000, 100, 0, ON | SC, 7, 1, 0 },
	{ 4000, 101, 99, ON, 0, 1, 0 }, /* stack 99: not written */
};
#define NR_VALID 10

static void make_model(struct wp_model *m)
{
	memset(m, 0, sizeof(*m));
	for (int i = 0; i < 7; i++)
		pcs[i].addr = (locs[i].module >= 0 ? mods[locs[i].module].start : 0) +
			      locs[i].module_offset + 1;
	m->p.pcs = pcs;
	m->p.nr_pcs = 7;
	m->p.stack_frames = stack_frames_;
	m->p.stack_off = stack_off_;
	m->p.nr_stacks = 5;
	m->p.samples = samples;
	m->p.nr_samples = sizeof(samples) / sizeof(samples[0]);
	m->p.threads = threads;
	m->p.nr_threads = 3;
	m->p.modules = mods;
	m->p.nr_modules = 2;
	m->p.start_ns = 500;
	m->p.end_ns = 4500;
	m->p.realtime_offset_ns = 1700000000000000000ll;
	m->p.pid = 100;
	m->p.main_tid = 100;
	m->p.hz = HZ;
	m->locs = locs;
	m->frames = frames;
	m->nr_frames = 8;
}

/* ---- writing through a sink into a file, reading it back ---------------- */

typedef int (*writer_fn)(const struct wp_model *, const struct wp_format_opts *,
			 struct wp_out_sink *, struct wp_out_stats *);

static char *write_read(writer_fn w, const struct wp_model *m, const struct wp_format_opts *o,
			const char *name, size_t *len, struct wp_out_stats *st)
{
	char path[PATH_MAX + 64], err[256] = "";
	struct wp_out_sink s;
	FILE *f;
	char *buf;
	long n;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	memset(&s, 0, sizeof(s));
	s.err = err;
	s.errlen = sizeof(err);
	if (wp_out_atomic_open(&s.a, path, err, sizeof(err)) < 0)
		return NULL;
	if (w(m, o, &s, st) < 0 || s.failed) {
		printf("  writer failed: %s\n", err);
		wp_out_atomic_abort(&s.a);
		return NULL;
	}
	if (wp_out_atomic_commit(&s.a, err, sizeof(err)) < 0)
		return NULL;
	f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf)
		buf[n] = 0;
	*len = (size_t)n;
	return buf;
}

/* ---- pprof ---------------------------------------------------------------- */

static const struct pd_location *pd_loc(const struct pd_profile *pd, uint64_t id)
{
	for (int i = 0; i < pd->nr_loc; i++)
		if (pd->loc[i].id == id)
			return &pd->loc[i];
	return NULL;
}

static const char *pd_fn_name(const struct pd_profile *pd, uint64_t id)
{
	for (int i = 0; i < pd->nr_fn; i++)
		if (pd->fn[i].id == id)
			return pd_s(pd, pd->fn[i].name);
	return "?";
}

/* The label `key` of sample `s`: its string, or NULL. */
static const char *pd_label(const struct pd_profile *pd, const struct pd_sample *s, const char *key,
			    uint64_t *num)
{
	for (int i = 0; i < s->nr_lab; i++)
		if (strcmp(pd_s(pd, s->lab[i].key), key) == 0) {
			if (num)
				*num = s->lab[i].num;
			return s->lab[i].str ? pd_s(pd, s->lab[i].str) : "";
		}
	return NULL;
}

/* The leaf's innermost function of sample `s`. */
static const char *pd_leaf(const struct pd_profile *pd, const struct pd_sample *s)
{
	const struct pd_location *l = s->nr_loc ? pd_loc(pd, s->loc[0]) : NULL;

	return l && l->nr_line ? pd_fn_name(pd, l->line[0].func) : "?";
}

static void test_pprof(void)
{
	struct wp_model m;
	struct wp_out_stats st;
	struct pd_profile pd;
	size_t len = 0;
	char *gz;
	uint64_t total = 0, wall = 0, num = 0;
	int seen_read = 0, seen_futex = 0, seen_999 = 0, seen_nameless = 0, seen_main_on = 0;
	const struct pd_location *inl = NULL, *outside = NULL;

	make_model(&m);
	gz = write_read(wp_out_pprof, &m, NULL, "p.pb.gz", &len, &st);
	REQ(gz != NULL);
	REQ(gz && len > 18 && (unsigned char)gz[0] == 0x1f && (unsigned char)gz[1] == 0x8b);
	REQ(gz && pd_decode(gz, len, &pd) == 0);
	REQ(pd.nr_str > 0 && strcmp(pd.str[0], "") == 0);
	REQ(pd.nr_st == 2);
	REQ(!strcmp(pd_s(&pd, pd.st[0].type), "samples") &&
	    !strcmp(pd_s(&pd, pd.st[0].unit), "count"));
	REQ(!strcmp(pd_s(&pd, pd.st[1].type), "wall") &&
	    !strcmp(pd_s(&pd, pd.st[1].unit), "nanoseconds"));
	REQ(!strcmp(pd_s(&pd, pd.period_type.type), "wall") &&
	    !strcmp(pd_s(&pd, pd.period_type.unit), "nanoseconds"));
	REQ(pd.period == PERIOD);
	REQ(!strcmp(pd_s(&pd, pd.default_sample_type), "wall"));
	REQ(pd.nr_time_nanos == 1 && pd.time_nanos == 1700000000000000500ull);
	REQ(pd.duration_nanos == 4000);
	/* 7 distinct (stack, thread, state, system call) */
	REQ(pd.nr_sample == 7);
	for (int i = 0; i < pd.nr_sample; i++) {
		const struct pd_sample *s = &pd.sample[i];
		const char *state = pd_label(&pd, s, "state", NULL);
		const char *sc = pd_label(&pd, s, "syscall", NULL);
		const char *tn = pd_label(&pd, s, "thread_name", NULL);

		REQ(s->nr_val == 2 && s->val[1] == s->val[0] * PERIOD);
		total += s->val[0];
		wall += s->val[1];
		REQ(pd_label(&pd, s, "thread_id", &num) && num >= 100 && num <= 102);
		REQ(state && (!strcmp(state, "on-cpu") || !strcmp(state, "off-cpu")));
		REQ(!sc || !strcmp(state, "off-cpu"));
		if (sc && !strcmp(sc, "read")) {
			seen_read = 1;
			REQ(s->val[0] == 2 && tn && !strcmp(tn, "worker") && num == 101);
			REQ(s->nr_loc == 3 && !strcmp(pd_leaf(&pd, s), "__read"));
			REQ(s->nr_loc == 3 && pd_loc(&pd, s->loc[0]) &&
			    pd_loc(&pd, s->loc[0])->address == LIBC_START + 0x1000);
		}
		if (sc && !strcmp(sc, "futex"))
			seen_futex = s->val[0] == 1;
		if (sc && !strcmp(sc, "syscall_999"))
			seen_999 = 1;
		if (num == 102) {
			seen_nameless = 1;
			REQ(tn == NULL);
		}
		if (num == 100 && s->nr_loc == 2 && !strcmp(pd_leaf(&pd, s), "helper")) {
			seen_main_on = 1;
			REQ(s->val[0] == 3 && !strcmp(state, "on-cpu") && sc == NULL);
		}
	}
	REQ(total == NR_VALID && wall == NR_VALID * PERIOD);
	REQ(seen_read && seen_futex && seen_999 && seen_nameless && seen_main_on);
	/* locations: one per used frame-table entry; inlining as Lines */
	REQ(pd.nr_loc == 7);
	for (int i = 0; i < pd.nr_loc; i++) {
		REQ(pd.loc[i].id != 0 && pd.loc[i].nr_line >= 1);
		if (pd.loc[i].address == APP_START + 0x200)
			inl = &pd.loc[i];
		if (pd.loc[i].address == 0xdead000)
			outside = &pd.loc[i];
	}
	REQ(inl && inl->nr_line == 2);
	REQ(inl && !strcmp(pd_fn_name(&pd, inl->line[0].func), "helper") &&
	    inl->line[0].line == 5 && inl->line[0].col == 3);
	REQ(inl && !strcmp(pd_fn_name(&pd, inl->line[1].func), "work") && inl->line[1].line == 20);
	REQ(outside && outside->mapping == 0 &&
	    !strcmp(pd_fn_name(&pd, outside->line[0].func), "0xdead000"));
	/* functions deduplicated by (name, file): work once */
	REQ(pd.nr_fn == 7);
	for (int i = 0; i < pd.nr_fn; i++) {
		REQ(pd.fn[i].id != 0 && pd.fn[i].system_name == 0);
		if (!strcmp(pd_s(&pd, pd.fn[i].name), "helper"))
			REQ(!strcmp(pd_s(&pd, pd.fn[i].filename), "/src/h.c"));
	}
	/* mappings: the main executable first, build-id in hex */
	REQ(pd.nr_map == 2);
	REQ(pd.map[0].id == 1 && !strcmp(pd_s(&pd, pd.map[0].filename), "/usr/bin/app"));
	REQ(!strcmp(pd_s(&pd, pd.map[0].build_id), "deadbeef"));
	REQ(pd.map[0].start == APP_START && pd.map[0].limit == APP_START + 0x100000);
	REQ(pd.map[1].id == 2 && !strcmp(pd_s(&pd, pd.map[1].build_id), "0102"));
	REQ(pd.map[0].has[0] && pd.map[0].has[3]);
	REQ(st.nr_samples == NR_VALID && st.nr_threads == 3 && st.nr_frames == 7 &&
	    st.bytes == len);
	pd_free(&pd);
	free(gz);
	report("pprof: types, period, labels, aggregation, inlined lines, mappings");

	/* Empty: no samples is still a valid profile. */
	make_model(&m);
	m.p.nr_samples = 0;
	gz = write_read(wp_out_pprof, &m, NULL, "empty.pb.gz", &len, NULL);
	REQ(gz && pd_decode(gz, len, &pd) == 0);
	REQ(pd.nr_sample == 0 && pd.nr_loc == 0 && pd.nr_str > 0 && !strcmp(pd.str[0], ""));
	pd_free(&pd);
	free(gz);
	report("pprof: no samples");
}

/* pprof for Pyroscope: no per-thread labels; and every format written into
 * memory gives the bytes its file holds. */
static void test_pprof_labels_and_mem(void)
{
	struct wp_format_opts o = { .pprof_no_thread_labels = 1 };
	struct wp_model m;
	struct wp_out_stats st, st2;
	struct pd_profile pd;
	size_t len = 0, mlen = 0;
	char *gz, *mem = NULL, err[256];
	uint64_t total = 0;
	int states = 0, syscalls = 0;

	make_model(&m);
	gz = write_read(wp_out_pprof, &m, &o, "nothreads.pb.gz", &len, &st);
	REQ(gz && pd_decode(gz, len, &pd) == 0);
	for (int i = 0; gz && i < pd.nr_sample; i++) {
		const struct pd_sample *s = &pd.sample[i];

		REQ(!pd_label(&pd, s, "thread_name", NULL) && !pd_label(&pd, s, "thread_id", NULL));
		states += pd_label(&pd, s, "state", NULL) != NULL;
		syscalls += pd_label(&pd, s, "syscall", NULL) != NULL;
		total += s->val[0];
	}
	REQ(gz && pd.nr_sample == 7 && states == 7 && syscalls == 3 && total == NR_VALID);
	if (gz)
		pd_free(&pd);
	report("pprof: thread labels left out, state and syscall kept");

	/* The same in memory: identical bytes but for gzip's header time, none. */
	REQ(wp_format_write_mem(wp_format_find("pprof"), &m, &o, &mem, &mlen, &st2, err,
				sizeof(err)) == 0);
	REQ(mem && mlen == len && gz && !memcmp(mem, gz, len) && mem[mlen] == 0);
	REQ(st2.bytes == mlen && st2.nr_samples == st.nr_samples);
	free(mem);
	free(gz);
	for (const struct wp_format *const *f = wp_format_all(); *f; f++) {
		char name[64];

		if (!strcmp((*f)->name, "pprof") || !strcmp((*f)->name, "sentry"))
			continue; /* pprof above; sentry has random ids */
		snprintf(name, sizeof(name), "mem%s", (*f)->suffix);
		gz = write_read((*f)->write, &m, NULL, name, &len, NULL);
		REQ(wp_format_write_mem(*f, &m, NULL, &mem, &mlen, NULL, err, sizeof(err)) == 0);
		REQ(gz && mem && mlen == len && !memcmp(mem, gz, len));
		free(mem);
		free(gz);
	}
	REQ(wp_format_write_mem(NULL, &m, NULL, &mem, &mlen, NULL, err, sizeof(err)) < 0 && !mem &&
	    mlen == 0 && err[0]);
	report("formats: written into memory, the bytes of the file");
}

/* ---- folded --------------------------------------------------------------- */

static void test_folded(void)
{
	static const char plain[] = "main;libc.so.6+0x500 2\n"
				    "main;odd:name?x\xff;0xdead000 1\n"
				    "main;work 1\n"
				    "main;work;helper 3\n"
				    "main;work;helper;__read 3\n";
	static const char both[] = "102;main;libc.so.6+0x500 1\n"
				   "102;main;libc.so.6+0x500;[off-cpu] 1\n"
				   "102;main;odd:name?x\xff;0xdead000;[off-cpu: syscall_999] 1\n"
				   "main;main;work 1\n"
				   "main;main;work;helper 3\n"
				   "worker;main;work;helper;__read;[off-cpu: futex] 1\n"
				   "worker;main;work;helper;__read;[off-cpu: read] 2\n";
	struct wp_format_opts o = { 0 };
	struct wp_model m;
	struct wp_out_stats st;
	size_t len;
	char *txt;

	make_model(&m);
	txt = write_read(wp_out_folded, &m, &o, "plain.folded", &len, &st);
	REQ(txt && !strcmp(txt, plain));
	if (txt && strcmp(txt, plain))
		printf("  got:\n%s", txt);
	REQ(st.nr_samples == NR_VALID && st.bytes == len);
	free(txt);
	report("folded: root first, inlined frames, unknowns, escapes, merged and sorted");

	o.thread_prefix = 1;
	o.syscall_suffix = 1;
	txt = write_read(wp_out_folded, &m, &o, "both.folded", &len, NULL);
	REQ(txt && !strcmp(txt, both));
	if (txt && strcmp(txt, both))
		printf("  got:\n%s", txt);
	free(txt);
	report("folded: thread prefix and off-CPU suffix");
}

/* ---- speedscope ----------------------------------------------------------- */

static const char *frame_name(json_t *frames, json_t *idx)
{
	json_t *f = json_array_get(frames, (size_t)json_integer_value(idx));

	return f ? json_string_value(json_object_get(f, "name")) : NULL;
}

/* Sample `i` of profile `prof` as its frame names joined by ';'. */
static void joined(json_t *frames, json_t *prof, size_t i, char *out, size_t len)
{
	json_t *smp = json_array_get(json_object_get(prof, "samples"), i), *v;
	size_t k, n = 0;

	out[0] = 0;
	json_array_foreach(smp, k, v)
	{
		const char *name = frame_name(frames, v);

		n += (size_t)snprintf(out + n, n < len ? len - n : 0, "%s%s", k ? ";" : "",
				      name ? name : "?");
	}
}

static void test_speedscope(void)
{
	static const char *names[3] = { "main (tid 100)", "worker (tid 101)", "tid 102" };
	static const size_t counts[3] = { 4, 3, 3 };
	struct wp_model m;
	struct wp_out_stats st;
	json_error_t jerr;
	json_t *root, *frames, *profs, *prof, *f;
	size_t len, i;
	char *txt, buf[512];
	int helper_ok = 0, odd_ok = 0;

	make_model(&m);
	txt = write_read(wp_out_speedscope, &m, NULL, "p.speedscope.json", &len, &st);
	REQ(txt != NULL);
	root = txt ? json_loads(txt, 0, &jerr) : NULL;
	REQ(root != NULL);
	if (!root && txt)
		printf("  json: %s at %d\n", jerr.text, jerr.position);
	REQ(json_is_object(root));
	REQ(!strcmp(json_string_value(json_object_get(root, "$schema")) ?: "",
		    "https://www.speedscope.app/file-format-schema.json"));
	frames = json_object_get(json_object_get(root, "shared"), "frames");
	profs = json_object_get(root, "profiles");
	REQ(json_is_array(frames) && json_is_array(profs));
	REQ(json_array_size(profs) == 3);
	json_array_foreach(frames, i, f)
	{
		const char *name = json_string_value(json_object_get(f, "name"));

		REQ(name && name[0]);
		if (name && !strcmp(name, "helper"))
			helper_ok = !strcmp(json_string_value(json_object_get(f, "file")) ?: "",
					    "/src/h.c") &&
				    json_integer_value(json_object_get(f, "line")) == 5 &&
				    json_integer_value(json_object_get(f, "col")) == 3;
		if (name && !strcmp(name, "odd;name\nx\xef\xbf\xbd"))
			odd_ok = json_object_get(f, "file") == NULL &&
				 json_object_get(f, "line") == NULL;
		REQ(!name || strcmp(name, "work") ||
		    json_integer_value(json_object_get(f, "line")) == 20);
	}
	REQ(helper_ok && odd_ok);
	/* work at two addresses, the same (name, file, line): one frame */
	REQ(json_array_size(frames) == 11); /* 7 functions + 4 off-CPU leaves */
	json_array_foreach(profs, i, prof)
	{
		json_t *smps = json_object_get(prof, "samples"),
		       *w = json_object_get(prof, "weights"), *x;
		size_t k;
		json_int_t sum = 0;

		if (i >= 3)
			break;
		REQ(!strcmp(json_string_value(json_object_get(prof, "type")) ?: "", "sampled"));
		REQ(!strcmp(json_string_value(json_object_get(prof, "unit")) ?: "", "nanoseconds"));
		REQ(!strcmp(json_string_value(json_object_get(prof, "name")) ?: "", names[i]));
		REQ(json_array_size(smps) == counts[i] && json_array_size(w) == counts[i]);
		json_array_foreach(w, k, x)
		{
			REQ(json_integer_value(x) == (json_int_t)PERIOD);
			sum += json_integer_value(x);
		}
		REQ(json_integer_value(json_object_get(prof, "endValue")) -
			    json_integer_value(json_object_get(prof, "startValue")) ==
		    sum);
	}
	prof = json_array_get(profs, 0);
	REQ(json_integer_value(json_object_get(prof, "startValue")) == 500);
	joined(frames, prof, 0, buf, sizeof(buf));
	REQ(!strcmp(buf, "main;work;helper"));
	joined(frames, prof, 2, buf, sizeof(buf));
	REQ(!strcmp(buf, "main;work"));
	REQ(json_integer_value(
		    json_array_get(json_array_get(json_object_get(prof, "samples"), 2), 1)) ==
	    json_integer_value(
		    json_array_get(json_array_get(json_object_get(prof, "samples"), 0), 1)));
	prof = json_array_get(profs, 1);
	joined(frames, prof, 0, buf, sizeof(buf));
	REQ(!strcmp(buf, "main;work;helper;__read;[off-cpu: read]"));
	joined(frames, prof, 2, buf, sizeof(buf));
	REQ(!strcmp(buf, "main;work;helper;__read;[off-cpu: futex]"));
	prof = json_array_get(profs, 2);
	joined(frames, prof, 0, buf, sizeof(buf));
	REQ(!strcmp(buf, "main;libc.so.6+0x500;[off-cpu]"));
	joined(frames, prof, 1, buf, sizeof(buf));
	REQ(!strcmp(buf, "main;odd;name\nx\xef\xbf\xbd;0xdead000;[off-cpu: syscall_999]"));
	joined(frames, prof, 2, buf, sizeof(buf));
	REQ(!strcmp(buf, "main;libc.so.6+0x500"));
	REQ(st.nr_samples == NR_VALID && st.bytes == len);
	json_decref(root);
	free(txt);
	report("speedscope: schema fields, frames, one sampled profile per thread, weights");
}

/* ---- the sink failing ------------------------------------------------------ */

static void test_sink_failed(void)
{
	writer_fn w[3] = { wp_out_pprof, wp_out_folded, wp_out_speedscope };
	struct wp_model m;

	make_model(&m);
	for (int i = 0; i < 3; i++) {
		struct wp_out_sink s;
		char err[64] = "";

		memset(&s, 0, sizeof(s));
		s.a.fd = -1;
		s.err = err;
		s.errlen = sizeof(err);
		s.failed = 1; /* as after a failed write: nothing more is written */
		REQ(w[i](&m, NULL, &s, NULL) < 0);
		REQ(s.bytes == 0);
	}
	report("writers: a failed sink fails the write");
}

/* ---- --convert ---------------------------------------------------------- */

int main(void)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char cmd[PATH_MAX + 16];

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_formats.XXXXXX", base);
	if (!mkdtemp(tmpdir)) {
		printf("FAIL mkdtemp %s: %s\n", tmpdir, strerror(errno));
		printf("formats: 0 passed, 1 failed\n");
		return 1;
	}
	test_pprof();
	test_pprof_labels_and_mem();
	test_folded();
	test_speedscope();
	test_sink_failed();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		printf("note: could not remove %s\n", tmpdir);
	printf("formats: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
