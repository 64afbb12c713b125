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
 * alt link, split DWARF), when it uses a compression libelf cannot undo,
 * or when loaded contents follow a compressed section. A copy is trusted only from a local directory of
 * ours that others cannot write, as a regular file of ours (never a link),
 * whole, with the build-id and the section count of the file it stands
 * for and nothing compressed; one that is not is removed and made again.
 * It is written to a temporary, synced and renamed, so a crash leaves no
 * half copy under a copy's name. Copies are dropped least recently used
 * first (their mtime, set at each use) to keep the cache under its size,
 * once the new copy is written: nothing is dropped for a copy that would
 * not fit in the whole cache or could not be written. */
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
/* Network and user-space file systems: another host (or a daemon) may
 * remove or change a copy this one has mapped. */
static const uint32_t remote_fs[] = {
	0x6969u,     /* NFS */
	0x517Bu,     /* SMB */
	0xFF534D42u, /* CIFS */
	0xFE534D42u, /* SMB2 */
	0x65735546u, /* FUSE */
	0x00C36400u, /* Ceph */
	0x01021997u, /* 9p */
	0x47504653u, /* GPFS */
	0x5346414Fu, /* AFS */
};

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
	uint8_t id[WP_BUILD_ID_MAX]; /* its build-id */
	uint32_t id_len;
	size_t shnum;
	uint64_t compressed; /* bytes of its compressed sections */
	uint64_t need;       /* about the bytes its copy takes */
	int check_units;     /* .debug_addr: split DWARF is possible */
};

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return a > 1 ? (v + a - 1) / a * a : v;
}

/* Fills `sv`. Returns 1 when the file can be copied (or is a copy: nothing
 * compressed), 0 when it must be read as it is: no build-id, a section
 * libelf cannot read, a compression other than zlib's, a compressed
 * section that is not .debug_*, loaded contents after one (the copy moves
 * every section from the first inflated one on), the older .zdebug form,
 * a dwz alt link (libdw may look for it beside the file it reads). Split
 * DWARF, whose .dwo files libdw may look for there too, is told from its
 * units when the copy is written (check_units). */
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
	memcpy(sv->id, id, (size_t)len);
	sv->id_len = (uint32_t)len;
	sv->need = (uint64_t)eh.e_ehsize + (uint64_t)eh.e_phnum * eh.e_phentsize +
		   (uint64_t)sv->shnum * eh.e_shentsize;
	for (Elf_Scn *s = NULL; (s = elf_nextscn(e, s));) {
		GElf_Shdr sh;
		GElf_Chdr ch;
		const char *name;

		if (!gelf_getshdr(s, &sh) || !(name = elf_strptr(e, shstrndx, sh.sh_name)))
			return 0;
		if (!strncmp(name, ".zdebug", 7) || !strcmp(name, ".gnu_debugaltlink") ||
		    (sv->compressed && (sh.sh_flags & SHF_ALLOC) && sh.sh_type != SHT_NOBITS))
			return 0;
		if (!strcmp(name, ".debug_addr"))
			sv->check_units = 1;
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
		     survey(e, &got) && got.id_len == src->id_len &&
		     !memcmp(got.id, src->id, got.id_len) && got.compressed == 0 &&
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

/* Whether .debug_info's units (`d`, inflated) hold split DWARF: a DWARF 5
 * skeleton or split unit, or, with .debug_addr, any unit before version 5
 * (GNU's split DWARF 4). Unreadable headers count as split. */
static int split_units(const Elf_Data *d)
{
	const unsigned char *p = d->d_buf;
	uint64_t off = 0, size = d->d_size;

	while (off + 12 <= size) {
		uint64_t len;
		uint32_t l32;
		uint16_t version;
		unsigned hdr = 4;

		memcpy(&l32, p + off, 4);
		len = l32;
		if (l32 == 0xffffffffu) {
			memcpy(&len, p + off + 4, 8);
			hdr = 12;
		} else if (l32 >= 0xfffffff0u) {
			return 1;
		}
		if (len < 3 || len > size - off - hdr)
			return 1;
		memcpy(&version, p + off + hdr, 2);
		if (version < 5 || p[off + hdr + 2] == 4 /* DW_UT_skeleton */ ||
		    p[off + hdr + 2] == 5 /* DW_UT_split_compile */)
			return 1;
		off += hdr + len;
	}
	return 0;
}

/* Writes `src` to `fd` with every compressed section inflated (see the
 * top of the file for the layout); with `check_units`, not when
 * .debug_info holds split DWARF. Returns 0, or -1. */
static int write_inflated(Elf *src, int fd, int check_units)
{
	Elf *dst = elf_begin(fd, ELF_C_WRITE, NULL);
	GElf_Ehdr eh;
	size_t nph, shstrndx, shnum;
	uint64_t end;
	int moved = 0, rc = -1;
	size_t info_name = (size_t)-1;

	if (!dst || !gelf_getehdr(src, &eh) || elf_getphdrnum(src, &nph) != 0 ||
	    elf_getshdrstrndx(src, &shstrndx) != 0 || shstrndx >= SHN_LORESERVE ||
	    elf_getshdrnum(src, &shnum) != 0 || shnum >= SHN_LORESERVE ||
	    !gelf_newehdr(dst, gelf_getclass(src)))
		goto out;
	elf_flagelf(dst, ELF_C_SET, ELF_F_LAYOUT);
	for (Elf_Scn *s = NULL; check_units && (s = elf_nextscn(src, s));) {
		GElf_Shdr sh;
		const char *nm;

		if (gelf_getshdr(s, &sh) && (nm = elf_strptr(src, shstrndx, sh.sh_name)) &&
		    !strcmp(nm, ".debug_info"))
			info_name = sh.sh_name;
	}
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
		if (check_units && sh.sh_name == info_name) {
			Elf_Data *info = elf_getdata(s, NULL);

			if (!info || split_units(info))
				goto out;
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

/* Whether `name` is a temporary of ours (".<copy's name>.<pid>.tmp"). */
static int is_tmp(const char *name)
{
	size_t n = strlen(name);

	return name[0] == '.' && n > 5 && !strcmp(name + n - 4, ".tmp");
}

/* Removes temporaries a dead converter left and, when that is enough, the
 * least recently used copies until the others, the temporaries being
 * written (but `mine`) and `need` more bytes fit under the cache's size.
 * Returns 0 when `need` fits then; -1, having removed no copy, when it
 * would not fit even with every copy gone. */
static int make_room(int dirfd, uint64_t need, const char *mine)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct entry *v = NULL;
	size_t nr = 0, cap = 0;
	uint64_t total = 0, busy = 0;
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
		if (is_tmp(de->d_name)) {
			if (now - st.st_mtim.tv_sec > STALE_TMP_S)
				unlinkat(dirfd, de->d_name, 0);
			else if (strcmp(de->d_name, mine))
				busy += (uint64_t)st.st_size;
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
	if (busy + need > cache_max)
		goto out;
	if (nr)
		qsort(v, nr, sizeof(*v), older);
	for (size_t i = 0; i < nr && busy + total + need > cache_max; i++)
		if (unlinkat(dirfd, v[i].name, 0) == 0)
			total -= v[i].size;
	rc = busy + total + need <= cache_max ? 0 : -1;
out:
	free(v);
	closedir(d);
	return rc;
}

/* Makes the copy of `src` named `name`: written to a temporary first, so
 * that room is made for its real size and nothing is dropped for a copy
 * that cannot be written. Returns it open for reading, or -1. */
static int make_copy(int dirfd, Elf *src, const char *name, const struct survey *sv)
{
	char tmp[NAME_MAX_LEN + 32];
	struct stat st;
	int fd, rd = -1;

	if (sv->need > cache_max)
		return -1;
	snprintf(tmp, sizeof(tmp), ".%s.%d.tmp", name, (int)getpid());
	fd = openat(dirfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (write_inflated(src, fd, sv->check_units) == 0 && fsync(fd) == 0 &&
	    fstat(fd, &st) == 0 && make_room(dirfd, (uint64_t)st.st_size, tmp) == 0 &&
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
 * cannot write (a shared one could hand us any file under any name; on a
 * network file system another host could remove a copy we have mapped);
 * -1 otherwise. */
static int open_cache(void)
{
	int dirfd = open(cache_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	struct statfs fs;

	if (dirfd < 0)
		return -1;
	if (fstat(dirfd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 022) ||
	    fstatfs(dirfd, &fs) != 0)
		goto no;
	for (size_t i = 0; i < sizeof(remote_fs) / sizeof(*remote_fs); i++)
		if ((uint32_t)fs.f_type == remote_fs[i])
			goto no;
	return dirfd;
no:
	close(dirfd);
	return -1;
}

int wp_sym_cache_swap(int fd, const uint8_t *id, uint32_t id_len, char kind)
{
	char name[NAME_MAX_LEN];
	struct survey sv;
	Elf *e;
	int dirfd, got = -1;

	if (!cache_dir[0] || fd < 0 || !id_len || id_len > WP_BUILD_ID_MAX)
		return fd;
	/* libdwfl sets it in dwfl_begin; the first file may come before. */
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e || elf_kind(e) != ELF_K_ELF || !survey(e, &sv) || sv.id_len != id_len ||
	    memcmp(sv.id, id, id_len) || sv.compressed < MIN_COMPRESSED) {
		elf_end(e);
		return fd;
	}
	wp_sym_hex(sv.id, sv.id_len, name);
	snprintf(name + 2 * sv.id_len, sizeof(name) - 2 * sv.id_len, "-%c.debug", kind);
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
