/* symbolize: addresses -> module, function, file:line and inlined frames with
 * libdwfl, one Dwfl per module reported at its recorded load bias. Lookups go
 * through our own sorted tables (symbols, CU ranges, subprogram ranges), not
 * dwfl_module_addrinfo/dwarf_getscopes, which are linear per address.
 * This file: the API, demangling and the module segment table; the sessions
 * and the pool are in session.c, the tables in dwarf.c, the state they share
 * in sym_state.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "symbolize.h"
#include "symbolize_int.h"
#include "sym_state.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- demangling ---------------------------------------------------------- */

typedef char *(*cxa_demangle_fn)(const char *, char *, size_t *, int *);

static cxa_demangle_fn demangler;
static pthread_once_t demangler_once = PTHREAD_ONCE_INIT;

/* libstdc++ is not linked in: take the host's when it has one, else load it.
 * The dlopen handle is kept on purpose; the function must stay mapped. */
static void find_demangler(void)
{
	void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
	if (!f) {
		void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
		if (h)
			f = dlsym(h, "__cxa_demangle");
	}
	demangler = (cxa_demangle_fn)f;
}

char *wp_sym_demangle(const char *name)
{
	if (!name || name[0] != '_' || name[1] != 'Z')
		return NULL;
	pthread_once(&demangler_once, find_demangler);
	if (!demangler)
		return NULL;
	int status = -1;
	char *out = demangler(name, NULL, NULL, &status);
	if (status != 0) {
		free(out);
		return NULL;
	}
	return out;
}

/* ---- API ----------------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static int order_cmp(const void *a, const void *b, void *arg)
{
	const struct mod *mods = arg;
	uint64_t x = mods[*(const size_t *)a].m.start;
	uint64_t y = mods[*(const size_t *)b].m.start;
	return x < y ? -1 : x > y;
}

/* find_module's preference: loaded before unloaded, then the lower index. */
static int mod_before(const struct wp_sym *s, size_t a, size_t b)
{
	int ua = !!(s->mods[a].m.flags & WP_MOD_UNLOADED);
	int ub = !!(s->mods[b].m.flags & WP_MOD_UNLOADED);
	return ua != ub ? ua < ub : a < b;
}

/* Sifts heap[i] down (a binary min-heap of n module indexes by mod_before). */
static void heap_down(const struct wp_sym *s, size_t *heap, size_t n, size_t i)
{
	for (;;) {
		size_t c = 2 * i + 1, t;
		if (c >= n)
			return;
		if (c + 1 < n && mod_before(s, heap[c + 1], heap[c]))
			c++;
		if (!mod_before(s, heap[c], heap[i]))
			return;
		t = heap[c];
		heap[c] = heap[i];
		heap[i] = t;
		i = c;
	}
}

static void heap_push(const struct wp_sym *s, size_t *heap, size_t *n, size_t v)
{
	size_t i = (*n)++;
	heap[i] = v;
	while (i > 0 && mod_before(s, heap[i], heap[(i - 1) / 2])) {
		size_t p = (i - 1) / 2, t = heap[p];
		heap[p] = heap[i];
		heap[i] = t;
		i = p;
	}
}

/* The segments of find_module: the sorted distinct starts and ends of all
 * non-empty modules; over each segment the same modules contain every
 * address, so one sweep with a heap of the modules begun (those that ended
 * are dropped when they come to the top) gives each segment's pick.
 * O(n log n) time, O(n) memory. Returns 0, or -1 on out of memory. */
static int build_segments(struct wp_sym *s)
{
	size_t n = s->nr_mods, nb = 0, k = 0, nh = 0;
	size_t *order = malloc((n + 1) * sizeof(*order));
	size_t *heap = malloc((n + 1) * sizeof(*heap));
	s->seg_start = malloc((2 * n + 1) * sizeof(*s->seg_start));
	s->seg_mod = malloc((2 * n + 1) * sizeof(*s->seg_mod));
	if (!order || !heap || !s->seg_start || !s->seg_mod) {
		free(order);
		free(heap);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		const struct wp_module *m = &s->mods[i].m;
		if (m->start >= m->end)
			continue; /* contains no address */
		order[k++] = i;
		s->seg_start[nb++] = m->start;
		s->seg_start[nb++] = m->end;
	}
	qsort_r(order, k, sizeof(*order), order_cmp, s->mods);
	qsort(s->seg_start, nb, sizeof(*s->seg_start), cmp_u64);
	size_t ns = 0, next = 0;
	for (size_t i = 0; i < nb; i++) {
		uint64_t b = s->seg_start[i];
		if (ns && s->seg_start[ns - 1] == b)
			continue; /* a duplicate boundary */
		while (next < k && s->mods[order[next]].m.start <= b)
			heap_push(s, heap, &nh, order[next++]);
		while (nh && s->mods[heap[0]].m.end <= b) {
			heap[0] = heap[--nh];
			heap_down(s, heap, nh, 0);
		}
		int pick = nh ? (int)heap[0] : -1;
		if (ns && s->seg_mod[ns - 1] == pick)
			continue; /* the same pick as the segment before: one segment */
		s->seg_start[ns] = b;
		s->seg_mod[ns++] = pick;
	}
	s->nr_segs = ns;
	free(order);
	free(heap);
	return 0;
}

/* The module containing addr; overlaps (a library dlclose'd and another
 * mapped there) prefer the loaded one, then the lower index. Decided once
 * per segment by wp_sym_open: a binary search, however the modules overlap
 * (a scan of the overlapping ones made a crafted raw dump quadratic). */
static int find_module(const struct wp_sym *s, uint64_t addr)
{
	size_t lo = 0, hi = s->nr_segs;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->seg_start[mid] <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? s->seg_mod[lo - 1] : -1;
}

struct wp_sym *wp_sym_open_pooled(struct wp_sym_pool *pool, const struct wp_module *mods,
				  size_t nr_mods)
{
	struct wp_sym *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->callbacks = wp_sym_callbacks();
	s->pool = pool;
	s->mods = calloc(nr_mods ? nr_mods : 1, sizeof(*s->mods));
	if (!s->mods)
		goto oom;
	s->nr_mods = nr_mods;
	for (size_t i = 0; i < nr_mods; i++) {
		struct mod *md = &s->mods[i];
		md->m = mods[i];
		md->m.path = NULL;
		if (md->m.build_id_len > WP_BUILD_ID_MAX)
			md->m.build_id_len = 0;
		if (mods[i].path && !(md->m.path = strdup(mods[i].path)))
			goto oom;
	}
	if (build_segments(s) < 0)
		goto oom;
	return s;
oom:
	wp_sym_close(s);
	return NULL;
}

struct wp_sym *wp_sym_open(const struct wp_module *mods, size_t nr_mods)
{
	return wp_sym_open_pooled(NULL, mods, nr_mods);
}

static struct res *resolve(struct wp_sym *s, uint64_t addr)
{
	struct res *r = arena_alloc(&s->arena, sizeof(*r));
	if (!r)
		return NULL;
	memset(r, 0, sizeof(*r));
	r->module = find_module(s, addr);
	if (r->module < 0) {
		r->offset = addr; /* no module: keep the absolute address */
		return r;
	}
	struct mod *md = &s->mods[r->module];
	r->offset = addr - md->m.start;
	if (md->state == MOD_UNTRIED)
		wp_sym_module_open(s, md);
	if (md->state != MOD_READY)
		return r;
	/* the same place in the session's report of the file */
	if (wp_sym_resolve_frames(s, md->ss, addr + md->delta, r) < 0)
		return NULL;
	return r;
}

int wp_sym_lookup(struct wp_sym *s, uint64_t addr, struct wp_sym_result *out)
{
	struct res *r = map_get(&s->cache, addr);
	if (!r) {
		r = resolve(s, addr);
		if (!r || map_put(&s->cache, addr, r) < 0)
			return -1;
	}
	out->module = r->module;
	out->module_offset = r->offset;
	out->nr_frames = r->nr_frames;
	out->frames = r->frames;
	return 0;
}

void wp_sym_close(struct wp_sym *s)
{
	if (!s)
		return;
	for (size_t i = 0; s->mods && i < s->nr_mods; i++)
		free(s->mods[i].m.path);
	for (size_t j = 0; j < s->held.cap; j++)
		if (s->held.vals[j])
			wp_sym_session_release(s->held.vals[j]);
	map_free(&s->held);
	map_free(&s->cache);
	map_free(&s->shared);
	arena_free(&s->arena);
	free(s->chain);
	free(s->seg_start);
	free(s->seg_mod);
	free(s->mods);
	free(s);
}
