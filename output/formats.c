/* formats: the registry of output formats, the sink every writer streams
 * through, and writing a model in one format (see formats.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats.h"

static const struct wp_format formats[] = {
	{ "sentry", ".json", wp_out_sentry_model },
	{ "pprof", ".pb.gz", wp_out_pprof },
	{ "folded", ".folded", wp_out_folded },
	{ "speedscope", ".speedscope.json", wp_out_speedscope },
	{ "html", ".html", wp_out_html },
};

static const struct wp_format *const all[] = { &formats[0], &formats[1], &formats[2],
					       &formats[3], &formats[4], NULL };

const struct wp_format *const *wp_format_all(void)
{
	return all;
}

const struct wp_format *wp_format_find(const char *name)
{
	for (size_t i = 0; name && i < sizeof(formats) / sizeof(*formats); i++)
		if (!strcmp(formats[i].name, name))
			return &formats[i];
	return NULL;
}

/* Appends to the sink's buffer, doubling it (64 KiB at first); keeps a NUL
 * after the bytes. */
static int mem_write(struct wp_out_sink *s, const void *data, size_t len)
{
	if (len >= s->mem_cap - s->bytes || !s->mem) {
		size_t cap = s->mem_cap ? s->mem_cap : 65536;
		char *p;

		while (cap - s->bytes <= len) {
			if (cap > SIZE_MAX / 2) {
				wp_sink_oom(s, "memory");
				return -1;
			}
			cap *= 2;
		}
		p = realloc(s->mem, cap);
		if (!p) {
			wp_sink_oom(s, "memory");
			return -1;
		}
		s->mem = p;
		s->mem_cap = cap;
	}
	memcpy(s->mem + s->bytes, data, len);
	s->bytes += len;
	s->mem[s->bytes] = 0;
	return 0;
}

int wp_sink_write(struct wp_out_sink *s, const void *data, size_t len)
{
	const char *p = data;

	if (s->failed)
		return -1;
	if (s->to_mem)
		return mem_write(s, data, len);
	if (!s->to_stdout) {
		if (wp_out_atomic_write(&s->a, data, len, s->err, s->errlen) < 0) {
			s->failed = 1;
			return -1;
		}
		s->bytes += len;
		return 0;
	}
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			char buf[128];

			if (s->err && s->errlen)
				snprintf(s->err, s->errlen, "cannot write standard output: %s",
					 n < 0 ? strerror_r(errno, buf, sizeof(buf))
					       : "no progress");
			s->failed = 1;
			return -1;
		}
		p += n;
		len -= (size_t)n;
		s->bytes += (size_t)n;
	}
	return 0;
}

int wp_sink_printf(struct wp_out_sink *s, const char *fmt, ...)
{
	char buf[4096];
	va_list ap;
	int n;

	if (s->failed)
		return -1;
	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(buf)) {
		if (s->err && s->errlen)
			snprintf(s->err, s->errlen,
				 "internal error: a formatted piece of %d bytes "
				 "does not fit the sink's buffer",
				 n);
		s->failed = 1;
		return -1;
	}
	return wp_sink_write(s, buf, (size_t)n);
}

/* Runs the writer of `f` into the sink `s` (opened by the caller); 0, or -1
 * with `err` set. */
static int run_writer(const struct wp_format *f, const struct wp_model *m,
		      const struct wp_format_opts *o, struct wp_out_sink *s,
		      struct wp_out_stats *st)
{
	static const struct wp_format_opts none;
	struct wp_out_stats local;

	memset(&local, 0, sizeof(local));
	if (f->write(m, o ? o : &none, s, st ? st : &local) < 0 || s->failed) {
		if (s->err && s->errlen && !s->err[0])
			snprintf(s->err, s->errlen, "cannot write %s: the %s writer failed",
				 wp_sink_name(s), f->name);
		return -1;
	}
	if (st)
		st->bytes = s->bytes;
	return 0;
}

static int no_format(const struct wp_format *f, char *err, size_t errlen)
{
	if (err && errlen)
		err[0] = 0;
	if (!f && err && errlen)
		snprintf(err, errlen, "no format given");
	return f ? 0 : -1;
}

int wp_format_write(const struct wp_format *f, const struct wp_model *m,
		    const struct wp_format_opts *o, const char *path, struct wp_out_stats *st,
		    char *err, size_t errlen)
{
	struct wp_out_sink s;

	if (no_format(f, err, errlen) < 0)
		return -1;
	memset(&s, 0, sizeof(s));
	s.a.fd = -1;
	s.err = err;
	s.errlen = errlen;
	s.to_stdout = path && !strcmp(path, "-");
	if (s.to_stdout)
		fflush(stdout); /* what was printed before comes first */
	else if (wp_out_atomic_open(&s.a, path, err, errlen) < 0)
		return -1;
	if (run_writer(f, m, o, &s, st) < 0) {
		if (!s.to_stdout)
			wp_out_atomic_abort(&s.a);
		return -1;
	}
	if (!s.to_stdout && wp_out_atomic_commit(&s.a, err, errlen) < 0)
		return -1;
	return 0;
}

int wp_format_write_mem(const struct wp_format *f, const struct wp_model *m,
			const struct wp_format_opts *o, char **out, size_t *len,
			struct wp_out_stats *st, char *err, size_t errlen)
{
	struct wp_out_sink s;

	*out = NULL;
	*len = 0;
	if (no_format(f, err, errlen) < 0)
		return -1;
	wp_sink_mem_open(&s, err, errlen);
	if (run_writer(f, m, o, &s, st) < 0)
		s.failed = 1;
	return wp_sink_mem_take(&s, out, len);
}

void wp_sink_mem_open(struct wp_out_sink *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	s->a.fd = -1;
	s->err = err;
	s->errlen = errlen;
	s->to_mem = 1;
}

int wp_sink_mem_take(struct wp_out_sink *s, char **out, size_t *len)
{
	if (!s->failed && !s->mem)
		mem_write(s, "", 0); /* an empty buffer, NUL-terminated */
	if (s->failed || !s->mem) {
		free(s->mem);
		s->mem = NULL;
		return -1;
	}
	*out = s->mem;
	*len = s->bytes;
	s->mem = NULL;
	return 0;
}

char *wp_format_path(const struct wp_format *f, const char *json)
{
	size_t n = strlen(json), k = strlen(f->suffix);
	char *out;

	if (n > 5 && !strcmp(json + n - 5, ".json"))
		n -= 5;
	out = malloc(n + k + 1);
	if (!out)
		return NULL;
	memcpy(out, json, n);
	memcpy(out + n, f->suffix, k + 1);
	return out;
}

void wp_sink_oom(struct wp_out_sink *s, const char *what)
{
	if (!s->failed && s->err && s->errlen)
		snprintf(s->err, s->errlen, "%s: out of memory", what);
	s->failed = 1;
}

const char *wp_sink_name(const struct wp_out_sink *s)
{
	if (s->to_mem)
		return "memory";
	if (s->to_stdout)
		return "standard output";
	return s->a.path ? s->a.path : "the output";
}
