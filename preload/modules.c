/* modules: the module map recorded at capture time. Every ELF object the
 * loader reports (with its load bias, address range and GNU build-id) is kept
 * for the life of the process, even after dlclose, so that samples taken while
 * it was loaded still symbolize at dump time. Sampler thread only. */
#include <elf.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "wallprof.h"

struct scan {
	struct wp_modmap *m;
	int full;      /* 0: only read the generation counters */
	int changed;
	int nr_new;
	char *seen;    /* per existing module: reported in this scan */
	size_t nr_seen;
};

static void read_build_id(const struct dl_phdr_info *info, struct wp_module *mod)
{
	int i;

	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_NOTE &&
		    wp_sym_build_id_note((const void *)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz,
					 mod->build_id, &mod->build_id_len))
			return;
	}
}

static char *main_path(void)
{
	char buf[WP_PATH_MAX];
	ssize_t n = readlink("/proc/thread-self/exe", buf, sizeof(buf) - 1);

	if (n <= 0)
		return strdup("[main]");
	buf[n] = 0;
	return strdup(buf);
}

static int on_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan *sc = arg;
	struct wp_modmap *m = sc->m;
	struct wp_module mod;
	uint64_t lo = UINT64_MAX, hi = 0;
	uintptr_t vdso;
	size_t i;
	int j;

	if (!sc->full) {
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs) &&
		    info->dlpi_adds == m->adds && info->dlpi_subs == m->subs)
			return 1; /* nothing changed since the last scan */
		sc->changed = 1;
		if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
			m->adds = info->dlpi_adds;
			m->subs = info->dlpi_subs;
		}
		return 1;
	}
	for (j = 0; j < info->dlpi_phnum; j++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[j];

		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < lo)
			lo = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > hi)
			hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
	if (hi <= lo)
		return 0;
	vdso = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
	memset(&mod, 0, sizeof(mod));
	mod.bias = info->dlpi_addr;
	mod.start = lo & ~(uint64_t)0xfff;
	mod.end = hi;
	read_build_id(info, &mod);
	if (vdso && lo <= vdso && vdso < hi)
		mod.flags |= WP_MOD_VDSO;
	else if (!info->dlpi_name || !info->dlpi_name[0])
		mod.flags |= WP_MOD_MAIN;
	/* Already known (same object at the same place)? */
	for (i = 0; i < m->nr; i++) {
		struct wp_module *k = &m->mods[i];

		if (k->start == mod.start && k->bias == mod.bias &&
		    k->build_id_len == mod.build_id_len &&
		    !memcmp(k->build_id, mod.build_id, mod.build_id_len) &&
		    (mod.flags & (WP_MOD_MAIN | WP_MOD_VDSO) ||
		     !strcmp(k->path, info->dlpi_name))) {
			if (i < sc->nr_seen)
				sc->seen[i] = 1;
			k->flags &= ~WP_MOD_UNLOADED;
			return 0;
		}
	}
	if (m->nr == m->cap) {
		/* Not realloc: the map is kept by a forked child, and the
		 * program may fork at any instruction of ours. The new array is
		 * stored before the old one is freed, and the capacity after
		 * the array, so the child has a pointer to memory that is its
		 * own, at worst with a copy left over. */
		size_t cap = m->cap ? m->cap * 2 : 64;
		struct wp_module *n = malloc(cap * sizeof(*n)), *old = m->mods;

		if (!n)
			return 0;
		if (m->nr)
			memcpy(n, old, m->nr * sizeof(*n));
		__atomic_store_n(&m->mods, n, __ATOMIC_RELEASE);
		__atomic_store_n(&m->cap, cap, __ATOMIC_RELEASE);
		free(old);
	}
	if (mod.flags & WP_MOD_MAIN)
		mod.path = main_path();
	else if (mod.flags & WP_MOD_VDSO)
		mod.path = strdup("[vdso]");
	else
		mod.path = strdup(info->dlpi_name);
	if (!mod.path)
		return 0;
	m->mods[m->nr] = mod; /* counted once written (a fork; a dump loads nr first) */
	__atomic_store_n(&m->nr, m->nr + 1, __ATOMIC_RELEASE);
	sc->nr_new++;
	return 0;
}

int wp_modmap_refresh(struct wp_modmap *m)
{
	struct scan sc = { .m = m };
	size_t i;

	if (m->nr > 0) {
		dl_iterate_phdr(on_object, &sc);
		if (!sc.changed)
			return 0;
	}
	sc.full = 1;
	sc.nr_seen = m->nr;
	sc.seen = calloc(m->nr + 1, 1);
	if (!sc.seen)
		return 0;
	dl_iterate_phdr(on_object, &sc);
	for (i = 0; i < sc.nr_seen; i++)
		if (!sc.seen[i])
			m->mods[i].flags |= WP_MOD_UNLOADED;
	free(sc.seen);
	if (m->nr > 0 && m->adds == 0) {
		/* Prime the counters so the next refresh can be a cheap check. */
		sc.full = 0;
		dl_iterate_phdr(on_object, &sc);
	}
	return sc.nr_new;
}
