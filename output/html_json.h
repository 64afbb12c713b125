/* html_json: how the HTML flame graph's data are written (html_data.c):
 * a buffered writer over a sink (formats.h), JSON strings that cannot end
 * the <script> element they sit in, and numbers packed into strings.
 *
 * Strings: '<', '>', '&', U+2028, U+2029, DEL and control characters as
 * \u escapes, '"' and '\\' escaped, bytes that are not UTF-8 as U+FFFD.
 *
 * Packed numbers: 5 bits a character, the low bits first; a character of
 * "A".."Z", "a".."f" ends a number (value 0..31), one of "g".."z",
 * "0".."9", "-", "_" carries 5 bits and more follow. Not
 * async-signal-safe. */
#ifndef WP_HTML_JSON_H
#define WP_HTML_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "formats.h"

#define WP_HW_BUF 65536

/* Buffered writer over a sink; the first failure sticks (`failed`), and
 * later writes do nothing. */
struct wp_hw {
	struct wp_out_sink *s;
	int failed;
	size_t len;
	char buf[WP_HW_BUF];
};

/* Writes out what is buffered. */
void wp_hw_flush(struct wp_hw *w);

/* Appends bytes, a C string, a number in decimal. */
void wp_hw_put(struct wp_hw *w, const void *data, size_t n);
void wp_hw_str(struct wp_hw *w, const char *s);
void wp_hw_u64(struct wp_hw *w, uint64_t v);
void wp_hw_i64(struct wp_hw *w, int64_t v);

/* Appends `str` (NULL: "") as a quoted JSON string, escaped as above. */
void wp_hw_json_str(struct wp_hw *w, const char *str);

/* Appends `v` packed as above. */
void wp_hw_pack(struct wp_hw *w, uint64_t v);

#endif
