/* folded: writes a model as folded ("collapsed") stacks, the input of
 * flamegraph.pl, inferno and speedscope (formats.h, wp_out_folded; the
 * rules are in docs/FORMATS.md, "Folded stacks"):
 *
 *   [thread;]root;caller;...;leaf[;[off-cpu: read]] COUNT
 *
 * one line per distinct line text, sorted bytewise, COUNT the samples.
 * Samples are first counted per (stack, thread, off-CPU state and system
 * call) so that only distinct stacks are formatted, then the formatted
 * lines sorted and equal ones merged (two frame-table entries of one
 * function at the same line, or two threads of one name, give one line). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt_stack.h"
#include "formats.h"
#include "outbuf.h"

/* The suffix a sample gets: none, "[off-cpu]", or "[off-cpu: NAME]". */
#define SUFFIX_NONE 0u
#define SUFFIX_OFF 1u
#define SUFFIX_SYSCALL 2u /* + the system call's number */

struct key {
	uint32_t stack_id;
	uint32_t tid;    /* 0 without the thread prefix */
	uint64_t suffix; /* SUFFIX_* */
	uint32_t sample; /* one sample of the group (for its syscall) */
};

struct line {
	char *text;
	uint64_t count;
};

/* A growing string. */
struct buf {
	char *s;
	size_t len, cap;
	int failed;
};

static void put(struct buf *b, const char *s, size_t n)
{
	if (b->failed)
		return;
	if (n + 1 > b->cap - b->len) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (n + 1 > cap - b->len)
			cap *= 2;
		p = realloc(b->s, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->s = p;
		b->cap = cap;
	}
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

/* A frame's name as a folded frame: ';' separates frames and a newline
 * ends the line, so ';' becomes ':' and control characters '?'. */
static void put_frame(struct buf *b, const char *name)
{
	size_t start;

	if (b->len)
		put(b, ";", 1);
	start = b->len;
	put(b, name, strlen(name));
	if (b->failed)
		return;
	for (size_t i = start; i < b->len; i++) {
		unsigned char c = (unsigned char)b->s[i];

		if (c == ';')
			b->s[i] = ':';
		else if (c < 0x20 || c == 0x7f)
			b->s[i] = '?';
	}
}

static int cmp_key(const void *x, const void *y)
{
	const struct key *a = x, *b = y;

	if (a->stack_id != b->stack_id)
		return a->stack_id < b->stack_id ? -1 : 1;
	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->suffix != b->suffix)
		return a->suffix < b->suffix ? -1 : 1;
	return 0;
}

static int cmp_line(const void *x, const void *y)
{
	return strcmp(((const struct line *)x)->text, ((const struct line *)y)->text);
}

/* The text of one group's line (without the count) into `b`. */
static int format_line(const struct wp_model *m, const struct key *k, struct buf *b,
		       struct wp_fmt_stack *st)
{
	char label[256], num[32];

	b->len = 0;
	if (b->s)
		b->s[0] = 0;
	if (k->tid) {
		const struct wp_thread *t = wp_model_thread(m, k->tid);
		char name[sizeof(t->name) + 1];

		if (t && t->name[0]) {
			memcpy(name, t->name, sizeof(t->name));
			name[sizeof(t->name)] = 0;
		} else {
			snprintf(name, sizeof(name), "%u", k->tid);
		}
		put_frame(b, name);
	}
	if (wp_fmt_stack_root_first(m, k->stack_id, st) < 0)
		return -1;
	for (size_t i = 0; i < st->n; i++)
		put_frame(b,
			  wp_model_frame_label(m, st->v[i].loc, st->v[i].f, label, sizeof(label)));
	if (st->n == 0)
		put_frame(b, "[unknown]");
	if (k->suffix == SUFFIX_OFF) {
		put_frame(b, "[off-cpu]");
	} else if (k->suffix >= SUFFIX_SYSCALL) {
		const char *sc = wp_fmt_syscall(&m->p.samples[k->sample], num, sizeof(num));

		snprintf(label, sizeof(label), "[off-cpu: %s]", sc ? sc : "?");
		put_frame(b, label);
	}
	return b->failed ? -1 : 0;
}

int wp_out_folded(const struct wp_model *m, const struct wp_format_opts *o, struct wp_out_sink *s,
		  struct wp_out_stats *st)
{
	const struct wp_profile *p = &m->p;
	struct wp_fmt_stack stack = { 0 };
	struct buf b = { 0 };
	struct key *keys;
	struct wp_outbuf *ob;
	struct line *lines = NULL;
	size_t n = 0, nr_lines = 0;
	int rc = -1;

	keys = malloc((p->nr_samples ? p->nr_samples : 1) * sizeof(*keys));
	ob = malloc(sizeof(*ob));
	if (!keys || !ob)
		goto oom;
	wp_outbuf_init(ob, s);
	for (size_t i = 0; i < p->nr_samples; i++) {
		const struct wp_sample *smp = &p->samples[i];

		if (!wp_fmt_sample_ok(m, smp))
			continue;
		keys[n].stack_id = smp->stack_id;
		keys[n].tid = o && o->thread_prefix ? smp->tid : 0;
		keys[n].suffix = SUFFIX_NONE;
		if (o && o->syscall_suffix && wp_fmt_off_cpu(smp))
			keys[n].suffix = smp->flags & WP_SAMPLE_SYSCALL
						 ? SUFFIX_SYSCALL + (uint64_t)smp->syscall
						 : SUFFIX_OFF;
		keys[n].sample = (uint32_t)i;
		n++;
	}
	qsort(keys, n, sizeof(*keys), cmp_key);
	lines = calloc(n ? n : 1, sizeof(*lines));
	if (!lines)
		goto oom;
	for (size_t i = 0, j; i < n; i = j) {
		uint64_t count = 0;

		for (j = i; j < n && cmp_key(&keys[j], &keys[i]) == 0; j++)
			count += p->samples[keys[j].sample].n;
		if (format_line(m, &keys[i], &b, &stack) < 0)
			goto oom;
		lines[nr_lines].text = strdup(b.s);
		if (!lines[nr_lines].text)
			goto oom;
		lines[nr_lines++].count = count;
	}
	qsort(lines, nr_lines, sizeof(*lines), cmp_line);
	for (size_t i = 0, j; i < nr_lines; i = j) {
		uint64_t count = 0;

		for (j = i; j < nr_lines && strcmp(lines[j].text, lines[i].text) == 0; j++)
			count += lines[j].count;
		if (wp_outbuf_puts(ob, lines[i].text) < 0 || wp_outbuf_put(ob, " ", 1) < 0 ||
		    wp_outbuf_u64(ob, count) < 0 || wp_outbuf_put(ob, "\n", 1) < 0)
			goto out;
	}
	if (wp_outbuf_flush(ob) < 0)
		goto out;
	wp_fmt_stats(m, st);
	if (st)
		st->bytes = s->bytes;
	rc = 0;
	goto out;
oom:
	wp_sink_oom(s, "folded");
out:
	for (size_t i = 0; i < nr_lines; i++)
		free(lines[i].text);
	free(lines);
	free(keys);
	free(ob);
	free(b.s);
	wp_fmt_stack_free(&stack);
	return rc;
}
