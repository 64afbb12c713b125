/* job: one dump converted for the library (see convert.h). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../output/event.h"
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

int wp_cv_library(const struct wp_cv_job *j, struct wp_sym_pool *pool)
{
	double t0 = wp_cv_mono_ms();
	char err[512], err2[512] = "", what[48] = "", who[40] = "";
	struct wp_profile p;
	struct wp_raw_info info;
	struct wp_out_opts opts = { .platform = j->platform };
	struct wp_out_stats st;
	const struct wp_counters *c;
	unsigned long long dropped;
	const char *path = j->out;
	struct wp_sym *sym;
	int rc;

	if (wp_raw_read_ex(j->source, &p, &info, err, sizeof(err)) < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0, "profile not written: %s: %s", j->raw,
			    err);
		return 1;
	}
	c = &p.counters;
	/* Ticks with no sample of a thread the sampler knew: all in samples. */
	dropped = c->nr_pending + c->nr_send_failed + c->nr_dropped_full + c->nr_overwritten;
	if (info.signal > 0 && sigabbrev_np(info.signal))
		snprintf(who, sizeof(who), "SIG%s: ", sigabbrev_np(info.signal));
	if (p.snapshot)
		snprintf(what, sizeof(what), "snapshot %d, ", p.snapshot);
	if (!wp_profile_sentry_ok(&p)) {
		/* Sentry would reject it (NotEnoughSamples): say so, write nothing. */
		wp_cv_event(WP_CV_INFO, "short", NULL, dropped,
			    "%s%s%zu sample%s in %.0f ms, fewer than 2 on every thread: too short "
			    "for a profile, none written (WALLPROF_HZ=%u)",
			    who, p.snapshot ? "snapshot: " : "", p.nr_samples,
			    p.nr_samples == 1 ? "" : "s",
			    (double)(info.dump_ns - info.start_ns) / 1e6, p.hz);
		wp_profile_free(&p);
		if (!j->keep_dump && wp_cv_same_file(j->raw, j->fd))
			unlink(j->raw);
		return 0;
	}
	sym = wp_sym_open_pooled(pool, p.modules, p.nr_modules);
	if (!sym) {
		wp_profile_free(&p);
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: out of memory; the raw dump stays at %s", j->raw);
		return 1;
	}
	memset(&st, 0, sizeof(st));
	rc = wp_out_sentry_write(&p, sym, &opts, path, &st, err, sizeof(err));
	if (rc < 0 && j->fallback && strcmp(j->fallback, path)) {
		rc = wp_out_sentry_write(&p, sym, &opts, j->fallback, &st, err2, sizeof(err2));
		if (rc == 0) {
			wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
				    "%s; wrote the profile to %s instead", err, j->fallback);
			path = j->fallback;
		}
	}
	wp_sym_close(sym);
	if (rc < 0) {
		wp_cv_event(WP_CV_ERROR, "error", NULL, 0,
			    "profile not written: %s%s%s; the raw dump stays at %s", err,
			    err2[0] ? "; fallback: " : "", err2, j->raw);
		wp_profile_free(&p);
		return 1;
	}
	/* The dump first: the profile is in place, whatever happens to us
	 * while we report. */
	if (!j->keep_dump && wp_cv_same_file(j->raw, j->fd))
		unlink(j->raw);
	wp_cv_event(WP_CV_INFO, "wrote", path, dropped,
		    "%swrote %s (%s%zu samples, %zu threads, %.1f s, %llu dropped) in %.0f ms", who,
		    path, what, st.nr_samples, st.nr_threads, st.duration_s, dropped,
		    wp_cv_mono_ms() - t0);
	if (st.duration_s > WP_SENTRY_MAX_SECONDS)
		wp_cv_event(WP_CV_INFO, "info", NULL, 0,
			    "%s covers %.1f s; Sentry rejects v1 profiles longer than %d s", path,
			    st.duration_s, WP_SENTRY_MAX_SECONDS);
	wp_profile_free(&p);
	return 0;
}
