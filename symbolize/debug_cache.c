/* symbolize/debug_cache: uncompressed copies of debug information, kept
 * between conversions and keyed by build-id.
 *
 * Debian's -dbg and -dbgsym packages, Go binaries and -gz builds carry their
 * DWARF compressed with zlib, and libdw inflates every debug section of a
 * file when it opens it: for libc's debug file (3.4 MB compressed, 10 MB
 * inflated) that is about 35 ms, most of a cold conversion, paid again by
 * every converter that starts. The first converter to open such a file
 * writes an uncompressed copy here ("<build-id>.debug": the same ELF file,
 * its compressed sections inflated, laid out anew by libelf); later ones
 * report the copy instead, which libdw reads in place.
 *
 * The copy is an optimization only: whatever goes wrong (no room, a cache
 * that is not ours, a copy that does not check out), the original is read
 * as before. A copy is trusted only from a directory of ours that others
 * cannot write, as a regular file of ours, with the build-id it is named
 * after and nothing compressed in it; it is written to a temporary, synced
 * and renamed, so a crash leaves no half copy under a copy's name. Copies
 * are dropped least recently used first (their mtime, set at each use) to
 * keep the cache under its size. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "symbolize_int.h"

#include <dirent.h>
#include <elfutils/libdwelf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Below this many compressed bytes, inflating costs less than a copy's
 * lookup and the room it takes (a quarter MiB inflates in about 2 ms). */
#define MIN_COMPRESSED (256u << 10)
/* A temporary left by a converter that died is removed after this long. */
#define STALE_TMP_S 3600

static char cache_dir[4096];
static uint64_t cache_max;

void wp_sym_set_debug_cache(const char *dir, uint64_t max_bytes)
{
	if (!dir || !*dir || strlen(dir) >= sizeof(cache_dir)) {
		cache_dir[0] = 0;
		return;
	}
	snprintf(cache_dir, sizeof(cache_dir), "%s", dir);
	cache_max = max_bytes;
}

/* The file's build-id as lowercase hex into `hex` (at least 2 * 64 + 1
 * bytes), and how many compressed bytes its sections hold; -1 when it has
 * no build-id or a section libelf cannot read, or uses the older ".zdebug"
 * compression, which the copy does not undo. */
static int survey(Elf *e, char *hex, size_t hexlen, uint64_t *compressed)
{
	const void *id;
	ssize_t len = dwelf_elf_gnu_build_id(e, &id);
	size_t shstrndx;

	*compressed = 0;
	if (len <= 0 || (size_t)len * 2 + 1 > hexlen || elf_getshdrstrndx(e, &shstrndx) != 0)
		return -1;
	for (ssize_t i = 0; i < len; i++)
		snprintf(hex + 2 * i, 3, "%02x", ((const unsigned char *)id)[i]);
	for (Elf_Scn *s = NULL; (s = elf_nextscn(e, s));) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(s, &sh))
			return -1;
		name = elf_strptr(e, shstrndx, sh.sh_name);
		if (name && !strncmp(name, ".zdebug", 7))
			return -1;
		if (sh.sh_flags & SHF_COMPRESSED)
			*compressed += sh.sh_size;
	}
	return 0;
}

/* Whether the file's section header table and every section's contents lie
 * within its `size` bytes (a copy cut short has lost its header table, which
 * libelf puts last, and libelf would then find the build-id note through the
 * program headers and no section at all). */
static int whole(Elf *e, uint64_t size)
{
	GElf_Ehdr eh;
	size_t n;

	if (!gelf_getehdr(e, &eh) || elf_getshdrnum(e, &n) != 0 || n < 2 ||
	    eh.e_shoff + (uint64_t)n * eh.e_shentsize > size)
		return 0;
	for (Elf_Scn *s = NULL; (s = elf_nextscn(e, s));) {
		GElf_Shdr sh;

		if (!gelf_getshdr(s, &sh) ||
		    (sh.sh_type != SHT_NOBITS &&
		     (sh.sh_offset > size || sh.sh_size > size - sh.sh_offset)))
			return 0;
	}
	return 1;
}

/* The copy named `hex` in the cache, open for reading, when it checks out;
 * its mtime is set to now (the cache drops the least recently used). -1
 * when there is none or it does not check out (then it is removed). */
static int open_copy(int dirfd, const char *name, const char *hex)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	char got[2 * 64 + 1];
	uint64_t compressed;
	int ok = 0;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    st.st_size > 0) {
		Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);

		ok = e && elf_kind(e) == ELF_K_ELF && whole(e, (uint64_t)st.st_size) &&
		     survey(e, got, sizeof(got), &compressed) == 0 && !strcmp(got, hex) &&
		     compressed == 0;
		elf_end(e);
	}
	if (!ok) {
		close(fd);
		unlinkat(dirfd, name, 0);
		return -1;
	}
	futimens(fd, NULL);
	return fd;
}

/* Writes `src` to `fd` with every compressed section inflated; the rest as
 * it is (program headers included; libelf lays the file out anew, so their
 * offsets no longer match, which nothing reading debug information uses).
 * Returns 0, or -1. */
static int write_inflated(Elf *src, int fd)
{
	Elf *dst = elf_begin(fd, ELF_C_WRITE, NULL);
	GElf_Ehdr eh;
	size_t nph, shstrndx;
	int rc = -1;

	if (!dst || !gelf_getehdr(src, &eh) || elf_getphdrnum(src, &nph) != 0 ||
	    elf_getshdrstrndx(src, &shstrndx) != 0 || shstrndx >= SHN_LORESERVE ||
	    !gelf_newehdr(dst, gelf_getclass(src)))
		goto out;
	if (nph) {
		if (!gelf_newphdr(dst, nph))
			goto out;
		for (size_t i = 0; i < nph; i++) {
			GElf_Phdr ph;

			if (!gelf_getphdr(src, (int)i, &ph) || !gelf_update_phdr(dst, (int)i, &ph))
				goto out;
		}
	}
	for (Elf_Scn *s = NULL; (s = elf_nextscn(src, s));) {
		Elf_Scn *d = elf_newscn(dst);
		GElf_Shdr sh;
		Elf_Data *in, *o;

		if (!d || !gelf_getshdr(s, &sh))
			goto out;
		if ((sh.sh_flags & SHF_COMPRESSED) &&
		    (elf_compress(s, 0, 0) < 0 || !gelf_getshdr(s, &sh)))
			goto out;
		if (sh.sh_type != SHT_NOBITS && (in = elf_getdata(s, NULL))) {
			if (!(o = elf_newdata(d)))
				goto out;
			o->d_buf = in->d_buf;
			o->d_type = in->d_type;
			o->d_size = in->d_size;
			o->d_off = 0;
			o->d_align = in->d_align;
			o->d_version = in->d_version;
		}
		if (!gelf_update_shdr(d, &sh))
			goto out;
	}
	eh.e_shstrndx = (GElf_Half)shstrndx;
	if (!gelf_update_ehdr(dst, &eh) || elf_update(dst, ELF_C_WRITE) < 0)
		goto out;
	rc = 0;
out:
	elf_end(dst);
	return rc;
}

struct entry {
	char name[80];
	uint64_t size;
	struct timespec mtime;
};

static int older(const void *a, const void *b)
{
	const struct entry *x = a, *y = b;

	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Whether `name` is a copy's ("<hex>.debug"). */
static int is_copy(const char *name)
{
	size_t n = strlen(name), i;

	if (n < 8 || n >= sizeof(((struct entry *)0)->name) || strcmp(name + n - 6, ".debug"))
		return 0;
	for (i = 0; i < n - 6; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	return 1;
}

/* Removes the least recently used copies until the others and `need` more
 * bytes fit under the cache's size, and temporaries a dead converter left.
 * Returns 0 when `need` fits then, or -1. */
static int make_room(int dirfd, uint64_t need)
{
	int fd = dup(dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct entry *v = NULL;
	size_t nr = 0, cap = 0;
	uint64_t total = 0;
	struct dirent *de;
	time_t now = time(NULL);
	int rc = -1;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* The duplicate shares the directory's offset with dirfd, which an
	 * earlier call left at its end. */
	rewinddir(d);
	while ((de = readdir(d))) {
		struct stat st;

		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (de->d_name[0] == '.' && strstr(de->d_name, ".tmp")) {
			if (now - st.st_mtim.tv_sec > STALE_TMP_S)
				unlinkat(dirfd, de->d_name, 0);
			continue;
		}
		if (!is_copy(de->d_name))
			continue;
		if (nr == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct entry *nv = realloc(v, ncap * sizeof(*v));

			if (!nv)
				goto out;
			v = nv;
			cap = ncap;
		}
		memcpy(v[nr].name, de->d_name, strlen(de->d_name) + 1); /* is_copy: it fits */
		v[nr].size = (uint64_t)st.st_size;
		v[nr].mtime = st.st_mtim;
		total += v[nr++].size;
	}
	qsort(v, nr, sizeof(*v), older);
	for (size_t i = 0; i < nr && total + need > cache_max; i++)
		if (unlinkat(dirfd, v[i].name, 0) == 0)
			total -= v[i].size;
	rc = total + need <= cache_max ? 0 : -1;
out:
	free(v);
	closedir(d);
	return rc;
}

/* Makes the copy of `src` named `name`; returns it open for reading, or -1. */
static int make_copy(int dirfd, Elf *src, const char *name, uint64_t need)
{
	char tmp[2 * 64 + 48];
	int fd, rd = -1;

	if (make_room(dirfd, need) != 0)
		return -1;
	snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
	fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (write_inflated(src, fd) == 0 && fsync(fd) == 0 &&
	    renameat(dirfd, tmp, dirfd, name) == 0) {
		rd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		close(fd);
		/* Inflated, it may be larger than the room made: the
		 * oldest go (this one last, and kept open here either way). */
		make_room(dirfd, 0);
		return rd;
	}
	close(fd);
	unlinkat(dirfd, tmp, 0);
	return -1;
}

int wp_sym_cache_swap(int fd)
{
	char hex[2 * 64 + 1], name[2 * 64 + 16];
	uint64_t compressed;
	Elf *e;
	int dirfd, got = -1;
	struct stat st;

	if (!cache_dir[0] || fd < 0)
		return fd;
	/* libdwfl sets it in dwfl_begin; the first file may come before. */
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF || survey(e, hex, sizeof(hex), &compressed) != 0 ||
	    compressed < MIN_COMPRESSED) {
		elf_end(e);
		return fd;
	}
	snprintf(name, sizeof(name), "%s.debug", hex);
	dirfd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	/* A cache others can write could hand us any file under any name. */
	if (dirfd >= 0 && fstat(dirfd, &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & 022)) {
		got = open_copy(dirfd, name, hex);
		/* The inflated size is not known before inflating; the
		 * file's own size stands in for what the copy needs at
		 * least. */
		if (got < 0 && fstat(fd, &st) == 0)
			got = make_copy(dirfd, e, name, (uint64_t)st.st_size);
	}
	if (dirfd >= 0)
		close(dirfd);
	elf_end(e);
	if (got < 0)
		return fd;
	close(fd);
	return got;
}
