/* outbuf: a 64 KiB buffer in front of a format sink (formats.h), so that
 * writers that emit many small pieces (a number per frame index) reach the
 * sink, and its file, in large writes. Errors are the sink's: once it has
 * failed, everything here does nothing. Not async-signal-safe. */
#ifndef WP_OUTBUF_H
#define WP_OUTBUF_H

#include <stddef.h>

#include "formats.h"

#define WP_OUTBUF_SIZE 65536

struct wp_outbuf {
	struct wp_out_sink *s;
	size_t len;
	char buf[WP_OUTBUF_SIZE];
};

/* Starts buffering for `s` (nothing is written yet). */
void wp_outbuf_init(struct wp_outbuf *b, struct wp_out_sink *s);

/* Appends `len` bytes; 0, or -1 once the sink has failed. */
int wp_outbuf_put(struct wp_outbuf *b, const void *data, size_t len);

/* Appends a NUL-terminated string. */
int wp_outbuf_puts(struct wp_outbuf *b, const char *str);

/* Appends printf output (at most 1 KiB; longer is cut and the sink fails). */
int wp_outbuf_printf(struct wp_outbuf *b, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Appends `v` in decimal. */
int wp_outbuf_u64(struct wp_outbuf *b, unsigned long long v);

/* Hands what is buffered to the sink; 0, or -1 once the sink has failed. */
int wp_outbuf_flush(struct wp_outbuf *b);

#endif
