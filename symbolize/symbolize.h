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
	uint64_t end; /* one past the highest runtime address of its PT_LOAD segments */
	uint8_t build_id[WP_BUILD_ID_MAX]; /* GNU build-id note descriptor */
	uint32_t build_id_len; /* 0 when the object has none */
	uint32_t flags; /* WP_MOD_* */
};

#define WP_MOD_MAIN 0x1 /* the main executable: its frames are in_app */
#define WP_MOD_VDSO 0x2 /* the kernel's vDSO: no file on disk */
#define WP_MOD_UNLOADED 0x4 /* dlclose'd before the dump */

/* One source-level frame. Strings are owned by the symbolizer and stay valid
 * until wp_sym_close(). Any string may be NULL when unknown. */
struct wp_sym_frame {
	const char *function; /* demangled name, "foo" or "ns::Cls::method(int)" */
	const char *file; /* source path as recorded in DWARF (absolute when known) */
	int line; /* 0 when unknown */
	int column; /* 0 when unknown */
	int inlined; /* 1: this frame was inlined into the next (outer) one */
};

/* What one address resolves to. */
struct wp_sym_result {
	int module; /* index into the module array, -1 if outside every module */
	uint64_t module_offset; /* address - module start (file offset view for unknowns) */
	int nr_frames; /* >= 1 when the function is known, 0 otherwise */
	const struct wp_sym_frame
		*frames; /* innermost (inlined callee) first, the real function last */
};

struct wp_sym;

/* Whether symbolizers opened from now on may ask debuginfod for missing debug
 * info (1) or not (0). Without a call, WALLPROF_DEBUGINFOD=1 decides at each
 * open; the preload calls it once at start (the environment is read once). */
void wp_sym_set_debuginfod(int on);

/* Where uncompressed copies of compressed debug information are kept
 * between conversions, keyed by build-id (NULL or "": nowhere, the default),
 * and how many bytes they may take in all. Inflating a compressed debug file
 * (Debian's -dbg and -dbgsym packages, Go binaries, -gz builds) is most of a
 * cold conversion; a copy is read in place. Only a directory of ours that
 * others cannot write is used (symbolize/debug_cache.c). */
void wp_sym_set_debug_cache(const char *dir, uint64_t max_bytes);

/* The process the modules were recorded in, while it lives (0: none, the
 * default): a module deleted or replaced on disk is then read through the
 * mapping that process still has (/proc/PID/map_files, where permitted). */
void wp_sym_set_process(int pid);

/* Opens a symbolizer over `mods` (copied; the caller keeps ownership).
 * Never fails for a missing or unreadable file: such modules just resolve to
 * module+offset. Returns NULL only on out of memory. Not async-signal-safe. */
struct wp_sym *wp_sym_open(const struct wp_module *mods, size_t nr_mods);

/* A pool of libdwfl sessions (one per file, with the symbol, CU and
 * subprogram tables and strings built from it) kept across symbolizers, so
 * that dumps converted one after another open and decompress each file's
 * debug information once. A pool and every symbolizer opened over it are
 * used by one thread at a time. */
struct wp_sym_pool;

/* What a pool did and holds. */
struct wp_sym_pool_stats {
	size_t sessions; /* sessions it holds, in use or idle */
	size_t idle; /* of which no open symbolizer holds */
	size_t bytes; /* their approximate size (see wp_sym_pool_new) */
	uint64_t opened; /* sessions pooled symbolizers opened */
	uint64_t unpooled; /* of which the pool could not keep: no identity to trust */
	uint64_t reused; /* sessions a symbolizer took from the pool instead of opening */
	uint64_t evicted; /* idle sessions closed to stay within the bound */
};

/* A new, empty pool, or NULL on out of memory. Its bound: whenever a session
 * is added or released, idle sessions are closed, least recently released
 * first, while the pool holds more than `max_sessions` sessions or more than
 * `max_bytes` bytes. Sessions an open symbolizer holds are never closed but
 * count toward both, so the pool exceeds its bound by at most what its open
 * symbolizers use. A session's bytes are an estimate (refreshed when it
 * becomes idle): its DWARF sections as libdw holds them (decompressed),
 * plus our tables and strings; libdw's own per-CU tables are not counted.
 * Each session also keeps its files open (one or two descriptors). A bound
 * of 0 keeps nothing idle; SIZE_MAX leaves that dimension unbounded. */
struct wp_sym_pool *wp_sym_pool_new(size_t max_sessions, size_t max_bytes);

/* Closes every session of `pool` and frees it. Every symbolizer opened over
 * it must have been closed first. NULL is ignored. */
void wp_sym_pool_free(struct wp_sym_pool *pool);

/* Copies the pool's counters to *out. */
void wp_sym_pool_stats(const struct wp_sym_pool *pool, struct wp_sym_pool_stats *out);

/* wp_sym_open, with `pool` (NULL: none, as wp_sym_open). A module first
 * looks in the pool for a session of the same file, and the sessions this
 * symbolizer opens go to the pool at wp_sym_close instead of being closed.
 * "The same file" is the same recorded path and, when a build-id was
 * recorded, the same build-id (whatever it was opened from: the path, the
 * debug file of the build-id, the vDSO image, /proc/PID/map_files); without
 * a build-id, the same regular file at that path (device, inode, size,
 * mtime, ctime) as when the pooled session opened it from there, and the
 * same extent; a module without either is not pooled. A file pooled at one
 * load bias serves another at a shifted address. Lookups give the same
 * results as without a pool. */
struct wp_sym *wp_sym_open_pooled(struct wp_sym_pool *pool, const struct wp_module *mods,
				  size_t nr_mods);

/* Resolves `addr`. `addr` is the address to look up, already adjusted by the
 * caller: the exact PC for the interrupted frame, return address - 1 for the
 * callers. The result is cached per address and owned by `s`. Returns 0, or
 * -1 on out of memory. Not async-signal-safe. */
int wp_sym_lookup(struct wp_sym *s, uint64_t addr, struct wp_sym_result *out);

/* Frees everything, including all strings handed out; the sessions it
 * opened over a pool go to the pool (which may close them at once to stay
 * within its bound). */
void wp_sym_close(struct wp_sym *s);

/* Finds the GNU build-id in a block of ELF notes (a PT_NOTE segment or
 * SHT_NOTE section in memory). Copies at most WP_BUILD_ID_MAX bytes to `out`,
 * sets *len and returns 1; returns 0 when there is none. */
int wp_sym_build_id_note(const void *notes, size_t size, uint8_t *out, uint32_t *len);

/* Demangles a C++ (Itanium ABI) symbol into a malloc'd string, or returns
 * NULL when `name` is not mangled or cannot be demangled. */
char *wp_sym_demangle(const char *name);

/* Writes `len` bytes of `id` (a build-id) as lowercase hex, 2 * len
 * characters and no terminator, to `out`: the debug path's and the debug
 * cache's names, and the formats' code ids. async-signal-safe */
static inline void wp_sym_hex(const uint8_t *id, uint32_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (uint32_t i = 0; i < len; i++) {
		*out++ = digits[id[i] >> 4];
		*out++ = digits[id[i] & 15];
	}
}

#endif
