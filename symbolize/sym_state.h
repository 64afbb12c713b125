/* symbolize's state, shared by symbolize.c (the API and the module segment
 * table), session.c (per-file libdwfl sessions and the pool) and dwarf.c
 * (symbol and DWARF tables, frames of an address). Not part of the module's
 * interface; nothing here is async-signal-safe. */
#ifndef WP_SYM_STATE_H
#define WP_SYM_STATE_H

#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize.h"

/* ---- small containers ---------------------------------------------------- */

/* Open addressing, uint64 key -> non-NULL pointer; a NULL value marks a free
 * slot, so every key (address 0 too) is storable. */
struct map {
	uint64_t *keys;
	void **vals;
	size_t cap; /* power of two, or 0 */
	size_t nr;
};

static inline size_t map_slot(uint64_t k, size_t cap)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	k *= 0xc4ceb9fe1a85ec53ULL;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static inline void *map_get(const struct map *m, uint64_t key)
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

static inline void map_insert(struct map *m, uint64_t key, void *val)
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
static inline int map_put(struct map *m, uint64_t key, void *val)
{
	if ((m->nr + 1) * 2 > m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct map n = { calloc(cap, sizeof(*n.keys)), calloc(cap, sizeof(*n.vals)), cap,
				 0 };
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

static inline void map_free(struct map *m)
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

static inline void *arena_alloc(struct arena *a, size_t n)
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

static inline void arena_free(struct arena *a)
{
	while (a->head) {
		struct chunk *next = a->head->next;
		free(a->head);
		a->head = next;
	}
	a->bytes = 0;
}

/* ---- state --------------------------------------------------------------- */

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
	struct map paths; /* file name pointer -> name joined with comp_dir (arena) */
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
	struct map cu_map; /* CU DIE offset -> struct cu (arena) */
	struct map names; /* mangled string pointer -> demangled string (malloc'd) or &no_name */
	struct arena arena; /* struct cu, joined paths and scoped names, the pool key's path */
	size_t names_bytes; /* the demangled strings' */
	size_t dwarf_bytes; /* the .debug_* sections libdw holds, once loaded */
	/* Where libdwfl reported the file. */
	Dwarf_Addr lo, hi; /* extent */
	uint64_t elf_bias; /* load bias it applied (0 for ET_EXEC) */
	int exec; /* ET_EXEC: at its own addresses whatever the recorded bias */
	int relocatable; /* ET_EXEC or ET_DYN: at another bias by a plain shift */
	int src; /* SRC_* */
	struct file_id file; /* the file opened, for SRC_PATH */
	struct share share; /* identity inside a wp_sym, when share_hash */
	uint64_t share_hash; /* 0: not to be shared */
	/* Pool bookkeeping. */
	struct wp_sym_pool *pool; /* NULL: owned by the wp_sym holding it */
	struct pool_key key;
	int users; /* wp_syms holding it */
	int idle; /* on the pool's idle list (users == 0) */
	size_t bytes; /* estimate counted in the pool's total */
	struct session *hnext; /* the pool's hash chain */
	struct session *prev, *next; /* the pool's idle list */
};

/* Per-module state, filled on first use, so a dump that touches 5 of 200
 * modules opens 5 files. */
struct mod {
	struct wp_module m; /* copy; path is ours */
	int state; /* MOD_* */
	struct session *ss; /* READY: the session it resolves through (maybe opened
	                        for another module of the same file), */
	uint64_t delta; /* at addresses shifted by this */
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
	struct map cache; /* address -> struct res (arena) */
	struct map held; /* session pointer -> session: those this wp_sym holds */
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

/* ---- across the files ---------------------------------------------------- */

/* session.c: gives md its session (pooled, another module's, or new): MOD_READY, else MOD_NONE. */
void wp_sym_module_open(struct wp_sym *s, struct mod *md);

/* session.c: ends one wp_sym's hold of ss: closed, or idle in its pool (which may close it). */
void wp_sym_session_release(struct session *ss);

/* session.c: name demangled (else name itself), cached in ss by the string's address. */
const char *wp_sym_pretty_name(struct session *ss, const char *name);

/* dwarf.c: fills r's frames for runtime address addr of ss; 0, or -1 on out of memory. */
int wp_sym_resolve_frames(struct wp_sym *s, struct session *ss, uint64_t addr, struct res *r);

#endif
