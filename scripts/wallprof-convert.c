/* wallprof-convert: turns the raw dump a process wrote when it died of a
 * fatal signal (output/raw.h) into the usual Sentry profile, symbolizing
 * offline against the module files recorded in the dump. Built by `make`
 * as build/wallprof-convert.
 *
 *   wallprof-convert RAW [-o OUT.json] [--platform P]
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../output/output.h"
#include "../output/raw.h"

#define PROG "wallprof-convert"

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " RAW [-o OUT.json] [--platform P]\n"
		   "  Symbolizes a libwallprof raw dump (written when the profiled process died of\n"
		   "  a fatal signal) and writes a Sentry v1 profile. OUT defaults to RAW with\n"
		   "  \".raw\" replaced by \".json\"; P is the profile's platform (\"native\").\n");
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

int main(int argc, char **argv)
{
	const char *raw = NULL, *out = NULL, *platform = NULL;
	char *out_alloc = NULL, err[512];
	struct wp_profile p;
	struct wp_raw_info info;
	struct wp_out_opts opts;
	struct wp_out_stats st;
	struct wp_sym *sym;
	int i, rc;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
			if (++i == argc)
				return fail("%s needs a file name", a);
			out = argv[i];
		} else if (!strncmp(a, "--output=", 9)) {
			out = a + 9;
		} else if (!strcmp(a, "--platform")) {
			if (++i == argc)
				return fail("%s needs a value", a);
			platform = argv[i];
		} else if (!strncmp(a, "--platform=", 11)) {
			platform = a + 11;
		} else if (a[0] == '-' && a[1]) {
			usage(stderr);
			return fail("unknown option %s", a);
		} else if (raw) {
			usage(stderr);
			return fail("one raw dump at a time (got %s and %s)", raw, a);
		} else {
			raw = a;
		}
	}
	if (!raw) {
		usage(stderr);
		return 1;
	}
	if (out && !*out)
		return fail("empty output file name");
	if (platform && !*platform)
		return fail("empty platform");
	if (!out) {
		out = out_alloc = default_out(raw);
		if (!out)
			return fail("out of memory");
	}
	if (wp_raw_read_ex(raw, &p, &info, err, sizeof(err)) < 0) {
		free(out_alloc);
		return fail("%s: %s", raw, err);
	}
	if (p.nr_samples == 0) {
		/* one line either way */
		wp_profile_free(&p);
		if (info.nr_bad_samples || info.nr_bad_stacks)
			rc = fail("%s: no usable samples: %zu samples and %zu stacks did not hold "
				  "together (the dump was damaged, or the ring was being updated "
				  "when the process died); %s not written",
				  raw, info.nr_bad_samples, info.nr_bad_stacks, out);
		else
			rc = fail("%s: no samples in the dump; %s not written", raw, out);
		free(out_alloc);
		return rc;
	}
	if (!wp_profile_sentry_ok(&p)) {
		rc = fail("%s: %zu sample%s, fewer than 2 on every thread: Sentry would reject the "
			  "profile (NotEnoughSamples); %s not written",
			  raw, p.nr_samples, p.nr_samples == 1 ? "" : "s", out);
		wp_profile_free(&p);
		free(out_alloc);
		return rc;
	}
	if (info.nr_bad_samples || info.nr_bad_stacks)
		fprintf(stderr,
			PROG ": %s: dropped %zu samples and %zu stacks that did not hold together "
			     "(the dump was damaged, or the ring was being updated when the process "
			     "died)\n",
			raw, info.nr_bad_samples, info.nr_bad_stacks);
	sym = wp_sym_open(p.modules, p.nr_modules);
	if (!sym) {
		wp_profile_free(&p);
		free(out_alloc);
		return fail("out of memory opening the symbolizer");
	}
	memset(&opts, 0, sizeof(opts));
	opts.platform = platform;
	memset(&st, 0, sizeof(st));
	rc = wp_out_sentry_write(&p, sym, &opts, out, &st, err, sizeof(err));
	wp_sym_close(sym);
	wp_profile_free(&p);
	if (rc < 0) {
		free(out_alloc);
		return fail("%s", err);
	}
	printf(PROG ": wrote %s (%zu samples, %zu threads, %.1f s)\n", out, st.nr_samples,
	       st.nr_threads, st.duration_s);
	if (info.signal > 0)
		printf(PROG ": the process died of signal %d (%s)\n", info.signal,
		       strsignal(info.signal));
	free(out_alloc);
	return 0;
}
