/* symbolize: turn raw instruction addresses into functions, files, lines and
 * inlined frames with elfutils libdwfl, over a module map recorded at capture
 * time. Runs at dump time only (sampler, dumper or exiting thread, or offline);
 * nothing here is async-signal-safe. One wp_sym is used by one thread at a
 * time; separate instances may run in parallel. */
#ifndef WP_SYMBOLIZE_H
#define WP_SYMBOLIZE_H

#include <stddef.h>
#include <stdint.h>

#define WP_BUILD_ID_MAX 64

/* One loaded ELF object as seen at capture time (dl_iterate_phdr). */
struct wp_module {
	char *path;                  /* file path (absolute for the main executable); malloc'd */
	uint64_t bias;               /* load bias: runtime address - ELF p_vaddr (dlpi_addr) */
	uint64_t start;              /* lowest runtime address of its PT_LOAD segments */
	uint64_t end;                /* one past the highest runtime address of its PT_LOAD segments */
	uint8_t build_id[WP_BUILD_ID_MAX]; /* GNU build-id note descriptor */
	uint32_t build_id_len;       /* 0 when the object has none */
	uint32_t flags;              /* WP_MOD_* */
};

#define WP_MOD_MAIN 0x1     /* the main executable: its frames are in_app */
#define WP_MOD_VDSO 0x2     /* the kernel's vDSO: no file on disk */
#define WP_MOD_UNLOADED 0x4 /* dlclose'd before the dump */

/* One source-level frame. Strings are owned by the symbolizer and stay valid
 * until wp_sym_close(). Any string may be NULL when unknown. */
struct wp_sym_frame {
	const char *function; /* demangled name, "foo" or "ns::Cls::method(int)" */
	const char *file;     /* source path as recorded in DWARF (absolute when known) */
	int line;             /* 0 when unknown */
	int column;           /* 0 when unknown */
	int inlined;          /* 1: this frame was inlined into the next (outer) one */
};

/* What one address resolves to. */
struct wp_sym_result {
	int module;               /* index into the module array, -1 if outside every module */
	uint64_t module_offset;   /* address - module start (file offset view for unknowns) */
	int nr_frames;            /* >= 1 when the function is known, 0 otherwise */
	const struct wp_sym_frame *frames; /* innermost (inlined callee) first, the real function last */
};

struct wp_sym;

/* Whether symbolizers opened from now on may ask debuginfod for missing debug
 * info (1) or not (0). Without a call, WALLPROF_DEBUGINFOD=1 decides at each
 * open; the preload calls it once at start (the environment is read once). */
void wp_sym_set_debuginfod(int on);

/* The process the modules were recorded in, while it lives (0: none, the
 * default): a module deleted or replaced on disk is then read through the
 * mapping that process still has (/proc/PID/map_files, where permitted). */
void wp_sym_set_process(int pid);

/* Opens a symbolizer over `mods` (copied; the caller keeps ownership).
 * Never fails for a missing or unreadable file: such modules just resolve to
 * module+offset. Returns NULL only on out of memory. Not async-signal-safe. */
struct wp_sym *wp_sym_open(const struct wp_module *mods, size_t nr_mods);

/* Resolves `addr`. `addr` is the address to look up, already adjusted by the
 * caller: the exact PC for the interrupted frame, return address - 1 for the
 * callers. The result is cached per address and owned by `s`. Returns 0, or
 * -1 on out of memory. Not async-signal-safe. */
int wp_sym_lookup(struct wp_sym *s, uint64_t addr, struct wp_sym_result *out);

/* Frees everything, including all strings handed out. */
void wp_sym_close(struct wp_sym *s);

/* Finds the GNU build-id in a block of ELF notes (a PT_NOTE segment or
 * SHT_NOTE section in memory). Copies at most WP_BUILD_ID_MAX bytes to `out`,
 * sets *len and returns 1; returns 0 when there is none. */
int wp_sym_build_id_note(const void *notes, size_t size, uint8_t *out, uint32_t *len);

/* Demangles a C++ (Itanium ABI) symbol into a malloc'd string, or returns
 * NULL when `name` is not mangled or cannot be demangled. */
char *wp_sym_demangle(const char *name);

#endif
