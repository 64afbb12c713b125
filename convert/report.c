/* report: `wallprof report PROFILE [--threads] [--top N] [--markdown]`, a
 * short human summary of a profile (a raw dump or our Sentry JSON): the
 * duration, sample and thread counts, the loss counters, a per-thread table
 * (samples, on/off-CPU split, the dominant system call when samples carry
 * one, the top in-app function), the off-CPU time by system call and the
 * functions that took the most wall time (charge.c says which frame a
 * sample is charged to). --threads adds each thread's top functions;
 * --markdown prints Markdown (a CI step summary). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../output/model.h"
#include "../output/model_int.h"
#include "../output/output.h"
#include "convert.h"

static void usage(FILE *f)
{
	fputs("usage: wallprof report PROFILE [--threads] [--top N] [--markdown]\n"
	      "\n"
	      "Summarizes PROFILE, a profile libwallprof wrote (JSON) or a raw dump: duration,\n"
	      "samples, losses, threads with their on/off-CPU split and dominant system call,\n"
	      "off-CPU time by system call, and the functions that took the most wall time.\n"
	      "A sample is charged to its innermost in-app frame (the leaf frame when the\n"
	      "stack has none), so time blocked in libc lands on the caller.\n"
	      "\n"
	      "options:\n"
	      "  --top N       functions listed (default 15)\n"
	      "  --threads     each thread's top functions too\n"
	      "  --markdown    Markdown tables (for a CI step summary)\n"
	      "  -h, --help    this text\n",
	      f);
}

static double pct(unsigned long long part, unsigned long long whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* The system call label of a sample, interned, or NULL. */
static const char *syscall_label(struct wp_model *m, const struct wp_sample *s)
{
	char buf[32];
	const char *name;

	if (!(s->flags & WP_SAMPLE_SYSCALL))
		return NULL;
	name = wp_out_syscall_name(s->syscall);
	if (!name) {
		snprintf(buf, sizeof(buf), "syscall_%u", s->syscall);
		name = buf;
	}
	return wp_model_intern(m, name, strlen(name));
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* By samples, most first, then by name. */
static int cmp_entry(const void *a, const void *b)
{
	const struct wp_tally_entry *x = a, *y = b;

	if (x->n != y->n)
		return x->n > y->n ? -1 : 1;
	return strcmp(x->key, y->key);
}

struct rep {
	struct wp_model *m;
	struct wp_charge c;
	int md;
	size_t top;
};

static void heading(const struct rep *r, const char *text)
{
	if (r->md)
		printf("\n### %s\n\n", text);
	else
		printf("\n%s:\n", text);
}

/* One line, "label counter n, counter n, ...", of the counters of `kind`
 * that are not 0, after the `n` bytes already in `line` (1024 bytes);
 * nothing if there is nothing to say. */
static void counter_line(const struct rep *r, const char *label, enum wp_counter_kind kind,
			 const struct wp_counters *c, char *line, size_t n)
{
	for (size_t i = 0; i < wp_nr_counter_keys; i++) {
		uint64_t v = wp_counter_at(c, i);

		if ((wp_counter_keys[i].kind & kind) == kind && v && n < 1023)
			n += (size_t)snprintf(line + n, 1024 - n, "%s%s %llu", n ? ", " : "",
					      wp_counter_keys[i].key, (unsigned long long)v);
	}
	if (n)
		printf("%s%s %s\n", r->md ? "    " : "", label, line);
}

static void head(struct rep *r, const char *path, const uint32_t *tids, size_t nr_tids)
{
	const struct wp_profile *p = &r->m->p;
	const struct wp_counters *c = &p->counters;
	uint64_t base = p->start_ns, dur;
	unsigned long long trunc = 0, total;
	size_t idle = 0, i;
	char line[1024];
	size_t n = 0;

	if (p->nr_samples && p->samples[0].t_ns < base)
		base = p->samples[0].t_ns;
	dur = p->end_ns > base ? p->end_ns - base
	      : p->nr_samples  ? wp_profile_last_ns(p) - base
			       : 0;
	for (i = 0; i < p->nr_samples; i++)
		if (p->samples[i].flags & WP_SAMPLE_TRUNCATED)
			trunc += p->samples[i].n;
	total = wp_profile_count(p);
	if (r->md)
		printf("## wallprof report\n\n");
	printf("%sprofile:  %s\n", r->md ? "    " : "", path);
	if (p->cmdline && *p->cmdline)
		printf("%scommand:  %s\n", r->md ? "    " : "", p->cmdline);
	else
		printf("%scommand:  process %u\n", r->md ? "    " : "", p->pid);
	if (p->snapshot)
		snprintf(line, sizeof(line), "snapshot %d", p->snapshot);
	else
		snprintf(line, sizeof(line), "at exit");
	printf("%sduration: %.2f s (%s)\n", r->md ? "    " : "", (double)dur / 1e9, line);
	printf("%ssamples:  %llu in %zu threads, %.1f samples/s per thread", r->md ? "    " : "",
	       (unsigned long long)total, nr_tids,
	       nr_tids && dur ? (double)total / ((double)nr_tids * (double)dur / 1e9) : 0.0);
	if (p->hz)
		printf(" (configured %u Hz)", p->hz);
	printf("\n");
	if (trunc)
		n = (size_t)snprintf(line, sizeof(line), "truncated_samples %llu", trunc);
	counter_line(r, "losses:  ", WP_CTR_LOSS, c, line, n);
	counter_line(r, "sampling:", WP_CTR_HOW, c, line, 0);
	if (p->nr_threads) {
		for (i = 0; i < p->nr_threads; i++)
			idle += !bsearch(&p->threads[i].tid, tids, nr_tids, sizeof(*tids), cmp_u32);
		printf("%sthreads seen: %zu", r->md ? "    " : "", p->nr_threads);
		if (idle)
			printf(", %zu without samples in this window", idle);
		printf("\n");
	}
}

/* The per-thread table; `tids` the sampled threads, ascending. */
static int threads_table(struct rep *r, const uint32_t *tids, size_t nr_tids, int labelled)
{
	struct wp_model *m = r->m;
	struct wp_table t = { .ncols = labelled ? 7 : 6, .align = labelled ? "lrrrrll" : "lrrrrl" };
	int bad = 0;

	heading(r, "threads");
	bad |= wp_table_cell(&t, "name") | wp_table_cell(&t, "tid") | wp_table_cell(&t, "samples") |
	       wp_table_cell(&t, "on-CPU") | wp_table_cell(&t, "off-CPU");
	if (labelled)
		bad |= wp_table_cell(&t, "top syscall");
	bad |= wp_table_cell(&t, "top in-app function");
	for (size_t i = 0; i < nr_tids && !bad; i++) {
		struct wp_tally fn = { 0 }, sc = { 0 };
		const struct wp_tally_entry *top;
		const struct wp_thread *th = wp_model_thread(m, tids[i]);
		unsigned long long n = 0, on = 0;
		char name[17] = "";

		for (size_t k = 0; k < m->p.nr_samples && !bad; k++) {
			const struct wp_sample *s = &m->p.samples[k];
			struct wp_tally_entry *e;
			const char *label;

			if (s->tid != tids[i])
				continue;
			n += s->n;
			if (s->flags & WP_SAMPLE_ON_CPU)
				on += s->n;
			if (r->c.app[s->stack_id]) {
				if (!(e = wp_tally_add(&fn, r->c.app[s->stack_id])))
					bad = 1;
				else
					e->n += s->n;
			}
			label = syscall_label(m, s);
			if (label && !(s->flags & WP_SAMPLE_ON_CPU)) {
				if (!(e = wp_tally_add(&sc, label)))
					bad = 1;
				else
					e->n += s->n;
			}
		}
		if (th)
			memcpy(name, th->name, 16);
		bad |= wp_table_cell(&t, "%s", name) | wp_table_cell(&t, "%u", tids[i]) |
		       wp_table_cell(&t, "%llu", n) | wp_table_cell(&t, "%.0f%%", pct(on, n)) |
		       wp_table_cell(&t, "%.0f%%", pct(n - on, n));
		if (labelled) {
			/* the dominant off-CPU call (ties: the first by name) */
			const struct wp_tally_entry *best = NULL;

			for (size_t k = 0; k < sc.n; k++)
				if (!best || sc.e[k].n > best->n ||
				    (sc.e[k].n == best->n && strcmp(sc.e[k].key, best->key) < 0))
					best = &sc.e[k];
			if (best)
				bad |= wp_table_cell(&t, "%s %.0f%%", (const char *)best->key,
						     pct(best->n, n));
			else
				bad |= wp_table_cell(&t, "-");
		}
		top = wp_tally_max(&fn);
		bad |= wp_table_cell(&t, "%s", top ? (const char *)top->key : "-");
		wp_tally_free(&fn);
		wp_tally_free(&sc);
	}
	wp_table_print(&t, r->md);
	return bad ? -1 : 0;
}

static int offcpu_table(struct rep *r, int labelled)
{
	struct wp_model *m = r->m;
	struct wp_tally sc = { 0 };
	struct wp_table t = { .ncols = 4, .align = "rrrl" };
	unsigned long long total = wp_profile_count(&m->p), off = 0, on_labelled = 0;
	const char *nolabel = wp_model_intern(m, "(no system call label)", 22);
	int bad = !nolabel;

	heading(r, "off-CPU time by system call (share of wall time, all threads)");
	for (size_t k = 0; k < m->p.nr_samples && !bad; k++) {
		const struct wp_sample *s = &m->p.samples[k];
		const char *label = syscall_label(m, s);
		struct wp_tally_entry *e;

		if (s->flags & WP_SAMPLE_ON_CPU) {
			if (label)
				on_labelled += s->n;
			continue;
		}
		off += s->n;
		if (!(e = wp_tally_add(&sc, label ? label : nolabel)))
			bad = 1;
		else
			e->n += s->n;
	}
	if (!off) {
		printf("  no off-CPU samples\n");
	} else if (!labelled) {
		printf("  %.1f%% of wall time off CPU; no sample carries a system call label\n",
		       pct(off, total));
	} else if (!bad) {
		qsort(sc.e, sc.n, sizeof(*sc.e), cmp_entry);
		bad |= wp_table_cell(&t, "wall") | wp_table_cell(&t, "of off-CPU") |
		       wp_table_cell(&t, "samples") | wp_table_cell(&t, "system call");
		for (size_t k = 0; k < sc.n; k++)
			bad |= wp_table_cell(&t, "%.1f%%", pct(sc.e[k].n, total)) |
			       wp_table_cell(&t, "%.1f%%", pct(sc.e[k].n, off)) |
			       wp_table_cell(&t, "%llu", sc.e[k].n) |
			       wp_table_cell(&t, "%s", (const char *)sc.e[k].key);
		bad |= wp_table_cell(&t, "%.1f%%", pct(off, total)) | wp_table_cell(&t, "100.0%%") |
		       wp_table_cell(&t, "%llu", off) | wp_table_cell(&t, "(all off-CPU)");
		wp_table_print(&t, r->md);
		if (on_labelled)
			printf("  (%llu on-CPU samples also carry a system call label; not counted "
			       "here)\n",
			       on_labelled);
	}
	wp_tally_free(&sc);
	return bad ? -1 : 0;
}

/* Functions by share of wall time, of the samples of `tid` (0: all). */
static int functions_table(struct rep *r, uint32_t tid, size_t top)
{
	struct wp_model *m = r->m;
	struct wp_tally fn = { 0 };
	struct wp_table t = { .ncols = 5, .align = "rrrll" };
	unsigned long long total = 0;
	int bad = 0;

	for (size_t k = 0; k < m->p.nr_samples && !bad; k++) {
		const struct wp_sample *s = &m->p.samples[k];
		const char *line = r->c.line[s->stack_id];
		struct wp_tally_entry *e;

		if (tid && s->tid != tid)
			continue;
		total += s->n;
		if (!(e = wp_tally_add(&fn, r->c.label[s->stack_id]))) {
			bad = 1;
			break;
		}
		e->n += s->n;
		if (s->flags & WP_SAMPLE_ON_CPU)
			e->on += s->n;
		/* the function's lines, counted in a tally of its own */
		if (line && !e->extra && !(e->extra = calloc(1, sizeof(struct wp_tally))))
			bad = 1;
		if (line && e->extra && !(e = wp_tally_add((struct wp_tally *)e->extra, line)))
			bad = 1;
		else if (line && e)
			e->n += s->n;
	}
	/* each function's most frequent line, the first seen among equals */
	for (size_t i = 0; i < fn.n; i++) {
		struct wp_tally *lines = (struct wp_tally *)fn.e[i].extra;
		const struct wp_tally_entry *best = lines ? wp_tally_max(lines) : NULL;

		fn.e[i].extra = best ? best->key : NULL;
		if (lines) {
			wp_tally_free(lines);
			free(lines);
		}
	}
	qsort(fn.e, fn.n, sizeof(*fn.e), cmp_entry);
	bad |= wp_table_cell(&t, "total") | wp_table_cell(&t, "on-CPU") |
	       wp_table_cell(&t, "off-CPU") | wp_table_cell(&t, "function") |
	       wp_table_cell(&t, "line");
	for (size_t i = 0; i < fn.n && i < top && !bad; i++)
		bad |= wp_table_cell(&t, "%.1f%%", pct(fn.e[i].n, total)) |
		       wp_table_cell(&t, "%.1f%%", pct(fn.e[i].on, total)) |
		       wp_table_cell(&t, "%.1f%%", pct(fn.e[i].n - fn.e[i].on, total)) |
		       wp_table_cell(&t, "%s", (const char *)fn.e[i].key) |
		       wp_table_cell(&t, "%s", fn.e[i].extra ? (const char *)fn.e[i].extra : "-");
	wp_table_print(&t, r->md);
	wp_tally_free(&fn);
	return bad ? -1 : 0;
}

static int report(struct rep *r, const char *path, int per_thread)
{
	struct wp_model *m = r->m;
	uint32_t *tids = malloc((m->p.nr_samples + 1) * sizeof(uint32_t));
	size_t nr_tids = 0, i;
	int labelled = 0, bad = 0;

	if (!tids)
		return -1;
	for (i = 0; i < m->p.nr_samples; i++) {
		tids[i] = m->p.samples[i].tid;
		labelled |= !!(m->p.samples[i].flags & WP_SAMPLE_SYSCALL);
	}
	qsort(tids, m->p.nr_samples, sizeof(uint32_t), cmp_u32);
	for (i = 0; i < m->p.nr_samples; i++)
		if (!nr_tids || tids[nr_tids - 1] != tids[i])
			tids[nr_tids++] = tids[i];
	head(r, path, tids, nr_tids);
	if (m->p.nr_samples) {
		bad |= threads_table(r, tids, nr_tids, labelled);
		bad |= offcpu_table(r, labelled);
		heading(r, "top functions by share of wall time (innermost in-app frame)");
		bad |= functions_table(r, 0, r->top);
		for (i = 0; per_thread && i < nr_tids && !bad; i++) {
			const struct wp_thread *th = wp_model_thread(m, tids[i]);
			char title[96], name[17] = "";

			if (th)
				memcpy(name, th->name, 16);
			snprintf(title, sizeof(title), "thread %u%s%s%s: top functions", tids[i],
				 name[0] ? " (" : "", name, name[0] ? ")" : "");
			heading(r, title);
			bad |= functions_table(r, tids[i], r->top < 5 ? r->top : 5);
		}
	}
	free(tids);
	return bad ? -1 : 0;
}

int wp_cmd_report(int argc, char **argv)
{
	const char *path = NULL;
	struct wp_model m;
	struct rep r = { .m = &m, .top = 15 };
	int per_thread = 0, rc;
	char err[1024];

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = NULL;

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "--threads")) {
			per_thread = 1;
		} else if (!strcmp(a, "--markdown")) {
			r.md = 1;
		} else if (!strcmp(a, "--top") || !strncmp(a, "--top=", 6)) {
			char *end;
			long n;

			v = a[5] == '=' ? a + 6 : i + 1 < argc ? argv[++i] : NULL;
			if (!v)
				return wp_cli_fail(WP_EXIT_USAGE, "report: --top needs a number");
			errno = 0;
			n = strtol(v, &end, 10);
			if (!*v || *end || errno || n < 0 || n > 1000000)
				return wp_cli_fail(WP_EXIT_USAGE,
						   "report: --top wants a whole number, not '%s'",
						   v);
			r.top = n < 1 ? 1 : (size_t)n;
		} else if (a[0] == '-' && a[1]) {
			return wp_cli_fail(WP_EXIT_USAGE,
					   "report: unknown option %s (wallprof report --help)", a);
		} else if (path) {
			return wp_cli_fail(WP_EXIT_USAGE,
					   "report: one profile at a time (got %s and %s)", path,
					   a);
		} else {
			path = a;
		}
	}
	if (!path)
		return wp_cli_fail(WP_EXIT_USAGE,
				   "report: no profile given (wallprof report PROFILE [--top N])");
	signal(SIGPIPE, SIG_DFL); /* quiet under `| head` */
	wp_cv_debug_cache_by_hand();
	if (wp_model_read(path, NULL, &m, err, sizeof(err)) < 0)
		return wp_cli_fail(WP_EXIT_FAIL, "%s", err);
	rc = wp_charge_build(&m, &r.c) < 0 || report(&r, path, per_thread) < 0;
	wp_charge_free(&r.c);
	wp_model_free(&m);
	fflush(stdout);
	if (rc)
		return wp_cli_fail(WP_EXIT_FAIL, "%s: out of memory", path);
	return 0;
}
