/* raw_parse: the raw dump's sections, checked and parsed (raw_parse.c), for
 * the reader that rebuilds the profile from them (raw_read.c). Internal to
 * output/'s reader. Not async-signal-safe. */
#ifndef WP_RAW_PARSE_H
#define WP_RAW_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "raw.h"

#define WP_RAW_THREAD_BYTES 40 /* one THRD entry */

/* Everything parsed out of a dump, pointing into its bytes. */
struct wp_raw_dump {
	int have_meta, have_ctrs, have_thrd, have_ring;
	/* META */
	uint32_t pid, main_tid, hz, ring_seconds, max_depth;
	int signal;
	int64_t rt_offset;
	uint64_t start_ns, dump_ns, ring_bytes;
	uint32_t snapshot;
	uint32_t meta_version; /* 1 or 2 */
	const unsigned char *cmdline;
	size_t cmdline_len;
	/* RUN! (optional) */
	int have_run;
	uint8_t profiler_id[16];
	uint32_t chunk, run_flags;
	uint64_t chunk_from_ns, chunk_to_ns;
	/* CTRS */
	struct wp_counters ctr;
	/* MODL */
	struct wp_module *mods;
	size_t nr_mods, cap_mods;
	/* THRD */
	const unsigned char *threads;
	size_t nr_threads;
	/* RING */
	uint32_t ring_version; /* 1 or 2 */
	uint64_t window_ns, overwritten, dropped_full, ring_cap;
	const unsigned char *samples, *pcs, *stacks, *words;
	size_t ns, np, nst, nw;
	size_t rec_bytes; /* one record: 24 (v1) or 32 (v2) */
	const unsigned char *ticks; /* v2: nticks u64 tick times, oldest first; NULL in v1 */
	size_t nticks;
	uint32_t tick_newest; /* the newest tick's number (the last of ticks) */
};

/* Checks the 16-byte file header, of which `len` bytes are present.
 * Returns 0, or -1 with a one-line reason in `err`. */
int wp_raw_check_header(const unsigned char *data, size_t len, char *err, size_t errlen);

/* Parses the `len` bytes at `data` into `d` (zeroed by the caller): the
 * header, then every section up to the end marker, which must end the
 * data; sections of unknown tags are skipped, META, CTRS, THRD and RING
 * are required once each. Returns 0, or -1 with a one-line reason in `err`
 * (truncated, corrupt, foreign, out of memory); free `d` either way. */
int wp_raw_parse(struct wp_raw_dump *d, const unsigned char *data, size_t len, char *err,
		 size_t errlen);

/* Frees what wp_raw_parse() allocated in `d` (the module paths). */
void wp_raw_dump_free(struct wp_raw_dump *d);

/* A printf-style one-line reason into `err` (may be NULL or 0 bytes). */
void wp_raw_set_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A malloc'd copy of n bytes as a string, cut at an embedded NUL. */
char *wp_raw_dup_bytes(const unsigned char *p, size_t n);

#endif
