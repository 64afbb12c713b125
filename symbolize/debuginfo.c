/* symbolize/debuginfo: where libdwfl gets debug files from (build-id tree,
 * .gnu_debuglink paths; debuginfod only on request) and the vDSO image from
 * memory, since it has no file on disk. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "symbolize_int.h"

#include <elf.h>
#include <elfutils/libdwelf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define DEBUG_ROOT "/usr/lib/debug"

/* ---- debug files ---------------------------------------------------------- */

/* debuginfod: in elfutils 0.188 only dwfl_standard_find_debuginfo (after the
 * local search fails) and dwfl_build_id_find_elf reach it: a pthread_once
 * dlopen of libdebuginfod.so.1, then debuginfod_find_* which queries
 * $DEBUGINFOD_URLS (Debian sets it from /etc/profile.d) with a long timeout,
 * at process exit. libdw itself (dwarf_getalt) never does. We cannot unset
 * the variable under the host, so by default our find_debuginfo does the
 * local part itself: the build-id tree by our own lookup (so that the debug
 * cache can stand in for what it finds), dwfl_build_id_find_debuginfo (no
 * debuginfod inside; it also finds dwz alt files), then the .gnu_debuglink
 * paths; find_elf is never needed since every module is reported with
 * dwfl_report_elf. WALLPROF_DEBUGINFOD=1 selects the standard callback,
 * debuginfod included, after the local part. */

static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}

/* CRC-32 of a whole file, as .gnu_debuglink records it. */
static int file_crc(int fd, uint32_t *out)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, crc_init);
	unsigned char buf[65536];
	uint32_t c = 0xffffffffu;
	off_t off = 0;
	for (;;) {
		ssize_t n = pread(fd, buf, sizeof(buf), off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			break;
		for (ssize_t i = 0; i < n; i++)
			c = crc_table[(c ^ buf[i]) & 0xff] ^ (c >> 8);
		off += n;
	}
	*out = c ^ 0xffffffffu;
	return 0;
}

/* Opens `path` if it is a debug file for `mod`: same build-id, or when the
 * module has none, the debuglink CRC. Never the main file itself. */
static int try_debug_file(Dwfl_Module *mod, const struct stat *main_st, const char *path,
			  uint32_t crc)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (fstat(fd, &st) != 0 ||
	    (main_st && st.st_dev == main_st->st_dev && st.st_ino == main_st->st_ino)) {
		close(fd);
		return -1;
	}
	const unsigned char *bits;
	GElf_Addr vaddr;
	int n = dwfl_module_build_id(mod, &bits, &vaddr);
	int ok = 0;
	if (n > 0) {
		Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
		const void *id;
		ssize_t len = elf ? dwelf_elf_gnu_build_id(elf, &id) : -1;
		ok = len == n && !memcmp(id, bits, n);
		elf_end(elf);
	} else {
		uint32_t c;
		ok = file_crc(fd, &c) == 0 && c == crc;
	}
	if (!ok) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The .gnu_debuglink search of dwfl_standard_find_debuginfo's default path
 * (":.debug:/usr/lib/debug"): next to the file, in .debug/ next to it, and
 * under /usr/lib/debug/<its dir>, for the path and its realpath. */
static int find_by_debuglink(Dwfl_Module *mod, const char *file_name, const char *link,
			     uint32_t crc, char **found)
{
	if (!link || !link[0])
		return -1;
	struct stat main_st;
	int have_st = file_name && stat(file_name, &main_st) == 0;
	const struct stat *mst = have_st ? &main_st : NULL;
	char path[PATH_MAX];
	if (link[0] == '/') {
		int fd = try_debug_file(mod, mst, link, crc);
		if (fd >= 0 && !(*found = strdup(link))) {
			close(fd);
			return -1;
		}
		return fd;
	}
	if (!file_name)
		return -1;
	char *real = realpath(file_name, NULL);
	const char *names[2] = { file_name, real && strcmp(real, file_name) ? real : NULL };
	int fd = -1;
	for (int k = 0; k < 2 && fd < 0; k++) {
		if (!names[k])
			continue;
		char *copy = strdup(names[k]);
		if (!copy)
			break;
		const char *dir = dirname(copy);
		const char *fmts[3] = { "%s/%s", "%s/.debug/%s", DEBUG_ROOT "%s/%s" };
		for (int i = 0; i < 3 && fd < 0; i++) {
			/* A relative dir under /usr/lib/debug means nothing. */
			if (i == 2 && dir[0] != '/')
				continue;
			int n = snprintf(path, sizeof(path), fmts[i], dir, link);
			if (n < 0 || (size_t)n >= sizeof(path))
				continue;
			fd = try_debug_file(mod, mst, path, crc);
		}
		free(copy);
	}
	free(real);
	if (fd >= 0 && !(*found = strdup(path))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* `fd`, a debug file of `mod`, or its copy from the debug cache. */
static int swap(Dwfl_Module *mod, int fd)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	int n = dwfl_module_build_id(mod, &bits, &vaddr);

	return wp_sym_cache_swap(fd, bits, n > 0 ? (uint32_t)n : 0, WP_SYM_COPY_DEBUG);
}

/* The build-id tree first, by our own lookup: dwfl_build_id_find_debuginfo
 * keeps the ELF handle of what it finds inside the module, whatever
 * descriptor is returned, so the debug cache could not stand in for it.
 * The name given back is the file's real path, as libdwfl's own lookup
 * gives it (a relative alt link is resolved against its directory). */
static int by_build_id(Dwfl_Module *mod, char **found)
{
	const unsigned char *bits;
	GElf_Addr vaddr;
	char path[WP_BUILD_ID_MAX * 2 + 64];
	int n = dwfl_module_build_id(mod, &bits, &vaddr), fd;

	if (n <= 0 || wp_sym_build_id_debug_path(bits, (uint32_t)n, path, sizeof(path)) != 0)
		return -1;
	fd = try_debug_file(mod, NULL, path, 0);
	if (fd >= 0 && !(*found = realpath(path, NULL)) && !(*found = strdup(path))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Whether libdwfl asks for the module's dwz alt file (.gnu_debugaltlink)
 * rather than its debug file: it asks the same callback, with the alt
 * file's name where the module's own .gnu_debuglink would be, once the
 * module's DWARF is open, that is once its debug file is set, which
 * dwfl_module_info tells by a dwbias other than -1 (as libdwfl's own
 * dwfl_build_id_find_debuginfo suggests). */
static int alt_call(Dwfl_Module *mod)
{
	Dwarf_Addr dwbias = (Dwarf_Addr)-1;

	dwfl_module_info(mod, NULL, NULL, NULL, &dwbias, NULL, NULL, NULL);
	return dwbias != (Dwarf_Addr)-1;
}

static int local_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
				Dwarf_Addr base, const char *file_name, const char *debuglink_file,
				GElf_Word debuglink_crc, char **debuginfo_file_name)
{
	int alt = alt_call(mod), fd = -1;

	/* An alt file is looked up as it always was, and read as it is. */
	if (!alt && (fd = by_build_id(mod, debuginfo_file_name)) >= 0)
		return swap(mod, fd);
	fd = dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
					  debuglink_crc, debuginfo_file_name);
	if (fd >= 0)
		return fd;
	fd = find_by_debuglink(mod, file_name, debuglink_file, debuglink_crc, debuginfo_file_name);
	return alt ? fd : swap(mod, fd);
}

/* The local search (through the debug cache), then the standard one, whose
 * debuginfod part downloads what is missing (those files are read as they
 * are). */
static int standard_find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
				   Dwarf_Addr base, const char *file_name,
				   const char *debuglink_file, GElf_Word debuglink_crc,
				   char **debuginfo_file_name)
{
	int fd = local_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
				      debuglink_crc, debuginfo_file_name);

	if (fd >= 0)
		return fd;
	return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
					    debuglink_crc, debuginfo_file_name);
}

/* Never used for modules reported with dwfl_report_elf; present so that no
 * path can reach dwfl_build_id_find_elf and its debuginfod fallback. */
static int no_find_elf(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
		       char **file_name, Elf **elfp)
{
	(void)mod, (void)userdata, (void)modname, (void)base, (void)file_name;
	*elfp = NULL;
	return -1;
}

static const Dwfl_Callbacks local_callbacks = {
	.find_elf = no_find_elf,
	.find_debuginfo = local_find_debuginfo,
};

static const Dwfl_Callbacks debuginfod_callbacks = {
	.find_elf = no_find_elf,
	.find_debuginfo = standard_find_debuginfo,
};

static int use_debuginfod = -1; /* -1: WALLPROF_DEBUGINFOD decides */

void wp_sym_set_debuginfod(int on)
{
	use_debuginfod = on;
}

const Dwfl_Callbacks *wp_sym_callbacks(void)
{
	const char *e;

	if (use_debuginfod >= 0)
		return use_debuginfod ? &debuginfod_callbacks : &local_callbacks;
	e = getenv("WALLPROF_DEBUGINFOD");
	return e && !strcmp(e, "1") ? &debuginfod_callbacks : &local_callbacks;
}

int wp_sym_build_id_debug_path(const uint8_t *id, uint32_t len, char *buf, size_t size)
{
	size_t pre = sizeof(DEBUG_ROOT "/.build-id/") - 1;
	if (len < 2 || len > WP_BUILD_ID_MAX || size < pre + 2 * len + sizeof("/.debug"))
		return -1;
	char *p = buf;
	memcpy(p, DEBUG_ROOT "/.build-id/", pre);
	p += pre;
	wp_sym_hex(id, 1, p);
	p[2] = '/';
	wp_sym_hex(id + 1, len - 1, p + 3);
	memcpy(p + 1 + 2 * len, ".debug", sizeof(".debug"));
	return 0;
}

/* ---- vDSO ----------------------------------------------------------------- */

static int note_has_build_id(const unsigned char *p, size_t size, const struct wp_module *m)
{
	uint8_t id[WP_BUILD_ID_MAX];
	uint32_t len;
	return wp_sym_build_id_note(p, size, id, &len) && len == m->build_id_len &&
	       !memcmp(id, m->build_id, len);
}

/* The vDSO exists only in memory. Every process on a kernel maps the same
 * image, so ours stands in for the recorded one when the build-ids match; a
 * dump symbolized under another kernel gets module+offset. */
int wp_sym_vdso_fd(const struct wp_module *m)
{
	uintptr_t base = getauxval(AT_SYSINFO_EHDR);
	if (!base || !m->build_id_len)
		return -1;
	long pg = sysconf(_SC_PAGESIZE);
	unsigned char vec;
	if (base % pg || mincore((void *)base, 1, &vec) != 0)
		return -1;
	const ElfW(Ehdr) *eh = (const void *)base;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_phentsize != sizeof(ElfW(Phdr)) ||
	    eh->e_phoff + (size_t)eh->e_phnum * sizeof(ElfW(Phdr)) > (size_t)pg)
		return -1;
	/* The image is everything up to the section headers (last in the
	 * file) or the end of the loaded contents, whichever is further. */
	size_t size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	const ElfW(Phdr) *ph = (const void *)(base + eh->e_phoff);
	for (int i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_LOAD && ph[i].p_offset + ph[i].p_filesz > size)
			size = ph[i].p_offset + ph[i].p_filesz;
	if (size > (1u << 20))
		return -1;
	for (size_t off = pg; off < size; off += pg)
		if (mincore((void *)(base + off), 1, &vec) != 0)
			return -1;
	int id_ok = 0;
	for (int i = 0; i < eh->e_phnum; i++)
		if (ph[i].p_type == PT_NOTE && ph[i].p_offset + ph[i].p_filesz <= size)
			id_ok |= note_has_build_id((const unsigned char *)base + ph[i].p_offset,
						   ph[i].p_filesz, m);
	if (!id_ok)
		return -1;
	int fd = memfd_create("wallprof-vdso", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	for (size_t done = 0; done < size;) {
		ssize_t n = write(fd, (const char *)base + done, size - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			close(fd);
			return -1;
		}
		done += n;
	}
	return fd;
}

static int mapped_pid;

void wp_sym_set_process(int pid)
{
	mapped_pid = pid > 0 ? pid : 0;
}

int wp_sym_mapped_fd(const struct wp_module *m)
{
	char line[512], path[96];
	FILE *f;
	int fd = -1;

	if (!mapped_pid)
		return -1;
	snprintf(path, sizeof(path), "/proc/%d/maps", mapped_pid);
	if (!(f = fopen(path, "re")))
		return -1;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, ino;
		unsigned long long off;

		if (sscanf(line, "%lx-%lx %*s %llx %*s %lu", &lo, &hi, &off, &ino) != 4)
			continue;
		if (lo == m->start && ino != 0) {
			snprintf(path, sizeof(path), "/proc/%d/map_files/%lx-%lx", mapped_pid, lo,
				 hi);
			fd = open(path, O_RDONLY | O_CLOEXEC);
			break;
		}
	}
	fclose(f);
	return fd;
}
