/* upload: profiles sent where teams look (Sentry's envelope endpoint,
 * Grafana Pyroscope's /ingest) through an on-disk spool. Runs in the
 * converter's process only (convert/), never in the profiled one: libcurl
 * and zlib live here.
 *
 * The spool (WALLPROF_SPOOL_DIR) holds one directory per profiled process
 * ("run", named by the caller: "<pid>-<profiler id>"), each item an HTTP
 * request waiting to be sent, written atomically (temporary + rename). A
 * run's items are sent by its own converters; the runs of processes that
 * are gone are sent by whichever converter flushes next (any later run).
 * The whole spool is bounded in files and bytes: the oldest items are
 * dropped first, and counted.
 *
 * Sending follows Sentry's transport rules (2xx sent; 413 and other 4xx
 * dropped and counted; 429 and X-Sentry-Rate-Limits, read on every
 * response, disable a category (or all) until the time given, the item
 * kept and sent after it; network errors and 5xx kept, the endpoint backed
 * off), with the state (limits, backoff) kept in the spool so that the next
 * converter process honours it. Not async-signal-safe. */
#ifndef WP_UPLOAD_H
#define WP_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

/* One HTTP POST to make. */
struct wp_upload_item {
	const char *url;          /* the whole URL, query included */
	const char *category;     /* Sentry's rate-limit data categories the request
				     counts against: one ("profile_chunk") or a
				     ';'-separated list ("profile;transaction": a v1
				     envelope), each [a-z_]{1,32}, at most 8; held back
				     while any of them (or all) is limited. NULL for a
				     Pyroscope push */
	const char *content_type; /* "application/x-sentry-envelope", ... */
	const char *headers[4];   /* extra "Name: value" lines (X-Sentry-Auth): up to 4,
				     the first NULL ends them */
	int gzip;                 /* 1: sent gzip-compressed (Content-Encoding: gzip);
				     compressed once, when put */
	const void *body;
	size_t len;
	const char *what;         /* for messages: "chunk 3 of process 1234" */
};

struct wp_spool_config {
	const char *dir;      /* the spool's root (created 0700 when missing) */
	unsigned max_files;   /* items kept at most, all runs together */
	uint64_t max_bytes;   /* bytes kept at most, all runs together */
};

/* The bounds when the environment sets none. */
#define WP_SPOOL_DEFAULT_FILES 100
#define WP_SPOOL_DEFAULT_MB 64

/* The spool's default root into `out`: $WALLPROF_SPOOL_DIR, else
 * $XDG_CACHE_HOME/wallprof/spool, else $HOME/.cache/wallprof/spool, else
 * $TMPDIR (or /tmp)/wallprof-spool-<uid> (relative XDG_CACHE_HOME, HOME
 * or TMPDIR values are skipped, and so is a derived directory that cannot
 * be made or is not ours alone: a shared XDG_CACHE_HOME, a HOME kept by
 * sudo; those two are created, 0700, when they can be). Returns 0, or -1
 * when it does not fit. */
int wp_spool_default_dir(char *out, size_t len);

/* `sc` from the environment: the default root (wp_spool_default_dir, into
 * `dirbuf`, which sc->dir then points to), WALLPROF_SPOOL_MAX_FILES (default
 * 100, at most 1,000,000) and WALLPROF_SPOOL_MAX_MB (default 64, at most
 * 1,048,576). Returns 0, or -1 with a one-line reason in `err` (a value
 * that is not a whole number in range, a root too long). */
int wp_spool_config_from_env(struct wp_spool_config *sc, char *dirbuf, size_t dirlen, char *err,
			     size_t errlen);

/* What a flush did, for the one report line. */
struct wp_flush_result {
	unsigned sent;         /* accepted (2xx) */
	unsigned dropped;      /* refused for good (413, other 4xx), pruned (by this
				  flush, or by puts since the last one), or corrupt */
	unsigned left;         /* still spooled when the flush ended in the runs it
				  answers for: its own, and those of processes gone
				  (adopted, or busy with another flush) */
	unsigned rate_limited; /* left because their category (or all) is limited */
	unsigned running;      /* still spooled in the runs of live processes (their
				  own converters send them): not in `left` */
	char last_error[256];  /* the last failure, "" when none */
};

/* Where messages go: level 1 error, 2 info, 3 debug; one line each. */
typedef void wp_upload_say_fn(void *ctx, int level, const char *msg);
/* What flush says: level 1 an item dropped (4xx, corrupt), 2 an item kept
 * (429, network error, 5xx) or items pruned, 3 each item sent or skipped.
 * Messages have no control characters, no "wallprof: " prefix, and no
 * URL's userinfo (wp_upload_redact); so has r->last_error. */

/* Copies `in` into `out` (`len` bytes, NUL-terminated, cut when longer)
 * with the userinfo of every URL in it replaced by three stars
 * ("https://user:pass@host/x" becomes "https://" "***" "@host/x"): what a
 * message may show of a URL. */
void wp_upload_redact(const char *in, char *out, size_t len);

/* Stores `it` in run `run` of the spool, pruning the oldest items of the
 * whole spool beyond its bounds (counted in the next flush's `dropped`).
 * `run` is "<pid>-<32 lowercase hex>" (the pid not 0). Returns 0, or -1 with
 * a one-line reason in `err` (a bad item or run name, an item alone over the
 * byte bound, the spool cannot be written: the item is lost and the caller
 * says so). */
int wp_spool_put(const struct wp_spool_config *sc, const char *run, const struct wp_upload_item *it,
		 char *err, size_t errlen);

/* Sends what is spooled, oldest first: run `run`'s items (none when `run`
 * is NULL), then those of runs whose process is gone or whose newest item
 * is over an hour old; each run under its lock (for run `run` waited for
 * until the deadline; another run's tried once, skipped when busy); stops at `deadline_ms` (CLOCK_MONOTONIC, in
 * ms; no request outlives it), at a network error or 5xx of an endpoint
 * (backed off: its items wait for a later flush), and skips items whose
 * category is rate-limited. Items written meanwhile by another converter
 * of the same run are sent too. Returns 0, or -1 when the spool could not
 * be read (err in r->last_error). */
int wp_spool_flush(const struct wp_spool_config *sc, const char *run, double deadline_ms,
		   struct wp_flush_result *r, wp_upload_say_fn *say, void *ctx);

#endif
