/* symbolize: the tables an address is resolved through, built lazily per
 * session: function symbols, compilation-unit and subprogram ranges, scoped
 * names, file names and lines, and the chain of inlined subroutines. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "symbolize.h"
#include "sym_state.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>

/* ---- ELF symbols --------------------------------------------------------- */

/* Among aliases, the name people call: fewest leading underscores, so
 * "getpid" over "__getpid" and "__GI_getpid". */
static int underscores(const char *name)
{
	int u = 0;
	while (name && name[u] == '_' && u < 3)
		u++;
	return name ? u : 9;
}

/* Aliases at one address: sized first, then underscores, then global over
 * weak over local. */
static int sym_rank(const GElf_Sym *sym, const char *name)
{
	int u = underscores(name);
	int bind = GELF_ST_BIND(sym->st_info);
	int b = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
	return (sym->st_size ? 0 : 100) + u * 10 + b;
}

static int fsym_cmp(const void *a, const void *b)
{
	const struct fsym *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank - y->rank;
	return strcmp(x->name, y->name); /* qsort is not stable: stay deterministic */
}

/* Sorted function symbols of the module (symtab, else dynsym, plus
 * .gnu_debugdata), built once: dwfl_module_addrinfo scans linearly. */
static void build_syms(struct session *ss)
{
	ss->syms_tried = 1;
	int n = dwfl_module_getsymtab(ss->dm);
	if (n <= 1)
		return;
	struct fsym *v = malloc((size_t)n * sizeof(*v));
	if (!v)
		return;
	size_t nr = 0;
	for (int i = 1; i < n; i++) {
		GElf_Sym sym;
		GElf_Addr addr;
		GElf_Word shndx;
		const char *name =
			dwfl_module_getsym_info(ss->dm, i, &sym, &addr, &shndx, NULL, NULL);
		if (!name || !name[0] || shndx == SHN_UNDEF || shndx == (GElf_Word)-1)
			continue;
		int type = GELF_ST_TYPE(sym.st_info);
		if (type != STT_FUNC && type != STT_GNU_IFUNC)
			continue;
		v[nr++] = (struct fsym){ addr, sym.st_size, name, sym_rank(&sym, name) };
	}
	qsort(v, nr, sizeof(*v), fsym_cmp);
	size_t out = 0;
	for (size_t i = 0; i < nr; i++)
		if (!out || v[out - 1].start != v[i].start)
			v[out++] = v[i];
	ss->syms = v;
	ss->nr_syms = out;
}

/* The symbol containing addr, or the nearest sizeless one below it. */
static const struct fsym *find_sym(struct session *ss, uint64_t addr)
{
	if (!ss->syms_tried)
		build_syms(ss);
	size_t lo = 0, hi = ss->nr_syms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ss->syms[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	/* A few steps back for symbols nested in a larger one. */
	for (size_t j = lo, k = 0; j-- > 0 && k < 8; k++)
		if (addr < ss->syms[j].start + ss->syms[j].size)
			return &ss->syms[j];
	return ss->syms[lo - 1].size ? NULL : &ss->syms[lo - 1];
}

/* ---- DWARF --------------------------------------------------------------- */

static int range_cmp(const void *a, const void *b)
{
	const struct range *x = a, *y = b;
	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	if (x->hi != y->hi)
		return x->hi < y->hi ? -1 : 1;
	Dwarf_Off ox = dwarf_dieoffset((Dwarf_Die *)&x->die);
	Dwarf_Off oy = dwarf_dieoffset((Dwarf_Die *)&y->die);
	return ox < oy ? -1 : ox > oy;
}

/* Sorts, then keeps one DIE per identical range: GNU as 2.40 emits a
 * subprogram per alias (__getpid, __GI___getpid, getpid, __GI_getpid). */
static size_t sort_ranges(struct range *v, size_t n)
{
	qsort(v, n, sizeof(*v), range_cmp);
	size_t out = 0;
	for (size_t i = 0; i < n; i++) {
		if (out && v[out - 1].lo == v[i].lo && v[out - 1].hi == v[i].hi) {
			if (underscores(dwarf_diename(&v[i].die)) <
			    underscores(dwarf_diename(&v[out - 1].die)))
				v[out - 1] = v[i];
			continue;
		}
		v[out++] = v[i];
	}
	return out;
}

static const struct range *find_range(const struct range *v, size_t n, uint64_t pc)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (v[mid].lo <= pc)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t j = lo, k = 0; j-- > 0 && k < 8; k++)
		if (pc < v[j].hi)
			return &v[j];
	return NULL;
}

struct range_vec {
	struct range *v;
	size_t nr, cap;
	int oom;
};

static void add_ranges(struct range_vec *rv, Dwarf_Die *die)
{
	Dwarf_Addr base, lo, hi;
	ptrdiff_t off = 0;
	while ((off = dwarf_ranges(die, off, &base, &lo, &hi)) > 0) {
		if (hi <= lo)
			continue;
		if (rv->nr == rv->cap) {
			size_t cap = rv->cap ? rv->cap * 2 : 64;
			struct range *v = realloc(rv->v, cap * sizeof(*v));
			if (!v) {
				rv->oom = 1;
				return;
			}
			rv->v = v;
			rv->cap = cap;
		}
		rv->v[rv->nr++] = (struct range){ lo, hi, *die };
	}
}

struct collect {
	struct session *ss;
	struct cu *cu;
	struct range_vec rv;
};

/* "prefix" + "name" + "::" or the qualified name itself, in the arena. */
static char *join_scope(struct session *ss, const char *prefix, const char *name, int sep)
{
	size_t a = prefix ? strlen(prefix) : 0, b = strlen(name);
	char *p = arena_alloc(&ss->arena, a + b + 3);
	if (!p)
		return NULL;
	if (a)
		memcpy(p, prefix, a);
	memcpy(p + a, name, b);
	memcpy(p + a + b, sep ? "::" : "", sep ? 3 : 1);
	return p;
}

/* Concrete subprograms sit at CU or namespace level (GCC, clang); class
 * bodies only hold declarations, so they are not walked. Functions nested in
 * functions (GNU C) are not found and fall back to the ELF symbol. Namespace
 * members without a linkage name get their qualified name recorded, as
 * libdw cannot walk from a DIE to its parent. */
static void collect_subs(struct collect *c, Dwarf_Die *parent, const char *prefix)
{
	Dwarf_Die child;
	if (dwarf_child(parent, &child) != 0)
		return;
	do {
		switch (dwarf_tag(&child)) {
		case DW_TAG_subprogram:
			add_ranges(&c->rv, &child);
			if (prefix && !dwarf_hasattr(&child, DW_AT_linkage_name) &&
			    dwarf_hasattr(&child, DW_AT_name)) {
				const char *name = dwarf_diename(&child);
				char *q = name ? join_scope(c->ss, prefix, name, 0) : NULL;
				if (q && map_put(&c->cu->scoped, dwarf_dieoffset(&child), q) < 0)
					c->rv.oom = 1;
			}
			break;
		case DW_TAG_namespace:
		case DW_TAG_module: {
			const char *name = dwarf_diename(&child);
			char *p =
				join_scope(c->ss, prefix, name ? name : "(anonymous namespace)", 1);
			if (!p)
				c->rv.oom = 1;
			else
				collect_subs(c, &child, p);
			break;
		}
		}
	} while (!c->rv.oom && dwarf_siblingof(&child, &child) == 0);
}

/* Own CU table for modules whose .debug_aranges misses CUs (clang does not
 * emit it by default), which dwfl_module_addrdie relies on. */
static void build_cus(struct session *ss)
{
	ss->cus_tried = 1;
	struct range_vec rv = { 0 };
	Dwarf_CU *cu = NULL;
	uint8_t type;
	Dwarf_Die cudie;
	while (!rv.oom && dwarf_get_units(ss->dw, cu, &cu, NULL, &type, &cudie, NULL) == 0)
		if (type == DW_UT_compile)
			add_ranges(&rv, &cudie);
	if (rv.oom) {
		free(rv.v);
		return;
	}
	ss->cus = rv.v;
	ss->nr_cus = sort_ranges(rv.v, rv.nr);
}

/* The CU tables for runtime address addr, NULL when no CU covers it.
 * Returns -1 on out of memory. */
static int get_cu(struct session *ss, uint64_t addr, struct cu **out)
{
	*out = NULL;
	Dwarf_Addr bias;
	Dwarf_Die *cudie = dwfl_module_addrdie(ss->dm, addr, &bias);
	/* .debug_aranges may cover only some units (a Go binary lists just
	 * its cgo C units), and libdwfl then answers with the unit below the
	 * address: take it only if it really holds the address. */
	if (cudie && dwarf_haspc(cudie, addr - bias) <= 0)
		cudie = NULL;
	if (!cudie) {
		if (!ss->cus_tried)
			build_cus(ss);
		const struct range *r = find_range(ss->cus, ss->nr_cus, addr - ss->dwbias);
		if (!r)
			return 0;
		cudie = (Dwarf_Die *)&r->die;
	}
	uint64_t key = dwarf_dieoffset(cudie);
	struct cu *cu = map_get(&ss->cu_map, key);
	if (cu) {
		*out = cu;
		return 0;
	}
	cu = arena_alloc(&ss->arena, sizeof(*cu));
	if (!cu)
		return -1;
	memset(cu, 0, sizeof(*cu));
	cu->cudie = *cudie;
	struct collect c = { ss, cu, { 0 } };
	collect_subs(&c, &cu->cudie, NULL);
	if (c.rv.oom || map_put(&ss->cu_map, key, cu) < 0) {
		free(c.rv.v);
		map_free(&cu->scoped);
		return -1;
	}
	cu->subs = c.rv.v;
	cu->nr_subs = sort_ranges(c.rv.v, c.rv.nr);
	*out = cu;
	return 0;
}

static int push_chain(struct wp_sym *s, size_t *depth, Dwarf_Die *die)
{
	if (*depth == s->chain_cap) {
		size_t cap = s->chain_cap ? s->chain_cap * 2 : 16;
		Dwarf_Die *c = realloc(s->chain, cap * sizeof(*c));
		if (!c)
			return -1;
		s->chain = c;
		s->chain_cap = cap;
	}
	s->chain[(*depth)++] = *die;
	return 0;
}

/* Descends from `parent` towards pc through the scopes that contain it,
 * pushing each inlined subroutine. Blocks without any pc attribute are looked
 * through, as their children may still carry ranges. Returns 1 when a child
 * scope contained pc, 0 if none, -1 on out of memory. */
static int descend(struct wp_sym *s, Dwarf_Die *parent, Dwarf_Addr pc, size_t *depth)
{
	Dwarf_Die child;
	if (dwarf_child(parent, &child) != 0)
		return 0;
	do {
		int tag = dwarf_tag(&child);
		if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_lexical_block &&
		    tag != DW_TAG_try_block && tag != DW_TAG_catch_block && tag != DW_TAG_with_stmt)
			continue;
		int has = dwarf_haspc(&child, pc);
		if (has > 0) {
			if (tag == DW_TAG_inlined_subroutine && push_chain(s, depth, &child) < 0)
				return -1;
			return descend(s, &child, pc, depth) < 0 ? -1 : 1;
		}
		if (has == 0 && tag != DW_TAG_inlined_subroutine &&
		    !dwarf_hasattr(&child, DW_AT_low_pc) && !dwarf_hasattr(&child, DW_AT_ranges)) {
			int r = descend(s, &child, pc, depth);
			if (r != 0)
				return r;
		}
	} while (dwarf_siblingof(&child, &child) == 0);
	return 0;
}

/* Linkage name demangled (qualified, with parameters, for C++), else the
 * plain name, both through abstract origins and specifications; a namespace
 * member without linkage name gets the qualified name recorded for it. */
static const char *die_name(struct session *ss, struct cu *cu, Dwarf_Die *die)
{
	Dwarf_Attribute a;
	const char *linkage = NULL;
	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &a) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a))
		linkage = dwarf_formstring(&a);
	if (linkage) {
		const char *p = wp_sym_pretty_name(ss, linkage);
		if (p != linkage)
			return p;
	}
	/* The DIE carrying the name, as dwarf_attr_integrate finds it. */
	Dwarf_Die d = *die;
	for (int i = 0; i < 8 && !dwarf_hasattr(&d, DW_AT_name); i++) {
		Dwarf_Attribute *r = dwarf_attr(&d, DW_AT_abstract_origin, &a);
		if (!r)
			r = dwarf_attr(&d, DW_AT_specification, &a);
		if (!r || !dwarf_formref_die(r, &d))
			break;
	}
	/* Same CU only: offsets of another unit (or the dwz file) differ. */
	if (cu->scoped.nr && d.cu == cu->cudie.cu) {
		const char *q = map_get(&cu->scoped, dwarf_dieoffset(&d));
		if (q)
			return q;
	}
	const char *name = dwarf_diename(&d);
	return name ? name : linkage;
}

/* Removes "." and "dir/.." components in place; keeps leading ".." of a
 * relative path, since nothing above it is known. */
static void normalize_path(char *p)
{
	int abs = p[0] == '/';
	char *out = p + abs, *in = p + abs;
	char *base = out; /* start of the part that ".." may remove */
	/* Writing never passes the read position, but a component's trailing
	 * '/' may land on the terminator: decide "last" before writing. */
	for (int last = !*in; !last;) {
		char *end = strchrnul(in, '/');
		size_t len = end - in;
		last = !*end;
		char *next = end + !last;
		if (len == 0 || (len == 1 && in[0] == '.')) {
			/* skip */
		} else if (len == 2 && in[0] == '.' && in[1] == '.') {
			if (out > base) {
				out--; /* the '/' written after the last component */
				while (out > base && out[-1] != '/')
					out--;
			} else if (!abs) {
				memcpy(out, "../", 3);
				out += 3;
				base = out;
			}
		} else {
			memmove(out, in, len);
			out += len;
			*out++ = '/';
		}
		in = next;
	}
	if (out > p + abs && out[-1] == '/')
		out--;
	if (out == p)
		*out++ = '.';
	*out = 0;
}

/* `name` from the CU's line table, joined with DW_AT_comp_dir when relative
 * ("test/unit/x.c" -> "/work/main/test/unit/x.c"), cached per CU. Falls
 * back to `name` itself when out of memory. */
static const char *cu_path(struct session *ss, struct cu *cu, const char *name)
{
	if (!name || name[0] == '/' || name[0] == '<')
		return name;
	if (!cu->comp_dir_tried) {
		cu->comp_dir_tried = 1;
		Dwarf_Attribute a;
		cu->comp_dir = dwarf_formstring(dwarf_attr(&cu->cudie, DW_AT_comp_dir, &a));
	}
	if (!cu->comp_dir || !cu->comp_dir[0])
		return name;
	char *p = map_get(&cu->paths, (uintptr_t)name);
	if (p)
		return p;
	size_t a = strlen(cu->comp_dir), b = strlen(name);
	p = arena_alloc(&ss->arena, a + b + 2);
	if (!p)
		return name;
	memcpy(p, cu->comp_dir, a);
	p[a] = '/';
	memcpy(p + a + 1, name, b + 1);
	normalize_path(p);
	if (map_put(&cu->paths, (uintptr_t)name, p) < 0)
		return name;
	return p;
}

static const char *cu_file(struct session *ss, struct cu *cu, Dwarf_Word idx)
{
	if (!cu->files_tried) {
		cu->files_tried = 1;
		Dwarf_Half version = 0;
		if (dwarf_getsrcfiles(&cu->cudie, &cu->files, &cu->nr_files) != 0) {
			cu->files = NULL;
			cu->nr_files = 0;
		}
		if (dwarf_cu_info(cu->cudie.cu, &version, NULL, NULL, NULL, NULL, NULL, NULL) == 0)
			cu->version = version;
	}
	/* Before DWARF 5, file index 0 means "no file". */
	if (!cu->files || idx >= cu->nr_files || (idx == 0 && cu->version < 5))
		return NULL;
	return cu_path(ss, cu, dwarf_filesrc(cu->files, idx, NULL, NULL));
}

static int attr_int(Dwarf_Die *die, unsigned int name)
{
	Dwarf_Attribute a;
	Dwarf_Word w;
	if (dwarf_formudata(dwarf_attr(die, name, &a), &w) != 0 || w > 0x7fffffff)
		return 0;
	return (int)w;
}

static void line_at(struct session *ss, struct cu *cu, Dwarf_Addr pc, struct wp_sym_frame *f)
{
	Dwarf_Line *line = dwarf_getsrc_die(&cu->cudie, pc);
	if (!cu->lines_counted) {
		/* The table dwarf_getsrc_die just read (or failed to), cached. */
		Dwarf_Lines *lines;
		cu->lines_counted = 1;
		if (dwarf_getsrclines(&cu->cudie, &lines, &cu->nr_lines) != 0)
			cu->nr_lines = 0;
	}
	if (!line)
		return;
	int n;
	f->file = cu_path(ss, cu, dwarf_linesrc(line, NULL, NULL));
	if (dwarf_lineno(line, &n) == 0 && n > 0)
		f->line = n;
	if (dwarf_linecol(line, &n) == 0 && n > 0)
		f->column = n;
}

/* The size of the .debug_* sections of the file libdw reads, as libdw holds
 * them: decompressed on the heap when the file compresses them, mapped
 * otherwise (an uncompressed file, a copy from the debug cache); both are
 * counted, mapped pages being memory too once read. */
static size_t dwarf_size(Dwarf *dw)
{
	Elf *e = dwarf_getelf(dw);
	size_t shstrndx, n = 0;
	if (!e || elf_getshdrstrndx(e, &shstrndx) != 0)
		return 0;
	for (Elf_Scn *scn = NULL; (scn = elf_nextscn(e, scn));) {
		GElf_Shdr sh;
		const char *name;
		if (gelf_getshdr(scn, &sh) && sh.sh_type != SHT_NOBITS &&
		    (name = elf_strptr(e, shstrndx, sh.sh_name)) && !strncmp(name, ".debug_", 7))
			n += sh.sh_size;
	}
	return n;
}

/* Fills r->frames for an address inside a reported module. Returns -1 on out
 * of memory. */
int wp_sym_resolve_frames(struct wp_sym *s, struct session *ss, uint64_t addr, struct res *r)
{
	if (!ss->dw_tried) {
		ss->dw_tried = 1;
		ss->dw = dwfl_module_getdwarf(ss->dm, &ss->dwbias);
		if (ss->dw)
			ss->dwarf_bytes = dwarf_size(ss->dw);
	}
	struct cu *cu = NULL;
	size_t depth = 0;
	Dwarf_Addr pc = addr - ss->dwbias;
	if (ss->dw) {
		if (get_cu(ss, addr, &cu) < 0)
			return -1;
		const struct range *sub = cu ? find_range(cu->subs, cu->nr_subs, pc) : NULL;
		if (sub) {
			Dwarf_Die die = sub->die;
			if (push_chain(s, &depth, &die) < 0 || descend(s, &die, pc, &depth) < 0)
				return -1;
		}
	}

	const struct fsym *sym = NULL;
	if (!depth) {
		sym = find_sym(ss, addr);
		if (!sym)
			return 0;
		depth = 1;
	}
	struct wp_sym_frame *f = arena_alloc(&s->arena, depth * sizeof(*f));
	if (!f)
		return -1;
	memset(f, 0, depth * sizeof(*f));
	if (sym) {
		f[0].function = wp_sym_pretty_name(ss, sym->name);
		if (cu)
			line_at(ss, cu, pc, &f[0]);
	} else {
		/* chain[0] is the subprogram, chain[depth-1] the innermost
		 * inline; frames go innermost first. */
		for (size_t i = 0; i < depth; i++) {
			Dwarf_Die *d = &s->chain[depth - 1 - i];
			f[i].function = die_name(ss, cu, d);
			f[i].inlined = i + 1 < depth;
			if (i == 0) {
				line_at(ss, cu, pc, &f[i]);
			} else {
				/* Where the next inner frame was inlined into this one. */
				Dwarf_Die *site = &s->chain[depth - i];
				Dwarf_Attribute a;
				Dwarf_Word w;
				if (dwarf_formudata(dwarf_attr(site, DW_AT_call_file, &a), &w) == 0)
					f[i].file = cu_file(ss, cu, w);
				f[i].line = attr_int(site, DW_AT_call_line);
				f[i].column = attr_int(site, DW_AT_call_column);
			}
		}
		if (!f[depth - 1].function && (sym = find_sym(ss, addr)))
			f[depth - 1].function = wp_sym_pretty_name(ss, sym->name);
		if (!f[depth - 1].function)
			return 0; /* contract: frames only when the function is known */
	}
	r->frames = f;
	r->nr_frames = (int)depth;
	return 0;
}
