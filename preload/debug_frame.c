/* debug_frame: a module's .debug_frame for the remote walk (contracts in
 * debug_frame.h). Code without .eh_frame (Go's, a file built without
 * unwind tables) has its CFI there, as libdwfl read it before: read from
 * the module's file, inflated if compressed (Go writes it so), then
 * rewritten in the form libunwind's table search reads. Sampler thread
 * only: the file is opened in the sampler's private descriptor table and
 * closed at once. */
#include <elf.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <dlfcn.h>
#include <zlib.h>

#include "debug_frame.h"
#include "../output/sys.h"

#define MAX_SECTION (64u << 20) /* larger .debug_frame or section tables are not read */

/* ---- zlib ---------------------------------------------------------------- */

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

/* ---- .eh_frame's form ---------------------------------------------------- */

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
int wp_debug_frame_convert(const uint8_t *d, size_t n, uint64_t bias, uint64_t lo_ip,
			   uint64_t hi_ip, struct wp_debug_frame *df)
{
	uint8_t *out = malloc(n + 8);
	int32_t *tab = malloc((n / 24 + 1) * 2 * sizeof(*tab));
	uint64_t *cie_src = malloc((n / 8 + 1) * sizeof(*cie_src)); /* source offsets, in order */
	uint32_t *cie_dst = malloc((n / 8 + 1) * sizeof(*cie_dst));
	size_t o = 0, nr_cie = 0, nr = 0, pass, off;
	int rc = -1;

	memset(df, 0, sizeof(*df));
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
				if (end - e < 2 || e[1] != 0 ||
				    (version != 1 && version != 3 && version != 4))
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
				start = get64(e) + bias;
				size = get64(e + 8);
				if (lo == nr_cie || cie_src[lo] != id || get64(e) == 0 ||
				    size == 0 || start < lo_ip || start >= hi_ip ||
				    size > hi_ip - start)
					continue;
				memcpy(out + o, &len, 4);
				rel = (int32_t)(o + 4 - cie_dst[lo]);
				memcpy(out + o + 4, &rel, 4);
				memcpy(out + o + 8, &start, 8);
				memcpy(out + o + 16, e + 8, (size_t)(end - e - 8));
				tab[2 * nr] = (int32_t)(start - lo_ip);
				tab[2 * nr + 1] = (int32_t)o;
				nr++;
				o += 4 + (size_t)len;
			}
		}
	}
	if (nr == 0)
		goto done;
	qsort(tab, nr, 2 * sizeof(*tab), cmp_entry);
	df->data = out;
	df->len = o;
	df->tab = tab;
	df->nr = nr;
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

void wp_debug_frame_free(struct wp_debug_frame *df)
{
	free(df->data);
	free(df->tab);
	memset(df, 0, sizeof(*df));
}

/* ---- the module's file --------------------------------------------------- */

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

/* The module's .debug_frame, from its file (a copy replaced on disk since
 * it was mapped is not read), inflated if compressed. */
int wp_debug_frame_load(const char *path, uint64_t dev, uint64_t ino, uint64_t bias, uint64_t lo,
			uint64_t hi, struct wp_debug_frame *df)
{
	Elf64_Ehdr eh;
	Elf64_Shdr *sh = NULL, *s = NULL;
	struct stat st;
	char *names = NULL;
	uint8_t *data = NULL, *plain = NULL;
	size_t nr_sh, i, len;
	long fd;
	int rc = -1;

	memset(df, 0, sizeof(*df));
	if (!path)
		return -1;
	fd = wp_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (wp_syscall(SYS_fstat, fd, &st) < 0 || st.st_dev != dev || st.st_ino != ino ||
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
	    s->sh_offset > (uint64_t)st.st_size ||
	    s->sh_size > (uint64_t)st.st_size - s->sh_offset || !(names = malloc(s->sh_size + 1)) ||
	    pread_all(fd, names, s->sh_size, s->sh_offset) < 0)
		goto out;
	names[s->sh_size] = 0;
	for (s = NULL, i = 0; i < nr_sh && !s; i++) {
		if (sh[i].sh_name < sh[eh.e_shstrndx].sh_size && sh[i].sh_type == SHT_PROGBITS &&
		    (!strcmp(names + sh[i].sh_name, ".debug_frame") ||
		     !strcmp(names + sh[i].sh_name, ".zdebug_frame")))
			s = &sh[i];
	}
	if (!s || s->sh_size < 16 || s->sh_size > MAX_SECTION ||
	    s->sh_offset > (uint64_t)st.st_size ||
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
	rc = wp_debug_frame_convert(data, len, bias, lo, hi, df);
out:
	wp_syscall(SYS_close, fd);
	free(sh);
	free(names);
	free(data);
	free(plain);
	return rc;
}
