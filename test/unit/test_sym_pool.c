/* Unit test for the symbolizer's session pool (wp_sym_pool): symbolizes
 * addresses of this process (its own functions, libc's, the vDSO's) through
 * pooled symbolizers opened one after another and checks that every result
 * (module, offset, functions, files, lines, columns, inlined frames) is the
 * one an unpooled symbolizer gives, that sessions are reused, at another
 * load bias too, that the bound evicts, and that sessions opened from a
 * mapping or without a build-id are reused only under a trusted identity. */
#include <dlfcn.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <gelf.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../preload/wallprof.h"
#include "../../symbolize/symbolize.h"
#include "check.h"

/* ---- code with inlined frames ---------------------------------------------- */

static volatile int counter;
static void *leaf_ra;

__attribute__((noinline, noclone)) static void leaf(void)
{
	leaf_ra = __builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
}

static inline __attribute__((always_inline)) void middle(void)
{
	leaf();
	counter++;
}

__attribute__((noinline, noclone)) void pool_outer(void)
{
	middle();
	counter++;
}

/* ---- addresses and reference results --------------------------------------- */

/* A result copied out of its symbolizer (strings duplicated). */
struct ref {
	int module;
	uint64_t offset;
	int nr_frames;
	struct wp_sym_frame *frames;
};

struct addrs {
	uint64_t *v;
	int *mod; /* the module each address was taken from */
	size_t nr, cap;
};

static void add_addr(struct addrs *a, uint64_t addr, int mod)
{
	if (a->nr == a->cap) {
		a->cap = a->cap ? a->cap * 2 : 256;
		a->v = realloc(a->v, a->cap * sizeof(*a->v));
		a->mod = realloc(a->mod, a->cap * sizeof(*a->mod));
		if (!a->v || !a->mod)
			abort();
	}
	a->v[a->nr] = addr;
	a->mod[a->nr++] = mod;
}

/* Every `stride`th sized function of module `i`, at its middle, read with a
 * libdwfl session of our own (the symbolizer under test stays cold). */
static void add_functions(struct addrs *a, const struct wp_module *m, int i, int stride)
{
	static const Dwfl_Callbacks cb = { .find_debuginfo = dwfl_build_id_find_debuginfo };
	Dwfl *d = dwfl_begin(&cb);
	dwfl_report_begin(d);
	Dwfl_Module *dm = dwfl_report_elf(d, "m", m->path, -1, m->bias, true);
	dwfl_report_end(d, NULL, NULL);
	int n = dm ? dwfl_module_getsymtab(dm) : 0;
	for (int k = 1, f = 0; k < n; k++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		if (!dwfl_module_getsym_info(dm, k, &sym, &addr, &shndx, NULL, NULL) ||
		    GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_size || shndx == SHN_UNDEF)
			continue;
		if (f++ % stride == 0)
			add_addr(a, addr + sym.st_size / 2, i);
	}
	dwfl_end(d);
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void copy_result(struct ref *r, const struct wp_sym_result *res)
{
	r->module = res->module;
	r->offset = res->module_offset;
	r->nr_frames = res->nr_frames;
	r->frames = calloc(res->nr_frames ? res->nr_frames : 1, sizeof(*r->frames));
	for (int i = 0; i < res->nr_frames; i++) {
		r->frames[i] = res->frames[i];
		r->frames[i].function = dup_or_null(res->frames[i].function);
		r->frames[i].file = dup_or_null(res->frames[i].file);
	}
}

static void free_refs(struct ref *refs, size_t nr)
{
	for (size_t i = 0; i < nr; i++) {
		for (int k = 0; k < refs[i].nr_frames; k++) {
			free((char *)refs[i].frames[k].function);
			free((char *)refs[i].frames[k].file);
		}
		free(refs[i].frames);
	}
	free(refs);
}

static int same_str(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

/* Whether `got` is `want`, but in module `module`. */
static int same_result(const struct ref *want, const struct wp_sym_result *got, int module)
{
	if (got->module != module || got->module_offset != want->offset ||
	    got->nr_frames != want->nr_frames)
		return 0;
	for (int i = 0; i < want->nr_frames; i++) {
		const struct wp_sym_frame *a = &want->frames[i], *b = &got->frames[i];
		if (!same_str(a->function, b->function) || !same_str(a->file, b->file) ||
		    a->line != b->line || a->column != b->column || a->inlined != b->inlined)
			return 0;
	}
	return 1;
}

/* ---- fixture --------------------------------------------------------------- */

static struct wp_module *mods;
static size_t nr_mods;
static int libc_mod = -1, main_mod = -1, vdso_mod = -1;
static struct addrs all;    /* main executable, libc, vDSO */
static struct ref *refs;    /* unpooled results of `all` */
static size_t nr_mismatch;  /* only the first is printed */

static struct wp_module *copy_mods(const struct wp_module *src, size_t n)
{
	struct wp_module *v = calloc(n, sizeof(*v));
	for (size_t i = 0; i < n; i++) {
		v[i] = src[i];
		v[i].path = src[i].path ? strdup(src[i].path) : NULL;
	}
	return v;
}

static void free_mods(struct wp_module *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].path);
	free(v);
}

/* Looks up the addresses of `all` from module `only` (every one: -1) in
 * `s`, shifted by `shift` for modules that moved, with module indexes
 * shifted by `mod_shift`; returns how many results differ from refs. */
static size_t compare(struct wp_sym *s, int only, uint64_t shift, const int *moved, int mod_shift)
{
	size_t bad = 0;
	for (size_t i = 0; i < all.nr; i++) {
		int m = all.mod[i];
		if (only >= 0 && m != only)
			continue;
		int mv = moved && moved[m];
		struct wp_sym_result r = { .module = -1 };
		if (wp_sym_lookup(s, all.v[i] + (mv ? shift : 0), &r) != 0 ||
		    !same_result(&refs[i], &r, refs[i].module + (mv ? mod_shift : 0))) {
			if (!nr_mismatch++)
				printf("  mismatch at %#llx (module %d): %d frames, first %s\n",
				       (unsigned long long)all.v[i], m, r.nr_frames,
				       r.nr_frames ? r.frames[0].function : "-");
			bad++;
		}
	}
	return bad;
}

static struct wp_sym_pool_stats stats(const struct wp_sym_pool *p)
{
	struct wp_sym_pool_stats st;
	wp_sym_pool_stats(p, &st);
	return st;
}

/* One pooled "dump" over `v`: open, compare, close. */
static size_t pooled_dump(struct wp_sym_pool *p, const struct wp_module *v, size_t n, int only)
{
	struct wp_sym *s = wp_sym_open_pooled(p, v, n);
	if (!s)
		return (size_t)-1;
	size_t bad = compare(s, only, 0, NULL, 0);
	wp_sym_close(s);
	return bad;
}

/* The number of frames the first address of module `m` gets in a pooled
 * symbolizer over `v` (-1 on error or when it is not found in module m). */
static int first_result_of(struct wp_sym_pool *p, const struct wp_module *v, int m)
{
	size_t first = 0;
	while (first < all.nr && all.mod[first] != m)
		first++;
	struct wp_sym *s = wp_sym_open_pooled(p, v, nr_mods);
	struct wp_sym_result r;
	int n = -1;
	if (s && first < all.nr && wp_sym_lookup(s, all.v[first], &r) == 0 && r.module == m)
		n = r.nr_frames;
	wp_sym_close(s);
	return n;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_reference(void)
{
	struct wp_sym *s = wp_sym_open(mods, nr_mods);
	size_t inlined = 0, lines = 0, libc_lines = 0;
	refs = calloc(all.nr, sizeof(*refs));
	REQ(s && refs);
	for (size_t i = 0; s && i < all.nr; i++) {
		struct wp_sym_result r = { .module = -1 };
		REQ(wp_sym_lookup(s, all.v[i], &r) == 0);
		copy_result(&refs[i], &r);
		inlined += r.nr_frames > 1;
		lines += r.nr_frames && r.frames[0].line;
		libc_lines += all.mod[i] == libc_mod && r.nr_frames && r.frames[0].line;
	}
	wp_sym_close(s);
	printf("  %zu addresses, %zu with inlined frames, %zu with a line (%zu in libc)\n", all.nr,
	       inlined, lines, libc_lines);
	/* The comparison covers inlined frames, lines and libc's DWARF
	 * (libc6-dbg), and the leaf's call inlined into pool_outer. */
	REQ(inlined > 10 && lines > all.nr / 2 && libc_lines > 0);
	REQ(refs[0].nr_frames == 2 && same_str(refs[0].frames[0].function, "middle") &&
	    refs[0].frames[0].inlined && same_str(refs[0].frames[1].function, "pool_outer"));
	report("unpooled reference results, inlined frames among them");
}

static void test_pooled_same(void)
{
	struct wp_sym_pool *p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	REQ(p);
	REQ(pooled_dump(p, mods, nr_mods, -1) == 0);
	struct wp_sym_pool_stats a = stats(p);
	printf("  first: %zu sessions, %llu opened, %llu reused, %.1f MiB\n", a.sessions,
	       (unsigned long long)a.opened, (unsigned long long)a.reused,
	       (double)a.bytes / (1 << 20));
	REQ(a.opened >= 2 && a.reused == 0 && a.sessions == a.opened - a.unpooled &&
	    a.idle == a.sessions && a.evicted == 0);
	report("pooled results are the unpooled ones");

	REQ(pooled_dump(p, mods, nr_mods, -1) == 0);
	struct wp_sym_pool_stats b = stats(p);
	printf("  second: %llu opened, %llu reused\n", (unsigned long long)b.opened,
	       (unsigned long long)b.reused);
	REQ(b.opened == a.opened && b.reused == a.sessions && b.sessions == a.sessions &&
	    b.evicted == 0);
	report("a second symbolizer reuses every session, same results");
	wp_sym_pool_free(p);
}

/* The modules at another load bias: every ET_DYN one moved by `shift`. */
static struct wp_module *shifted(uint64_t shift, int *moved)
{
	struct wp_module *v = copy_mods(mods, nr_mods);
	for (size_t i = 0; i < nr_mods; i++) {
		moved[i] = v[i].bias != 0; /* a bias of 0: ET_EXEC, at its own addresses */
		if (moved[i]) {
			v[i].bias += shift;
			v[i].start += shift;
			v[i].end += shift;
		}
	}
	return v;
}

static void test_other_bias(void)
{
	const uint64_t shift = 0x100000000000ull;
	int *moved = calloc(nr_mods, sizeof(*moved));
	struct wp_module *v = shifted(shift, moved);
	REQ(moved[libc_mod]);

	/* Pooled at the recorded bias, reused at the other, and back. */
	struct wp_sym_pool *p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	REQ(pooled_dump(p, mods, nr_mods, -1) == 0);
	struct wp_sym_pool_stats a = stats(p);
	struct wp_sym *s = wp_sym_open_pooled(p, v, nr_mods);
	REQ(s && compare(s, -1, shift, moved, 0) == 0);
	wp_sym_close(s);
	struct wp_sym_pool_stats b = stats(p);
	REQ(b.opened == a.opened && b.reused == a.reused + a.sessions);
	REQ(pooled_dump(p, mods, nr_mods, -1) == 0 && stats(p).opened == a.opened);
	wp_sym_pool_free(p);
	report("a session pooled at one load bias resolves another dump at another");

	/* The other order. */
	p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	s = wp_sym_open_pooled(p, v, nr_mods);
	REQ(s && compare(s, -1, shift, moved, 0) == 0);
	wp_sym_close(s);
	a = stats(p);
	REQ(pooled_dump(p, mods, nr_mods, -1) == 0);
	b = stats(p);
	REQ(b.opened == a.opened && b.reused == a.reused + a.sessions);
	wp_sym_pool_free(p);
	report("and the other way round");

	/* Both in one dump (the file mapped twice), pooled and not. */
	struct wp_module *both = calloc(2 * nr_mods, sizeof(*both));
	memcpy(both, mods, nr_mods * sizeof(*both));
	memcpy(both + nr_mods, v, nr_mods * sizeof(*both));
	p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	for (int pooled = 0; pooled < 2; pooled++) {
		for (int round = 0; round < 2; round++) {
			s = wp_sym_open_pooled(pooled ? p : NULL, both, 2 * nr_mods);
			REQ(s && compare(s, -1, 0, NULL, 0) == 0);
			REQ(s && compare(s, -1, shift, moved, (int)nr_mods) == 0);
			wp_sym_close(s);
		}
	}
	a = stats(p);
	REQ(a.reused >= a.sessions && a.evicted == 0);
	wp_sym_pool_free(p);
	free(both);
	report("one dump with the same files at two load biases, pooled and not");
	free_mods(v, nr_mods);
	free(moved);
}

static void test_eviction(void)
{
	/* One session at most: libc, then the executable, then libc again. */
	struct wp_sym_pool *p = wp_sym_pool_new(1, SIZE_MAX);
	REQ(pooled_dump(p, mods, nr_mods, libc_mod) == 0);
	struct wp_sym_pool_stats a = stats(p);
	REQ(a.opened == 1 && a.sessions == 1 && a.evicted == 0);
	REQ(pooled_dump(p, mods, nr_mods, main_mod) == 0);
	a = stats(p);
	REQ(a.opened == 2 && a.sessions == 1 && a.evicted == 1);
	REQ(pooled_dump(p, mods, nr_mods, libc_mod) == 0);
	a = stats(p);
	REQ(a.opened == 3 && a.reused == 0 && a.sessions == 1 && a.evicted == 2);
	REQ(pooled_dump(p, mods, nr_mods, libc_mod) == 0);
	a = stats(p);
	REQ(a.opened == 3 && a.reused == 1 && a.sessions == 1 && a.evicted == 2);
	/* Every module in one dump: over the bound while in use, then trimmed. */
	for (int round = 0; round < 2; round++)
		REQ(pooled_dump(p, mods, nr_mods, -1) == 0);
	a = stats(p);
	REQ(a.sessions == 1 && a.idle == 1 && a.evicted >= 3);
	wp_sym_pool_free(p);
	report("a bound of one session evicts the least recently used, results unchanged");

	/* A bound of 0 sessions, and one of 1 byte: nothing stays idle. */
	for (int k = 0; k < 2; k++) {
		p = k ? wp_sym_pool_new(SIZE_MAX, 1) : wp_sym_pool_new(0, SIZE_MAX);
		for (int round = 0; round < 2; round++)
			REQ(pooled_dump(p, mods, nr_mods, -1) == 0);
		a = stats(p);
		REQ(a.sessions == 0 && a.bytes == 0 && a.reused == 0 && a.opened >= 4 &&
		    a.evicted == a.opened - a.unpooled);
		wp_sym_pool_free(p);
	}
	report("bounds of 0 sessions and of 1 byte keep nothing idle");

	/* A session two open symbolizers hold outlives the first's close. */
	p = wp_sym_pool_new(0, 0);
	struct wp_sym *s1 = wp_sym_open_pooled(p, mods, nr_mods);
	struct wp_sym *s2 = wp_sym_open_pooled(p, mods, nr_mods);
	struct wp_sym_result r1, r2;
	size_t first = 0;
	while (first < all.nr && all.mod[first] != libc_mod)
		first++;
	REQ(s1 && s2 && first < all.nr);
	REQ(wp_sym_lookup(s1, all.v[first], &r1) == 0 &&
	    same_result(&refs[first], &r1, refs[first].module));
	REQ(wp_sym_lookup(s2, all.v[first], &r2) == 0 &&
	    same_result(&refs[first], &r2, refs[first].module));
	a = stats(p);
	REQ(a.opened == 1 && a.reused == 1 && a.sessions == 1 && a.idle == 0);
	wp_sym_close(s1);
	a = stats(p);
	REQ(a.sessions == 1 && a.evicted == 0);
	/* s2's strings and session are still good (ASan would tell). */
	REQ(same_result(&refs[first], &r2, refs[first].module) &&
	    compare(s2, libc_mod, 0, NULL, 0) == 0);
	wp_sym_close(s2);
	a = stats(p);
	REQ(a.sessions == 0 && a.evicted == 1);
	wp_sym_pool_free(p);
	report("a session in use is not evicted; the last close lets it go");
}

/* Copies `from` to `to` (a new file, then renamed over `to`: a new inode). */
static int copy_file(const char *from, const char *to)
{
	char tmp[PATH_MAX];
	snprintf(tmp, sizeof(tmp), "%s.tmp", to);
	int in = open(from, O_RDONLY | O_CLOEXEC);
	int out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	char buf[65536];
	ssize_t n;
	int ok = in >= 0 && out >= 0;
	while (ok && (n = read(in, buf, sizeof(buf))) > 0)
		ok = write(out, buf, n) == n;
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) != 0)
		ok = 0;
	return ok && rename(tmp, to) == 0 ? 0 : -1;
}

static void test_no_build_id(void)
{
	/* The executable and libc without their recorded build-ids. */
	struct wp_module *v = copy_mods(mods, nr_mods);
	v[main_mod].build_id_len = 0;
	v[libc_mod].build_id_len = 0;
	struct wp_sym_pool *p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	REQ(pooled_dump(p, v, nr_mods, -1) == 0);
	struct wp_sym_pool_stats a = stats(p);
	REQ(pooled_dump(p, v, nr_mods, -1) == 0);
	struct wp_sym_pool_stats b = stats(p);
	REQ(a.opened >= 2 && b.opened == a.opened && b.reused == a.sessions);
	/* The same file recorded with another extent: not that file. */
	v[libc_mod].end += 0x100000;
	REQ(first_result_of(p, v, libc_mod) == 0);
	v[libc_mod].end = mods[libc_mod].end;
	struct wp_sym_pool_stats c = stats(p);
	REQ(c.reused == b.reused && c.opened == b.opened);
	wp_sym_pool_free(p);
	report("without a build-id, the same file at the same path and extent is reused");

	/* A copy of libc of our own, changed under the pool. */
	const char *tmpdir = getenv("TMPDIR");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/wallprof-pool-libc.so.6", tmpdir ? tmpdir : "/tmp");
	REQ(copy_file(mods[libc_mod].path, path) == 0);
	free(v[libc_mod].path);
	v[libc_mod].path = strdup(path);
	p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	a = stats(p);
	REQ(a.opened == 1 && a.reused == 1 && a.unpooled == 0);
	/* Its mtime changed: not the file pooled. */
	struct timespec t[2] = { { 0, UTIME_OMIT }, { 1000000000, 0 } };
	REQ(utimensat(AT_FDCWD, path, t, 0) == 0);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	b = stats(p);
	REQ(b.opened == 2 && b.reused == 1);
	/* Replaced by another copy (another inode). */
	REQ(copy_file(mods[libc_mod].path, path) == 0);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	b = stats(p);
	REQ(b.opened == 3 && b.reused == 1);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	b = stats(p);
	REQ(b.opened == 3 && b.reused == 2);
	/* Replaced by a file of another extent: not trusted, no frames. */
	REQ(copy_file(mods[main_mod].path, path) == 0);
	REQ(first_result_of(p, v, libc_mod) == 0);
	b = stats(p);
	REQ(b.opened == 3 && b.reused == 2);
	wp_sym_pool_free(p);
	unlink(path);
	free_mods(v, nr_mods);
	report("without a build-id, a file changed or replaced at its path is not reused");
}

static void test_mapped(void)
{
	/* libc as if deleted: only /proc/PID/map_files reaches it. */
	struct wp_module *v = copy_mods(mods, nr_mods);
	free(v[libc_mod].path);
	v[libc_mod].path = strdup("/nonexistent/wallprof-pool/libc.so.6");
	wp_sym_set_process(getpid());
	struct wp_sym_pool *p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	struct wp_sym_pool_stats a = stats(p);
	REQ(a.opened == 1 && a.reused == 1 && a.unpooled == 0 && a.sessions == 1);
	report("a session opened through map_files is reused under its build-id");

	/* No build-id: the same path, the same mapping, never pooled. */
	v[libc_mod].build_id_len = 0;
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	struct wp_sym_pool_stats b = stats(p);
	REQ(b.opened == 3 && b.unpooled == 2 && b.reused == 1 && b.sessions == 1);
	/* Another build-id at that path: nothing has it, nothing reused. */
	v[libc_mod].build_id_len = mods[libc_mod].build_id_len;
	v[libc_mod].build_id[0] ^= 0xff;
	REQ(first_result_of(p, v, libc_mod) == 0);
	b = stats(p);
	REQ(b.opened == 3 && b.reused == 1);

	/* No build-id and another file at the path (another extent): the
	 * mapping is read, but not pooled under the file at the path. */
	const char *tmpdir = getenv("TMPDIR");
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/wallprof-pool-other.so", tmpdir ? tmpdir : "/tmp");
	REQ(copy_file(mods[main_mod].path, path) == 0);
	free(v[libc_mod].path);
	v[libc_mod].path = strdup(path);
	v[libc_mod].build_id_len = 0;
	for (int round = 0; round < 2; round++)
		REQ(pooled_dump(p, v, nr_mods, libc_mod) == 0);
	b = stats(p);
	REQ(b.opened == 5 && b.unpooled == 4 && b.reused == 1 && b.sessions == 1);
	unlink(path);
	wp_sym_set_process(0);
	wp_sym_pool_free(p);
	free_mods(v, nr_mods);
	report("without the build-id, a mapped file's session is neither pooled nor reused");
}

static void test_vdso(void)
{
	if (vdso_mod < 0) {
		printf("  no vDSO\n");
		report("vDSO (none here)");
		return;
	}
	struct wp_sym_pool *p = wp_sym_pool_new(SIZE_MAX, SIZE_MAX);
	REQ(pooled_dump(p, mods, nr_mods, vdso_mod) == 0);
	REQ(pooled_dump(p, mods, nr_mods, vdso_mod) == 0);
	struct wp_sym_pool_stats a = stats(p);
	REQ(a.opened == 1 && a.reused == 1);
	/* Another kernel's vDSO: not ours, not the pooled one. */
	struct wp_module *v = copy_mods(mods, nr_mods);
	v[vdso_mod].build_id[0] ^= 0xff;
	REQ(first_result_of(p, v, vdso_mod) == 0);
	struct wp_sym_pool_stats b = stats(p);
	REQ(b.opened == 1 && b.reused == 1);
	free_mods(v, nr_mods);
	wp_sym_pool_free(p);
	report("the vDSO's session is reused only under its build-id");
}

int main(void)
{
	pool_outer();
	struct wp_modmap mm = { 0 };
	wp_modmap_refresh(&mm);
	mods = mm.mods;
	nr_mods = mm.nr;
	for (size_t i = 0; i < nr_mods; i++) {
		if (mods[i].flags & WP_MOD_MAIN)
			main_mod = (int)i;
		else if (mods[i].flags & WP_MOD_VDSO)
			vdso_mod = (int)i;
		else if (mods[i].path && strstr(mods[i].path, "/libc.so"))
			libc_mod = (int)i;
	}
	printf("  %zu modules: executable %d, libc %d, vDSO %d\n", nr_mods, main_mod, libc_mod,
	       vdso_mod);
	if (main_mod < 0 || libc_mod < 0 || !mods[libc_mod].build_id_len) {
		printf("FAIL: no executable, or no libc with a build-id\n");
		return 1;
	}
	add_addr(&all, (uintptr_t)leaf_ra - 1, main_mod);
	add_functions(&all, &mods[main_mod], main_mod, 1);
	add_functions(&all, &mods[libc_mod], libc_mod, 8);
	if (vdso_mod >= 0) {
		void *h = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
		void *f = h ? dlsym(h, "__vdso_clock_gettime") : NULL;
		if (f)
			add_addr(&all, (uintptr_t)f, vdso_mod);
		else
			vdso_mod = -1;
		if (h)
			dlclose(h);
	}

	test_reference();
	test_pooled_same();
	test_other_bias();
	test_eviction();
	test_no_build_id();
	test_mapped();
	test_vdso();

	free_refs(refs, all.nr);
	free(all.v);
	free(all.mod);
	free_mods(mods, nr_mods);
	printf("sym_pool: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
