/* html_data: the flame graph's data (html_data.h): a string pool, source
 * frames, the stacks as a trie and every thread's samples as runs. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "html_data.h"
#include "html_json.h"
#include "output.h"

#define NONE UINT32_MAX

/* ---- hash tables: open addressing over uint32_t ids ---------------------- */

static uint64_t mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb3f94d6d2f53ULL;
	h ^= h >> 33;
	return h;
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	while (*s)
		h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
	return mix(h);
}

/* A growable array of ids and an index into it by hash. */
struct table {
	uint32_t *slots; /* id + 1, 0 empty */
	size_t cap;      /* power of two */
	size_t nr;
};

/* Makes room for one more; returns -1 on out of memory. `rehash(ctx, id)`
 * gives the hash of an existing id. */
static int table_grow(struct table *t, uint64_t (*rehash)(const void *, uint32_t), const void *ctx)
{
	size_t cap, i;
	uint32_t *slots;

	if ((t->nr + 1) * 4 < t->cap * 3)
		return 0;
	cap = t->cap ? t->cap * 2 : 1024;
	slots = calloc(cap, sizeof(*slots));
	if (!slots)
		return -1;
	for (i = 0; i < t->cap; i++) {
		uint32_t id = t->slots[i];
		size_t j;

		if (!id)
			continue;
		for (j = rehash(ctx, id - 1) & (cap - 1); slots[j]; j = (j + 1) & (cap - 1))
			;
		slots[j] = id;
	}
	free(t->slots);
	t->slots = slots;
	t->cap = cap;
	return 0;
}

/* ---- the encoder's state -------------------------------------------------- */

struct frame {
	uint32_t name, file, mod; /* string ids */
	int32_t line;
	uint32_t kind;
};

struct node {
	uint32_t parent, frame;
};

struct enc {
	const struct wp_model *m;
	/* strings */
	char **strs;
	size_t nr_strs, cap_strs;
	struct table str_ix;
	/* frames */
	struct frame *frames;
	size_t nr_frames, cap_frames;
	struct table frame_ix;
	size_t *loc_off;     /* model location -> its frames' ids in loc_ids */
	uint32_t *loc_ids;   /* NONE until the location is first used */
	/* trie */
	struct node *nodes;
	size_t nr_nodes, cap_nodes;
	struct table node_ix;
	uint32_t *stack_node; /* stack id -> its leaf node (NONE: not yet) */
	/* system calls used, by number */
	uint32_t sys_ix[1024]; /* number -> index + 1 */
	unsigned sys_nr[1024];
	size_t nr_sys;
	int oom;
};

static int grow(void **arr, size_t *cap, size_t need, size_t size)
{
	size_t c;
	void *p;

	if (need <= *cap)
		return 0;
	c = *cap ? *cap * 2 : 256;
	while (c < need)
		c *= 2;
	p = realloc(*arr, c * size);
	if (!p)
		return -1;
	*arr = p;
	*cap = c;
	return 0;
}

static uint64_t str_rehash(const void *ctx, uint32_t id)
{
	const struct enc *e = ctx;

	return hash_str(e->strs[id]);
}

/* The id of string `s` (copied), interned. */
static uint32_t intern(struct enc *e, const char *s)
{
	uint64_t h;
	size_t j;
	char *copy;

	if (e->oom)
		return 0;
	if (table_grow(&e->str_ix, str_rehash, e) < 0)
		goto oom;
	h = hash_str(s);
	for (j = h & (e->str_ix.cap - 1); e->str_ix.slots[j]; j = (j + 1) & (e->str_ix.cap - 1))
		if (!strcmp(e->strs[e->str_ix.slots[j] - 1], s))
			return e->str_ix.slots[j] - 1;
	if (grow((void **)&e->strs, &e->cap_strs, e->nr_strs + 1, sizeof(*e->strs)) < 0)
		goto oom;
	copy = strdup(s);
	if (!copy)
		goto oom;
	e->strs[e->nr_strs] = copy;
	e->str_ix.slots[j] = (uint32_t)++e->nr_strs;
	e->str_ix.nr++;
	return (uint32_t)(e->nr_strs - 1);
oom:
	e->oom = 1;
	return 0;
}

static uint64_t frame_hash(const struct frame *f)
{
	return mix(((uint64_t)f->name << 32 | f->file) ^
		   mix((uint64_t)f->mod << 40 ^ (uint32_t)f->line << 3 ^ f->kind));
}

static uint64_t frame_rehash(const void *ctx, uint32_t id)
{
	const struct enc *e = ctx;

	return frame_hash(&e->frames[id]);
}

static uint32_t frame_id(struct enc *e, const struct frame *f)
{
	size_t j;

	if (e->oom)
		return 0;
	if (table_grow(&e->frame_ix, frame_rehash, e) < 0)
		goto oom;
	for (j = frame_hash(f) & (e->frame_ix.cap - 1); e->frame_ix.slots[j];
	     j = (j + 1) & (e->frame_ix.cap - 1))
		if (!memcmp(&e->frames[e->frame_ix.slots[j] - 1], f, sizeof(*f)))
			return e->frame_ix.slots[j] - 1;
	if (grow((void **)&e->frames, &e->cap_frames, e->nr_frames + 1, sizeof(*e->frames)) < 0)
		goto oom;
	e->frames[e->nr_frames] = *f;
	e->frame_ix.slots[j] = (uint32_t)++e->nr_frames;
	e->frame_ix.nr++;
	return (uint32_t)(e->nr_frames - 1);
oom:
	e->oom = 1;
	return 0;
}

static uint64_t node_hash(uint32_t parent, uint32_t frame)
{
	return mix((uint64_t)parent << 32 | frame);
}

static uint64_t node_rehash(const void *ctx, uint32_t id)
{
	const struct enc *e = ctx;

	return node_hash(e->nodes[id].parent, e->nodes[id].frame);
}

/* The child of node `parent` for `frame`, made when new. */
static uint32_t child(struct enc *e, uint32_t parent, uint32_t frame)
{
	size_t j;

	if (e->oom)
		return 0;
	if (table_grow(&e->node_ix, node_rehash, e) < 0)
		goto oom;
	for (j = node_hash(parent, frame) & (e->node_ix.cap - 1); e->node_ix.slots[j];
	     j = (j + 1) & (e->node_ix.cap - 1)) {
		const struct node *n = &e->nodes[e->node_ix.slots[j] - 1];

		if (n->parent == parent && n->frame == frame)
			return e->node_ix.slots[j] - 1;
	}
	if (grow((void **)&e->nodes, &e->cap_nodes, e->nr_nodes + 1, sizeof(*e->nodes)) < 0)
		goto oom;
	e->nodes[e->nr_nodes].parent = parent;
	e->nodes[e->nr_nodes].frame = frame;
	e->node_ix.slots[j] = (uint32_t)++e->nr_nodes;
	e->node_ix.nr++;
	return (uint32_t)(e->nr_nodes - 1);
oom:
	e->oom = 1;
	return 0;
}

/* The frame ids of location `li`, inlined callees first: loc_ids from
 * loc_off[li] (made when first used). */
static const uint32_t *loc_frames(struct enc *e, size_t li)
{
	const struct wp_model *m = e->m;
	const struct wp_model_loc *loc = &m->locs[li];
	const struct wp_module *mod = NULL;
	uint32_t *ids = e->loc_ids + e->loc_off[li];
	uint32_t i;
	char buf[64];

	if (ids[0] != NONE)
		return ids;
	if (loc->module >= 0 && (size_t)loc->module < m->p.nr_modules)
		mod = &m->p.modules[loc->module];
	for (i = 0; i < loc->nr; i++) {
		const struct wp_sym_frame *sf = NULL;
		struct frame f = { 0 };

		if ((size_t)loc->first + i < m->nr_frames)
			sf = &m->frames[loc->first + i];
		f.name = intern(e, wp_model_frame_label(m, loc, sf, buf, sizeof(buf)));
		if (!(sf && sf->function && *sf->function))
			f.kind |= WP_HTML_FRAME_UNKNOWN;
		f.file = sf && sf->file ? intern(e, sf->file) : 0;
		f.line = sf ? sf->line : 0;
		f.mod = mod && mod->path ? intern(e, mod->path) : 0;
		if (sf && sf->inlined)
			f.kind |= WP_HTML_FRAME_INLINED;
		if (mod && (mod->flags & WP_MOD_MAIN))
			f.kind |= WP_HTML_FRAME_APP;
		ids[i] = frame_id(e, &f);
	}
	return ids;
}

/* The leaf node of stack `sid` (frame-table indices leaf first). */
static uint32_t stack_leaf(struct enc *e, uint32_t sid)
{
	const struct wp_profile *p = &e->m->p;
	uint32_t node = 0, k;

	if (e->stack_node[sid] != NONE)
		return e->stack_node[sid];
	for (k = p->stack_off[sid + 1]; k > p->stack_off[sid] && !e->oom; k--) {
		uint32_t li = p->stack_frames[k - 1], i;
		const uint32_t *ids;

		if (li >= p->nr_pcs || !e->m->locs[li].nr)
			continue;
		ids = loc_frames(e, li);
		/* Outermost (the real function, last) first. */
		for (i = e->m->locs[li].nr; i > 0 && !e->oom; i--)
			node = child(e, node, ids[i - 1]);
	}
	e->stack_node[sid] = node;
	return node;
}

static int hw_fail(struct wp_hw *w, struct enc *e)
{
	if (e->oom && w->s->err && w->s->errlen && !w->s->failed)
		snprintf(w->s->err, w->s->errlen, "out of memory writing the HTML flame graph");
	if (e->oom)
		w->s->failed = 1;
	return -1;
}
/* ---- the samples as runs -------------------------------------------------- */

struct samp {
	uint32_t tid, idx; /* sorted by tid, then index (= time) */
};

static int samp_cmp(const void *a, const void *b)
{
	const struct samp *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

struct run {
	uint32_t thread; /* ordinal of its thread in the output */
	uint32_t node, state;
	uint64_t first, count;
};

/* The state of sample `s` (html_data.h), registering its system call. */
static uint32_t sample_state(struct enc *e, const struct wp_sample *s)
{
	if (s->flags & WP_SAMPLE_ON_CPU)
		return 0;
	if (!(s->flags & WP_SAMPLE_SYSCALL) || s->syscall >= 1024)
		return 1;
	if (!e->sys_ix[s->syscall]) {
		e->sys_nr[e->nr_sys] = s->syscall;
		e->sys_ix[s->syscall] = (uint32_t)++e->nr_sys;
	}
	return 1 + e->sys_ix[s->syscall];
}

static void enc_free(struct enc *e)
{
	size_t i;

	for (i = 0; i < e->nr_strs; i++)
		free(e->strs[i]);
	free(e->strs);
	free(e->str_ix.slots);
	free(e->frames);
	free(e->frame_ix.slots);
	free(e->loc_off);
	free(e->loc_ids);
	free(e->nodes);
	free(e->node_ix.slots);
	free(e->stack_node);
}

static int enc_init(struct enc *e, const struct wp_model *m)
{
	const struct wp_profile *p = &m->p;
	size_t i, total = 0;

	memset(e, 0, sizeof(*e));
	e->m = m;
	e->loc_off = malloc((p->nr_pcs + 1) * sizeof(*e->loc_off));
	e->stack_node = malloc((p->nr_stacks + 1) * sizeof(*e->stack_node));
	if (!e->loc_off || !e->stack_node)
		return -1;
	for (i = 0; i < p->nr_pcs; i++) {
		e->loc_off[i] = total;
		total += m->locs[i].nr ? m->locs[i].nr : 1;
	}
	e->loc_ids = malloc((total + 1) * sizeof(*e->loc_ids));
	if (!e->loc_ids)
		return -1;
	memset(e->loc_ids, 0xff, (total + 1) * sizeof(*e->loc_ids));
	memset(e->stack_node, 0xff, (p->nr_stacks + 1) * sizeof(*e->stack_node));
	intern(e, ""); /* string 0: none */
	if (grow((void **)&e->nodes, &e->cap_nodes, 1, sizeof(*e->nodes)) < 0)
		return -1;
	e->nodes[0].parent = NONE; /* the root */
	e->nodes[0].frame = NONE;
	e->nr_nodes = 1;
	return e->oom ? -1 : 0;
}

static void write_head(struct wp_hw *w, const struct wp_model *m, uint64_t t0, uint64_t period,
		       uint64_t ticks)
{
	const struct wp_profile *p = &m->p;
	const struct wp_counters *c = &p->counters;

	wp_hw_str(w, "{\"format\":\"wallprof-html\",\"version\":1,\"title\":");
	wp_hw_json_str(w, p->cmdline ? p->cmdline : "");
	wp_hw_str(w, ",\"pid\":");
	wp_hw_u64(w, p->pid);
	wp_hw_str(w, ",\"hz\":");
	wp_hw_u64(w, p->hz ? p->hz : 101);
	wp_hw_str(w, ",\"period_ns\":");
	wp_hw_u64(w, period);
	wp_hw_str(w, ",\"ticks\":");
	wp_hw_u64(w, ticks);
	wp_hw_str(w, ",\"start_unix_ms\":");
	wp_hw_i64(w, ((int64_t)t0 + p->realtime_offset_ns) / 1000000);
	wp_hw_str(w, ",\"snapshot\":");
	wp_hw_i64(w, p->snapshot);
	wp_hw_str(w, ",\"lost\":{");
	for (size_t i = 0, k = 0; i < wp_nr_counter_keys; i++) {
		if (!(wp_counter_keys[i].kind & WP_CTR_LOSS))
			continue;
		wp_hw_str(w, k++ ? ",\"" : "\"");
		wp_hw_str(w, wp_counter_keys[i].key);
		wp_hw_str(w, "\":");
		wp_hw_u64(w, wp_counter_at(c, i));
	}
	wp_hw_str(w, "}");
}

static void write_tables(struct wp_hw *w, struct enc *e)
{
	size_t i;
	char b[32];

	wp_hw_str(w, ",\"strings\":[");
	for (i = 0; i < e->nr_strs; i++) {
		if (i)
			wp_hw_put(w, ",", 1);
		wp_hw_json_str(w, e->strs[i]);
	}
	wp_hw_str(w, "],\"frames\":[");
	for (i = 0; i < e->nr_frames; i++) {
		const struct frame *f = &e->frames[i];
		int n = snprintf(b, sizeof(b), "%s%u,%u,%d,%u,%u", i ? "," : "", f->name, f->file,
				 f->line > 0 ? f->line : 0, f->mod, f->kind);

		wp_hw_put(w, b, (size_t)n);
	}
	wp_hw_str(w, "],\"nodes\":\"");
	for (i = 1; i < e->nr_nodes; i++) {
		wp_hw_pack(w, i - e->nodes[i].parent);
		wp_hw_pack(w, e->nodes[i].frame);
	}
	wp_hw_str(w, "\",\"syscalls\":[");
	for (i = 0; i < e->nr_sys; i++) {
		const char *name = wp_out_syscall_name(e->sys_nr[i]);

		if (i)
			wp_hw_put(w, ",", 1);
		if (name) {
			wp_hw_json_str(w, name);
		} else {
			snprintf(b, sizeof(b), "syscall_%u", e->sys_nr[i]);
			wp_hw_json_str(w, b);
		}
	}
	wp_hw_str(w, "]");
}


int wp_html_data(const struct wp_model *m, struct wp_out_sink *s, struct wp_html_data_stats *st)
{
	const struct wp_profile *p = &m->p;
	struct enc *e = calloc(1, sizeof(*e));
	struct wp_hw *w = malloc(sizeof(*w));
	struct samp *ord = NULL;
	struct run *runs = NULL;
	size_t i, n = 0, nr_runs = 0, nr_threads = 0;
	uint64_t t0 = p->start_ns, tmax = 0, period, nr_ticks = 0;
	int rc = -1;

	memset(st, 0, sizeof(*st));
	if (!w) {
		free(e);
		return -1;
	}
	w->s = s;
	w->failed = 0;
	w->len = 0;
	if (!e || enc_init(e, m) < 0) {
		if (e)
			e->oom = 1;
		goto out;
	}
	period = wp_model_period_ns(m);
	ord = malloc((p->nr_samples + 1) * sizeof(*ord));
	runs = malloc((p->nr_samples + 1) * sizeof(*runs));
	if (!ord || !runs) {
		e->oom = 1;
		goto out;
	}
	for (i = 0; i < p->nr_samples; i++) {
		if (p->samples[i].stack_id >= p->nr_stacks || p->samples[i].n == 0)
			continue;
		ord[n].tid = p->samples[i].tid;
		ord[n++].idx = (uint32_t)i;
		nr_ticks += p->samples[i].n;
		if (p->samples[i].t_ns < t0)
			t0 = p->samples[i].t_ns;
		if (wp_sample_last(p, &p->samples[i]) > tmax)
			tmax = wp_sample_last(p, &p->samples[i]);
	}
	qsort(ord, n, sizeof(*ord), samp_cmp);

	/* Runs, thread by thread; a thread starts with first = its first tick. */
	for (i = 0; i < n && !e->oom; i++) {
		const struct wp_sample *sm = &p->samples[ord[i].idx];
		uint32_t node = stack_leaf(e, sm->stack_id), state = sample_state(e, sm);
		uint64_t tick = (sm->t_ns - t0 + period / 2) / period;
		struct run *r = nr_runs ? &runs[nr_runs - 1] : NULL;
		int same_thread = i && ord[i - 1].tid == ord[i].tid;

		if (!same_thread)
			nr_threads++;
		if (same_thread && r->node == node && r->state == state &&
		    tick <= r->first + r->count) {
			r->count += sm->n;
			continue;
		}
		if (same_thread && tick < r->first + r->count)
			tick = r->first + r->count; /* two samples in one tick: keep order */
		runs[nr_runs].thread = (uint32_t)(nr_threads - 1);
		runs[nr_runs].node = node;
		runs[nr_runs].state = state;
		runs[nr_runs].first = tick;
		runs[nr_runs++].count = sm->n;
	}
	if (e->oom)
		goto out;

	write_head(w, m, t0, period, n ? (tmax - t0 + period / 2) / period + 1 : 0);
	write_tables(w, e);
	wp_hw_str(w, ",\"threads\":[");
	{
		size_t t = 0;
		uint64_t ticks = 0;

		for (i = 1; i <= n; i++) {
			const struct wp_thread *th;

			ticks += p->samples[ord[i - 1].idx].n;
			if (i < n && ord[i].tid == ord[i - 1].tid)
				continue;
			th = wp_model_thread(m, ord[i - 1].tid);
			wp_hw_str(w, t++ ? ",[" : "[");
			wp_hw_u64(w, ord[i - 1].tid);
			wp_hw_put(w, ",", 1);
			wp_hw_json_str(w, th ? th->name : "");
			wp_hw_put(w, ",", 1);
			wp_hw_u64(w, ticks);
			wp_hw_put(w, "]", 1);
			ticks = 0;
		}
	}
	wp_hw_str(w, "],\"runs\":[");
	{
		uint64_t end = 0;

		for (i = 0; i < nr_runs; i++) {
			const struct run *r = &runs[i];

			if (i == 0 || r->thread != runs[i - 1].thread) {
				wp_hw_str(w, i ? "\",\"" : "\"");
				end = 0;
			}
			wp_hw_pack(w, r->node);
			wp_hw_pack(w, r->state);
			wp_hw_pack(w, r->first - end);
			wp_hw_pack(w, r->count);
			end = r->first + r->count;
		}
		if (nr_runs)
			wp_hw_str(w, "\"");
	}
	wp_hw_str(w, "]}");
	wp_hw_flush(w);
	st->nr_samples = nr_ticks;
	st->nr_threads = nr_threads;
	st->nr_nodes = e->nr_nodes - 1;
	st->nr_runs = nr_runs;
	rc = w->failed ? -1 : 0;
out:
	if (e && e->oom)
		rc = hw_fail(w, e);
	if (e)
		enc_free(e);
	free(e);
	free(w);
	free(ord);
	free(runs);
	return rc;
}
