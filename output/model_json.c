/* model_json: a Sentry v1 profile that libwallprof wrote (sentry.c), read
 * back into a model (model_int.h). The file is untrusted: every member's
 * type is checked, every index against its table; a member we do not know
 * is ignored. Frames become locations again: the frames sentry.c wrote for
 * one captured address are consecutive, share its instruction_addr, and
 * all but the last are marked inlined. */
#include <jansson.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model_int.h"
#include "output.h"

struct rd {
	struct wp_model *m;
	char *err;
	size_t errlen;
	/* per JSON frame: the address, bit 63 set for an exact PC ("exact_pc":
	 * the interrupted instruction, looked up as is; user-space addresses
	 * never have that bit) */
	uint64_t *addr;
	uint32_t *loc; /* its location */
	uint32_t *pos; /* its place among the location's frames */
	size_t nr_frames;
	/* per module, by start address */
	uint32_t *mod_order;
	/* address -> location (open addressing; UINT32_MAX empty) */
	uint64_t *key;
	uint32_t *val;
	size_t cap;
	uint32_t *thread_ix; /* tid -> thread entry (read_threads) */
};

static int fail(struct rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct rd *r, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (r->err[0])
		return -1;
	n = snprintf(r->err, r->errlen, "malformed profile: ");
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < r->errlen)
		vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

static int oom(struct rd *r)
{
	if (!r->err[0])
		snprintf(r->err, r->errlen, "out of memory reading the profile");
	return -1;
}

/* A non-negative integer: a JSON integer, or a string of decimal digits
 * (Sentry's ns and tids). Returns 0, or -1 when `v` is neither or too big. */
static int get_u64(const json_t *v, uint64_t max, uint64_t *out)
{
	if (json_is_integer(v)) {
		json_int_t x = json_integer_value(v);

		if (x < 0 || (uint64_t)x > max)
			return -1;
		*out = (uint64_t)x;
		return 0;
	}
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		uint64_t x = 0;

		if (!*s || json_string_length(v) > 20)
			return -1;
		for (; *s; s++) {
			if (*s < '0' || *s > '9' || x > (UINT64_MAX - 9) / 10)
				return -1;
			x = x * 10 + (uint64_t)(*s - '0');
		}
		if (x > max)
			return -1;
		*out = x;
		return 0;
	}
	return -1;
}

/* "0x<hex>" of at most 16 digits. */
static int get_hex(const json_t *v, uint64_t *out)
{
	const char *s;
	uint64_t x = 0;
	size_t n;

	if (!json_is_string(v))
		return -1;
	s = json_string_value(v);
	n = json_string_length(v);
	if (n < 3 || n > 18 || s[0] != '0' || (s[1] != 'x' && s[1] != 'X'))
		return -1;
	for (s += 2; *s; s++) {
		int d = *s >= '0' && *s <= '9'   ? *s - '0'
			: *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
			: *s >= 'A' && *s <= 'F' ? *s - 'A' + 10
						 : -1;

		if (d < 0)
			return -1;
		x = x << 4 | (uint64_t)d;
	}
	*out = x;
	return 0;
}

/* An optional member: absent is fine, present must have the right type. */
static const char *opt_str(struct rd *r, const json_t *o, const char *key, const char *where,
			   size_t i)
{
	const json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v))
		return NULL;
	if (!json_is_string(v)) {
		fail(r, "%s[%zu].%s is not a string", where, i, key);
		return NULL;
	}
	return json_string_value(v);
}

static int opt_bool(struct rd *r, const json_t *o, const char *key, const char *where, size_t i,
		    int *out)
{
	const json_t *v = json_object_get(o, key);

	*out = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v))
		return fail(r, "%s[%zu].%s is not true or false", where, i, key);
	*out = json_is_true(v);
	return 0;
}

static const char *intern(struct rd *r, const char *s)
{
	return s ? wp_model_intern(r->m, s, strlen(s)) : NULL;
}

/* ---- images -> modules -------------------------------------------------- */

static int cmp_mod(const void *a, const void *b, void *ctx)
{
	const struct wp_module *m = ((const struct rd *)ctx)->m->p.modules;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (m[x].start != m[y].start)
		return m[x].start < m[y].start ? -1 : 1;
	return x < y ? -1 : x > y;
}

static int read_images(struct rd *r, const json_t *root)
{
	struct wp_profile *p = &r->m->p;
	const json_t *dm = json_object_get(root, "debug_meta"), *imgs;
	size_t i;

	if (!dm)
		return 0;
	imgs = json_object_get(dm, "images");
	if (!json_is_object(dm) || (imgs && !json_is_array(imgs)))
		return fail(r, "debug_meta.images is not a list");
	if (!imgs)
		return 0;
	p->modules = calloc(json_array_size(imgs) + 1, sizeof(*p->modules));
	r->mod_order = malloc((json_array_size(imgs) + 1) * sizeof(uint32_t));
	if (!p->modules || !r->mod_order)
		return oom(r);
	for (i = 0; i < json_array_size(imgs); i++) {
		const json_t *o = json_array_get(imgs, i);
		struct wp_module *mod = &p->modules[p->nr_modules];
		const char *file, *code_id;
		uint64_t size = 0;

		if (!json_is_object(o))
			return fail(r, "debug_meta.images[%zu] is not an object", i);
		file = opt_str(r, o, "code_file", "debug_meta.images", i);
		code_id = opt_str(r, o, "code_id", "debug_meta.images", i);
		if (r->err[0])
			return -1;
		if (get_hex(json_object_get(o, "image_addr"), &mod->start) < 0)
			return fail(r, "debug_meta.images[%zu].image_addr is not a hex address", i);
		if (json_object_get(o, "image_size") &&
		    get_u64(json_object_get(o, "image_size"), UINT64_MAX - mod->start, &size) < 0)
			return fail(r, "debug_meta.images[%zu].image_size is not a size", i);
		mod->end = mod->start + size;
		mod->path = strdup(file ? file : "");
		if (!mod->path)
			return oom(r);
		for (size_t k = 0;
		     code_id && code_id[k] && code_id[k + 1] && mod->build_id_len < WP_BUILD_ID_MAX;
		     k += 2) {
			unsigned v;

			if (sscanf(code_id + k, "%2x", &v) != 1)
				break;
			mod->build_id[mod->build_id_len++] = (uint8_t)v;
		}
		r->mod_order[p->nr_modules] = (uint32_t)p->nr_modules;
		p->nr_modules++;
	}
	qsort_r(r->mod_order, p->nr_modules, sizeof(uint32_t), cmp_mod, r);
	return 0;
}

/* The module holding `addr` (the last one starting at or below it), or -1. */
static int module_of(const struct rd *r, uint64_t addr)
{
	const struct wp_profile *p = &r->m->p;
	size_t lo = 0, hi = p->nr_modules;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->modules[r->mod_order[mid]].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -1;
	lo = r->mod_order[lo - 1];
	return addr < p->modules[lo].end ? (int)lo : -1;
}

/* ---- frames -> locations ------------------------------------------------ */

static uint32_t *slot(struct rd *r, uint64_t addr)
{
	size_t k = (size_t)((addr * 0x9e3779b97f4a7c15ull) >> 20) & (r->cap - 1);

	while (r->val[k] != UINT32_MAX && r->key[k] != addr)
		k = (k + 1) & (r->cap - 1);
	r->key[k] = addr;
	return &r->val[k];
}

static int read_frame(struct rd *r, const json_t *o, size_t i, struct wp_sym_frame *f, int *in_app)
{
	const char *abs, *name;
	const json_t *v;
	uint64_t x;

	if (!json_is_object(o))
		return fail(r, "profile.frames[%zu] is not an object", i);
	if (get_hex(json_object_get(o, "instruction_addr"), &r->addr[i]) < 0)
		return fail(r, "profile.frames[%zu].instruction_addr is not a hex address", i);
	f->function = intern(r, opt_str(r, o, "function", "profile.frames", i));
	abs = opt_str(r, o, "abs_path", "profile.frames", i);
	name = opt_str(r, o, "filename", "profile.frames", i);
	f->file = intern(r, abs ? abs : name);
	if (r->err[0])
		return -1;
	if ((v = json_object_get(o, "lineno")) && get_u64(v, INT32_MAX, &x) == 0)
		f->line = (int)x;
	else if (v)
		return fail(r, "profile.frames[%zu].lineno is not a line number", i);
	if ((v = json_object_get(o, "colno")) && get_u64(v, INT32_MAX, &x) == 0)
		f->column = (int)x;
	else if (v)
		return fail(r, "profile.frames[%zu].colno is not a column number", i);
	if (opt_bool(r, o, "inlined", "profile.frames", i, &f->inlined) < 0 ||
	    opt_bool(r, o, "in_app", "profile.frames", i, in_app) < 0)
		return -1;
	if (r->addr[i] >> 63)
		return fail(r, "profile.frames[%zu].instruction_addr is not a user-space address",
			    i);
	{
		int exact = 0;

		if (opt_bool(r, o, "exact_pc", "profile.frames", i, &exact) < 0)
			return -1;
		if (exact)
			r->addr[i] |= 1ull << 63;
	}
	return 0;
}

static int read_frames(struct rd *r, const json_t *frames)
{
	struct wp_model *m = r->m;
	size_t n = json_array_size(frames), i, j;
	uint8_t *in_app;

	r->nr_frames = n;
	r->addr = calloc(n + 1, sizeof(uint64_t));
	r->loc = calloc(n + 1, sizeof(uint32_t));
	r->pos = calloc(n + 1, sizeof(uint32_t));
	m->frames = calloc(n + 1, sizeof(*m->frames));
	m->locs = calloc(n + 1, sizeof(*m->locs));
	m->p.pcs = calloc(n + 1, sizeof(*m->p.pcs));
	in_app = calloc(n + 1, 1);
	for (r->cap = 64; r->cap < 2 * (n + 1); r->cap *= 2)
		;
	r->key = malloc(r->cap * sizeof(uint64_t));
	r->val = malloc(r->cap * sizeof(uint32_t));
	if (!r->addr || !r->loc || !r->pos || !m->frames || !m->locs || !m->p.pcs || !r->key ||
	    !r->val || !in_app) {
		free(in_app);
		return oom(r);
	}
	memset(r->val, 0xff, r->cap * sizeof(uint32_t));
	for (i = 0; i < n; i++) {
		int app = 0;

		if (read_frame(r, json_array_get(frames, i), i, &m->frames[i], &app) < 0) {
			free(in_app);
			return -1;
		}
		in_app[i] = (uint8_t)app;
	}
	/* m->frames is compacted in place: a location's frames move down
	 * (never up) over those of the locations already seen. */
	for (i = 0; i < n; i = j) {
		uint32_t *l;
		int app = in_app[i];
		uint64_t off;

		/* One location: frames i..j-1 at one address, all but the last inlined. */
		for (j = i + 1; j < n && m->frames[j - 1].inlined && r->addr[j] == r->addr[i]; j++)
			app |= in_app[j];
		l = slot(r, r->addr[i]);
		if (*l == UINT32_MAX) {
			struct wp_model_loc *loc = &m->locs[m->p.nr_pcs];
			const json_t *fo = json_array_get(frames, j - 1);
			uint64_t addr = r->addr[i] & ~(1ull << 63);
			int exact = !!(r->addr[i] >> 63);
			/* a return address is looked up at the call */
			uint64_t la = exact || addr == 0 ? addr : addr - 1;

			loc->first = (uint32_t)m->nr_frames;
			loc->nr = (uint32_t)(j - i);
			memmove(&m->frames[m->nr_frames], &m->frames[i],
				(j - i) * sizeof(*m->frames));
			m->nr_frames += j - i;
			m->frames[m->nr_frames - 1].inlined = 0;
			loc->module = module_of(r, la);
			if (get_hex(json_object_get(fo, "module_offset"), &off) == 0)
				loc->module_offset = off;
			else if (loc->module >= 0)
				loc->module_offset = la - m->p.modules[loc->module].start;
			else
				loc->module_offset = la;
			if (app && loc->module >= 0)
				m->p.modules[loc->module].flags |= WP_MOD_MAIN;
			m->p.pcs[m->p.nr_pcs].addr = addr;
			m->p.pcs[m->p.nr_pcs].flags = exact ? WP_PC_EXACT : 0;
			*l = (uint32_t)m->p.nr_pcs++;
		}
		for (size_t k = i; k < j; k++) {
			r->loc[k] = *l;
			r->pos[k] = (uint32_t)(k - i);
		}
	}
	free(in_app);
	return 0;
}

/* ---- stacks, samples, threads ------------------------------------------ */

static int read_stacks(struct rd *r, const json_t *stacks)
{
	struct wp_profile *p = &r->m->p;
	size_t n = json_array_size(stacks), total = 0, i, k;

	for (i = 0; i < n; i++) {
		const json_t *s = json_array_get(stacks, i);

		if (!json_is_array(s))
			return fail(r, "profile.stacks[%zu] is not a list", i);
		total += json_array_size(s);
	}
	p->stack_off = malloc((n + 1) * sizeof(uint32_t));
	p->stack_frames = malloc((total + 1) * sizeof(uint32_t));
	if (!p->stack_off || !p->stack_frames)
		return oom(r);
	if (total > UINT32_MAX)
		return fail(r, "more than 2^32 stack entries");
	total = 0;
	for (i = 0; i < n; i++) {
		const json_t *s = json_array_get(stacks, i);
		uint64_t prev = UINT64_MAX;

		p->stack_off[i] = (uint32_t)total;
		for (k = 0; k < json_array_size(s); k++) {
			uint64_t f;

			if (get_u64(json_array_get(s, k), r->nr_frames ? r->nr_frames - 1 : 0, &f) <
				    0 ||
			    !r->nr_frames)
				return fail(r,
					    "profile.stacks[%zu][%zu] is not the index of a frame",
					    i, k);
			/* The next frame of the location the previous one began. */
			if (prev != UINT64_MAX && f == prev + 1 && r->loc[f] == r->loc[prev] &&
			    r->pos[f] == r->pos[prev] + 1) {
				prev = f;
				continue;
			}
			prev = f;
			p->stack_frames[total++] = r->loc[f];
		}
	}
	p->stack_off[n] = (uint32_t)total;
	p->nr_stacks = n;
	return 0;
}

struct skey {
	uint64_t t, i;
};

static int cmp_skey(const void *a, const void *b)
{
	const struct skey *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

static int read_samples(struct rd *r, const json_t *samples)
{
	struct wp_profile *p = &r->m->p;
	size_t n = json_array_size(samples), i;
	int sorted = 1;

	p->samples = calloc(n + 1, sizeof(*p->samples));
	if (!p->samples)
		return oom(r);
	for (i = 0; i < n; i++) {
		const json_t *o = json_array_get(samples, i);
		struct wp_sample *s = &p->samples[i];
		const char *sc;
		uint64_t v;
		int b;

		if (!json_is_object(o))
			return fail(r, "profile.samples[%zu] is not an object", i);
		if (get_u64(json_object_get(o, "stack_id"), p->nr_stacks ? p->nr_stacks - 1 : 0,
			    &v) < 0 ||
		    !p->nr_stacks)
			return fail(r, "profile.samples[%zu].stack_id is not the index of a stack",
				    i);
		s->stack_id = (uint32_t)v;
		s->n = 1;
		if (get_u64(json_object_get(o, "thread_id"), UINT32_MAX, &v) < 0)
			return fail(r, "profile.samples[%zu].thread_id is not a thread id", i);
		s->tid = (uint32_t)v;
		if (get_u64(json_object_get(o, "elapsed_since_start_ns"), INT64_MAX / 2, &v) < 0)
			return fail(r, "profile.samples[%zu].elapsed_since_start_ns is not a time",
				    i);
		s->t_ns = v;
		if (i && s->t_ns < s[-1].t_ns)
			sorted = 0;
		if (opt_bool(r, o, "on_cpu", "profile.samples", i, &b) < 0)
			return -1;
		s->flags |= b ? WP_SAMPLE_ON_CPU : 0;
		if (opt_bool(r, o, "truncated", "profile.samples", i, &b) < 0)
			return -1;
		s->flags |= b ? WP_SAMPLE_TRUNCATED : 0;
		if (opt_bool(r, o, "partial", "profile.samples", i, &b) < 0)
			return -1;
		s->flags |= b ? WP_SAMPLE_PARTIAL : 0;
		sc = opt_str(r, o, "syscall", "profile.samples", i);
		if (r->err[0])
			return -1;
		if (sc && wp_out_syscall_number(sc) >= 0) {
			s->flags |= WP_SAMPLE_SYSCALL;
			s->syscall = (uint32_t)wp_out_syscall_number(sc);
		}
	}
	p->nr_samples = n;
	if (!sorted) {
		/* By time, then by place in the file. */
		struct skey *k = malloc((n + 1) * sizeof(*k));
		struct wp_sample *out = malloc((n + 1) * sizeof(*out));

		if (!k || !out) {
			free(k);
			free(out);
			return oom(r);
		}
		for (i = 0; i < n; i++) {
			k[i].t = p->samples[i].t_ns;
			k[i].i = i;
		}
		qsort(k, n, sizeof(*k), cmp_skey);
		for (i = 0; i < n; i++)
			out[i] = p->samples[k[i].i];
		free(k);
		free(p->samples);
		p->samples = out;
	}
	return 0;
}

/* The thread entry of `tid`, or a new one after the first `n`: through
 * the open-addressed table `ix` of `cap` slots (index + 1; 0 empty). */
static struct wp_thread *thread(struct wp_profile *p, size_t *n, uint32_t tid, uint32_t *ix,
				size_t cap)
{
	size_t k = (size_t)((tid * 0x9e3779b97f4a7c15ull) >> 20) & (cap - 1);

	for (; ix[k]; k = (k + 1) & (cap - 1))
		if (p->threads[ix[k] - 1].tid == tid)
			return &p->threads[ix[k] - 1];
	ix[k] = (uint32_t)(*n + 1);
	p->threads[*n].tid = tid;
	return &p->threads[(*n)++];
}

/* An untrusted string for a one-line message: printable ASCII, at most 40
 * bytes, the rest as '?'. */
static const char *shown(const char *s, char buf[48])
{
	size_t i;

	for (i = 0; s[i] && i < 40; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	buf[i] = 0;
	return buf;
}

/* thread_metadata (names of sampled threads) and the wallprof section's
 * "threads" (every thread seen, with its counts), merged by tid. */
static int read_threads(struct rd *r, const json_t *meta, const json_t *seen)
{
	struct wp_profile *p = &r->m->p;
	size_t cap = json_object_size(meta) + json_object_size(seen), n = 0;
	const json_t *lists[2] = { seen, meta };

	uint32_t *ix;
	size_t ixcap;
	char kb[48];

	/* Keys are unique per object: at most `cap` entries. */
	if (cap > 1u << 17)
		return fail(r, "%zu threads, more than libwallprof writes", cap);
	for (ixcap = 64; ixcap < 2 * (cap + 1); ixcap *= 2)
		;
	p->threads = calloc(cap + 1, sizeof(*p->threads));
	ix = calloc(ixcap, sizeof(*ix));
	r->thread_ix = ix;
	if (!p->threads || !ix)
		return oom(r);
	for (int l = 0; l < 2; l++) {
		const char *key;
		const json_t *o;

		json_object_foreach((json_t *)lists[l], key, o)
		{
			json_t *kv = json_string(key);
			struct wp_thread *t;
			const json_t *v;
			uint64_t tid, x;
			int bad = get_u64(kv, UINT32_MAX, &tid);

			json_decref(kv);
			if (bad < 0)
				return fail(r, "%s key \"%s\" is not a thread id",
					    l ? "thread_metadata" : "wallprof.threads",
					    shown(key, kb));
			if (!json_is_object(o))
				return fail(r, "thread %s is not an object", shown(key, kb));
			t = thread(p, &n, (uint32_t)tid, ix, ixcap);
			v = json_object_get(o, "name");
			if (v && !json_is_string(v))
				return fail(r, "thread %s: name is not a string", shown(key, kb));
			if (v && (!t->name[0] || l == 0)) {
				/* comm: up to 16 bytes, NUL-terminated only when shorter */
				size_t k = json_string_length(v);

				memset(t->name, 0, sizeof(t->name));
				memcpy(t->name, json_string_value(v),
				       k < sizeof(t->name) ? k : sizeof(t->name));
			}
			if (l)
				continue;
			if ((v = json_object_get(o, "signals")) && get_u64(v, UINT64_MAX, &x) == 0)
				t->nr_signals = x;
			else if (v)
				return fail(r, "thread %s: signals is not a count", key);
			if ((v = json_object_get(o, "samples")) && get_u64(v, UINT64_MAX, &x) == 0)
				t->nr_samples = x;
			else if (v)
				return fail(r, "thread %s: samples is not a count", key);
		}
	}
	p->nr_threads = n;
	return 0;
}

/* A number of the wallprof section into *out (absent: left as is). */
static int setting(struct rd *r, const json_t *w, const char *key, uint64_t max, uint64_t *out)
{
	const json_t *v = json_object_get(w, key);

	if (v && get_u64(v, max, out) < 0)
		return fail(r, "wallprof.%s is not a number libwallprof writes", key);
	return 0;
}

static int read_wallprof(struct rd *r, const json_t *w)
{
	struct wp_profile *p = &r->m->p;
	uint64_t v;
	int bad = 0;

	if (!w)
		return 0;
	if (!json_is_object(w))
		return fail(r, "wallprof is not an object");
	for (size_t i = 0; i < wp_nr_counter_keys; i++)
		bad |= setting(r, w, wp_counter_keys[i].key, UINT64_MAX,
			       wp_counter_ptr(&p->counters, i));
#define U32(key, field)                                    \
	do {                                               \
		v = p->field;                              \
		bad |= setting(r, w, key, UINT32_MAX, &v); \
		p->field = (uint32_t)v;                    \
	} while (0)
	U32("pid", pid);
	U32("hz", hz);
	if (p->hz > 100000)
		return fail(r, "wallprof.hz %u is more than libwallprof samples at (100000)",
			    p->hz);
	U32("ring_seconds", ring_seconds);
	U32("max_depth", max_depth);
#undef U32
	bad |= setting(r, w, "ring_bytes", UINT64_MAX, &p->ring_bytes);
	bad |= setting(r, w, "ring_samples", UINT64_MAX, &p->ring_samples);
	v = 0;
	bad |= setting(r, w, "snapshot", INT32_MAX, &v);
	p->snapshot = (int)v;
	v = 0;
	bad |= setting(r, w, "duration_ns", INT64_MAX / 2, &v);
	if (v)
		p->end_ns = v;
	return bad ? -1 : 0;
}

/* RFC 3339 UTC ("2024-01-02T03:04:05.123456Z") in ns since the epoch. */
static int parse_time(const char *s, int64_t *out)
{
	struct tm tm;
	const char *rest;
	int64_t frac = 0, scale = 1000000000;

	memset(&tm, 0, sizeof(tm));
	rest = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!rest)
		return -1;
	if (*rest == '.')
		for (rest++; *rest >= '0' && *rest <= '9'; rest++)
			if (scale > 1) {
				scale /= 10;
				frac += (*rest - '0') * scale;
			}
	if (*rest != 'Z' && strcmp(rest, "+00:00"))
		return -1;
	{
		time_t t = timegm(&tm);

		/* what nanoseconds in an int64 hold: 1970 to 2262 */
		if (t < 0 || (int64_t)t > INT64_MAX / 1000000000 - 1)
			return -1;
		*out = (int64_t)t * 1000000000 + frac;
	}
	return 0;
}

int wp_model_read_json(struct wp_model *m, const char *data, size_t len, char *err, size_t errlen)
{
	struct rd r = { .m = m, .err = err, .errlen = errlen };
	const json_t *prof, *frames, *stacks, *samples, *v, *tx;
	json_error_t je;
	json_t *root;
	int rc = -1;

	err[0] = 0;
	root = json_loadb(data, len, 0, &je);
	if (!root) {
		if (je.position >= (int)len || strstr(je.text, "premature end"))
			snprintf(err, errlen, "truncated JSON at byte %d: %s", je.position,
				 je.text);
		else
			snprintf(err, errlen, "not JSON: line %d, byte %d: %s", je.line,
				 je.position, je.text);
		return -1;
	}
	prof = json_object_get(root, "profile");
	frames = json_object_get(prof, "frames");
	stacks = json_object_get(prof, "stacks");
	samples = json_object_get(prof, "samples");
	if (!json_is_object(root) || !json_is_object(prof) || !json_is_array(frames) ||
	    !json_is_array(stacks) || !json_is_array(samples)) {
		snprintf(err, errlen,
			 "not a libwallprof profile: JSON without a Sentry v1 "
			 "\"profile\" of frames, stacks and samples");
		goto out;
	}
	v = json_object_get(root, "version");
	if (v && !(json_is_string(v) && !strcmp(json_string_value(v), "1"))) {
		snprintf(err, errlen, "not a Sentry v1 profile (\"version\" is not \"1\")");
		goto out;
	}
	if ((v = json_object_get(root, "platform"))) {
		if (!json_is_string(v)) {
			fail(&r, "platform is not a string");
			goto out;
		}
		m->platform = intern(&r, json_string_value(v));
	}
	if (read_images(&r, root) < 0 || read_frames(&r, frames) < 0 ||
	    read_stacks(&r, stacks) < 0 || read_samples(&r, samples) < 0 ||
	    read_wallprof(&r, json_object_get(root, "wallprof")) < 0)
		goto out;
	v = json_object_get(json_object_get(root, "wallprof"), "threads");
	if (v && !json_is_object(v)) {
		fail(&r, "wallprof.threads is not an object");
		goto out;
	}
	if (json_object_get(prof, "thread_metadata") &&
	    !json_is_object(json_object_get(prof, "thread_metadata"))) {
		fail(&r, "profile.thread_metadata is not an object");
		goto out;
	}
	if (read_threads(&r, json_object_get(prof, "thread_metadata"), v) < 0)
		goto out;
	tx = json_object_get(root, "transaction");
	if (json_is_object(tx)) {
		uint64_t x;

		if ((v = json_object_get(tx, "name")) && json_is_string(v) &&
		    !(m->p.cmdline = strdup(json_string_value(v)))) {
			oom(&r);
			goto out;
		}
		if ((v = json_object_get(tx, "active_thread_id")) &&
		    get_u64(v, UINT32_MAX, &x) == 0)
			m->p.main_tid = (uint32_t)x;
	}
	if ((v = json_object_get(root, "timestamp"))) {
		int64_t t;

		if (!json_is_string(v) || parse_time(json_string_value(v), &t) < 0) {
			fail(&r, "timestamp is not an RFC 3339 UTC time");
			goto out;
		}
		m->p.realtime_offset_ns = t; /* the samples' times start at 0 */
	}
	m->p.start_ns = 0;
	if (m->p.nr_samples && m->p.end_ns < m->p.samples[m->p.nr_samples - 1].t_ns)
		m->p.end_ns = m->p.samples[m->p.nr_samples - 1].t_ns;
	rc = 0;
out:
	if (rc < 0 && !err[0])
		oom(&r);
	json_decref(root);
	free(r.addr);
	free(r.loc);
	free(r.pos);
	free(r.mod_order);
	free(r.key);
	free(r.val);
	free(r.thread_ix);
	return rc;
}
