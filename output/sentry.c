/* sentry: writes a raw profile as a Sentry sample-format v1 profile, or as
 * a v2 profile chunk (opts->chunk): the same frames, stacks, thread
 * metadata and images, another head and other samples. Streams the JSON to
 * the file element by element (jansson per frame or image, plain
 * formatting for samples and stacks) so 200k samples need no 100 MB tree. */
#include <errno.h>
#include <gnu/libc-version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "formats.h"
#include "jw.h"
#include "output.h"

#define NONE UINT32_MAX

/* What the raw profile becomes: which stacks, pcs and threads are written. */
struct plan {
	const struct wp_profile *p;
	wp_out_lookup_fn lookup;
	void *lctx;
	uint32_t *order;      /* sample indices by time, NULL when already sorted */
	size_t nr_written;    /* samples with a valid stack id */
	size_t nr_truncated;  /* ... of which WP_SAMPLE_TRUNCATED */
	uint32_t *stack_map;  /* raw stack id -> output stack id, or NONE */
	size_t nr_out_stacks;
	uint32_t *pc_first;   /* raw pc -> its first output frame, or NONE if unused */
	uint32_t *pc_count;   /* raw pc -> number of output frames (1 + inlined) */
	size_t nr_frames;
	uint8_t *mod_used;    /* module -> some written frame lies in it */
	uint32_t *tids;       /* distinct sampled tids, ascending */
	size_t nr_tids;
	uint32_t *thr_by_tid; /* p->threads indices sorted by tid (one entry per tid) */
	uint64_t base_ns;     /* monotonic time of elapsed 0 (the window start) */
	uint64_t last_elapsed;
	uint64_t first_ns;    /* monotonic time of the first and last written sample */
	uint64_t last_ns;
	int chunk;            /* v2: only the threads in busy are written */
	uint32_t *busy;       /* tids with >= 2 samples with a non-empty stack, ascending */
	size_t nr_busy;
};


static const struct wp_sample *sample_at(const struct plan *pl, size_t i)
{
	return &pl->p->samples[pl->order ? pl->order[i] : i];
}

static int cmp_sample_idx(const void *a, const void *b, void *arg)
{
	const struct wp_sample *s = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (s[x].t_ns != s[y].t_ns)
		return s[x].t_ns < s[y].t_ns ? -1 : 1;
	return x < y ? -1 : x > y;
}

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

static int tid_busy(const struct plan *pl, uint32_t tid)
{
	return bsearch(&tid, pl->busy, pl->nr_busy, sizeof(uint32_t), cmp_u32) != NULL;
}

/* Whether sample `s` is written: a valid stack, and in a chunk a thread
 * Relay keeps (v2 drops every thread with fewer than 2 non-idle samples). */
static int sample_kept(const struct plan *pl, const struct wp_sample *s)
{
	return stack_valid(pl->p, s->stack_id) && (!pl->chunk || tid_busy(pl, s->tid));
}

/* The chunk's threads: pl->busy. Returns 0 or -1 on out of memory. */
static int busy_threads(struct plan *pl)
{
	const struct wp_profile *p = pl->p;
	size_t n = 0, i, j;

	pl->busy = malloc((p->nr_samples + 1) * sizeof(uint32_t));
	if (!pl->busy)
		return -1;
	for (i = 0; i < p->nr_samples; i++)
		if (stack_busy(p, p->samples[i].stack_id))
			pl->busy[n++] = p->samples[i].tid;
	qsort(pl->busy, n, sizeof(uint32_t), cmp_u32);
	for (i = 0; i < n; i = j) {
		for (j = i + 1; j < n && pl->busy[j] == pl->busy[i]; j++)
			;
		if (j - i >= 2)
			pl->busy[pl->nr_busy++] = pl->busy[i];
	}
	return 0;
}

static void plan_free(struct plan *pl)
{
	free(pl->order);
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
static int plan_build(struct plan *pl)
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

	/* profile.h promises time order; do not let a violation reach Relay,
	 * which only checks the last sample against the 30 s limit. */
	for (i = 1; i < n; i++)
		if (p->samples[i].t_ns < p->samples[i - 1].t_ns)
			break;
	if (n > 1 && i < n) {
		pl->order = malloc(n * sizeof(uint32_t));
		if (!pl->order)
			return -1;
		for (i = 0; i < n; i++)
			pl->order[i] = (uint32_t)i;
		qsort_r(pl->order, n, sizeof(uint32_t), cmp_sample_idx, p->samples);
	}

	pl->base_ns = p->start_ns;
	for (i = 0; i < n; i++) {
		const struct wp_sample *s = sample_at(pl, i);

		if (!sample_kept(pl, s))
			continue;
		if (pl->nr_written == 0 && s->t_ns < pl->base_ns)
			pl->base_ns = s->t_ns; /* never a negative elapsed time */
		if (pl->nr_written == 0)
			pl->first_ns = s->t_ns;
		pl->last_ns = s->t_ns;
		pl->stack_map[s->stack_id] = 0;
		pl->tids[pl->nr_written++] = s->tid;
		pl->nr_truncated += !!(s->flags & WP_SAMPLE_TRUNCATED);
		pl->last_elapsed = s->t_ns - pl->base_ns;
	}

	/* Output stack ids in raw order; only their pcs get symbolized. */
	for (i = 0; i < p->nr_stacks; i++) {
		if (pl->stack_map[i] == NONE)
			continue;
		pl->stack_map[i] = (uint32_t)pl->nr_out_stacks++;
		for (uint32_t k = p->stack_off[i]; k < p->stack_off[i + 1]; k++)
			if (p->stack_frames[k] < p->nr_pcs)
				pl->pc_first[p->stack_frames[k]] = 0;
	}

	qsort(pl->tids, pl->nr_written, sizeof(uint32_t), cmp_u32);
	for (i = 0; i < pl->nr_written; i++)
		if (pl->nr_tids == 0 || pl->tids[pl->nr_tids - 1] != pl->tids[i])
			pl->tids[pl->nr_tids++] = pl->tids[i];

	for (i = 0; i < p->nr_threads; i++)
		pl->thr_by_tid[i] = (uint32_t)i;
	qsort_r(pl->thr_by_tid, p->nr_threads, sizeof(uint32_t), cmp_thread_idx, p->threads);
	return 0;
}

/* The wp_thread entry for `tid` (profile.h: one per tid), or NULL. */
static const struct wp_thread *thread_of(const struct plan *pl, uint32_t tid)
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
static int write_frames(struct wp_jw *w, struct plan *pl)
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

static int write_stacks(struct wp_jw *w, const struct plan *pl)
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

/* CLOCK_REALTIME of monotonic time `t_ns`, never negative. */
static int64_t unix_ns(const struct plan *pl, uint64_t t_ns)
{
	int64_t t = (int64_t)t_ns + pl->p->realtime_offset_ns;

	return t < 0 ? 0 : t;
}

static int write_samples(struct wp_jw *w, const struct plan *pl)
{
	const struct wp_profile *p = pl->p;
	int first = 1;

	wp_jw_puts(w, ",\"samples\":[");
	for (size_t i = 0; i < p->nr_samples && !w->failed; i++) {
		const struct wp_sample *s = sample_at(pl, i);

		if (!sample_kept(pl, s))
			continue;
		if (pl->chunk) {
			/* v2: Unix seconds as a JSON number, thread id a string;
			 * nothing Relay would drop (on_cpu, syscall) */
			int64_t t = unix_ns(pl, s->t_ns);

			wp_jw_printf(
				w,
				"%s{\"stack_id\":%u,\"thread_id\":\"%u\",\"timestamp\":%lld.%06lld}",
				first ? "" : ",", pl->stack_map[s->stack_id], s->tid,
				(long long)(t / 1000000000), (long long)(t % 1000000000 / 1000));
			first = 0;
			continue;
		}
		wp_jw_printf(w,
			     "%s{\"stack_id\":%u,\"thread_id\":\"%u\","
			     "\"elapsed_since_start_ns\":\"%llu\",\"on_cpu\":%s",
			     first ? "" : ",", pl->stack_map[s->stack_id], s->tid,
			     (unsigned long long)(s->t_ns - pl->base_ns),
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
	return wp_jw_puts(w, "]");
}

static int write_threads(struct wp_jw *w, const struct plan *pl)
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
		for (uint32_t i = 0; i < len; i++)
			snprintf(code_id + 2 * i, 3, "%02x", m->build_id[i]);
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

static int write_images(struct wp_jw *w, const struct plan *pl)
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


/* The id `given`, or a random one (`nbytes` bytes; uuid: a v4 UUID). */
static json_t *jid(const char *given, size_t nbytes, int uuid)
{
	return given ? json_string(given) : wp_jrandom_hex(nbytes, uuid);
}

/* `"key":{"name":...,"version":...}` for a name and version of ours. */
static int write_sdk(struct wp_jw *w, const char *key)
{
	json_t *o = json_object();
	int bad = wp_jset(o, "name", json_string("libwallprof"));

	bad |= wp_jset(o, "version", json_string(WP_VERSION));
	wp_jw_member(w, key, bad ? NULL : o, 0);
	if (bad)
		json_decref(o);
	return w->failed ? -1 : 0;
}

/* platform, and release and environment when set. */
static void write_where(struct wp_jw *w, const struct wp_out_opts *opts)
{
	wp_jw_member(w, "platform", wp_jstr(opts->platform ? opts->platform : "native"), 0);
	if (opts->release)
		wp_jw_member(w, "release", wp_jstr(opts->release), 0);
	if (opts->environment)
		wp_jw_member(w, "environment", wp_jstr(opts->environment), 0);
}

/* A v2 chunk's head: no device, os, runtime or transaction (v2 has none). */
static int write_head_chunk(struct wp_jw *w, const struct wp_out_opts *opts)
{
	wp_jw_put(w, "{", 1);
	wp_jw_member(w, "version", json_string("2"), 1);
	wp_jw_member(w, "chunk_id", jid(opts->chunk_id, 16, 1), 0);
	wp_jw_member(w, "profiler_id", jid(opts->profiler_id, 16, 1), 0);
	write_where(w, opts);
	return write_sdk(w, "client_sdk");
}

static int write_head(struct wp_jw *w, const struct plan *pl, const struct wp_out_opts *opts)
{
	const struct wp_profile *p = pl->p;
	struct utsname u;
	json_t *o;
	int bad = 0;
	char *name;

	if (uname(&u) < 0)
		memset(&u, 0, sizeof(u));
	wp_jw_put(w, "{", 1);
	wp_jw_member(w, "version", json_string("1"), 1);
	wp_jw_member(w, "event_id", wp_jrandom_hex(16, 1), 0);
	write_where(w, opts);
	wp_jw_member(w, "timestamp", wp_jtimestamp(unix_ns(pl, pl->base_ns)), 0);

	o = json_object();
	bad = wp_jset(o, "architecture", wp_jstr(u.machine));
	wp_jw_member(w, "device", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);

	o = json_object();
	bad = wp_jset(o, "name", json_string("Linux"));
	bad |= wp_jset(o, "version", wp_jstr(u.release));
	bad |= wp_jset(o, "build_number", wp_jstr(u.version));
	wp_jw_member(w, "os", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);

	o = json_object();
	bad = wp_jset(o, "name", json_string("glibc"));
	bad |= wp_jset(o, "version", wp_jstr(gnu_get_libc_version()));
	wp_jw_member(w, "runtime", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);

	write_sdk(w, "client_sdk");

	name = wp_out_sentry_txn_name(p, opts->no_args);
	o = json_object();
	bad = !name;
	bad |= wp_jset(o, "id", jid(opts->transaction_id, 16, 1));
	bad |= wp_jset(o, "name", wp_jstr(name));
	bad |= wp_jset(o, "trace_id", jid(opts->trace_id, 16, 1));
	bad |= wp_jset(o, "segment_id", jid(opts->segment_id, 8, 0));
	bad |= wp_jset(o, "active_thread_id", json_integer(p->main_tid ? p->main_tid : p->pid));
	bad |= wp_jset(o, "relative_start_ns", json_string("0"));
	bad |= wp_jset(o, "relative_end_ns", wp_jdec(pl->last_elapsed));
	free(name);
	wp_jw_member(w, "transaction", bad ? NULL : o, 0);
	if (bad)
		json_decref(o);
	return w->failed ? -1 : 0;
}

char *wp_out_sentry_txn_name(const struct wp_profile *p, int no_args)
{
	const char *c = p->cmdline ? p->cmdline : "";
	size_t n = no_args ? strcspn(c, " ") : strlen(c);
	char *name = malloc(n + 24);

	if (!name)
		return NULL;
	if (n == 0)
		snprintf(name, n + 24, "process %u", p->pid);
	else {
		memcpy(name, c, n);
		name[n] = 0;
	}
	return name;
}

/* The "threads" member of the wallprof section: every thread the sampler
 * tracked, with or without samples in the window, keyed by tid, in tid
 * order. One entry per tid (profile.h: a reused tid's entries were merged
 * by the raw reader, and only there). Streamed, one object each. */
static int write_thread_stats(struct wp_jw *w, const struct plan *pl)
{
	const struct wp_profile *p = pl->p;

	wp_jw_puts(w, ",\"threads\":{");
	for (size_t i = 0; i < p->nr_threads && !w->failed; i++) {
		const struct wp_thread *t = &p->threads[pl->thr_by_tid[i]];
		json_t *o;
		char name[17];
		int bad;

		memcpy(name, t->name, 16);
		name[16] = '\0'; /* comm may fill all 16 bytes */
		o = json_object();
		bad = wp_jset(o, "name", wp_jstr(name));
		bad |= wp_jset(o, "signals", wp_jint(t->nr_signals));
		bad |= wp_jset(o, "samples", wp_jint(t->nr_samples));
		if (bad) {
			json_decref(o);
			o = NULL;
		}
		wp_jw_printf(w, "%s\"%u\":", i ? "," : "", t->tid);
		wp_jw_json(w, o);
	}
	return wp_jw_puts(w, "}");
}

static int write_tail(struct wp_jw *w, const struct plan *pl)
{
	const struct wp_profile *p = pl->p;
	const struct wp_counters *c = &p->counters;
	/* The counters, named after their fields without "nr_". nr_samples would
	 * clash with "samples" (written ones), hence "samples_recorded". */
	const struct {
		const char *key;
		uint64_t v;
	} counters[] = {
		{ "ticks", c->nr_ticks },
		{ "ticks_late", c->nr_ticks_late },
		{ "signals", c->nr_signals },
		{ "samples_recorded", c->nr_samples },
		{ "pending", c->nr_pending },
		{ "send_failed", c->nr_send_failed },
		{ "unwind_failed", c->nr_unwind_failed },
		{ "truncated", c->nr_truncated },
		{ "dropped_full", c->nr_dropped_full },
		{ "overwritten", c->nr_overwritten },
		{ "threads_untracked", c->nr_threads_untracked },
		{ "signals_blocked", c->nr_signals_blocked },
		{ "eintr_retried", c->nr_eintr_retried },
		{ "from_wrapper", c->nr_from_wrapper },
		{ "reused", c->nr_reused },
		{ "dl_guarded", c->nr_dl_guarded },
		{ "site_replayed", c->nr_site_replayed },
		{ "site_direct", c->nr_site_direct },
		{ "site_mismatch", c->nr_site_mismatch },
		{ "from_proc", c->nr_from_proc },
	};

	/* Streamed member by member: "threads" can have tens of thousands. */
	wp_jw_puts(w, ",\"wallprof\":{");
	wp_jw_member(w, "version", json_string(WP_VERSION), 1);
	wp_jw_member(w, "pid", wp_jint(p->pid), 0);
	wp_jw_member(w, "hz", wp_jint(p->hz), 0);
	wp_jw_member(w, "ring_seconds", wp_jint(p->ring_seconds), 0);
	wp_jw_member(w, "max_depth", wp_jint(p->max_depth), 0);
	if (p->ring_bytes) {
		wp_jw_member(w, "ring_bytes", wp_jint(p->ring_bytes), 0);
		wp_jw_member(w, "ring_samples", wp_jint(p->ring_samples), 0);
	}
	wp_jw_member(w, "snapshot", json_integer(p->snapshot), 0);
	wp_jw_member(w, "duration_ns",
		     wp_jint(p->end_ns > pl->base_ns ? p->end_ns - pl->base_ns : pl->last_elapsed),
		     0);
	wp_jw_member(w, "samples", wp_jint(pl->nr_written), 0);
	wp_jw_member(w, "truncated_samples", wp_jint(pl->nr_truncated), 0);
	for (size_t i = 0; i < sizeof(counters) / sizeof(counters[0]); i++)
		wp_jw_member(w, counters[i].key, wp_jint(counters[i].v), 0);
	write_thread_stats(w, pl);
	wp_jw_put(w, "}", 1);
	return wp_jw_put(w, "}\n", 2);
}

/* The whole profile into `w`; its stats into `st` (may be NULL). */
static int write_profile(struct wp_jw *w, struct plan *pl, const struct wp_out_opts *opts,
			 struct wp_out_stats *st)
{
	/* Frames come first in "profile": symbolizing them decides the images. */
	if (pl->chunk)
		write_head_chunk(w, opts);
	else
		write_head(w, pl, opts);
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
		write_tail(w, pl);
	if (wp_jw_flush(w) < 0)
		return -1;
	if (st) {
		st->nr_samples = pl->nr_written;
		st->nr_threads = pl->nr_tids;
		st->nr_frames = pl->nr_frames;
		st->duration_s = pl->chunk ? (double)(pl->last_ns - pl->first_ns) / 1e9
					   : (double)pl->last_elapsed / 1e9;
		st->first_unix_ns = pl->nr_written ? unix_ns(pl, pl->first_ns) : 0;
		st->last_unix_ns = pl->nr_written ? unix_ns(pl, pl->last_ns) : 0;
	}
	return 0;
}

/* Whether `id` is `n` lowercase hex digits, not all zero (NULL: not given). */
static int id_ok(const char *id, size_t n)
{
	int nonzero = 0;

	if (!id)
		return 1;
	for (size_t i = 0; i < n; i++) {
		if (!((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f')))
			return 0;
		nonzero |= id[i] != '0';
	}
	return nonzero && id[n] == 0;
}

/* The options' ids. Returns 0, or -1 with `err` set. */
static int opts_check(const struct wp_out_opts *o, char *err, size_t errlen)
{
	const struct {
		const char *name, *id;
		size_t n;
	} ids[] = {
		{ "profiler_id", o->profiler_id, 32 },       { "chunk_id", o->chunk_id, 32 },
		{ "transaction id", o->transaction_id, 32 }, { "trace id", o->trace_id, 32 },
		{ "segment id", o->segment_id, 16 },
	};

	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		if (!id_ok(ids[i].id, ids[i].n)) {
			if (err && errlen)
				snprintf(err, errlen,
					 "invalid Sentry %s: expected %zu lowercase hex digits, "
					 "not all zero",
					 ids[i].name, ids[i].n);
			return -1;
		}
	return 0;
}

/* What a chunk must be (after plan_build). Returns 0, or -1 with `err` set. */
static int chunk_check(const struct plan *pl, char *err, size_t errlen)
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
static int plan_all(struct plan *pl, const struct wp_out_opts *opts, const char *name, char *err,
		    size_t errlen)
{
	if (opts_check(opts, err, errlen) < 0)
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
	struct plan pl = { .p = p, .lookup = lookup, .lctx = ctx };
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
	struct plan pl = { .p = p, .lookup = lookup, .lctx = ctx };
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
