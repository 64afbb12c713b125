/* fmt_stubs.h: until output/formats.c and output/model.c exist (another
 * branch writes them), the few functions of theirs that the format writers
 * call, to their headers' contracts: the sink's writes (formats.h) and the
 * model's helpers (model.h). Each group compiles only while its real file
 * is missing, so once those are merged the tests use the real ones with no
 * change here. Also `fmt_model_from_raw`: a model built by hand from a raw
 * dump and a symbolizer, for test_formats' --convert mode. */
#ifndef WP_TEST_FMT_STUBS_H
#define WP_TEST_FMT_STUBS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../output/formats.h"
#include "../../output/model.h"
#include "../../output/raw.h"

#if !__has_include("../../output/formats.c")
int wp_sink_write(struct wp_out_sink *s, const void *data, size_t len)
{
	const char *p = data;

	if (s->failed)
		return -1;
	if (s->to_stdout) {
		while (len) {
			ssize_t n = write(1, p, len);

			if (n <= 0) {
				s->failed = 1;
				return -1;
			}
			p += n;
			len -= (size_t)n;
			s->bytes += (size_t)n;
		}
		return 0;
	}
	if (wp_out_atomic_write(&s->a, data, len, s->err, s->errlen) < 0) {
		s->failed = 1;
		return -1;
	}
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
		s->failed = 1;
		return -1;
	}
	return wp_sink_write(s, buf, (size_t)n);
}
#endif

#if !__has_include("../../output/model.c")
const char *wp_model_frame_label(const struct wp_model *m, const struct wp_model_loc *loc,
				 const struct wp_sym_frame *f, char *buf, size_t len)
{
	if (f && f->function && f->function[0])
		return f->function;
	if (loc->module >= 0 && (size_t)loc->module < m->p.nr_modules) {
		const char *path = m->p.modules[loc->module].path;
		const char *base = path ? strrchr(path, '/') : NULL;

		snprintf(buf, len, "%s+0x%llx", base ? base + 1 : path ? path : "?",
			 (unsigned long long)loc->module_offset);
	} else {
		snprintf(buf, len, "0x%llx", (unsigned long long)loc->module_offset);
	}
	return buf;
}

const struct wp_thread *wp_model_thread(const struct wp_model *m, uint32_t tid)
{
	for (size_t i = 0; i < m->p.nr_threads; i++)
		if (m->p.threads[i].tid == tid)
			return &m->p.threads[i];
	return NULL;
}

uint64_t wp_model_period_ns(const struct wp_model *m)
{
	return 1000000000ull / (m->p.hz ? m->p.hz : 101);
}
#endif

/* A model of the raw dump at `path`, symbolized with a wp_sym that the
 * caller closes (*symp) after writing (the frames' strings are its).
 * Returns 0, or -1 with a reason in `err`. */
static int fmt_model_from_raw(const char *path, struct wp_model *m, struct wp_sym **symp,
			      char *err, size_t errlen)
{
	static const struct wp_sym_frame unknown;
	struct wp_profile *p = &m->p;
	size_t cap = 0;

	memset(m, 0, sizeof(*m));
	if (wp_raw_read_ex(path, p, NULL, err, errlen) < 0)
		return -1;
	*symp = wp_sym_open(p->modules, p->nr_modules);
	m->locs = calloc(p->nr_pcs ? p->nr_pcs : 1, sizeof(*m->locs));
	if (!*symp || !m->locs)
		goto oom;
	for (size_t i = 0; i < p->nr_pcs; i++) {
		uint64_t la = p->pcs[i].addr;
		struct wp_sym_result r;
		int k;

		if (!(p->pcs[i].flags & WP_PC_EXACT) && la > 0)
			la--;
		memset(&r, 0, sizeof(r));
		if (wp_sym_lookup(*symp, la, &r) < 0)
			goto oom;
		k = r.nr_frames > 0 ? r.nr_frames : 1;
		if (m->nr_frames + (size_t)k > cap) {
			struct wp_sym_frame *v;

			cap = cap ? cap * 2 + (size_t)k : 256 + (size_t)k;
			v = realloc(m->frames, cap * sizeof(*v));
			if (!v)
				goto oom;
			m->frames = v;
		}
		m->locs[i].module = r.module;
		m->locs[i].module_offset = r.module >= 0 ? r.module_offset : la;
		m->locs[i].first = (uint32_t)m->nr_frames;
		m->locs[i].nr = (uint32_t)k;
		for (int j = 0; j < k; j++)
			m->frames[m->nr_frames++] = r.nr_frames > 0 ? r.frames[j] : unknown;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
	return -1;
}

/* Frees what fmt_model_from_raw (or a test) put in `m` with malloc. */
static void fmt_model_free(struct wp_model *m)
{
	free(m->locs);
	free(m->frames);
	wp_profile_free(&m->p);
	memset(m, 0, sizeof(*m));
}

#endif
