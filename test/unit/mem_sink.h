/* mem_sink.h: a stand-in for formats.c's sink (wp_sink_write,
 * wp_sink_printf) that appends to one memory buffer, for the tests of
 * format writers written before formats.c exists. Include it in one test
 * only; the linker then takes these definitions, not the archive's. When
 * formats.c is in the tree, a test may use its sink instead (a file, or
 * standard output) and drop this. */
#ifndef WP_TEST_MEM_SINK_H
#define WP_TEST_MEM_SINK_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../output/formats.h"

static char *mem_buf;
static size_t mem_len, mem_cap;
static size_t mem_fail_after = (size_t)-1; /* fail the write that would pass this many bytes */

static void mem_reset(void)
{
	free(mem_buf);
	mem_buf = NULL;
	mem_len = mem_cap = 0;
	mem_fail_after = (size_t)-1;
}

static void mem_sink(struct wp_out_sink *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	s->a.fd = -1;
	s->err = err;
	s->errlen = errlen;
	err[0] = 0;
	mem_reset();
}

int wp_sink_write(struct wp_out_sink *s, const void *data, size_t len)
{
	if (s->failed)
		return -1;
	if (mem_len + len > mem_fail_after) {
		snprintf(s->err, s->errlen, "test: write failed");
		s->failed = 1;
		return -1;
	}
	if (mem_len + len + 1 > mem_cap) {
		size_t cap = mem_cap ? mem_cap : 65536;
		char *p;

		while (cap < mem_len + len + 1)
			cap *= 2;
		p = realloc(mem_buf, cap);
		if (!p) {
			snprintf(s->err, s->errlen, "out of memory");
			s->failed = 1;
			return -1;
		}
		mem_buf = p;
		mem_cap = cap;
	}
	memcpy(mem_buf + mem_len, data, len);
	mem_len += len;
	mem_buf[mem_len] = 0;
	s->bytes += len;
	return 0;
}

int wp_sink_printf(struct wp_out_sink *s, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf)) {
		snprintf(s->err, s->errlen, "test: printf too long");
		s->failed = 1;
		return -1;
	}
	return wp_sink_write(s, buf, (size_t)n);
}

#endif
