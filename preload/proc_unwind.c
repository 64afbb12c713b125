/* proc_unwind: stacks of threads blocked outside the wrappers, without a
 * signal. The kernel tells where such a thread is blocked: its stack
 * pointer and PC (/proc/self/task/T/syscall), not its other registers. From
 * those two, libunwind's remote unwinder walks the stack with each module's
 * CFI (.eh_frame through its .eh_frame_hdr search table, else .debug_frame
 * read from the file) as far as it can trust it: a frame whose CFA needs a
 * register nobody saved (the frame pointer of a caller whose callee never
 * spilled it) ends the walk, marked partial.
 *
 * The thread is not held: it may return and overwrite its stack, or exit
 * and have it unmapped, while we read. So nothing of the program's is read
 * directly: its stack is copied page by page with process_vm_readv (an
 * unmapped page ends the walk, it does not fault), and so is every other
 * word libunwind asks for (the unwind tables of a module being dlclosed
 * may vanish too). A walk over a stack that changed underneath gives wrong
 * frames at worst, never a crash. The caller caches the result for as
 * long as the thread stays blocked at the same place.
 *
 * Why libunwind's remote API with accessors of our own: symbolization is
 * leaving the target process, so the injected library must not link
 * elfutils (libdwfl did this before); libunwind is already a dependency
 * (the in-handler walker, unwind/unwind.c, uses its local API, which reads
 * memory directly and so cannot be used here); and through the accessors
 * we own every memory read, every cache and its bounds. Its DWARF
 * machinery (CIE/FDE parsing, CFA programs, the register-state cache) is
 * used as is; what it cannot find by itself in another "process" is
 * supplied here: where the modules are and their search tables.
 *
 * The module list comes from /proc/thread-self/maps and the ELF headers in
 * memory (read through the kernel), not from dl_iterate_phdr: that takes
 * the loader's lock, which a thread of the program may hold for long in a
 * dl_iterate_phdr callback (the sampler refreshes its own module map only
 * when no thread is inside one, a count private to sampler.c; the thread
 * being walked may be that very thread); /proc takes no lock of the
 * program's, and it is what libdwfl reported before, so the same modules
 * are seen. It is read again when the caller's module epoch changes.
 *
 * Runs on the sampler thread only. Files (for .debug_frame) are opened
 * briefly, in the sampler's private descriptor table, and closed at once. */
#include <elf.h>
#include <fcntl.h>
#include <libunwind.h> /* the generic (remote-capable) API: libunwind-x86_64 */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>
#include <dlfcn.h>
#include <zlib.h>

#include "proc_unwind.h"

/* zlib's uncompress, for the compressed .debug_frame Go writes: looked up
 * the first time one is met (sampler thread), so that the library itself
 * does not link zlib and a program that has no such module never loads it.
 * NULL when zlib is not installed: such modules are walked without it. */
typedef int (*uncompress_fn)(Bytef *, uLongf *, const Bytef *, uLong);

static uncompress_fn zlib_uncompress(void)
{
	static int tried;
	static uncompress_fn fn;
	void *h;

	if (!tried) {
		tried = 1;
		h = dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
		if (h)
			fn = (uncompress_fn)dlsym(h, "uncompress");
	}
	return fn;
}
#include "sys.h"

/* Exported by libunwind-x86_64 (libunwind-ptrace and libunwind-coredump,
 * separate libraries, call it) but declared in no public header of 1.6;
 * from 1.7 on, unw_get_proc_info_in_range wraps it. */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
					       unw_dyn_info_t *di, unw_proc_info_t *pi,
					       int need_unwind_info, void *arg);
#define search_table UNW_OBJ(dwarf_search_unwind_table)

#define PAGE 4096ull
/* The stack window: pages from the one holding the stack pointer, so that
 * at least the 64 KiB above it can be read (copied on first use). */
#define WIN_PAGES 17
/* Pages of the modules' read-only segments (unwind tables, code) kept
 * across walks of one epoch, direct-mapped: 128 KiB. */
#define CACHE_PAGES 32
#define MAX_PHDRS 64
#define MAX_SECTION (64u << 20) /* larger .debug_frame or section tables are not read */

struct range {
	uint64_t lo, hi;
};

struct module {
	uint64_t lo, hi;        /* executable segments, load bias applied */
	uint64_t hdr;           /* .eh_frame_hdr, 0 if none usable */
	uint64_t table, nr_fde; /* its binary-search table */
	uint64_t bias;
	uint64_t dev, ino;      /* the file mapped, for .debug_frame */
	char *path;             /* NULL: no file to read (vdso, deleted) */
	int df_tried;
	uint8_t *df;            /* .debug_frame in .eh_frame's form (see convert) */
	size_t df_len;
	int32_t *df_tab;        /* pairs (start - lo, FDE offset in df), sorted */
	size_t df_nr;
};

static struct {
	pid_t proc;       /* the process the caches are for (a forked child is another) */
	int built;        /* the module list below is for `epoch` */
	int usable;       /* ... and was read */
	uint64_t epoch;
	unw_addr_space_t as;
	struct module *mods;
	size_t nr_mods, last_mod;
	struct range *ro; /* read-only segments: their pages may be cached */
	size_t nr_ro;
	struct range *own; /* our own immutable buffers (df, df_tab): read directly */
	size_t nr_own;
	uint64_t *tag;     /* page address + 1 per cache slot, 0 empty */
	uint8_t *pages;
	/* the walk in progress */
	pid_t via;        /* the thread memory is read through: ours, alive */
	uint64_t sp, pc;
	uint64_t win_lo;
	uint32_t win_have, win_bad; /* window pages copied / found unreadable */
	int noinfo;       /* the last lookup found no unwind info */
	uint64_t win[WIN_PAGES * PAGE / 8];
} u;

/* ---- memory ---------------------------------------------------------- */

static int read_remote(uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)(uintptr_t)addr, len };

	return process_vm_readv(u.via, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

static int in_ranges(const struct range *r, size_t n, uint64_t lo, uint64_t hi)
{
	for (size_t i = 0; i < n; i++)
		if (lo >= r[i].lo && hi <= r[i].hi)
			return 1;
	return 0;
}

/* Reads `len` (<= 8) bytes at `addr` of this process as the walked thread
 * may have left them, never with a direct load of the program's memory. */
static int read_word(uint64_t addr, void *out, size_t len)
{
	uint64_t off = addr & (PAGE - 1), page = addr - off;

	if (addr + len < addr)
		return -1;
	/* The stack, copied page by page on first use. */
	if (addr >= u.win_lo && addr + len <= u.win_lo + WIN_PAGES * PAGE && off + len <= PAGE) {
		unsigned k = (unsigned)((page - u.win_lo) / PAGE);
		uint8_t *p = (uint8_t *)u.win + k * PAGE;

		if (u.win_bad & (1u << k))
			return -1;
		if (!(u.win_have & (1u << k))) {
			if (read_remote(page, p, PAGE) < 0) {
				u.win_bad |= 1u << k;
				return -1;
			}
			u.win_have |= 1u << k;
		}
		memcpy(out, p + off, len);
		return 0;
	}
	/* A read-only page of a module, cached for the epoch. */
	if (u.tag && off + len <= PAGE) {
		unsigned k = (unsigned)((page / PAGE) % CACHE_PAGES);

		if (u.tag[k] == page + 1) {
			memcpy(out, u.pages + k * PAGE + off, len);
			return 0;
		}
		if (in_ranges(u.ro, u.nr_ro, page, page + PAGE)) {
			u.tag[k] = 0;
			if (read_remote(page, u.pages + k * PAGE, PAGE) == 0) {
				u.tag[k] = page + 1;
				memcpy(out, u.pages + k * PAGE + off, len);
				return 0;
			}
		}
	}
	/* Our own tables (they live as long as the epoch): plain loads. */
	if (in_ranges(u.own, u.nr_own, addr, addr + len)) {
		memcpy(out, (const void *)(uintptr_t)addr, len);
		return 0;
	}
	return read_remote(addr, out, len);
}

/* ---- modules --------------------------------------------------------- */

static void free_modules(void)
{
	for (size_t i = 0; i < u.nr_mods; i++) {
		free(u.mods[i].path);
		free(u.mods[i].df);
		free(u.mods[i].df_tab);
	}
	free(u.mods);
	free(u.ro);
	free(u.own);
	u.mods = NULL;
	u.ro = u.own = NULL;
	u.nr_mods = u.nr_ro = u.nr_own = u.last_mod = 0;
	if (u.tag)
		memset(u.tag, 0, CACHE_PAGES * sizeof(*u.tag));
}

static int push_range(struct range **r, size_t *n, uint64_t lo, uint64_t hi)
{
	struct range *t = realloc(*r, (*n + 1) * sizeof(**r));

	if (!t)
		return -1;
	t[*n].lo = lo;
	t[*n].hi = hi;
	*r = t;
	++*n;
	return 0;
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
static void read_eh_frame_hdr(struct module *m, uint64_t hdr)
{
	uint8_t h[4];
	uint64_t count = 0;
	unsigned ptr_size, count_size;

	if (read_word(hdr, h, 4) < 0 || h[0] != 1 || h[3] != 0x3b)
		return;
	ptr_size = enc_size(h[1]);
	count_size = enc_size(h[2]);
	if (!ptr_size || !count_size || (h[2] & 0x70) != 0 ||
	    read_word(hdr + 4 + ptr_size, &count, count_size) < 0)
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
	struct module m, *t;
	uint64_t first = UINT64_MAX, first_off = 0, eh_frame = 0;
	int i, found = 0;
	size_t k;

	if (read_remote(base->start, &eh, sizeof(eh)) < 0 || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    (eh.e_type != ET_EXEC && eh.e_type != ET_DYN) ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > MAX_PHDRS ||
	    eh.e_phoff + eh.e_phnum * sizeof(Elf64_Phdr) > base->end - base->start ||
	    read_remote(base->start + eh.e_phoff, ph, eh.e_phnum * sizeof(Elf64_Phdr)) < 0)
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
		    push_range(&u.ro, &u.nr_ro, lo & ~(PAGE - 1), (hi + PAGE - 1) & ~(PAGE - 1)) < 0)
			return -1;
	}
	if (eh_frame)
		read_eh_frame_hdr(&m, eh_frame);
	if (base->ino && base->path[0] == '/' && !strstr(base->path, " (deleted)")) {
		m.path = strdup(base->path);
		m.dev = base->dev;
		m.ino = base->ino;
	}
	t = realloc(u.mods, (u.nr_mods + 1) * sizeof(*t));
	if (!t) {
		free(m.path);
		return -1;
	}
	u.mods = t;
	u.mods[u.nr_mods++] = m;
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

static int read_modules(void)
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

/* ---- .debug_frame ------------------------------------------------------ */

static int pread_all(long fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		long n = wp_syscall(SYS_pread64, fd, (char *)buf + got, len - got, off + got);

		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return 0;
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static int cmp_entry(const void *a, const void *b)
{
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	return (x > y) - (x < y);
}

/* .debug_frame in the form libunwind's search helper reads (.eh_frame's,
 * the helper's debug_frame mode being for its own local address space
 * only): CIEs first, with id 0 (and version 3 for 4: libunwind 1.6 does not
 * skip version 4's address and segment size bytes), then FDEs whose CIE
 * pointer is relative, with their 8-byte start address relocated by the
 * load bias; the CFA programs are copied unchanged. Only 32-bit DWARF and
 * CIEs without augmentation (what compilers and Go write there). */
static int convert(struct module *m, const uint8_t *d, size_t n)
{
	uint8_t *out = malloc(n + 8);
	int32_t *tab = malloc((n / 24 + 1) * 2 * sizeof(*tab));
	uint64_t *cie_src = malloc((n / 8 + 1) * sizeof(*cie_src)); /* source offsets, in order */
	uint32_t *cie_dst = malloc((n / 8 + 1) * sizeof(*cie_dst));
	size_t o = 0, nr_cie = 0, nr = 0, pass, off, own;
	int rc = -1;

	if (!out || !tab || !cie_src || !cie_dst)
		goto done;
	for (pass = 0; pass < 2; pass++) {
		for (off = 0; off + 4 <= n;) {
			uint32_t len = get32(d + off), id;
			const uint8_t *e = d + off + 8, *end = d + off + 4 + len;

			if (len == 0xffffffff || len > n - off - 4)
				break; /* 64-bit DWARF, or cut short */
			off += 4 + (size_t)len;
			if (len < 4)
				continue;
			id = get32(d + off - len);
			if (pass == 0 && id == 0xffffffff) {
				uint8_t version = e[0];

				/* version, empty augmentation, [v4: 8, 0] */
				if (end - e < 2 || e[1] != 0 || (version != 1 && version != 3 && version != 4))
					continue;
				e += 2;
				if (version == 4) {
					if (end - e < 2 || e[0] != 8 || e[1] != 0)
						continue;
					e += 2;
				}
				cie_src[nr_cie] = off - len - 4;
				cie_dst[nr_cie++] = (uint32_t)o;
				len = (uint32_t)(4 + 2 + (end - e));
				memcpy(out + o, &len, 4);
				memset(out + o + 4, 0, 4);
				out[o + 8] = version == 4 ? 3 : version;
				out[o + 9] = 0;
				memcpy(out + o + 10, e, (size_t)(end - e));
				o += 4 + (size_t)len;
			} else if (pass == 1 && id != 0xffffffff) {
				size_t lo = 0, hi = nr_cie;
				uint64_t start, size;
				int32_t rel;

				if (end - e < 16)
					continue;
				while (lo < hi) { /* the CIE, by its source offset */
					size_t mid = (lo + hi) / 2;

					if (cie_src[mid] < id)
						lo = mid + 1;
					else
						hi = mid;
				}
				start = get64(e) + m->bias;
				size = get64(e + 8);
				if (lo == nr_cie || cie_src[lo] != id || get64(e) == 0 || size == 0 ||
				    start < m->lo || start >= m->hi || size > m->hi - start)
					continue;
				memcpy(out + o, &len, 4);
				rel = (int32_t)(o + 4 - cie_dst[lo]);
				memcpy(out + o + 4, &rel, 4);
				memcpy(out + o + 8, &start, 8);
				memcpy(out + o + 16, e + 8, (size_t)(end - e - 8));
				tab[2 * nr] = (int32_t)(start - m->lo);
				tab[2 * nr + 1] = (int32_t)o;
				nr++;
				o += 4 + (size_t)len;
			}
		}
	}
	if (nr == 0)
		goto done;
	qsort(tab, nr, 2 * sizeof(*tab), cmp_entry);
	own = u.nr_own;
	if (push_range(&u.own, &u.nr_own, (uintptr_t)out, (uintptr_t)out + o) < 0 ||
	    push_range(&u.own, &u.nr_own, (uintptr_t)tab, (uintptr_t)(tab + 2 * nr)) < 0) {
		u.nr_own = own; /* freed below: not ours to read any more */
		goto done;
	}
	m->df = out;
	m->df_len = o;
	m->df_tab = tab;
	m->df_nr = nr;
	out = NULL;
	tab = NULL;
	rc = 0;
done:
	free(out);
	free(tab);
	free(cie_src);
	free(cie_dst);
	return rc;
}

/* The module's .debug_frame, from its file (a copy replaced on disk since
 * it was mapped is not read), inflated if compressed. */
static void load_debug_frame(struct module *m)
{
	Elf64_Ehdr eh;
	Elf64_Shdr *sh = NULL, *s = NULL;
	struct stat st;
	char *names = NULL;
	uint8_t *data = NULL, *plain = NULL;
	size_t nr_sh, i, len;
	long fd;

	m->df_tried = 1;
	if (!m->path)
		return;
	fd = wp_syscall(SYS_openat, AT_FDCWD, m->path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	if (wp_syscall(SYS_fstat, fd, &st) < 0 || st.st_dev != m->dev || st.st_ino != m->ino ||
	    pread_all(fd, &eh, sizeof(eh), 0) < 0 || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
	    eh.e_shnum == 0 || eh.e_shstrndx == SHN_UNDEF || eh.e_shstrndx >= eh.e_shnum)
		goto out;
	nr_sh = eh.e_shnum;
	sh = malloc(nr_sh * sizeof(*sh));
	if (!sh || eh.e_shoff > (uint64_t)st.st_size ||
	    nr_sh * sizeof(*sh) > (uint64_t)st.st_size - eh.e_shoff ||
	    pread_all(fd, sh, nr_sh * sizeof(*sh), eh.e_shoff) < 0)
		goto out;
	s = &sh[eh.e_shstrndx];
	if (s->sh_type == SHT_NOBITS || s->sh_size == 0 || s->sh_size > MAX_SECTION ||
	    s->sh_offset > (uint64_t)st.st_size || s->sh_size > (uint64_t)st.st_size - s->sh_offset ||
	    !(names = malloc(s->sh_size + 1)) || pread_all(fd, names, s->sh_size, s->sh_offset) < 0)
		goto out;
	names[s->sh_size] = 0;
	for (s = NULL, i = 0; i < nr_sh && !s; i++) {
		if (sh[i].sh_name < sh[eh.e_shstrndx].sh_size && sh[i].sh_type == SHT_PROGBITS &&
		    (!strcmp(names + sh[i].sh_name, ".debug_frame") ||
		     !strcmp(names + sh[i].sh_name, ".zdebug_frame")))
			s = &sh[i];
	}
	if (!s || s->sh_size < 16 || s->sh_size > MAX_SECTION || s->sh_offset > (uint64_t)st.st_size ||
	    s->sh_size > (uint64_t)st.st_size - s->sh_offset || !(data = malloc(s->sh_size)) ||
	    pread_all(fd, data, s->sh_size, s->sh_offset) < 0)
		goto out;
	len = s->sh_size;
	if (s->sh_flags & SHF_COMPRESSED || !strcmp(names + s->sh_name, ".zdebug_frame")) {
		/* ELF compression header, or the older "ZLIB" + big-endian size */
		uLongf want = 0;
		size_t skip;

		if (s->sh_flags & SHF_COMPRESSED) {
			Elf64_Chdr ch;

			if (len <= sizeof(ch))
				goto out;
			memcpy(&ch, data, sizeof(ch));
			if (ch.ch_type != ELFCOMPRESS_ZLIB)
				goto out;
			want = (uLongf)ch.ch_size;
			skip = sizeof(ch);
		} else {
			if (memcmp(data, "ZLIB", 4))
				goto out;
			for (i = 4; i < 12; i++)
				want = want << 8 | data[i];
			skip = 12;
		}
		if (want == 0 || want > MAX_SECTION || !zlib_uncompress() ||
		    !(plain = malloc(want)) ||
		    zlib_uncompress()(plain, &want, data + skip, (uLong)(len - skip)) != Z_OK)
			goto out;
		free(data);
		data = plain;
		plain = NULL;
		len = want;
	}
	convert(m, data, len);
out:
	wp_syscall(SYS_close, fd);
	free(sh);
	free(names);
	free(data);
	free(plain);
}

/* ---- libunwind accessors --------------------------------------------- */

/* One table search, in two steps: libunwind 1.6's helper allocates the
 * unwind info before it checks that the FDE it found covers `ip`, and does
 * not free it when it does not (an address between two FDEs, every Go PC
 * looked up in a cgo binary's .eh_frame_hdr): it is asked for the info only
 * once the FDE is known to cover `ip`. */
static int search(unw_addr_space_t as, unw_word_t ip, unw_dyn_info_t *di, unw_proc_info_t *pi,
		  int need_unwind_info, void *arg)
{
	int rc;

	memset(pi, 0, sizeof(*pi));
	rc = search_table(as, ip, di, pi, 0, arg);
	if (rc < 0 || ip < pi->start_ip || ip >= pi->end_ip)
		return -UNW_ENOINFO;
	if (!need_unwind_info)
		return 0;
	memset(pi, 0, sizeof(*pi));
	return search_table(as, ip, di, pi, 1, arg);
}

static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
			  int need_unwind_info, void *arg)
{
	struct module *m = NULL;
	unw_dyn_info_t di;
	size_t i;

	if (u.last_mod < u.nr_mods && ip >= u.mods[u.last_mod].lo && ip < u.mods[u.last_mod].hi)
		m = &u.mods[u.last_mod];
	for (i = 0; !m && i < u.nr_mods; i++) {
		if (ip >= u.mods[i].lo && ip < u.mods[i].hi) {
			m = &u.mods[i];
			u.last_mod = i;
		}
	}
	if (!m)
		goto none;
	memset(&di, 0, sizeof(di));
	di.start_ip = m->lo;
	di.end_ip = m->hi;
	if (m->hdr) {
		di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
		di.u.rti.segbase = m->hdr;
		di.u.rti.table_data = m->table;
		di.u.rti.table_len = m->nr_fde;
		if (search(as, ip, &di, pi, need_unwind_info, arg) == 0)
			return 0;
	}
	/* Not in .eh_frame (Go's code, a file built without unwind tables):
	 * .debug_frame, as libdwfl did. Offsets from the module's start. */
	if (!m->df_tried)
		load_debug_frame(m);
	if (m->df) {
		di.format = UNW_INFO_FORMAT_IP_OFFSET;
		di.u.rti.segbase = (uintptr_t)m->df;
		di.u.rti.table_data = (uintptr_t)m->df_tab;
		di.u.rti.table_len = m->df_nr;
		if (search(as, ip, &di, pi, need_unwind_info, arg) == 0)
			return 0;
	}
none:
	u.noinfo = 1;
	return -UNW_ENOINFO;
}

/* The unwind info handed out comes from libunwind's own helper, in its
 * format UNW_INFO_FORMAT_TABLE, which libunwind frees itself. */
static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	(void)as;
	(void)pi;
	(void)arg;
}

/* No code registered with _U_dyn_register (JIT) is looked for. */
static int get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	(void)as;
	(void)addr;
	(void)arg;
	return -UNW_ENOINFO;
}

static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write, void *arg)
{
	(void)as;
	(void)arg;
	if (write)
		return -UNW_EINVAL;
	return read_word(addr, val, sizeof(*val)) == 0 ? 0 : -UNW_EINVAL;
}

/* The stack pointer and the PC; nothing else is known. Any other register
 * a frame's CFA or return address needs ends the walk (libunwind returns
 * the error from unw_step): it is never guessed. */
static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write, void *arg)
{
	(void)as;
	(void)arg;
	if (write)
		return -UNW_EREADONLYREG;
	if (reg == UNW_X86_64_RIP)
		*val = u.pc;
	else if (reg == UNW_X86_64_RSP)
		*val = u.sp;
	else
		return -UNW_EBADREG;
	return 0;
}

static int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			void *arg)
{
	(void)as;
	(void)reg;
	(void)val;
	(void)write;
	(void)arg;
	return -UNW_EBADREG;
}

static int resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	(void)as;
	(void)c;
	(void)arg;
	return -UNW_EINVAL;
}

static int get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			 unw_word_t *off, void *arg)
{
	(void)as;
	(void)addr;
	(void)buf;
	(void)len;
	(void)off;
	(void)arg;
	return -UNW_ENOINFO;
}

static unw_accessors_t accessors = {
	.find_proc_info = find_proc_info,
	.put_unwind_info = put_unwind_info,
	.get_dyn_info_list_addr = get_dyn_info_list_addr,
	.access_mem = access_mem,
	.access_reg = access_reg,
	.access_fpreg = access_fpreg,
	.resume = resume,
	.get_proc_name = get_proc_name,
};

/* ---- the walk -------------------------------------------------------- */

static int open_session(uint64_t epoch)
{
	pid_t pid = getpid();

	if (u.proc != pid) {
		/* A forked child: what it inherited are copies, freed as such;
		 * the address space's cache lock may have been copied held by
		 * the parent's sampler, so it is not used (freeing it takes no
		 * lock), a new one is made. */
		free_modules();
		if (u.as)
			unw_destroy_addr_space(u.as);
		u.as = NULL;
		u.built = 0;
		u.proc = pid;
	}
	if (!u.as) {
		u.as = unw_create_addr_space(&accessors, 0);
		if (!u.as)
			return -1;
		/* A new address space caches nothing: the register states of the
		 * frames walked are kept (by PC) until the modules change (without
		 * them a walk costs 2.5 times as much). Only this thread uses it:
		 * "per thread", which spares a lock, and the two sigprocmask calls
		 * libunwind makes around it, at every frame. Debian 12's build
		 * (no TLS support configured) takes it as "global", with them. */
		unw_set_caching_policy(u.as, UNW_CACHE_PER_THREAD);
	}
	if (!u.tag) {
		u.tag = calloc(CACHE_PAGES, sizeof(*u.tag));
		u.pages = malloc(CACHE_PAGES * PAGE);
		if (!u.tag || !u.pages) {
			free(u.tag);
			free(u.pages);
			u.tag = NULL;
			u.pages = NULL;
		}
	}
	if (u.built && u.epoch == epoch)
		return u.usable ? 0 : -1;
	/* Modules loaded or unloaded: everything derived from them goes. */
	free_modules();
	unw_flush_cache(u.as, 0, 0);
	u.epoch = epoch;
	u.built = 1;
	u.usable = read_modules() == 0;
	if (!u.usable)
		free_modules();
	return u.usable ? 0 : -1;
}

int wp_proc_unwind(pid_t tid, uint64_t sp, uint64_t pc, uint64_t epoch, uint64_t *out, int cap,
		   int *partial, int *truncated)
{
	unw_cursor_t c;
	unw_word_t ip;
	int n = 1, rc;

	(void)tid; /* its memory is ours: read through our own tid */
	*partial = 1;
	*truncated = 0;
	if (cap < 1)
		return 1;
	out[0] = pc;
	u.via = (pid_t)wp_syscall(SYS_gettid); /* not the pid: the leader may have exited */
	u.sp = sp;
	u.pc = pc;
	u.win_lo = sp & ~(PAGE - 1);
	u.win_have = u.win_bad = 0;
	if (open_session(epoch) < 0 || unw_init_remote(&c, u.as, NULL) < 0)
		return 1;
	for (;;) {
		u.noinfo = 0;
		rc = unw_step(&c);
		if (rc <= 0) {
			/* 0: the outermost frame (its return address undefined
			 * in the CFI), unless libunwind got there by giving up on
			 * a frame without unwind info (its frame-chain guess). */
			*partial = rc < 0 || u.noinfo;
			break;
		}
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0)
			break; /* partial */
		if (ip == 0) {
			/* A return address of 0 ends the chain too (Go's g0
			 * stacks, for one), as it did for libdwfl. */
			*partial = 0;
			break;
		}
		if (n == cap) {
			*truncated = 1;
			*partial = 0;
			break;
		}
		out[n++] = ip;
	}
	return n;
}
