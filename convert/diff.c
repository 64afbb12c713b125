/* diff: `wallprof diff BASE NEW [-f text|html] [-o OUTPUT] [--top N]`:
 * which functions gained or lost share of wall time between two profiles
 * (raw dumps or our JSON), on and off CPU. Each sample is charged as the
 * report charges it (charge.c); a function's share is its samples over all
 * the profile's samples. Text: the functions that moved most, one table.
 * html: the flame graph page's diff view (output/html.c, with o->base). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../output/formats.h"
#include "../output/model.h"
#include "../output/model_int.h"
#include "convert.h"

static void usage(FILE *f)
{
	fputs("usage: wallprof diff BASE NEW [-f text|html] [-o OUTPUT] [--top N]\n"
	      "\n"
	      "Compares two profiles of the same program (each a profile libwallprof wrote\n"
	      "or a raw dump): which functions gained or lost share of wall time, on and off\n"
	      "CPU. A sample is charged to its innermost in-app frame, as in wallprof report.\n"
	      "\n"
	      "options:\n"
	      "  -f, --format F   text (default: a table on standard output) or html (a flame\n"
	      "                   graph of NEW coloured by gain and loss against BASE)\n"
	      "  -o, --output P   where to write (html default: NEW with .diff.html; \"-\":\n"
	      "                   standard output)\n"
	      "  --top N          functions listed (default 20)\n"
	      "  -h, --help       this text\n",
	      f);
}

static double share(unsigned long long n, unsigned long long total)
{
	return total ? 100.0 * (double)n / (double)total : 0.0;
}

/* The two profiles' sample counts: cmp_change's context. */
struct totals {
	unsigned long long base_total, new_total;
};

/* By the size of the change in share, largest first, then by name. */
static int cmp_change(const void *a, const void *b, void *ctx)
{
	const struct wp_tally_entry *x = a, *y = b;
	unsigned long long base_total = ((const struct totals *)ctx)->base_total;
	unsigned long long new_total = ((const struct totals *)ctx)->new_total;
	double dx = fabs(share(x->n2, new_total) - share(x->n, base_total));
	double dy = fabs(share(y->n2, new_total) - share(y->n, base_total));

	if (dx != dy)
		return dx > dy ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* Charges every sample of `m` to `t`, its label interned in `into` (the
 * counts of the base go to n/on, those of the new profile to n2/on2). */
static int tally(struct wp_tally *t, struct wp_model *m, struct wp_model *into, int second)
{
	struct wp_charge c;
	int bad = wp_charge_build(m, &c) < 0;

	for (size_t k = 0; k < m->p.nr_samples && !bad; k++) {
		const struct wp_sample *s = &m->p.samples[k];
		const char *label = c.label[s->stack_id];
		struct wp_tally_entry *e;
		int on = !!(s->flags & WP_SAMPLE_ON_CPU);

		if (into != m && !(label = wp_model_intern(into, label, strlen(label))))
			bad = 1;
		else if (!(e = wp_tally_add(t, label)))
			bad = 1;
		else if (second) {
			e->n2 += s->n;
			e->on2 += on ? s->n : 0;
		} else {
			e->n += s->n;
			e->on += on ? s->n : 0;
		}
	}
	wp_charge_free(&c);
	return bad ? -1 : 0;
}

static int text(struct wp_model *base, struct wp_model *cur, const char *bpath, const char *npath,
		size_t top)
{
	struct wp_tally t = { 0 };
	struct wp_table tb = { .ncols = 6, .align = "rrrrrl" };
	int bad = 0;
	unsigned long long base_total = wp_profile_count(&base->p),
			   new_total = wp_profile_count(&cur->p);

	if (tally(&t, base, cur, 0) < 0 || tally(&t, cur, cur, 1) < 0) {
		wp_tally_free(&t);
		return -1;
	}
	{
		struct totals tt = { base_total, new_total };

		qsort_r(t.e, t.n, sizeof(*t.e), cmp_change, &tt);
	}
	printf("base: %s (%llu samples)\nnew:  %s (%llu samples)\n\n", bpath, base_total, npath,
	       new_total);
	printf("functions by change in share of wall time (innermost in-app frame):\n");
	bad |= wp_table_cell(&tb, "base") | wp_table_cell(&tb, "new") |
	       wp_table_cell(&tb, "change") | wp_table_cell(&tb, "on-CPU") |
	       wp_table_cell(&tb, "off-CPU") | wp_table_cell(&tb, "function");
	for (size_t i = 0; i < t.n && i < top && !bad; i++) {
		const struct wp_tally_entry *e = &t.e[i];
		double on = share(e->on2, new_total) - share(e->on, base_total);
		double off = share(e->n2 - e->on2, new_total) - share(e->n - e->on, base_total);

		bad |= wp_table_cell(&tb, "%.1f%%", share(e->n, base_total)) |
		       wp_table_cell(&tb, "%.1f%%", share(e->n2, new_total)) |
		       wp_table_cell(&tb, "%+.1f%%",
				     share(e->n2, new_total) - share(e->n, base_total)) |
		       wp_table_cell(&tb, "%+.1f%%", on) | wp_table_cell(&tb, "%+.1f%%", off) |
		       wp_table_cell(&tb, "%s%s", (const char *)e->key,
				     !e->n    ? " (new)"
				     : !e->n2 ? " (gone)"
					      : "");
	}
	wp_table_print(&tb, 0);
	wp_tally_free(&t);
	return bad ? -1 : 0;
}

int wp_cmd_diff(int argc, char **argv)
{
	const char *paths[2] = { 0 }, *format = "text", *out = NULL;
	struct wp_model m[2];
	size_t top = 20, np = 0;
	char err[1024], *alloc = NULL;
	int rc = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(stdout);
			return 0;
		}
		if (!strcmp(a, "-f") || !strcmp(a, "--format") || !strcmp(a, "-o") ||
		    !strcmp(a, "--output") || !strcmp(a, "--top")) {
			if (i + 1 == argc)
				return wp_cli_fail(WP_EXIT_USAGE, "diff: %s needs a value", a);
			if (a[1] == 'f' || a[2] == 'f')
				format = argv[++i];
			else if (a[1] == 'o' || a[2] == 'o')
				out = argv[++i];
			else {
				char *end;
				long n;

				errno = 0;
				n = strtol(argv[++i], &end, 10);
				if (!*argv[i] || *end || errno || n < 1 || n > 1000000)
					return wp_cli_fail(
						WP_EXIT_USAGE,
						"diff: --top wants a whole number, not '%s'",
						argv[i]);
				top = (size_t)n;
			}
		} else if (a[0] == '-' && a[1]) {
			return wp_cli_fail(WP_EXIT_USAGE,
					   "diff: unknown option %s (wallprof diff --help)", a);
		} else if (np == 2) {
			return wp_cli_fail(WP_EXIT_USAGE,
					   "diff: two profiles, BASE and NEW (got a third: %s)", a);
		} else {
			paths[np++] = a;
		}
	}
	if (np < 2)
		return wp_cli_fail(WP_EXIT_USAGE,
				   "diff: needs two profiles (wallprof diff BASE NEW)");
	if (strcmp(format, "text") && strcmp(format, "html"))
		return wp_cli_fail(WP_EXIT_USAGE, "diff: unknown format \"%s\" (text or html)",
				   format);
	wp_cv_debug_cache_by_hand();
	for (int k = 0; k < 2; k++)
		if (wp_model_read(paths[k], NULL, &m[k], err, sizeof(err)) < 0) {
			if (k)
				wp_model_free(&m[0]);
			return wp_cli_fail(WP_EXIT_FAIL, "%s", err);
		}
	if (!strcmp(format, "text")) {
		if (out && strcmp(out, "-") && !freopen(out, "w", stdout))
			rc = wp_cli_fail(WP_EXIT_FAIL, "cannot write %s: %s", out, strerror(errno));
		else if (text(&m[0], &m[1], paths[0], paths[1], top) < 0)
			rc = wp_cli_fail(WP_EXIT_FAIL, "out of memory");
		else if (fflush(stdout) != 0)
			rc = wp_cli_fail(WP_EXIT_FAIL, "cannot write %s: %s",
					 out ? out : "standard output", strerror(errno));
	} else {
		const struct wp_format *html = wp_format_find("html");
		struct wp_format_opts o = { .base = &m[0] };
		struct wp_out_stats st;

		if (!out) {
			size_t n = strlen(paths[1]);

			alloc = malloc(n + 16);
			if (alloc) {
				memcpy(alloc, paths[1], n + 1);
				if (n > 5 && !strcmp(alloc + n - 5, ".json"))
					alloc[n - 5] = 0;
				else if (n > 4 && !strcmp(alloc + n - 4, ".raw"))
					alloc[n - 4] = 0;
				strcat(alloc, ".diff.html");
			}
			out = alloc;
		}
		if (!out)
			rc = wp_cli_fail(WP_EXIT_FAIL, "out of memory");
		else if (wp_format_write(html, &m[1], &o, out, &st, err, sizeof(err)) < 0)
			rc = wp_cli_fail(WP_EXIT_FAIL, "%s", err);
		else if (strcmp(out, "-"))
			printf("wallprof: wrote %s\n", out);
	}
	free(alloc);
	wp_model_free(&m[0]);
	wp_model_free(&m[1]);
	return rc;
}
