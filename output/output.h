/* output: profile writers. Builds Sentry sample-format v1 JSON (or a v2
 * chunk) with jansson from a raw profile plus a symbolizer, and writes
 * files atomically. Runs at dump time only; nothing here is
 * async-signal-safe. */
#ifndef WP_OUTPUT_H
#define WP_OUTPUT_H

#include <stddef.h>
#include <stdint.h>

#include "profile.h"

#ifndef WP_VERSION
#define WP_VERSION "0.1.0"
#endif

struct wp_sym;

/* Sentry rejects v1 profiles longer than this (the writers say so). */
#define WP_SENTRY_MAX_SECONDS 30

/* Relay rejects a v2 chunk whose samples span more than this; the writer
 * refuses to write one. */
#define WP_SENTRY_CHUNK_MAX_SECONDS 66

/* How the error of a chunk with nothing to send begins (the caller skips
 * such a chunk rather than report a failure). */
#define WP_OUT_TOO_FEW "too few samples for a Sentry chunk"

/* What a writer reports about the file it wrote (for the one stderr line). */
struct wp_out_stats {
	size_t nr_samples;  /* samples written */
	size_t nr_threads;  /* threads with samples */
	size_t nr_frames;   /* frames in the frame table */
	size_t bytes;       /* file size */
	double duration_s;  /* wall time covered by the samples */
	/* Sentry writers: CLOCK_REALTIME of the first and the last sample
	 * written, in ns (0 from the other writers) */
	int64_t first_unix_ns;
	int64_t last_unix_ns;
};

/* Sentry options. NULL or 0 everywhere is a v1 profile as ever, with
 * random ids. A v1 profile's samples are written whatever the window's
 * length: warning about Sentry's 30 s v1 limit is the caller's job. Ids are
 * lowercase hex, not all zero (the writer refuses others). */
struct wp_out_opts {
	const char *platform;       /* "native" when NULL */
	const char *release;        /* "release", when not NULL */
	const char *environment;    /* "environment", when not NULL */
	int chunk;                  /* a sample-format v2 profile chunk instead */
	const char *profiler_id;    /* chunk: 32 hex, the same for the process's
				       chunks; NULL: a random one */
	const char *chunk_id;       /* chunk: 32 hex; NULL: a fresh random one */
	const char *transaction_id; /* v1: transaction.id (32 hex), the event_id of
				       the transaction it goes with; NULL: random */
	const char *trace_id;       /* v1: transaction.trace_id (32 hex); NULL: random */
	const char *segment_id;     /* v1: transaction.segment_id, the transaction's
				       span_id (16 hex); NULL: random */
	int no_args;                /* v1: the transaction's name is the command
				       line's first word (the program as run),
				       without the arguments */
};

/* The name of a v1 profile's transaction (what its envelope's transaction
 * event is called too): the command line (its first word with no_args),
 * or "process <pid>" when there is none. malloc'd; NULL on out of memory. */
char *wp_out_sentry_txn_name(const struct wp_profile *p, int no_args);

/* Writes `p` as a Sentry v1 profile to `path`, atomically: a temporary file
 * beside it (O_EXCL, O_NOFOLLOW, mode from the umask), fsync, rename. On
 * failure nothing is left behind at `path` and `err` holds a one-line reason.
 * Returns 0 or -1. */
int wp_out_sentry_write(const struct wp_profile *p, struct wp_sym *sym,
			const struct wp_out_opts *opts, const char *path, struct wp_out_stats *st,
			char *err, size_t errlen);

/* Formats the Sentry/Breakpad debug_id of a GNU build-id: first 16 bytes
 * (zero-padded), first three UUID fields byte-swapped for little-endian ELF,
 * lowercase 8-4-4-4-12. `out` gets 37 bytes. Returns 0, or -1 when len is 0. */
int wp_out_debug_id(const uint8_t *build_id, size_t len, int little_endian, char out[37]);

/* The x86-64 Linux name of system call `nr` ("read", "futex", "epoll_wait",
 * "restart_syscall", ...), from a table generated out of the kernel's
 * asm/unistd_64.h (scripts/gen-syscall-names.sh); NULL for a number that
 * names no system call there (gaps, x32 numbers, anything newer). */
const char *wp_out_syscall_name(unsigned nr);

/* Expands an output template: %p -> pid, %n -> snapshot number, %% -> %.
 * For a snapshot (n >= 1) without %n, ".<n>" is inserted before a trailing
 * ".json" (or appended). Returns 0, or -1 if it does not fit in `out`. */
int wp_out_expand_path(const char *tmpl, unsigned pid, int n, char *out, size_t outlen);

/* A file beside the profile: the template expanded for `pid` (no snapshot
 * number), a trailing ".json" replaced by `suffix` (".raw", ".index",
 * ".exec2.json"), or `suffix` appended. Returns 0, or -1 if it does not fit. */
int wp_out_sibling_path(const char *tmpl, unsigned pid, const char *suffix, char *out,
			size_t outlen);

/* Writes `len` bytes to `path` atomically (see wp_out_sentry_write).
 * Returns 0, or -1 with a one-line reason in `err`. */
int wp_out_write_atomic(const char *path, const char *data, size_t len, char *err, size_t errlen);

/* wp_out_sentry_write() with the lookup passed in: `lookup(ctx, addr, out)`
 * has wp_sym_lookup's contract, and NULL means no symbolization (frames then
 * carry address, module and in_app only). Result module indices index
 * p->modules, so a symbolizer must be opened over that array. Lets tests feed
 * in inlined frames without DWARF. Same returns as wp_out_sentry_write(). */
typedef int (*wp_out_lookup_fn)(void *ctx, uint64_t addr, struct wp_sym_result *out);
int wp_out_sentry_write_with(const struct wp_profile *p, wp_out_lookup_fn lookup, void *ctx,
			     const struct wp_out_opts *opts, const char *path,
			     struct wp_out_stats *st, char *err, size_t errlen);

/* A file being written atomically: a temporary beside the target, renamed
 * over it on commit, so writers can stream without building the whole file. */
struct wp_out_atomic {
	int fd;           /* the temporary, open for writing; -1 once closed */
	char *tmp;        /* its path; malloc'd */
	const char *path; /* the target, borrowed from the caller until commit/abort */
	size_t bytes;     /* bytes written so far */
};

/* Creates the temporary ".<basename>.tmp.<pid>.<random>" in the target's
 * directory; a target that is a device, FIFO or socket (/dev/null, a named
 * pipe) is opened and written through instead, never replaced (tmp stays
 * NULL). Returns 0, or -1 with a reason in `err` and nothing to clean up. */
int wp_out_atomic_open(struct wp_out_atomic *a, const char *path, char *err, size_t errlen);

/* Appends `len` bytes, retrying short writes and EINTR. Returns 0, or -1 with
 * a reason in `err`; the caller then calls wp_out_atomic_abort(). */
int wp_out_atomic_write(struct wp_out_atomic *a, const void *data, size_t len, char *err,
			size_t errlen);

/* fsync, close, rename over the target (a symlink there is replaced, never
 * followed). Returns 0, or -1 with a reason in `err` and the temporary gone. */
int wp_out_atomic_commit(struct wp_out_atomic *a, char *err, size_t errlen);

/* Closes and unlinks the temporary; the target is untouched. Idempotent. */
void wp_out_atomic_abort(struct wp_out_atomic *a);

/* Whether `path` is, or can be made (its missing parents too, 0700), a
 * directory of ours that others cannot write. */
int wp_out_private_dir(const char *path);

/* A per-user cache directory of the converter's into `out`:
 * $XDG_CACHE_HOME/wallprof/<leaf>, else $HOME/.cache/wallprof/<leaf>, the
 * first whose base is absolute and ours (its nearest existing directory,
 * and a link there, owned by the effective uid or by root, and not open to
 * all without the sticky bit) and that is wp_out_private_dir: a shared
 * XDG_CACHE_HOME, a HOME kept by sudo, a container's HOME=/ for another uid
 * are passed over, and nothing is made under them.
 * Returns 0, or -1 when neither is. */
int wp_out_user_cache_dir(const char *leaf, char *out, size_t len);

/* The environment variable `name`, when set and not empty, as a whole
 * number from 1 to `max` into *out (left alone when unset or empty).
 * Returns 0, or -1 with a one-line reason in `err`. */
int wp_out_env_uint(const char *name, unsigned long long max, unsigned long long *out, char *err,
		    size_t errlen);

/* Fills `buf` with random bytes: getrandom without blocking, or a clock and
 * counter mix when the kernel pool is not ready. Not for secrets. */
void wp_out_random(void *buf, size_t len);

/* Fault injection for tests: when > 0, the n-th write(2) issued by
 * wp_out_atomic_write() from now on fails with ENOSPC. 0 disables. */
#ifdef WP_TEST_HOOKS
extern int wp_out_fail_write_at;
#endif

#endif
