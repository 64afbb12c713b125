/* sentry_model: the Sentry v1 writer (sentry.c) fed from a model: its
 * lookup answers from the model's locations instead of a symbolizer, so a
 * raw dump written through a model gives the JSON wp_out_sentry_write gives
 * (ids and timestamps aside), and a profile read back is written again as
 * it was. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"

/* The looked-up address of each location (the PC, or return address - 1),
 * sorted, with its location. */
struct key {
	uint64_t la;
	uint32_t loc;
};

struct lookup {
	const struct wp_model *m;
	struct key *keys;
	size_t n;
};

static int cmp_key(const void *a, const void *b)
{
	const struct key *x = a, *y = b;

	if (x->la != y->la)
		return x->la < y->la ? -1 : 1;
	return x->loc < y->loc ? -1 : x->loc > y->loc;
}

static int lookup(void *ctx, uint64_t addr, struct wp_sym_result *out)
{
	const struct lookup *lk = ctx;
	size_t lo = 0, hi = lk->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (lk->keys[mid].la < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == lk->n || lk->keys[lo].la != addr)
		return -1; /* the writer falls back to the module map */
	{
		const struct wp_model_loc *l = &lk->m->locs[lk->keys[lo].loc];
		const struct wp_sym_frame *f = &lk->m->frames[l->first];

		memset(out, 0, sizeof(*out));
		out->module = l->module;
		out->module_offset = l->module < 0 ? 0 : l->module_offset;
		/* One frame with nothing known is the writer's "no frames". */
		if (l->nr == 1 && !f->function && !f->file && !f->line)
			return 0;
		out->nr_frames = (int)l->nr;
		out->frames = f;
	}
	return 0;
}

int wp_out_sentry_model(const struct wp_model *m, const struct wp_format_opts *o,
			struct wp_out_sink *s, struct wp_out_stats *st)
{
	static const struct wp_format_opts none;
	struct wp_out_opts opts;
	int rc;

	if (!o)
		o = &none;
	opts = (struct wp_out_opts){
		.platform = o->platform ? o->platform : m->platform,
		.release = o->release,
		.environment = o->environment,
		.chunk = o->chunk,
		.profiler_id = o->profiler_id,
		.chunk_id = o->chunk_id,
		.transaction_id = o->transaction_id,
		.trace_id = o->trace_id,
		.segment_id = o->segment_id,
		.no_args = o->no_args,
	};
	struct lookup lk = { .m = m };

	lk.keys = malloc((m->p.nr_pcs + 1) * sizeof(*lk.keys));
	if (!lk.keys) {
		if (s->err && s->errlen)
			snprintf(s->err, s->errlen, "out of memory writing the Sentry profile");
		s->failed = 1;
		return -1;
	}
	for (size_t i = 0; i < m->p.nr_pcs; i++) {
		const struct wp_pc *pc = &m->p.pcs[i];

		lk.keys[i].la =
			!(pc->flags & WP_PC_EXACT) && pc->addr > 0 ? pc->addr - 1 : pc->addr;
		lk.keys[i].loc = (uint32_t)i;
	}
	lk.n = m->p.nr_pcs;
	qsort(lk.keys, lk.n, sizeof(*lk.keys), cmp_key);
	rc = wp_out_sentry_write_sink(&m->p, lookup, &lk, &opts, s, st);
	free(lk.keys);
	return rc;
}
