/* test_envelope: the Sentry v2 chunk (sentry.c with opts chunk), the v1
 * additions (release, environment, ids given, the name without arguments)
 * and the envelopes (envelope.c) on a model built by hand: four threads,
 * one with a single non-idle sample and one with idle samples only (both
 * left out of a chunk), an idle sample in a kept thread. The envelopes'
 * framing is parsed here, the JSON with jansson; then the files go through
 * test/sentry_check.py (run from the source root, as run_tests.py runs the
 * unit tests). */
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../output/envelope.h"
#include "../../output/formats.h"
#include "../../output/model.h"
#include "../../symbolize/symbolize.h"

#include "check.h"

#define APP_START 0x400000ull
#define LIBC_START 0x7f0000000000ull
#define T0 1000000000ull                   /* monotonic ns of the first sample */
#define UNIX0 1767225600000000000ll        /* realtime of monotonic 0 */
#define MS 1000000ull
#define TXN "0123456789abcdef0123456789abcdef"
#define TRACE "fedcba9876543210fedcba9876543210"
#define SPAN "00112233445566ff"
#define PROFILER "aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbb"

static char tmpdir[PATH_MAX];

/* ---- the model ---------------------------------------------------------- */

static struct wp_module mods[2] = {
	{ .path = "/usr/bin/app",
	  .start = APP_START,
	  .end = APP_START + 0x100000,
	  .build_id = { 0x1c, 0x30, 0x47, 0x42, 0xf1, 0x14, 0x21, 0x54, 0x53, 0xa8,
			0xa7, 0x77, 0xf6, 0xcd, 0xb3, 0xa2, 0xb8, 0x50, 0x5e, 0x11 },
	  .build_id_len = 20,
	  .flags = WP_MOD_MAIN },
	{ .path = "/lib/x86_64-linux-gnu/libc.so.6",
	  .start = LIBC_START,
	  .end = LIBC_START + 0x100000 },
};
static struct wp_pc pcs[3];
static struct wp_model_loc locs[3] = {
	{ 0, 0x100, 0, 1 }, /* main */
	{ 0, 0x200, 1, 1 }, /* work */
	{ 1, 0x300, 2, 1 }, /* __read */
};
static struct wp_sym_frame frames[3] = {
	{ "main", "/src/app.c", 10, 0, 0 },
	{ "work", "/src/app.c", 20, 0, 0 },
	{ "__read", NULL, 0, 0, 0 },
};
/* S0 work;main  S1 __read;main  S2 idle (no frames) */
static uint32_t stack_frames_[] = { 1, 0, 2, 0 };
static uint32_t stack_off_[] = { 0, 2, 4, 4 };
static struct wp_thread threads[4] = { { .tid = 100, .name = "main" },
				       { .tid = 101, .name = "worker" },
				       { .tid = 102, .name = "idle" },
				       { .tid = 103, .name = "pair" } };
#define ON WP_SAMPLE_ON_CPU
static struct wp_sample samples[10];
static const struct wp_sample samples_init[10] = {
	{ T0, 100, 0, ON, 0, 1, 0 },
	{ T0 + 10 * MS, 101, 1, 0, 0, 1, 0 }, /* 101's only busy one */
	{ T0 + 10 * MS, 102, 2, 0, 0, 1, 0 },
	{ T0 + 20 * MS, 100, 1, 0, 0, 1, 0 },
	{ T0 + 20 * MS, 101, 2, 0, 0, 1, 0 },
	{ T0 + 30 * MS, 102, 2, 0, 0, 1, 0 },
	{ T0 + 30 * MS, 103, 0, ON, 0, 1, 0 },
	{ T0 + 40 * MS, 100, 2, 0, 0, 1, 0 }, /* idle, kept */
	{ T0 + 50 * MS, 103, 0, ON, 0, 1, 0 },
	{ T0 + 60 * MS, 100, 0, ON, 0, 1, 0 },
};
static char cmdline[] = "/usr/bin/app --token secret";

static void make_model(struct wp_model *m)
{
	memset(m, 0, sizeof(*m));
	memcpy(samples, samples_init, sizeof(samples));
	for (int i = 0; i < 3; i++)
		pcs[i].addr = mods[locs[i].module].start + locs[i].module_offset + 1;
	m->p.pcs = pcs;
	m->p.nr_pcs = 3;
	m->p.stack_frames = stack_frames_;
	m->p.stack_off = stack_off_;
	m->p.nr_stacks = 3;
	m->p.samples = samples;
	m->p.nr_samples = 10;
	m->p.threads = threads;
	m->p.nr_threads = 4;
	m->p.modules = mods;
	m->p.nr_modules = 2;
	m->p.start_ns = T0 - 5 * MS;
	m->p.end_ns = T0 + 65 * MS;
	m->p.realtime_offset_ns = UNIX0;
	m->p.pid = 100;
	m->p.main_tid = 100;
	m->p.hz = 100;
	m->p.cmdline = cmdline;
	m->locs = locs;
	m->frames = frames;
	m->nr_frames = 3;
}

/* ---- helpers ---------------------------------------------------------------- */

static const char *str(json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));

	return s ? s : "";
}

static int is_hex(const char *s, size_t n)
{
	if (strlen(s) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	return 1;
}

static json_t *load(const char *data, size_t len)
{
	json_error_t e;
	json_t *v = json_loadb(data, len, 0, &e);

	if (!v)
		printf("  json: %s at %d\n", e.text, e.position);
	return v;
}

static void save(const char *name, const char *data, size_t len)
{
	char path[PATH_MAX + 64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
	f = fopen(path, "wb");
	REQ(f && fwrite(data, 1, len, f) == len);
	if (f)
		fclose(f);
}

/* Runs test/sentry_check.py [flag] on a saved file; its exit status. */
static int sentry_check(const char *flag, const char *name)
{
	char cmd[PATH_MAX + 128];

	if (access("test/sentry_check.py", R_OK) != 0) {
		printf("  test/sentry_check.py not found (run from the source root)\n");
		return -1;
	}
	snprintf(cmd, sizeof(cmd), "python3 test/sentry_check.py %s '%s/%s' >&2", flag, tmpdir,
		 name);
	return system(cmd);
}

/* An envelope's framing: the header, then items (header, payload). */
#define MAX_ITEMS 4
struct env {
	json_t *head;
	int n;
	json_t *ih[MAX_ITEMS];
	json_t *payload[MAX_ITEMS];
	size_t plen[MAX_ITEMS];
};

static void env_free(struct env *e)
{
	json_decref(e->head);
	for (int i = 0; i < e->n; i++) {
		json_decref(e->ih[i]);
		json_decref(e->payload[i]);
	}
	memset(e, 0, sizeof(*e));
}

/* Parses `buf`: each header one line, each payload exactly "length" bytes
 * then a newline, nothing after the last. Returns 0 or -1. */
static int env_parse(const char *buf, size_t len, struct env *e)
{
	const char *nl = memchr(buf, '\n', len);
	size_t pos;

	memset(e, 0, sizeof(*e));
	if (!nl || memchr(buf, 0, len))
		return -1;
	e->head = load(buf, (size_t)(nl - buf));
	pos = (size_t)(nl - buf) + 1;
	while (pos < len && e->n < MAX_ITEMS) {
		json_t *h, *l;
		size_t n;

		nl = memchr(buf + pos, '\n', len - pos);
		if (!nl)
			return -1;
		h = e->ih[e->n] = load(buf + pos, (size_t)(nl - buf - pos));
		l = json_object_get(h, "length");
		if (!json_is_integer(l) || json_integer_value(l) < 0)
			return -1;
		n = (size_t)json_integer_value(l);
		pos = (size_t)(nl - buf) + 1;
		if (n > len - pos || pos + n >= len || buf[pos + n] != '\n')
			return -1;
		e->plen[e->n] = n;
		e->payload[e->n++] = load(buf + pos, n);
		pos += n + 1;
	}
	return e->head && pos == len ? 0 : -1;
}

/* Samples' timestamps: reals, in order, first and last as given (ns). */
static int chunk_times_ok(json_t *samples, int64_t first, int64_t last)
{
	double prev = 0;
	size_t i;
	json_t *s;

	json_array_foreach(samples, i, s)
	{
		json_t *t = json_object_get(s, "timestamp");

		if (!json_is_real(t) || json_real_value(t) < prev)
			return 0;
		prev = json_real_value(t);
		if (i == 0 && fabs(prev - (double)first / 1e9) > 2e-6)
			return 0;
	}
	return fabs(prev - (double)last / 1e9) <= 2e-6;
}

/* ---- the chunk ---------------------------------------------------------------- */

static void test_chunk(void)
{
	struct wp_format_opts o = { .chunk = 1,
				    .profiler_id = PROFILER,
				    .release = "app@1.2.3",
				    .environment = "production" };
	const struct wp_format *sentry = wp_format_find("sentry");
	struct wp_model m;
	struct wp_out_stats st;
	char *buf = NULL, *buf2 = NULL, err[256] = "";
	size_t len = 0, len2 = 0, i;
	json_t *root, *prof, *smps, *s, *tm, *sdk;
	int tid_ok = 1;

	make_model(&m);
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, &st, err, sizeof(err)) == 0);
	root = buf ? load(buf, len) : NULL;
	REQ(root && !strcmp(str(root, "version"), "2"));
	REQ(is_hex(str(root, "chunk_id"), 32) && !strcmp(str(root, "profiler_id"), PROFILER));
	REQ(!strcmp(str(root, "platform"), "native"));
	REQ(!strcmp(str(root, "release"), "app@1.2.3"));
	REQ(!strcmp(str(root, "environment"), "production"));
	sdk = json_object_get(root, "client_sdk");
	REQ(!strcmp(str(sdk, "name"), "libwallprof") && str(sdk, "version")[0]);
	REQ(json_array_size(json_object_get(json_object_get(root, "debug_meta"), "images")) == 2);
	REQ(!json_object_get(root, "wallprof") && !json_object_get(root, "transaction") &&
	    !json_object_get(root, "event_id") && !json_object_get(root, "timestamp"));
	prof = json_object_get(root, "profile");
	smps = json_object_get(prof, "samples");
	/* 100 (3 busy, 1 idle) and 103 (2 busy); 101 and 102 left out */
	REQ(json_array_size(smps) == 6);
	json_array_foreach(smps, i, s)
	{
		const char *tid = json_string_value(json_object_get(s, "thread_id"));

		tid_ok &= tid && (!strcmp(tid, "100") || !strcmp(tid, "103"));
		tid_ok &= json_is_integer(json_object_get(s, "stack_id"));
		tid_ok &= !json_object_get(s, "on_cpu") &&
			  !json_object_get(s, "elapsed_since_start_ns");
	}
	REQ(tid_ok);
	REQ(chunk_times_ok(smps, UNIX0 + (int64_t)T0, UNIX0 + (int64_t)(T0 + 60 * MS)));
	tm = json_object_get(prof, "thread_metadata");
	REQ(json_object_size(tm) == 2 && !strcmp(str(json_object_get(tm, "100"), "name"), "main") &&
	    json_object_get(tm, "103"));
	REQ(json_array_size(json_object_get(prof, "stacks")) == 3);
	REQ(st.nr_samples == 6 && st.nr_threads == 2 && st.bytes == len);
	REQ(fabs(st.duration_s - 0.06) < 1e-9);
	REQ(st.first_unix_ns == UNIX0 + (int64_t)T0 &&
	    st.last_unix_ns == UNIX0 + (int64_t)(T0 + 60 * MS));
	if (buf)
		save("chunk.json", buf, len);
	REQ(sentry_check("--chunk", "chunk.json") == 0);
	REQ(sentry_check("", "chunk.json") == 0); /* told by its version */
	json_decref(root);

	/* A fresh chunk_id each time, unless given. */
	REQ(wp_format_write_mem(sentry, &m, &o, &buf2, &len2, NULL, err, sizeof(err)) == 0);
	root = buf2 ? load(buf2, len2) : NULL;
	json_t *again = buf ? load(buf, len) : NULL;
	REQ(root && again && strcmp(str(root, "chunk_id"), str(again, "chunk_id")));
	json_decref(root);
	json_decref(again);
	free(buf2);
	o.chunk_id = TXN;
	REQ(wp_format_write_mem(sentry, &m, &o, &buf2, &len2, NULL, err, sizeof(err)) == 0);
	root = buf2 ? load(buf2, len2) : NULL;
	REQ(!strcmp(str(root, "chunk_id"), TXN));
	json_decref(root);
	free(buf2);
	free(buf);
	report("chunk: v2 head, Unix-second timestamps in order, threads with < 2 busy samples gone");
}

static void test_chunk_refused(void)
{
	struct wp_format_opts o = { .chunk = 1 };
	const struct wp_format *sentry = wp_format_find("sentry");
	struct wp_model m;
	struct wp_out_stats st;
	char *buf = (char *)1, err[256] = "", path[PATH_MAX + 64];
	size_t len = 1;

	/* Nothing left: threads with one busy sample each, and 102 (idle). */
	make_model(&m);
	for (uint32_t i = 0; i < 10; i++)
		if (samples[i].tid == 100 || samples[i].tid == 103)
			samples[i].tid = samples[i].stack_id == 2 ? 102 : 200 + i;
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, NULL, err, sizeof(err)) < 0);
	REQ(!buf && len == 0);
	REQ(!strncmp(err, WP_OUT_TOO_FEW, strlen(WP_OUT_TOO_FEW)) && !strchr(err, '\n'));
	snprintf(path, sizeof(path), "%s/refused.json", tmpdir);
	REQ(wp_format_write(sentry, &m, &o, path, NULL, err, sizeof(err)) < 0);
	REQ(access(path, F_OK) != 0);
	buf = (char *)1;
	REQ(wp_envelope_chunk(&m, NULL, &buf, &len, NULL, err, sizeof(err)) < 0 && !buf);
	REQ(!strncmp(err, WP_OUT_TOO_FEW, strlen(WP_OUT_TOO_FEW)));
	report("chunk: nothing Relay would keep is refused (" WP_OUT_TOO_FEW ")");

	/* Over 66 s between the first and the last kept sample. */
	make_model(&m);
	samples[9].t_ns = T0 + 66001 * MS;
	err[0] = 0;
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, NULL, err, sizeof(err)) < 0);
	REQ(!buf && strstr(err, "66 s") && !strchr(err, '\n'));
	samples[9].t_ns = T0 + 66000 * MS; /* exactly 66 s: accepted */
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, NULL, err, sizeof(err)) == 0);
	free(buf);
	/* A thread left out does not count for the span (and the writer
	 * sorts what is out of order). */
	make_model(&m);
	samples[1].t_ns = T0 + 100000 * MS; /* 101's only busy sample */
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, &st, err, sizeof(err)) == 0);
	REQ(st.nr_samples == 6 && fabs(st.duration_s - 0.06) < 1e-9);
	free(buf);
	report("chunk: samples over 66 s are refused, 66 s is not");

	/* Ids that are not lowercase hex. */
	make_model(&m);
	o.profiler_id = "ABC";
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, NULL, err, sizeof(err)) < 0);
	REQ(strstr(err, "profiler_id"));
	o.profiler_id = NULL;
	o.chunk = 0;
	o.trace_id = "00000000000000000000000000000000";
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, NULL, err, sizeof(err)) < 0);
	REQ(strstr(err, "trace id"));
	report("sentry: ids that are not lowercase hex, or all zero, are refused");
}

/* ---- v1 ------------------------------------------------------------------------ */

static void test_v1_options(void)
{
	struct wp_format_opts o = { .release = "r1",
				    .environment = "staging",
				    .transaction_id = TXN,
				    .trace_id = TRACE,
				    .segment_id = SPAN };
	const struct wp_format *sentry = wp_format_find("sentry");
	struct wp_model m;
	struct wp_out_stats st;
	char *buf = NULL, err[256] = "";
	size_t len = 0;
	json_t *root, *t;

	make_model(&m);
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, &st, err, sizeof(err)) == 0);
	root = buf ? load(buf, len) : NULL;
	t = json_object_get(root, "transaction");
	REQ(!strcmp(str(root, "version"), "1") && !strcmp(str(root, "release"), "r1") &&
	    !strcmp(str(root, "environment"), "staging"));
	REQ(!strcmp(str(t, "id"), TXN) && !strcmp(str(t, "trace_id"), TRACE) &&
	    !strcmp(str(t, "segment_id"), SPAN));
	REQ(!strcmp(str(t, "name"), cmdline));
	REQ(json_object_get(root, "wallprof") != NULL);
	REQ(st.nr_samples == 10 && st.nr_threads == 4);
	if (buf)
		save("profile.json", buf, len);
	REQ(sentry_check("", "profile.json") == 0);
	json_decref(root);
	free(buf);

	o.no_args = 1;
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, NULL, err, sizeof(err)) == 0);
	root = buf ? load(buf, len) : NULL;
	REQ(!strcmp(str(json_object_get(root, "transaction"), "name"), "/usr/bin/app"));
	REQ(buf && !strstr(buf, "secret"));
	json_decref(root);
	free(buf);

	/* Unset: no release or environment keys, random ids. */
	memset(&o, 0, sizeof(o));
	REQ(wp_format_write_mem(sentry, &m, &o, &buf, &len, NULL, err, sizeof(err)) == 0);
	root = buf ? load(buf, len) : NULL;
	t = json_object_get(root, "transaction");
	REQ(root && !json_object_get(root, "release") && !json_object_get(root, "environment"));
	REQ(is_hex(str(t, "id"), 32) && is_hex(str(t, "trace_id"), 32) &&
	    is_hex(str(t, "segment_id"), 16));
	json_decref(root);
	free(buf);
	report("v1: release, environment, the transaction's ids given, the name without arguments");
}

/* ---- envelopes ------------------------------------------------------------------- */

static void test_envelope_profile(void)
{
	struct wp_format_opts o = { .no_args = 1, .release = "r1", .platform = "rust" };
	struct wp_model m;
	struct wp_out_stats st;
	struct env e;
	char *buf = NULL, err[256] = "";
	size_t len = 0;
	json_t *ev, *prof, *trace, *t;

	make_model(&m);
	REQ(wp_envelope_profile(&m, &o, &buf, &len, &st, err, sizeof(err)) == 0);
	if (err[0])
		printf("  %s\n", err);
	REQ(buf && strlen(buf) == len && st.bytes == len);
	REQ(buf && env_parse(buf, len, &e) == 0 && e.n == 2);
	ev = e.payload[0];
	prof = e.payload[1];
	trace = json_object_get(json_object_get(ev, "contexts"), "trace");
	t = json_object_get(prof, "transaction");
	REQ(!strcmp(str(e.ih[0], "type"), "transaction") &&
	    !strcmp(str(e.ih[1], "type"), "profile"));
	REQ(!strcmp(str(e.ih[1], "platform"), "rust") && !strcmp(str(prof, "platform"), "rust"));
	REQ(!strcmp(str(ev, "platform"), "rust") && !strcmp(str(ev, "release"), "r1"));
	/* One set of ids. */
	REQ(is_hex(str(e.head, "event_id"), 32));
	REQ(!strcmp(str(e.head, "event_id"), str(ev, "event_id")));
	REQ(!strcmp(str(ev, "event_id"), str(t, "id")));
	REQ(is_hex(str(trace, "trace_id"), 32) &&
	    !strcmp(str(trace, "trace_id"), str(t, "trace_id")));
	REQ(is_hex(str(trace, "span_id"), 16) &&
	    !strcmp(str(trace, "span_id"), str(t, "segment_id")));
	REQ(!strcmp(str(trace, "op"), "process"));
	REQ(!strcmp(str(ev, "type"), "transaction"));
	REQ(!strcmp(str(ev, "transaction"), "/usr/bin/app") &&
	    !strcmp(str(t, "name"), "/usr/bin/app"));
	/* no sent_at: the envelope may wait in the spool (envelope.c) */
	REQ(!json_object_get(e.head, "sent_at"));
	REQ(!strcmp(str(json_object_get(e.head, "sdk"), "name"), "libwallprof"));
	/* From the first sample to the last, in Unix seconds. */
	REQ(json_is_real(json_object_get(ev, "start_timestamp")) &&
	    json_is_real(json_object_get(ev, "timestamp")));
	REQ(fabs(json_real_value(json_object_get(ev, "start_timestamp")) -
		 (double)(UNIX0 + (int64_t)T0) / 1e9) < 2e-6);
	REQ(fabs(json_real_value(json_object_get(ev, "timestamp")) -
		 (double)(UNIX0 + (int64_t)(T0 + 60 * MS)) / 1e9) < 2e-6);
	REQ(st.nr_samples == 10 && st.nr_threads == 4);
	env_free(&e);
	if (buf)
		save("profile.envelope", buf, len);
	REQ(sentry_check("--envelope", "profile.envelope") == 0);
	REQ(sentry_check("", "profile.envelope") == 0); /* told from the file */
	free(buf);

	/* Ids given: used everywhere. */
	o.transaction_id = TXN;
	o.trace_id = TRACE;
	REQ(wp_envelope_profile(&m, &o, &buf, &len, NULL, err, sizeof(err)) == 0);
	REQ(buf && env_parse(buf, len, &e) == 0 && e.n == 2);
	REQ(!strcmp(str(e.head, "event_id"), TXN) && !strcmp(str(e.payload[0], "event_id"), TXN));
	REQ(!strcmp(str(json_object_get(e.payload[1], "transaction"), "id"), TXN));
	REQ(!strcmp(str(json_object_get(json_object_get(e.payload[0], "contexts"), "trace"),
			"trace_id"),
		    TRACE));
	env_free(&e);
	free(buf);

	/* No samples: refused. */
	m.p.nr_samples = 0;
	buf = (char *)1;
	REQ(wp_envelope_profile(&m, NULL, &buf, &len, NULL, err, sizeof(err)) < 0 && !buf &&
	    err[0]);
	report("envelope (profile): framing, one set of ids, the transaction's times");
}

static void test_envelope_chunk(void)
{
	struct wp_format_opts o = { .profiler_id = PROFILER, .environment = "prod" };
	struct wp_model m;
	struct wp_out_stats st;
	struct env e;
	char *buf = NULL, err[256] = "";
	size_t len = 0;

	make_model(&m);
	REQ(wp_envelope_chunk(&m, &o, &buf, &len, &st, err, sizeof(err)) == 0);
	REQ(buf && env_parse(buf, len, &e) == 0 && e.n == 1);
	REQ(!json_object_get(e.head, "event_id") && !json_object_get(e.head, "sent_at") &&
	    json_object_get(e.head, "sdk"));
	REQ(!strcmp(str(e.ih[0], "type"), "profile_chunk"));
	REQ(!strcmp(str(e.ih[0], "platform"), "native") &&
	    !strcmp(str(e.payload[0], "platform"), "native"));
	REQ(!strcmp(str(e.payload[0], "version"), "2") &&
	    !strcmp(str(e.payload[0], "profiler_id"), PROFILER));
	REQ(json_array_size(json_object_get(json_object_get(e.payload[0], "profile"), "samples")) ==
	    6);
	REQ(st.nr_samples == 6 && st.nr_threads == 2 && st.bytes == len);
	env_free(&e);
	if (buf)
		save("chunk.envelope", buf, len);
	REQ(sentry_check("--envelope", "chunk.envelope") == 0);
	free(buf);
	report("envelope (chunk): framing, item platform, the chunk");
}

int main(void)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	char cmd[PATH_MAX + 16];

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_envelope.XXXXXX", base);
	if (!mkdtemp(tmpdir)) {
		printf("FAIL mkdtemp %s: %s\n", tmpdir, strerror(errno));
		printf("envelope: 0 passed, 1 failed\n");
		return 1;
	}
	test_chunk();
	test_chunk_refused();
	test_v1_options();
	test_envelope_profile();
	test_envelope_chunk();
	if (getenv("WP_KEEP_OUTPUT"))
		printf("note: outputs kept in %s\n", tmpdir);
	else {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
		if (system(cmd) != 0)
			printf("note: could not remove %s\n", tmpdir);
	}
	printf("envelope: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
