/* model: a profile with its symbols (see model.h). Built from a raw dump
 * and a symbolizer, or read back from a Sentry profile (model_json.c); the
 * strings it holds are interned in its own storage. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model_int.h"
#include "output.h"
#include "raw.h"

/* A JSON profile larger than this is refused: jansson's tree of it takes
 * up to about 25 times its size (a stack of 20 million small numbers). A
 * full 30 s ring of 64 threads is about 25 MiB. */
#define MAX_JSON_BYTES (64u << 20)

#define CHUNK 65536

struct chunk {
	struct chunk *next;
	size_t used, cap;
	char data[];
};

/* The model's own storage: interned strings and the thread index. */
struct store {
	struct chunk *chunks;
	const char **tab; /* open addressing over the strings, by content */
	size_t cap, n;
	uint32_t *thr;    /* p.threads indices sorted by tid */
};

static uint64_t hash(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ull;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

int wp_model_init(struct wp_model *m)
{
	memset(m, 0, sizeof(*m));
	m->store = calloc(1, sizeof(struct store));
	return m->store ? 0 : -1;
}

static int grow_tab(struct store *st)
{
	size_t cap = st->cap ? st->cap * 2 : 1024;
	const char **tab = calloc(cap, sizeof(*tab));

	if (!tab)
		return -1;
	for (size_t i = 0; i < st->cap; i++) {
		const char *s = st->tab[i];
		size_t k;

		if (!s)
			continue;
		for (k = hash(s, strlen(s)) & (cap - 1); tab[k]; k = (k + 1) & (cap - 1))
			;
		tab[k] = s;
	}
	free(st->tab);
	st->tab = tab;
	st->cap = cap;
	return 0;
}

const char *wp_model_intern(struct wp_model *m, const char *s, size_t n)
{
	struct store *st = m->store;
	struct chunk *c;
	size_t k;
	char *out;

	if (!s || !st)
		return NULL;
	if ((st->n + 1) * 2 > st->cap && grow_tab(st) < 0)
		return NULL;
	for (k = hash(s, n) & (st->cap - 1); st->tab[k]; k = (k + 1) & (st->cap - 1))
		if (!strncmp(st->tab[k], s, n) && st->tab[k][n] == 0)
			return st->tab[k];
	c = st->chunks;
	if (!c || c->cap - c->used < n + 1) {
		size_t cap = n + 1 > CHUNK ? n + 1 : CHUNK;

		c = malloc(sizeof(*c) + cap);
		if (!c)
			return NULL;
		c->cap = cap;
		c->used = 0;
		c->next = st->chunks;
		st->chunks = c;
	}
	out = c->data + c->used;
	memcpy(out, s, n);
	out[n] = 0;
	c->used += n + 1;
	st->tab[k] = out;
	st->n++;
	return out;
}

void wp_model_free(struct wp_model *m)
{
	struct store *st = m->store;

	if (st) {
		while (st->chunks) {
			struct chunk *c = st->chunks;

			st->chunks = c->next;
			free(c);
		}
		free(st->tab);
		free(st->thr);
		free(st);
	}
	wp_profile_free(&m->p);
	free(m->locs);
	free(m->frames);
	memset(m, 0, sizeof(*m));
}

static int cmp_thr(const void *a, const void *b, void *ctx)
{
	const struct wp_thread *t = ((const struct wp_model *)ctx)->p.threads;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	if (t[x].tid != t[y].tid)
		return t[x].tid < t[y].tid ? -1 : 1;
	return x < y ? -1 : x > y;
}

int wp_model_finish(struct wp_model *m)
{
	struct store *st = m->store;

	free(st->thr);
	st->thr = malloc((m->p.nr_threads + 1) * sizeof(uint32_t));
	if (!st->thr)
		return -1;
	for (size_t i = 0; i < m->p.nr_threads; i++)
		st->thr[i] = (uint32_t)i;
	qsort_r(st->thr, m->p.nr_threads, sizeof(uint32_t), cmp_thr, m);
	if (!m->platform)
		m->platform = wp_model_intern(m, "native", 6);
	return m->platform ? 0 : -1;
}

const struct wp_thread *wp_model_thread(const struct wp_model *m, uint32_t tid)
{
	const struct store *st = m->store;
	size_t lo = 0, hi = m->p.nr_threads;

	if (!st || !st->thr) {
		/* a model built by hand: no index */
		for (size_t i = 0; i < m->p.nr_threads; i++)
			if (m->p.threads[i].tid == tid)
				return &m->p.threads[i];
		return NULL;
	}
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->p.threads[st->thr[mid]].tid < tid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo < m->p.nr_threads && m->p.threads[st->thr[lo]].tid == tid)
		return &m->p.threads[st->thr[lo]];
	return NULL;
}

uint64_t wp_model_period_ns(const struct wp_model *m)
{
	uint64_t ns = 1000000000ull / (m->p.hz ? m->p.hz : 101);

	return ns ? ns : 1; /* never 0, whatever the profile says its rate was */
}

const char *wp_model_frame_label(const struct wp_model *m, const struct wp_model_loc *loc,
				 const struct wp_sym_frame *f, char *buf, size_t len)
{
	if (f && f->function && *f->function)
		return f->function;
	if (loc && loc->module >= 0 && (size_t)loc->module < m->p.nr_modules) {
		const char *path = m->p.modules[loc->module].path;
		const char *slash = path ? strrchr(path, '/') : NULL;
		const char *base = slash ? slash + 1 : path;

		snprintf(buf, len, "%s+0x%llx", base && *base ? base : "?",
			 (unsigned long long)loc->module_offset);
	} else {
		snprintf(buf, len, "0x%llx", loc ? (unsigned long long)loc->module_offset : 0ull);
	}
	return buf;
}

static int find_module(const struct wp_profile *p, uint64_t addr)
{
	for (size_t i = 0; i < p->nr_modules; i++)
		if (addr >= p->modules[i].start && addr < p->modules[i].end)
			return (int)i;
	return -1;
}

/* Appends the frames of `r` (one unknown frame when it has none). */
static int add_frames(struct wp_model *m, size_t *cap, const struct wp_sym_result *r)
{
	int k = r->nr_frames > 0 && r->frames ? r->nr_frames : 1;

	if (m->nr_frames + (size_t)k > *cap) {
		size_t nc = (*cap ? *cap * 2 : 1024) + (size_t)k;
		struct wp_sym_frame *f = realloc(m->frames, nc * sizeof(*f));

		if (!f)
			return -1;
		m->frames = f;
		*cap = nc;
	}
	for (int j = 0; j < k; j++) {
		struct wp_sym_frame *f = &m->frames[m->nr_frames + (size_t)j];

		memset(f, 0, sizeof(*f));
		if (r->nr_frames <= 0 || !r->frames)
			continue;
		*f = r->frames[j];
		f->function =
			f->function ? wp_model_intern(m, f->function, strlen(f->function)) : NULL;
		f->file = f->file ? wp_model_intern(m, f->file, strlen(f->file)) : NULL;
		if ((r->frames[j].function && !f->function) || (r->frames[j].file && !f->file))
			return -1;
		f->line = f->line > 0 ? f->line : 0;
		f->column = f->column > 0 ? f->column : 0;
		f->inlined = j + 1 < k && f->inlined ? 1 : 0;
	}
	m->nr_frames += (size_t)k;
	return 0;
}

int wp_model_build(struct wp_model *m, struct wp_profile *p, struct wp_sym *sym,
		   const char *platform, char *err, size_t errlen)
{
	size_t cap = 0;

	if (wp_model_init(m) < 0)
		goto oom;
	m->p = *p;
	memset(p, 0, sizeof(*p));
	if (platform && !(m->platform = wp_model_intern(m, platform, strlen(platform))))
		goto oom;
	m->locs = calloc(m->p.nr_pcs + 1, sizeof(*m->locs));
	if (!m->locs)
		goto oom;
	for (size_t i = 0; i < m->p.nr_pcs; i++) {
		const struct wp_pc *pc = &m->p.pcs[i];
		struct wp_model_loc *l = &m->locs[i];
		uint64_t la = pc->addr;
		struct wp_sym_result r = { .module = -1 };

		/* A return address points after the call: look up the call. */
		if (!(pc->flags & WP_PC_EXACT) && la > 0)
			la--;
		if (!sym || wp_sym_lookup(sym, la, &r) < 0) {
			memset(&r, 0, sizeof(r));
			r.module = find_module(&m->p, la);
			if (r.module >= 0)
				r.module_offset = la - m->p.modules[r.module].start;
		}
		if (r.module < 0 || (size_t)r.module >= m->p.nr_modules) {
			r.module = -1;
			r.module_offset = la;
		}
		l->module = r.module;
		l->module_offset = r.module_offset;
		l->first = (uint32_t)m->nr_frames;
		if (add_frames(m, &cap, &r) < 0)
			goto oom;
		l->nr = (uint32_t)(m->nr_frames - l->first);
	}
	if (wp_model_finish(m) < 0)
		goto oom;
	return 0;
oom:
	if (err && errlen)
		snprintf(err, errlen, "out of memory building the profile");
	wp_profile_free(p);
	wp_model_free(m);
	return -1;
}

/* The whole regular file at `fd` (at most `max` bytes) into a malloc'd
 * buffer. Returns it, or NULL with `err` set. */
static char *slurp(int fd, const char *path, size_t max, size_t *len, char *err, size_t errlen)
{
	struct stat sb;
	size_t cap, n = 0;
	char *buf;

	if (fstat(fd, &sb) < 0 || !S_ISREG(sb.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return NULL;
	}
	if ((uint64_t)sb.st_size > max) {
		snprintf(err, errlen,
			 "%s: %llu bytes, more than the %zu MiB a JSON profile may have", path,
			 (unsigned long long)sb.st_size, max >> 20);
		return NULL;
	}
	cap = (size_t)sb.st_size + 1;
	buf = malloc(cap);
	if (!buf) {
		snprintf(err, errlen, "%s: out of memory", path);
		return NULL;
	}
	for (;;) {
		ssize_t k = read(fd, buf + n, cap - n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			snprintf(err, errlen, "%s: cannot read: %s", path, strerror(errno));
			free(buf);
			return NULL;
		}
		if (k == 0)
			break;
		n += (size_t)k;
		if (n == cap) { /* grew while we read: refuse rather than chase it */
			snprintf(err, errlen, "%s: the file changed while it was read", path);
			free(buf);
			return NULL;
		}
	}
	buf[n] = 0;
	*len = n;
	return buf;
}

int wp_model_read_ex(const char *path, struct wp_sym_pool *pool, struct wp_model *m,
		     struct wp_raw_info *info, char *err, size_t errlen)
{
	char head[64], e[480];
	struct wp_profile p;
	struct wp_raw_info ri;
	struct wp_sym *sym;
	ssize_t n;
	size_t i, len = 0;
	char *data;
	int fd, rc;

	memset(m, 0, sizeof(*m));
	if (info)
		memset(info, 0, sizeof(*info));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
		return -1;
	}
	do
		n = pread(fd, head, sizeof(head), 0);
	while (n < 0 && errno == EINTR);
	for (i = 0; n > 0 && i < (size_t)n && strchr(" \t\r\n", head[i]); i++)
		;
	if (n > 0 && i < (size_t)n && head[i] == '[') {
		close(fd);
		snprintf(err, errlen, "%s: a JSON array, not a libwallprof profile (a JSON object)",
			 path);
		return -1;
	}
	if (n > 0 && i < (size_t)n && head[i] == '{') {
		data = slurp(fd, path, MAX_JSON_BYTES, &len, err, errlen);
		close(fd);
		if (!data)
			return -1;
		if (wp_model_init(m) < 0) {
			free(data);
			snprintf(err, errlen, "%s: out of memory", path);
			return -1;
		}
		rc = wp_model_read_json(m, data, len, e, sizeof(e));
		free(data);
		if (rc == 0)
			rc = wp_model_finish(m);
		if (rc < 0) {
			snprintf(err, errlen, "%s: %s", path, e[0] ? e : "out of memory");
			wp_model_free(m);
		}
		return rc;
	}
	close(fd);
	if (n == 0) {
		snprintf(err, errlen, "%s: empty file: not a profile", path);
		return -1;
	}
	if (wp_raw_read_ex(path, &p, &ri, e, sizeof(e)) < 0) {
		snprintf(err, errlen, "%s: %s", path, e);
		return -1;
	}
	if (info)
		*info = ri;
	sym = wp_sym_open_pooled(pool, p.modules, p.nr_modules);
	if (!sym) {
		wp_profile_free(&p);
		snprintf(err, errlen, "%s: out of memory opening the symbolizer", path);
		return -1;
	}
	rc = wp_model_build(m, &p, sym, NULL, e, sizeof(e));
	wp_sym_close(sym);
	if (rc < 0)
		snprintf(err, errlen, "%s: %s", path, e);
	return rc;
}

int wp_model_read(const char *path, struct wp_sym_pool *pool, struct wp_model *m, char *err,
		  size_t errlen)
{
	return wp_model_read_ex(path, pool, m, NULL, err, errlen);
}
