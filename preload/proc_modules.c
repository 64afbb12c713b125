/* proc_modules: the module list of proc_unwind's walk (contracts in
 * proc_modules.h).
 *
 * It comes from /proc/thread-self/maps and the ELF headers in memory (read
 * through the kernel), not from dl_iterate_phdr: that takes the loader's
 * lock, which a thread of the program may hold for long in a
 * dl_iterate_phdr callback (the sampler refreshes its own module map only
 * when no thread is inside one, a count private to sampler.c; the thread
 * being walked may be that very thread); /proc takes no lock of the
 * program's, and it is what libdwfl reported before, so the same modules
 * are seen. proc_unwind reads it again when the caller's module epoch
 * changes. Sampler thread only. */
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>

#include "proc_mem.h"
#include "proc_modules.h"
#include "../output/sys.h"

#define PAGE WP_PM_PAGE
#define MAX_PHDRS 64

static struct {
	struct wp_pmod *mods;
	size_t nr_mods, last_mod;
} pmod;

void wp_pmod_free(void)
{
	for (size_t i = 0; i < pmod.nr_mods; i++) {
		free(pmod.mods[i].path);
		wp_debug_frame_free(&pmod.mods[i].df);
	}
	free(pmod.mods);
	pmod.mods = NULL;
	pmod.nr_mods = pmod.last_mod = 0;
	wp_pm_forget();
}

void wp_pmod_forked(void)
{
	pmod.mods = NULL;
	pmod.nr_mods = pmod.last_mod = 0;
	wp_pm_forked();
}

/* Size of a pointer of .eh_frame_hdr encoding `enc` (value format only:
 * the application bits do not change the size); 0 if unsupported. */
static unsigned enc_size(uint8_t enc)
{
	switch (enc & 0x0f) {
	case 0x00: /* absptr */
	case 0x04: /* udata8 */
	case 0x0c: /* sdata8 */
		return 8;
	case 0x03: /* udata4 */
	case 0x0b: /* sdata4 */
		return 4;
	default:
		return 0;
	}
}

/* The search table of the .eh_frame_hdr at `hdr`: libunwind's remote
 * search reads it as pairs of 4-byte offsets from the header
 * (DW_EH_PE_datarel | DW_EH_PE_sdata4, what every linker writes). */
static void read_eh_frame_hdr(struct wp_pmod *m, uint64_t hdr)
{
	uint8_t h[4];
	uint64_t count = 0;
	unsigned ptr_size, count_size;

	if (wp_pm_read_word(hdr, h, 4) < 0 || h[0] != 1 || h[3] != 0x3b)
		return;
	ptr_size = enc_size(h[1]);
	count_size = enc_size(h[2]);
	if (!ptr_size || !count_size || (h[2] & 0x70) != 0 ||
	    wp_pm_read_word(hdr + 4 + ptr_size, &count, count_size) < 0)
		return;
	if (count_size == 4)
		count = (uint32_t)count;
	if (count == 0 || count > (1u << 28))
		return;
	m->hdr = hdr;
	m->table = hdr + 4 + ptr_size + count_size;
	m->nr_fde = count; /* entries are 8 bytes: one unw_word_t each */
}

struct mapping {
	uint64_t start, end, off, dev, ino;
	int exec;
	const char *path; /* "" if none; points into the maps text */
};

/* One module from the mapping of its ELF header (file offset 0). */
static int add_module(const struct mapping *base, const struct mapping *maps, size_t nr)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph[MAX_PHDRS];
	struct wp_pmod m, *t;
	uint64_t first = UINT64_MAX, first_off = 0, eh_frame = 0;
	int i, found = 0;
	size_t k;

	if (wp_pm_read(base->start, &eh, sizeof(eh)) < 0 || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) || eh.e_phentsize != sizeof(Elf64_Phdr) ||
	    eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS ||
	    eh.e_phoff + eh.e_phnum * sizeof(Elf64_Phdr) > base->end - base->start ||
	    wp_pm_read(base->start + eh.e_phoff, ph, eh.e_phnum * sizeof(Elf64_Phdr)) < 0)
		return 0;
	memset(&m, 0, sizeof(m));
	m.lo = UINT64_MAX;
	for (i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type == PT_LOAD && ph[i].p_vaddr < first) {
			first = ph[i].p_vaddr;
			first_off = ph[i].p_offset;
		}
	}
	/* The mapping at file offset 0 is the first segment's. */
	if (first == UINT64_MAX || (first_off & ~(PAGE - 1)) != 0)
		return 0;
	m.bias = base->start - (first & ~(PAGE - 1));
	for (i = 0; i < eh.e_phnum; i++) {
		uint64_t lo = m.bias + ph[i].p_vaddr, hi = lo + ph[i].p_memsz;

		if (ph[i].p_type == PT_GNU_EH_FRAME)
			eh_frame = lo;
		if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X) && hi > lo) {
			if (lo < m.lo)
				m.lo = lo;
			if (hi > m.hi)
				m.hi = hi;
		}
	}
	if (m.hi <= m.lo)
		return 0;
	/* Loaded as code, not an ELF file mapped as data: some executable
	 * mapping of the same file lies in its executable segments. */
	for (k = 0; k < nr && !found; k++)
		found = maps[k].exec && maps[k].dev == base->dev && maps[k].ino == base->ino &&
			!strcmp(maps[k].path, base->path) && maps[k].start < m.hi &&
			maps[k].end > m.lo;
	if (!found)
		return 0;
	/* Its read-only segments (unwind tables, code): pages worth caching. */
	for (i = 0; i < eh.e_phnum; i++) {
		uint64_t lo = m.bias + ph[i].p_vaddr, hi = lo + ph[i].p_memsz;

		if (ph[i].p_type == PT_LOAD && !(ph[i].p_flags & PF_W) && hi > lo &&
		    wp_pm_add_ro(lo & ~(PAGE - 1), (hi + PAGE - 1) & ~(PAGE - 1)) < 0)
			return -1;
	}
	if (eh_frame)
		read_eh_frame_hdr(&m, eh_frame);
	if (base->ino && base->path[0] == '/' && !strstr(base->path, " (deleted)")) {
		m.path = strdup(base->path);
		m.dev = base->dev;
		m.ino = base->ino;
	}
	t = realloc(pmod.mods, (pmod.nr_mods + 1) * sizeof(*t));
	if (!t) {
		free(m.path);
		return -1;
	}
	pmod.mods = t;
	pmod.mods[pmod.nr_mods++] = m;
	return 0;
}

/* Reads /proc/thread-self/maps whole (not /proc/self: the leader may have
 * exited). Returns a NUL-terminated buffer to free, or NULL. */
static char *read_maps(void)
{
	size_t cap = 16384, len = 0;
	char *buf = malloc(cap), *t;
	long fd = wp_syscall(SYS_openat, AT_FDCWD, "/proc/thread-self/maps", O_RDONLY | O_CLOEXEC);
	long n;

	if (fd < 0 || !buf)
		goto fail;
	for (;;) {
		if (cap - len < 4096) {
			if (cap > (64u << 20) || !(t = realloc(buf, cap * 2)))
				goto fail;
			buf = t;
			cap *= 2;
		}
		n = wp_syscall(SYS_read, fd, buf + len, cap - len - 1);
		if (n < 0)
			goto fail;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	wp_syscall(SYS_close, fd);
	buf[len] = 0;
	return buf;
fail:
	if (fd >= 0)
		wp_syscall(SYS_close, fd);
	free(buf);
	return NULL;
}

/* "start-end perms offset major:minor inode   path" */
static int parse_line(char *line, struct mapping *m)
{
	char *p = line, *e;
	unsigned long major, minor;

	m->start = strtoull(p, &e, 16);
	if (*e != '-')
		return -1;
	m->end = strtoull(e + 1, &p, 16);
	if (*p != ' ' || strlen(p) < 6)
		return -1;
	m->exec = p[3] == 'x';
	m->off = strtoull(p + 6, &e, 16);
	major = strtoul(e, &p, 16);
	if (*p != ':')
		return -1;
	minor = strtoul(p + 1, &e, 16);
	m->dev = makedev(major, minor);
	m->ino = strtoull(e, &p, 10);
	while (*p == ' ')
		p++;
	m->path = p;
	return m->end > m->start ? 0 : -1;
}

int wp_pmod_read(void)
{
	char *text = read_maps(), *line, *next;
	struct mapping *maps = NULL, *t;
	size_t nr = 0, cap = 0, i;
	int rc = -1;

	if (!text)
		return -1;
	for (line = text; *line; line = next) {
		next = strchr(line, '\n');
		if (next)
			*next++ = 0;
		else
			next = line + strlen(line);
		if (nr == cap) {
			cap = cap ? cap * 2 : 256;
			if (!(t = realloc(maps, cap * sizeof(*maps))))
				goto out;
			maps = t;
		}
		if (parse_line(line, &maps[nr]) == 0)
			nr++;
	}
	for (i = 0; i < nr; i++) {
		const struct mapping *m = &maps[i];

		if (m->off == 0 && ((m->ino && m->path[0] == '/') || !strcmp(m->path, "[vdso]")) &&
		    add_module(m, maps, nr) < 0)
			goto out;
	}
	rc = 0;
out:
	free(maps);
	free(text);
	return rc;
}

struct wp_pmod *wp_pmod_find(uint64_t ip)
{
	size_t i;

	if (pmod.last_mod < pmod.nr_mods && ip >= pmod.mods[pmod.last_mod].lo &&
	    ip < pmod.mods[pmod.last_mod].hi)
		return &pmod.mods[pmod.last_mod];
	for (i = 0; i < pmod.nr_mods; i++) {
		if (ip >= pmod.mods[i].lo && ip < pmod.mods[i].hi) {
			pmod.last_mod = i;
			return &pmod.mods[i];
		}
	}
	return NULL;
}

const struct wp_debug_frame *wp_pmod_debug_frame(struct wp_pmod *m)
{
	if (!m->df_tried) {
		m->df_tried = 1;
		/* Read directly by the walk's accessors: ours for the epoch. */
		if (m->path &&
		    wp_debug_frame_load(m->path, m->dev, m->ino, m->bias, m->lo, m->hi, &m->df) ==
			    0 &&
		    wp_pm_add_own(m->df.data, m->df.len, m->df.tab,
				  2 * m->df.nr * sizeof(*m->df.tab)) < 0)
			wp_debug_frame_free(&m->df);
	}
	return m->df.data ? &m->df : NULL;
}
