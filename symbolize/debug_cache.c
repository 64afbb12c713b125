/* symbolize/debug_cache: uncompressed copies of debug information, kept
 * between conversions and named by build-id.
 *
 * Debian's -dbg and -dbgsym packages, Go binaries and -gz builds carry their
 * DWARF compressed with zlib, and libdw inflates every debug section of a
 * file when it opens it: for libc's debug file (3.4 MB compressed, 10 MB
 * inflated) that is about 35 ms, most of a cold conversion, paid again by
 * every converter that starts. The first converter to open such a file
 * writes an uncompressed copy here; later ones report the copy instead,
 * which libdw reads in place.
 *
 * The copy is the same ELF file with its compressed .debug_* sections
 * inflated: every section before the first of them keeps its offset (so
 * the program headers still describe the loadable contents), the rest
 * follow in order, then the section header table. NOBITS sections keep
 * their sizes.
 *
 * It is an optimization only: whatever goes wrong (no room, a cache that is
 * not ours, a copy that does not check out), the original is read as
 * before. Only a file whose build-id is the one the module was recorded
 * with is copied (a dump names any path it likes). A file is not copied
 * when libdw would look for other files relative to its directory (a dwz
 * alt link, split DWARF's .debug_addr), or when it uses a compression
 * libelf cannot undo. A copy is trusted only from a local directory of
 * ours that others cannot write, as a regular file of ours (never a link),
 * whole, with the build-id and the section count of the file it stands
 * for and nothing compressed; one that is not is removed and made again.
 * It is written to a temporary, synced and renamed, so a crash leaves no
 * half copy under a copy's name. Copies are dropped least recently used
 * first (their mtime, set at each use) to keep the cache under its size,
 * and a copy larger than the whole cache is not made. */
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
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

/* Below this many compressed bytes, inflating costs less than a copy's
 * lookup and the room it takes (a quarter MiB inflates in about 2 ms). */
#define MIN_COMPRESSED (256u << 10)
/* A temporary left by a converter that died is removed after this long. */
#define STALE_TMP_S 3600
/* "<hex>-<kind>.debug": at most 64 bytes of build-id. */
#define NAME_MAX_LEN (2 * WP_BUILD_ID_MAX + 16)
/* Network file systems: another host may remove a copy this one has mapped. */
#define NFS_MAGIC 0x6969
#define SMB_MAGIC 0x517B
#define CIFS_MAGIC 0xFF534D42u
#define SMB2_MAGIC 0xFE534D42u

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

/* What a file holds, for deciding on a copy and checking one. */
struct survey {
	char hex[2 * WP_BUILD_ID_MAX + 1]; /* its build-id */
	size_t shnum;
	uint64_t compressed; /* bytes of its compressed sections */
	uint64_t need;       /* bytes its copy takes at most */
};

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return a > 1 ? (v + a - 1) / a * a : v;
}

/* Fills `sv`. Returns 1 when the file can be copied (or is a copy: nothing
 * compressed), 0 when it must be read as it is: no build-id, a section
 * libelf cannot read, a compression other than zlib's, a compressed
 * section that is not .debug_*, the older .zdebug form, a dwz alt link or
 * split DWARF (libdw looks for those files beside the one it reads). */
static int survey(Elf *e, struct survey *sv)
{
	const void *id;
	ssize_t len = dwelf_elf_gnu_build_id(e, &id);
	size_t shstrndx;
	GElf_Ehdr eh;

	memset(sv, 0, sizeof(*sv));
	if (len <= 0 || len > WP_BUILD_ID_MAX || !gelf_getehdr(e, &eh) ||
	    elf_getshdrstrndx(e, &shstrndx) != 0 || elf_getshdrnum(e, &sv->shnum) != 0)
		return 0;
	for (ssize_t i = 0; i < len; i++)
		snprintf(sv->hex + 2 * i, 3, "%02x", ((const unsigned char *)id)[i]);
	sv->need = (uint64_t)eh.e_ehsize + (uint64_t)eh.e_phnum * eh.e_phentsize +
		   (uint64_t)sv->shnum * eh.e_shentsize;
	for (Elf_Scn *s = NULL; (s = elf_nextscn(e, s));) {
		GElf_Shdr sh;
		GElf_Chdr ch;
		const char *name;

		if (!gelf_getshdr(s, &sh) || !(name = elf_strptr(e, shstrndx, sh.sh_name)))
			return 0;
		if (!strncmp(name, ".zdebug", 7) || !strcmp(name, ".gnu_debugaltlink") ||
		    !strcmp(name, ".debug_addr"))
			return 0;
		if (sh.sh_flags & SHF_COMPRESSED) {
			if (strncmp(name, ".debug_", 7) || !gelf_getchdr(s, &ch) ||
			    ch.ch_type != ELFCOMPRESS_ZLIB)
				return 0;
			sv->compressed += sh.sh_size;
			sv->need += align_up(ch.ch_size, ch.ch_addralign) + ch.ch_addralign;
		} else if (sh.sh_type != SHT_NOBITS) {
			sv->need += sh.sh_size + sh.sh_addralign;
		}
	}
	return 1;
}

/* Whether the file's section header table and every section's contents lie
 * within its `size` bytes (a copy cut short has lost its header table,
 * which comes last, and libelf would then find the build-id note through
 * the program headers and no section at all). */
static int whole(Elf *e, uint64_t size)
{
	GElf_Ehdr eh;
	size_t n;

	if (!gelf_getehdr(e, &eh) || elf_getshdrnum(e, &n) != 0 || n < 2 || eh.e_shoff > size ||
	    (uint64_t)n * eh.e_shentsize > size - eh.e_shoff)
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

/* Removes `name` if it is still the file `fd` is open on (another
 * converter may have renamed a good copy over it meanwhile). */
static void remove_if_same(int dirfd, const char *name, int fd)
{
	struct stat a, b;

	if (fstat(fd, &a) == 0 && fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		unlinkat(dirfd, name, 0);
}

/* The copy `name` in the cache, open for reading, when it checks out
 * against `src` (build-id and section count); its mtime is set to now, the
 * cache dropping the least recently used first. -1 when there is none or
 * it does not check out (then it is removed). */
static int open_copy(int dirfd, const char *name, const struct survey *src)
{
	int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	struct stat st;
	struct survey got;
	int ok = 0;

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
	    st.st_size > 0) {
		Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);

		ok = e && elf_kind(e) == ELF_K_ELF && whole(e, (uint64_t)st.st_size) &&
		     survey(e, &got) && !strcmp(got.hex, src->hex) && got.compressed == 0 &&
		     got.shnum == src->shnum;
		elf_end(e);
	}
	if (!ok) {
		remove_if_same(dirfd, name, fd);
		close(fd);
		return -1;
	}
	futimens(fd, NULL);
	return fd;
}

/* The section's contents, for the copy: inflated when compressed. Returns
 * 0, or -1 when libelf cannot give them. */
static int copy_data(Elf_Scn *from, Elf_Scn *to, const GElf_Shdr *sh)
{
	Elf_Data *in, *o = elf_newdata(to);

	if (!o)
		return -1;
	if (sh->sh_type == SHT_NOBITS) {
		/* no bytes, but its size: libelf takes a section's size
		 * from its data */
		o->d_buf = NULL;
		o->d_type = ELF_T_BYTE;
		o->d_size = sh->sh_size;
		o->d_align = sh->sh_addralign ? sh->sh_addralign : 1;
		o->d_version = EV_CURRENT;
		return 0;
	}
	in = elf_getdata(from, NULL);
	if (!in) {
		if (sh->sh_size)
			return -1;
		o->d_type = ELF_T_BYTE;
		o->d_version = EV_CURRENT;
		return 0;
	}
	o->d_buf = in->d_buf;
	o->d_type = in->d_type;
	o->d_size = in->d_size;
	o->d_off = 0;
	o->d_align = in->d_align;
	o->d_version = in->d_version;
	return 0;
}

/* Writes `src` to `fd` with every compressed section inflated (see the
 * top of the file for the layout). Returns 0, or -1. */
static int write_inflated(Elf *src, int fd)
{
	Elf *dst = elf_begin(fd, ELF_C_WRITE, NULL);
	GElf_Ehdr eh;
	size_t nph, shstrndx, shnum;
	uint64_t end;
	int moved = 0, rc = -1;

	if (!dst || !gelf_getehdr(src, &eh) || elf_getphdrnum(src, &nph) != 0 ||
	    elf_getshdrstrndx(src, &shstrndx) != 0 || shstrndx >= SHN_LORESERVE ||
	    elf_getshdrnum(src, &shnum) != 0 || shnum >= SHN_LORESERVE ||
	    !gelf_newehdr(dst, gelf_getclass(src)))
		goto out;
	elf_flagelf(dst, ELF_C_SET, ELF_F_LAYOUT);
	end = eh.e_ehsize;
	if (nph) {
		if (!gelf_newphdr(dst, nph))
			goto out;
		for (size_t i = 0; i < nph; i++) {
			GElf_Phdr ph;

			if (!gelf_getphdr(src, (int)i, &ph) || !gelf_update_phdr(dst, (int)i, &ph))
				goto out;
		}
		if (eh.e_phoff + (uint64_t)nph * eh.e_phentsize > end)
			end = eh.e_phoff + (uint64_t)nph * eh.e_phentsize;
	}
	for (Elf_Scn *s = NULL; (s = elf_nextscn(src, s));) {
		Elf_Scn *d = elf_newscn(dst);
		GElf_Shdr sh;

		if (!d || !gelf_getshdr(s, &sh))
			goto out;
		if (sh.sh_flags & SHF_COMPRESSED) {
			if (elf_compress(s, 0, 0) < 0 || !gelf_getshdr(s, &sh))
				goto out;
			moved = 1;
		}
		if (moved)
			sh.sh_offset = align_up(end, sh.sh_addralign);
		if (copy_data(s, d, &sh) < 0)
			goto out;
		if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > end)
			end = sh.sh_offset + sh.sh_size;
		if (!gelf_update_shdr(d, &sh))
			goto out;
	}
	eh.e_shoff = align_up(end, 8);
	eh.e_shnum = (GElf_Half)shnum;
	eh.e_shstrndx = (GElf_Half)shstrndx;
	if (!gelf_update_ehdr(dst, &eh) || elf_update(dst, ELF_C_WRITE) < 0)
		goto out;
	rc = 0;
out:
	elf_end(dst);
	return rc;
}

struct entry {
	char name[NAME_MAX_LEN];
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

/* Whether `name` is a copy's ("<hex>-<kind>.debug"). */
static int is_copy(const char *name)
{
	size_t n = strlen(name), i;

	if (n < 10 || n >= NAME_MAX_LEN || strcmp(name + n - 6, ".debug") || name[n - 8] != '-' ||
	    (name[n - 7] != WP_SYM_COPY_MODULE && name[n - 7] != WP_SYM_COPY_DEBUG))
		return 0;
	for (i = 0; i < n - 8; i++)
		if (!((name[i] >= '0' && name[i] <= '9') || (name[i] >= 'a' && name[i] <= 'f')))
			return 0;
	return 1;
}

/* Removes the least recently used copies until the others, the
 * temporaries being written and `need` more bytes fit under the cache's
 * size, and temporaries a dead converter left. Returns 0 when `need` fits
 * then, or -1. */
static int make_room(int dirfd, uint64_t need)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
	while ((de = readdir(d))) {
		struct stat st;

		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		if (de->d_name[0] == '.' && strstr(de->d_name, ".tmp")) {
			if (now - st.st_mtim.tv_sec > STALE_TMP_S)
				unlinkat(dirfd, de->d_name, 0);
			else
				total += (uint64_t)st.st_size;
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
static int make_copy(int dirfd, Elf *src, const char *name, const struct survey *sv)
{
	char tmp[NAME_MAX_LEN + 32];
	int fd, rd = -1;

	if (sv->need > cache_max || make_room(dirfd, sv->need) != 0)
		return -1;
	snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
	fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (write_inflated(src, fd) == 0 && fsync(fd) == 0 &&
	    renameat(dirfd, tmp, dirfd, name) == 0) {
		rd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
		close(fd);
		return rd;
	}
	close(fd);
	unlinkat(dirfd, tmp, 0);
	return -1;
}

/* The cache directory, open, when it is a local one of ours that others
 * cannot write (a shared one could hand us any file under any name); -1
 * otherwise. */
static int open_cache(void)
{
	int dirfd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	struct statfs fs;

	if (dirfd < 0)
		return -1;
	if (fstat(dirfd, &st) == 0 && st.st_uid == geteuid() && !(st.st_mode & 022) &&
	    fstatfs(dirfd, &fs) == 0 && fs.f_type != NFS_MAGIC && fs.f_type != SMB_MAGIC &&
	    (uint32_t)fs.f_type != CIFS_MAGIC && (uint32_t)fs.f_type != SMB2_MAGIC)
		return dirfd;
	close(dirfd);
	return -1;
}

int wp_sym_cache_swap(int fd, const uint8_t *id, uint32_t id_len, char kind)
{
	char want[2 * WP_BUILD_ID_MAX + 1], name[NAME_MAX_LEN];
	struct survey sv;
	Elf *e;
	int dirfd, got = -1;

	if (!cache_dir[0] || fd < 0 || !id_len || id_len > WP_BUILD_ID_MAX)
		return fd;
	for (uint32_t i = 0; i < id_len; i++)
		snprintf(want + 2 * i, 3, "%02x", id[i]);
	/* libdwfl sets it in dwfl_begin; the first file may come before. */
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF || !survey(e, &sv) || strcmp(sv.hex, want) ||
	    sv.compressed < MIN_COMPRESSED) {
		elf_end(e);
		return fd;
	}
	snprintf(name, sizeof(name), "%s-%c.debug", sv.hex, kind);
	if ((dirfd = open_cache()) >= 0) {
		got = open_copy(dirfd, name, &sv);
		if (got < 0)
			got = make_copy(dirfd, e, name, &sv);
		close(dirfd);
	}
	elf_end(e);
	if (got < 0)
		return fd;
	close(fd);
	return got;
}
