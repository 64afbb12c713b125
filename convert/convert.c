/* convert: `wallprof convert`, a raw dump or a profile we wrote turned into
 * any format by hand, and the library's internal modes:
 *
 *   wallprof convert INPUT [-f FORMAT[,FORMAT...]] [-o OUTPUT|-] [--platform P]
 *
 * The preloaded library runs it on the dumps it writes (at exit, exec,
 * snapshot and fatal signal) with --library, or, for the dumps a profiled
 * tree's descendants leave, once per tree with --tree (see convert.h): the
 * profiled process only captures; symbolization and the formats happen
 * here, in a process of their own (preload/convert.c starts it). Then it
 * reports events for the library to relay, or appends them to the tree's
 * index, deletes each dump once its profiles are written, and says nothing
 * on its own stderr. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sys/stat.h>

#include "../output/formats.h"
#include "../output/model.h"
#include "../output/output.h"
#include "../output/raw.h"
#include "convert.h"

#define fail(...) wp_cli_fail(WP_EXIT_FAIL, __VA_ARGS__)

static void usage(FILE *f)
{
	fprintf(f,
		"usage: wallprof convert INPUT [-f FORMAT[,FORMAT...]] [-o OUTPUT|-] [--platform P]\n"
		"                        [--threads] [--syscalls]\n"
		"\n"
		"Converts INPUT, a raw dump the library left (wallprof.PID.raw) or a profile\n"
		"it wrote (Sentry JSON), to FORMAT: sentry (the default), pprof, folded,\n"
		"speedscope or html. A raw dump is symbolized against the module files it\n"
		"names. OUTPUT defaults to INPUT with the format's suffix (.json, .pb.gz,\n"
		".folded, .speedscope.json, .html) instead of .raw or .json; \"-\" is\n"
		"standard output. With several formats, each goes beside OUTPUT (or\n"
		"INPUT) with its suffix. P is a Sentry profile's platform (\"native\").\n"
		"\n"
		"options:\n"
		"  -f, --format LIST   the formats, comma-separated (default sentry)\n"
		"  -o, --output PATH   where to write (\"-\": standard output)\n"
		"  --platform P        the Sentry profile's platform\n"
		"  --threads           folded: each stack starts with its thread's name\n"
		"  --syscalls          folded: an off-CPU stack ends with [off-cpu: SYSCALL]\n"
		"  --debuginfod        let the symbolizer ask debuginfod for missing debug info\n"
		"  -h, --help          this text\n"
		"\n"
		"Compressed debug information is read through uncompressed copies kept in\n"
		"WALLPROF_DEBUG_CACHE (default $XDG_CACHE_HOME/wallprof/debug, else\n"
		"~/.cache/wallprof/debug; \"off\": none), at most WALLPROF_DEBUG_CACHE_MAX_MB\n"
		"(default 1024) MiB of them.\n"
		"\n"
		"Exit status: 0 written, 1 failed (one \"wallprof:\" line says why), 2 usage.\n"
		"The library runs it itself (--library, --tree); that is not for people.\n");
}

int wp_cv_parse_formats(const char *list, const struct wp_format **out, size_t max, char *err,
			size_t errlen)
{
	const char *p = list;
	size_t n = 0;

	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		char name[32];
		const struct wp_format *f;
		size_t k;

		if (len == 0 || len >= sizeof(name)) {
			snprintf(err, errlen, "%s format name in \"%.64s\"",
				 len ? "a too long" : "an empty", list);
			return -1;
		}
		memcpy(name, p, len);
		name[len] = 0;
		if (!(f = wp_format_find(name))) {
			snprintf(err, errlen,
				 "unknown format \"%.32s\" (known: sentry, pprof, folded, "
				 "speedscope, html)",
				 name);
			return -1;
		}
		for (k = 0; k < n && out[k] != f; k++)
			;
		if (k == n) {
			if (n == max) {
				snprintf(err, errlen, "more than %zu formats", max);
				return -1;
			}
			out[n++] = f;
		}
		if (!comma)
			return (int)n;
		p = comma + 1;
	}
}

/* Whether `a` and `b` name one file (b may not exist yet). */
static int same_file(const char *a, const char *b)
{
	struct stat x, y;

	if (!strcmp(a, b))
		return 1;
	return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/* By hand: plain messages on stderr/stdout, the input kept. */
static int convert_by_hand(const char *input, const char *out, const char *formats,
			   const char *platform, int folded_flags)
{
	const struct wp_format *fmts[WP_CV_MAX_FORMATS];
	struct wp_format_opts o = { .platform = platform,
				    .thread_prefix = !!(folded_flags & 1),
				    .syscall_suffix = !!(folded_flags & 2) };
	struct wp_raw_info info;
	struct wp_out_stats st;
	struct wp_model m;
	char err[1024], *base = NULL;
	int nf, k, rc = 0;

	nf = wp_cv_parse_formats(formats ? formats : "sentry", fmts, WP_CV_MAX_FORMATS, err,
				 sizeof(err));
	if (nf < 0)
		return wp_cli_fail(WP_EXIT_USAGE, "%s", err);
	if (nf > 1 && out && !strcmp(out, "-"))
		return wp_cli_fail(WP_EXIT_USAGE, "one format at a time to standard output");
	wp_cv_debug_cache_by_hand();
	if (wp_model_read_ex(input, NULL, &m, &info, err, sizeof(err)) < 0)
		return fail("%s", err);
	if (m.p.nr_samples == 0) {
		wp_model_free(&m);
		if (info.nr_bad_samples || info.nr_bad_stacks)
			return fail(
				"%s: no usable samples: %zu samples and %zu stacks did not hold "
				"together (the dump was damaged, or the ring was being updated "
				"when the process died); nothing written",
				input, info.nr_bad_samples, info.nr_bad_stacks);
		return fail("%s: no samples in the profile; nothing written", input);
	}
	for (k = 0; k < nf; k++)
		if (fmts[k] == wp_format_find("sentry") && !wp_profile_sentry_ok(&m.p)) {
			rc = fail("%s: %llu sample%s, fewer than 2 on every thread: Sentry would "
				  "reject the profile (NotEnoughSamples); nothing written",
				  input, (unsigned long long)wp_profile_count(&m.p),
				  wp_profile_count(&m.p) == 1 ? "" : "s");
			wp_model_free(&m);
			return rc;
		}
	if (info.nr_bad_samples || info.nr_bad_stacks)
		fprintf(stderr,
			"wallprof: %s: dropped %zu samples and %zu stacks that did not hold together "
			"(the dump was damaged, or the ring was being updated when the process "
			"died)\n",
			input, info.nr_bad_samples, info.nr_bad_stacks);
	/* Several formats, or no OUTPUT: each beside OUTPUT (or the input)
	 * with its suffix. */
	if (!out || nf > 1) {
		size_t n = strlen(input);

		/* x.raw and x.json both give x.<suffix> */
		if (out)
			base = strdup(out);
		else if (n > 5 && !strcmp(input + n - 5, ".json"))
			base = strdup(input);
		else
			base = wp_cv_json_name(input);
		if (!base) {
			wp_model_free(&m);
			return fail("out of memory");
		}
	}
	for (k = 0; k < nf && rc == 0; k++) {
		char *path = base ? wp_format_path(fmts[k], base) : strdup(out);

		if (!path) {
			rc = fail("out of memory");
			break;
		}
		if (strcmp(path, "-") && same_file(path, input)) {
			rc = wp_cli_fail(WP_EXIT_USAGE,
					 "%s: the %s output would write over the input; name "
					 "another with -o",
					 path, fmts[k]->name);
			free(path);
			break;
		}
		memset(&st, 0, sizeof(st));
		if (wp_format_write(fmts[k], &m, &o, path, &st, err, sizeof(err)) < 0)
			rc = fail("%s", err);
		else if (strcmp(path, "-"))
			printf("wallprof: wrote %s (%zu samples, %zu threads, %.1f s)\n", path,
			       st.nr_samples, st.nr_threads, st.duration_s);
		free(path);
	}
	if (rc == 0 && info.signal > 0)
		fprintf(strcmp(out ? out : "", "-") ? stdout : stderr,
			"wallprof: the process died of signal %d (%s)\n", info.signal,
			strsignal(info.signal));
	free(base);
	wp_model_free(&m);
	return rc;
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

int wp_cmd_convert(int argc, char **argv)
{
	const char *raw = NULL, *index = NULL, *formats = NULL;
	char *out_alloc = NULL, fdpath[32];
	struct wp_cv_job j = { .fd = -1 };
	int i, rc, library = 0, tree = 0, folded_flags = 0;
	unsigned index_pid = 0, timeout_s = 0, linger_s = 0;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		/* options taking a value; the library's after --platform */
		static const char *const valued[] = { "-o",        "--output",    "--platform",
						      "--fd",      "--raw",       "--fallback",
						      "--index",   "--index-pid", "--pid",
						      "--timeout", "-f",          "--format",
						      "--formats", "--linger",    NULL };
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
		if (!strcmp(a, "--threads") || !strcmp(a, "--syscalls")) {
			folded_flags |= a[2] == 't' ? 1 : 2;
			continue;
		}
		for (k = 0; valued[k]; k++) {
			size_t n = strlen(valued[k]);

			if (!strcmp(a, valued[k])) {
				if (++i == argc)
					return wp_cli_fail(WP_EXIT_USAGE, "%s needs a value", a);
				v = argv[i];
				break;
			}
			if (!strncmp(a, valued[k], n) && a[n] == '=') {
				v = a + n + 1;
				break;
			}
		}
		if (!valued[k]) {
			if (a[0] == '-' && a[1])
				return wp_cli_fail(
					WP_EXIT_USAGE,
					"convert: unknown option %s (wallprof convert --help)", a);
			if (raw)
				return wp_cli_fail(WP_EXIT_USAGE,
						   "convert: one input at a time (got %s and %s)",
						   raw, a);
			raw = a;
			continue;
		}
		if (!*v)
			return wp_cli_fail(WP_EXIT_USAGE, "empty value for %s", valued[k]);
		if (k <= 1)
			j.out = v;
		else if (k == 2)
			j.platform = v;
		else if (k == 3 && (j.fd = (int)number(v)) < 0)
			return wp_cli_fail(WP_EXIT_USAGE, "--fd needs a descriptor number, not %s",
					   v);
		else if (k == 4)
			raw = v;
		else if (k == 5)
			j.fallback = v;
		else if (k == 6)
			index = v;
		else if (k == 7) {
			long pid = number(v);

			if (pid <= 0)
				return wp_cli_fail(WP_EXIT_USAGE,
						   "--index-pid needs a process id, not %s", v);
			index_pid = (unsigned)pid;
		} else if (k == 8) {
			long pid = number(v);

			if (pid <= 0)
				return wp_cli_fail(WP_EXIT_USAGE,
						   "--pid needs a process id, not %s", v);
			wp_sym_set_process((int)pid);
		} else if (k == 9) {
			long s = number(v);

			if (s <= 0)
				return wp_cli_fail(WP_EXIT_USAGE,
						   "--timeout needs a number of seconds, not %s",
						   v);
			timeout_s = (unsigned)s;
		} else if (k >= 10 && k <= 12) {
			formats = v;
		} else if (k == 13) {
			long s = number(v);

			if (s <= 0 || s > 3600)
				return wp_cli_fail(WP_EXIT_USAGE,
						   "--linger needs 1 to 3600 seconds, not %s", v);
			linger_s = (unsigned)s;
		}
	}
	j.formats = formats;
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
		return wp_cv_tree(index, j.fd, j.platform, formats, timeout_s, linger_s);
	}
	if (!raw)
		return wp_cli_fail(WP_EXIT_USAGE,
				   "convert: no input given (wallprof convert INPUT [-f FORMAT] "
				   "[-o OUTPUT])");
	if (!library)
		return convert_by_hand(raw, j.out, formats, j.platform, folded_flags);
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
	if (index)
		wp_cv_report_to(index, index_pid);
	rc = wp_cv_library(&j, NULL);
	free(out_alloc);
	return rc;
}
