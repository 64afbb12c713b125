/* Micro-benchmark for symbolize/: cold and warm wp_sym_lookup cost over the
 * middle of every sized function symbol of chosen modules of this process.
 * Not built by `make`; build by hand (see usage below). */
#include <dlfcn.h>
#include <elf.h>
#include <elfutils/libdwfl.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../preload/wallprof.h"
#include "../../symbolize/symbolize.h"

/* usage: bench_symbolize [substring-of-module-path ...] [--dlopen lib.so ...]
 * build: cc -std=gnu11 -D_GNU_SOURCE -O2 -g -o /tmp/bench
 *        test/unit/bench_symbolize.c symbolize/debuginfo.c symbolize/symbolize.c preload/modules.c
 *        -ldw -lelf -ldl
 * Default modules: the main executable and libc. */

/* The module map the library itself records (preload/modules.c). */
static struct wp_modmap load_modules(void)
{
	struct wp_modmap mm = {0};
	wp_modmap_refresh(&mm);
	return mm;
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Middles of the sized function symbols of one module, via a separate
 * libdwfl session so the symbolizer under test starts cold. */
static uint64_t *function_middles(const struct wp_module *m, size_t *nr)
{
	static const Dwfl_Callbacks cb = {.find_debuginfo = dwfl_build_id_find_debuginfo};
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

int main(int argc, char **argv)
{
	const char *want[64];
	int nr_want = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--dlopen") && i + 1 < argc) {
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
	} mv = {mm.mods, mm.nr};

	printf("%-40s %7s %9s %9s %9s %9s %6s %6s\n", "module", "addrs", "first_us", "cold_us/a",
	       "warm_us/a", "total_ms", "frames", "lines");
	for (size_t i = 0; i < mv.nr; i++) {
		const struct wp_module *m = &mv.v[i];
		int match =
		    nr_want == 0 ? (m->flags & WP_MOD_MAIN) || strstr(m->path, "libc.so") : 0;
		for (int k = 0; k < nr_want; k++)
			match |= strstr(m->path, want[k]) != NULL;
		if (!match || (m->flags & WP_MOD_VDSO))
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
