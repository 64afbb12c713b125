/* html: the self-contained HTML flame graph (formats.h's wp_out_html).
 *
 * The page is written in output/html/ as real HTML, CSS and JavaScript
 * (page.html, page.css, data.js, view.js) and assembled here: the files
 * are embedded into this object at build time with the assembler's
 * .incbin (the Makefile makes this object depend on them), and page.html's
 * markers are replaced, in this order, by
 *
 *   / *@CSS@* /    page.css
 *   @DATA@         the profile's data (html_data.h), a JSON object
 *   @BASE@         the base profile's, or null without one (a diff)
 *   / *@JS@* /     data.js then view.js
 *
 * (written here with spaces so this comment does not end). The data sit in
 * <script type="application/json"> elements, escaped so that no string can
 * end them (html_data.h). Not async-signal-safe. */
#include <stdio.h>
#include <string.h>

#include "formats.h"
#include "html_data.h"

/* The page's sources, NUL-terminated; paths relative to the source root,
 * where the Makefile compiles from. */
#define WP_INCBIN(sym, file)                           \
	__asm__(".pushsection .rodata\n"               \
		".globl " #sym "\n"                    \
		".hidden " #sym "\n"                   \
		".type " #sym ", @object\n" #sym ":\n" \
		".incbin \"" file "\"\n"               \
		".byte 0\n"                            \
		".size " #sym ", . - " #sym "\n"       \
		".popsection\n");                      \
	extern const char sym[] __attribute__((visibility("hidden")))

WP_INCBIN(wp_html_page_html, "output/html/page.html");
WP_INCBIN(wp_html_page_css, "output/html/page.css");
WP_INCBIN(wp_html_data_js, "output/html/data.js");
WP_INCBIN(wp_html_view_js, "output/html/view.js");

static int put(struct wp_out_sink *s, const char *str, size_t len)
{
	return wp_sink_write(s, str, len);
}

/* Writes the template from `*pos` up to `marker`, and moves `*pos` past
 * it. Returns 0, or -1 when the marker is missing or the sink failed. */
static int upto(struct wp_out_sink *s, const char **pos, const char *marker)
{
	const char *at = strstr(*pos, marker);

	if (!at) {
		if (s->err && s->errlen && !s->failed)
			snprintf(s->err, s->errlen, "the HTML template lacks %s (a broken build)",
				 marker);
		s->failed = 1;
		return -1;
	}
	if (put(s, *pos, (size_t)(at - *pos)) < 0)
		return -1;
	*pos = at + strlen(marker);
	return 0;
}

int wp_out_html(const struct wp_model *m, const struct wp_format_opts *o, struct wp_out_sink *s,
		struct wp_out_stats *st)
{
	const char *pos = wp_html_page_html;
	struct wp_html_data_stats ds, bs;
	size_t start = s->bytes;

	if (upto(s, &pos, "/*@CSS@*/") < 0 ||
	    put(s, wp_html_page_css, strlen(wp_html_page_css)) < 0)
		return -1;
	if (upto(s, &pos, "@DATA@") < 0 || wp_html_data(m, s, &ds) < 0)
		return -1;
	if (upto(s, &pos, "@BASE@") < 0)
		return -1;
	if (o && o->base) {
		if (wp_html_data(o->base, s, &bs) < 0)
			return -1;
	} else if (put(s, "null", 4) < 0) {
		return -1;
	}
	if (upto(s, &pos, "/*@JS@*/") < 0 || put(s, wp_html_data_js, strlen(wp_html_data_js)) < 0 ||
	    put(s, wp_html_view_js, strlen(wp_html_view_js)) < 0)
		return -1;
	if (put(s, pos, strlen(pos)) < 0)
		return -1;
	if (st) {
		const struct wp_profile *p = &m->p;

		st->nr_samples = ds.nr_samples;
		st->nr_threads = ds.nr_threads;
		st->nr_frames = p->nr_pcs;
		st->bytes = s->bytes - start;
		st->duration_s =
			p->nr_samples ? (double)(wp_profile_last_ns(p) - p->samples[0].t_ns) / 1e9
				      : 0;
	}
	return 0;
}
