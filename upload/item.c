/* item: one spool item's file (docs/FORMATS.md, "The upload spool"): a
 * block of "name: value" lines after a magic line, a blank line, then the
 * body. Spool files are untrusted input when read back: every length is
 * bounded and checked against the file's size. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "upload_int.h"

static int fail(char *err, size_t errlen, const char *why)
{
	if (errlen)
		snprintf(err, errlen, "%s", why);
	return -1;
}

/* 1 when `s` has no control character (nor DEL) and is at most `max` long. */
static int clean(const char *s, size_t max)
{
	size_t n = 0;

	for (; *s; s++, n++)
		if ((unsigned char)*s < ' ' || *s == 0x7f || n >= max)
			return 0;
	return 1;
}

/* Sentry's rate-limit categories an item counts against: one or more
 * [a-z_]{1,32} separated by ';' ("profile;transaction"), at most 8. */
static int category_ok(const char *c)
{
	size_t n = 0, words = 1;

	for (; *c; c++) {
		if (*c == ';') {
			if (!n || ++words > 8)
				return 0;
			n = 0;
		} else if (((*c >= 'a' && *c <= 'z') || *c == '_') && n < 32) {
			n++;
		} else {
			return 0;
		}
	}
	return n > 0;
}

/* "Name: value": a token name (letters, digits, '-'), ": ", a clean value. */
static int header_ok(const char *h)
{
	const char *p = h;

	while ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
	       *p == '-')
		p++;
	return p > h && p[0] == ':' && p[1] == ' ' && clean(h, 1024);
}

static int url_ok(const char *u)
{
	return (!strncmp(u, "http://", 7) || !strncmp(u, "https://", 8)) &&
	       clean(u, WP_UP_MAX_LINE - 16);
}

struct buf {
	char *p;
	size_t n, cap;
};

static int put(struct buf *b, const char *s, size_t n)
{
	if (b->n + n > b->cap)
		return -1;
	memcpy(b->p + b->n, s, n);
	b->n += n;
	return 0;
}

static int line(struct buf *b, const char *name, const char *value)
{
	return put(b, name, strlen(name)) || put(b, ": ", 2) || put(b, value, strlen(value)) ||
	       put(b, "\n", 1);
}

int wp_up_item_encode(const struct wp_upload_item *it, const void *body, size_t len, int gzip,
		      char **out, size_t *outlen, char *err, size_t errlen)
{
	char what[201], num[24];
	struct buf b = { 0 };
	size_t i;

	if (!it->url || !url_ok(it->url))
		return fail(err, errlen, "the URL is not http(s):// or has control characters");
	if (it->category && !category_ok(it->category))
		return fail(err, errlen, "bad category");
	if (!it->content_type || !*it->content_type || !clean(it->content_type, 256))
		return fail(err, errlen, "bad content type");
	for (i = 0; i < WP_UP_MAX_HEADERS && it->headers[i]; i++)
		if (!header_ok(it->headers[i]))
			return fail(err, errlen, "an extra header is not one \"Name: value\" line");
	if (len > WP_UP_MAX_BODY)
		return fail(err, errlen, "body over 256 MiB");
	/* `what` is for messages only: cut to 200, control characters as '?'. */
	snprintf(what, sizeof(what), "%s", it->what ? it->what : "");
	for (char *w = what; *w; w++)
		if ((unsigned char)*w < ' ' || *w == 0x7f)
			*w = '?';

	b.cap = WP_UP_MAX_HEAD + len;
	b.p = malloc(b.cap);
	if (!b.p)
		return fail(err, errlen, "out of memory");
	snprintf(num, sizeof(num), "%zu", len);
	if (put(&b, WP_UP_MAGIC "\n", sizeof(WP_UP_MAGIC)) || line(&b, "url", it->url) ||
	    (it->category && line(&b, "category", it->category)) ||
	    line(&b, "content-type", it->content_type))
		goto too_long;
	for (i = 0; i < WP_UP_MAX_HEADERS && it->headers[i]; i++)
		if (line(&b, "header", it->headers[i]))
			goto too_long;
	if (line(&b, "gzip", gzip ? "1" : "0") || (what[0] && line(&b, "what", what)) ||
	    line(&b, "length", num) || put(&b, "\n", 1))
		goto too_long;
	if (b.n > WP_UP_MAX_HEAD)
		goto too_long;
	memcpy(b.p + b.n, body, len);
	*out = b.p;
	*outlen = b.n + len;
	return 0;
too_long:
	free(b.p);
	return fail(err, errlen, "the item's header block is over 16 KiB");
}

/* A decimal size without sign, leading zeros or overflow. */
static int parse_size(const char *s, size_t *out)
{
	size_t v = 0;

	if (!*s || (s[0] == '0' && s[1]))
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (SIZE_MAX - 9) / 10)
			return -1;
		v = v * 10 + (size_t)(*s - '0');
	}
	*out = v;
	return 0;
}

int wp_up_item_parse(char *buf, size_t len, struct wp_up_parsed *p, char *err, size_t errlen)
{
	size_t off, nh = 0, body_len = 0;
	int have_len = 0, have_gzip = 0;
	char *s, *nl;

	memset(p, 0, sizeof(*p));
	p->what = "";
	off = sizeof(WP_UP_MAGIC);
	if (len < off || memcmp(buf, WP_UP_MAGIC "\n", off))
		return fail(err, errlen, "not a spool item (no \"" WP_UP_MAGIC "\" line)");
	for (;;) {
		char *colon, *value;
		size_t n;

		if (off >= len)
			return fail(err, errlen, "truncated in its header block");
		s = buf + off;
		nl = memchr(s, '\n', (len - off < WP_UP_MAX_LINE ? len - off : WP_UP_MAX_LINE));
		if (!nl)
			return fail(err, errlen,
				    len - off < WP_UP_MAX_LINE ? "truncated in its header block"
							       : "a header line over 4096 bytes");
		n = (size_t)(nl - s);
		off += n + 1;
		if (off > WP_UP_MAX_HEAD)
			return fail(err, errlen, "header block over 16 KiB");
		if (n == 0)
			break;
		*nl = '\0';
		if (memchr(s, '\0', n) || !clean(s, n))
			return fail(err, errlen, "a control character in its header block");
		colon = strstr(s, ": ");
		if (!colon)
			return fail(err, errlen, "a header line without \": \"");
		*colon = '\0';
		value = colon + 2;
		if (!strcmp(s, "url") && !p->url) {
			if (!url_ok(value))
				return fail(err, errlen, "its URL is not http(s)://");
			p->url = value;
		} else if (!strcmp(s, "category") && !p->category) {
			if (!category_ok(value))
				return fail(err, errlen, "bad category");
			p->category = value;
		} else if (!strcmp(s, "content-type") && !p->content_type) {
			if (!*value)
				return fail(err, errlen, "empty content-type");
			p->content_type = value;
		} else if (!strcmp(s, "header")) {
			if (nh == WP_UP_MAX_HEADERS)
				return fail(err, errlen, "more than 4 extra headers");
			if (!header_ok(value))
				return fail(err, errlen, "an extra header is not \"Name: value\"");
			p->headers[nh++] = value;
		} else if (!strcmp(s, "gzip") && !have_gzip) {
			if (strcmp(value, "0") && strcmp(value, "1"))
				return fail(err, errlen, "gzip is not 0 or 1");
			p->gzip = value[0] == '1';
			have_gzip = 1;
		} else if (!strcmp(s, "what") && !p->what[0]) {
			p->what = value;
		} else if (!strcmp(s, "length") && !have_len) {
			if (parse_size(value, &body_len) || body_len > WP_UP_MAX_BODY)
				return fail(err, errlen, "bad length");
			have_len = 1;
		} else {
			return fail(err, errlen, "an unknown or repeated header line");
		}
	}
	if (!p->url || !p->content_type || !have_len || !have_gzip)
		return fail(err, errlen, "url, content-type, gzip or length missing");
	if (len - off < body_len)
		return fail(err, errlen, "truncated (shorter than its length)");
	if (len - off > body_len)
		return fail(err, errlen, "longer than its length");
	p->body = buf + off;
	p->len = body_len;
	return 0;
}
