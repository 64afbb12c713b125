/* upload_int: what the upload/ files share (upload.h is the contract):
 *
 *   item.c       one spool item's file: encoded, parsed back (untrusted)
 *   spool.c      the spool's directories: the root's checks, runs, items
 *                listed oldest first, put, prune, the default dir and the
 *                environment
 *   ratelimit.c  X-Sentry-Rate-Limits, Retry-After, the backoff
 *   state.c      the per-endpoint state file that keeps them across
 *                processes: merged under a lock, removed once over
 *   http.c       one POST with libcurl; gzip with zlib
 *   flush.c      wp_spool_flush: runs, their locks, the transport rules
 *
 * docs/FORMATS.md ("The upload spool") describes the files. */
#ifndef WP_UPLOAD_INT_H
#define WP_UPLOAD_INT_H

#include <stddef.h>
#include <stdint.h>

#include "upload.h"

/* ---- item.c ---- */

#define WP_UP_MAGIC "WALLPROF-SPOOL 1"
#define WP_UP_MAX_HEAD 16384          /* an item's header block, blank line included */
#define WP_UP_MAX_LINE 4096           /* one header line (the URL's) */
#define WP_UP_MAX_BODY (256u << 20)   /* a body, whatever the spool's bounds */
#define WP_UP_MAX_HEADERS 4

/* An item read back from its file: every string points into the file's
 * buffer (NUL-terminated there). */
struct wp_up_parsed {
	const char *url;
	const char *category; /* NULL: none (Pyroscope); may be a ';' list */
	const char *content_type;
	const char *headers[WP_UP_MAX_HEADERS + 1]; /* NULL-ended */
	int gzip;       /* the body is stored gzip-compressed */
	const char *what;      /* "" when none */
	const void *body;
	size_t len;
};

/* Checks `it` (URL scheme, no control characters, "Name: value" headers,
 * lengths) and encodes its file: the header block then `body` (`len` bytes,
 * already compressed when `gzip`). Returns 0 with a malloc'd `*out`, or -1
 * with a one-line reason. */
int wp_up_item_encode(const struct wp_upload_item *it, const void *body, size_t len, int gzip,
		      char **out, size_t *outlen, char *err, size_t errlen);

/* Parses a whole item file held in `buf` (`len` bytes, writable: lines are
 * cut in place). Returns 0, or -1 with a one-line reason (anything not
 * exactly the format, a length that disagrees with the file's size). */
int wp_up_item_parse(char *buf, size_t len, struct wp_up_parsed *p, char *err, size_t errlen);

/* ---- spool.c ---- */

#define WP_UP_RUN_MAX 48  /* "<pid>-<32 hex>" and its NUL */
#define WP_UP_NAME_MAX 48 /* "<16 digits>-<6 digits>-<8 hex>.item" and its NUL */

/* 1 when `name` is a run's directory name: 1 to 10 digits (the pid, not 0),
 * '-', 32 lowercase hex digits. */
int wp_up_run_name_ok(const char *name);
/* 1 when `name` is an item file's name (temporaries never are). */
int wp_up_item_name_ok(const char *name);
/* The pid in a valid run name. */
unsigned wp_up_run_pid(const char *run);

/* Opens the spool's root, creating it (and missing parents) 0700 when
 * `create`. Refuses a root that is not a directory, is owned by another
 * user, or is group- or world-writable (sticky or not: one spool per
 * user). Returns the descriptor, -2 when missing and not `create`, or -1
 * with a reason. */
int wp_up_root_open(const char *dir, int create, char *err, size_t errlen);
/* Opens run `run`'s directory under `rootfd` (never through a symlink;
 * ours only); created 0700 when `create`. Returns the descriptor, or -1
 * with errno set (ENOENT: no such run). */
int wp_up_run_open(int rootfd, const char *run, int create);

struct wp_up_entry {
	char run[WP_UP_RUN_MAX];
	char name[WP_UP_NAME_MAX];
	uint64_t size;
	int64_t mtime_s;
};
struct wp_up_list {
	struct wp_up_entry *e;
	size_t n, cap;
};
/* Appends the items of the run open as `runfd` (named `run`) to `l`. */
int wp_up_list_run(int runfd, const char *run, struct wp_up_list *l);
/* Every run's items, oldest first. */
int wp_up_list_all(int rootfd, struct wp_up_list *l);
/* Sorts by name (oldest first), then run. */
void wp_up_list_sort(struct wp_up_list *l);
void wp_up_list_free(struct wp_up_list *l);

/* The run directories' names, sorted; *out malloc'd (free it). */
int wp_up_list_runs(int rootfd, char (**out)[WP_UP_RUN_MAX], size_t *n);

/* Deletes the oldest items of the whole spool while it holds more than
 * `max_files` items or `max_bytes` bytes (the root's "lock" file held).
 * Returns how many it deleted. `keep`, when not NULL, is the bytes to make
 * room for (an item about to be put). */
unsigned wp_up_prune(int rootfd, unsigned max_files, uint64_t max_bytes, uint64_t keep);

/* The counter of items pruned by wp_spool_put since the last flush, read
 * and zeroed (flush adds it to its `dropped`). */
unsigned wp_up_take_pruned(int rootfd);

/* ---- ratelimit.c ---- */

/* Rate-limit data categories we know; ALL is a limit on every one. */
enum {
	WP_UP_CAT_ALL,
	WP_UP_CAT_PROFILE,
	WP_UP_CAT_PROFILE_CHUNK,
	WP_UP_CAT_TRANSACTION,
	WP_UP_NCAT
};

#define WP_UP_BACKOFF_FIRST_MS 1000.0
#define WP_UP_BACKOFF_MAX_MS 300000.0
#define WP_UP_LIMIT_MAX_S 86400.0 /* a longer limit is cut to a day */
#define WP_UP_429_DEFAULT_S 60.0

/* What one endpoint's state holds; times are CLOCK_REALTIME in ms (they
 * outlive the process), 0 meaning none. */
struct wp_up_state {
	double until[WP_UP_NCAT]; /* rate limits, by category */
	double backoff_until;     /* no request before this */
	double backoff_ms;        /* the last backoff's length, 0 after a success */
};

/* The index of category `name`, or -1 (unknown, or NULL). */
int wp_up_category(const char *name);

/* Applies an X-Sentry-Rate-Limits value to `st` at `now_ms`: limits
 * "<seconds>:<cat;cat...>:<scope>..." separated by ',', an empty category
 * list meaning all, the later end kept where two overlap, unknown
 * categories and malformed limits ignored. Returns the number of limits
 * applied. */
int wp_up_parse_rate_limits(const char *v, double now_ms, struct wp_up_state *st);

/* A Retry-After value in seconds from `now_ms` (wall-clock): a decimal
 * number, or an HTTP date in the IMF-fixdate form ("Wed, 21 Oct 2015
 * 07:28:00 GMT"; a date past is 0); cut to a day. Returns 0, or -1 when it
 * is neither (the other obsolete date forms included). */
int wp_up_parse_retry_after(const char *v, double now_ms, double *seconds);

/* Applies one response (`status` 0: a network error) with its headers ("" when
 * absent) to `st`: X-Sentry-Rate-Limits on any response; on a 429 without
 * it, Retry-After for every category, else 60 s; backoff doubled (1 s to
 * 5 min) on a network error or 5xx, reset on a 2xx. */
void wp_up_on_response(struct wp_up_state *st, long status, const char *retry_after,
		       const char *rate_limits, double now_ms);

/* Milliseconds until an item counted against `categories` (one, or a
 * ';'-separated list: "profile;transaction") may be sent (0: now): the
 * latest end of the limits on any of them and on all. NULL, or categories
 * we do not know, wait for the limits on all only. */
double wp_up_limited(const struct wp_up_state *st, const char *categories, double now_ms);

/* The endpoint an item's state is kept under: its URL up to the query. */
size_t wp_up_endpoint_len(const char *url);

/* The name of category index `k` ("*" for all). */
const char *wp_up_category_name(int k);

/* ---- state.c ---- */

/* Loads the state of the endpoint of `url` from the spool (zero when none,
 * unreadable or someone else's). A file whose limits are all over and
 * whose backoff ended more than WP_UP_BACKOFF_MAX_MS ago is removed (the
 * state zero). Returns 0 or -1. */
int wp_up_state_load(int rootfd, const char *url, struct wp_up_state *st);
/* Saves `st` for the endpoint of `url`, merged with what the file holds
 * now (another converter may have saved since we loaded), under the
 * spool's state lock: the later end of each limit and of the backoff,
 * except that `reset` (the response was a success) keeps our reset
 * backoff. `st` becomes the merged state. Written atomically, or the file
 * removed when nothing in it matters any more. Returns 0 or -1. */
int wp_up_state_save(int rootfd, const char *url, struct wp_up_state *st, int reset);
/* Removes every state file of the spool whose limits and backoff are over
 * (as wp_up_state_load would); returns how many. */
unsigned wp_up_state_sweep(int rootfd);

/* CLOCK_REALTIME and CLOCK_MONOTONIC in ms. */
double wp_up_real_ms(void);
double wp_up_mono_ms(void);

/* ---- http.c ---- */

struct wp_up_request {
	const char *url;
	const char *content_type;
	const char *const *headers; /* NULL-ended */
	int gzip;     /* the body is gzip-compressed: Content-Encoding */
	const void *body;
	size_t len;
};

struct wp_up_response {
	long status;          /* the HTTP status, 0 after a network error */
	char retry_after[64]; /* the headers' values, "" when absent */
	char rate_limits[1024];
	char location[512];   /* a redirect's target (not followed) */
	char error[256];      /* a network error's reason */
	int permanent;        /* the error is the URL's own (malformed, not
				 http(s)): no retry can fix it */
	int tls;              /* the error is a TLS certificate problem */
};

struct wp_up_http;

/* A connection cache for one flush (libcurl easy handle); NULL when libcurl
 * cannot be loaded or started (wp_up_http_error says why). libcurl is
 * loaded by the first call. */
struct wp_up_http *wp_up_http_new(void);
void wp_up_http_free(struct wp_up_http *h);

/* Why the last wp_up_http_new failed: a short phrase. */
const char *wp_up_http_error(void);

/* POSTs `rq`, giving up after `timeout_ms` (connection included). Fills
 * `rs`; returns 0 when a status came back, -1 on a network error. */
int wp_up_http_post(struct wp_up_http *h, const struct wp_up_request *rq, double timeout_ms,
		    struct wp_up_response *rs);

/* gzip-compresses `len` bytes into a malloc'd `*out`. Returns 0 or -1. */
int wp_up_gzip(const void *in, size_t len, void **out, size_t *outlen);

#endif
