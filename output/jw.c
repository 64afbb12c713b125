/* jw: the Sentry writers' streaming JSON writer and value helpers (jw.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jw.h"

void wp_jw_error(char *err, size_t errlen, const char *path, int e)
{
	char buf[128];

	if (err && errlen)
		snprintf(err, errlen, "cannot write %s: %s", path, strerror_r(e, buf, sizeof(buf)));
}

void wp_jw_oom(struct wp_jw *w)
{
	if (!w->failed)
		wp_jw_error(w->err, w->errlen, w->a.path, ENOMEM);
	w->failed = 1;
}

static int jw_out(struct wp_jw *w, const void *data, size_t n)
{
	if (w->sink)
		return wp_sink_write(w->sink, data, n);
	return wp_out_atomic_write(&w->a, data, n, w->err, w->errlen);
}

int wp_jw_flush(struct wp_jw *w)
{
	if (w->failed)
		return -1;
	if (w->len && jw_out(w, w->buf, w->len) < 0)
		w->failed = 1;
	w->len = 0;
	return w->failed ? -1 : 0;
}

int wp_jw_put(struct wp_jw *w, const char *s, size_t n)
{
	if (w->failed)
		return -1;
	if (n > WP_JW_BUF - w->len) {
		if (wp_jw_flush(w) < 0)
			return -1;
		if (n > WP_JW_BUF) {
			if (jw_out(w, s, n) < 0)
				w->failed = 1;
			return w->failed ? -1 : 0;
		}
	}
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	return 0;
}

int wp_jw_puts(struct wp_jw *w, const char *s)
{
	return wp_jw_put(w, s, strlen(s));
}


int wp_jw_printf(struct wp_jw *w, const char *fmt, ...)
{
	char tmp[256];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	/* Only used for numbers and fixed keys; never truncates in practice. */
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		wp_jw_oom(w);
		return -1;
	}
	return wp_jw_put(w, tmp, (size_t)n);
}

static int dump_cb(const char *buf, size_t size, void *data)
{
	return wp_jw_put(data, buf, size);
}

/* Writes `v` compactly and releases it; a NULL `v` is a failed allocation. */
int wp_jw_json(struct wp_jw *w, json_t *v)
{
	int r;

	if (!v) {
		wp_jw_oom(w);
		return -1;
	}
	r = json_dump_callback(v, dump_cb, w, JSON_COMPACT | JSON_ENCODE_ANY);
	json_decref(v);
	if (r < 0 && !w->failed)
		wp_jw_oom(w);
	return w->failed ? -1 : 0;
}

/* Writes `"key":value` (with a leading comma unless first). */
int wp_jw_member(struct wp_jw *w, const char *key, json_t *v, int first)
{
	wp_jw_printf(w, "%s\"%s\":", first ? "" : ",", key);
	return wp_jw_json(w, v);
}

/* A JSON string for bytes from the host (paths, comm, symbols): jansson
 * refuses invalid UTF-8, so such strings are written with '?' for non-ASCII. */
json_t *wp_jstr(const char *s)
{
	json_t *v;
	char *c;

	if (!s)
		s = "";
	v = json_string(s);
	if (v)
		return v;
	c = strdup(s);
	if (!c)
		return NULL;
	for (char *q = c; *q; q++)
		if ((unsigned char)*q >= 0x80)
			*q = '?';
	v = json_string(c);
	free(c);
	return v;
}

json_t *wp_jhex(uint64_t x)
{
	char b[24];

	snprintf(b, sizeof(b), "0x%llx", (unsigned long long)x);
	return json_string(b);
}

json_t *wp_jdec(uint64_t x)
{
	char b[24];

	snprintf(b, sizeof(b), "%llu", (unsigned long long)x);
	return json_string(b);
}

json_t *wp_jint(uint64_t x)
{
	return json_integer(x > INT64_MAX ? INT64_MAX : (json_int_t)x);
}

/* Sets o[key] = v (stolen); returns 1 on failure so callers can OR results. */
int wp_jset(json_t *o, const char *key, json_t *v)
{
	if (!o) {
		json_decref(v);
		return 1;
	}
	return json_object_set_new(o, key, v) < 0;
}

/* Random lowercase hex of `nbytes` bytes; uuid = 1 stamps it as a v4 UUID,
 * which also keeps it non-nil as Relay requires. */
void wp_random_hex(char *out, size_t nbytes, int uuid)
{
	uint8_t r[16];

	if (nbytes > sizeof(r))
		nbytes = sizeof(r);
	wp_out_random(r, nbytes);
	if (uuid && nbytes == 16) {
		r[6] = (r[6] & 0x0f) | 0x40;
		r[8] = (r[8] & 0x3f) | 0x80;
	} else {
		r[nbytes - 1] |= 1; /* never all zero */
	}
	for (size_t i = 0; i < nbytes; i++)
		snprintf(out + 2 * i, 3, "%02x", r[i]);
}

json_t *wp_jrandom_hex(size_t nbytes, int uuid)
{
	char s[33];

	wp_random_hex(s, nbytes, uuid);
	return json_string(s);
}

/* RFC 3339 UTC with microseconds of a CLOCK_REALTIME time. */
json_t *wp_jtimestamp(int64_t ns)
{
	char b[64];
	struct tm tm;
	time_t sec;

	if (ns < 0)
		ns = 0;
	sec = (time_t)(ns / 1000000000);
	gmtime_r(&sec, &tm);
	strftime(b, sizeof(b), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(b + strlen(b), sizeof(b) - strlen(b), ".%06ldZ", (long)(ns % 1000000000 / 1000));
	return json_string(b);
}

json_t *wp_jsdk(void)
{
	json_t *o = json_object();

	if (wp_jset(o, "name", json_string("libwallprof")) |
	    wp_jset(o, "version", json_string(WP_VERSION))) {
		json_decref(o);
		return NULL;
	}
	return o;
}
