/* upload_cmd: `wallprof upload [--spool DIR] [--timeout S]`: flushes the
 * upload spool now (upload/upload.h): every run whose process is gone, or
 * whose newest item is older than an hour. One summary line on stdout;
 * exit 0 when nothing of those runs is left (live processes' items are
 * theirs to send), 1 otherwise, 2 on a usage error. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../upload/upload.h"
#include "convert.h"

#define DEFAULT_TIMEOUT_S 30.0

static void usage(FILE *f)
{
	fprintf(f,
		"usage: wallprof upload [--spool DIR] [--timeout S]\n"
		"\n"
		"Sends the profiles waiting in the upload spool (those of processes that are\n"
		"gone) to where they were addressed, following Sentry's rate limits.\n"
		"\n"
		"  --spool DIR    the spool (default: $WALLPROF_SPOOL_DIR, else\n"
		"                 $XDG_CACHE_HOME/wallprof/spool, else ~/.cache/wallprof/spool)\n"
		"  --timeout S    give up after S seconds (default 30; decimals allowed)\n"
		"  -h, --help     this text\n"
		"\n"
		"Prints \"wallprof: sent N, dropped N, left N (rate-limited N), N more of\n"
		"running processes\": left counts what it had to send and could not; the\n"
		"items of processes still running are their own converters' to send.\n"
		"Exit status: 0 when nothing is left (running processes' items aside), 1 when\n"
		"items are left or the spool is unreadable, 2 on a usage error.\n");
}

static void on_say(void *ctx, int level, const char *msg)
{
	(void)ctx;
	if (level <= WP_CV_INFO) {
		fflush(stdout);
		fprintf(stderr, "wallprof: %s\n", msg);
	}
}

int wp_cmd_upload(int argc, char **argv)
{
	char dir[4096], err[256];
	struct wp_spool_config sc;
	struct wp_flush_result r;
	double timeout = DEFAULT_TIMEOUT_S;
	const char *spool = NULL;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return WP_EXIT_OK;
		} else if (!strcmp(a, "--spool") || !strcmp(a, "--timeout")) {
			if (i + 1 >= argc)
				return wp_cli_fail(WP_EXIT_USAGE, "upload: %s needs a value", a);
			if (!strcmp(a, "--spool")) {
				spool = argv[++i];
				if (!*spool)
					return wp_cli_fail(WP_EXIT_USAGE, "upload: empty --spool");
			} else {
				char *end;

				timeout = strtod(argv[++i], &end);
				if (end == argv[i] || *end || !isfinite(timeout) || timeout <= 0 ||
				    timeout > 86400)
					return wp_cli_fail(
						WP_EXIT_USAGE,
						"upload: --timeout \"%s\": want seconds, "
						"more than 0 and at most 86400",
						argv[i]);
			}
		} else {
			return wp_cli_fail(WP_EXIT_USAGE,
					   "upload: unknown argument %s (wallprof upload --help)",
					   a);
		}
	}
	if (wp_spool_config_from_env(&sc, dir, sizeof(dir), err, sizeof(err)))
		return wp_cli_fail(WP_EXIT_FAIL, "%s", err);
	if (spool)
		sc.dir = spool;
	if (wp_spool_flush(&sc, NULL, wp_cv_mono_ms() + timeout * 1e3, &r, on_say, NULL))
		return wp_cli_fail(WP_EXIT_FAIL, "%s", r.last_error);
	printf("wallprof: sent %u, dropped %u, left %u (rate-limited %u), %u more of running "
	       "processes\n",
	       r.sent, r.dropped, r.left, r.rate_limited, r.running);
	return r.left ? WP_EXIT_FAIL : WP_EXIT_OK;
}
