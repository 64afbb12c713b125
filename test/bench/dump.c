/* dump: cost of writing a profile, outside any profiled process.
 *
 *   dump ring OUT.json [SECONDS [THREADS [HZ]]]
 *       Builds a wp_ring the way the library sizes it (WALLPROF_HZ x
 *       WALLPROF_RING_SECONDS x 64 samples, default tables) and fills it with
 *       SECONDS x THREADS x HZ samples (defaults 30, 64, 101: about 194,000)
 *       of realistic stacks: 20-40 frames over a few thousand distinct
 *       addresses inside real code of this process, libc and libdw (function
 *       symbols + small offsets), a fixed base per thread plus skewed tails,
 *       on- and off-CPU. Then times what the library and the converter do
 *       at exit, in this one process: the raw dump of the ring, the module
 *       map and the threads (wp_raw_write, into a memfd), its reading
 *       (wp_raw_read_ex: the window, the module map, the threads),
 *       wp_sym_open, wp_out_sentry_write to OUT.json (symbolization + JSON +
 *       atomic write), wp_sym_close. Peak extra memory is VmHWM after the
 *       dump minus VmRSS before it (the peak is reset with
 *       /proc/self/clear_refs first; else VmHWM before is used).
 *       Output: dump_s=... raw_write_s=... raw_read_s=... write_s=...
 *       peak_extra_kb=... ...
 *
 *   dump sym FILE N
 *       Symbolizes N distinct addresses spread evenly over the function
 *       symbols of ELF FILE (loaded at a made-up bias, never mapped): times
 *       wp_sym_open + N x wp_sym_lookup.
 *       Output: sym_s=... addrs=... funcs=... frames_per_addr=... inlined=... with_line_pct=... */
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../output/output.h"
#include "../../output/profile.h"
#include "../../output/raw.h"
#include "../../preload/raw_dump.h"
#include "../../preload/ring.h"
#include "../../preload/wallprof.h"
#include "../../symbolize/symbolize.h"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

static long status_kb(const char *key)
{
	char buf[4096], *p;
	FILE *f = fopen("/proc/self/status", "r");
	size_t n;

	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strstr(buf, key);
	return p ? strtol(p + strlen(key), NULL, 10) : -1;
}

/* ---- address pool: real code ---------------------------------------------- */

struct pool {
	uint64_t *v;
	size_t nr, cap;
};

static void pool_add(struct pool *p, uint64_t a)
{
	if (p->nr == p->cap) {
		p->cap = p->cap ? p->cap * 2 : 4096;
		p->v = realloc(p->v, p->cap * sizeof(*p->v));
		if (!p->v)
			exit(2);
	}
	p->v[p->nr++] = a;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void pool_unique(struct pool *p)
{
	size_t i, n = 0;

	qsort(p->v, p->nr, sizeof(*p->v), cmp_u64);
	for (i = 0; i < p->nr; i++)
		if (n == 0 || p->v[n - 1] != p->v[i])
			p->v[n++] = p->v[i];
	p->nr = n;
}

/* Calls fn(ctx, name, value, size) for every defined function symbol of
 * `path`, from .symtab (want_dynsym 0) or .dynsym (1). */
static int for_each_func(const char *path, int want_dynsym,
			 void (*fn)(void *, const char *, uint64_t, uint64_t), void *ctx)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), count = 0;
	Elf *e;
	Elf_Scn *scn = NULL;

	if (fd < 0)
		return -1;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e) {
		close(fd);
		return -1;
	}
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		size_t i, n;

		if (!gelf_getshdr(scn, &sh) ||
		    sh.sh_type != (want_dynsym ? SHT_DYNSYM : SHT_SYMTAB))
			continue;
		d = elf_getdata(scn, NULL);
		n = sh.sh_entsize ? sh.sh_size / sh.sh_entsize : 0;
		for (i = 1; d && i < n; i++) {
			GElf_Sym s;
			const char *name;

			if (!gelf_getsym(d, (int)i, &s) || GELF_ST_TYPE(s.st_info) != STT_FUNC ||
			    s.st_shndx == SHN_UNDEF || s.st_size == 0)
				continue;
			name = elf_strptr(e, sh.sh_link, s.st_name);
			fn(ctx, name ? name : "", s.st_value, s.st_size);
			count++;
		}
	}
	elf_end(e);
	close(fd);
	return count;
}

struct objinfo {
	const char *want; /* substring of the path; NULL: the main executable */
	char path[PATH_MAX];
	uint64_t bias;
	int found;
};

static int find_obj(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct objinfo *o = arg;

	(void)size;
	if (o->found)
		return 0;
	if (!o->want ? (!info->dlpi_name || !info->dlpi_name[0])
		     : (info->dlpi_name && strstr(info->dlpi_name, o->want) != NULL)) {
		o->found = 1;
		o->bias = info->dlpi_addr;
		snprintf(o->path, sizeof(o->path), "%s",
			 o->want ? info->dlpi_name : "/proc/self/exe");
	}
	return 0;
}

/* Up to three addresses inside a function: its start + small offsets. */
static void add_offsets(struct pool *p, uint64_t addr, uint64_t size)
{
	static const uint64_t offs[] = { 3, 11, 29 };
	unsigned k = 1 + (unsigned)(rnd() % 3);

	for (unsigned i = 0; i < k; i++)
		if (offs[i] < size)
			pool_add(p, addr + offs[i]);
}

struct exe_ctx {
	struct pool *p;
	uint64_t bias;
};

static void on_exe_func(void *ctx, const char *name, uint64_t value, uint64_t size)
{
	struct exe_ctx *c = ctx;

	(void)name;
	add_offsets(c->p, c->bias + value, size);
}

struct dso_ctx {
	struct pool *p;
	void *handle;
	uint64_t lo, hi; /* the object's mapped range, by dladdr */
	const char *path;
};

/* Resolved through dlsym, as a program would find it (IFUNCs included). */
static void on_dso_func(void *ctx, const char *name, uint64_t value, uint64_t size)
{
	struct dso_ctx *c = ctx;
	void *a;
	Dl_info di;

	(void)value;
	if (!name[0] || !(a = dlsym(c->handle, name)))
		return;
	if (!dladdr(a, &di) || !di.dli_fname || strcmp(di.dli_fname, c->path) != 0)
		return;
	add_offsets(c->p, (uint64_t)(uintptr_t)a, size < 64 ? size : 64);
}

static size_t build_pool(struct pool *p)
{
	struct objinfo exe = { .want = NULL }, libc = { .want = "/libc.so" },
		       libdw = { .want = "/libdw.so" };
	struct exe_ctx ec;
	size_t before;

	dl_iterate_phdr(find_obj, &exe);
	dl_iterate_phdr(find_obj, &libc);
	dl_iterate_phdr(find_obj, &libdw);
	ec.p = p;
	ec.bias = exe.bias;
	for_each_func("/proc/self/exe", 0, on_exe_func, &ec);
	fprintf(stderr, "dump: %zu addresses in the executable\n", p->nr);
	struct objinfo *libs[] = { &libc, &libdw };
	for (size_t i = 0; i < 2; i++) {
		struct dso_ctx dc = { .p = p, .path = libs[i]->path };

		if (!libs[i]->found)
			continue;
		dc.handle = dlopen(libs[i]->path, RTLD_NOW | RTLD_NOLOAD);
		if (!dc.handle)
			continue;
		before = p->nr;
		for_each_func(libs[i]->path, 1, on_dso_func, &dc);
		fprintf(stderr, "dump: %zu addresses in %s\n", p->nr - before, libs[i]->path);
	}
	pool_unique(p);
	return p->nr;
}

/* ---- ring mode ------------------------------------------------------------- */

#define TAILS_PER_THREAD 128

static int ring_mode(const char *out, double secs, unsigned threads, unsigned hz)
{
	struct pool pool = { 0 };
	struct wp_ring_config rc;
	struct wp_ring *r;
	struct wp_modmap mm = { 0 };
	struct wp_profile p;
	struct wp_raw_meta meta;
	struct wp_counters ctr;
	struct wp_thread *thr;
	struct wp_out_opts opts = { .platform = "native" };
	struct wp_out_stats st;
	struct wp_sym *sym;
	char err[512], raw_path[64];
	uint64_t ticks = (uint64_t)(secs * hz), samples = (uint64_t)hz * (uint64_t)secs * 64, k;
	uint64_t period = 1000000000ull / hz, t_base = 1000000000ull;
	uint32_t tid0 = 100000;
	uint64_t(*base)[16];
	unsigned *base_len;
	uint64_t(*tails)[TAILS_PER_THREAD][32];
	unsigned(*tail_len)[TAILS_PER_THREAD];
	uint64_t pcs[64];
	long rss0, hwm0, hwm1, rss1;
	int reset = 0, fd, mfd;
	double t0, t1, t2, t3, t4;
	struct stat sb;

	/* The library's sizing (defaults). */
	wp_ring_default_config(&rc, samples, (uint64_t)secs * 1000000000ull);
	r = wp_ring_create(&rc);
	if (!r) {
		perror("wp_ring_create");
		return 2;
	}
	build_pool(&pool);
	if (pool.nr < 100) {
		fprintf(stderr, "dump: only %zu addresses found\n", pool.nr);
		return 2;
	}
	/* Stacks: per thread a fixed base (the outer frames: thread start, its
	 * main loop) of 8-15 frames and TAILS_PER_THREAD tails of 12-25 frames,
	 * so 20-40 in all; leaf first in pcs[]. */
	base = calloc(threads, sizeof(*base));
	base_len = calloc(threads, sizeof(*base_len));
	tails = calloc(threads, sizeof(*tails));
	tail_len = calloc(threads, sizeof(*tail_len));
	if (!base || !base_len || !tails || !tail_len)
		return 2;
	for (unsigned t = 0; t < threads; t++) {
		base_len[t] = 8 + (unsigned)(rnd() % 8);
		for (unsigned i = 0; i < base_len[t]; i++)
			base[t][i] = pool.v[rnd() % pool.nr];
		for (unsigned j = 0; j < TAILS_PER_THREAD; j++) {
			tail_len[t][j] = 12 + (unsigned)(rnd() % 14);
			for (unsigned i = 0; i < tail_len[t][j]; i++)
				tails[t][j][i] = pool.v[rnd() % pool.nr];
		}
	}
	for (k = 0; k < ticks; k++) {
		for (unsigned t = 0; t < threads; t++) {
			/* Skewed: a few tails take most samples. */
			double u = (double)(rnd() >> 11) / (double)(1ull << 53);
			unsigned j = (unsigned)(u * u * u * TAILS_PER_THREAD), n = 0, i;
			int on_cpu = (rnd() % 10) < 4;

			for (i = 0; i < tail_len[t][j]; i++)
				pcs[n++] = tails[t][j][i];
			for (i = base_len[t]; i-- > 0;)
				pcs[n++] = base[t][i];
			if (on_cpu) /* an exact PC: a few distinct leaves per tail */
				pcs[0] += rnd() % 4;
			wp_ring_add(r, t_base + k * period + t * 1000, tid0 + t,
				    on_cpu ? WP_SAMPLE_ON_CPU : WP_SAMPLE_SYSCALL, on_cpu ? 0 : 202,
				    pcs, n, on_cpu);
		}
	}
	wp_modmap_refresh(&mm);
	/* What the library's thread table and settings would say. */
	thr = calloc(threads, sizeof(*thr));
	if (!thr)
		return 2;
	for (unsigned t = 0; t < threads; t++) {
		thr[t].tid = tid0 + t;
		snprintf(thr[t].name, sizeof(thr[t].name), "worker-%u", t % 100000u);
		thr[t].nr_samples = ticks;
	}
	memset(&meta, 0, sizeof(meta));
	meta.pid = (uint32_t)getpid();
	meta.main_tid = meta.pid;
	meta.hz = hz;
	meta.ring_seconds = (uint32_t)secs;
	meta.max_depth = 128;
	meta.start_ns = t_base;
	meta.ring_bytes = wp_ring_bytes(&rc);
	snprintf(meta.cmdline, sizeof(meta.cmdline), "dump ring");
	memset(&ctr, 0, sizeof(ctr));
	ctr.nr_ticks = ticks;
	ctr.nr_samples = ticks * threads;
	mfd = memfd_create("dump-ring", MFD_CLOEXEC);
	if (mfd < 0) {
		perror("memfd_create");
		return 2;
	}
	snprintf(raw_path, sizeof(raw_path), "/proc/self/fd/%d", mfd);

	/* The dump, as the library's exit path and the converter do it. */
	fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		reset = write(fd, "5", 1) == 1;
		close(fd);
	}
	rss0 = status_kb("VmRSS:");
	hwm0 = status_kb("VmHWM:");
	t0 = now_s();
	if (wp_raw_write(mfd, &meta, r, mm.mods, mm.nr, thr, threads, &ctr) < 0) {
		perror("dump: raw dump");
		return 2;
	}
	t1 = now_s();
	if (wp_raw_read_ex(raw_path, &p, NULL, err, sizeof(err)) < 0) {
		fprintf(stderr, "dump: reading the raw dump: %s\n", err);
		return 2;
	}
	t2 = now_s();
	sym = wp_sym_open(p.modules, p.nr_modules);
	memset(&st, 0, sizeof(st));
	if (wp_out_sentry_write(&p, sym, &opts, out, &st, err, sizeof(err)) < 0) {
		fprintf(stderr, "dump: %s\n", err);
		return 2;
	}
	t3 = now_s();
	wp_sym_close(sym);
	t4 = now_s();
	hwm1 = status_kb("VmHWM:");
	rss1 = status_kb("VmRSS:");
	if (stat(out, &sb) < 0)
		sb.st_size = 0;
	printf("dump_s=%.6f raw_write_s=%.6f raw_read_s=%.6f write_s=%.6f close_s=%.6f "
	       "peak_extra_kb=%ld rss_before_kb=%ld "
	       "hwm_before_kb=%ld hwm_after_kb=%ld rss_after_kb=%ld hwm_reset=%d samples=%zu stacks=%zu "
	       "frames=%zu pool=%zu modules=%zu out_samples=%zu out_frames=%zu bytes=%lld ring_bytes=%zu "
	       "overwritten=%llu dropped=%llu\n",
	       t4 - t0, t1 - t0, t2 - t1, t3 - t2, t4 - t3, hwm1 - (reset ? rss0 : hwm0), rss0,
	       hwm0, hwm1, rss1, reset, p.nr_samples, p.nr_stacks, p.nr_pcs, pool.nr, p.nr_modules,
	       st.nr_samples, st.nr_frames, (long long)sb.st_size, wp_ring_bytes(&rc),
	       (unsigned long long)wp_ring_stats(r)->nr_overwritten,
	       (unsigned long long)wp_ring_stats(r)->nr_dropped_full);
	wp_profile_free(&p);
	close(mfd);
	free(thr);
	wp_ring_destroy(r);
	free(pool.v);
	free(base);
	free(base_len);
	free(tails);
	free(tail_len);
	return 0;
}

/* ---- sym mode ------------------------------------------------------------- */

struct sym_ctx {
	struct pool funcs; /* pairs: value, size */
	uint64_t exec_lo, exec_hi;
};

static void on_sym_func(void *ctx, const char *name, uint64_t value, uint64_t size)
{
	struct sym_ctx *c = ctx;

	(void)name;
	pool_add(&c->funcs, value);
	pool_add(&c->funcs, size);
}

static int sym_mode(const char *file, size_t want)
{
	struct wp_module mod;
	struct sym_ctx c = { 0 };
	struct pool cand = { 0 };
	uint64_t lo = UINT64_MAX, hi = 0, bias = 0;
	size_t nfuncs, i, m, frames = 0, inlined = 0, with_line = 0, known = 0, phnum;
	char real[PATH_MAX];
	Elf *e;
	GElf_Ehdr eh;
	Elf_Scn *scn = NULL;
	int fd;
	struct wp_sym *s;
	double t0, t1, t2;

	if (!realpath(file, real)) {
		perror(file);
		return 2;
	}
	memset(&mod, 0, sizeof(mod));
	fd = open(real, O_RDONLY | O_CLOEXEC);
	elf_version(EV_CURRENT);
	if (fd < 0 || !(e = elf_begin(fd, ELF_C_READ, NULL)) || !gelf_getehdr(e, &eh) ||
	    elf_getphdrnum(e, &phnum) < 0) {
		fprintf(stderr, "dump: %s: not an ELF file\n", real);
		return 2;
	}
	if (eh.e_type == ET_DYN)
		bias = 0x555555554000ull;
	for (i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(e, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (ph.p_vaddr < lo)
			lo = ph.p_vaddr;
		if (ph.p_vaddr + ph.p_memsz > hi)
			hi = ph.p_vaddr + ph.p_memsz;
	}
	while ((scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE &&
		    (d = elf_getdata(scn, NULL)) &&
		    wp_sym_build_id_note(d->d_buf, d->d_size, mod.build_id, &mod.build_id_len))
			break;
	}
	elf_end(e);
	close(fd);
	mod.path = real;
	mod.bias = bias;
	mod.start = (bias + lo) & ~(uint64_t)0xfff;
	mod.end = bias + hi;
	mod.flags = WP_MOD_MAIN;

	for_each_func(real, 0, on_sym_func, &c);
	nfuncs = c.funcs.nr / 2;
	if (!nfuncs) {
		fprintf(stderr, "dump: %s has no function symbols\n", real);
		return 2;
	}
	m = (want + nfuncs - 1) / nfuncs + 1;
	for (i = 0; i < nfuncs; i++) {
		uint64_t v = c.funcs.v[2 * i], sz = c.funcs.v[2 * i + 1];

		for (size_t j = 0; j < m; j++)
			pool_add(&cand, bias + v + sz * (2 * j + 1) / (2 * m));
	}
	pool_unique(&cand);
	if (cand.nr > want) { /* evenly spread */
		for (i = 0; i < want; i++)
			cand.v[i] = cand.v[(size_t)((double)i * (double)cand.nr / (double)want)];
		cand.nr = want;
	}

	t0 = now_s();
	s = wp_sym_open(&mod, 1);
	if (!s)
		return 2;
	t1 = now_s();
	for (i = 0; i < cand.nr; i++) {
		struct wp_sym_result res;

		if (wp_sym_lookup(s, cand.v[i], &res) < 0)
			return 2;
		if (res.nr_frames > 0) {
			known++;
			frames += (size_t)res.nr_frames;
			for (int f = 0; f < res.nr_frames; f++)
				inlined += res.frames[f].inlined != 0;
			with_line += res.frames[0].line > 0;
		}
	}
	t2 = now_s();
	wp_sym_close(s);
	printf("sym_s=%.6f open_s=%.6f lookup_s=%.6f addrs=%zu funcs=%zu known_pct=%.1f "
	       "frames_per_addr=%.2f inlined=%zu with_line_pct=%.1f build_id=%u\n",
	       t2 - t0, t1 - t0, t2 - t1, cand.nr, nfuncs, 100.0 * known / (double)cand.nr,
	       (double)frames / (double)(known ? known : 1), inlined,
	       100.0 * with_line / (double)cand.nr, mod.build_id_len);
	free(c.funcs.v);
	free(cand.v);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 3 && !strcmp(argv[1], "ring"))
		return ring_mode(argv[2], argc > 3 ? strtod(argv[3], NULL) : 30,
				 argc > 4 ? (unsigned)strtoul(argv[4], NULL, 10) : 64,
				 argc > 5 ? (unsigned)strtoul(argv[5], NULL, 10) : 101);
	if (argc >= 4 && !strcmp(argv[1], "sym"))
		return sym_mode(argv[2], strtoul(argv[3], NULL, 10));
	fprintf(stderr, "usage: dump ring OUT.json [SECONDS [THREADS [HZ]]]\n"
			"       dump sym FILE N\n");
	return 2;
}
