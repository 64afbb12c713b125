/* model: a profile with its symbols, what every format writer and the
 * `wallprof` command's report and diff read.
 *
 * It is the raw profile (profile.h: the frame table of captured addresses,
 * stacks of frame-table indices leaf first, timed samples with their
 * thread, on/off-CPU state and system call, threads unique by tid, the
 * module map, settings and loss counters) plus, for each entry of the
 * frame table, where it lies (module, offset) and its source frames: the
 * inlined callees first, the real function last. An entry of the frame
 * table is what pprof calls a Location, each source frame one of its Lines.
 *
 * Built from a raw dump and a symbolizer (the converter), or read back from
 * a Sentry v1 profile that libwallprof wrote (`wallprof convert`, `report`,
 * `diff` on a .json). Everything it points to is owned by the model. Not
 * async-signal-safe; one thread at a time. */
#ifndef WP_MODEL_H
#define WP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "profile.h"

struct wp_sym;
struct wp_sym_pool;

/* One entry of the profile's frame table (p.pcs[i]): a captured address. */
struct wp_model_loc {
	int32_t module;         /* index into p.modules; -1 outside every module */
	uint64_t module_offset; /* the looked-up address (the PC, or return address - 1)
				   minus the module's start; the address itself when
				   module is -1 */
	uint32_t first;         /* its frames: frames[first .. first + nr) */
	uint32_t nr;            /* >= 1: an unknown function is one frame, function NULL */
};

struct wp_model {
	struct wp_profile p;           /* samples sorted by t_ns; threads unique by tid */
	struct wp_model_loc *locs;     /* p.nr_pcs entries */
	/* nr_frames source frames (symbolize.h's struct: function and file
	 * NULL when unknown, line and column 0, inlined 1 when inlined into
	 * the next frame of the same location) */
	struct wp_sym_frame *frames;
	size_t nr_frames;
	const char *platform;          /* Sentry's platform ("native" by default) */
	void *store;                   /* the strings' storage (model.c) */
};

/* Builds a model from the raw profile `p`, which it takes over (`*p` is
 * emptied), symbolizing each frame-table entry once with `sym` (NULL: no
 * symbols, every frame unknown). `platform` may be NULL ("native").
 * Returns 0, or -1 on out of memory with `err` saying so (and `*p` freed). */
int wp_model_build(struct wp_model *m, struct wp_profile *p, struct wp_sym *sym,
		   const char *platform, char *err, size_t errlen);

/* Reads `path`, a raw dump (symbolized against the modules it records,
 * through `pool` when not NULL) or a Sentry v1 profile as libwallprof writes
 * it (JSON, told by its first bytes), into `m`. The input is untrusted:
 * every count and index is checked, time is bounded by the file's size and
 * memory by about 25 times it (a JSON file over 64 MiB is refused), and a truncated, foreign or malformed file gives -1 with a
 * one-line reason in `err` ("not a libwallprof profile: ...", "truncated
 * at byte N", ...). Returns 0 or -1. */
int wp_model_read(const char *path, struct wp_sym_pool *pool, struct wp_model *m, char *err,
		  size_t errlen);

/* wp_model_read(), also saying what the raw reader saw (`info` may be
 * NULL; all zero for a JSON profile): the fatal signal, samples and stacks
 * dropped as damaged. */
struct wp_raw_info;
int wp_model_read_ex(const char *path, struct wp_sym_pool *pool, struct wp_model *m,
		     struct wp_raw_info *info, char *err, size_t errlen);

/* Frees everything the model holds (not `m` itself); idempotent. */
void wp_model_free(struct wp_model *m);

/* A name for frame `f` of location `loc` that is never empty: the
 * function's, else "<module file name>+0x<offset>", else "0x<address>".
 * Returns `buf` (or the function's own string). */
const char *wp_model_frame_label(const struct wp_model *m, const struct wp_model_loc *loc,
				 const struct wp_sym_frame *f, char *buf, size_t len);

/* The thread entry of `tid`, or NULL. */
const struct wp_thread *wp_model_thread(const struct wp_model *m, uint32_t tid);

/* Nanoseconds one sample stands for: 1e9 / hz (hz 0: 1e9 / 101), at least 1. */
uint64_t wp_model_period_ns(const struct wp_model *m);

#endif
