/* formats: every output format by name, written from a model (model.h).
 *
 *   sentry      Sentry sample-format v1 JSON (sentry.c)       .json
 *   pprof       profile.proto, gzipped (pprof.c)              .pb.gz
 *   folded      folded stacks, one line per stack (folded.c)  .folded
 *   speedscope  speedscope's file format (speedscope.c)       .speedscope.json
 *   html        a self-contained flame graph page (html.c)    .html
 *
 * Each writer streams through a sink: a file written atomically (a
 * temporary beside it, renamed when complete), standard output, or a
 * buffer in memory (what an upload sends). Not async-signal-safe. */
#ifndef WP_FORMATS_H
#define WP_FORMATS_H

#include <stddef.h>

#include "model.h"
#include "output.h"

/* Options every writer gets; each reads the ones it knows. */
struct wp_format_opts {
	const char *platform; /* sentry: "native" when NULL */
	/* sentry: the rest of struct wp_out_opts (output.h), same meanings */
	const char *release;
	const char *environment;
	int chunk;
	const char *profiler_id;
	const char *chunk_id;
	const char *transaction_id;
	const char *trace_id;
	const char *segment_id;
	int no_args;
	/* pprof: no per-thread labels (thread_name, thread_id); samples that
	 * differ only by thread become one. For Pyroscope, which makes every
	 * label a series. */
	int pprof_no_thread_labels;
	int thread_prefix;    /* folded: each line starts with the thread's name */
	int syscall_suffix;   /* folded: an off-CPU leaf gets " [off-cpu: read]" */
	const struct wp_model *base; /* html: a diff of the model against this one, or NULL */
};

/* Where a writer's bytes go: a file written atomically, standard output,
 * or memory. */
struct wp_out_sink {
	struct wp_out_atomic a; /* the file, when neither stdout nor memory */
	int to_stdout;
	int to_mem;             /* a growing buffer: mem, `bytes` long (malloc'd;
				   NUL-terminated past `bytes` once written to) */
	char *mem;
	size_t mem_cap;
	int failed;             /* the first error sticks; later writes do nothing */
	char *err;
	size_t errlen;
	size_t bytes;
};

/* Appends `len` bytes; returns 0, or -1 once anything failed (err set). */
int wp_sink_write(struct wp_out_sink *s, const void *data, size_t len);

/* A sink into memory (a growing buffer), errors into `err`. */
void wp_sink_mem_open(struct wp_out_sink *s, char *err, size_t errlen);

/* Hands a memory sink's buffer over: `*out` (malloc'd, NUL-terminated
 * past `*len`), 0; or frees it and returns -1 when anything failed. */
int wp_sink_mem_take(struct wp_out_sink *s, char **out, size_t *len);

/* What errors call the sink: its file's path, "standard output" or
 * "memory". */
const char *wp_sink_name(const struct wp_out_sink *s);

/* Marks the sink failed with "<what>: out of memory", unless an earlier
 * error is already there. */
void wp_sink_oom(struct wp_out_sink *s, const char *what);

/* printf into the sink (formatted in a stack buffer of 4 KiB; longer
 * output is an error). */
int wp_sink_printf(struct wp_out_sink *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* One format. */
struct wp_format {
	const char *name;   /* as -f and WALLPROF_FORMAT take it */
	const char *suffix; /* replaces ".json" in the profile's name */
	int (*write)(const struct wp_model *m, const struct wp_format_opts *o,
		     struct wp_out_sink *s, struct wp_out_stats *st);
};

/* The writers (each in its own file, named in the list at the top). */
int wp_out_sentry_model(const struct wp_model *m, const struct wp_format_opts *o,
			struct wp_out_sink *s, struct wp_out_stats *st);
int wp_out_pprof(const struct wp_model *m, const struct wp_format_opts *o, struct wp_out_sink *s,
		 struct wp_out_stats *st);
int wp_out_folded(const struct wp_model *m, const struct wp_format_opts *o, struct wp_out_sink *s,
		  struct wp_out_stats *st);
int wp_out_speedscope(const struct wp_model *m, const struct wp_format_opts *o,
		      struct wp_out_sink *s, struct wp_out_stats *st);
int wp_out_html(const struct wp_model *m, const struct wp_format_opts *o, struct wp_out_sink *s,
		struct wp_out_stats *st);

/* wp_out_sentry_write_with() (output.h) into a sink instead of a file:
 * what wp_out_sentry_model streams a model through (sentry.c). Returns 0,
 * or -1 with the sink's error set. */
int wp_out_sentry_write_sink(const struct wp_profile *p, wp_out_lookup_fn lookup, void *ctx,
			     const struct wp_out_opts *opts, struct wp_out_sink *s,
			     struct wp_out_stats *st);

/* The format called `name`, or NULL. A format whose writer is not in this
 * build (formats.c) is found but has `write` NULL: wp_format_write says so. */
const struct wp_format *wp_format_find(const char *name);

/* Every format, NULL-terminated, in the order of the list above. */
const struct wp_format *const *wp_format_all(void);

/* Writes `m` in format `f` to `path` ("-": standard output), atomically
 * for a file. Returns 0, or -1 with a one-line reason in `err` and nothing
 * left at `path`. */
int wp_format_write(const struct wp_format *f, const struct wp_model *m,
		    const struct wp_format_opts *o, const char *path, struct wp_out_stats *st,
		    char *err, size_t errlen);

/* Writes `m` in format `f` into memory: `*out` gets a malloc'd buffer of
 * `*len` bytes (followed by a NUL that `*len` does not count), the caller's
 * to free; the format's own bytes, as a file would hold them (pprof is
 * gzipped). Returns 0, or -1 with a one-line reason in `err` and `*out`
 * NULL. */
int wp_format_write_mem(const struct wp_format *f, const struct wp_model *m,
			const struct wp_format_opts *o, char **out, size_t *len,
			struct wp_out_stats *st, char *err, size_t errlen);

/* `json` (a profile's name, normally ending in ".json") with the suffix of
 * format `f` instead: malloc'd, NULL on out of memory. */
char *wp_format_path(const struct wp_format *f, const char *json);

#endif
