/* Unit test for symbolize/: symbolizes addresses of this very process over a
 * module map built with dl_iterate_phdr, the way the preload records it, and
 * checks exact function, file, line and inlined frames. */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../preload/wallprof.h"
#include "../../symbolize/symbolize.h"

static int nr_pass, nr_fail;

static void check(int ok, const char *what)
{
	printf("%s: %s\n", ok ? "ok  " : "FAIL", what);
	if (ok)
		nr_pass++;
	else
		nr_fail++;
}

/* ---- module map ----------------------------------------------------------- */

/* The module map the library itself records (preload/modules.c). */
static struct wp_modmap load_modules(void)
{
	struct wp_modmap mm = { 0 };
	wp_modmap_refresh(&mm);
	return mm;
}

/* ---- code with known locations -------------------------------------------- */

static volatile int sink;
static void *probe_ra;
static int probe_line, call_line, target_line;

__attribute__((noinline, noclone)) static void probe(void)
{
	probe_ra = __builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
}

/* The __LINE__ markers share a line with the code whose line they record, so
 * the layout below is deliberate. */
/* clang-format off */
static inline __attribute__((always_inline)) void inlined_fn(void)
{
	probe(); probe_line = __LINE__;
	sink++;
}

__attribute__((noinline, noclone)) void outer_fn(void)
{
	inlined_fn(); call_line = __LINE__;
	sink++;
}

/* Its entry address maps to the first statement, on the opening line. */
__attribute__((noinline, noclone)) int target_fn(int x) { target_line = __LINE__;
	sink += x;
	return sink;
}
/* clang-format on */

static int ends_with(const char *s, const char *suffix)
{
	size_t a = s ? strlen(s) : 0, b = strlen(suffix);
	return s && a >= b && !strcmp(s + a - b, suffix);
}

static void print_result(const char *what, const struct wp_sym_result *r,
			 const struct wp_module *mods)
{
	printf("  %s: module %d (%s) +0x%llx, %d frame(s)\n", what, r->module,
	       r->module >= 0 ? mods[r->module].path : "-", (unsigned long long)r->module_offset,
	       r->nr_frames);
	for (int i = 0; i < r->nr_frames; i++) {
		const struct wp_sym_frame *f = &r->frames[i];
		printf("    #%d %s%s at %s:%d:%d\n", i, f->function ? f->function : "??",
		       f->inlined ? " [inlined]" : "", f->file ? f->file : "??", f->line,
		       f->column);
	}
}

int main(void)
{
	target_fn(1);
	outer_fn();

	struct wp_modmap mm = load_modules();
	struct {
		struct wp_module *v;
		size_t nr;
	} mv = { mm.mods, mm.nr };
	printf("  %zu modules\n", mv.nr);

	struct wp_sym *s = wp_sym_open(mv.v, mv.nr);
	if (!s) {
		printf("FAIL: wp_sym_open\n");
		return 1;
	}
	struct wp_sym_result r;

	/* 1. a noinline function: name, this file, the line of its opening. */
	int rc = wp_sym_lookup(s, (uintptr_t)&target_fn, &r);
	print_result("target_fn", &r, mv.v);
	check(rc == 0 && r.module >= 0 && (mv.v[r.module].flags & WP_MOD_MAIN) &&
		      r.nr_frames == 1 && r.frames[0].function &&
		      !strcmp(r.frames[0].function, "target_fn") &&
		      ends_with(r.frames[0].file, "test_symbolize.c") &&
		      r.frames[0].line == target_line && !r.frames[0].inlined,
	      "noinline function resolves to name, file and exact line");

	/* 2. inside an inlined function: the inline frame, then its caller. */
	uint64_t ra = (uintptr_t)probe_ra - 1;
	rc = wp_sym_lookup(s, ra, &r);
	print_result("probe return address - 1", &r, mv.v);
	check(rc == 0 && r.nr_frames >= 2 && r.frames[0].function &&
		      !strcmp(r.frames[0].function, "inlined_fn") && r.frames[0].inlined == 1 &&
		      ends_with(r.frames[0].file, "test_symbolize.c") &&
		      r.frames[0].line == probe_line && r.frames[1].function &&
		      !strcmp(r.frames[1].function, "outer_fn") &&
		      ends_with(r.frames[1].file, "test_symbolize.c") &&
		      r.frames[1].line == call_line && r.frames[r.nr_frames - 1].inlined == 0,
	      "inlined frames: inline function at the probe call, caller at the inline call site");

	/* 3. libc: no DWARF needed, any name will do. */
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	void *getpid_addr = libc ? dlsym(libc, "getpid") : NULL;
	rc = getpid_addr ? wp_sym_lookup(s, (uintptr_t)getpid_addr, &r) : -1;
	if (rc == 0)
		print_result("getpid", &r, mv.v);
	check(rc == 0 && r.module >= 0 && strstr(mv.v[r.module].path, "libc") && r.nr_frames >= 1 &&
		      r.frames[r.nr_frames - 1].function && r.frames[r.nr_frames - 1].function[0],
	      "libc address resolves to libc and a function name");
	if (libc)
		dlclose(libc);

	/* 4. nowhere. */
	rc = wp_sym_lookup(s, 16, &r);
	check(rc == 0 && r.module == -1 && r.nr_frames == 0 && !r.frames,
	      "address outside every module: module -1, no frames");

	/* 5, 6. demangling. */
	char *d = wp_sym_demangle("_ZN2ns3Cls6methodEi");
	printf("  demangled: %s\n", d ? d : "(null)");
	check(d && !strcmp(d, "ns::Cls::method(int)"), "demangles a C++ name");
	free(d);
	d = wp_sym_demangle("main");
	check(!d, "leaves a C name alone");
	free(d);

	/* 7. the cache hands out the same pointers. */
	struct wp_sym_result a, b;
	int ok = wp_sym_lookup(s, ra, &a) == 0 && wp_sym_lookup(s, ra, &b) == 0 &&
		 a.frames == b.frames && a.nr_frames == b.nr_frames && a.nr_frames > 0 &&
		 a.frames[0].function == b.frames[0].function;
	ok = ok && wp_sym_lookup(s, (uintptr_t)&target_fn, &b) == 0 &&
	     wp_sym_lookup(s, (uintptr_t)&target_fn, &a) == 0 && a.frames == b.frames;
	check(ok, "repeated lookups return the same cached pointers");

	/* Informational: the vDSO, resolved from memory when possible. */
	for (size_t i = 0; i < mv.nr; i++) {
		if (!(mv.v[i].flags & WP_MOD_VDSO))
			continue;
		void *vdso = dlopen("linux-vdso.so.1", RTLD_LAZY | RTLD_NOLOAD);
		void *f = vdso ? dlsym(vdso, "__vdso_clock_gettime") : NULL;
		if (f && wp_sym_lookup(s, (uintptr_t)f, &r) == 0)
			print_result("vdso clock_gettime", &r, mv.v);
		if (vdso)
			dlclose(vdso);
	}

	wp_sym_close(s);
	for (size_t i = 0; i < mv.nr; i++)
		free(mv.v[i].path);
	free(mv.v);

	printf("symbolize: %d passed, %d failed\n", nr_pass, nr_fail);
	return nr_fail ? 1 : 0;
}
