/* jw: the streaming JSON writer of the Sentry writers (sentry.c) and the
 * jansson values they build with. A buffered writer over a file being
 * written atomically or over a sink (formats.h): plain text for the many
 * small pieces (numbers, fixed keys), jansson for the objects whose strings
 * need escaping. The first error sticks; later writes do nothing. Not
 * async-signal-safe. */
#ifndef WP_JW_H
#define WP_JW_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "formats.h"
#include "output.h"

#define WP_JW_BUF 65536

struct wp_jw {
	struct wp_out_atomic a;   /* the file, when sink is NULL (a.path names
				     the output in errors either way) */
	struct wp_out_sink *sink; /* writes go there instead, when not NULL */
	char *err;
	size_t errlen;
	int failed;
	size_t len;
	char buf[WP_JW_BUF];
};

/* "cannot write <path>: <strerror(e)>" into `err`. */
void wp_jw_error(char *err, size_t errlen, const char *path, int e);

/* Marks `w` failed with ENOMEM's message, unless it failed already. */
void wp_jw_oom(struct wp_jw *w);

/* Appends bytes, a C string, printf output (at most 255 bytes: numbers and
 * fixed keys); each returns 0, or -1 once `w` has failed. */
int wp_jw_put(struct wp_jw *w, const char *s, size_t n);
int wp_jw_puts(struct wp_jw *w, const char *s);
int wp_jw_printf(struct wp_jw *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes out what is buffered; 0 or -1. */
int wp_jw_flush(struct wp_jw *w);

/* Writes `v` compactly and releases it; a NULL `v` is a failed allocation. */
int wp_jw_json(struct wp_jw *w, json_t *v);

/* Writes `"key":value` (with a leading comma unless first); releases `v`. */
int wp_jw_member(struct wp_jw *w, const char *key, json_t *v, int first);

/* JSON values (NULL on out of memory). wp_jstr: a string from the host
 * (paths, comm, symbols; NULL is ""), non-ASCII bytes as '?' when it is not
 * valid UTF-8, which jansson refuses. wp_jhex: "0x<hex>". wp_jdec: a
 * decimal string. wp_jint: an integer, capped at INT64_MAX. */
json_t *wp_jstr(const char *s);
json_t *wp_jhex(uint64_t x);
json_t *wp_jdec(uint64_t x);
json_t *wp_jint(uint64_t x);

/* Sets o[key] = v (stolen); returns 1 on failure (either NULL, or jansson
 * failing) so that callers can OR the results. */
int wp_jset(json_t *o, const char *key, json_t *v);

/* Random lowercase hex of `nbytes` (<= 16) bytes into `out` (2 * nbytes + 1
 * bytes); uuid = 1 (with 16 bytes) stamps it as a v4 UUID. Never all zero,
 * as Relay requires of ids. wp_jrandom_hex: the same as a JSON string. */
void wp_random_hex(char *out, size_t nbytes, int uuid);
json_t *wp_jrandom_hex(size_t nbytes, int uuid);

/* RFC 3339 UTC with microseconds of a CLOCK_REALTIME time in ns. */
json_t *wp_jtimestamp(int64_t ns);

/* {"name":"libwallprof","version":WP_VERSION}: a profile's client_sdk, an
 * envelope's and a transaction's sdk. NULL on out of memory. */
json_t *wp_jsdk(void);

#endif
