/* charge: what report and diff charge a sample to, and the tables they
 * print (see convert.h). A sample is charged to its innermost in-app frame
 * (a frame of the main executable), the leaf frame when its stack has none,
 * so time blocked in libc lands on the caller. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../output/model_int.h"
#include "convert.h"

/* The frame's name as the report shows it: wp_model_frame_label's, with
 * " [inlined]" when it was inlined into its caller. Interned. */
static const char *label(struct wp_model *m, size_t loc, const struct wp_sym_frame *f)
{
	char buf[600], lb[600];
	int n;

	n = snprintf(buf, sizeof(buf), "%.500s%s",
		     wp_model_frame_label(m, &m->locs[loc], f, lb, sizeof(lb)),
		     f->inlined ? " [inlined]" : "");
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof(buf))
		n = (int)sizeof(buf) - 1;
	return wp_model_intern(m, buf, (size_t)n);
}

static const char *line_of(struct wp_model *m, const struct wp_sym_frame *f)
{
	char buf[400];
	const char *slash;
	int n;

	if (!f->file || !*f->file || f->line <= 0)
		return NULL;
	slash = strrchr(f->file, '/');
	n = snprintf(buf, sizeof(buf), "%.300s:%d", slash && slash[1] ? slash + 1 : f->file,
		     f->line);
	return wp_model_intern(m, buf, (size_t)n);
}

int wp_charge_build(struct wp_model *m, struct wp_charge *c)
{
	const struct wp_profile *p = &m->p;
	size_t n = p->nr_stacks + 1;

	memset(c, 0, sizeof(*c));
	c->label = calloc(n, sizeof(*c->label));
	c->line = calloc(n, sizeof(*c->line));
	c->app = calloc(n, sizeof(*c->app));
	c->none = wp_model_intern(m, "(no stack)", 10);
	if (!c->label || !c->line || !c->app || !c->none)
		return -1;
	for (size_t s = 0; s < p->nr_stacks; s++) {
		const struct wp_sym_frame *leaf = NULL, *app = NULL;
		size_t leaf_loc = 0, app_loc = 0;

		for (uint32_t k = p->stack_off[s]; k < p->stack_off[s + 1] && !app; k++) {
			uint32_t loc = p->stack_frames[k];
			const struct wp_model_loc *l;
			int in_app;

			if (loc >= p->nr_pcs)
				continue;
			l = &m->locs[loc];
			in_app = l->module >= 0 && (p->modules[l->module].flags & WP_MOD_MAIN);
			if (!leaf && l->nr) {
				leaf = &m->frames[l->first];
				leaf_loc = loc;
			}
			if (in_app && l->nr) {
				app = &m->frames[l->first];
				app_loc = loc;
			}
		}
		if (app) {
			c->app[s] = c->label[s] = label(m, app_loc, app);
			c->line[s] = line_of(m, app);
			if (!c->label[s])
				return -1;
		} else if (leaf) {
			c->label[s] = label(m, leaf_loc, leaf);
			c->line[s] = line_of(m, leaf);
			if (!c->label[s])
				return -1;
		} else {
			c->label[s] = c->none;
		}
	}
	return 0;
}

void wp_charge_free(struct wp_charge *c)
{
	free(c->label);
	free(c->line);
	free(c->app);
	memset(c, 0, sizeof(*c));
}

int wp_table_cell(struct wp_table *t, const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 64;
		char **c = realloc(t->cells, cap * sizeof(*c));

		if (!c)
			return -1;
		t->cells = c;
		t->cap = cap;
	}
	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	t->cells[t->n++] = s;
	return 0;
}

void wp_table_print(struct wp_table *t, int markdown)
{
	size_t rows = t->ncols ? t->n / t->ncols : 0, w[16] = { 0 };

	for (size_t i = 0; i < rows * t->ncols; i++) {
		size_t len = strlen(t->cells[i]);

		if (w[i % t->ncols] < len)
			w[i % t->ncols] = len;
	}
	for (size_t r = 0; r < rows; r++) {
		char line[4096];
		size_t n = 0;

		for (size_t c = 0; c < t->ncols && c < 16; c++) {
			const char *cell = t->cells[r * t->ncols + c];
			int right = t->align[c] == 'r';

			if (markdown)
				n += (size_t)snprintf(line + n, sizeof(line) - n, "| %s ", cell);
			else
				n += (size_t)snprintf(line + n, sizeof(line) - n, "%s%*s",
						      c ? "  " : "  ",
						      right ? (int)w[c] : -(int)w[c], cell);
			if (n >= sizeof(line))
				n = sizeof(line) - 1;
		}
		if (markdown) {
			printf("%s|\n", line);
			if (r == 0) {
				for (size_t c = 0; c < t->ncols; c++)
					printf("|%s", t->align[c] == 'r' ? "---:" : "---");
				printf("|\n");
			}
			continue;
		}
		while (n && line[n - 1] == ' ')
			n--;
		printf("%.*s\n", (int)n, line);
	}
	for (size_t i = 0; i < t->n; i++)
		free(t->cells[i]);
	free(t->cells);
	t->cells = NULL;
	t->n = t->cap = 0;
}
