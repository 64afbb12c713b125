/* strput: building a message or a path in a caller's buffer without
 * snprintf, for code that may run in a signal handler (the raw dump, the
 * converter's start, the index line, the interposed sigaction).
 * async-signal-safe */
#ifndef WP_STRPUT_H
#define WP_STRPUT_H

#include <stddef.h>

/* `s` after the `n` bytes of `buf` (of `cap`), cut to fit and terminated as
 * snprintf would; returns the new length. async-signal-safe */
static inline size_t wp_put_str(char *buf, size_t n, size_t cap, const char *s)
{
	while (*s && n + 1 < cap)
		buf[n++] = *s++;
	if (n < cap)
		buf[n] = 0;
	return n;
}

/* `v` in decimal after the `n` bytes of `buf`, likewise. async-signal-safe */
static inline size_t wp_put_uint(char *buf, size_t n, size_t cap, unsigned long long v)
{
	char tmp[24];
	size_t k = 0;

	do {
		tmp[k++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	while (k && n + 1 < cap)
		buf[n++] = tmp[--k];
	if (n < cap)
		buf[n] = 0;
	return n;
}

#endif
