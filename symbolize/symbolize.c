/* symbolize: addresses -> module, function, file:line and inlined frames with
 * libdwfl, one Dwfl per module reported at its recorded load bias. Lookups go
 * through our own sorted tables (symbols, CU ranges, subprogram ranges), not
 * dwfl_module_addrinfo/dwarf_getscopes, which are linear per address. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "symbolize.h"
#include "symbolize_int.h"

#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- small containers ---------------------------------------------------- */

/* Open addressing, uint64 key -> non-NULL pointer; a NULL value marks a free
 * slot, so every key (address 0 too) is storable. */
struct map {
	uint64_t *keys;
	void **vals;
	size_t cap; /* power of two, or 0 */
	size_t nr;
};

static size_t map_slot(uint64_t k, size_t cap)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static void *map_get(const struct map *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = map_slot(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
		if (!m->vals[i])
			return NULL;
		if (m->keys[i] == key)
			return m->vals[i];
	}
}

static void map_insert(struct map *m, uint64_t key, void *val)
{
	size_t i = map_slot(key, m->cap);
	while (m->vals[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	if (!m->vals[i])
		m->nr++;
	m->keys[i] = key;
	m->vals[i] = val;
}

/* Returns 0, or -1 on out of memory (the map is unchanged then). */
static int map_put(struct map *m, uint64_t key, void *val)
{
	if ((m->nr + 1) * 2 > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct map n = {calloc(cap, sizeof(*n.keys)), calloc(cap, sizeof(*n.vals)), cap, 0};
		if (!n.keys || !n.vals) {
			free(n.keys);
			free(n.vals);
			return -1;
		}
		for (size_t i = 0; i < m->cap; i++)
			if (m->vals[i])
				map_insert(&n, m->keys[i], m->vals[i]);
		free(m->keys);
		free(m->vals);
		*m = n;
	}
	map_insert(m, key, val);
	return 0;
}

static void map_free(struct map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

/* Bump allocator: a wp_sym's results and frames, a session's tables and
 * strings. Everything lives until its owner is freed, so one free per chunk
 * instead of one per allocation. Chunks grow from 4 KiB to 64 KiB, so a
 * session that resolves a handful of addresses stays small. */
struct chunk {
	struct chunk *next;
	size_t size, used;
	_Alignas(16) unsigned char data[];
};

struct arena {
	struct chunk *head;
	size_t bytes; /* malloc'd by the chunks, for the pool's estimate */
};

#define ARENA_FIRST (4 * 1024)
#define ARENA_CHUNK (64 * 1024)

static void *arena_alloc(struct arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct chunk *c = a->head;
	if (!c || c->size - c->used < n) {
		size_t size = c ? c->size * 2 : ARENA_FIRST;
		if (size > ARENA_CHUNK)
			size = ARENA_CHUNK;
		if (n > size)
			size = n;
		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->size = size;
		c->used = 0;
		a->bytes += sizeof(*c) + size;
		/* An oversized one-off goes behind the current chunk so the
		 * current chunk's free space is not abandoned. */
		if (a->head && size > ARENA_CHUNK) {
			c->next = a->head->next;
			a->head->next = c;
		} else {
			c->next = a->head;
			a->head = c;
		}
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

static void arena_free(struct arena *a)
{
	while (a->head) {
		struct chunk *next = a->head->next;
		free(a->head);
		a->head = next;
	}
	a->bytes = 0;
}

/* ---- state ---------------------------------------------------------------- */

/* One function symbol, runtime address. */
struct fsym {
	uint64_t start, size;
	const char *name; /* in the ELF string table, owned by libdwfl */
	int rank;         /* tie-break among aliases at one address, lower wins */
};

/* An address range and the DIE it belongs to (a CU or a subprogram). */
struct range {
	uint64_t lo, hi; /* DWARF addresses, [lo, hi) */
	Dwarf_Die die;
};

/* Per-CU tables, built once on the first lookup that lands in the CU. */
struct cu {
	Dwarf_Die cudie;
	struct range *subs; /* DW_TAG_subprogram ranges, sorted by lo; malloc'd */
	size_t nr_subs;
	Dwarf_Files *files; /* for DW_AT_call_file; NULL when absent */
	size_t nr_files;
	int version;
	int files_tried;
	size_t nr_lines; /* rows of its line table, once libdw read it (for the pool's estimate) */
	int lines_counted;
	const char *comp_dir; /* NULL when absent */
	int comp_dir_tried;
	struct map paths;  /* file name pointer -> name joined with comp_dir (arena) */
	struct map scoped; /* DIE offset -> "ns::name" for namespace members lacking a
	                      linkage name (GCC: static functions) (arena) */
};

enum { MOD_UNTRIED, MOD_READY, MOD_NONE };

/* What was opened for a session. */
enum { SRC_VDSO, SRC_PATH, SRC_MAPPED, SRC_DEBUG };

/* What makes two modules' sessions interchangeable inside one wp_sym: the
 * same file (its build-id, or its inode when it has none) reported at the
 * same place relative to the recorded bias; `base` is where it was reported. */
struct share {
	uint64_t lo, hi; /* reported extent minus the recorded bias */
	uint64_t dev, ino;
	uint32_t id_len;
	unsigned char id[WP_BUILD_ID_MAX];
	uint64_t base;
};

/* A file as stat(2) saw it: replaced or rewritten files differ in one of
 * these (all 64-bit: compared with memcmp). */
struct file_id {
	uint64_t dev, ino, size;
	int64_t mtime_sec, mtime_nsec, ctime_sec, ctime_nsec;
};

/* What a pool knows a session by, taken from the recorded module before any
 * file is opened: the recorded path and build-id; without a build-id, the
 * file now at that path (struct file_id). Plus the vDSO flag and the
 * debug-file callbacks (debuginfod or not) the session was opened with. */
struct pool_key {
	uint64_t hash;
	const char *path; /* the module's; the session's arena copy once stored */
	uint32_t id_len;
	unsigned char id[WP_BUILD_ID_MAX];
	struct file_id file; /* zero when id_len */
	int vdso;
	const Dwfl_Callbacks *callbacks;
};

/* One libdwfl session over one file, and everything built lazily from it.
 * Owned by the one wp_sym holding it, or, once handed to a pool (`pool`
 * set), by the pool, which keeps it for later wp_syms. */
struct session {
	Dwfl *dwfl; /* a session of its own: no overlap rules between modules */
	Dwfl_Module *dm;
	Dwarf *dw;
	Dwarf_Addr dwbias;
	int dw_tried;
	struct fsym *syms; /* sorted by start, one per address */
	size_t nr_syms;
	int syms_tried;
	struct range *cus; /* own CU table, only when dwfl_module_addrdie misses */
	size_t nr_cus;
	int cus_tried;
	struct map cu_map;  /* CU DIE offset -> struct cu (arena) */
	struct map names;   /* mangled string pointer -> demangled string (malloc'd) or &no_name */
	struct arena arena; /* struct cu, joined paths and scoped names, the pool key's path */
	size_t names_bytes; /* the demangled strings' */
	size_t dwarf_bytes; /* the .debug_* sections libdw holds, once loaded */
	/* Where libdwfl reported the file. */
	Dwarf_Addr lo, hi;  /* extent */
	uint64_t elf_bias;  /* load bias it applied (0 for ET_EXEC) */
	int exec;           /* ET_EXEC: at its own addresses whatever the recorded bias */
	int relocatable;    /* ET_EXEC or ET_DYN: at another bias by a plain shift */
	int src;            /* SRC_* */
	struct file_id file; /* the file opened, for SRC_PATH */
	struct share share;  /* identity inside a wp_sym, when share_hash */
	uint64_t share_hash; /* 0: not to be shared */
	/* Pool bookkeeping. */
	struct wp_sym_pool *pool; /* NULL: owned by the wp_sym holding it */
	struct pool_key key;
	int users;             /* wp_syms holding it */
	int idle;              /* on the pool's idle list (users == 0) */
	size_t bytes;          /* estimate counted in the pool's total */
	struct session *hnext; /* the pool's hash chain */
	struct session *prev, *next; /* the pool's idle list */
};

/* Per-module state, filled on first use, so a dump that touches 5 of 200
 * modules opens 5 files. */
struct mod {
	struct wp_module m;  /* copy; path is ours */
	int state;           /* MOD_* */
	struct session *ss;  /* READY: the session it resolves through (maybe opened
	                        for another module of the same file), */
	uint64_t delta;      /* at addresses shifted by this */
};

/* A cached lookup. */
struct res {
	int module;
	int nr_frames;
	uint64_t offset;
	struct wp_sym_frame *frames;
};

/* One symbolizer. Single-threaded: the caller serializes all calls. */
struct wp_sym {
	struct mod *mods;
	size_t nr_mods;
	/* The address space cut at every module's start and end: segment i is
	 * [seg_start[i], seg_start[i + 1]) (the last one unbounded), and
	 * seg_mod[i] the module find_module picks there, or -1. */
	uint64_t *seg_start;
	int *seg_mod;
	size_t nr_segs;
	struct map cache;  /* address -> struct res (arena) */
	struct map held;   /* session pointer -> session: those this wp_sym holds */
	struct map shared; /* hash of a struct share -> the held session with that identity */
	struct arena arena;
	Dwarf_Die *chain; /* scratch: subprogram then inlined subroutines, outer first */
	size_t chain_cap;
	const Dwfl_Callbacks *callbacks;
	struct wp_sym_pool *pool; /* NULL when not pooled */
};

/* Sessions kept across wp_syms: a hash table by pool key, and the idle ones
 * (no wp_sym holds them) in least recently released order. */
struct wp_sym_pool {
	size_t max_sessions, max_bytes;
	struct session **buckets;
	size_t nr_buckets; /* power of two, or 0 */
	struct session *idle_head, *idle_tail;
	struct wp_sym_pool_stats st;
};

/* Marks "not demangleable" in the names cache. */
static char no_name;

/* ---- demangling ----------------------------------------------------------- */

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

/* Demangled form of `name`, cached by the string's address (names come from
 * the session's ELF/DWARF string tables, so one function keeps one pointer). */
static const char *pretty_name(struct session *ss, const char *name)
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

/* ---- sessions ------------------------------------------------------------- */

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

/* The size of the .debug_* sections of the file libdw reads, as libdw holds
 * them (it decompresses compressed ones when it opens the file). */
static size_t dwarf_size(Dwarf *dw)
{
	Elf *e = dwarf_getelf(dw);
	size_t shstrndx, n = 0;
	if (!e || elf_getshdrstrndx(e, &shstrndx) != 0)
		return 0;
	for (Elf_Scn *scn = NULL; (scn = elf_nextscn(e, scn));) {
		GElf_Shdr sh;
		const char *name;
		if (gelf_getshdr(scn, &sh) && sh.sh_type != SHT_NOBITS &&
		    (name = elf_strptr(e, shstrndx, sh.sh_name)) && !strncmp(name, ".debug_", 7))
			n += sh.sh_size;
	}
	return n;
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
	if (!vdso && m->path && m->path[0] && (fd = open_regular(m->path, &ss->file)) >= 0 &&
	    try_source(s, ss, m, m->path, fd, SRC_PATH))
		return ss;
	/* Deleted or replaced on disk but still mapped here: the mapping
	 * still reaches the original file. */
	if (!vdso && (fd = wp_sym_mapped_fd(m)) >= 0 &&
	    try_source(s, ss, m, m->path ? m->path : "[mapped]", fd, SRC_MAPPED))
		return ss;
	/* Missing or replaced: the separate debug file of the recorded build
	 * has the same program headers, so it stands in for the binary. */
	char path[WP_BUILD_ID_MAX * 2 + 64];
	if (wp_sym_build_id_debug_path(m->build_id, m->build_id_len, path, sizeof(path)) == 0 &&
	    access(path, R_OK) == 0 && try_source(s, ss, m, path, -1, SRC_DEBUG))
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

/* ---- the pool ------------------------------------------------------------- */

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

/* ---- modules -------------------------------------------------------------- */

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
static void release(struct session *ss)
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
static void open_module(struct wp_sym *s, struct mod *md)
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

/* Among aliases, the name people call: fewest leading underscores, so
 * "getpid" over "__getpid" and "__GI_getpid". */
static int underscores(const char *name)
{
	int u = 0;
	while (name && name[u] == '_' && u < 3)
		u++;
	return name ? u : 9;
}

/* Aliases at one address: sized first, then underscores, then global over
 * weak over local. */
static int sym_rank(const GElf_Sym *sym, const char *name)
{
	int u = underscores(name);
	int bind = GELF_ST_BIND(sym->st_info);
	int b = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
	return (sym->st_size ? 0 : 100) + u * 10 + b;
}

static int fsym_cmp(const void *a, const void *b)
{
	const struct fsym *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank - y->rank;
	return strcmp(x->name, y->name); /* qsort is not stable: stay deterministic */
}

/* Sorted function symbols of the module (symtab, else dynsym, plus
 * .gnu_debugdata), built once: dwfl_module_addrinfo scans linearly. */
static void build_syms(struct session *ss)
{
	ss->syms_tried = 1;
	int n = dwfl_module_getsymtab(ss->dm);
	if (n <= 1)
		return;
	struct fsym *v = malloc((size_t)n * sizeof(*v));
	if (!v)
		return;
	size_t nr = 0;
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		const char *name =
		    dwfl_module_getsym_info(ss->dm, i, &sym, &addr, &shndx, NULL, NULL);
		if (!name || !name[0] || shndx == SHN_UNDEF || shndx == (GElf_Word)-1)
			continue;
		int type = GELF_ST_TYPE(sym.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		v[nr++] = (struct fsym){addr, sym.st_size, name, sym_rank(&sym, name)};
	}
	qsort(v, nr, sizeof(*v), fsym_cmp);
	size_t out = 0;
	for (size_t i = 0; i < nr; i++)
		if (!out || v[out - 1].start != v[i].start)
			v[out++] = v[i];
	ss->syms = v;
	ss->nr_syms = out;
}

/* The symbol containing addr, or the nearest sizeless one below it. */
static const struct fsym *find_sym(struct session *ss, uint64_t addr)
{
	if (!ss->syms_tried)
		build_syms(ss);
	size_t lo = 0, hi = ss->nr_syms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ss->syms[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	/* A few steps back for symbols nested in a larger one. */
	for (size_t j = lo, k = 0; j-- > 0 && k < 8; k++)
		if (addr < ss->syms[j].start + ss->syms[j].size)
			return &ss->syms[j];
	return ss->syms[lo - 1].size ? NULL : &ss->syms[lo - 1];
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

/* ---- DWARF ---------------------------------------------------------------- */

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	if (x->hi != y->hi)
		return x->hi < y->hi ? -1 : 1;
	Dwarf_Off ox = dwarf_dieoffset((Dwarf_Die *)&x->die);
	Dwarf_Off oy = dwarf_dieoffset((Dwarf_Die *)&y->die);
	return ox < oy ? -1 : ox > oy;
}

/* Sorts, then keeps one DIE per identical range: GNU as 2.40 emits a
 * subprogram per alias (__getpid, __GI___getpid, getpid, __GI_getpid). */
static size_t sort_ranges(struct range *v, size_t n)
{
	qsort(v, n, sizeof(*v), range_cmp);
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		if (out && v[out - 1].lo == v[i].lo && v[out - 1].hi == v[i].hi) {
			if (underscores(dwarf_diename(&v[i].die)) <
			    underscores(dwarf_diename(&v[out - 1].die)))
				v[out - 1] = v[i];
			continue;
		}
		v[out++] = v[i];
	}
	return out;
}

static const struct range *find_range(const struct range *v, size_t n, uint64_t pc)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid].lo <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t j = lo, k = 0; j-- > 0 && k < 8; k++)
		if (pc < v[j].hi)
			return &v[j];
	return NULL;
}

struct range_vec {
	struct range *v;
	size_t nr, cap;
	int oom;
};

static void add_ranges(struct range_vec *rv, Dwarf_Die *die)
{
	Dwarf_Addr base, lo, hi;
	ptrdiff_t off = 0;
	while ((off = dwarf_ranges(die, off, &base, &lo, &hi)) > 0) {
		if (hi <= lo)
			continue;
		if (rv->nr == rv->cap) {
			size_t cap = rv->cap ? rv->cap * 2 : 64;
			struct range *v = realloc(rv->v, cap * sizeof(*v));
			if (!v) {
				rv->oom = 1;
				return;
			}
			rv->v = v;
			rv->cap = cap;
		}
		rv->v[rv->nr++] = (struct range){lo, hi, *die};
	}
}

struct collect {
	struct session *ss;
	struct cu *cu;
	struct range_vec rv;
};

/* "prefix" + "name" + "::" or the qualified name itself, in the arena. */
static char *join_scope(struct session *ss, const char *prefix, const char *name, int sep)
{
	size_t a = prefix ? strlen(prefix) : 0, b = strlen(name);
	char *p = arena_alloc(&ss->arena, a + b + 3);
	if (!p)
		return NULL;
	if (a)
		memcpy(p, prefix, a);
	memcpy(p + a, name, b);
	memcpy(p + a + b, sep ? "::" : "", sep ? 3 : 1);
	return p;
}

/* Concrete subprograms sit at CU or namespace level (GCC, clang); class
 * bodies only hold declarations, so they are not walked. Functions nested in
 * functions (GNU C) are not found and fall back to the ELF symbol. Namespace
 * members without a linkage name get their qualified name recorded, as
 * libdw cannot walk from a DIE to its parent. */
static void collect_subs(struct collect *c, Dwarf_Die *parent, const char *prefix)
{
	Dwarf_Die child;
	if (dwarf_child(parent, &child) != 0)
		return;
	do {
		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram:
			add_ranges(&c->rv, &child);
			if (prefix && !dwarf_hasattr(&child, DW_AT_linkage_name) &&
			    dwarf_hasattr(&child, DW_AT_name)) {
				const char *name = dwarf_diename(&child);
				char *q = name ? join_scope(c->ss, prefix, name, 0) : NULL;
				if (q && map_put(&c->cu->scoped, dwarf_dieoffset(&child), q) < 0)
					c->rv.oom = 1;
			}
			break;
		case DW_TAG_namespace:
		case DW_TAG_module: {
			const char *name = dwarf_diename(&child);
			char *p =
			    join_scope(c->ss, prefix, name ? name : "(anonymous namespace)", 1);
			if (!p)
				c->rv.oom = 1;
			else
				collect_subs(c, &child, p);
			break;
		}
		}
	} while (!c->rv.oom && dwarf_siblingof(&child, &child) == 0);
}

/* Own CU table for modules whose .debug_aranges misses CUs (clang does not
 * emit it by default), which dwfl_module_addrdie relies on. */
static void build_cus(struct session *ss)
{
	ss->cus_tried = 1;
	struct range_vec rv = {0};
	Dwarf_CU *cu = NULL;
	uint8_t type;
	Dwarf_Die cudie;
	while (!rv.oom && dwarf_get_units(ss->dw, cu, &cu, NULL, &type, &cudie, NULL) == 0)
		if (type == DW_UT_compile)
			add_ranges(&rv, &cudie);
	if (rv.oom) {
		free(rv.v);
		return;
	}
	ss->cus = rv.v;
	ss->nr_cus = sort_ranges(rv.v, rv.nr);
}

/* The CU tables for runtime address addr, NULL when no CU covers it.
 * Returns -1 on out of memory. */
static int get_cu(struct session *ss, uint64_t addr, struct cu **out)
{
	*out = NULL;
	Dwarf_Addr bias;
	Dwarf_Die *cudie = dwfl_module_addrdie(ss->dm, addr, &bias);
	/* .debug_aranges may cover only some units (a Go binary lists just
	 * its cgo C units), and libdwfl then answers with the unit below the
	 * address: take it only if it really holds the address. */
	if (cudie && dwarf_haspc(cudie, addr - bias) <= 0)
		cudie = NULL;
	if (!cudie) {
		if (!ss->cus_tried)
			build_cus(ss);
		const struct range *r = find_range(ss->cus, ss->nr_cus, addr - ss->dwbias);
		if (!r)
			return 0;
		cudie = (Dwarf_Die *)&r->die;
	}
	uint64_t key = dwarf_dieoffset(cudie);
	struct cu *cu = map_get(&ss->cu_map, key);
	if (cu) {
		*out = cu;
		return 0;
	}
	cu = arena_alloc(&ss->arena, sizeof(*cu));
	if (!cu)
		return -1;
	memset(cu, 0, sizeof(*cu));
	cu->cudie = *cudie;
	struct collect c = {ss, cu, {0}};
	collect_subs(&c, &cu->cudie, NULL);
	if (c.rv.oom || map_put(&ss->cu_map, key, cu) < 0) {
		free(c.rv.v);
		map_free(&cu->scoped);
		return -1;
	}
	cu->subs = c.rv.v;
	cu->nr_subs = sort_ranges(c.rv.v, c.rv.nr);
	*out = cu;
	return 0;
}

static int push_chain(struct wp_sym *s, size_t *depth, Dwarf_Die *die)
{
	if (*depth == s->chain_cap) {
		size_t cap = s->chain_cap ? s->chain_cap * 2 : 16;
		Dwarf_Die *c = realloc(s->chain, cap * sizeof(*c));
		if (!c)
			return -1;
		s->chain = c;
		s->chain_cap = cap;
	}
	s->chain[(*depth)++] = *die;
	return 0;
}

/* Descends from `parent` towards pc through the scopes that contain it,
 * pushing each inlined subroutine. Blocks without any pc attribute are looked
 * through, as their children may still carry ranges. Returns 1 when a child
 * scope contained pc, 0 if none, -1 on out of memory. */
static int descend(struct wp_sym *s, Dwarf_Die *parent, Dwarf_Addr pc, size_t *depth)
{
	Dwarf_Die child;
	if (dwarf_child(parent, &child) != 0)
		return 0;
	do {
		int tag = dwarf_tag(&child);
		if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_lexical_block &&
		    tag != DW_TAG_try_block && tag != DW_TAG_catch_block && tag != DW_TAG_with_stmt)
			continue;
		int has = dwarf_haspc(&child, pc);
		if (has > 0) {
			if (tag == DW_TAG_inlined_subroutine && push_chain(s, depth, &child) < 0)
				return -1;
			return descend(s, &child, pc, depth) < 0 ? -1 : 1;
		}
		if (has == 0 && tag != DW_TAG_inlined_subroutine &&
		    !dwarf_hasattr(&child, DW_AT_low_pc) && !dwarf_hasattr(&child, DW_AT_ranges)) {
			int r = descend(s, &child, pc, depth);
			if (r != 0)
				return r;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return 0;
}

/* Linkage name demangled (qualified, with parameters, for C++), else the
 * plain name, both through abstract origins and specifications; a namespace
 * member without linkage name gets the qualified name recorded for it. */
static const char *die_name(struct session *ss, struct cu *cu, Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *linkage = NULL;
	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
		linkage = dwarf_formstring(&a);
	if (linkage) {
		const char *p = pretty_name(ss, linkage);
		if (p != linkage)
			return p;
	}
	/* The DIE carrying the name, as dwarf_attr_integrate finds it. */
	Dwarf_Die d = *die;
	for (int i = 0; i < 8 && !dwarf_hasattr(&d, DW_AT_name); i++) {
		Dwarf_Attribute *r = dwarf_attr(&d, DW_AT_abstract_origin, &a);
		if (!r)
			r = dwarf_attr(&d, DW_AT_specification, &a);
		if (!r || !dwarf_formref_die(r, &d))
			break;
	}
	/* Same CU only: offsets of another unit (or the dwz file) differ. */
	if (cu->scoped.nr && d.cu == cu->cudie.cu) {
		const char *q = map_get(&cu->scoped, dwarf_dieoffset(&d));
		if (q)
			return q;
	}
	const char *name = dwarf_diename(&d);
	return name ? name : linkage;
}

/* Removes "." and "dir/.." components in place; keeps leading ".." of a
 * relative path, since nothing above it is known. */
static void normalize_path(char *p)
{
	int abs = p[0] == '/';
	char *out = p + abs, *in = p + abs;
	char *base = out; /* start of the part that ".." may remove */
	/* Writing never passes the read position, but a component's trailing
	 * '/' may land on the terminator: decide "last" before writing. */
	for (int last = !*in; !last;) {
		char *end = strchrnul(in, '/');
		size_t len = end - in;
		last = !*end;
		char *next = end + !last;
		if (len == 0 || (len == 1 && in[0] == '.')) {
			/* skip */
		} else if (len == 2 && in[0] == '.' && in[1] == '.') {
			if (out > base) {
				out--; /* the '/' written after the last component */
				while (out > base && out[-1] != '/')
					out--;
			} else if (!abs) {
				memcpy(out, "../", 3);
				out += 3;
				base = out;
			}
		} else {
			memmove(out, in, len);
			out += len;
			*out++ = '/';
		}
		in = next;
	}
	if (out > p + abs && out[-1] == '/')
		out--;
	if (out == p)
		*out++ = '.';
	*out = 0;
}

/* `name` from the CU's line table, joined with DW_AT_comp_dir when relative
 * ("test/unit/x.c" -> "/work/main/test/unit/x.c"), cached per CU. Falls
 * back to `name` itself when out of memory. */
static const char *cu_path(struct session *ss, struct cu *cu, const char *name)
{
	if (!name || name[0] == '/' || name[0] == '<')
		return name;
	if (!cu->comp_dir_tried) {
		cu->comp_dir_tried = 1;
		Dwarf_Attribute a;
		cu->comp_dir = dwarf_formstring(dwarf_attr(&cu->cudie, DW_AT_comp_dir, &a));
	}
	if (!cu->comp_dir || !cu->comp_dir[0])
		return name;
	char *p = map_get(&cu->paths, (uintptr_t)name);
	if (p)
		return p;
	size_t a = strlen(cu->comp_dir), b = strlen(name);
	p = arena_alloc(&ss->arena, a + b + 2);
	if (!p)
		return name;
	memcpy(p, cu->comp_dir, a);
	p[a] = '/';
	memcpy(p + a + 1, name, b + 1);
	normalize_path(p);
	if (map_put(&cu->paths, (uintptr_t)name, p) < 0)
		return name;
	return p;
}

static const char *cu_file(struct session *ss, struct cu *cu, Dwarf_Word idx)
{
	if (!cu->files_tried) {
		cu->files_tried = 1;
		Dwarf_Half version = 0;
		if (dwarf_getsrcfiles(&cu->cudie, &cu->files, &cu->nr_files) != 0) {
			cu->files = NULL;
			cu->nr_files = 0;
		}
		if (dwarf_cu_info(cu->cudie.cu, &version, NULL, NULL, NULL, NULL, NULL, NULL) == 0)
			cu->version = version;
	}
	/* Before DWARF 5, file index 0 means "no file". */
	if (!cu->files || idx >= cu->nr_files || (idx == 0 && cu->version < 5))
		return NULL;
	return cu_path(ss, cu, dwarf_filesrc(cu->files, idx, NULL, NULL));
}

static int attr_int(Dwarf_Die *die, unsigned int name)
{
	Dwarf_Attribute a;
	Dwarf_Word w;
	if (dwarf_formudata(dwarf_attr(die, name, &a), &w) != 0 || w > 0x7fffffff)
		return 0;
	return (int)w;
}

static void line_at(struct session *ss, struct cu *cu, Dwarf_Addr pc, struct wp_sym_frame *f)
{
	Dwarf_Line *line = dwarf_getsrc_die(&cu->cudie, pc);
	if (!cu->lines_counted) {
		/* The table dwarf_getsrc_die just read (or failed to), cached. */
		Dwarf_Lines *lines;
		cu->lines_counted = 1;
		if (dwarf_getsrclines(&cu->cudie, &lines, &cu->nr_lines) != 0)
			cu->nr_lines = 0;
	}
	if (!line)
		return;
	int n;
	f->file = cu_path(ss, cu, dwarf_linesrc(line, NULL, NULL));
	if (dwarf_lineno(line, &n) == 0 && n > 0)
		f->line = n;
	if (dwarf_linecol(line, &n) == 0 && n > 0)
		f->column = n;
}

/* Fills r->frames for an address inside a reported module. Returns -1 on out
 * of memory. */
static int resolve_frames(struct wp_sym *s, struct session *ss, uint64_t addr, struct res *r)
{
	if (!ss->dw_tried) {
		ss->dw_tried = 1;
		ss->dw = dwfl_module_getdwarf(ss->dm, &ss->dwbias);
		if (ss->dw)
			ss->dwarf_bytes = dwarf_size(ss->dw);
	}
	struct cu *cu = NULL;
	size_t depth = 0;
	Dwarf_Addr pc = addr - ss->dwbias;
	if (ss->dw) {
		if (get_cu(ss, addr, &cu) < 0)
			return -1;
		const struct range *sub = cu ? find_range(cu->subs, cu->nr_subs, pc) : NULL;
		if (sub) {
			Dwarf_Die die = sub->die;
			if (push_chain(s, &depth, &die) < 0 || descend(s, &die, pc, &depth) < 0)
				return -1;
		}
	}

	const struct fsym *sym = NULL;
	if (!depth) {
		sym = find_sym(ss, addr);
		if (!sym)
			return 0;
		depth = 1;
	}
	struct wp_sym_frame *f = arena_alloc(&s->arena, depth * sizeof(*f));
	if (!f)
		return -1;
	memset(f, 0, depth * sizeof(*f));
	if (sym) {
		f[0].function = pretty_name(ss, sym->name);
		if (cu)
			line_at(ss, cu, pc, &f[0]);
	} else {
		/* chain[0] is the subprogram, chain[depth-1] the innermost
		 * inline; frames go innermost first. */
		for (size_t i = 0; i < depth; i++) {
			Dwarf_Die *d = &s->chain[depth - 1 - i];
			f[i].function = die_name(ss, cu, d);
			f[i].inlined = i + 1 < depth;
			if (i == 0) {
				line_at(ss, cu, pc, &f[i]);
			} else {
				/* Where the next inner frame was inlined into this one. */
				Dwarf_Die *site = &s->chain[depth - i];
				Dwarf_Attribute a;
				Dwarf_Word w;
				if (dwarf_formudata(dwarf_attr(site, DW_AT_call_file, &a), &w) == 0)
					f[i].file = cu_file(ss, cu, w);
				f[i].line = attr_int(site, DW_AT_call_line);
				f[i].column = attr_int(site, DW_AT_call_column);
			}
		}
		if (!f[depth - 1].function && (sym = find_sym(ss, addr)))
			f[depth - 1].function = pretty_name(ss, sym->name);
		if (!f[depth - 1].function)
			return 0; /* contract: frames only when the function is known */
	}
	r->frames = f;
	r->nr_frames = (int)depth;
	return 0;
}

/* ---- API ------------------------------------------------------------------ */

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
		open_module(s, md);
	if (md->state != MOD_READY)
		return r;
	/* the same place in the session's report of the file */
	if (resolve_frames(s, md->ss, addr + md->delta, r) < 0)
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
			release(s->held.vals[j]);
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
