/* wallprof-convert: turns a raw dump (output/raw.h) into the usual Sentry
 * profile, symbolizing against the module files recorded in the dump. Built
 * by `make` as build/wallprof-convert.
 *
 *   wallprof-convert RAW [-o OUT.json] [--platform P]
 *
 * The preloaded library runs it on the dumps it writes (at exit, exec,
 * snapshot and fatal signal) with --library, or, for the dumps a profiled
 * tree's descendants leave, once per tree with --tree (see convert.h): the
 * profiled process only captures; symbolization and JSON happen here, in a
 * process of their own (preload/convert.c starts it). Then it reports
 * events for the library to relay, or appends them to the tree's index,
 * deletes each dump once its profile is written, and says nothing on its
 * own stderr. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../output/output.h"
#include "../output/raw.h"
#include "convert.h"

#define PROG "wallprof-convert"

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " RAW [-o OUT.json] [--platform P]\n"
		   "  Symbolizes a libwallprof raw dump and writes a Sentry v1 profile. OUT\n"
		   "  defaults to RAW with \".raw\" replaced by \".json\"; P is the profile's\n"
		   "  platform (\"native\"). The library runs it on its own dumps (--library,\n"
		   "  --tree).\n");
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

/* By hand: plain messages on stderr/stdout, the dump kept. */
static int convert_by_hand(const struct wp_cv_job *j)
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
	const char *raw = NULL, *index = NULL;
	char *out_alloc = NULL, fdpath[32];
	struct wp_cv_job j = { .fd = -1 };
	int i, rc, library = 0, tree = 0;
	unsigned index_pid = 0, timeout_s = 0;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		/* options taking a value: -o, --output, --platform, and the library's */
		static const char *const valued[] = { "-o",    "--output",   "--platform", "--fd",
						      "--raw", "--fallback", "--index",    "--index-pid",
						      "--pid", "--timeout", NULL };
		const char *v = NULL;
		int k;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--library")) {
			library = 1;
			continue;
		}
		if (!strcmp(a, "--tree")) {
			library = tree = 1;
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
			index = v;
		else if (k == 7) {
			long pid = number(v);

			if (pid <= 0)
				return fail("--index-pid needs a process id, not %s", v);
			index_pid = (unsigned)pid;
		} else if (k == 8) {
			long pid = number(v);

			if (pid <= 0)
				return fail("--pid needs a process id, not %s", v);
			wp_sym_set_process((int)pid);
		} else if (k == 9) {
			long s = number(v);

			if (s <= 0)
				return fail("--timeout needs a number of seconds, not %s", v);
			timeout_s = (unsigned)s;
		}
	}
	if (library) {
		/* Past RLIMIT_FSIZE a write fails with EFBIG instead of killing us;
		 * a reader of our report that is gone (the process died of a
		 * second signal) does not kill us before the dump is dealt with. */
		signal(SIGXFSZ, SIG_IGN);
		signal(SIGPIPE, SIG_IGN);
	}
	if (tree) {
		if (!index || index[0] != '/' || j.fd < 0)
			return fail("--tree needs --index (an absolute path) and --fd");
		/* Past --timeout on one dump, SIGALRM ends us (an ignored one
		 * would have been inherited); our working directory, the first
		 * descendant's, is not held for the next few seconds. */
		signal(SIGALRM, SIG_DFL);
		if (chdir("/") < 0)
			return 1;
		return wp_cv_tree(index, j.fd, j.platform, timeout_s);
	}
	if (!raw) {
		usage(stderr);
		return 1;
	}
	if (!j.out) {
		j.out = out_alloc = wp_cv_json_name(raw);
		if (!j.out)
			return fail("out of memory");
	}
	j.raw = raw;
	j.source = raw;
	if (j.fd >= 0) {
		snprintf(fdpath, sizeof(fdpath), "/dev/fd/%d", j.fd);
		j.source = fdpath;
	}
	if (library) {
		if (index)
			wp_cv_report_to(index, index_pid);
		rc = wp_cv_library(&j, NULL);
	} else {
		rc = convert_by_hand(&j);
	}
	free(out_alloc);
	return rc;
}
