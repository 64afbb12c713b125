/* job: one dump converted for the library (see convert.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../output/event.h"
#include "../output/formats.h"
#include "../output/model.h"
#include "../output/output.h"
#include "../output/raw.h"
#include "convert.h"

static struct {
	const char *index; /* events go there, as lines of process `pid` */
	unsigned pid;
} rep;

void wp_cv_report_to(const char *index, unsigned pid)
{
	rep.index = index;
	rep.pid = pid;
}

int wp_cv_to_index(void)
{
	return rep.index != NULL;
}

void wp_cv_event(int level, const char *kind, const char *path, unsigned long long lost,
		 const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	size_t i, n;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	n = k < 0 ? 0 : (size_t)k < sizeof(msg) ? (size_t)k : sizeof(msg) - 1;
	for (i = 0; i < n; i++)
		if ((unsigned char)msg[i] < 0x20 || msg[i] == 0x7f)
			msg[i] = '?';
	for (i = 0; path && path[i]; i++)
		if ((unsigned char)path[i] < 0x20 || path[i] == 0x7f) {
			path = "(path with control characters)";
			break;
		}
	if (rep.index) {
		if (level <= WP_CV_INFO)
			wp_event_append(rep.index, rep.pid, kind, path, lost, msg, n, 1);
		return;
	}
	printf("%d\t%s\t%s\t%llu\t%.*s\n", level, kind, path ? path : "", lost, (int)n, msg);
	fflush(stdout);
}

char *wp_cv_json_name(const char *raw)
{
	size_t n = strlen(raw);
	char *out = malloc(n + 6);

	if (!out)
		return NULL;
	memcpy(out, raw, n + 1);
	if (n > 4 && !strcmp(raw + n - 4, ".raw"))
		n -= 4;
	memcpy(out + n, ".json", 6);
	return out;
}

double wp_cv_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int wp_cv_same_file(const char *path, int fd)
{
	struct stat a, b;

	return fd >= 0 && fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

/* Writes format `f` of `m` beside j->out (its fallback when that fails).
 * Returns the path written (malloc'd), or NULL with `err` set. */
static char *write_one(const struct wp_cv_job *j, const struct wp_format *f,
		       const struct wp_model *m, struct wp_out_stats *st, int *fell_back, char *err,
		       size_t errlen)
{
	struct wp_format_opts o = { .platform = j->platform };
	/* Sentry's file is the profile's name itself, whatever its suffix. */
	int same = f->write == wp_out_sentry_model;
	char err2[512] = "", *path = same ? strdup(j->out) : wp_format_path(f, j->out), *fb = NULL;
	int rc;

	*fell_back = 0;
	if (!path) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	memset(st, 0, sizeof(*st));
	rc = wp_format_write(f, m, &o, path, st, err, errlen);
	if (rc < 0 && f->write && j->fallback &&
	    (fb = same ? strdup(j->fallback) : wp_format_path(f, j->fallback)) &&
	    strcmp(fb, path)) {
		memset(st, 0, sizeof(*st));
		rc = wp_format_write(f, m, &o, fb, st, err2, sizeof(err2));
		if (rc == 0) {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "%s; wrote the profile to %s instead", err, fb);
			*fell_back = 1;
			free(path);
			return fb;
		}
		snprintf(err + strlen(err), errlen - strlen(err), "; fallback: %s", err2);
	}
	free(fb);
	if (rc < 0) {
		free(path);
		return NULL;
	}
	return path;
}

int wp_cv_tail_model(const struct wp_model *m, struct wp_model *t)
{
	*t = *m;
	t->p.samples = malloc((m->p.nr_samples + 1) * sizeof(*t->p.samples));
	if (!t->p.samples) {
		t->p.nr_samples = 0;
		return -1;
	}
	memcpy(t->p.samples, m->p.samples, m->p.nr_samples * sizeof(*t->p.samples));
	wp_profile_keep_range(&t->p, m->p.chunk_from_ns, 0);
	t->p.chunk = m->p.tail_chunk;
	t->p.tail_chunk = 0;
	if (t->p.nr_samples)
		t->p.start_ns = t->p.samples[0].t_ns;
	return 0;
}

void wp_cv_tail_free(struct wp_model *t)
{
	free(t->p.samples);
	t->p.samples = NULL;
	t->p.nr_samples = 0;
}

/* The tail of `m` (wp_cv_tail_model) as chunk files beside j->out,
 * "<name>.chunk<k>.json" and the other formats' (the first k on with
 * neither it nor its raw dump there), when it has samples enough; said at
 * debug level only (the exit's own line is enough). */
static void write_tail(const struct wp_cv_job *j, const struct wp_model *m,
		       const struct wp_format *const *fmts, int nf)
{
	struct wp_cv_job cj = *j;
	struct wp_out_stats st;
	struct wp_model t;
	char err[1200], *base = strdup(j->out), *name, *raw, *path;
	size_t n = base ? strlen(base) : 0;
	unsigned k = m->p.tail_chunk, last = k + 1000;
	int fell_back;

	if (wp_cv_tail_model(m, &t) < 0 || !base || !wp_profile_sentry_ok(&t.p)) {
		wp_cv_tail_free(&t);
		free(base);
		return;
	}
	if (n > 5 && !strcmp(base + n - 5, ".json"))
		base[n - 5] = 0;
	name = malloc(n + 32);
	raw = malloc(n + 32);
	for (; name && raw && k < last; k++) {
		sprintf(name, "%s.chunk%u.json", base, k);
		sprintf(raw, "%s.chunk%u.raw", base, k);
		if (access(name, F_OK) != 0 && access(raw, F_OK) != 0)
			break;
	}
	if (name && raw && k < last) {
		cj.out = name;
		cj.fallback = NULL;
		t.p.chunk = k;
		for (int f = 0; f < nf; f++) {
			path = write_one(&cj, fmts[f], &t, &st, &fell_back, err, sizeof(err));
			if (path)
				wp_cv_event(WP_CV_DEBUG, "wrote", path, 0,
					    "wrote %s (chunk %u, %zu samples, %.1f s)", path, k,
					    st.nr_samples, st.duration_s);
			else
				wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
					    "the last chunk not written: %s", err);
			free(path);
		}
	}
	free(name);
	free(raw);
	free(base);
	wp_cv_tail_free(&t);
}

int wp_cv_library(const struct wp_cv_job *j, struct wp_sym_pool *pool)
{
	double t0 = wp_cv_mono_ms();
	char err[1200], what[48] = "", who[40] = "";
	const struct wp_format *fmts[WP_CV_MAX_FORMATS];
	char *written[WP_CV_MAX_FORMATS] = { 0 };
	struct wp_out_stats sts[WP_CV_MAX_FORMATS];
	struct wp_profile p;
	struct wp_raw_info info;
	struct wp_model m;
	const struct wp_counters *c;
	unsigned long long dropped;
	struct wp_sym *sym;
	int nf, k, nw = 0, fell_back;

	if (wp_cv_debug_cache_load(err, sizeof(err)) < 0)
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "%s", err);
	nf = wp_cv_parse_formats(j->formats ? j->formats : "sentry", fmts, WP_CV_MAX_FORMATS, err,
				 sizeof(err));
	if (nf < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "profile not written: %s", err);
		return 1;
	}
	if (wp_raw_read_ex(j->source, &p, &info, err, sizeof(err)) < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "profile not written: %s: %s", j->raw,
			    err);
		return 1;
	}
	c = &p.counters;
	/* Ticks with no sample of a thread the sampler knew: all in samples. */
	dropped = wp_counters_dropped(c);
	if (info.signal > 0 && sigabbrev_np(info.signal))
		snprintf(who, sizeof(who), "SIG%s: ", sigabbrev_np(info.signal));
	if (p.snapshot)
		snprintf(what, sizeof(what), "snapshot %d, ", p.snapshot);
	if (p.chunk)
		snprintf(what, sizeof(what), "chunk %u, ", p.chunk);
	if (!wp_profile_sentry_ok(&p)) {
		/* Sentry would reject it (NotEnoughSamples): say so, write
		 * nothing. A chunk says so only in debug: the last one, at
		 * exit, is often a few ticks. */
		wp_cv_event(p.chunk ? WP_CV_DEBUG : WP_CV_INFO, "short", NULL, dropped,
			    "%s%s%zu sample%s in %.0f ms, fewer than 2 on every thread: too short "
			    "for a profile, none written (WALLPROF_HZ=%u)",
			    who, p.snapshot ? "snapshot: " : "", (size_t)wp_profile_count(&p),
			    wp_profile_count(&p) == 1 ? "" : "s",
			    (double)(info.dump_ns - info.start_ns) / 1e6, p.hz);
		wp_profile_free(&p);
		if (!j->keep_dump && wp_cv_same_file(j->raw, j->fd))
			unlink(j->raw);
		return 0;
	}
	sym = wp_sym_open_pooled(pool, p.modules, p.nr_modules);
	if (!sym || wp_model_build(&m, &p, sym, j->platform, err, sizeof(err)) < 0) {
		if (sym)
			wp_sym_close(sym);
		else
			wp_profile_free(&p);
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: out of memory; the raw dump stays at %s", j->raw);
		return 1;
	}
	wp_sym_close(sym);
	/* A chunk with somewhere to send it goes there, not into a file per
	 * period; into files as usual when it could not even be spooled. */
	if (m.p.chunk && wp_cv_send_load() && wp_cv_send_model(&m) > 0) {
		if (!j->keep_dump && wp_cv_same_file(j->raw, j->fd))
			unlink(j->raw);
		wp_model_free(&m);
		return 0;
	}
	for (k = 0; k < nf; k++) {
		written[k] = write_one(j, fmts[k], &m, &sts[k], &fell_back, err, sizeof(err));
		if (written[k]) {
			nw++;
			continue;
		}
		/* Nothing written yet: say so once, with the first format's reason. */
		if (nf == 1 || (k == nf - 1 && nw == 0)) {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "profile not written: %s; the raw dump stays at %s", err,
				    j->raw);
		} else {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "%s profile not written: %s",
				    fmts[k]->name, err);
		}
	}
	if (nw == 0) {
		/* no profile file (a full or read-only disk): what no chunk
		 * took is still sent, if it has somewhere to go */
		if (m.p.tail_chunk && wp_cv_send_load())
			wp_cv_send_model(&m);
		wp_model_free(&m);
		return 1;
	}
	/* The dump first: the profiles are in place, whatever happens to us
	 * while we report. */
	if (!j->keep_dump && wp_cv_same_file(j->raw, j->fd))
		unlink(j->raw);
	for (k = 0, nw = 0; k < nf; k++) {
		if (!written[k])
			continue;
		/* The samples lost are counted once, with the first file. */
		wp_cv_event(
			WP_CV_INFO, "wrote", written[k], nw ? 0 : dropped,
			"%swrote %s (%s%zu samples, %zu threads, %.1f s, %llu dropped) in %.0f ms",
			who, written[k], what, sts[k].nr_samples, sts[k].nr_threads,
			sts[k].duration_s, dropped, wp_cv_mono_ms() - t0);
		if (fmts[k]->write == wp_out_sentry_model &&
		    sts[k].duration_s > WP_SENTRY_MAX_SECONDS)
			wp_cv_event(WP_CV_INFO, "info", NULL, 0,
				    "%s covers %.1f s; Sentry rejects v1 profiles longer than %d s",
				    written[k], sts[k].duration_s, WP_SENTRY_MAX_SECONDS);
		nw++;
		free(written[k]);
	}
	/* What no periodic chunk took (the process ended between two
	 * periods) goes where chunks go: sent, or beside the profile. */
	if (m.p.tail_chunk && !(wp_cv_send_load() && wp_cv_send_model(&m) > 0))
		write_tail(j, &m, fmts, nf);
	else if (!m.p.chunk && !m.p.tail_chunk && wp_cv_send_load())
		wp_cv_send_model(&m);
	wp_model_free(&m);
	return 0;
}
