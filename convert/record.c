/* record: `wallprof record [options] [--] PROGRAM [ARGS...]`. Sets
 * LD_PRELOAD (the library first, the caller's entries kept after it) and
 * the WALLPROF_* variables from the options, then execs PROGRAM: its pid,
 * signals and exit status are its own. PROGRAM is looked up in PATH as
 * execvp does. Programs the dynamic loader will not preload into (static,
 * setuid/setgid or with file capabilities, musl, another ELF class or
 * machine) still run, unprofiled, after one "wallprof:" line. Exit status:
 * the program's; 127 when it cannot be found, 126 when it cannot be
 * executed, 125 when wallprof itself fails (bad option, library missing). */
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "../output/output.h"
#include "convert.h"

#define EXIT_USAGE 125
#define EXIT_CANNOT_EXEC 126
#define EXIT_NOT_FOUND 127
#define DEFAULT_PATH "/bin:/usr/bin" /* what execvp uses when PATH is unset */

extern char **environ;

static void usage(FILE *f)
{
	fputs("usage: wallprof record [options] [--] PROGRAM [ARGS...]\n"
	      "\n"
	      "Runs PROGRAM under libwallprof (LD_PRELOAD). It writes a wall-clock profile\n"
	      "when the program exits, and a snapshot on SIGUSR2.\n"
	      "\n"
	      "options:\n"
	      "  --hz N                 samples per second per thread (WALLPROF_HZ, default 101)\n"
	      "  -o, --output TEMPLATE  output path; %p pid, %n snapshot number, %% percent\n"
	      "                         (WALLPROF_OUTPUT; default wallprof.%p.json in the\n"
	      "                         program's directory; a relative TEMPLATE is made\n"
	      "                         absolute, so child processes that change directory\n"
	      "                         write beside it too)\n"
	      "  -f, --format LIST      formats written side by side, comma-separated: sentry,\n"
	      "                         pprof, folded, speedscope, html (WALLPROF_FORMAT, sentry)\n"
	      "  --ring-seconds N       seconds of samples kept and written (WALLPROF_RING_SECONDS, 30)\n"
	      "  --ring-mb N            memory for the samples, MiB (WALLPROF_RING_MB)\n"
	      "  --max-depth N          frames kept per stack (WALLPROF_MAX_DEPTH, 128)\n"
	      "  --max-threads N        threads sampled at once (WALLPROF_MAX_THREADS)\n"
	      "  --signal SIG           sampling signal (WALLPROF_SIGNAL)\n"
	      "  --snapshot-signal SIG  snapshot signal, or \"off\" (WALLPROF_SNAPSHOT_SIGNAL, SIGUSR2)\n"
	      "  --no-follow-children   do not profile forked children (WALLPROF_FOLLOW_CHILDREN=0)\n"
	      "  --platform NAME        the Sentry profile's platform (WALLPROF_SENTRY_PLATFORM)\n"
	      "  --debuginfod           fetch missing debug info (WALLPROF_DEBUGINFOD=1)\n"
	      "  --debug-cache DIR      where uncompressed copies of compressed debug info are\n"
	      "                         kept (WALLPROF_DEBUG_CACHE; ~/.cache/wallprof/debug)\n"
	      "  --no-debug-cache       keep none (WALLPROF_DEBUG_CACHE=off)\n"
	      "  --convert-timeout N    seconds one conversion may take (WALLPROF_CONVERT_TIMEOUT)\n"
	      "  --converter PATH       the converter the library runs (WALLPROF_CONVERTER)\n"
	      "  --chunk-seconds N      a profile of the last N seconds every N seconds, 1-60\n"
	      "                         (WALLPROF_CHUNK_SECONDS; default off)\n"
	      "  --sentry-dsn DSN       send profiles (chunks with --chunk-seconds) to Sentry\n"
	      "                         (WALLPROF_SENTRY_DSN)\n"
	      "  --sentry-environment E, --sentry-release R\n"
	      "                         (WALLPROF_SENTRY_ENVIRONMENT, WALLPROF_SENTRY_RELEASE)\n"
	      "  --pyroscope URL        push profiles to Pyroscope's /ingest (WALLPROF_PYROSCOPE_URL)\n"
	      "  --pyroscope-app NAME   its application name (WALLPROF_PYROSCOPE_APP; the program's)\n"
	      "  --pyroscope-labels K=V,...  static labels (WALLPROF_PYROSCOPE_LABELS)\n"
	      "  --spool DIR            where unsent uploads wait (WALLPROF_SPOOL_DIR)\n"
	      "  --upload-timeout N     seconds an upload may add to the exit (WALLPROF_UPLOAD_TIMEOUT, 5)\n"
	      "  --no-send-args         send the program's path without its arguments\n"
	      "                         (WALLPROF_SEND_ARGS=0)\n"
	      "  -q, --quiet            nothing on stderr (WALLPROF_LOG=quiet)\n"
	      "  --debug                verbose library log (WALLPROF_LOG=debug)\n"
	      "  --lib PATH             the library (default: $WALLPROF_LIB, else\n"
	      "                         libwallprof.so beside this program, else\n"
	      "                         ../lib/libwallprof.so from its directory)\n"
	      "  -h, --help             this text\n"
	      "  --version              print the version\n"
	      "\n"
	      "Other WALLPROF_* variables already in the environment are passed on; options\n"
	      "override them. Exit status: the program's own; 127 if it is not found, 126 if\n"
	      "it cannot be executed, 125 if wallprof fails (bad option, no library).\n",
	      f);
}

enum kind { UINT, PATH, TEXT, LIB, FLAG };

static const struct {
	const char *opt;
	const char *var;
	enum kind kind;
	const char *value; /* FLAG: the variable's value */
} options[] = {
	{ "--hz", "WALLPROF_HZ", UINT, NULL },
	{ "-o", "WALLPROF_OUTPUT", PATH, NULL },
	{ "--output", "WALLPROF_OUTPUT", PATH, NULL },
	{ "-f", "WALLPROF_FORMAT", TEXT, NULL },
	{ "--format", "WALLPROF_FORMAT", TEXT, NULL },
	{ "--ring-seconds", "WALLPROF_RING_SECONDS", UINT, NULL },
	{ "--ring-mb", "WALLPROF_RING_MB", UINT, NULL },
	{ "--max-depth", "WALLPROF_MAX_DEPTH", UINT, NULL },
	{ "--max-threads", "WALLPROF_MAX_THREADS", UINT, NULL },
	{ "--signal", "WALLPROF_SIGNAL", TEXT, NULL },
	{ "--snapshot-signal", "WALLPROF_SNAPSHOT_SIGNAL", TEXT, NULL },
	{ "--platform", "WALLPROF_SENTRY_PLATFORM", TEXT, NULL },
	{ "--convert-timeout", "WALLPROF_CONVERT_TIMEOUT", UINT, NULL },
	{ "--converter", "WALLPROF_CONVERTER", PATH, NULL },
	{ "--chunk-seconds", "WALLPROF_CHUNK_SECONDS", UINT, NULL },
	{ "--sentry-dsn", "WALLPROF_SENTRY_DSN", TEXT, NULL },
	{ "--sentry-environment", "WALLPROF_SENTRY_ENVIRONMENT", TEXT, NULL },
	{ "--sentry-release", "WALLPROF_SENTRY_RELEASE", TEXT, NULL },
	{ "--pyroscope", "WALLPROF_PYROSCOPE_URL", TEXT, NULL },
	{ "--pyroscope-app", "WALLPROF_PYROSCOPE_APP", TEXT, NULL },
	{ "--pyroscope-labels", "WALLPROF_PYROSCOPE_LABELS", TEXT, NULL },
	{ "--spool", "WALLPROF_SPOOL_DIR", PATH, NULL },
	{ "--upload-timeout", "WALLPROF_UPLOAD_TIMEOUT", UINT, NULL },
	{ "--no-send-args", "WALLPROF_SEND_ARGS", FLAG, "0" },
	{ "--lib", NULL, LIB, NULL },
	{ "--no-follow-children", "WALLPROF_FOLLOW_CHILDREN", FLAG, "0" },
	{ "--debuginfod", "WALLPROF_DEBUGINFOD", FLAG, "1" },
	{ "--debug-cache", "WALLPROF_DEBUG_CACHE", PATH, NULL },
	{ "--no-debug-cache", "WALLPROF_DEBUG_CACHE", FLAG, "off" },
	{ "-q", "WALLPROF_LOG", FLAG, "quiet" },
	{ "--quiet", "WALLPROF_LOG", FLAG, "quiet" },
	{ "--debug", "WALLPROF_LOG", FLAG, "debug" },
};
#define NR_OPTIONS (sizeof(options) / sizeof(*options))

static int usage_error(const char *fmt, const char *a, const char *b)
{
	fprintf(stderr, "wallprof: ");
	fprintf(stderr, fmt, a, b);
	fprintf(stderr, "\nusage: wallprof record [options] [--] PROGRAM [ARGS...]  "
			"(wallprof record --help)\n");
	return EXIT_USAGE;
}

/* An absolute version of `path` (cwd joined, nothing normalized:
 * "a/../b" keeps its meaning); malloc'd. */
static char *absolute(const char *path)
{
	char cwd[PATH_MAX], *out;

	if (path[0] == '/' || !getcwd(cwd, sizeof(cwd)))
		return strdup(path);
	out = malloc(strlen(cwd) + strlen(path) + 2);
	if (out)
		sprintf(out, "%s%s%s", cwd, strcmp(cwd, "/") ? "/" : "", path);
	return out;
}

/* ---- the library ---------------------------------------------------- */

static int is_file(const char *p)
{
	struct stat st;

	return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* libwallprof.so beside this program (build/), else ../lib from it (an
 * install: PREFIX/bin/wallprof, PREFIX/lib/libwallprof.so). */
static char *default_lib(void)
{
	char *self = realpath("/proc/self/exe", NULL), *slash, *a, *b;

	if (!self || !(slash = strrchr(self, '/'))) {
		free(self);
		return strdup("libwallprof.so");
	}
	*slash = 0;
	a = malloc(strlen(self) + 32);
	b = malloc(strlen(self) + 32);
	if (a && b) {
		sprintf(a, "%s/libwallprof.so", self);
		sprintf(b, "%s/../lib/libwallprof.so", self);
		if (!is_file(a) && is_file(b)) {
			char *r = realpath(b, NULL);

			free(a);
			a = r ? r : b;
			if (r)
				free(b);
			b = NULL;
		}
	}
	free(self);
	free(b);
	return a;
}

/* ---- what the dynamic loader will do with the program ----------------- */

struct elf_info {
	int cls;       /* 32 or 64 */
	int machine;
	char interp[256]; /* "" when none */
};

static uint64_t rd(const unsigned char *p, int n, int le)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[le ? i : n - 1 - i] << (8 * i);
	return v;
}

/* Returns 0 with `e` filled for an ELF file, -1 otherwise. */
static int read_elf(const char *path, struct elf_info *e)
{
	unsigned char h[64], ph[56];
	int fd = open(path, O_RDONLY | O_CLOEXEC), le, is64, rc = -1;
	uint64_t phoff, phnum, phentsize, shoff;

	memset(e, 0, sizeof(*e));
	if (fd < 0)
		return -1;
	if (pread(fd, h, 64, 0) < 52 || memcmp(h, ELFMAG, SELFMAG) || (h[4] != 1 && h[4] != 2) ||
	    (h[5] != 1 && h[5] != 2))
		goto out;
	le = h[5] == 1;
	is64 = h[4] == 2;
	e->cls = is64 ? 64 : 32;
	e->machine = (int)rd(h + 18, 2, le);
	phoff = is64 ? rd(h + 32, 8, le) : rd(h + 28, 4, le);
	shoff = is64 ? rd(h + 40, 8, le) : rd(h + 32, 4, le);
	phentsize = rd(h + (is64 ? 54 : 42), 2, le);
	phnum = rd(h + (is64 ? 56 : 44), 2, le);
	if (phnum == 0xffff && shoff) { /* PN_XNUM: the count is in section 0's sh_info */
		unsigned char b[4];

		if (pread(fd, b, 4, (off_t)shoff + (is64 ? 44 : 28)) != 4)
			goto out;
		phnum = rd(b, 4, le);
	}
	if (phentsize < (is64 ? 56u : 32u) || phnum > 65536)
		goto out;
	for (uint64_t k = 0; k < phnum; k++) {
		uint64_t off, filesz;

		if (pread(fd, ph, is64 ? 56 : 32, (off_t)(phoff + k * phentsize)) !=
		    (is64 ? 56 : 32))
			goto out;
		if (rd(ph, 4, le) != PT_INTERP)
			continue;
		off = is64 ? rd(ph + 8, 8, le) : rd(ph + 4, 4, le);
		filesz = is64 ? rd(ph + 32, 8, le) : rd(ph + 16, 4, le);
		if (filesz > 4096)
			goto out;
		if (filesz >= sizeof(e->interp))
			filesz = sizeof(e->interp) - 1;
		if (pread(fd, e->interp, filesz, (off_t)off) != (ssize_t)filesz)
			goto out;
		e->interp[filesz] = 0;
		if (!e->interp[0])
			strcpy(e->interp, "?");
		break;
	}
	rc = 0;
out:
	close(fd);
	return rc;
}

/* The interpreter a "#!" script names, into `out`; -1 if not a script. */
static int read_shebang(const char *path, char *out, size_t len)
{
	char head[257], *p, *end;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, head, 256) : -1;

	if (fd >= 0)
		close(fd);
	if (n < 2 || head[0] != '#' || head[1] != '!')
		return -1;
	head[n] = 0;
	for (p = head + 2; *p == ' ' || *p == '\t'; p++)
		;
	for (end = p; *end && !strchr(" \t\r\n", *end); end++)
		;
	if (end == p || (size_t)(end - p) >= len)
		return -1;
	memcpy(out, p, (size_t)(end - p));
	out[end - p] = 0;
	return 0;
}

/* Why the loader runs `path` in secure mode (ignoring LD_PRELOAD), or NULL. */
static const char *secure_mode_reason(const char *path)
{
	struct stat st;
	struct statvfs vfs;
	char status[4096];
	int fd;

	if (stat(path, &st) < 0)
		return NULL;
	if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOSUID))
		return NULL;
	fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, status, sizeof(status) - 1);

		close(fd);
		status[n > 0 ? n : 0] = 0;
		if (strstr(status, "\nNoNewPrivs:\t1"))
			return NULL;
	}
	/* AT_SECURE when the effective ids end up differing from the real
	 * ones: a set-user-ID file owned by the caller changes nothing. */
	if ((st.st_mode & S_ISUID) && st.st_uid != getuid())
		return "is setuid";
	if ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) && st.st_gid != getgid())
		return "is setgid";
	if (geteuid() != 0 && getxattr(path, "security.capability", NULL, 0) > 0)
		return "has file capabilities";
	return NULL;
}

/* Why LD_PRELOAD will not reach `path`: a phrase into `phrase`, the
 * interpreter it is about into `interp` ("" for the program itself), and
 * whether LD_PRELOAD keeps our library. Returns 0 when there is none. */
static int loader_problem(const char *path, const struct elf_info *lib, int depth, char *phrase,
			  size_t plen, char *interp, size_t ilen, int *keep)
{
	struct elf_info e;
	const char *why, *base;

	if (read_elf(path, &e) < 0) {
		char sh[256], *abs;
		int r;

		/* The kernel ignores setuid bits on scripts: what matters is the
		 * interpreter (Linux follows up to 4 levels of "#!"). */
		if (depth >= 4 || read_shebang(path, sh, sizeof(sh)) < 0)
			return 0;
		abs = absolute(sh);
		if (!abs)
			return 0;
		r = loader_problem(abs, lib, depth + 1, phrase, plen, interp, ilen, keep);
		if (r && !interp[0])
			snprintf(interp, ilen, "%s", abs);
		free(abs);
		return r;
	}
	*keep = 1;
	if ((why = secure_mode_reason(path))) {
		snprintf(phrase, plen, "%s; the dynamic loader ignores LD_PRELOAD for it", why);
		return 1;
	}
	if (!e.interp[0]) {
		snprintf(phrase, plen, "is statically linked; LD_PRELOAD cannot profile it");
		return 1;
	}
	base = strrchr(e.interp, '/') ? strrchr(e.interp, '/') + 1 : e.interp;
	if (strstr(base, "musl")) {
		/* musl's loader stops the program on a preloaded glibc library */
		snprintf(phrase, plen, "uses the musl dynamic loader %s; libwallprof needs glibc",
			 e.interp);
		*keep = 0;
		return 1;
	}
	if (lib && lib->cls && (e.cls != lib->cls || e.machine != lib->machine)) {
		snprintf(phrase, plen,
			 "is a %d-bit program for ELF machine %d and the library is %d-bit for "
			 "machine %d; LD_PRELOAD cannot profile it",
			 e.cls, e.machine, lib->cls, lib->machine);
		return 1;
	}
	return 0;
}

/* ---- finding and running the program ------------------------------------ */

/* The program's path as execvp finds it (malloc'd), or NULL with `*status`
 * and a message said. */
static char *find_program(const char *name, int *status)
{
	struct stat st;
	const char *path = getenv("PATH"), *p;
	char *denied = NULL;

	if (strchr(name, '/')) {
		if (stat(name, &st) < 0) {
			*status = errno == ENOENT || errno == ENOTDIR ? EXIT_NOT_FOUND
								      : EXIT_CANNOT_EXEC;
			wp_cli_fail(0, "%s: %s", name,
				    *status == EXIT_NOT_FOUND ? "not found" : strerror(errno));
			return NULL;
		}
		*status = EXIT_CANNOT_EXEC;
		if (S_ISDIR(st.st_mode)) {
			wp_cli_fail(0, "%s: is a directory", name);
			return NULL;
		}
		if (access(name, X_OK) < 0 || !S_ISREG(st.st_mode)) {
			wp_cli_fail(0, "%s: permission denied", name);
			return NULL;
		}
		return strdup(name);
	}
	*status = EXIT_NOT_FOUND;
	if (!*name) {
		wp_cli_fail(0, "'': not found");
		return NULL;
	}
	for (p = path ? path : DEFAULT_PATH;; p++) {
		const char *colon = strchr(p, ':');
		size_t n = colon ? (size_t)(colon - p) : strlen(p);
		char *cand = malloc(n + strlen(name) + 3);

		if (!cand)
			break;
		if (n)
			sprintf(cand, "%.*s/%s", (int)n, p, name);
		else
			sprintf(cand, "./%s", name);
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0) {
			free(denied);
			return cand;
		}
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && !denied)
			denied = cand;
		else
			free(cand);
		if (!colon)
			break;
		p = colon;
	}
	if (denied) {
		*status = EXIT_CANNOT_EXEC;
		wp_cli_fail(0, "%s: permission denied", denied);
		free(denied);
		return NULL;
	}
	wp_cli_fail(0, "%s: not found", name);
	return NULL;
}

/* Our library first, then the caller's entries (colon or space separated)
 * without ours; `skip_lib`: without ours at all. malloc'd. */
static char *preload_value(const char *lib, const char *existing, int skip_lib)
{
	char *real = realpath(lib, NULL), *copy = strdup(existing ? existing : ""), *tok, *save;
	char *out = malloc(strlen(lib) + (existing ? strlen(existing) : 0) + 2);

	if (!copy || !out) {
		free(real);
		free(copy);
		free(out);
		return NULL;
	}
	strcpy(out, skip_lib ? "" : lib);
	for (tok = strtok_r(copy, ": \t\n", &save); tok; tok = strtok_r(NULL, ": \t\n", &save)) {
		char *r = tok[0] == '/' ? realpath(tok, NULL) : NULL;
		int ours = !strcmp(tok, lib) || (r && real && !strcmp(r, real));

		free(r);
		if (ours)
			continue;
		if (*out)
			strcat(out, ":");
		strcat(out, tok);
	}
	free(real);
	free(copy);
	return out;
}

int wp_cmd_record(int argc, char **argv)
{
	const char *value[NR_OPTIONS] = { 0 };
	char *lib = NULL, *path, *pre, phrase[512] = "", interp[512] = "";
	const char *lib_origin = NULL, *log;
	struct elf_info lib_elf;
	int i, k, status, keep = 1, quiet;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;
		size_t n;

		if (!strcmp(a, "--")) {
			i++;
			break;
		}
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--version")) {
			printf("wallprof %s\n", WP_VERSION);
			return 0;
		}
		if (a[0] != '-' || !strcmp(a, "-"))
			break;
		for (k = 0; k < (int)NR_OPTIONS; k++) {
			n = strlen(options[k].opt);
			if (!strcmp(a, options[k].opt))
				break;
			if (!strncmp(a, options[k].opt, n) && a[1] == '-' && a[n] == '=') {
				v = a + n + 1;
				break;
			}
			if (n == 2 && options[k].kind != FLAG && !strncmp(a, options[k].opt, 2) &&
			    a[1] != '-' && a[2]) {
				v = a + 2; /* -oPATH */
				break;
			}
		}
		if (k == (int)NR_OPTIONS)
			return usage_error("unknown option %s%s", a, "");
		if (options[k].kind == FLAG) {
			if (v)
				return usage_error("option %s takes no value%s", options[k].opt,
						   "");
			value[k] = options[k].value;
			continue;
		}
		if (!v) {
			if (i + 1 >= argc)
				return usage_error("option %s needs a value%s", options[k].opt, "");
			v = argv[++i];
		}
		if (options[k].kind == UINT && (!*v || strspn(v, "0123456789") != strlen(v)))
			return usage_error("%s wants a whole number, not '%s'", options[k].opt, v);
		if ((options[k].kind == PATH || options[k].kind == LIB) && !*v)
			return usage_error("%s wants a non-empty path%s", options[k].opt, "");
		if (options[k].kind == TEXT && !*v)
			return usage_error("%s wants a value%s", options[k].opt, "");
		value[k] = v;
	}
	if (i >= argc)
		return usage_error("no program given%s%s", "", "");

	/* The library. */
	for (k = 0; k < (int)NR_OPTIONS; k++)
		if (options[k].kind == LIB && value[k]) {
			lib = absolute(value[k]);
			lib_origin = "--lib";
		}
	if (!lib && getenv("WALLPROF_LIB") && *getenv("WALLPROF_LIB")) {
		lib = absolute(getenv("WALLPROF_LIB"));
		lib_origin = "WALLPROF_LIB";
	}
	if (!lib)
		lib = default_lib();
	if (!lib)
		return wp_cli_fail(EXIT_USAGE, "out of memory");
	if (!is_file(lib)) {
		if (lib_origin)
			wp_cli_fail(0, "library %s not found given by %s", lib, lib_origin);
		else
			wp_cli_fail(0,
				    "library %s not found (build it with make, or use --lib PATH "
				    "or WALLPROF_LIB)",
				    lib);
		return EXIT_USAGE;
	}
	if (access(lib, R_OK) < 0)
		return wp_cli_fail(EXIT_USAGE, "library %s is not readable", lib);
	if (strpbrk(lib, ": \t\n\r\v\f"))
		return wp_cli_fail(
			EXIT_USAGE,
			"library path '%s' contains ':' or white space, which LD_PRELOAD "
			"cannot hold",
			lib);

	/* The settings, over the caller's variables. */
	for (k = 0; k < (int)NR_OPTIONS; k++) {
		char *abs = NULL;

		if (!value[k] || !options[k].var)
			continue;
		if (options[k].kind == PATH && !(abs = absolute(value[k])))
			return wp_cli_fail(EXIT_USAGE, "out of memory");
		setenv(options[k].var, abs ? abs : value[k], 1);
		free(abs);
	}
	log = getenv("WALLPROF_LOG");
	quiet = log && (!strcasecmp(log, "quiet") || !strcasecmp(log, "off") || !strcmp(log, "0"));

	path = find_program(argv[i], &status);
	if (!path)
		return status;
	if (read_elf(lib, &lib_elf) < 0)
		memset(&lib_elf, 0, sizeof(lib_elf));
	if (loader_problem(path, &lib_elf, 0, phrase, sizeof(phrase), interp, sizeof(interp),
			   &keep) &&
	    !quiet) {
		if (!interp[0])
			wp_cli_fail(0, "%s %s (running it unprofiled)", argv[i], phrase);
		else
			wp_cli_fail(0, "%s runs under %s, which %s (running it unprofiled%s)",
				    argv[i], interp, phrase,
				    keep ? "; programs it starts inherit LD_PRELOAD" : "");
	}
	pre = preload_value(lib, getenv("LD_PRELOAD"), !keep);
	if (!pre)
		return wp_cli_fail(EXIT_USAGE, "out of memory");
	if (*pre)
		setenv("LD_PRELOAD", pre, 1);
	else
		unsetenv("LD_PRELOAD");
	fflush(stdout);
	fflush(stderr);
	execve(path, argv + i, environ);
	if (errno == ENOEXEC) {
		/* No "#!" and not a binary: what execvp does, run it with sh. */
		char **av = calloc((size_t)(argc - i) + 2, sizeof(char *));

		if (av) {
			av[0] = "/bin/sh";
			av[1] = path;
			memcpy(av + 2, argv + i + 1, (size_t)(argc - i - 1) * sizeof(char *));
			execve("/bin/sh", av, environ);
		}
	}
	if (errno == ENOENT)
		return wp_cli_fail(EXIT_NOT_FOUND,
				   "%s: cannot execute: required file not found (missing "
				   "interpreter or loader)",
				   argv[i]);
	return wp_cli_fail(EXIT_CANNOT_EXEC, "%s: cannot execute: %s", argv[i], strerror(errno));
}
