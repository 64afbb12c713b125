/* wallprof-convert: turns a raw dump (output/raw.h) into the usual Sentry
 * profile, symbolizing against the module files recorded in the dump. Built
 * by `make` as build/wallprof-convert.
 *
 *   wallprof-convert RAW [-o OUT.json] [--platform P]
 *
 * The preloaded library runs it on every dump it writes (at exit, exec,
 * snapshot and fatal signal) with --library: the profiled process only
 * captures; symbolization and JSON happen here, in a process of their own
 * (preload/convert.c starts it). In that mode it reports one event per line
 * for the library to relay (or appends them to the tree's index when nobody
 * waits), deletes the dump once its profile is written, and says nothing on
 * its own stderr. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../output/event.h"
#include "../output/output.h"
#include "../output/raw.h"

#define PROG "wallprof-convert"

enum { L_ERROR = 1, L_INFO = 2, L_DEBUG = 3 }; /* the library's levels */

static struct {
	int library;            /* --library: events, not plain messages */
	const char *index;      /* --index: events go there, for process --index-pid */
	unsigned index_pid;
	int nr_errors;
} rep;

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " RAW [-o OUT.json] [--platform P]\n"
		   "  Symbolizes a libwallprof raw dump and writes a Sentry v1 profile. OUT\n"
		   "  defaults to RAW with \".raw\" replaced by \".json\"; P is the profile's\n"
		   "  platform (\"native\"). The library runs it on its own dumps (--library).\n");
}

/* One line "wallprof-convert: ..." on stderr; returns the exit status 1. */
static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

/* Library mode: one event, "<level> TAB <kind> TAB <path> TAB <lost> TAB
 * <message>" on stdout for the library waiting on us, or a line in the
 * tree's index (event.h) when nobody waits. */
static void event(int level, const char *kind, const char *path, unsigned long long lost,
		  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void event(int level, const char *kind, const char *path, unsigned long long lost,
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
	if (level == L_ERROR)
		rep.nr_errors++;
	if (rep.index) {
		if (level <= L_INFO)
			wp_event_append(rep.index, rep.index_pid, kind, path, lost, msg, n, 1);
		return;
	}
	printf("%d\t%s\t%s\t%llu\t%.*s\n", level, kind, path ? path : "", lost, (int)n, msg);
	fflush(stdout);
}

/* RAW with a trailing ".raw" replaced by ".json" (or ".json" appended). */
static char *default_out(const char *raw)
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

static double mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Whether `path` still names the file open as `fd` (nobody replaced it). */
static int same_file(const char *path, int fd)
{
	struct stat a, b;

	return fd >= 0 && fstat(fd, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
	       a.st_ino == b.st_ino;
}

struct job {
	const char *raw;      /* the dump's name (messages, deletion) */
	const char *source;   /* what is read: raw, or /dev/fd/N */
	int fd;               /* --fd, or -1 */
	const char *out;      /* profile */
	const char *fallback; /* second try when out cannot be written, or NULL */
	const char *platform;
};

/* Library mode: converts, reports one "wrote"/"short"/"error" event, and
 * deletes the dump once a profile is written. Returns the exit status. */
static int convert_for_library(const struct job *j)
{
	double t0 = mono_ms();
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
		event(L_ERROR, "error", NULL, 0, "profile not written: %s: %s", j->raw, err);
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
		event(L_INFO, "short", NULL, dropped,
		      "%s%s%zu sample%s in %.0f ms, fewer than 2 on every thread: too short for a "
		      "profile, none written (WALLPROF_HZ=%u)",
		      who, p.snapshot ? "snapshot: " : "", p.nr_samples,
		      p.nr_samples == 1 ? "" : "s", (double)(info.dump_ns - info.start_ns) / 1e6,
		      p.hz);
		wp_profile_free(&p);
		if (same_file(j->raw, j->fd))
			unlink(j->raw);
		return 0;
	}
	sym = wp_sym_open(p.modules, p.nr_modules);
	if (!sym) {
		wp_profile_free(&p);
		event(L_ERROR, "error", NULL, 0,
		      "profile not written: out of memory; the raw dump stays at %s", j->raw);
		return 1;
	}
	memset(&st, 0, sizeof(st));
	rc = wp_out_sentry_write(&p, sym, &opts, path, &st, err, sizeof(err));
	if (rc < 0 && j->fallback && strcmp(j->fallback, path)) {
		rc = wp_out_sentry_write(&p, sym, &opts, j->fallback, &st, err2, sizeof(err2));
		if (rc == 0) {
			event(L_ERROR, "error", NULL, 0, "%s; wrote the profile to %s instead", err,
			      j->fallback);
			path = j->fallback;
		}
	}
	wp_sym_close(sym);
	if (rc < 0) {
		event(L_ERROR, "error", NULL, 0, "profile not written: %s%s%s; the raw dump stays at %s",
		      err, err2[0] ? "; fallback: " : "", err2, j->raw);
		wp_profile_free(&p);
		return 1;
	}
	/* The dump first: the profile is in place, whatever happens to us
	 * while we report. */
	if (same_file(j->raw, j->fd))
		unlink(j->raw);
	event(L_INFO, "wrote", path, dropped,
	      "%swrote %s (%s%zu samples, %zu threads, %.1f s, %llu dropped) in %.0f ms", who,
	      path, what, st.nr_samples, st.nr_threads, st.duration_s, dropped, mono_ms() - t0);
	if (st.duration_s > WP_SENTRY_MAX_SECONDS)
		event(L_INFO, "info", NULL, 0, "%s covers %.1f s; Sentry rejects v1 profiles longer "
		      "than %d s", path, st.duration_s, WP_SENTRY_MAX_SECONDS);
	wp_profile_free(&p);
	return 0;
}

/* By hand: plain messages on stderr/stdout, the dump kept. */
static int convert_by_hand(const struct job *j)
{
	char err[512];
	struct wp_profile p;
	struct wp_raw_info info;
	struct wp_out_opts opts = { .platform = j->platform };
	struct wp_out_stats st;
	struct wp_sym *sym;
	int rc;

	if (wp_raw_read_ex(j->source, &p, &info, err, sizeof(err)) < 0)
		return fail("%s: %s", j->raw, err);
	if (p.nr_samples == 0) {
		/* one line either way */
		wp_profile_free(&p);
		if (info.nr_bad_samples || info.nr_bad_stacks)
			return fail("%s: no usable samples: %zu samples and %zu stacks did not hold "
				    "together (the dump was damaged, or the ring was being updated "
				    "when the process died); %s not written",
				    j->raw, info.nr_bad_samples, info.nr_bad_stacks, j->out);
		return fail("%s: no samples in the dump; %s not written", j->raw, j->out);
	}
	if (!wp_profile_sentry_ok(&p)) {
		rc = fail("%s: %zu sample%s, fewer than 2 on every thread: Sentry would reject the "
			  "profile (NotEnoughSamples); %s not written",
			  j->raw, p.nr_samples, p.nr_samples == 1 ? "" : "s", j->out);
		wp_profile_free(&p);
		return rc;
	}
	if (info.nr_bad_samples || info.nr_bad_stacks)
		fprintf(stderr,
			PROG ": %s: dropped %zu samples and %zu stacks that did not hold together "
			     "(the dump was damaged, or the ring was being updated when the process "
			     "died)\n",
			j->raw, info.nr_bad_samples, info.nr_bad_stacks);
	sym = wp_sym_open(p.modules, p.nr_modules);
	if (!sym) {
		wp_profile_free(&p);
		return fail("out of memory opening the symbolizer");
	}
	memset(&st, 0, sizeof(st));
	rc = wp_out_sentry_write(&p, sym, &opts, j->out, &st, err, sizeof(err));
	wp_sym_close(sym);
	wp_profile_free(&p);
	if (rc < 0)
		return fail("%s", err);
	printf(PROG ": wrote %s (%zu samples, %zu threads, %.1f s)\n", j->out, st.nr_samples,
	       st.nr_threads, st.duration_s);
	if (info.signal > 0)
		printf(PROG ": the process died of signal %d (%s)\n", info.signal,
		       strsignal(info.signal));
	return 0;
}

/* A non-negative decimal number that fits an int, or -1. */
static long number(const char *s)
{
	char *end;
	long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	return errno || *end || v > 0x7fffffff ? -1 : v;
}

int main(int argc, char **argv)
{
	const char *raw = NULL;
	char *out_alloc = NULL, fdpath[32];
	struct job j = { .fd = -1 };
	int i, rc;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		/* options taking a value: -o, --output, --platform, and the library's */
		static const char *const valued[] = { "-o",    "--output",   "--platform", "--fd",
						      "--raw", "--fallback", "--index",    "--index-pid",
						      "--pid", NULL };
		const char *v = NULL;
		int k;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--library")) {
			rep.library = 1;
			continue;
		}
		if (!strcmp(a, "--debuginfod")) {
			wp_sym_set_debuginfod(1);
			continue;
		}
		for (k = 0; valued[k]; k++) {
			size_t n = strlen(valued[k]);

			if (!strcmp(a, valued[k])) {
				if (++i == argc)
					return fail("%s needs a value", a);
				v = argv[i];
				break;
			}
			if (!strncmp(a, valued[k], n) && a[n] == '=') {
				v = a + n + 1;
				break;
			}
		}
		if (!valued[k]) {
			if (a[0] == '-' && a[1]) {
				usage(stderr);
				return fail("unknown option %s", a);
			}
			if (raw) {
				usage(stderr);
				return fail("one raw dump at a time (got %s and %s)", raw, a);
			}
			raw = a;
			continue;
		}
		if (!*v)
			return fail("empty value for %s", valued[k]);
		if (k <= 1)
			j.out = v;
		else if (k == 2)
			j.platform = v;
		else if (k == 3 && (j.fd = (int)number(v)) < 0)
			return fail("--fd needs a descriptor number, not %s", v);
		else if (k == 4)
			raw = v;
		else if (k == 5)
			j.fallback = v;
		else if (k == 6)
			rep.index = v;
		else if (k == 7) {
			long pid = number(v);

			if (pid <= 0)
				return fail("--index-pid needs a process id, not %s", v);
			rep.index_pid = (unsigned)pid;
		} else if (k == 8) {
			long pid = number(v);

			if (pid <= 0)
				return fail("--pid needs a process id, not %s", v);
			wp_sym_set_process((int)pid);
		}
	}
	if (!raw) {
		usage(stderr);
		return 1;
	}
	if (!j.out) {
		j.out = out_alloc = default_out(raw);
		if (!j.out)
			return fail("out of memory");
	}
	j.raw = raw;
	j.source = raw;
	if (j.fd >= 0) {
		snprintf(fdpath, sizeof(fdpath), "/dev/fd/%d", j.fd);
		j.source = fdpath;
	}
	if (rep.library) {
		/* Past RLIMIT_FSIZE a write fails with EFBIG instead of killing us;
		 * a reader of our report that is gone (the process died of a
		 * second signal) does not kill us before the dump is dealt with. */
		signal(SIGXFSZ, SIG_IGN);
		signal(SIGPIPE, SIG_IGN);
		rc = convert_for_library(&j);
	} else {
		rc = convert_by_hand(&j);
	}
	free(out_alloc);
	return rc;
}
