/* sentry: writes a raw profile as a Sentry sample-format v1 profile, or as
 * a v2 profile chunk (opts->chunk): the same frames, stacks, thread
 * metadata and images, another head and other samples. Streams the JSON to
 * the file element by element (jansson per frame or image, plain
 * formatting for samples and stacks) so 200k samples need no 100 MB tree. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats.h"
#include "jw.h"
#include "output.h"
#include "sentry_int.h"

#define NONE UINT32_MAX

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int cmp_thread_idx(const void *a, const void *b, void *arg)
{
	const struct wp_thread *t = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return t[x].tid < t[y].tid ? -1 : t[x].tid > t[y].tid;
}

static int stack_valid(const struct wp_profile *p, uint32_t id)
{
	return id < p->nr_stacks && p->stack_off && p->stack_off[id] <= p->stack_off[id + 1];
}

/* A valid stack with a frame that gets written: not idle for Relay. */
static int stack_busy(const struct wp_profile *p, uint32_t id)
{
	if (!stack_valid(p, id))
		return 0;
	for (uint32_t k = p->stack_off[id]; k < p->stack_off[id + 1]; k++)
		if (p->stack_frames[k] < p->nr_pcs)
			return 1;
	return 0;
}

static int tid_busy(const struct wp_sentry_plan *pl, uint32_t tid)
{
	return bsearch(&tid, pl->busy, pl->nr_busy, sizeof(uint32_t), cmp_u32) != NULL;
}

/* Whether sample `s` is written: a valid stack, and in a chunk a thread
 * Relay keeps (v2 drops every thread with fewer than 2 non-idle samples). */
static int sample_kept(const struct wp_sentry_plan *pl, const struct wp_sample *s)
{
	return s->n > 0 && stack_valid(pl->p, s->stack_id) && (!pl->chunk || tid_busy(pl, s->tid));
}

/* The chunk's threads: pl->busy. Returns 0 or -1 on out of memory. */
static int busy_threads(struct wp_sentry_plan *pl)
{
	const struct wp_profile *p = pl->p;
	size_t n = 0, i, j;

	/* A sample of n >= 2 ticks counts as two: twice its tid. */
	pl->busy = malloc((2 * p->nr_samples + 1) * sizeof(uint32_t));
	if (!pl->busy)
		return -1;
	for (i = 0; i < p->nr_samples; i++)
		if (stack_busy(p, p->samples[i].stack_id)) {
			pl->busy[n++] = p->samples[i].tid;
			if (p->samples[i].n >= 2)
				pl->busy[n++] = p->samples[i].tid;
		}
	qsort(pl->busy, n, sizeof(uint32_t), cmp_u32);
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && pl->busy[j] == pl->busy[i]; j++)
			;
		if (j - i >= 2)
			pl->busy[pl->nr_busy++] = pl->busy[i];
	}
	return 0;
}

static void plan_free(struct wp_sentry_plan *pl)
{
	free(pl->stack_map);
	free(pl->pc_first);
	free(pl->pc_count);
	free(pl->mod_used);
	free(pl->tids);
	free(pl->thr_by_tid);
	free(pl->busy);
}

/* Decides what gets written: sample order, kept stacks and pcs, threads.
 * Returns 0 or -1 on out of memory. */
static int plan_build(struct wp_sentry_plan *pl)
{
	const struct wp_profile *p = pl->p;
	size_t i, n = p->nr_samples;

	pl->stack_map = malloc((p->nr_stacks + 1) * sizeof(uint32_t));
	pl->pc_first = malloc((p->nr_pcs + 1) * sizeof(uint32_t));
	pl->pc_count = calloc(p->nr_pcs + 1, sizeof(uint32_t));
	pl->mod_used = calloc(p->nr_modules + 1, 1);
	pl->tids = malloc((n + 1) * sizeof(uint32_t));
	pl->thr_by_tid = malloc((p->nr_threads + 1) * sizeof(uint32_t));
	if (!pl->stack_map || !pl->pc_first || !pl->pc_count || !pl->mod_used || !pl->tids ||
	    !pl->thr_by_tid)
		return -1;
	memset(pl->stack_map, 0xff, (p->nr_stacks + 1) * sizeof(uint32_t));
	memset(pl->pc_first, 0xff, (p->nr_pcs + 1) * sizeof(uint32_t));
	if (pl->chunk && busy_threads(pl) < 0)
		return -1;

	/* The samples are written in time order (wp_tick_iter): the first
	 * written is the earliest first tick, the last the latest last tick. */
	pl->base_ns = p->start_ns;
	for (i = 0; i < n; i++) {
		const struct wp_sample *s = &p->samples[i];
		uint64_t last;

		if (!sample_kept(pl, s))
			continue;
		last = wp_sample_last(p, s);
		if (pl->nr_written == 0 || s->t_ns < pl->first_ns)
			pl->first_ns = s->t_ns;
		if (pl->nr_written == 0 || last > pl->last_ns)
			pl->last_ns = last;
		pl->stack_map[s->stack_id] = 0;
		pl->tids[pl->nr_tids++] = s->tid;
		pl->nr_written += s->n;
		if (s->flags & WP_SAMPLE_TRUNCATED)
			pl->nr_truncated += s->n;
	}
	if (pl->nr_written && pl->first_ns < pl->base_ns)
		pl->base_ns = pl->first_ns; /* never a negative elapsed time */
	pl->last_elapsed = pl->nr_written ? pl->last_ns - pl->base_ns : 0;

	/* Output stack ids in raw order; only their pcs get symbolized. */
	for (i = 0; i < p->nr_stacks; i++) {
		if (pl->stack_map[i] == NONE)
			continue;
		pl->stack_map[i] = (uint32_t)pl->nr_out_stacks++;
		for (uint32_t k = p->stack_off[i]; k < p->stack_off[i + 1]; k++)
			if (p->stack_frames[k] < p->nr_pcs)
				pl->pc_first[p->stack_frames[k]] = 0;
	}

	qsort(pl->tids, pl->nr_tids, sizeof(uint32_t), cmp_u32);
	for (i = 0, n = pl->nr_tids, pl->nr_tids = 0; i < n; i++)
		if (pl->nr_tids == 0 || pl->tids[pl->nr_tids - 1] != pl->tids[i])
			pl->tids[pl->nr_tids++] = pl->tids[i];

	for (i = 0; i < p->nr_threads; i++)
		pl->thr_by_tid[i] = (uint32_t)i;
	qsort_r(pl->thr_by_tid, p->nr_threads, sizeof(uint32_t), cmp_thread_idx, p->threads);
	return 0;
}

/* The wp_thread entry for `tid` (profile.h: one per tid), or NULL. */
static const struct wp_thread *thread_of(const struct wp_sentry_plan *pl, uint32_t tid)
{
	const struct wp_profile *p = pl->p;
	size_t lo = 0, hi = p->nr_threads;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->threads[pl->thr_by_tid[mid]].tid < tid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == p->nr_threads || p->threads[pl->thr_by_tid[lo]].tid != tid)
		return NULL;
	return &p->threads[pl->thr_by_tid[lo]];
}

static int find_module(const struct wp_profile *p, uint64_t addr)
{
	for (size_t i = 0; i < p->nr_modules; i++)
		if (addr >= p->modules[i].start && addr < p->modules[i].end)
			return (int)i;
	return -1;
}

static json_t *frame_json(const struct wp_profile *p, const struct wp_pc *pc,
			  const struct wp_sym_result *r, const struct wp_sym_frame *f)
{
	uint64_t addr = pc->addr;
	const struct wp_module *m = r->module >= 0 ? &p->modules[r->module] : NULL;
	json_t *o = json_object();
	int bad = 0;

	bad |= wp_jset(o, "instruction_addr", wp_jhex(addr));
	if (f && f->function)
		bad |= wp_jset(o, "function", wp_jstr(f->function));
	if (f && f->file && *f->file) {
		const char *slash = strrchr(f->file, '/');

		bad |= wp_jset(o, "filename", wp_jstr(slash && slash[1] ? slash + 1 : f->file));
		if (f->file[0] == '/')
			bad |= wp_jset(o, "abs_path", wp_jstr(f->file));
	}
	if (f && f->line > 0)
		bad |= wp_jset(o, "lineno", json_integer(f->line));
	if (f && f->column > 0)
		bad |= wp_jset(o, "colno", json_integer(f->column));
	if (m && m->path)
		bad |= wp_jset(o, "module", wp_jstr(m->path));
	/* An explicit in_app on every frame: Sentry's default for an unknown
	 * platform is false, which hides the frame from function metrics. */
	bad |= wp_jset(o, "in_app", json_boolean(m && (m->flags & WP_MOD_MAIN)));
	if (f && f->inlined)
		bad |= wp_jset(o, "inlined", json_true());
	/* The interrupted instruction itself, not a return address: looked up
	 * as is when the profile is read back (wallprof convert). */
	if (pc->flags & WP_PC_EXACT)
		bad |= wp_jset(o, "exact_pc", json_true());
	/* The offset of the looked-up address (return address - 1 for callers):
	 * what addr2line wants for a frame nobody could name. */
	if (m && !(f && f->function))
		bad |= wp_jset(o, "module_offset", wp_jhex(r->module_offset));
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* Symbolizes each kept pc once and writes its 1..k frames. */
static int write_frames(struct wp_jw *w, struct wp_sentry_plan *pl)
{
	const struct wp_profile *p = pl->p;
	int first = 1;

	wp_jw_puts(w, "\"frames\":[");
	for (size_t i = 0; i < p->nr_pcs && !w->failed; i++) {
		const struct wp_pc *pc = &p->pcs[i];
		uint64_t la = pc->addr;
		struct wp_sym_result r = { .module = -1 };
		int k;

		if (pl->pc_first[i] == NONE)
			continue;
		/* A return address points after the call: look up the call. */
		if (!(pc->flags & WP_PC_EXACT) && la > 0)
			la--;
		if (!pl->lookup || pl->lookup(pl->lctx, la, &r) < 0) {
			memset(&r, 0, sizeof(r));
			r.module = find_module(p, la);
			if (r.module >= 0)
				r.module_offset = la - p->modules[r.module].start;
		}
		if (r.module < 0 || (size_t)r.module >= p->nr_modules)
			r.module = -1;
		else
			pl->mod_used[r.module] = 1;
		if (r.nr_frames < 0 || !r.frames)
			r.nr_frames = 0;
		k = r.nr_frames > 0 ? r.nr_frames : 1;
		pl->pc_first[i] = (uint32_t)pl->nr_frames;
		pl->pc_count[i] = (uint32_t)k;
		pl->nr_frames += (size_t)k;
		for (int j = 0; j < k; j++) {
			if (!first)
				wp_jw_put(w, ",", 1);
			first = 0;
			wp_jw_json(w, frame_json(p, pc, &r, r.nr_frames ? &r.frames[j] : NULL));
		}
	}
	return wp_jw_puts(w, "]");
}

static int write_stacks(struct wp_jw *w, const struct wp_sentry_plan *pl)
{
	const struct wp_profile *p = pl->p;
	int first = 1;

	wp_jw_puts(w, ",\"stacks\":[");
	for (size_t i = 0; i < p->nr_stacks && !w->failed; i++) {
		int ffirst = 1;

		if (pl->stack_map[i] == NONE)
			continue;
		wp_jw_puts(w, first ? "[" : ",[");
		first = 0;
		for (uint32_t k = p->stack_off[i]; k < p->stack_off[i + 1]; k++) {
			uint32_t pc = p->stack_frames[k];

			if (pc >= p->nr_pcs)
				continue; /* corrupt index: drop the frame, keep the stack */
			for (uint32_t d = 0; d < pl->pc_count[pc]; d++) {
				wp_jw_printf(w, ffirst ? "%u" : ",%u", pl->pc_first[pc] + d);
				ffirst = 0;
			}
		}
		wp_jw_put(w, "]", 1);
	}
	return wp_jw_puts(w, "]");
}

static int keep_sample(const void *ctx, const struct wp_sample *s)
{
	return sample_kept(ctx, s);
}

/* Every tick of every kept sample, in time order: Sentry's format has one
 * entry per thread per tick. */
static int write_samples(struct wp_jw *w, const struct wp_sentry_plan *pl)
{
	struct wp_tick_iter it;
	const struct wp_sample *s;
	uint64_t t;
	int first = 1, got = 0;

	wp_jw_puts(w, ",\"samples\":[");
	if (wp_tick_iter_init(&it, pl->p, keep_sample, pl) < 0)
		got = -1;
	while (got >= 0 && !w->failed && (got = wp_tick_iter_next(&it, &s, &t)) > 0) {
		if (pl->chunk) {
			/* v2: Unix seconds as a JSON number, thread id a string;
			 * nothing Relay would drop (on_cpu, syscall) */
			int64_t u = wp_sentry_unix_ns(pl, t);

			wp_jw_printf(
				w,
				"%s{\"stack_id\":%u,\"thread_id\":\"%u\",\"timestamp\":%lld.%06lld}",
				first ? "" : ",", pl->stack_map[s->stack_id], s->tid,
				(long long)(u / 1000000000), (long long)(u % 1000000000 / 1000));
			first = 0;
			continue;
		}
		wp_jw_printf(w,
			     "%s{\"stack_id\":%u,\"thread_id\":\"%u\","
			     "\"elapsed_since_start_ns\":\"%llu\",\"on_cpu\":%s",
			     first ? "" : ",", pl->stack_map[s->stack_id], s->tid,
			     (unsigned long long)(t - pl->base_ns),
			     (s->flags & WP_SAMPLE_ON_CPU) ? "true" : "false");
		if (s->flags & WP_SAMPLE_SYSCALL) {
			/* Names are [a-z0-9_] (the generator checks): no escaping. */
			const char *name = wp_out_syscall_name(s->syscall);

			if (name)
				wp_jw_printf(w, ",\"syscall\":\"%s\"", name);
			else
				wp_jw_printf(w, ",\"syscall\":\"syscall_%u\"", s->syscall);
		}
		/* A stack cut at WALLPROF_MAX_DEPTH, or one whose unwinding
		 * stopped early: not the whole call chain. */
		if (s->flags & WP_SAMPLE_TRUNCATED)
			wp_jw_puts(w, ",\"truncated\":true");
		if (s->flags & WP_SAMPLE_PARTIAL)
			wp_jw_puts(w, ",\"partial\":true");
		wp_jw_put(w, "}", 1);
		first = 0;
	}
	wp_tick_iter_free(&it);
	if (got < 0)
		wp_jw_oom(w);
	return wp_jw_puts(w, "]");
}

static int write_threads(struct wp_jw *w, const struct wp_sentry_plan *pl)
{
	wp_jw_puts(w, ",\"thread_metadata\":{");
	for (size_t i = 0; i < pl->nr_tids && !w->failed; i++) {
		const struct wp_thread *t = thread_of(pl, pl->tids[i]);
		json_t *o = json_object();
		char name[17];

		if (t) {
			memcpy(name, t->name, 16);
			name[16] = '\0'; /* comm may fill all 16 bytes */
			if (name[0] && wp_jset(o, "name", wp_jstr(name))) {
				json_decref(o);
				o = NULL;
			}
		}
		wp_jw_printf(w, "%s\"%u\":", i ? "," : "", pl->tids[i]);
		wp_jw_json(w, o);
	}
	return wp_jw_puts(w, "}");
}

static json_t *image_json(const struct wp_module *m)
{
	json_t *o = json_object();
	char id[37], code_id[2 * WP_BUILD_ID_MAX + 1];
	uint32_t len = m->build_id_len < WP_BUILD_ID_MAX ? m->build_id_len : WP_BUILD_ID_MAX;
	int bad = 0;

	bad |= wp_jset(o, "type", json_string("symbolic"));
	bad |= wp_jset(o, "code_file", wp_jstr(m->path ? m->path : ""));
	if (len > 0) {
		wp_out_debug_id(m->build_id, len, __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, id);
		wp_sym_hex(m->build_id, len, code_id);
		code_id[2 * len] = 0;
		bad |= wp_jset(o, "debug_id", json_string(id));
		bad |= wp_jset(o, "code_id", json_string(code_id));
	}
	bad |= wp_jset(o, "image_addr", wp_jhex(m->start));
	bad |= wp_jset(o, "image_size", wp_jint(m->end > m->start ? m->end - m->start : 0));
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int write_images(struct wp_jw *w, const struct wp_sentry_plan *pl)
{
	const struct wp_profile *p = pl->p;
	int first = 1;

	wp_jw_puts(w, ",\"debug_meta\":{\"images\":[");
	for (size_t i = 0; i < p->nr_modules && !w->failed; i++) {
		if (!pl->mod_used[i])
			continue;
		if (!first)
			wp_jw_put(w, ",", 1);
		first = 0;
		wp_jw_json(w, image_json(&p->modules[i]));
	}
	return wp_jw_puts(w, "]}");
}


/* The whole profile into `w`; its stats into `st` (may be NULL). */
static int write_profile(struct wp_jw *w, struct wp_sentry_plan *pl, const struct wp_out_opts *opts,
			 struct wp_out_stats *st)
{
	/* Frames come first in "profile": symbolizing them decides the images. */
	wp_sentry_head(w, pl, opts);
	wp_jw_puts(w, ",\"profile\":{");
	write_frames(w, pl);
	write_stacks(w, pl);
	write_samples(w, pl);
	write_threads(w, pl);
	wp_jw_puts(w, "}");
	write_images(w, pl);
	/* Not in a chunk: Relay drops the wallprof section, which would only
	 * add to every upload (a thread entry per thread the process had). */
	if (pl->chunk)
		wp_jw_puts(w, "}\n");
	else
		wp_sentry_tail(w, pl);
	if (wp_jw_flush(w) < 0)
		return -1;
	if (st) {
		st->nr_samples = pl->nr_written;
		st->nr_threads = pl->nr_tids;
		st->nr_frames = pl->nr_frames;
		st->duration_s = pl->chunk ? (double)(pl->last_ns - pl->first_ns) / 1e9
					   : (double)pl->last_elapsed / 1e9;
		st->first_unix_ns = pl->nr_written ? wp_sentry_unix_ns(pl, pl->first_ns) : 0;
		st->last_unix_ns = pl->nr_written ? wp_sentry_unix_ns(pl, pl->last_ns) : 0;
	}
	return 0;
}

/* What a chunk must be (after plan_build). Returns 0, or -1 with `err` set. */
static int chunk_check(const struct wp_sentry_plan *pl, char *err, size_t errlen)
{
	double span = (double)(pl->last_ns - pl->first_ns) / 1e9;

	if (!pl->chunk)
		return 0;
	if (pl->nr_written == 0) {
		if (err && errlen)
			snprintf(err, errlen,
				 WP_OUT_TOO_FEW " (no thread has 2 samples with a stack)");
		return -1;
	}
	if (pl->last_ns - pl->first_ns > (uint64_t)WP_SENTRY_CHUNK_MAX_SECONDS * 1000000000) {
		if (err && errlen)
			snprintf(err, errlen,
				 "the samples span %.1f s, more than the %d s a Sentry chunk "
				 "may cover",
				 span, WP_SENTRY_CHUNK_MAX_SECONDS);
		return -1;
	}
	return 0;
}

/* Plans the write: options checked, the plan built and, for a chunk,
 * checked. Returns 0, or -1 with `err` set. */
static int plan_all(struct wp_sentry_plan *pl, const struct wp_out_opts *opts, const char *name,
		    char *err, size_t errlen)
{
	if (wp_sentry_opts_check(opts, err, errlen) < 0)
		return -1;
	pl->chunk = opts->chunk;
	if (plan_build(pl) < 0) {
		wp_jw_error(err, errlen, name, ENOMEM);
		return -1;
	}
	return chunk_check(pl, err, errlen);
}

int wp_out_sentry_write_with(const struct wp_profile *p, wp_out_lookup_fn lookup, void *ctx,
			     const struct wp_out_opts *opts, const char *path,
			     struct wp_out_stats *st, char *err, size_t errlen)
{
	static const struct wp_out_opts none;
	struct wp_sentry_plan pl = { .p = p, .lookup = lookup, .lctx = ctx };
	struct wp_jw *w;
	int ret = -1;

	if (!p || !path) {
		wp_jw_error(err, errlen, path ? path : "(null)", EINVAL);
		return -1;
	}
	if (!opts)
		opts = &none;
	w = calloc(1, sizeof(*w));
	if (!w) {
		wp_jw_error(err, errlen, path, ENOMEM);
		goto out;
	}
	if (plan_all(&pl, opts, path, err, errlen) < 0)
		goto out;
	w->err = err;
	w->errlen = errlen;
	if (wp_out_atomic_open(&w->a, path, err, errlen) < 0)
		goto out;
	if (write_profile(w, &pl, opts, st) < 0) {
		wp_out_atomic_abort(&w->a);
		goto out;
	}
	if (wp_out_atomic_commit(&w->a, err, errlen) < 0)
		goto out;
	if (st)
		st->bytes = w->a.bytes;
	ret = 0;
out:
	free(w);
	plan_free(&pl);
	return ret;
}

int wp_out_sentry_write_sink(const struct wp_profile *p, wp_out_lookup_fn lookup, void *ctx,
			     const struct wp_out_opts *opts, struct wp_out_sink *s,
			     struct wp_out_stats *st)
{
	static const struct wp_out_opts none;
	struct wp_sentry_plan pl = { .p = p, .lookup = lookup, .lctx = ctx };
	struct wp_jw *w = calloc(1, sizeof(*w));
	size_t before = s->bytes;
	int ret = -1;

	if (!opts)
		opts = &none;
	if (!w) {
		wp_jw_error(s->err, s->errlen, wp_sink_name(s), ENOMEM);
		s->failed = 1;
		goto out;
	}
	if (plan_all(&pl, opts, wp_sink_name(s), s->err, s->errlen) < 0) {
		s->failed = 1;
		goto out;
	}
	w->sink = s;
	w->a.path = wp_sink_name(s);
	w->err = s->err;
	w->errlen = s->errlen;
	ret = write_profile(w, &pl, opts, st);
	if (ret == 0 && st)
		st->bytes = s->bytes - before;
out:
	free(w);
	plan_free(&pl);
	return ret;
}

static int sym_lookup(void *ctx, uint64_t addr, struct wp_sym_result *out)
{
	return wp_sym_lookup(ctx, addr, out);
}

int wp_out_sentry_write(const struct wp_profile *p, struct wp_sym *sym,
			const struct wp_out_opts *opts, const char *path, struct wp_out_stats *st,
			char *err, size_t errlen)
{
	return wp_out_sentry_write_with(p, sym ? sym_lookup : NULL, sym, opts, path, st, err,
					errlen);
}
