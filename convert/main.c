/* main: the `wallprof` command line (see convert.h): which subcommand,
 * --help, --version. Built by `make` as build/wallprof.
 *
 *   wallprof record [options] -- PROGRAM [ARGS...]
 *   wallprof report PROFILE [--threads] [--top N] [--markdown]
 *   wallprof convert INPUT [-f FORMAT] [-o OUTPUT|-]
 *   wallprof diff BASE NEW [-f text|html] [-o OUTPUT]
 *   wallprof upload [--spool DIR] [--timeout S]
 *
 * The library starts it as `wallprof --library ...` or `wallprof --tree
 * ...` (the first argument names the mode, as any WALLPROF_CONVERTER
 * program sees it): those go to convert. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "../output/output.h"
#include "convert.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *what;
} commands[] = {
	{ "record", wp_cmd_record, "run a program under the profiler" },
	{ "report", wp_cmd_report, "summarize a profile: threads, system calls, top functions" },
	{ "convert", wp_cmd_convert, "convert a raw dump or a profile to another format" },
	{ "diff", wp_cmd_diff, "compare two profiles: which functions gained or lost time" },
	{ "upload", wp_cmd_upload, "send the profiles waiting in the upload spool now" },
};

static void usage(FILE *f)
{
	fprintf(f, "usage: wallprof COMMAND [ARGS...]\n"
		   "\n"
		   "libwallprof, a wall-clock sampling profiler: every thread sampled at a fixed\n"
		   "rate whether it runs or waits, each sample with its stack and, off CPU, the\n"
		   "system call it waits in.\n"
		   "\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(*commands); i++)
		fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].what);
	fprintf(f,
		"\n"
		"  wallprof record [options] -- PROGRAM [ARGS...]\n"
		"  wallprof report PROFILE [--threads] [--top N] [--markdown]\n"
		"  wallprof convert INPUT [-f sentry|pprof|folded|speedscope|html] [-o OUTPUT|-]\n"
		"  wallprof diff BASE NEW [-f text|html] [-o OUTPUT]\n"
		"  wallprof upload [--spool DIR] [--timeout S]\n"
		"\n"
		"`wallprof COMMAND --help` tells more. Options:\n"
		"  -h, --help     this text\n"
		"  --version      the version\n"
		"\n"
		"Exit status: 0 done, 1 failed (one \"wallprof:\" line says why), 2 usage;\n"
		"record exits with the program's status.\n");
}

int wp_cli_fail(int status, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	fputs("wallprof: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return status;
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (!cmd) {
		usage(stderr);
		return WP_EXIT_USAGE;
	}
	if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
		usage(stdout);
		return WP_EXIT_OK;
	}
	if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
		printf("wallprof %s\n", WP_VERSION);
		return WP_EXIT_OK;
	}
	if (!strcmp(cmd, "--library") || !strcmp(cmd, "--tree"))
		return wp_cmd_convert(argc, argv);
	for (size_t i = 0; i < sizeof(commands) / sizeof(*commands); i++)
		if (!strcmp(cmd, commands[i].name))
			return commands[i].run(argc - 1, argv + 1);
	if (cmd[0] == '-')
		return wp_cli_fail(WP_EXIT_USAGE, "unknown option %s (wallprof --help)", cmd);
	return wp_cli_fail(
		WP_EXIT_USAGE,
		"unknown command %s: record, report, convert, diff or upload (wallprof --help)",
		cmd);
}
