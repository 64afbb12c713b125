/* symbolize: per-file libdwfl sessions (the file a module had mapped, found
 * and checked, reported at the recorded bias, shared by the modules of one
 * file inside a wp_sym) and the pool that keeps them across wp_syms. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "symbolize.h"
#include "symbolize_int.h"
#include "sym_state.h"

#include <fcntl.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- demangled names ----------------------------------------------------- */

/* Marks "not demangleable" in the names cache. */
static char no_name;

/* Demangled form of `name`, cached by the string's address (names come from
 * the session's ELF/DWARF string tables, so one function keeps one pointer). */
const char *wp_sym_pretty_name(struct session *ss, const char *name)
{
	if (!name || name[0] != '_' || name[1] != 'Z')
		return name;
	char *d = map_get(&ss->names, (uintptr_t)name);
	if (!d) {
		d = wp_sym_demangle(name);
		if (map_put(&ss->names, (uintptr_t)name, d ? d : &no_name) < 0) {
			free(d);
			return name; /* out of memory: the raw name is still correct */
		}
		if (!d)
			d = &no_name;
		else
			ss->names_bytes += strlen(d) + 1;
	}
	return d == &no_name ? name : d;
}

/* ---- sessions ------------------------------------------------------------ */

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

static void session_free(struct session *ss)
{
	for (size_t j = 0; j < ss->cu_map.cap; j++) {
		struct cu *cu = ss->cu_map.vals[j];
		if (cu) {
			free(cu->subs);
			map_free(&cu->paths);
			map_free(&cu->scoped);
		}
	}
	map_free(&ss->cu_map);
	for (size_t j = 0; j < ss->names.cap; j++)
		if (ss->names.vals[j] && ss->names.vals[j] != &no_name)
			free(ss->names.vals[j]);
	map_free(&ss->names);
	free(ss->syms);
	free(ss->cus);
	if (ss->dwfl)
		dwfl_end(ss->dwfl);
	arena_free(&ss->arena);
	free(ss);
}

/* What libdw allocates, per line table row and per unit it reads for us
 * (units, abbreviations, file tables): fitted on libc6-dbg's debug file
 * with elfutils 0.188, where the heap a session used was then 1.0 to 1.3
 * times the estimate, from 1 to 3,000 functions looked up. */
#define LIBDW_LINE_BYTES 64
#define LIBDW_CU_BYTES 4096

/* What the session holds, roughly: the DWARF sections libdw keeps in memory
 * (decompressed when the file compresses them), libdw's tables for the units
 * we looked into (a model: see above), our tables and strings. */
static size_t session_bytes(const struct session *ss)
{
	const size_t slot = sizeof(uint64_t) + sizeof(void *);
	size_t b = sizeof(*ss) + ss->arena.bytes + ss->names_bytes + ss->dwarf_bytes;
	b += ss->nr_syms * sizeof(*ss->syms) + ss->nr_cus * sizeof(*ss->cus);
	b += (ss->cu_map.cap + ss->names.cap) * slot;
	for (size_t j = 0; j < ss->cu_map.cap; j++) {
		const struct cu *cu = ss->cu_map.vals[j];
		if (cu)
			b += cu->nr_subs * sizeof(*cu->subs) +
			     (cu->paths.cap + cu->scoped.cap) * slot +
			     cu->nr_lines * LIBDW_LINE_BYTES + LIBDW_CU_BYTES;
	}
	return b;
}


/* Reports `file` (or `fd`, consumed) at the module's recorded bias, in a
 * fresh session. With add_p_vaddr=true libdwfl takes `base` as the load bias
 * (runtime = p_vaddr + base) for ET_DYN and ignores it for ET_EXEC, which is
 * exactly dlpi_addr; with false it would take `base` as the address of the
 * first PT_LOAD, wrong for objects whose first p_vaddr is not 0. */
static int report(const struct wp_sym *s, struct session *ss, const struct wp_module *m,
		  const char *file, int fd)
{
	Dwfl *d = dwfl_begin(s->callbacks);
	if (!d) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	dwfl_report_begin(d);
	Dwfl_Module *dm =
		dwfl_report_elf(d, m->path ? base_name(m->path) : file, file, fd, m->bias, true);
	if (!dm && fd >= 0)
		close(fd); /* consumed only on success */
	if (dwfl_report_end(d, NULL, NULL) != 0 || !dm) {
		dwfl_end(d);
		return -1;
	}
	ss->dwfl = d;
	ss->dm = dm;
	return 0;
}

static void unreport(struct session *ss)
{
	dwfl_end(ss->dwfl);
	ss->dwfl = NULL;
	ss->dm = NULL;
}

static uint64_t page_up(uint64_t a)
{
	uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
	return (a + pg - 1) & ~(pg - 1);
}

/* Is the reported file the one that was mapped? By build-id when one was
 * recorded; otherwise at least the PT_LOAD extent must match. */
static int trusted(const struct session *ss, const struct wp_module *m)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	int n = dwfl_module_build_id(ss->dm, &bits, &vaddr);
	if (m->build_id_len)
		return n > 0 && (uint32_t)n == m->build_id_len && !memcmp(bits, m->build_id, n);
	Dwarf_Addr lo, hi;
	if (!dwfl_module_info(ss->dm, NULL, &lo, &hi, NULL, NULL, NULL, NULL))
		return 0;
	return page_up(hi) == page_up(m->end);
}

static void file_id_set(struct file_id *f, const struct stat *st)
{
	memset(f, 0, sizeof(*f));
	f->dev = st->st_dev;
	f->ino = st->st_ino;
	f->size = (uint64_t)st->st_size;
	f->mtime_sec = st->st_mtim.tv_sec;
	f->mtime_nsec = st->st_mtim.tv_nsec;
	f->ctime_sec = st->st_ctim.tv_sec;
	f->ctime_nsec = st->st_ctim.tv_nsec;
}

/* `path` opened for reading if it is a regular file (never blocks on a FIFO
 * a crafted dump names), its identity in *f; or -1. */
static int open_regular(const char *path, struct file_id *f)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		return -1;
	}
	file_id_set(f, &st);
	return fd;
}

/* Reports `file` (`fd`, consumed, or -1) and keeps it when it is the
 * recorded file, noting where libdwfl put it. Returns 1 when kept. */
static int try_source(const struct wp_sym *s, struct session *ss, const struct wp_module *m,
		      const char *file, int fd, int src)
{
	if (report(s, ss, m, file, fd) < 0)
		return 0;
	if (!trusted(ss, m)) {
		unreport(ss);
		return 0;
	}
	ss->src = src;
	Dwarf_Addr bias;
	GElf_Ehdr eh;
	Elf *e = dwfl_module_getelf(ss->dm, &bias);
	if (dwfl_module_info(ss->dm, NULL, &ss->lo, &ss->hi, NULL, NULL, NULL, NULL) && e &&
	    gelf_getehdr(e, &eh)) {
		ss->elf_bias = bias;
		ss->exec = eh.e_type == ET_EXEC;
		ss->relocatable = eh.e_type == ET_EXEC || eh.e_type == ET_DYN;
	}
	return 1;
}

/* `fd`, or its copy from the debug cache when it has the recorded build-id. */
static int swap(const struct wp_module *m, int fd, char kind)
{
	return wp_sym_cache_swap(fd, m->build_id, m->build_id_len, kind);
}

/* A session over the file the module had mapped: the vDSO from memory, the
 * file at its path, the mapping a live process still has, or the separate
 * debug file of its build-id, the first the module's identity accepts.
 * NULL when none does, or out of memory. */
static struct session *open_session(const struct wp_sym *s, const struct wp_module *m)
{
	struct session *ss = calloc(1, sizeof(*ss));
	if (!ss)
		return NULL;
	int vdso = !!(m->flags & WP_MOD_VDSO);
	int fd = vdso ? wp_sym_vdso_fd(m) : -1;
	if (fd >= 0 && try_source(s, ss, m, m->path ? m->path : "[vdso]", fd, SRC_VDSO))
		return ss;
	/* A vDSO's path is no file; never open it. */
	/* A file with compressed debug information is read through its
	 * uncompressed copy in the debug cache, when there is one (its
	 * identity, ss->file, stays the original's). */
	if (!vdso && m->path && m->path[0] && (fd = open_regular(m->path, &ss->file)) >= 0 &&
	    try_source(s, ss, m, m->path, swap(m, fd, WP_SYM_COPY_MODULE), SRC_PATH))
		return ss;
	/* Deleted or replaced on disk but still mapped here: the mapping
	 * still reaches the original file. */
	if (!vdso && (fd = wp_sym_mapped_fd(m)) >= 0 &&
	    try_source(s, ss, m, m->path ? m->path : "[mapped]", swap(m, fd, WP_SYM_COPY_MODULE),
		       SRC_MAPPED))
		return ss;
	/* Missing or replaced: the separate debug file of the recorded build
	 * has the same program headers, so it stands in for the binary. */
	char path[WP_BUILD_ID_MAX * 2 + 64];
	struct file_id unused;
	if (wp_sym_build_id_debug_path(m->build_id, m->build_id_len, path, sizeof(path)) == 0 &&
	    (fd = open_regular(path, &unused)) >= 0 &&
	    try_source(s, ss, m, path, swap(m, fd, WP_SYM_COPY_DEBUG), SRC_DEBUG))
		return ss;
	free(ss);
	return NULL;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

/* Fills `sh` for a session opened for module `m`; returns its hash, or 0
 * when the session is not to be shared (no file name to tell it by, an odd
 * build-id). */
static uint64_t share_key(const struct session *ss, const struct wp_module *m, struct share *sh)
{
	Dwarf_Addr lo, hi;
	const char *mainfile = NULL;
	const unsigned char *bits;
	GElf_Addr vaddr;
	struct stat st;
	memset(sh, 0, sizeof(*sh));
	if (!dwfl_module_info(ss->dm, NULL, &lo, &hi, NULL, NULL, &mainfile, NULL))
		return 0;
	int n = dwfl_module_build_id(ss->dm, &bits, &vaddr);
	if (n > WP_BUILD_ID_MAX)
		return 0;
	if (n > 0) {
		sh->id_len = (uint32_t)n;
		memcpy(sh->id, bits, (size_t)n);
	} else if (mainfile && stat(mainfile, &st) == 0) {
		sh->dev = st.st_dev;
		sh->ino = st.st_ino;
	} else {
		return 0;
	}
	sh->lo = lo - m->bias;
	sh->hi = hi - m->bias;
	sh->base = lo;
	uint64_t h = 0xcbf29ce484222325ULL;
	h = fnv(h, &sh->lo, sizeof(sh->lo));
	h = fnv(h, &sh->hi, sizeof(sh->hi));
	h = fnv(h, &sh->dev, sizeof(sh->dev));
	h = fnv(h, &sh->ino, sizeof(sh->ino));
	h = fnv(h, sh->id, sh->id_len);
	return h ? h : 1;
}

/* The session of this wp_sym with identity `sh` (hash h), if any. */
static struct session *shared_find(const struct wp_sym *s, uint64_t h, const struct share *sh)
{
	struct session *host = map_get(&s->shared, h);
	if (!host)
		return NULL;
	const struct share *o = &host->share;
	if (o->lo == sh->lo && o->hi == sh->hi && o->dev == sh->dev && o->ino == sh->ino &&
	    o->id_len == sh->id_len && !memcmp(o->id, sh->id, sh->id_len))
		return host;
	return NULL; /* a hash collision keeps its own session */
}

/* ---- the pool ------------------------------------------------------------ */

/* Fills `k` for module `m` of `s`; returns 0 when the module has no identity
 * a pool can trust: no path, or neither a build-id nor a regular file at its
 * path. */
static int pool_key_of(const struct wp_sym *s, const struct wp_module *m, struct pool_key *k)
{
	memset(k, 0, sizeof(*k));
	if (!m->path || !m->path[0])
		return 0;
	k->path = m->path;
	k->vdso = !!(m->flags & WP_MOD_VDSO);
	k->callbacks = s->callbacks;
	if (m->build_id_len) {
		k->id_len = m->build_id_len;
		memcpy(k->id, m->build_id, m->build_id_len);
	} else {
		struct stat st;
		if (k->vdso || stat(m->path, &st) != 0 || !S_ISREG(st.st_mode))
			return 0;
		file_id_set(&k->file, &st);
	}
	uint64_t h = 0xcbf29ce484222325ULL;
	h = fnv(h, k->path, strlen(k->path) + 1);
	h = fnv(h, k->id, k->id_len);
	h = fnv(h, &k->file, sizeof(k->file));
	h = fnv(h, &k->vdso, sizeof(k->vdso));
	h = fnv(h, &k->callbacks, sizeof(k->callbacks));
	k->hash = h;
	return 1;
}

static int key_eq(const struct pool_key *a, const struct pool_key *b)
{
	return a->hash == b->hash && !strcmp(a->path, b->path) && a->id_len == b->id_len &&
	       !memcmp(a->id, b->id, a->id_len) && !memcmp(&a->file, &b->file, sizeof(a->file)) &&
	       a->vdso == b->vdso && a->callbacks == b->callbacks;
}

/* Whether session `ss`, opened for the module `k` was taken from, may stay
 * in a pool: a build-id was recorded (every source it came from had that
 * build-id), or the file it opened from the recorded path is the one
 * `k` saw there. A session from /proc/PID/map_files or the vDSO image is
 * thus kept only under its build-id. */
static int poolable(const struct session *ss, const struct pool_key *k)
{
	if (!ss->relocatable)
		return 0;
	if (k->id_len)
		return 1;
	return ss->src == SRC_PATH && !memcmp(&ss->file, &k->file, sizeof(k->file));
}

/* Where pooled session `ss` stands in for module `m`: the shift from m's
 * addresses to the session's (*delta). Returns 0 when it cannot: without a
 * build-id, the extent must match as trusted() wants it. */
static int pool_fits(const struct session *ss, const struct wp_module *m, uint64_t *delta)
{
	uint64_t bias = ss->exec ? 0 : m->bias;
	if (!m->build_id_len && page_up(ss->hi - ss->elf_bias + bias) != page_up(m->end))
		return 0;
	*delta = ss->elf_bias - bias;
	return 1;
}

static struct session *pool_find(const struct wp_sym_pool *p, const struct pool_key *k,
				 const struct wp_module *m, uint64_t *delta)
{
	if (!p->nr_buckets)
		return NULL;
	for (struct session *ss = p->buckets[k->hash & (p->nr_buckets - 1)]; ss; ss = ss->hnext)
		if (key_eq(&ss->key, k) && pool_fits(ss, m, delta))
			return ss;
	return NULL;
}

static void idle_unlink(struct wp_sym_pool *p, struct session *ss)
{
	if (!ss->idle)
		return;
	*(ss->prev ? &ss->prev->next : &p->idle_head) = ss->next;
	*(ss->next ? &ss->next->prev : &p->idle_tail) = ss->prev;
	ss->prev = ss->next = NULL;
	ss->idle = 0;
	p->st.idle--;
}

static void idle_append(struct wp_sym_pool *p, struct session *ss)
{
	ss->prev = p->idle_tail;
	ss->next = NULL;
	*(p->idle_tail ? &p->idle_tail->next : &p->idle_head) = ss;
	p->idle_tail = ss;
	ss->idle = 1;
	p->st.idle++;
}

/* Takes `ss` out of the pool's table and idle list (it is then the
 * caller's to free). */
static void pool_remove(struct wp_sym_pool *p, struct session *ss)
{
	struct session **pp = &p->buckets[ss->key.hash & (p->nr_buckets - 1)];
	while (*pp != ss)
		pp = &(*pp)->hnext;
	*pp = ss->hnext;
	idle_unlink(p, ss);
	p->st.sessions--;
	p->st.bytes -= ss->bytes;
	ss->pool = NULL;
}

/* Closes idle sessions, least recently used first, while over the bound. */
static void pool_trim(struct wp_sym_pool *p)
{
	while (p->idle_head && (p->st.sessions > p->max_sessions || p->st.bytes > p->max_bytes)) {
		struct session *ss = p->idle_head;
		pool_remove(p, ss);
		session_free(ss);
		p->st.evicted++;
	}
}

/* Hands session `ss`, opened for the module `k` was taken from, to the pool.
 * Returns 0, or -1 on out of memory (it stays its wp_sym's). */
static int pool_insert(struct wp_sym_pool *p, struct session *ss, const struct pool_key *k)
{
	if (p->st.sessions + 1 > p->nr_buckets) {
		size_t n = p->nr_buckets ? p->nr_buckets * 2 : 16;
		struct session **b = calloc(n, sizeof(*b));
		if (!b)
			return -1;
		for (size_t i = 0; i < p->nr_buckets; i++) {
			for (struct session *o = p->buckets[i], *next; o; o = next) {
				next = o->hnext;
				o->hnext = b[o->key.hash & (n - 1)];
				b[o->key.hash & (n - 1)] = o;
			}
		}
		free(p->buckets);
		p->buckets = b;
		p->nr_buckets = n;
	}
	size_t len = strlen(k->path) + 1;
	char *path = arena_alloc(&ss->arena, len);
	if (!path)
		return -1;
	memcpy(path, k->path, len);
	ss->key = *k;
	ss->key.path = path;
	ss->hnext = p->buckets[k->hash & (p->nr_buckets - 1)];
	p->buckets[k->hash & (p->nr_buckets - 1)] = ss;
	ss->pool = p;
	ss->bytes = session_bytes(ss);
	p->st.sessions++;
	p->st.bytes += ss->bytes;
	return 0;
}

struct wp_sym_pool *wp_sym_pool_new(size_t max_sessions, size_t max_bytes)
{
	struct wp_sym_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->max_sessions = max_sessions;
	p->max_bytes = max_bytes;
	return p;
}

void wp_sym_pool_free(struct wp_sym_pool *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nr_buckets; i++) {
		for (struct session *ss = p->buckets[i], *next; ss; ss = next) {
			next = ss->hnext;
			session_free(ss);
		}
	}
	free(p->buckets);
	free(p);
}

void wp_sym_pool_stats(const struct wp_sym_pool *p, struct wp_sym_pool_stats *out)
{
	*out = p->st;
}

/* ---- modules ------------------------------------------------------------- */

/* `s` holds `ss` (once, however many of its modules use it): a pooled
 * session is not evicted meanwhile. Returns 0, or -1 on out of memory. */
static int hold(struct wp_sym *s, struct session *ss)
{
	if (map_get(&s->held, (uintptr_t)ss))
		return 0;
	if (map_put(&s->held, (uintptr_t)ss, ss) < 0)
		return -1;
	if (ss->pool)
		idle_unlink(ss->pool, ss);
	ss->users++;
	return 0;
}

/* The end of one wp_sym's hold: a session of the pool becomes idle when no
 * wp_sym holds it any more (the pool may then close it), any other one is
 * closed. */
void wp_sym_session_release(struct session *ss)
{
	if (--ss->users > 0)
		return;
	struct wp_sym_pool *p = ss->pool;
	if (!p) {
		session_free(ss);
		return;
	}
	size_t b = session_bytes(ss);
	p->st.bytes = p->st.bytes - ss->bytes + b;
	ss->bytes = b;
	idle_append(p, ss);
	pool_trim(p);
}

static void use(struct mod *md, struct session *ss, uint64_t delta)
{
	md->ss = ss;
	md->delta = delta;
	md->state = MOD_READY;
}

/* Finds the module's session: in the pool (a session of the same file some
 * earlier wp_sym opened), else a fresh one. A module of a file another
 * module of this wp_sym already opened uses that session: the symbols and
 * DWARF of one file are loaded once, however many times a raw dump names it
 * (a crafted one naming libc 500 times made 500 copies of its debug
 * information, 8 GB). */
void wp_sym_module_open(struct wp_sym *s, struct mod *md)
{
	struct wp_sym_pool *p = s->pool;
	struct pool_key k;
	uint64_t delta = 0;
	md->state = MOD_NONE;
	int keyed = p && pool_key_of(s, &md->m, &k);
	if (keyed) {
		struct session *ps = pool_find(p, &k, &md->m, &delta);
		if (ps) {
			int mine = map_get(&s->held, (uintptr_t)ps) != NULL;
			if (hold(s, ps) < 0)
				return;
			if (!mine) {
				p->st.reused++;
				if (ps->share_hash && !map_get(&s->shared, ps->share_hash))
					(void)map_put(&s->shared, ps->share_hash, ps);
			}
			use(md, ps, delta);
			return;
		}
	}
	struct session *ss = open_session(s, &md->m);
	if (!ss)
		return;
	struct share sh;
	uint64_t h = share_key(ss, &md->m, &sh);
	struct session *host = h ? shared_find(s, h, &sh) : NULL;
	if (host) {
		session_free(ss);
		use(md, host, host->share.base - sh.base);
		return;
	}
	if (hold(s, ss) < 0) {
		session_free(ss);
		return;
	}
	if (h) {
		ss->share = sh;
		ss->share_hash = h;
		if (!map_get(&s->shared, h))
			(void)map_put(&s->shared, h, ss);
	}
	if (p) {
		p->st.opened++;
		if (keyed && poolable(ss, &k) && pool_insert(p, ss, &k) == 0)
			pool_trim(p);
		else
			p->st.unpooled++;
	}
	use(md, ss, 0);
}
