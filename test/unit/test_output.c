/* test_output: unit tests for output/: debug ids, path templates, atomic
 * writes (incl. planted symlinks and injected write/allocation failures) and
 * the Sentry v1 JSON of a synthetic profile, parsed back with jansson.
 * Usage: test_output [DIR]  (keeps the written profiles in DIR) */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../output/output.h"

#include "check.h"

static char tmpdir[1024];
static const char *keepdir;

static void pathf(char *out, const char *name)
{
	snprintf(out, PATH_MAX, "%s/%s", tmpdir, name);
}

/* Entries of tmpdir starting with ".": leftover temporaries. */
static int nr_hidden(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			n++;
	closedir(d);
	return n;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	if (buf)
		buf[n] = '\0';
	if (len)
		*len = (size_t)n;
	fclose(f);
	return buf;
}

static int matches(const char *s, const char *re)
{
	regex_t r;
	int ok;

	if (!s || regcomp(&r, re, REG_EXTENDED | REG_NOSUB))
		return 0;
	ok = regexec(&r, s, 0, NULL, 0) == 0;
	regfree(&r);
	return ok;
}

static const char *jget_str(json_t *o, const char *k)
{
	return json_string_value(json_object_get(o, k));
}

static int streq(const char *a, const char *b)
{
	return a && b && !strcmp(a, b);
}

/* A decimal-string member as a number, or ULLONG_MAX when absent. */
static unsigned long long dec(json_t *o, const char *k)
{
	const char *s = jget_str(o, k);

	return s ? strtoull(s, NULL, 10) : ULLONG_MAX;
}

/* ---- debug ids and path templates ---- */

static void hex2bin(const char *hex, uint8_t *out, size_t *len)
{
	size_t n = strlen(hex) / 2;

	for (size_t i = 0; i < n; i++)
		sscanf(hex + 2 * i, "%2hhx", &out[i]);
	*len = n;
}

static void test_debug_id(void)
{
	uint8_t b[WP_BUILD_ID_MAX];
	char id[37];
	size_t n;

	hex2bin("1c304742f114215453a8a777f6cdb3a2b8505e11", b, &n);
	REQ(wp_out_debug_id(b, n, 1, id) == 0);
	REQ(strcmp(id, "4247301c-14f1-5421-53a8-a777f6cdb3a2") == 0);
	report("debug_id: 1c304742... little-endian");

	hex2bin("b4c24a6cc995c17fb18a65184a65863cfc01c673", b, &n);
	REQ(wp_out_debug_id(b, n, 1, id) == 0);
	REQ(strcmp(id, "6c4ac2b4-95c9-7fc1-b18a-65184a65863c") == 0);
	report("debug_id: b4c24a6c... little-endian");

	hex2bin("0102030405060708", b, &n);
	REQ(wp_out_debug_id(b, n, 1, id) == 0);
	REQ(strcmp(id, "04030201-0605-0807-0000-000000000000") == 0);
	hex2bin("1c304742f114215453a8a777f6cdb3a2b8505e11", b, &n);
	REQ(wp_out_debug_id(b, n, 0, id) == 0);
	REQ(strcmp(id, "1c304742-f114-2154-53a8-a777f6cdb3a2") == 0);
	REQ(wp_out_debug_id(b, 0, 1, id) == -1);
	report("debug_id: short build-id zero-padded, big-endian unswapped, empty rejected");
}

static void test_expand_path(void)
{
	char out[64];

	REQ(wp_out_expand_path("wallprof.%p.json", 42, 0, out, sizeof(out)) == 0);
	REQ(strcmp(out, "wallprof.42.json") == 0);
	REQ(wp_out_expand_path("wallprof.%p.json", 42, 3, out, sizeof(out)) == 0);
	REQ(strcmp(out, "wallprof.42.3.json") == 0);
	REQ(wp_out_expand_path("out/prof", 7, 2, out, sizeof(out)) == 0);
	REQ(strcmp(out, "out/prof.2") == 0);
	REQ(wp_out_expand_path("a.%n.%p.json", 7, 2, out, sizeof(out)) == 0);
	REQ(strcmp(out, "a.2.7.json") == 0);
	REQ(wp_out_expand_path("100%%-%p%x.json", 9, 0, out, sizeof(out)) == 0);
	REQ(strcmp(out, "100%-9%x.json") == 0);
	REQ(wp_out_expand_path(".json", 1, 5, out, sizeof(out)) == 0);
	REQ(strcmp(out, ".5.json") == 0);
	report("expand_path: %p %n %% and snapshot suffixes");

	/* "wallprof.42.json" is 16 chars: fits in 17 bytes, not in 16. */
	REQ(wp_out_expand_path("wallprof.%p.json", 42, 0, out, 17) == 0);
	REQ(wp_out_expand_path("wallprof.%p.json", 42, 0, out, 16) == -1 && out[0] == '\0');
	/* The snapshot suffix must fit too: "wallprof.42.3.json" needs 19. */
	REQ(wp_out_expand_path("wallprof.%p.json", 42, 3, out, 19) == 0);
	REQ(wp_out_expand_path("wallprof.%p.json", 42, 3, out, 18) == -1);
	REQ(wp_out_expand_path("p%p", 4000000000u, 0, out, 8) == -1);
	REQ(wp_out_expand_path("x", 1, 0, out, 0) == -1);
	report("expand_path: overflow returns -1");
}

/* ---- system call names ---- */

static void test_syscall_names(void)
{
	REQ(streq(wp_out_syscall_name(0), "read"));
	REQ(streq(wp_out_syscall_name(7), "poll"));
	REQ(streq(wp_out_syscall_name(202), "futex"));
	REQ(streq(wp_out_syscall_name(219), "restart_syscall"));
	REQ(streq(wp_out_syscall_name(230), "clock_nanosleep"));
	REQ(streq(wp_out_syscall_name(232), "epoll_wait"));
	REQ(streq(wp_out_syscall_name(281), "epoll_pwait"));
	REQ(streq(wp_out_syscall_name(435), "clone3"));
	report("syscall names: known x86-64 numbers");

	REQ(wp_out_syscall_name(335) == NULL); /* the gap before 424 */
	REQ(wp_out_syscall_name(423) == NULL);
	REQ(wp_out_syscall_name(4096) == NULL);
	REQ(wp_out_syscall_name(0x40000000u) == NULL); /* x32 ABI bit */
	REQ(wp_out_syscall_name(UINT32_MAX) == NULL);
	report("syscall names: gaps and out-of-range numbers are NULL");
}

/* ---- atomic writes ---- */

/* A device or FIFO at the target is written through, never replaced: a
 * rename over /dev/null (as root: `wallprof convert X -o /dev/null`) made
 * it a regular file. */
static void test_atomic_device(void)
{
	char link_path[PATH_MAX], fifo[PATH_MAX], err[256];
	struct stat sb;
	int fd, flags;

	REQ(wp_out_write_atomic("/dev/null", "x", 1, err, sizeof(err)) == 0);
	REQ(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
	pathf(link_path, "devnull-link");
	unlink(link_path);
	REQ(symlink("/dev/null", link_path) == 0);
	REQ(wp_out_write_atomic(link_path, "x", 1, err, sizeof(err)) == 0);
	REQ(lstat(link_path, &sb) == 0 && S_ISLNK(sb.st_mode));
	REQ(stat("/dev/null", &sb) == 0 && S_ISCHR(sb.st_mode));
	unlink(link_path);
	/* a FIFO with a reader: the bytes go through it */
	pathf(fifo, "fifo");
	unlink(fifo);
	REQ(mkfifo(fifo, 0600) == 0);
	fd = open(fifo, O_RDONLY | O_NONBLOCK);
	REQ(fd >= 0);
	REQ(wp_out_write_atomic(fifo, "hello", 5, err, sizeof(err)) == 0);
	if (fd >= 0) {
		char buf[8] = "";

		flags = fcntl(fd, F_GETFL);
		fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
		REQ(read(fd, buf, sizeof(buf)) == 5 && !memcmp(buf, "hello", 5));
		close(fd);
	}
	REQ(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
	unlink(fifo);
	report("atomic: a device or FIFO is written through, never replaced");
}

static void test_atomic(void)
{
	char path[PATH_MAX], bad[PATH_MAX], victim[PATH_MAX], err[256];
	struct stat sb;
	mode_t um = umask(022);
	char *got;
	size_t len;

	umask(um);
	pathf(path, "plain.txt");
	REQ(wp_out_write_atomic(path, "hello\n", 6, err, sizeof(err)) == 0);
	got = slurp(path, &len);
	REQ(got && len == 6 && memcmp(got, "hello\n", 6) == 0);
	free(got);
	REQ(stat(path, &sb) == 0 && (sb.st_mode & 0777) == (0666 & ~um));
	REQ(wp_out_write_atomic(path, "again", 5, err, sizeof(err)) == 0);
	got = slurp(path, &len);
	REQ(got && len == 5 && memcmp(got, "again", 5) == 0);
	free(got);
	REQ(nr_hidden() == 0);
	report("atomic: writes, replaces, mode from umask, no temporary left");

	snprintf(bad, sizeof(bad), "%s/nodir/x.json", tmpdir);
	err[0] = '\0';
	REQ(wp_out_write_atomic(bad, "x", 1, err, sizeof(err)) == -1);
	REQ(strncmp(err, "cannot create ", 14) == 0 && strstr(err, bad));
	REQ(strstr(err, strerror(ENOENT)) && !strchr(err, '\n'));
	REQ(lstat(bad, &sb) < 0 && errno == ENOENT);
	report("atomic: missing directory fails cleanly with a one-line reason");

	pathf(path, "link.json");
	pathf(victim, "victim.json");
	REQ(symlink(victim, path) == 0);
	REQ(wp_out_write_atomic(path, "{}", 2, err, sizeof(err)) == 0);
	REQ(lstat(path, &sb) == 0 && S_ISREG(sb.st_mode));
	REQ(lstat(victim, &sb) < 0 && errno == ENOENT);
	got = slurp(path, &len);
	REQ(got && len == 2);
	free(got);
	REQ(nr_hidden() == 0);
	report("atomic: a dangling symlink at the target is replaced, not followed");
}

/* ---- the synthetic profile ---- */

#define MAIN_START 0x555555554000ull
#define LIBC_START 0x7ffff7c00000ull
#define NOBID_START 0x7fff00000000ull
#define T0 5123456789ull /* window start, CLOCK_MONOTONIC */

static const uint64_t pc_addr[] = {
	0x555555555130, /* 0 exact leaf in main */
	0x555555555200, /* 1 return address in main, shared by two stacks */
	0x555555555300, /* 2 main() */
	0x7ffff7c29d90, /* 3 libc start */
	0x7ffff7c91117, /* 4 exact leaf in libc (a blocking syscall) */
	0x1000,         /* 5 outside every module */
	0x7fff00001000, /* 6 in a module without build-id */
	0x7ffff7d00000, /* 7 only in a stack no sample uses */
};

static void build_profile(struct wp_profile *p)
{
	static const uint32_t frames[] = { 0,
					   1,
					   2,
					   3,
					   /**/ 4,
					   1,
					   2,
					   3,
					   /**/ /* idle */
					   5,
					   6,
					   2,
					   /**/ 7,
					   2 };
	static const uint32_t off[] = { 0, 4, 8, 8, 11, 13 };
	static const struct {
		uint32_t tid, stack, flags, sc;
	} s[] = {
		{ 100, 0, WP_SAMPLE_ON_CPU, 0 },
		{ 101, 1, WP_SAMPLE_SYSCALL, 202 },        /* futex */
		{ 100, 1, WP_SAMPLE_SYSCALL, 7 },          /* poll */
		{ 101, 2, WP_SAMPLE_SYSCALL, UINT32_MAX }, /* no such system call */
		{ 100, 0, WP_SAMPLE_ON_CPU | WP_SAMPLE_TRUNCATED, 0 },
		{ 101, 3, WP_SAMPLE_ON_CPU, 0 },
	};
	uint8_t bid[WP_BUILD_ID_MAX];
	size_t n;

	memset(p, 0, sizeof(*p));
	p->nr_pcs = sizeof(pc_addr) / sizeof(pc_addr[0]);
	p->pcs = calloc(p->nr_pcs, sizeof(*p->pcs));
	for (size_t i = 0; i < p->nr_pcs; i++)
		p->pcs[i].addr = pc_addr[i];
	p->pcs[0].flags = WP_PC_EXACT;
	p->pcs[4].flags = WP_PC_EXACT;

	p->nr_stacks = 5;
	p->stack_frames = malloc(sizeof(frames));
	memcpy(p->stack_frames, frames, sizeof(frames));
	p->stack_off = malloc(sizeof(off));
	memcpy(p->stack_off, off, sizeof(off));

	p->nr_samples = sizeof(s) / sizeof(s[0]);
	p->samples = calloc(p->nr_samples, sizeof(*p->samples));
	for (size_t i = 0; i < p->nr_samples; i++) {
		p->samples[i].t_ns = T0 + i * 10000000ull;
		p->samples[i].n = 1;
		p->samples[i].tid = s[i].tid;
		p->samples[i].stack_id = s[i].stack;
		p->samples[i].flags = s[i].flags;
		p->samples[i].syscall = s[i].sc;
	}

	/* One entry per tid, in no particular order (profile.h; the raw
	 * reader merges a reused tid's entries: test_window). */
	p->nr_threads = 4;
	p->threads = calloc(4, sizeof(*p->threads));
	p->threads[0].tid = 100;
	strcpy(p->threads[0].name, "victim");
	p->threads[0].nr_signals = 40;
	p->threads[0].nr_samples = 38;
	p->threads[1].tid = 103;
	strcpy(p->threads[1].name, "new-103");
	p->threads[1].nr_signals = 7;
	p->threads[1].nr_samples = 5;
	p->threads[2].tid = 101;
	memcpy(p->threads[2].name, "worker-with-a-lo", 16); /* full 16 bytes, no NUL */
	p->threads[2].nr_signals = 41;
	p->threads[2].nr_samples = 41;
	p->threads[3].tid = 102;
	strcpy(p->threads[3].name, "idle-no-samples");
	p->threads[3].nr_signals = 3;

	p->nr_modules = 4;
	p->modules = calloc(4, sizeof(*p->modules));
	p->modules[0].path = strdup("/usr/bin/victim");
	p->modules[0].start = MAIN_START;
	p->modules[0].end = MAIN_START + 0x10000;
	p->modules[0].flags = WP_MOD_MAIN;
	hex2bin("1c304742f114215453a8a777f6cdb3a2b8505e11", bid, &n);
	memcpy(p->modules[0].build_id, bid, n);
	p->modules[0].build_id_len = (uint32_t)n;
	p->modules[1].path = strdup("/usr/lib/x86_64-linux-gnu/libc.so.6");
	p->modules[1].start = LIBC_START;
	p->modules[1].end = LIBC_START + 0x200000;
	hex2bin("b4c24a6cc995c17fb18a65184a65863cfc01c673", bid, &n);
	memcpy(p->modules[1].build_id, bid, n);
	p->modules[1].build_id_len = (uint32_t)n;
	p->modules[2].path = strdup("/usr/lib/libunused.so");
	p->modules[2].start = 0x7ffff0000000;
	p->modules[2].end = 0x7ffff0001000;
	p->modules[3].path = strdup("/opt/lib/libnobid.so");
	p->modules[3].start = NOBID_START;
	p->modules[3].end = NOBID_START + 0x3000;

	p->start_ns = T0;
	p->end_ns = T0 + 60000000;
	p->realtime_offset_ns = 1795290000000000000ll - 5000000000ll; /* 2026-11-21T19:40:00 */
	p->pid = 100;
	p->main_tid = 100;
	p->cmdline = strdup("./victim --spin 3");
	p->hz = 100;
	p->ring_seconds = 30;
	p->max_depth = 128;
	p->snapshot = 2;
	p->counters.nr_ticks = 7;
	p->counters.nr_pending = 3;
	p->counters.nr_unwind_failed = 1;
	p->counters.nr_overwritten = 11;
	p->counters.nr_signals_blocked = 12;
	p->counters.nr_eintr_retried = 13;
	p->counters.nr_from_wrapper = 14;
	p->counters.nr_reused = 15;
	p->counters.nr_dl_guarded = 16;
}

/* Inline frames for pc 0 and a relative DWARF path for pc 1. */
static const struct wp_sym_frame fake_pc0[] = {
	{ "helper", "/src/spin.c", 10, 5, 1 },
	{ "spin", "/src/spin.c", 20, 0, 0 },
};
static const struct wp_sym_frame fake_pc1[] = { { "ns::caller(int)", "src/b.cc", 7, 0, 0 } };

static int fake_lookup(void *ctx, uint64_t addr, struct wp_sym_result *out)
{
	const struct wp_profile *p = ctx;

	memset(out, 0, sizeof(*out));
	out->module = -1;
	for (size_t i = 0; i < p->nr_modules; i++)
		if (addr >= p->modules[i].start && addr < p->modules[i].end) {
			out->module = (int)i;
			out->module_offset = addr - p->modules[i].start;
		}
	if (addr == pc_addr[0]) {
		out->frames = fake_pc0;
		out->nr_frames = 2;
	} else if (addr == pc_addr[1] - 1) {
		out->frames = fake_pc1;
		out->nr_frames = 1;
	}
	return 0;
}

static int is_dec_string(json_t *v)
{
	return json_is_string(v) && matches(json_string_value(v), "^(0|[1-9][0-9]*)$");
}

/* Frame index `j` of output stack `s`, or -1. */
static long stack_at(json_t *stacks, size_t s, size_t j)
{
	json_t *v = json_array_get(json_array_get(stacks, s), j);

	return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

static json_t *load(const char *path)
{
	json_error_t e;
	json_t *j = json_load_file(path, JSON_REJECT_DUPLICATES, &e);

	/* An empty object lets the remaining checks fail instead of crash. */
	if (!j) {
		if (!why[0])
			snprintf(why, sizeof(why), "%s:%d: %s", path, e.line, e.text);
		j = json_object();
	}
	return j;
}

static void test_sentry_nosym(const char *path)
{
	struct wp_profile p;
	struct wp_out_stats st = { 0 };
	struct wp_out_opts opts = { 0 };
	char err[256] = "";
	json_t *j, *prof, *samples, *stacks, *frames, *tm, *txn, *imgs, *v;
	struct stat sb;
	size_t i, k;

	build_profile(&p);
	REQ(wp_out_sentry_write(&p, NULL, &opts, path, &st, err, sizeof(err)) == 0);
	report("sentry: writes the synthetic profile without a symbolizer");
	j = load(path);
	prof = json_object_get(j, "profile");
	samples = json_object_get(prof, "samples");
	stacks = json_object_get(prof, "stacks");
	frames = json_object_get(prof, "frames");
	tm = json_object_get(prof, "thread_metadata");
	txn = json_object_get(j, "transaction");
	imgs = json_object_get(json_object_get(j, "debug_meta"), "images");

	REQ(json_is_object(j));
	REQ(streq(jget_str(j, "version"), "1"));
	REQ(matches(jget_str(j, "event_id"), "^[0-9a-f]{32}$"));
	REQ(streq(jget_str(j, "platform"), "native"));
	REQ(streq(jget_str(j, "timestamp"), "2026-11-21T19:40:00.123456Z"));
	REQ(matches(jget_str(json_object_get(j, "device"), "architecture"), "^.+$"));
	v = json_object_get(j, "os");
	REQ(streq(jget_str(v, "name"), "Linux"));
	REQ(jget_str(v, "version") && jget_str(v, "build_number"));
	v = json_object_get(j, "runtime");
	REQ(streq(jget_str(v, "name"), "glibc") && jget_str(v, "version"));
	v = json_object_get(j, "client_sdk");
	REQ(streq(jget_str(v, "name"), "libwallprof"));
	REQ(streq(jget_str(v, "version"), WP_VERSION));
	report("sentry: top-level keys and types");

	REQ(matches(jget_str(txn, "id"), "^[0-9a-f]{32}$"));
	REQ(matches(jget_str(txn, "trace_id"), "^[0-9a-f]{32}$"));
	REQ(matches(jget_str(txn, "segment_id"), "^[0-9a-f]{16}$"));
	REQ(!streq(jget_str(txn, "id"), jget_str(j, "event_id")));
	REQ(streq(jget_str(txn, "name"), "./victim --spin 3"));
	REQ(json_is_integer(json_object_get(txn, "active_thread_id")) &&
	    json_integer_value(json_object_get(txn, "active_thread_id")) == 100);
	REQ(streq(jget_str(txn, "relative_start_ns"), "0"));
	REQ(streq(jget_str(txn, "relative_end_ns"), "50000000"));
	report("sentry: transaction ids, name, active thread, relative end");

	REQ(json_array_size(samples) == 6);
	for (i = 0; i < json_array_size(samples); i++) {
		json_t *s = json_array_get(samples, i);
		json_t *sid = json_object_get(s, "stack_id");
		uint32_t fl = p.samples[i].flags;

		REQ(json_is_integer(sid) && json_integer_value(sid) >= 0 &&
		    (size_t)json_integer_value(sid) < json_array_size(stacks));
		REQ(is_dec_string(json_object_get(s, "thread_id")));
		REQ(is_dec_string(json_object_get(s, "elapsed_since_start_ns")));
		REQ(dec(s, "elapsed_since_start_ns") == i * 10000000ull);
		REQ(json_is_boolean(json_object_get(s, "on_cpu")));
		REQ(json_is_true(json_object_get(s, "on_cpu")) == !!(fl & WP_SAMPLE_ON_CPU));
		REQ(!!json_object_get(s, "syscall") == !!(fl & WP_SAMPLE_SYSCALL));
	}
	report("sentry: samples typed, sorted, on_cpu and syscall from flags");

	REQ(streq(jget_str(json_array_get(samples, 1), "syscall"), "futex"));
	REQ(streq(jget_str(json_array_get(samples, 2), "syscall"), "poll"));
	REQ(streq(jget_str(json_array_get(samples, 3), "syscall"), "syscall_4294967295"));
	REQ(json_is_false(json_object_get(json_array_get(samples, 1), "on_cpu")));
	report("sentry: syscall labels: names for known numbers, syscall_<nr> otherwise");

	/* The raw stack 4 has no sample: 4 stacks remain, the idle one empty. */
	REQ(json_array_size(stacks) == 4);
	REQ(json_array_size(frames) == 7);
	for (i = 0; i < json_array_size(stacks); i++)
		for (k = 0; k < json_array_size(json_array_get(stacks, i)); k++)
			REQ(stack_at(stacks, i, k) >= 0 &&
			    (size_t)stack_at(stacks, i, k) < json_array_size(frames));
	REQ(json_array_size(json_array_get(stacks, 2)) == 0);
	REQ(stack_at(stacks, 0, 1) == stack_at(stacks, 1, 1)); /* shared return address */
	REQ(stack_at(stacks, 0, 3) == stack_at(stacks, 1, 3));
	REQ(stack_at(stacks, 0, 0) != stack_at(stacks, 1, 0));
	report("sentry: stacks in range, unreferenced dropped, shared frames deduplicated");

	for (i = 0; i < json_array_size(frames); i++) {
		json_t *f = json_array_get(frames, i);
		const char *addr = jget_str(f, "instruction_addr");
		const char *mod = jget_str(f, "module");
		uint64_t a = addr ? strtoull(addr, NULL, 16) : 0;
		int in_main = a >= MAIN_START && a < MAIN_START + 0x10000;

		REQ(matches(addr, "^0x[0-9a-f]+$"));
		REQ(json_is_boolean(json_object_get(f, "in_app")));
		REQ(json_is_true(json_object_get(f, "in_app")) == in_main);
		REQ(!in_main || (mod && !strcmp(mod, "/usr/bin/victim")));
		REQ(!json_object_get(f, "function") && !json_object_get(f, "inlined"));
		REQ(!!mod == (a != 0x1000));
		REQ(!!json_object_get(f, "module_offset") == !!mod);
	}
	/* Leaf of stack 0 is the exact pc: its offset is not adjusted ... */
	v = json_array_get(frames, (size_t)stack_at(stacks, 0, 0));
	REQ(streq(jget_str(v, "instruction_addr"), "0x555555555130"));
	REQ(streq(jget_str(v, "module_offset"), "0x1130"));
	/* ... callers keep the raw return address, the offset is of the call. */
	v = json_array_get(frames, (size_t)stack_at(stacks, 0, 1));
	REQ(streq(jget_str(v, "instruction_addr"), "0x555555555200"));
	REQ(streq(jget_str(v, "module_offset"), "0x11ff"));
	report("sentry: frames: raw addresses, in_app for the main module, module offsets");

	REQ(json_object_size(tm) == 2);
	REQ(streq(jget_str(json_object_get(tm, "100"), "name"), "victim"));
	REQ(streq(jget_str(json_object_get(tm, "101"), "name"), "worker-with-a-lo"));
	for (i = 0; i < json_array_size(samples); i++)
		REQ(json_object_get(tm, jget_str(json_array_get(samples, i), "thread_id")));
	report("sentry: thread_metadata keyed by the sampled thread ids");

	REQ(json_array_size(imgs) == 3);
	for (i = 0; i < json_array_size(imgs); i++) {
		json_t *im = json_array_get(imgs, i);
		const char *file = jget_str(im, "code_file");

		REQ(streq(jget_str(im, "type"), "symbolic"));
		REQ(matches(jget_str(im, "image_addr"), "^0x[0-9a-f]+$"));
		REQ(json_is_integer(json_object_get(im, "image_size")));
		REQ(!json_object_get(im, "build_id"));
		REQ(file && strcmp(file, "/usr/lib/libunused.so"));
		if (file && !strcmp(file, "/usr/bin/victim")) {
			const char *did = jget_str(im, "debug_id"), *cid = jget_str(im, "code_id");

			REQ(streq(did, "4247301c-14f1-5421-53a8-a777f6cdb3a2"));
			REQ(streq(cid, "1c304742f114215453a8a777f6cdb3a2b8505e11"));
			REQ(streq(jget_str(im, "image_addr"), "0x555555554000"));
			REQ(json_integer_value(json_object_get(im, "image_size")) == 0x10000);
		}
		if (file && !strcmp(file, "/opt/lib/libnobid.so"))
			REQ(!json_object_get(im, "debug_id") && !json_object_get(im, "code_id"));
	}
	report("sentry: debug_meta images: symbolic, debug_id, only modules with frames");

	v = json_object_get(j, "wallprof");
	REQ(streq(jget_str(v, "version"), WP_VERSION));
	REQ(json_integer_value(json_object_get(v, "pid")) == 100);
	REQ(json_integer_value(json_object_get(v, "hz")) == 100);
	REQ(json_integer_value(json_object_get(v, "snapshot")) == 2);
	REQ(json_integer_value(json_object_get(v, "samples")) == 6);
	REQ(json_integer_value(json_object_get(v, "truncated_samples")) == 1);
	REQ(json_integer_value(json_object_get(v, "pending")) == 3);
	REQ(json_integer_value(json_object_get(v, "unwind_failed")) == 1);
	REQ(json_integer_value(json_object_get(v, "overwritten")) == 11);
	REQ(json_integer_value(json_object_get(v, "duration_ns")) == 60000000);
	REQ(json_is_integer(json_object_get(v, "threads_untracked")));
	REQ(json_integer_value(json_object_get(v, "signals_blocked")) == 12);
	REQ(json_integer_value(json_object_get(v, "eintr_retried")) == 13);
	REQ(json_integer_value(json_object_get(v, "from_wrapper")) == 14);
	REQ(json_integer_value(json_object_get(v, "reused")) == 15);
	REQ(json_integer_value(json_object_get(v, "dl_guarded")) == 16);
	REQ(!json_object_get(v, "nr_reused"));
	REQ(st.nr_samples == 6 && st.nr_threads == 2 && st.nr_frames == 7);
	REQ(stat(path, &sb) == 0 && (size_t)sb.st_size == st.bytes);
	REQ(st.duration_s > 0.049 && st.duration_s < 0.051);
	report("sentry: wallprof counters and writer stats");

	/* Every tracked thread, sampled in the window or not. */
	tm = json_object_get(v, "threads");
	REQ(json_is_object(tm) && json_object_size(tm) == 4);
	v = json_object_get(tm, "100");
	REQ(streq(jget_str(v, "name"), "victim"));
	REQ(json_integer_value(json_object_get(v, "signals")) == 40);
	REQ(json_integer_value(json_object_get(v, "samples")) == 38);
	v = json_object_get(tm, "101");
	REQ(streq(jget_str(v, "name"), "worker-with-a-lo"));
	REQ(json_integer_value(json_object_get(v, "signals")) == 41);
	REQ(json_integer_value(json_object_get(v, "samples")) == 41);
	v = json_object_get(tm, "102");
	REQ(streq(jget_str(v, "name"), "idle-no-samples"));
	REQ(json_integer_value(json_object_get(v, "signals")) == 3);
	REQ(json_is_integer(json_object_get(v, "samples")) &&
	    json_integer_value(json_object_get(v, "samples")) == 0);
	v = json_object_get(tm, "103");
	REQ(streq(jget_str(v, "name"), "new-103"));
	REQ(json_integer_value(json_object_get(v, "signals")) == 7);
	REQ(json_integer_value(json_object_get(v, "samples")) == 5);
	report("sentry: wallprof threads: every tracked thread, signals and samples");

	json_decref(j);
	wp_profile_free(&p);
}

static void test_sentry_inline(const char *path)
{
	struct wp_profile p;
	struct wp_out_stats st = { 0 };
	struct wp_out_opts opts = { .platform = "rust" };
	char err[256] = "";
	json_t *j, *stacks, *frames, *f0, *f1, *fc;

	build_profile(&p);
	REQ(wp_out_sentry_write_with(&p, fake_lookup, &p, &opts, path, &st, err, sizeof(err)) == 0);
	j = load(path);
	stacks = json_object_get(json_object_get(j, "profile"), "stacks");
	frames = json_object_get(json_object_get(j, "profile"), "frames");
	REQ(streq(jget_str(j, "platform"), "rust"));
	/* pc 0 expands to helper (inlined) + spin: 8 frames, stack 0 has 5. */
	REQ(json_array_size(frames) == 8 && st.nr_frames == 8);
	REQ(json_array_size(json_array_get(stacks, 0)) == 5);
	REQ(json_array_size(json_array_get(stacks, 1)) == 4);
	f0 = json_array_get(frames, (size_t)stack_at(stacks, 0, 0));
	f1 = json_array_get(frames, (size_t)stack_at(stacks, 0, 1));
	fc = json_array_get(frames, (size_t)stack_at(stacks, 0, 2));
	REQ(stack_at(stacks, 0, 2) == stack_at(stacks, 1, 1));
	REQ(streq(jget_str(f0, "function"), "helper"));
	REQ(json_is_true(json_object_get(f0, "inlined")));
	REQ(streq(jget_str(f0, "filename"), "spin.c"));
	REQ(streq(jget_str(f0, "abs_path"), "/src/spin.c"));
	REQ(json_integer_value(json_object_get(f0, "lineno")) == 10);
	REQ(json_integer_value(json_object_get(f0, "colno")) == 5);
	REQ(!json_object_get(f0, "module_offset"));
	REQ(streq(jget_str(f1, "function"), "spin"));
	REQ(!json_object_get(f1, "inlined") && !json_object_get(f1, "colno"));
	REQ(json_integer_value(json_object_get(f1, "lineno")) == 20);
	REQ(streq(jget_str(f0, "instruction_addr"), jget_str(f1, "instruction_addr")));
	REQ(json_is_true(json_object_get(f0, "in_app")));
	REQ(json_is_true(json_object_get(f1, "in_app")));
	REQ(streq(jget_str(fc, "function"), "ns::caller(int)"));
	REQ(streq(jget_str(fc, "filename"), "b.cc"));
	REQ(!json_object_get(fc, "abs_path"));
	report("sentry: inlined frames expand in place, innermost first, same address");
	json_decref(j);
	wp_profile_free(&p);
}

/* Edge cases: no samples; unsorted samples and a bad stack id; odd strings. */
static void test_sentry_edges(const char *path)
{
	struct wp_profile p;
	struct wp_out_stats st = { 0 };
	char err[256] = "";
	json_t *j, *samples;
	struct wp_sample tmp;

	memset(&p, 0, sizeof(p));
	p.pid = 55;
	REQ(wp_out_sentry_write(&p, NULL, NULL, path, &st, err, sizeof(err)) == 0);
	j = load(path);
	REQ(json_is_object(j) && st.nr_samples == 0);
	REQ(json_array_size(json_object_get(json_object_get(j, "profile"), "samples")) == 0);
	REQ(streq(jget_str(json_object_get(j, "transaction"), "name"), "process 55"));
	REQ(streq(jget_str(json_object_get(j, "transaction"), "relative_end_ns"), "0"));
	json_decref(j);
	report("sentry: an empty profile is still valid JSON");

	build_profile(&p);
	tmp = p.samples[0];
	p.samples[0] = p.samples[3];
	p.samples[3] = tmp;
	p.samples[5].stack_id = 99; /* corrupt: dropped */
	free(p.cmdline);
	p.cmdline = strdup("bad \xff\xfe utf8 \"quoted\"\n");
	strcpy(p.threads[0].name, "\xc3");
	REQ(wp_out_sentry_write(&p, NULL, NULL, path, &st, err, sizeof(err)) == 0);
	j = load(path);
	samples = json_object_get(json_object_get(j, "profile"), "samples");
	REQ(json_array_size(samples) == 5 && st.nr_samples == 5);
	for (size_t i = 1; i < json_array_size(samples); i++)
		REQ(dec(json_array_get(samples, i - 1), "elapsed_since_start_ns") <=
		    dec(json_array_get(samples, i), "elapsed_since_start_ns"));
	REQ(streq(jget_str(json_object_get(j, "transaction"), "name"), "bad ?? utf8 \"quoted\"\n"));
	json_decref(j);
	wp_profile_free(&p);
	report("sentry: unsorted samples sorted, bad stack ids dropped, invalid UTF-8 replaced");
}

/* Fault injection: every failing write or jansson allocation must give -1, a
 * reason, the old target untouched and no temporary left behind. */
static int alloc_budget = -1;

static void *failing_malloc(size_t n)
{
	if (alloc_budget == 0)
		return NULL;
	if (alloc_budget > 0)
		alloc_budget--;
	return malloc(n);
}

static void test_faults(const char *path)
{
	struct wp_profile p;
	char err[256], *got;
	int nfail = 0, n;

	build_profile(&p);
	REQ(wp_out_write_atomic(path, "old", 3, err, sizeof(err)) == 0);
	for (n = 1; n < 1000; n++) {
		err[0] = '\0';
		wp_out_fail_write_at = n;
		if (wp_out_sentry_write(&p, NULL, NULL, path, NULL, err, sizeof(err)) == 0)
			break;
		nfail++;
		REQ(strstr(err, "cannot write ") == err && strstr(err, strerror(ENOSPC)));
		got = slurp(path, NULL);
		REQ(got && !strcmp(got, "old"));
		free(got);
		REQ(nr_hidden() == 0);
	}
	wp_out_fail_write_at = 0;
	REQ(nfail >= 1 && n < 1000);
	report("faults: a failing write leaves the old file and no temporary");

	REQ(wp_out_write_atomic(path, "old", 3, err, sizeof(err)) == 0);
	json_set_alloc_funcs(failing_malloc, free);
	nfail = 0;
	for (n = 0; n < 100000; n++) {
		err[0] = '\0';
		alloc_budget = n;
		if (wp_out_sentry_write(&p, NULL, NULL, path, NULL, err, sizeof(err)) == 0)
			break;
		nfail++;
		REQ(strstr(err, "cannot write ") == err && strstr(err, strerror(ENOMEM)));
		got = slurp(path, NULL);
		REQ(got && !strcmp(got, "old"));
		free(got);
		REQ(nr_hidden() == 0);
	}
	alloc_budget = -1;
	json_set_alloc_funcs(malloc, free);
	REQ(nfail >= 1 && n < 100000);
	report("faults: a failing jansson allocation leaves the old file and no temporary");
	wp_profile_free(&p);
}

static void cleanup(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *e;
	char path[PATH_MAX];

	if (!d)
		return;
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			pathf(path, e->d_name);
			unlink(path);
		}
	closedir(d);
	rmdir(tmpdir);
}

int main(int argc, char **argv)
{
	char p1[PATH_MAX], p2[PATH_MAX], p3[PATH_MAX], p4[PATH_MAX];
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	setvbuf(stdout, NULL, _IOLBF, 0);
	keepdir = argc > 1 ? argv[1] : NULL;
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_output.XXXXXX", base);
	if (!mkdtemp(tmpdir)) {
		printf("FAIL mkdtemp %s: %s\n", tmpdir, strerror(errno));
		printf("output: 0 passed, 1 failed\n");
		return 1;
	}
	test_debug_id();
	test_expand_path();
	test_syscall_names();
	test_atomic();
	test_atomic_device();
	if (keepdir) {
		snprintf(p1, sizeof(p1), "%s/synthetic.json", keepdir);
		snprintf(p2, sizeof(p2), "%s/synthetic-inline.json", keepdir);
	} else {
		pathf(p1, "synthetic.json");
		pathf(p2, "synthetic-inline.json");
	}
	pathf(p3, "edge.json");
	pathf(p4, "fault.json");
	test_sentry_nosym(p1);
	test_sentry_inline(p2);
	test_sentry_edges(p3);
	test_faults(p4);
	cleanup();
	printf("output: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
