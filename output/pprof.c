/* pprof: writes a model as pprof's profile.proto, gzipped (formats.h,
 * wp_out_pprof; the fields are listed in docs/FORMATS.md, "pprof").
 *
 * The message is encoded into memory with the hand-written wire encoder
 * (pb.h; docs/DESIGN.md says why not protobuf-c), then deflated with zlib
 * into the sink as one gzip member. Samples with the same stack and the
 * same labels (thread unless left out, state, system call) become one
 * Sample whose values are summed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fmt_stack.h"
#include "formats.h"
#include "intern.h"
#include "pb.h"

/* profile.proto's field numbers. */
enum {
	PROFILE_SAMPLE_TYPE = 1,
	PROFILE_SAMPLE = 2,
	PROFILE_MAPPING = 3,
	PROFILE_LOCATION = 4,
	PROFILE_FUNCTION = 5,
	PROFILE_STRING_TABLE = 6,
	PROFILE_TIME_NANOS = 9,
	PROFILE_DURATION_NANOS = 10,
	PROFILE_PERIOD_TYPE = 11,
	PROFILE_PERIOD = 12,
	PROFILE_DEFAULT_SAMPLE_TYPE = 14,
	VALUETYPE_TYPE = 1,
	VALUETYPE_UNIT = 2,
	SAMPLE_LOCATION_ID = 1,
	SAMPLE_VALUE = 2,
	SAMPLE_LABEL = 3,
	LABEL_KEY = 1,
	LABEL_STR = 2,
	LABEL_NUM = 3,
	LABEL_NUM_UNIT = 4,
	MAPPING_ID = 1,
	MAPPING_MEMORY_START = 2,
	MAPPING_MEMORY_LIMIT = 3,
	MAPPING_FILE_OFFSET = 4,
	MAPPING_FILENAME = 5,
	MAPPING_BUILD_ID = 6,
	MAPPING_HAS_FUNCTIONS = 7,
	MAPPING_HAS_FILENAMES = 8,
	MAPPING_HAS_LINE_NUMBERS = 9,
	MAPPING_HAS_INLINE_FRAMES = 10,
	LOCATION_ID = 1,
	LOCATION_MAPPING_ID = 2,
	LOCATION_ADDRESS = 3,
	LOCATION_LINE = 4,
	LINE_FUNCTION_ID = 1,
	LINE_LINE = 2,
	LINE_COLUMN = 3,
	FUNCTION_ID = 1,
	FUNCTION_NAME = 2,
	FUNCTION_SYSTEM_NAME = 3,
	FUNCTION_FILENAME = 4,
};

#define NO_SYSCALL UINT32_MAX
#define GZ_CHUNK 65536

struct pp {
	const struct wp_model *m;
	struct wp_intern strs;  /* the string table: id = index */
	struct wp_intern funcs; /* (name id, file id) -> function id - 1 */
	uint32_t *loc_id;       /* frame-table index -> Location id, 0 unused */
	uint32_t *map_id;       /* module -> Mapping id, 0 unused */
	uint32_t *map_mod;      /* Mapping id - 1 -> module */
	uint32_t nr_maps;
	struct wp_pb out, a, b; /* the Profile; scratch for nested messages */
	int failed;             /* out of memory somewhere */
};

/* One sample's aggregation key. */
struct key {
	uint32_t stack_id;
	uint32_t tid;
	uint32_t off_cpu;
	uint32_t syscall; /* NO_SYSCALL when none */
	uint32_t sample;  /* index into p.samples */
};

static uint64_t str(struct pp *pp, const char *s)
{
	int64_t id = wp_intern_str(&pp->strs, s);

	if (id < 0) {
		pp->failed = 1;
		return 0;
	}
	return (uint64_t)id;
}

static int cmp_key(const void *x, const void *y)
{
	const struct key *a = x, *b = y;

	if (a->stack_id != b->stack_id)
		return a->stack_id < b->stack_id ? -1 : 1;
	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->off_cpu != b->off_cpu)
		return a->off_cpu < b->off_cpu ? -1 : 1;
	if (a->syscall != b->syscall)
		return a->syscall < b->syscall ? -1 : 1;
	return 0;
}

static int same_key(const struct key *a, const struct key *b)
{
	return cmp_key(a, b) == 0;
}

static void value_type(struct pp *pp, uint32_t field, const char *type, const char *unit)
{
	wp_pb_reset(&pp->a);
	wp_pb_varint_nz(&pp->a, VALUETYPE_TYPE, str(pp, type));
	wp_pb_varint_nz(&pp->a, VALUETYPE_UNIT, str(pp, unit));
	wp_pb_msg(&pp->out, field, &pp->a);
}

static void label_str(struct pp *pp, const char *key, const char *val)
{
	wp_pb_reset(&pp->b);
	wp_pb_varint_nz(&pp->b, LABEL_KEY, str(pp, key));
	wp_pb_varint_nz(&pp->b, LABEL_STR, str(pp, val));
	wp_pb_msg(&pp->a, SAMPLE_LABEL, &pp->b);
}

static void label_num(struct pp *pp, const char *key, uint64_t num)
{
	wp_pb_reset(&pp->b);
	wp_pb_varint_nz(&pp->b, LABEL_KEY, str(pp, key));
	wp_pb_varint_nz(&pp->b, LABEL_NUM, num);
	wp_pb_msg(&pp->a, SAMPLE_LABEL, &pp->b);
}

/* Marks the frame-table entries and modules the writable samples use and
 * numbers them (Locations in frame-table order, Mappings with the main
 * executable first). */
static void number_used(struct pp *pp)
{
	const struct wp_profile *p = &pp->m->p;
	uint32_t next = 1;

	for (size_t i = 0; i < p->nr_samples; i++) {
		const struct wp_sample *s = &p->samples[i];

		if (!wp_fmt_sample_ok(pp->m, s))
			continue;
		for (uint32_t k = p->stack_off[s->stack_id]; k < p->stack_off[s->stack_id + 1]; k++)
			if (p->stack_frames[k] < p->nr_pcs)
				pp->loc_id[p->stack_frames[k]] = 1;
	}
	for (size_t pc = 0; pc < p->nr_pcs; pc++) {
		int32_t mod = pp->m->locs[pc].module;

		if (!pp->loc_id[pc])
			continue;
		pp->loc_id[pc] = next++;
		if (mod >= 0 && (size_t)mod < p->nr_modules)
			pp->map_id[mod] = 1;
	}
	for (int pass = 0; pass < 2; pass++)
		for (size_t i = 0; i < p->nr_modules; i++)
			if (pp->map_id[i] && !!(p->modules[i].flags & WP_MOD_MAIN) == !pass)
				pp->map_mod[pp->nr_maps++] = (uint32_t)i;
	for (uint32_t id = 0; id < pp->nr_maps; id++)
		pp->map_id[pp->map_mod[id]] = id + 1;
}

static void write_samples(struct pp *pp, struct key *keys, size_t n, int thread_labels)
{
	const struct wp_model *m = pp->m;
	const struct wp_profile *p = &m->p;
	uint64_t period = wp_model_period_ns(m);
	uint64_t *ids = NULL;
	size_t cap = 0;

	qsort(keys, n, sizeof(*keys), cmp_key);
	for (size_t i = 0, j; i < n; i = j) {
		const struct key *k = &keys[i];
		const struct wp_thread *t = wp_model_thread(m, k->tid);
		const struct wp_sample *s = &p->samples[k->sample];
		uint32_t lo = p->stack_off[k->stack_id], hi = p->stack_off[k->stack_id + 1];
		uint64_t count, values[2];
		size_t nr = 0;
		char buf[32];
		const char *sc;

		count = 0;
		for (j = i; j < n && same_key(&keys[j], k); j++)
			count += p->samples[keys[j].sample].n;
		if (hi - lo > cap) {
			uint64_t *v = realloc(ids, (hi - lo) * sizeof(*v));

			if (!v) {
				pp->failed = 1;
				break;
			}
			ids = v;
			cap = hi - lo;
		}
		for (uint32_t f = lo; f < hi; f++) /* leaf first, as pprof wants */
			if (p->stack_frames[f] < p->nr_pcs)
				ids[nr++] = pp->loc_id[p->stack_frames[f]];
		values[0] = count;
		values[1] = count * period;
		wp_pb_reset(&pp->a);
		wp_pb_packed(&pp->a, SAMPLE_LOCATION_ID, ids, nr);
		wp_pb_packed(&pp->a, SAMPLE_VALUE, values, 2);
		if (thread_labels && t && t->name[0]) {
			char name[sizeof(t->name) + 1];

			memcpy(name, t->name, sizeof(t->name));
			name[sizeof(t->name)] = 0;
			label_str(pp, "thread_name", name);
		}
		if (thread_labels)
			label_num(pp, "thread_id", k->tid);
		label_str(pp, "state", k->off_cpu ? "off-cpu" : "on-cpu");
		sc = wp_fmt_syscall(s, buf, sizeof(buf));
		if (sc)
			label_str(pp, "syscall", sc);
		wp_pb_msg(&pp->out, PROFILE_SAMPLE, &pp->a);
	}
	free(ids);
}

static void write_mappings(struct pp *pp)
{
	const struct wp_profile *p = &pp->m->p;

	for (uint32_t id = 1; id <= pp->nr_maps; id++) {
		const struct wp_module *mod = &p->modules[pp->map_mod[id - 1]];
		char hex[2 * WP_BUILD_ID_MAX + 1];
		uint32_t blen;

		blen = mod->build_id_len < WP_BUILD_ID_MAX ? mod->build_id_len : WP_BUILD_ID_MAX;
		wp_sym_hex(mod->build_id, blen, hex);
		hex[2 * blen] = 0;
		wp_pb_reset(&pp->a);
		wp_pb_varint(&pp->a, MAPPING_ID, id);
		wp_pb_varint_nz(&pp->a, MAPPING_MEMORY_START, mod->start);
		wp_pb_varint_nz(&pp->a, MAPPING_MEMORY_LIMIT, mod->end);
		/* The lowest PT_LOAD segment starts at file offset 0 in every
		 * object the linkers make; the addresses are symbolized already. */
		wp_pb_varint_nz(&pp->a, MAPPING_FILE_OFFSET, 0);
		wp_pb_varint_nz(&pp->a, MAPPING_FILENAME, str(pp, mod->path ? mod->path : ""));
		wp_pb_varint_nz(&pp->a, MAPPING_BUILD_ID, str(pp, hex));
		/* Symbolized here: pprof must not look for the binaries. */
		wp_pb_varint(&pp->a, MAPPING_HAS_FUNCTIONS, 1);
		wp_pb_varint(&pp->a, MAPPING_HAS_FILENAMES, 1);
		wp_pb_varint(&pp->a, MAPPING_HAS_LINE_NUMBERS, 1);
		wp_pb_varint(&pp->a, MAPPING_HAS_INLINE_FRAMES, 1);
		wp_pb_msg(&pp->out, PROFILE_MAPPING, &pp->a);
	}
}

/* The Function of a frame: deduplicated by (name, file). */
static uint64_t function_id(struct pp *pp, const struct wp_model_loc *loc,
			    const struct wp_sym_frame *f)
{
	char buf[256];
	uint32_t key[2];
	int64_t id;

	key[0] = (uint32_t)str(pp, wp_model_frame_label(pp->m, loc, f, buf, sizeof(buf)));
	key[1] = (uint32_t)str(pp, f->file ? f->file : "");
	id = wp_intern_id(&pp->funcs, key, sizeof(key));
	if (id < 0) {
		pp->failed = 1;
		return 0;
	}
	return (uint64_t)id + 1;
}

/* One Location per used frame-table entry; its Lines are the entry's
 * frames in the model's order, innermost (inlined) first, the function it
 * was inlined into last: profile.proto's "line[i] is inlined into
 * line[i+1]". */
static void write_locations(struct pp *pp)
{
	const struct wp_model *m = pp->m;
	const struct wp_profile *p = &m->p;

	for (size_t pc = 0; pc < p->nr_pcs; pc++) {
		const struct wp_model_loc *loc = &m->locs[pc];
		uint64_t addr = loc->module_offset;

		if (!pp->loc_id[pc])
			continue;
		wp_pb_reset(&pp->a);
		wp_pb_varint(&pp->a, LOCATION_ID, pp->loc_id[pc]);
		if (loc->module >= 0 && (size_t)loc->module < p->nr_modules) {
			wp_pb_varint_nz(&pp->a, LOCATION_MAPPING_ID, pp->map_id[loc->module]);
			addr += p->modules[loc->module].start;
		}
		wp_pb_varint_nz(&pp->a, LOCATION_ADDRESS, addr);
		if (loc->first <= m->nr_frames && loc->nr <= m->nr_frames - loc->first)
			for (uint32_t j = 0; j < loc->nr; j++) {
				const struct wp_sym_frame *f = &m->frames[loc->first + j];

				wp_pb_reset(&pp->b);
				wp_pb_varint(&pp->b, LINE_FUNCTION_ID, function_id(pp, loc, f));
				if (f->line > 0)
					wp_pb_varint(&pp->b, LINE_LINE, (uint64_t)f->line);
				if (f->column > 0)
					wp_pb_varint(&pp->b, LINE_COLUMN, (uint64_t)f->column);
				wp_pb_msg(&pp->a, LOCATION_LINE, &pp->b);
			}
		wp_pb_msg(&pp->out, PROFILE_LOCATION, &pp->a);
	}
}

static void write_functions(struct pp *pp)
{
	for (size_t i = 0; i < pp->funcs.nr; i++) {
		uint32_t key[2];

		memcpy(key, pp->funcs.keys[i], sizeof(key));
		wp_pb_reset(&pp->a);
		wp_pb_varint(&pp->a, FUNCTION_ID, i + 1);
		/* name only: with system_name empty (and so different), pprof
		 * keeps our demangled name as it is. */
		wp_pb_varint_nz(&pp->a, FUNCTION_NAME, key[0]);
		wp_pb_varint_nz(&pp->a, FUNCTION_FILENAME, key[1]);
		wp_pb_msg(&pp->out, PROFILE_FUNCTION, &pp->a);
	}
}

/* The encoded Profile, gzipped, into the sink. */
static int gzip_out(const struct wp_pb *in, struct wp_out_sink *s, size_t *bytes)
{
	unsigned char chunk[GZ_CHUNK];
	z_stream z;
	int rc, ret = 0;

	memset(&z, 0, sizeof(z));
	/* 15 + 16: a gzip wrapper; its header has no name and mtime 0. */
	if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	*bytes = 0;
	for (size_t off = 0;;) {
		size_t left = in->len - off;

		z.next_in = in->data ? in->data + off : NULL;
		z.avail_in = left > (1u << 30) ? 1u << 30 : (uInt)left;
		off += z.avail_in;
		do {
			z.next_out = chunk;
			z.avail_out = sizeof(chunk);
			rc = deflate(&z, off == in->len ? Z_FINISH : Z_NO_FLUSH);
			if (rc == Z_STREAM_ERROR) {
				ret = -1;
				goto out;
			}
			if (wp_sink_write(s, chunk, sizeof(chunk) - z.avail_out) < 0) {
				ret = -1;
				goto out;
			}
			*bytes += sizeof(chunk) - z.avail_out;
		} while (z.avail_out == 0);
		if (rc == Z_STREAM_END)
			break;
	}
out:
	deflateEnd(&z);
	return ret;
}

int wp_out_pprof(const struct wp_model *m, const struct wp_format_opts *o, struct wp_out_sink *s,
		 struct wp_out_stats *st)
{
	const struct wp_profile *p = &m->p;
	struct pp pp = { .m = m };
	struct key *keys;
	size_t n = 0, bytes = 0;
	uint64_t period = wp_model_period_ns(m);
	int rc = -1;

	int thread_labels = !(o && o->pprof_no_thread_labels);

	pp.loc_id = calloc(p->nr_pcs ? p->nr_pcs : 1, sizeof(*pp.loc_id));
	pp.map_id = calloc(p->nr_modules ? p->nr_modules : 1, sizeof(*pp.map_id));
	pp.map_mod = calloc(p->nr_modules ? p->nr_modules : 1, sizeof(*pp.map_mod));
	keys = malloc((p->nr_samples ? p->nr_samples : 1) * sizeof(*keys));
	if (!pp.loc_id || !pp.map_id || !pp.map_mod || !keys)
		goto oom;
	str(&pp, ""); /* string_table[0] must be "" */
	value_type(&pp, PROFILE_SAMPLE_TYPE, "samples", "count");
	value_type(&pp, PROFILE_SAMPLE_TYPE, "wall", "nanoseconds");
	number_used(&pp);
	for (size_t i = 0; i < p->nr_samples; i++) {
		const struct wp_sample *smp = &p->samples[i];

		if (!wp_fmt_sample_ok(m, smp))
			continue;
		keys[n].stack_id = smp->stack_id;
		keys[n].tid = thread_labels ? smp->tid : 0;
		keys[n].off_cpu = (uint32_t)wp_fmt_off_cpu(smp);
		keys[n].syscall = keys[n].off_cpu && (smp->flags & WP_SAMPLE_SYSCALL) ? smp->syscall
										      : NO_SYSCALL;
		keys[n].sample = (uint32_t)i;
		n++;
	}
	write_samples(&pp, keys, n, thread_labels);
	write_mappings(&pp);
	write_locations(&pp);
	write_functions(&pp);
	if (p->end_ns >= p->start_ns) {
		wp_pb_varint_nz(&pp.out, PROFILE_TIME_NANOS,
				(uint64_t)((int64_t)p->start_ns + p->realtime_offset_ns));
		wp_pb_varint_nz(&pp.out, PROFILE_DURATION_NANOS, p->end_ns - p->start_ns);
	}
	value_type(&pp, PROFILE_PERIOD_TYPE, "wall", "nanoseconds");
	wp_pb_varint_nz(&pp.out, PROFILE_PERIOD, period);
	wp_pb_varint_nz(&pp.out, PROFILE_DEFAULT_SAMPLE_TYPE, str(&pp, "wall"));
	for (size_t i = 0; i < pp.strs.nr; i++)
		wp_pb_bytes(&pp.out, PROFILE_STRING_TABLE, pp.strs.keys[i], pp.strs.lens[i]);
	if (pp.failed || pp.out.failed || pp.a.failed || pp.b.failed)
		goto oom;
	if (gzip_out(&pp.out, s, &bytes) < 0) {
		if (!s->failed && s->err && s->errlen)
			snprintf(s->err, s->errlen, "pprof: compression failed");
		s->failed = 1;
		goto out;
	}
	wp_fmt_stats(m, st);
	if (st)
		st->bytes = bytes;
	rc = 0;
	goto out;
oom:
	wp_sink_oom(s, "pprof");
out:
	free(keys);
	free(pp.loc_id);
	free(pp.map_id);
	free(pp.map_mod);
	wp_intern_free(&pp.strs);
	wp_intern_free(&pp.funcs);
	wp_pb_free(&pp.out);
	wp_pb_free(&pp.a);
	wp_pb_free(&pp.b);
	return rc;
}
