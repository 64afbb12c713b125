/* profile: ownership helpers for struct wp_profile, and the counters' keys
 * (profile.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile.h"

#define CTR(name, field, kind) { name, offsetof(struct wp_counters, field), kind }
const struct wp_counter_key wp_counter_keys[] = {
	CTR("ticks", nr_ticks, WP_CTR_INFO),
	CTR("ticks_late", nr_ticks_late, WP_CTR_LOSS),
	CTR("signals", nr_signals, WP_CTR_INFO),
	CTR("samples_recorded", nr_samples, WP_CTR_INFO),
	CTR("pending", nr_pending, WP_CTR_DROP),
	CTR("send_failed", nr_send_failed, WP_CTR_DROP),
	CTR("unwind_failed", nr_unwind_failed, WP_CTR_LOSS),
	CTR("truncated", nr_truncated, WP_CTR_LOSS),
	CTR("dropped_full", nr_dropped_full, WP_CTR_DROP),
	CTR("overwritten", nr_overwritten, WP_CTR_DROP),
	CTR("threads_untracked", nr_threads_untracked, WP_CTR_LOSS),
	CTR("signals_blocked", nr_signals_blocked, WP_CTR_HOW),
	CTR("eintr_retried", nr_eintr_retried, WP_CTR_HOW),
	CTR("from_wrapper", nr_from_wrapper, WP_CTR_HOW),
	CTR("reused", nr_reused, WP_CTR_HOW),
	CTR("dl_guarded", nr_dl_guarded, WP_CTR_LOSS),
	CTR("site_replayed", nr_site_replayed, WP_CTR_INFO),
	CTR("site_direct", nr_site_direct, WP_CTR_INFO),
	CTR("site_mismatch", nr_site_mismatch, WP_CTR_INFO),
	CTR("from_proc", nr_from_proc, WP_CTR_HOW),
	CTR("from_timer", nr_from_timer, WP_CTR_HOW),
	CTR("held", nr_held, WP_CTR_HOW),
	CTR("timers", nr_timers, WP_CTR_INFO),
	CTR("exiting", nr_exiting, WP_CTR_DROP),
	CTR("signal_batches", nr_signal_batches, WP_CTR_INFO),
	CTR("ticks_rested", nr_ticks_rested, WP_CTR_INFO),
};
#undef CTR

_Static_assert(sizeof(wp_counter_keys) / sizeof(wp_counter_keys[0]) ==
		       sizeof(struct wp_counters) / sizeof(uint64_t),
	       "a key for every counter");

const size_t wp_nr_counter_keys = sizeof(wp_counter_keys) / sizeof(wp_counter_keys[0]);

uint64_t *wp_counter_ptr(struct wp_counters *c, size_t i)
{
	return (uint64_t *)((char *)c + wp_counter_keys[i].off);
}

uint64_t wp_counter_at(const struct wp_counters *c, size_t i)
{
	return *wp_counter_ptr((struct wp_counters *)c, i);
}

uint64_t wp_counters_dropped(const struct wp_counters *c)
{
	uint64_t sum = 0;

	for (size_t i = 0; i < wp_nr_counter_keys; i++)
		if (wp_counter_keys[i].kind == WP_CTR_DROP)
			sum += wp_counter_at(c, i);
	return sum;
}


int wp_cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

uint64_t wp_profile_last_ns(const struct wp_profile *p)
{
	uint64_t last = 0;

	for (size_t i = 0; i < p->nr_samples; i++)
		if (wp_sample_last(p, &p->samples[i]) > last)
			last = wp_sample_last(p, &p->samples[i]);
	return last;
}

uint64_t wp_profile_count(const struct wp_profile *p)
{
	uint64_t n = 0;

	for (size_t i = 0; i < p->nr_samples; i++)
		n += p->samples[i].n;
	return n;
}

int wp_profile_check(const struct wp_profile *p, char *err, size_t errlen)
{
	for (size_t i = 0; i < p->nr_samples; i++) {
		const struct wp_sample *s = &p->samples[i];
		const char *why = NULL;

		if (s->n == 0)
			why = "stands for no tick";
		else if (s->n > 1 && (s->tick >= p->nr_ticks || s->n > p->nr_ticks - s->tick))
			why = "has ticks outside the tick table";
		else if (s->n > 1 && p->ticks[s->tick] != s->t_ns)
			why = "starts at another time than its first tick";
		else if (i && s->t_ns < p->samples[i - 1].t_ns)
			why = "is out of time order";
		if (why) {
			if (err && errlen)
				snprintf(err, errlen, "sample %zu %s", i, why);
			return -1;
		}
	}
	return 0;
}

/* The first k in [0, s->n) whose tick is at or after t (s->n if none):
 * the ticks ascend. */
static uint32_t first_at(const struct wp_profile *p, const struct wp_sample *s, uint64_t t)
{
	uint32_t lo = 0, hi = s->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (wp_sample_time(p, s, mid) < t)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int wp_cmp_sample(const void *a, const void *b)
{
	const struct wp_sample *x = a, *y = b;

	if (x->t_ns != y->t_ns)
		return x->t_ns < y->t_ns ? -1 : 1;
	return x->tid < y->tid ? -1 : x->tid > y->tid;
}

void wp_profile_keep_range(struct wp_profile *p, uint64_t from_ns, uint64_t to_ns)
{
	size_t w = 0;
	int cut = 0;

	for (size_t i = 0; i < p->nr_samples; i++) {
		struct wp_sample s = p->samples[i];
		uint32_t a = first_at(p, &s, from_ns), b = to_ns ? first_at(p, &s, to_ns) : s.n;

		if (a >= b)
			continue;
		cut |= a > 0;
		s.t_ns = wp_sample_time(p, &s, a);
		s.tick += a;
		s.n = b - a;
		p->samples[w++] = s;
	}
	p->nr_samples = w;
	/* An entry cut at its start begins later than it did. */
	if (cut)
		qsort(p->samples, w, sizeof(*p->samples), wp_cmp_sample);
}

/* The heap's order: by time, then entry. */
static int run_before(const struct wp_tick_iter_run *a, const struct wp_tick_iter_run *b)
{
	return a->t != b->t ? a->t < b->t : a->idx < b->idx;
}

static int heap_push(struct wp_tick_iter *it, struct wp_tick_iter_run r)
{
	size_t i;

	if (it->nr_heap == it->cap_heap) {
		size_t cap = it->cap_heap ? it->cap_heap * 2 : 64;
		struct wp_tick_iter_run *v = realloc(it->heap, cap * sizeof(*v));

		if (!v)
			return -1;
		it->heap = v;
		it->cap_heap = cap;
	}
	for (i = it->nr_heap++; i > 0 && run_before(&r, &it->heap[(i - 1) / 2]); i = (i - 1) / 2)
		it->heap[i] = it->heap[(i - 1) / 2];
	it->heap[i] = r;
	return 0;
}

static void heap_pop(struct wp_tick_iter *it)
{
	struct wp_tick_iter_run last = it->heap[--it->nr_heap];
	size_t i = 0, n = it->nr_heap;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && run_before(&it->heap[c + 1], &it->heap[c]))
			c++;
		if (!run_before(&it->heap[c], &last))
			break;
		it->heap[i] = it->heap[c];
		i = c;
	}
	if (n)
		it->heap[i] = last;
}

static int cmp_order(const void *a, const void *b, void *arg)
{
	const struct wp_sample *s = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (s[x].t_ns != s[y].t_ns)
		return s[x].t_ns < s[y].t_ns ? -1 : 1;
	return x < y ? -1 : x > y;
}

int wp_tick_iter_init(struct wp_tick_iter *it, const struct wp_profile *p,
		      int (*keep)(const void *ctx, const struct wp_sample *s), const void *ctx)
{
	size_t i;

	memset(it, 0, sizeof(*it));
	it->p = p;
	it->keep = keep;
	it->ctx = ctx;
	/* profile.h promises time order; a profile built by hand that breaks
	 * it is still written in time order (Relay checks only the last
	 * sample against its 30 s limit). */
	for (i = 1; i < p->nr_samples; i++)
		if (p->samples[i].t_ns < p->samples[i - 1].t_ns)
			break;
	if (i < p->nr_samples) {
		it->order = malloc(p->nr_samples * sizeof(*it->order));
		if (!it->order)
			return -1;
		for (i = 0; i < p->nr_samples; i++)
			it->order[i] = (uint32_t)i;
		qsort_r(it->order, p->nr_samples, sizeof(*it->order), cmp_order, p->samples);
	}
	return 0;
}

/* The entry at place k of the time order. */
static uint32_t entry_at(const struct wp_tick_iter *it, size_t k)
{
	return it->order ? it->order[k] : (uint32_t)k;
}

int wp_tick_iter_next(struct wp_tick_iter *it, const struct wp_sample **s, uint64_t *t)
{
	const struct wp_profile *p = it->p;
	struct wp_tick_iter_run r;

	while (it->next < p->nr_samples && it->keep &&
	       !it->keep(it->ctx, &p->samples[entry_at(it, it->next)]))
		it->next++;
	if (it->next < p->nr_samples)
		r = (struct wp_tick_iter_run){ p->samples[entry_at(it, it->next)].t_ns,
					       entry_at(it, it->next), 0 };
	if (it->next < p->nr_samples && (it->nr_heap == 0 || run_before(&r, &it->heap[0]))) {
		it->next++;
	} else if (it->nr_heap) {
		r = it->heap[0];
		heap_pop(it);
	} else {
		return 0;
	}
	*s = &p->samples[r.idx];
	*t = r.t;
	if (r.k + 1 < (*s)->n &&
	    heap_push(it, (struct wp_tick_iter_run){ wp_sample_time(p, *s, r.k + 1), r.idx,
						     r.k + 1 }) < 0)
		return -1;
	return 1;
}

void wp_tick_iter_free(struct wp_tick_iter *it)
{
	free(it->heap);
	free(it->order);
	memset(it, 0, sizeof(*it));
}

int wp_profile_sentry_ok(const struct wp_profile *p)
{
	uint32_t *tids;
	size_t i;
	int ok = 0;

	for (i = 0; i < p->nr_samples; i++)
		if (p->samples[i].n >= 2)
			return 1;
	if (p->nr_samples < 2)
		return 0;
	tids = malloc(p->nr_samples * sizeof(*tids));
	if (!tids)
		return 1; /* cannot tell: write it */
	for (i = 0; i < p->nr_samples; i++)
		tids[i] = p->samples[i].tid;
	qsort(tids, p->nr_samples, sizeof(*tids), wp_cmp_u32);
	for (i = 1; i < p->nr_samples && !ok; i++)
		ok = tids[i] == tids[i - 1];
	free(tids);
	return ok;
}

void wp_profile_free(struct wp_profile *p)
{
	size_t i;

	if (!p)
		return;
	for (i = 0; p->modules && i < p->nr_modules; i++)
		free(p->modules[i].path);
	free(p->modules);
	free(p->pcs);
	free(p->stack_frames);
	free(p->stack_off);
	free(p->samples);
	free(p->ticks);
	free(p->threads);
	free(p->cmdline);
	memset(p, 0, sizeof(*p));
}
