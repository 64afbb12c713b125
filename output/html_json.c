/* html_json: the HTML flame graph's buffered writer, JSON strings safe
 * inside a <script> element, and packed numbers (html_json.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "html_json.h"

void wp_hw_flush(struct wp_hw *w)
{
	if (w->len && !w->failed && wp_sink_write(w->s, w->buf, w->len) < 0)
		w->failed = 1;
	w->len = 0;
}

void wp_hw_put(struct wp_hw *w, const void *data, size_t n)
{
	const char *p = data;

	while (n && !w->failed) {
		size_t k = WP_HW_BUF - w->len;

		if (k > n)
			k = n;
		memcpy(w->buf + w->len, p, k);
		w->len += k;
		p += k;
		n -= k;
		if (w->len == WP_HW_BUF)
			wp_hw_flush(w);
	}
}

void wp_hw_str(struct wp_hw *w, const char *s)
{
	wp_hw_put(w, s, strlen(s));
}

void wp_hw_u64(struct wp_hw *w, uint64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%" PRIu64, v);

	wp_hw_put(w, b, (size_t)n);
}

void wp_hw_i64(struct wp_hw *w, int64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%" PRId64, v);

	wp_hw_put(w, b, (size_t)n);
}

/* The length of the UTF-8 sequence at `s` (1..4) and its code point, or 0
 * when it is not valid UTF-8 (overlong, surrogate, cut, out of range). */
static int utf8_seq(const unsigned char *s, uint32_t *cp)
{
	unsigned c = s[0];
	int n, i;
	uint32_t v;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2;
		v = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		v = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		v = c & 0x07;
	} else {
		return 0;
	}
	for (i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3f);
	}
	if ((n == 3 && (v < 0x800 || (v >= 0xd800 && v <= 0xdfff))) ||
	    (n == 4 && (v < 0x10000 || v > 0x10ffff)))
		return 0;
	*cp = v;
	return n;
}

void wp_hw_json_str(struct wp_hw *w, const char *str)
{
	const unsigned char *s = (const unsigned char *)(str ? str : "");
	char esc[8];

	wp_hw_put(w, "\"", 1);
	while (*s) {
		uint32_t cp;
		int n = utf8_seq(s, &cp);

		if (n == 0) {
			wp_hw_str(w, "\\ufffd");
			s++;
			continue;
		}
		if (cp == '"' || cp == '\\') {
			esc[0] = '\\';
			esc[1] = (char)cp;
			wp_hw_put(w, esc, 2);
		} else if (cp < 0x20 || cp == '<' || cp == '>' || cp == '&' || cp == 0x2028 ||
			   cp == 0x2029 || cp == 0x7f) {
			snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);
			wp_hw_put(w, esc, 6);
		} else {
			wp_hw_put(w, s, (size_t)n);
		}
		s += n;
	}
	wp_hw_put(w, "\"", 1);
}

/* A number packed as in html_data.h. */
static const char PACK_END[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdef";
static const char PACK_MORE[] = "ghijklmnopqrstuvwxyz0123456789-_";

void wp_hw_pack(struct wp_hw *w, uint64_t v)
{
	char b[16];
	size_t n = 0;

	while (v >= 32) {
		b[n++] = PACK_MORE[v & 31];
		v >>= 5;
	}
	b[n++] = PACK_END[v];
	wp_hw_put(w, b, n);
}
