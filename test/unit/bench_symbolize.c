/* Micro-benchmark for symbolize/: cold and warm wp_sym_lookup cost over the
 * middle of every sized function symbol of chosen modules of this process;
 * with --sequential, the cost of converting dumps one after another, with
 * and without a session pool (wp_sym_pool). Not built by `make`; build by
 * hand (see usage below). */
#include <dlfcn.h>
#include <elf.h>
#include <elfutils/libdwfl.h>
#include <link.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../preload/wallprof.h"
#include "../../symbolize/symbolize.h"

/* usage: bench_symbolize [substring-of-module-path ...] [--dlopen lib.so ...]
 *        bench_symbolize --sequential N [--addrs K] [--same] [substring ...]
 * build: make build/obj/lib/libcore.a build/obj/lib/libparts.a && cc -std=gnu11 -D_GNU_SOURCE -O2 -g -o /tmp/bench
 *        test/unit/bench_symbolize.c build/obj/lib/libparts.a build/obj/lib/libcore.a -lunwind-generic -lunwind -ldw -lelf -ljansson -lz -ldl
 * Default modules: the main executable and libc.
 *
 * --sequential N: N "dumps" one after another, each a symbolizer opened over
 * the whole module map, K lookups (default 300) spread over the functions of
 * each chosen module, and closed; once without a pool, once with one. Each
 * dump looks up another set of functions (shifted by one each time: the
 * pool's worst case, every dump reads units no earlier one did), or with
 * --same the same set (its best case). Prints wall and CPU time per dump,
 * the first dump's apart, the heap in use at the end (malloc's count) and
 * the pool's counters. */

/* The module map the library itself records (preload/modules.c). */
static struct wp_modmap load_modules(void)
{
	struct wp_modmap mm = { 0 };
	wp_modmap_refresh(&mm);
	return mm;
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double cpu_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Middles of the sized function symbols of one module, via a separate
 * libdwfl session so the symbolizer under test starts cold. */
static uint64_t *function_middles(const struct wp_module *m, size_t *nr)
{
	static const Dwfl_Callbacks cb = { .find_debuginfo = dwfl_build_id_find_debuginfo };
	*nr = 0;
	Dwfl *d = dwfl_begin(&cb);
	dwfl_report_begin(d);
	Dwfl_Module *dm = dwfl_report_elf(d, "m", m->path, -1, m->bias, true);
	dwfl_report_end(d, NULL, NULL);
	int n = dm ? dwfl_module_getsymtab(dm) : 0;
	uint64_t *v = malloc((n > 0 ? n : 1) * sizeof(*v));
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		if (!dwfl_module_getsym_info(dm, i, &sym, &addr, &shndx, NULL, NULL))
			continue;
		if (GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_size || shndx == SHN_UNDEF)
			continue;
		v[(*nr)++] = addr + sym.st_size / 2;
	}
	dwfl_end(d);
	return v;
}

static int chosen(const struct wp_module *m, const char **want, int nr_want)
{
	int match = nr_want == 0 ? (m->flags & WP_MOD_MAIN) || strstr(m->path, "libc.so") : 0;
	for (int k = 0; k < nr_want; k++)
		match |= strstr(m->path, want[k]) != NULL;
	return match && !(m->flags & WP_MOD_VDSO);
}

/* N dumps in sequence over the chosen modules, pooled (pool != NULL) or not. */
static void sequential(const struct wp_modmap *mm, uint64_t **addrs, const size_t *nr, int rounds,
		       size_t per_dump, int same, struct wp_sym_pool *pool)
{
	double first_wall = 0, first_cpu = 0, wall = 0, cpu = 0;
	size_t frames = 0;
	for (int it = 0; it < rounds; it++) {
		double w0 = now_us(), c0 = cpu_us();
		struct wp_sym *s = wp_sym_open_pooled(pool, mm->mods, mm->nr);
		struct wp_sym_result r;
		for (size_t i = 0; i < mm->nr; i++) {
			if (!nr[i])
				continue;
			/* K addresses spread over the module, shifted each dump. */
			size_t step = nr[i] / per_dump ? nr[i] / per_dump : 1;
			for (size_t j = same ? 0 : (size_t)it % step, n = 0;
			     j < nr[i] && n < per_dump; j += step, n++) {
				wp_sym_lookup(s, addrs[i][j], &r);
				frames += r.nr_frames;
			}
		}
		wp_sym_close(s);
		double w = now_us() - w0, c = cpu_us() - c0;
		if (it == 0) {
			first_wall = w;
			first_cpu = c;
		} else {
			wall += w;
			cpu += c;
		}
	}
	struct mallinfo2 mi = mallinfo2();
	printf("%-8s %6d %10.2f %10.2f %12.2f %12.2f %9zu %10.1f\n", pool ? "pooled" : "plain",
	       rounds, first_wall / 1e3, first_cpu / 1e3,
	       rounds > 1 ? wall / (rounds - 1) / 1e3 : 0,
	       rounds > 1 ? cpu / (rounds - 1) / 1e3 : 0, frames,
	       (double)(mi.uordblks + mi.hblkhd) / (1 << 20));
}

int main(int argc, char **argv)
{
	const char *want[64];
	int nr_want = 0, rounds = 0, same = 0;
	size_t per_dump = 300;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sequential") && i + 1 < argc) {
			rounds = atoi(argv[++i]);
		} else if (!strcmp(argv[i], "--same")) {
			same = 1;
		} else if (!strcmp(argv[i], "--addrs") && i + 1 < argc) {
			per_dump = (size_t)atol(argv[++i]);
		} else if (!strcmp(argv[i], "--dlopen") && i + 1 < argc) {
			if (!dlopen(argv[++i], RTLD_NOW))
				fprintf(stderr, "dlopen %s: %s\n", argv[i], dlerror());
		} else if (nr_want < 64) {
			want[nr_want++] = argv[i];
		}
	}
	struct wp_modmap mm = load_modules();
	struct {
		struct wp_module *v;
		size_t nr;
	} mv = { mm.mods, mm.nr };

	if (rounds > 0) {
		uint64_t **addrs = calloc(mv.nr, sizeof(*addrs));
		size_t *nr = calloc(mv.nr, sizeof(*nr));
		for (size_t i = 0; i < mv.nr; i++)
			if (chosen(&mv.v[i], want, nr_want))
				addrs[i] = function_middles(&mv.v[i], &nr[i]);
		printf("%-8s %6s %10s %10s %12s %12s %9s %10s\n", "mode", "dumps", "first_ms",
		       "first_cpu", "next_ms/dump", "next_cpu/dump", "frames", "heap_MiB");
		sequential(&mm, addrs, nr, rounds, per_dump, same, NULL);
		struct wp_sym_pool *pool = wp_sym_pool_new(64, (size_t)512 << 20);
		sequential(&mm, addrs, nr, rounds, per_dump, same, pool);
		struct wp_sym_pool_stats st;
		wp_sym_pool_stats(pool, &st);
		printf("pool: %zu sessions (%.1f MiB estimated), %llu opened, %llu reused, "
		       "%llu unpooled, %llu evicted\n",
		       st.sessions, (double)st.bytes / (1 << 20), (unsigned long long)st.opened,
		       (unsigned long long)st.reused, (unsigned long long)st.unpooled,
		       (unsigned long long)st.evicted);
		wp_sym_pool_free(pool);
		for (size_t i = 0; i < mv.nr; i++)
			free(addrs[i]);
		free(addrs);
		free(nr);
		for (size_t i = 0; i < mv.nr; i++)
			free(mv.v[i].path);
		free(mv.v);
		return 0;
	}

	printf("%-40s %7s %9s %9s %9s %9s %6s %6s\n", "module", "addrs", "first_us", "cold_us/a",
	       "warm_us/a", "total_ms", "frames", "lines");
	for (size_t i = 0; i < mv.nr; i++) {
		const struct wp_module *m = &mv.v[i];
		if (!chosen(m, want, nr_want))
			continue;
		size_t n;
		uint64_t *addrs = function_middles(m, &n);
		if (!n) {
			free(addrs);
			continue;
		}
		/* A fresh symbolizer per module: every first touch is paid here. */
		double t0 = now_us();
		struct wp_sym *s = wp_sym_open(mv.v, mv.nr);
		struct wp_sym_result r;
		wp_sym_lookup(s, addrs[0], &r);
		double t1 = now_us();
		size_t frames = 0, lines = 0;
		for (size_t j = 1; j < n; j++) {
			wp_sym_lookup(s, addrs[j], &r);
			frames += r.nr_frames;
			lines += r.nr_frames && r.frames[0].line;
		}
		double t2 = now_us();
		for (size_t j = 0; j < n; j++)
			wp_sym_lookup(s, addrs[j], &r);
		double t3 = now_us();
		wp_sym_close(s);
		const char *name = strrchr(m->path, '/');
		printf("%-40s %7zu %9.0f %9.2f %9.3f %9.1f %6.2f %5.0f%%\n",
		       name ? name + 1 : m->path, n, t1 - t0, n > 1 ? (t2 - t1) / (n - 1) : 0,
		       (t3 - t2) / n, (t2 - t0) / 1e3, (double)frames / (n > 1 ? n - 1 : 1),
		       100.0 * lines / (n > 1 ? n - 1 : 1));
		free(addrs);
	}
	for (size_t i = 0; i < mv.nr; i++)
		free(mv.v[i].path);
	free(mv.v);
	return 0;
}
