/* Unit test for the debug cache's copies (symbolize/debug_cache.c): small
 * ELF files made here with libelf, in both classes and both byte orders,
 * with a build-id note, loaded contents, a NOBITS section and compressed
 * .debug_* sections on both sides of an uncompressed one. The copy must be
 * the same file with the compressed sections inflated: the same sections
 * (names, types, flags but SHF_COMPRESSED, addresses, sizes inflated),
 * their bytes, the NOBITS size, the offsets of every section before the
 * first inflated one (laid out with gaps a fresh layout would close) and
 * the program headers. A second swap reads the copy
 * (same file); a file below the threshold, or with another build-id than
 * the one asked for, is not copied. */
#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../symbolize/symbolize_int.h"
#include "check.h"

enum { S_NOTE = 1, S_TEXT, S_BSS, S_INFO, S_STR, S_LINE, S_SHSTR, NR_SECTIONS };

static const char shstr[] = "\0.note.gnu.build-id\0.text\0.bss\0.debug_info\0.debug_str\0"
			    ".debug_line\0.shstrtab";

static size_t name_at(const char *name)
{
	for (size_t i = 0; i < sizeof(shstr); i += strlen(shstr + i) + 1)
		if (!strcmp(shstr + i, name))
			return i;
	return 0;
}

/* Section contents, as written uncompressed. */
struct file {
	unsigned char id[20];
	unsigned char note[16 + 20];
	unsigned char text[64];
	unsigned char *info, *line;
	size_t info_size, line_size;
	char str[64];
};

static void fill(unsigned char *p, size_t n, uint32_t seed)
{
	/* incompressible: zlib keeps it about as large */
	for (size_t i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (unsigned char)(seed >> 16);
	}
}

static Elf_Scn *add(Elf *e, const char *name, GElf_Word type, GElf_Xword flags, GElf_Addr addr,
		    void *buf, size_t size, Elf_Type dt, size_t align)
{
	Elf_Scn *s = elf_newscn(e);
	Elf_Data *d = s ? elf_newdata(s) : NULL;
	GElf_Shdr sh;

	if (!d || !gelf_getshdr(s, &sh))
		return NULL;
	d->d_buf = buf;
	d->d_size = size;
	d->d_type = dt;
	d->d_align = align;
	d->d_version = EV_CURRENT;
	sh.sh_name = (GElf_Word)name_at(name);
	sh.sh_type = type;
	sh.sh_flags = flags;
	sh.sh_addr = addr;
	sh.sh_addralign = align;
	sh.sh_size = size;
	return gelf_update_shdr(s, &sh) ? s : NULL;
}

/* Writes the test file to `path`: class `cls`, byte order `data`. */
static int make_file(const char *path, int cls, int data, const struct file *f)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600), rc = -1;
	Elf *e = fd >= 0 ? elf_begin(fd, ELF_C_WRITE, NULL) : NULL;
	GElf_Ehdr eh;
	GElf_Phdr ph;
	Elf_Scn *s[NR_SECTIONS] = { 0 };

	if (!e || !gelf_newehdr(e, cls) || !gelf_getehdr(e, &eh))
		goto out;
	eh.e_ident[EI_DATA] = (unsigned char)data;
	eh.e_type = ET_DYN;
	eh.e_machine = EM_X86_64;
	eh.e_version = EV_CURRENT;
	if (!gelf_update_ehdr(e, &eh) || !gelf_newphdr(e, 2))
		goto out;
	s[S_NOTE] = add(e, ".note.gnu.build-id", SHT_NOTE, SHF_ALLOC, 0x1000, (void *)f->note,
			sizeof(f->note), ELF_T_NHDR, 4);
	s[S_TEXT] = add(e, ".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, 0x1100,
			(void *)f->text, sizeof(f->text), ELF_T_BYTE, 16);
	s[S_BSS] = add(e, ".bss", SHT_NOBITS, SHF_ALLOC | SHF_WRITE, 0x2000, NULL, 4096, ELF_T_BYTE,
		       32);
	s[S_INFO] = add(e, ".debug_info", SHT_PROGBITS, 0, 0, f->info, f->info_size, ELF_T_BYTE, 1);
	s[S_STR] = add(e, ".debug_str", SHT_PROGBITS, SHF_MERGE | SHF_STRINGS, 0, (void *)f->str,
		       sizeof(f->str), ELF_T_BYTE, 1);
	s[S_LINE] = add(e, ".debug_line", SHT_PROGBITS, 0, 0, f->line, f->line_size, ELF_T_BYTE, 1);
	s[S_SHSTR] =
		add(e, ".shstrtab", SHT_STRTAB, 0, 0, (void *)shstr, sizeof(shstr), ELF_T_BYTE, 1);
	for (int i = 1; i < NR_SECTIONS; i++)
		if (!s[i])
			goto out;
	if (elf_compress(s[S_INFO], ELFCOMPRESS_ZLIB, ELF_CHF_FORCE) != 1 ||
	    elf_compress(s[S_LINE], ELFCOMPRESS_ZLIB, ELF_CHF_FORCE) != 1)
		goto out;
	/* Laid out here, with gaps a fresh layout would not leave (the
	 * note at 0x200, the text at 0x1100), so that a copy that moved a
	 * section before the first compressed one would show it. */
	elf_flagelf(e, ELF_C_SET, ELF_F_LAYOUT);
	{
		uint64_t off = 0x2000;

		for (int i = 1; i < NR_SECTIONS; i++) {
			GElf_Shdr sh;

			gelf_getshdr(s[i], &sh);
			if (i == S_NOTE)
				sh.sh_offset = 0x200;
			else if (i == S_TEXT)
				sh.sh_offset = 0x1100;
			else if (i == S_BSS)
				sh.sh_offset = 0x1140;
			else {
				sh.sh_offset = off;
				off += sh.sh_size;
			}
			if (!gelf_update_shdr(s[i], &sh))
				goto out;
		}
		gelf_getehdr(e, &eh);
		eh.e_shstrndx = S_SHSTR;
		eh.e_phoff = cls == ELFCLASS64 ? sizeof(Elf64_Ehdr) : sizeof(Elf32_Ehdr);
		eh.e_shoff = (off + 7) & ~(uint64_t)7;
		if (!gelf_update_ehdr(e, &eh))
			goto out;
	}
	/* program headers over the laid out note and text */
	for (int k = 0; k < 2; k++) {
		GElf_Shdr sh;

		gelf_getshdr(s[k ? S_TEXT : S_NOTE], &sh);
		memset(&ph, 0, sizeof(ph));
		ph.p_type = k ? PT_LOAD : PT_NOTE;
		ph.p_flags = k ? PF_R | PF_X : PF_R;
		ph.p_offset = sh.sh_offset;
		ph.p_vaddr = ph.p_paddr = sh.sh_addr;
		ph.p_filesz = ph.p_memsz = sh.sh_size;
		ph.p_align = k ? 0x1000 : 4;
		if (!gelf_update_phdr(e, k, &ph))
			goto out;
	}
	if (elf_update(e, ELF_C_WRITE) >= 0)
		rc = 0;
out:
	elf_end(e);
	if (fd >= 0)
		close(fd);
	return rc;
}

static int same_file(int a, int b)
{
	struct stat x, y;

	return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev &&
	       x.st_ino == y.st_ino;
}

/* The copy open as `fd` against the file made from `f`, open as `orig`. */
static void check_copy(int orig, int fd, int cls, int data, const struct file *f)
{
	Elf *o = elf_begin(orig, ELF_C_READ, NULL), *c = elf_begin(fd, ELF_C_READ, NULL);
	GElf_Ehdr oe, ce;
	size_t on = 0, cn = 0, onph = 0, cnph = 0;
	const void *id;
	int moved = 0;

	REQ(o && c && gelf_getehdr(o, &oe) && gelf_getehdr(c, &ce));
	if (!o || !c)
		goto out;
	REQ(gelf_getclass(c) == cls && ce.e_ident[EI_DATA] == data && ce.e_type == ET_DYN);
	REQ(elf_getshdrnum(o, &on) == 0 && elf_getshdrnum(c, &cn) == 0 && on == cn &&
	    cn == NR_SECTIONS);
	REQ(dwelf_elf_gnu_build_id(c, &id) == 20 && !memcmp(id, f->id, 20));
	REQ(elf_getphdrnum(o, &onph) == 0 && elf_getphdrnum(c, &cnph) == 0 && onph == cnph &&
	    cnph == 2);
	for (size_t k = 0; k < cnph; k++) {
		GElf_Phdr a, b;

		REQ(gelf_getphdr(o, (int)k, &a) && gelf_getphdr(c, (int)k, &b) &&
		    !memcmp(&a, &b, sizeof(a)));
	}
	for (size_t i = 1; i < cn && i < on; i++) {
		Elf_Scn *os = elf_getscn(o, i), *cs = elf_getscn(c, i);
		GElf_Shdr a, b;
		Elf_Data *d;

		if (!gelf_getshdr(os, &a) || !gelf_getshdr(cs, &b)) {
			REQ(0);
			break;
		}
		REQ(a.sh_name == b.sh_name && a.sh_type == b.sh_type && a.sh_addr == b.sh_addr &&
		    (a.sh_flags & ~(GElf_Xword)SHF_COMPRESSED) == b.sh_flags &&
		    !(b.sh_flags & SHF_COMPRESSED));
		if (a.sh_flags & SHF_COMPRESSED)
			moved = 1;
		if (!moved)
			REQ(a.sh_offset == b.sh_offset && a.sh_size == b.sh_size);
		d = elf_rawdata(cs, NULL);
		{
			/* the bytes each section must hold, inflated */
			const void *want[NR_SECTIONS] = { [S_TEXT] = f->text,
							  [S_INFO] = f->info,
							  [S_STR] = f->str,
							  [S_LINE] = f->line };
			size_t size[NR_SECTIONS] = { [S_TEXT] = sizeof(f->text),
						     [S_INFO] = f->info_size,
						     [S_STR] = sizeof(f->str),
						     [S_LINE] = f->line_size };

			if (i == S_BSS)
				REQ(b.sh_size == 4096);
			else if (want[i])
				REQ(b.sh_size == size[i] && d && d->d_size == size[i] &&
				    !memcmp(d->d_buf, want[i], size[i]));
		}
	}
out:
	elf_end(o);
	elf_end(c);
}

int main(void)
{
	char dir[] = "/tmp/wp-debug-cache-XXXXXX", cache[128], path[160];
	static const int variants[4][2] = { { ELFCLASS64, ELFDATA2LSB },
					    { ELFCLASS32, ELFDATA2LSB },
					    { ELFCLASS64, ELFDATA2MSB },
					    { ELFCLASS32, ELFDATA2MSB } };
	static const char *const names[4] = { "64-bit little-endian", "32-bit little-endian",
					      "64-bit big-endian", "32-bit big-endian" };

	elf_version(EV_CURRENT);
	if (!mkdtemp(dir))
		return 1;
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	if (mkdir(cache, 0700) != 0)
		return 1;
	wp_sym_set_debug_cache(cache, 1ull << 30);

	for (int v = 0; v < 4; v++) {
		struct file f;
		char name[96];
		int orig, fd, again;
		uint32_t nh[3] = { 4, 20, NT_GNU_BUILD_ID };

		memset(&f, 0, sizeof(f));
		fill(f.id, sizeof(f.id), 7u + (uint32_t)v);
		memcpy(f.note, nh, sizeof(nh));
		memcpy(f.note + 12, "GNU", 4);
		memcpy(f.note + 16, f.id, 20);
		fill(f.text, sizeof(f.text), 11u);
		f.info_size = 300 << 10;
		f.line_size = 40 << 10;
		f.info = malloc(f.info_size);
		f.line = malloc(f.line_size);
		if (!f.info || !f.line)
			return 1;
		fill(f.info, f.info_size, 13u + (uint32_t)v);
		fill(f.line, f.line_size, 17u);
		snprintf(f.str, sizeof(f.str), "a string of the debug info");
		snprintf(path, sizeof(path), "%s/file%d", dir, v);
		REQ(make_file(path, variants[v][0], variants[v][1], &f) == 0);

		/* another build-id than the one asked for: not copied */
		orig = open(path, O_RDONLY);
		unsigned char other[20];
		memcpy(other, f.id, 20);
		other[0] ^= 0xff;
		fd = wp_sym_cache_swap(orig, other, 20, WP_SYM_COPY_DEBUG);
		REQ(fd == orig);
		/* copied, then read */
		fd = wp_sym_cache_swap(fd, f.id, 20, WP_SYM_COPY_DEBUG);
		orig = open(path, O_RDONLY);
		REQ(fd >= 0 && !same_file(fd, orig));
		if (fd >= 0 && orig >= 0 && !same_file(fd, orig))
			check_copy(orig, fd, variants[v][0], variants[v][1], &f);
		again = wp_sym_cache_swap(open(path, O_RDONLY), f.id, 20, WP_SYM_COPY_DEBUG);
		REQ(again >= 0 && same_file(again, fd));
		snprintf(name, sizeof(name), "copy of a %s file", names[v]);
		report(name);
		close(fd);
		close(again);
		close(orig);

		/* below the threshold (a quarter MiB compressed): read as it is */
		f.info_size = 100 << 10;
		fill(f.id, sizeof(f.id), 100u + (uint32_t)v);
		memcpy(f.note + 16, f.id, 20);
		snprintf(path, sizeof(path), "%s/small%d", dir, v);
		REQ(make_file(path, variants[v][0], variants[v][1], &f) == 0);
		orig = open(path, O_RDONLY);
		fd = wp_sym_cache_swap(orig, f.id, 20, WP_SYM_COPY_DEBUG);
		REQ(fd == orig);
		close(fd);
		snprintf(name, sizeof(name), "no copy of a small %s file", names[v]);
		report(name);
		free(f.info);
		free(f.line);
	}
	/* nothing else in the cache but the four copies */
	{
		char cmd[256];

		snprintf(cmd, sizeof(cmd), "test $(ls %s | wc -l) = 4 && rm -rf %s", cache, dir);
		REQ(system(cmd) == 0);
		report("four copies in the cache");
	}
	printf("%d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed != 0;
}
