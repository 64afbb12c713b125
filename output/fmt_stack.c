/* fmt_stack: the format writers' common reading of a model (fmt_stack.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fmt_stack.h"

int wp_fmt_sample_ok(const struct wp_model *m, const struct wp_sample *s)
{
	return s->stack_id < m->p.nr_stacks && s->n > 0;
}

static int push(struct wp_fmt_stack *st, const struct wp_model *m, uint32_t pc, uint32_t fi)
{
	if (st->n == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 64;
		struct wp_fmt_frame *v = realloc(st->v, cap * sizeof(*v));

		if (!v)
			return -1;
		st->v = v;
		st->cap = cap;
	}
	st->v[st->n].f = &m->frames[fi];
	st->v[st->n].loc = &m->locs[pc];
	st->v[st->n].pc = pc;
	st->n++;
	return 0;
}

int wp_fmt_stack_root_first(const struct wp_model *m, uint32_t stack_id, struct wp_fmt_stack *st)
{
	const struct wp_profile *p = &m->p;
	uint32_t lo, hi;

	st->n = 0;
	if (stack_id >= p->nr_stacks)
		return 0;
	lo = p->stack_off[stack_id];
	hi = p->stack_off[stack_id + 1];
	for (uint32_t k = hi; k > lo; k--) {
		uint32_t pc = p->stack_frames[k - 1];
		const struct wp_model_loc *loc;

		if (pc >= p->nr_pcs)
			continue;
		loc = &m->locs[pc];
		if (loc->first > m->nr_frames || loc->nr > m->nr_frames - loc->first)
			continue;
		for (uint32_t j = loc->nr; j > 0; j--)
			if (push(st, m, pc, loc->first + j - 1) < 0)
				return -1;
	}
	return 0;
}

void wp_fmt_stack_free(struct wp_fmt_stack *st)
{
	free(st->v);
	memset(st, 0, sizeof(*st));
}

int wp_fmt_off_cpu(const struct wp_sample *s)
{
	return !(s->flags & WP_SAMPLE_ON_CPU);
}

const char *wp_fmt_syscall(const struct wp_sample *s, char *buf, size_t len)
{
	const char *name;

	if (!wp_fmt_off_cpu(s) || !(s->flags & WP_SAMPLE_SYSCALL))
		return NULL;
	name = wp_out_syscall_name(s->syscall);
	if (name)
		return name;
	snprintf(buf, len, "syscall_%u", s->syscall);
	return buf;
}

void wp_fmt_stats(const struct wp_model *m, struct wp_out_stats *st)
{
	const struct wp_profile *p = &m->p;
	uint64_t first = 0, last = 0;
	uint32_t *tids;
	uint8_t *used;
	size_t n = 0, nr = 0, nt = 0;

	if (!st)
		return;
	tids = malloc((p->nr_samples ? p->nr_samples : 1) * sizeof(*tids));
	for (size_t i = 0; i < p->nr_samples; i++) {
		const struct wp_sample *s = &p->samples[i];

		if (!wp_fmt_sample_ok(m, s))
			continue;
		if (!n || s->t_ns < first)
			first = s->t_ns;
		if (!n || wp_sample_last(p, s) > last)
			last = wp_sample_last(p, s);
		if (tids)
			tids[nr++] = s->tid;
		n += s->n;
	}
	if (tids) {
		qsort(tids, nr, sizeof(*tids), wp_cmp_u32);
		for (size_t i = 0; i < nr; i++)
			nt += i == 0 || tids[i] != tids[i - 1];
		free(tids);
	}
	st->nr_frames = 0;
	used = calloc(p->nr_pcs ? p->nr_pcs : 1, 1);
	for (size_t i = 0; used && i < p->nr_samples; i++) {
		const struct wp_sample *s = &p->samples[i];

		if (!wp_fmt_sample_ok(m, s))
			continue;
		for (uint32_t k = p->stack_off[s->stack_id]; k < p->stack_off[s->stack_id + 1]; k++)
			if (p->stack_frames[k] < p->nr_pcs && !used[p->stack_frames[k]]) {
				used[p->stack_frames[k]] = 1;
				st->nr_frames++;
			}
	}
	free(used);
	st->nr_samples = n;
	st->nr_threads = nt;
	st->duration_s = n ? (double)(last - first) / 1e9 : 0.0;
}
