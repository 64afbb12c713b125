/* Unit test of the model (output/model.c, model_json.c) and the format
 * registry (formats.c): a profile symbolized against this very program
 * gives, through a model, the Sentry JSON wp_out_sentry_write gives; that
 * JSON read back into a model and written again is the same; malformed
 * profiles (truncated, garbage, foreign JSON, huge counts, wrong types) are
 * refused with one line, never a crash (run under ASan too). */
#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../output/formats.h"
#include "../../output/model.h"
#include "../../output/output.h"
#include "check.h"

static char tmpdir[1024];

static void pathf(char *out, const char *name)
{
	snprintf(out, PATH_MAX, "%s/%s", tmpdir, name);
}

__attribute__((noinline)) int wpt_model_leaf(int x)
{
	return x * 3 + 1;
}

__attribute__((noinline)) int wpt_model_caller(int x)
{
	return wpt_model_leaf(x) + 2;
}

static uint64_t main_start, main_end, main_bias;

static int phdr_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	main_bias = info->dlpi_addr;
	main_start = UINT64_MAX;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < main_start)
			main_start = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > main_end)
			main_end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
	return 1; /* the first object is the program */
}

/* A profile of this program: a leaf (exact PC), its caller and main
 * (return addresses), an address outside every module. */
static void build_profile(struct wp_profile *p)
{
	static const uint32_t frames[] = { 0, 1, 2, /**/ 3, 2, /**/ 1, 2 };
	static const uint32_t off[] = { 0, 3, 5, 7 };
	static const struct {
		uint32_t tid, stack, flags, sc;
	} s[] = {
		{ 100, 0, WP_SAMPLE_ON_CPU, 0 },
		{ 101, 1, WP_SAMPLE_SYSCALL, 202 },
		{ 100, 2, WP_SAMPLE_SYSCALL | WP_SAMPLE_PARTIAL, 7 },
		{ 101, 1, WP_SAMPLE_SYSCALL, 9999 },
		{ 100, 0, WP_SAMPLE_ON_CPU | WP_SAMPLE_TRUNCATED, 0 },
		{ 101, 2, WP_SAMPLE_ON_CPU, 0 },
	};
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	exe[n > 0 ? n : 0] = 0;
	memset(p, 0, sizeof(*p));
	p->nr_pcs = 4;
	p->pcs = calloc(4, sizeof(*p->pcs));
	p->pcs[0].addr = (uint64_t)(uintptr_t)wpt_model_leaf + 1;
	p->pcs[0].flags = WP_PC_EXACT;
	p->pcs[1].addr = (uint64_t)(uintptr_t)wpt_model_caller + 6;
	p->pcs[2].addr = (uint64_t)(uintptr_t)build_profile + 20;
	p->pcs[3].addr = 0x1000;
	p->nr_stacks = 3;
	p->stack_frames = malloc(sizeof(frames));
	memcpy(p->stack_frames, frames, sizeof(frames));
	p->stack_off = malloc(sizeof(off));
	memcpy(p->stack_off, off, sizeof(off));
	p->nr_samples = sizeof(s) / sizeof(s[0]);
	p->samples = calloc(p->nr_samples, sizeof(*p->samples));
	for (size_t i = 0; i < p->nr_samples; i++) {
		p->samples[i].t_ns = 5000000000ull + i * 10000000ull;
		p->samples[i].n = 1;
		p->samples[i].tid = s[i].tid;
		p->samples[i].stack_id = s[i].stack;
		p->samples[i].flags = s[i].flags;
		p->samples[i].syscall = s[i].sc;
	}
	p->nr_threads = 3;
	p->threads = calloc(3, sizeof(*p->threads));
	p->threads[0].tid = 100;
	strcpy(p->threads[0].name, "main");
	p->threads[0].nr_signals = 40;
	p->threads[0].nr_samples = 38;
	p->threads[1].tid = 101;
	memcpy(p->threads[1].name, "worker-with-a-lo", 16);
	p->threads[1].nr_signals = 41;
	p->threads[1].nr_samples = 41;
	p->threads[2].tid = 102;
	strcpy(p->threads[2].name, "idle");
	p->threads[2].nr_signals = 3;
	p->nr_modules = 1;
	p->modules = calloc(1, sizeof(*p->modules));
	p->modules[0].path = strdup(exe);
	p->modules[0].bias = main_bias;
	p->modules[0].start = main_start;
	p->modules[0].end = main_end;
	p->modules[0].flags = WP_MOD_MAIN;
	p->start_ns = 4990000000ull;
	p->end_ns = 5100000000ull;
	p->realtime_offset_ns = 1795290000000000000ll;
	p->pid = 100;
	p->main_tid = 100;
	p->cmdline = strdup("./test_model --spin");
	p->hz = 100;
	p->ring_seconds = 30;
	p->max_depth = 128;
	p->snapshot = 2;
	p->counters.nr_ticks = 7;
	p->counters.nr_pending = 3;
	p->counters.nr_overwritten = 11;
	p->counters.nr_from_proc = 5;
}

/* The JSON at `path` without what differs from run to run (random ids). */
static json_t *load_stable(const char *path)
{
	json_error_t e;
	json_t *j = json_load_file(path, 0, &e), *tx;

	if (!j)
		return NULL;
	json_object_del(j, "event_id");
	tx = json_object_get(j, "transaction");
	json_object_del(tx, "id");
	json_object_del(tx, "trace_id");
	json_object_del(tx, "segment_id");
	return j;
}

static int same_json(const char *a, const char *b)
{
	json_t *x = load_stable(a), *y = load_stable(b);
	int same = x && y && json_equal(x, y);

	if (!same && x && y) {
		char *sx = json_dumps(json_object_get(x, "profile"), JSON_SORT_KEYS | JSON_COMPACT);
		char *sy = json_dumps(json_object_get(y, "profile"), JSON_SORT_KEYS | JSON_COMPACT);

		printf("  differ:\n  %.2000s\n  %.2000s\n", sx, sy);
		free(sx);
		free(sy);
	}
	json_decref(x);
	json_decref(y);
	return same;
}

static void test_registry(void)
{
	const struct wp_format *const *all = wp_format_all();
	static const char *const names[] = { "sentry", "pprof", "folded", "speedscope", "html" };
	static const char *const suffixes[] = { ".json", ".pb.gz", ".folded", ".speedscope.json",
						".html" };
	char *s;
	size_t i;

	for (i = 0; all[i]; i++) {
		REQ(i < 5 && !strcmp(all[i]->name, names[i]) &&
		    !strcmp(all[i]->suffix, suffixes[i]));
		REQ(wp_format_find(names[i]) == all[i]);
	}
	REQ(i == 5);
	REQ(!wp_format_find("json") && !wp_format_find("") && !wp_format_find(NULL));
	s = wp_format_path(wp_format_find("pprof"), "/tmp/wallprof.12.json");
	REQ(s && !strcmp(s, "/tmp/wallprof.12.pb.gz"));
	free(s);
	s = wp_format_path(wp_format_find("html"), "out");
	REQ(s && !strcmp(s, "out.html"));
	free(s);
	s = wp_format_path(wp_format_find("sentry"), "a.json");
	REQ(s && !strcmp(s, "a.json"));
	free(s);
	report("format_registry");
}

static void test_roundtrip(void)
{
	char a[PATH_MAX], b[PATH_MAX], c[PATH_MAX], err[512];
	struct wp_profile p, q;
	struct wp_model m, m2;
	struct wp_out_stats st1, st2;
	struct wp_sym *sym;
	const struct wp_format *sentry = wp_format_find("sentry");
	const struct wp_thread *t;
	int rc;

	pathf(a, "direct.json");
	pathf(b, "model.json");
	pathf(c, "again.json");
	build_profile(&p);
	build_profile(&q);
	sym = wp_sym_open(p.modules, p.nr_modules);
	REQ(sym);
	memset(&st1, 0, sizeof(st1));
	REQ(wp_out_sentry_write(&p, sym, NULL, a, &st1, err, sizeof(err)) == 0);
	rc = wp_model_build(&m, &q, sym, NULL, err, sizeof(err));
	wp_sym_close(sym);
	REQ(rc == 0 && q.nr_pcs == 0 && m.p.nr_pcs == 4);
	/* Symbols: the leaf and the caller by name, outside every module an address. */
	if (rc == 0) {
		char buf[64];
		const struct wp_model_loc *l0 = &m.locs[0], *l3 = &m.locs[3];

		REQ(l0->module == 0 && l0->nr >= 1 && m.frames[l0->first + l0->nr - 1].function &&
		    !strcmp(m.frames[l0->first + l0->nr - 1].function, "wpt_model_leaf"));
		REQ(l0->module_offset == p.pcs[0].addr - main_start);
		REQ(m.locs[1].module_offset == p.pcs[1].addr - 1 - main_start);
		REQ(l3->module == -1 && l3->nr == 1 && !m.frames[l3->first].function);
		REQ(!strcmp(wp_model_frame_label(&m, l3, &m.frames[l3->first], buf, sizeof(buf)),
			    "0xfff"));
		REQ(wp_model_period_ns(&m) == 10000000);
		t = wp_model_thread(&m, 101);
		REQ(t && t->nr_signals == 41);
		REQ(!wp_model_thread(&m, 99));
		memset(&st2, 0, sizeof(st2));
		REQ(wp_format_write(sentry, &m, NULL, b, &st2, err, sizeof(err)) == 0);
		REQ(st2.nr_samples == st1.nr_samples && st2.nr_frames == st1.nr_frames &&
		    st2.bytes > 0);
		REQ(same_json(a, b));
	}
	wp_model_free(&m);
	wp_model_free(&m);
	/* Read back: the same frames, stacks, samples, threads, counters. */
	rc = wp_model_read(b, NULL, &m2, err, sizeof(err));
	REQ(rc == 0);
	if (rc == 0) {
		REQ(m2.p.nr_pcs == 4 && m2.p.nr_samples == 6 && m2.p.nr_stacks == 3);
		REQ(m2.p.hz == 100 && m2.p.snapshot == 2 && m2.p.counters.nr_from_proc == 5);
		REQ(m2.p.samples[1].flags == WP_SAMPLE_SYSCALL && m2.p.samples[1].syscall == 202);
		/* syscall_9999: no such call, its number kept */
		REQ(m2.p.samples[3].flags == WP_SAMPLE_SYSCALL && m2.p.samples[3].syscall == 9999);
		t = wp_model_thread(&m2, 102);
		REQ(t && !strcmp(t->name, "idle") && t->nr_signals == 3);
		/* the interrupted PC stays exact: looked up as is, not at - 1 */
		REQ((m2.p.pcs[0].flags & WP_PC_EXACT) && !(m2.p.pcs[1].flags & WP_PC_EXACT));
		REQ(m2.locs[0].module_offset == m2.p.pcs[0].addr - main_start);
		REQ(m2.locs[1].module_offset == m2.p.pcs[1].addr - 1 - main_start);
		REQ(wp_format_write(sentry, &m2, NULL, c, NULL, err, sizeof(err)) == 0);
		REQ(same_json(b, c));
	}
	wp_model_free(&m2);
	wp_profile_free(&p);
	report("model_roundtrip");
}

/* `text` as a file; wp_model_read must refuse it with one line. */
static void refuse(const char *name, const char *text, size_t len, const char *want)
{
	char path[PATH_MAX], err[512];
	struct wp_model m;
	FILE *f;
	int rc;

	pathf(path, name);
	f = fopen(path, "w");
	if (f) {
		fwrite(text, 1, len, f);
		fclose(f);
	}
	err[0] = 0;
	rc = wp_model_read(path, NULL, &m, err, sizeof(err));
	REQ(rc < 0);
	REQ(err[0] && !strchr(err, '\n') && !strchr(err, 0x1b));
	if (want && !strstr(err, want)) {
		printf("  %s: %s\n", name, err);
		REQ(!"the error names the problem");
	}
	if (rc == 0)
		wp_model_free(&m);
	unlink(path);
}

#define REFUSE(name, text, want) refuse(name, text, sizeof(text) - 1, want)

static void test_malformed(void)
{
	char path[PATH_MAX], err[512], *deep;
	struct wp_model m;

	REFUSE("empty", "", "empty");
	REFUSE("garbage",
	       "\x7f"
	       "ELF\x02\x01garbage",
	       NULL);
	REFUSE("notjson", "{ this is not JSON", "not JSON");
	REFUSE("truncated", "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1", "truncated");
	REFUSE("foreign", "{\"name\":\"package.json\",\"version\":\"1.0\"}", "not a libwallprof");
	REFUSE("v2", "{\"version\":\"2\",\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[]}}",
	       "v1");
	REFUSE("frame_type", "{\"profile\":{\"frames\":[\"x\"],\"stacks\":[],\"samples\":[]}}",
	       "frames[0]");
	REFUSE("addr_type",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":12}],\"stacks\":[],"
	       "\"samples\":[]}}",
	       "instruction_addr");
	REFUSE("addr_long",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x11112222333344445\"}],"
	       "\"stacks\":[],\"samples\":[]}}",
	       "instruction_addr");
	REFUSE("fn_type",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\",\"function\":[]}],"
	       "\"stacks\":[],\"samples\":[]}}",
	       "function");
	REFUSE("line_huge",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\",\"lineno\":"
	       "99999999999}],\"stacks\":[],\"samples\":[]}}",
	       "lineno");
	REFUSE("stack_index",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\"}],"
	       "\"stacks\":[[0,1]],\"samples\":[]}}",
	       "stacks[0][1]");
	REFUSE("stack_neg",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\"}],"
	       "\"stacks\":[[-1]],\"samples\":[]}}",
	       "stacks[0][0]");
	REFUSE("stack_nofr", "{\"profile\":{\"frames\":[],\"stacks\":[[0]],\"samples\":[]}}",
	       "stacks[0][0]");
	REFUSE("sample_stack",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\"}],"
	       "\"stacks\":[[0]],\"samples\":[{\"stack_id\":18446744073709551616,"
	       "\"thread_id\":\"1\",\"elapsed_since_start_ns\":\"0\"}]}}",
	       NULL);
	REFUSE("sample_time",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\"}],"
	       "\"stacks\":[[0]],\"samples\":[{\"stack_id\":0,\"thread_id\":\"1\","
	       "\"elapsed_since_start_ns\":\"999999999999999999999999\"}]}}",
	       "elapsed");
	REFUSE("sample_tid",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\"}],"
	       "\"stacks\":[[0]],\"samples\":[{\"stack_id\":0,\"thread_id\":\"4294967296\","
	       "\"elapsed_since_start_ns\":\"1\"}]}}",
	       "thread_id");
	REFUSE("sample_oncpu",
	       "{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x1\"}],"
	       "\"stacks\":[[0]],\"samples\":[{\"stack_id\":0,\"thread_id\":1,"
	       "\"elapsed_since_start_ns\":1,\"on_cpu\":\"yes\"}]}}",
	       "on_cpu");
	REFUSE("hz_real",
	       "{\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[]},"
	       "\"wallprof\":{\"hz\":1e300}}",
	       "wallprof.hz");
	REFUSE("hz_huge",
	       "{\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[]},"
	       "\"wallprof\":{\"hz\":4294967296}}",
	       "wallprof.hz");
	REFUSE("threads_key",
	       "{\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[],"
	       "\"thread_metadata\":{\"main\":{}}}}",
	       "thread id");
	REFUSE("images",
	       "{\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[]},"
	       "\"debug_meta\":{\"images\":[{\"image_addr\":7}]}}",
	       "image_addr");
	REFUSE("time",
	       "{\"timestamp\":\"yesterday\",\"profile\":{\"frames\":[],\"stacks\":[],"
	       "\"samples\":[]}}",
	       "timestamp");
	/* past what nanoseconds in an int64 hold (UBSan: an overflow before) */
	REFUSE("time_far",
	       "{\"timestamp\":\"9999-12-31T23:59:59Z\",\"profile\":{\"frames\":[],"
	       "\"stacks\":[],\"samples\":[]}}",
	       "timestamp");
	/* a key with a newline and an escape sequence: one line all the same */
	REFUSE("threads_key_ctl",
	       "{\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[],"
	       "\"thread_metadata\":{\"1\\nwallprof: wrote /etc/passwd\\u001b[2J\":{}}}}",
	       "thread id");
	REFUSE("array", "[1,2]", "JSON array");
	REFUSE("hz_fast",
	       "{\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[]},"
	       "\"wallprof\":{\"hz\":1000000}}",
	       "wallprof.hz");
	/* nesting deeper than jansson takes */
	deep = malloc(200002);
	if (deep) {
		deep[0] = '{';
		memset(deep + 1, '[', 200000);
		deep[200001] = 0;
		refuse("deep", deep, 200001, NULL);
		free(deep);
	}
	/* not a regular file; missing */
	REQ(wp_model_read(tmpdir, NULL, &m, err, sizeof(err)) < 0 && err[0]);
	pathf(path, "missing.json");
	REQ(wp_model_read(path, NULL, &m, err, sizeof(err)) < 0 && strstr(err, "No such file"));
	report("model_malformed");
}

/* Every prefix of a real profile is refused; every byte flipped is either
 * read or refused, never a crash. */
static void test_damaged(void)
{
	char b[PATH_MAX], path[PATH_MAX], err[512];
	struct wp_model m;
	FILE *f;
	char *data;
	long len;

	pathf(b, "model.json");
	pathf(path, "damaged.json");
	f = fopen(b, "r");
	REQ(f);
	if (!f) {
		report("model_damaged");
		return;
	}
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	data = malloc((size_t)len);
	REQ(data && fread(data, 1, (size_t)len, f) == (size_t)len);
	fclose(f);
	for (long cut = 1; data && cut < len - 2; cut += 7) {
		f = fopen(path, "w");
		fwrite(data, 1, (size_t)cut, f);
		fclose(f);
		if (wp_model_read(path, NULL, &m, err, sizeof(err)) == 0) {
			wp_model_free(&m);
			REQ(!"a truncated profile was read");
		}
	}
	srand(7);
	for (int k = 0; data && k < 400; k++) {
		long at = rand() % len;
		char old = data[at];

		data[at] = (char)(rand() & 0xff);
		f = fopen(path, "w");
		fwrite(data, 1, (size_t)len, f);
		fclose(f);
		if (wp_model_read(path, NULL, &m, err, sizeof(err)) == 0)
			wp_model_free(&m);
		else
			REQ(err[0] && !strchr(err, '\n'));
		data[at] = old;
	}
	free(data);
	report("model_damaged");
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

int main(void)
{
	const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	setvbuf(stdout, NULL, _IOLBF, 0);
	snprintf(tmpdir, sizeof(tmpdir), "%s/test_model.XXXXXX", base);
	if (!mkdtemp(tmpdir)) {
		printf("FAIL mkdtemp %s: %s\n", tmpdir, strerror(errno));
		return 1;
	}
	dl_iterate_phdr(phdr_cb, NULL);
	wpt_model_caller(1);
	test_registry();
	test_roundtrip();
	test_malformed();
	test_damaged();
	cleanup();
	printf("model: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
