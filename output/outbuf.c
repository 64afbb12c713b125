/* outbuf: buffered writes into a format sink (outbuf.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "outbuf.h"

void wp_outbuf_init(struct wp_outbuf *b, struct wp_out_sink *s)
{
	b->s = s;
	b->len = 0;
}

int wp_outbuf_flush(struct wp_outbuf *b)
{
	int rc = 0;

	if (b->len)
		rc = wp_sink_write(b->s, b->buf, b->len);
	b->len = 0;
	return b->s->failed ? -1 : rc;
}

int wp_outbuf_put(struct wp_outbuf *b, const void *data, size_t len)
{
	if (b->s->failed)
		return -1;
	if (len > sizeof(b->buf) - b->len) {
		if (wp_outbuf_flush(b) < 0)
			return -1;
		if (len > sizeof(b->buf))
			return wp_sink_write(b->s, data, len);
	}
	memcpy(b->buf + b->len, data, len);
	b->len += len;
	return 0;
}

int wp_outbuf_puts(struct wp_outbuf *b, const char *str)
{
	return wp_outbuf_put(b, str, strlen(str));
}

int wp_outbuf_printf(struct wp_outbuf *b, const char *fmt, ...)
{
	char tmp[1024];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(tmp)) {
		if (!b->s->failed && b->s->err && b->s->errlen)
			snprintf(b->s->err, b->s->errlen, "output line too long");
		b->s->failed = 1;
		return -1;
	}
	return wp_outbuf_put(b, tmp, (size_t)n);
}

int wp_outbuf_u64(struct wp_outbuf *b, unsigned long long v)
{
	char tmp[24];
	size_t k = sizeof(tmp);

	do {
		tmp[--k] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return wp_outbuf_put(b, tmp + k, sizeof(tmp) - k);
}
