/* speedscope: writes a model in speedscope's file format
 * (https://www.speedscope.app/file-format-schema.json; formats.h,
 * wp_out_speedscope; the fields are listed in docs/FORMATS.md,
 * "speedscope"): one `sampled` profile per thread, its samples in time
 * order, each a list of indices into `shared.frames` root first and
 * weighing one sampling period in nanoseconds. An off-CPU sample ends with
 * a frame `[off-cpu: read]` (or `[off-cpu]`), since the format has no
 * other place for the thread's state.
 *
 * Frames are the model's source frames deduplicated by (name, file, line,
 * column). The JSON is written as it goes, strings escaped here (invalid
 * UTF-8 becomes U+FFFD, so the file is always valid JSON). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt_stack.h"
#include "formats.h"
#include "intern.h"
#include "outbuf.h"

#define SCHEMA "https://www.speedscope.app/file-format-schema.json"
#define NO_FRAME UINT32_MAX

/* A thread's sample, for ordering by (thread, time). */
struct ent {
	uint32_t rank;   /* the thread's place among the profiles */
	uint32_t sample; /* index into p.samples (already in time order) */
};

struct ss {
	const struct wp_model *m;
	struct wp_outbuf *s;
	struct wp_intern frames; /* key: name NUL file NUL int line int col */
	uint32_t **stack_idx;    /* stack id -> its frame indices root first, [0] = count */
	struct wp_fmt_stack st;
	int failed;
};

static int len_utf8(const unsigned char *p, size_t left)
{
	int n;
	uint32_t c;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4;
	else
		return 0;
	if ((size_t)n > left)
		return 0;
	c = p[0] & (0xff >> (n + 1));
	for (int i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	if ((n == 3 && (c < 0x800 || (c >= 0xd800 && c <= 0xdfff))) ||
	    (n == 4 && (c < 0x10000 || c > 0x10ffff)))
		return 0;
	return n;
}

/* `str` as a JSON string. */
static void put_json_str(struct ss *ss, const char *str)
{
	const unsigned char *p = (const unsigned char *)str;
	size_t len = strlen(str), run = 0;
	char esc[8];

	wp_outbuf_put(ss->s, "\"", 1);
	for (size_t i = 0; i < len;) {
		int n = len_utf8(p + i, len - i);

		if (n == 1 && p[i] >= 0x20 && p[i] != '"' && p[i] != '\\' && p[i] != 0x7f) {
			run++;
			i++;
			continue;
		}
		if (n > 1) {
			run += (size_t)n;
			i += (size_t)n;
			continue;
		}
		wp_outbuf_put(ss->s, p + i - run, run);
		run = 0;
		if (n == 0)
			wp_outbuf_put(ss->s, "\xef\xbf\xbd", 3); /* U+FFFD */
		else if (p[i] == '"' || p[i] == '\\')
			wp_outbuf_printf(ss->s, "\\%c", p[i]);
		else {
			snprintf(esc, sizeof(esc), "\\u%04x", p[i]);
			wp_outbuf_put(ss->s, esc, 6);
		}
		i++;
	}
	wp_outbuf_put(ss->s, p + len - run, run);
	wp_outbuf_put(ss->s, "\"", 1);
}

static uint32_t frame_id(struct ss *ss, const char *name, const char *file, int line, int col)
{
	size_t nl = strlen(name), fl = file ? strlen(file) : 0;
	char stack_key[512];
	char *key = nl + fl + 2 + 2 * sizeof(int) <= sizeof(stack_key)
			    ? stack_key
			    : malloc(nl + fl + 2 + 2 * sizeof(int));
	int64_t id;

	if (!key) {
		ss->failed = 1;
		return 0;
	}
	memcpy(key, name, nl + 1);
	if (fl)
		memcpy(key + nl + 1, file, fl);
	key[nl + 1 + fl] = 0;
	memcpy(key + nl + fl + 2, &line, sizeof(int));
	memcpy(key + nl + fl + 2 + sizeof(int), &col, sizeof(int));
	id = wp_intern_id(&ss->frames, key, nl + fl + 2 + 2 * sizeof(int));
	if (key != stack_key)
		free(key);
	if (id < 0) {
		ss->failed = 1;
		return 0;
	}
	return (uint32_t)id;
}

/* The frame indices of stack `id`, root first, computed once. */
static const uint32_t *stack_frames(struct ss *ss, uint32_t id)
{
	const struct wp_model *m = ss->m;
	char label[256];
	uint32_t *v;

	if (ss->stack_idx[id])
		return ss->stack_idx[id];
	if (wp_fmt_stack_root_first(m, id, &ss->st) < 0)
		goto oom;
	v = malloc((ss->st.n + 1) * sizeof(*v));
	if (!v)
		goto oom;
	v[0] = (uint32_t)ss->st.n;
	for (size_t i = 0; i < ss->st.n; i++) {
		const struct wp_sym_frame *f = ss->st.v[i].f;

		v[i + 1] =
			frame_id(ss,
				 wp_model_frame_label(m, ss->st.v[i].loc, f, label, sizeof(label)),
				 f->file, f->line > 0 ? f->line : 0, f->column > 0 ? f->column : 0);
	}
	ss->stack_idx[id] = v;
	return v;
oom:
	ss->failed = 1;
	return NULL;
}

/* The index of an off-CPU sample's last frame, NO_FRAME when on-CPU. */
static uint32_t off_cpu_frame(struct ss *ss, const struct wp_sample *smp)
{
	char buf[32], name[64];
	const char *sc;

	if (!wp_fmt_off_cpu(smp))
		return NO_FRAME;
	sc = wp_fmt_syscall(smp, buf, sizeof(buf));
	if (sc)
		snprintf(name, sizeof(name), "[off-cpu: %s]", sc);
	else
		snprintf(name, sizeof(name), "[off-cpu]");
	return frame_id(ss, name, NULL, 0, 0);
}

static int cmp_ent(const void *x, const void *y)
{
	const struct ent *a = x, *b = y;

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return a->sample < b->sample ? -1 : a->sample > b->sample;
}

/* Each thread's place: the main thread first, then by tid. */
static uint32_t rank_of(const struct wp_model *m, uint32_t tid)
{
	return tid == m->p.main_tid ? 0 : tid == UINT32_MAX ? tid : tid + 1;
}

static void write_profile(struct ss *ss, const struct ent *e, size_t n, uint64_t period)
{
	const struct wp_model *m = ss->m;
	const struct wp_sample *first = &m->p.samples[e[0].sample];
	const struct wp_thread *t = wp_model_thread(m, first->tid);
	uint64_t start = first->t_ns > m->p.start_ns ? first->t_ns - m->p.start_ns : 0;
	char name[64];

	if (t && t->name[0])
		snprintf(name, sizeof(name), "%.*s (tid %u)", (int)sizeof(t->name), t->name,
			 first->tid);
	else
		snprintf(name, sizeof(name), "tid %u", first->tid);
	wp_outbuf_printf(ss->s, "{\"type\":\"sampled\",\"name\":");
	put_json_str(ss, name);
	uint64_t ticks = 0;

	for (size_t i = 0; i < n; i++)
		ticks += m->p.samples[e[i].sample].n;
	wp_outbuf_printf(ss->s,
			 ",\"unit\":\"nanoseconds\",\"startValue\":%llu,\"endValue\":%llu,"
			 "\"samples\":[",
			 (unsigned long long)start, (unsigned long long)(start + ticks * period));
	for (size_t i = 0; i < n && !ss->s->s->failed && !ss->failed; i++) {
		const struct wp_sample *smp = &m->p.samples[e[i].sample];
		const uint32_t *v = stack_frames(ss, smp->stack_id);
		uint32_t off = off_cpu_frame(ss, smp);
		int comma = 0;

		if (!v)
			break;
		wp_outbuf_put(ss->s, i ? ",[" : "[", i ? 2 : 1);
		for (uint32_t k = 1; k <= v[0]; k++, comma = 1) {
			if (comma)
				wp_outbuf_put(ss->s, ",", 1);
			wp_outbuf_u64(ss->s, v[k]);
		}
		if (off != NO_FRAME) {
			if (comma)
				wp_outbuf_put(ss->s, ",", 1);
			wp_outbuf_u64(ss->s, off);
		}
		wp_outbuf_put(ss->s, "]", 1);
	}
	wp_outbuf_printf(ss->s, "],\"weights\":[");
	for (size_t i = 0; i < n && !ss->s->s->failed; i++) {
		if (i)
			wp_outbuf_put(ss->s, ",", 1);
		wp_outbuf_u64(ss->s, m->p.samples[e[i].sample].n * period);
	}
	wp_outbuf_printf(ss->s, "]}");
}

static void write_frames(struct ss *ss)
{
	wp_outbuf_printf(ss->s, "\"shared\":{\"frames\":[");
	for (size_t i = 0; i < ss->frames.nr && !ss->s->s->failed; i++) {
		const char *name = ss->frames.keys[i];
		const char *file = name + strlen(name) + 1;
		int line, col;

		memcpy(&line, file + strlen(file) + 1, sizeof(int));
		memcpy(&col, file + strlen(file) + 1 + sizeof(int), sizeof(int));
		wp_outbuf_printf(ss->s, i ? ",{\"name\":" : "{\"name\":");
		put_json_str(ss, name);
		if (file[0]) {
			wp_outbuf_printf(ss->s, ",\"file\":");
			put_json_str(ss, file);
		}
		if (line > 0)
			wp_outbuf_printf(ss->s, ",\"line\":%d", line);
		if (col > 0)
			wp_outbuf_printf(ss->s, ",\"col\":%d", col);
		wp_outbuf_put(ss->s, "}", 1);
	}
	wp_outbuf_printf(ss->s, "]}");
}

int wp_out_speedscope(const struct wp_model *m, const struct wp_format_opts *o,
		      struct wp_out_sink *s, struct wp_out_stats *st)
{
	const struct wp_profile *p = &m->p;
	struct wp_outbuf *ob = malloc(sizeof(*ob));
	struct ss ss = { .m = m, .s = ob };
	uint64_t period = wp_model_period_ns(m);
	struct ent *ents;
	size_t n = 0;
	int rc = -1;

	(void)o;
	ents = malloc((p->nr_samples ? p->nr_samples : 1) * sizeof(*ents));
	ss.stack_idx = calloc(p->nr_stacks ? p->nr_stacks : 1, sizeof(*ss.stack_idx));
	if (!ents || !ss.stack_idx || !ob)
		goto oom;
	wp_outbuf_init(ob, s);
	for (size_t i = 0; i < p->nr_samples; i++) {
		if (!wp_fmt_sample_ok(m, &p->samples[i]))
			continue;
		ents[n].rank = rank_of(m, p->samples[i].tid);
		ents[n].sample = (uint32_t)i;
		n++;
	}
	qsort(ents, n, sizeof(*ents), cmp_ent);
	/* Every frame first (the profiles' arrays index them), then the
	 * profiles: the frames are interned in a first pass. */
	for (size_t i = 0; i < n && !ss.failed; i++) {
		stack_frames(&ss, p->samples[ents[i].sample].stack_id);
		off_cpu_frame(&ss, &p->samples[ents[i].sample]);
	}
	if (ss.failed)
		goto oom;
	wp_outbuf_printf(ob,
			 "{\"$schema\":\"" SCHEMA "\",\"exporter\":\"libwallprof %s\",\"name\":",
			 WP_VERSION);
	if (p->cmdline && p->cmdline[0])
		put_json_str(&ss, p->cmdline);
	else
		wp_outbuf_printf(ob, "\"process %u\"", p->pid);
	wp_outbuf_printf(ob, ",\"activeProfileIndex\":0,");
	write_frames(&ss);
	wp_outbuf_printf(ob, ",\"profiles\":[");
	for (size_t i = 0, j; i < n && !s->failed; i = j) {
		for (j = i + 1; j < n && ents[j].rank == ents[i].rank; j++)
			;
		if (i)
			wp_outbuf_put(ob, ",", 1);
		write_profile(&ss, ents + i, j - i, period);
	}
	wp_outbuf_printf(ob, "]}\n");
	wp_outbuf_flush(ob);
	if (ss.failed)
		goto oom;
	if (s->failed)
		goto out;
	wp_fmt_stats(m, st);
	if (st)
		st->bytes = s->bytes;
	rc = 0;
	goto out;
oom:
	wp_sink_oom(s, "speedscope");
out:
	for (size_t i = 0; ss.stack_idx && i < p->nr_stacks; i++)
		free(ss.stack_idx[i]);
	free(ss.stack_idx);
	free(ents);
	wp_intern_free(&ss.frames);
	wp_fmt_stack_free(&ss.st);
	free(ob);
	return rc;
}
