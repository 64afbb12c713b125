/* raw_dump: the whole raw dump of this process (raw_dump.h), from a
 * fatal-signal handler as well: the sections around the ring's, written
 * through output/raw.c's section writer. Everything here is
 * async-signal-safe: no allocation, no stdio, no locks; only
 * clock_gettime(2), the writer's write(2) and memcpy on caller memory. The
 * layout is documented in output/raw.h. */
#include <time.h>

#include "raw_dump.h"
#include "ring.h"

_Static_assert(sizeof(struct wp_counters) % 8 == 0, "wp_counters is a run of u64");
_Static_assert(sizeof(((struct wp_thread *)0)->name) == 16, "thread names are 16 bytes");

/* Length of `s` up to `max` bytes, reading no byte past a NUL.
 * async-signal-safe */
WP_AS_SAFE static size_t bounded_len(const char *s, size_t max)
{
	size_t n = 0;

	if (!s)
		return 0;
	while (n < max && s[n])
		n++;
	return n;
}

/* Writes exactly `len` bytes of `s`: stops at a NUL that appeared since the
 * length was taken (the string may be changing) and pads with zeros.
 * async-signal-safe */
WP_AS_SAFE static void put_str(struct wp_raw_out *o, const char *s, size_t len)
{
	size_t n = 0;

	while (n < len && s && s[n])
		n++;
	wp_raw_out_bytes(o, s, n);
	wp_raw_out_zeros(o, len - n);
}

#define META_FIXED 64 /* META payload before the command line */
#define MODL_FIXED 104

/* async-signal-safe */
WP_AS_SAFE static void put_meta(struct wp_raw_out *o, const struct wp_raw_meta *m)
{
	struct timespec ts;
	uint64_t now = 0;
	size_t clen = m ? bounded_len(m->cmdline, sizeof(m->cmdline) - 1) : 0;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0)
		now = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	wp_raw_sec_begin(o, WP_RAW_TAG_META, 2, META_FIXED + clen);
	if (m) {
		wp_raw_out_u32(o, m->pid);
		wp_raw_out_u32(o, m->main_tid);
		wp_raw_out_u32(o, m->hz);
		wp_raw_out_u32(o, m->ring_seconds);
		wp_raw_out_u32(o, m->max_depth);
		wp_raw_out_u32(o, (uint32_t)m->signal);
		wp_raw_out_u64(o, (uint64_t)m->realtime_offset_ns);
		wp_raw_out_u64(o, m->start_ns);
		wp_raw_out_u64(o, now);
		wp_raw_out_u32(o, (uint32_t)clen);
		wp_raw_out_u32(o, m->snapshot);
		wp_raw_out_u64(o, m->ring_bytes);
		put_str(o, m->cmdline, clen);
	}
	wp_raw_sec_end(o); /* a NULL meta is all zeros */
}

/* The RUN! section: the process's profiler id, and a chunk's range.
 * async-signal-safe */
WP_AS_SAFE static void put_run(struct wp_raw_out *o, const struct wp_raw_meta *m)
{
	wp_raw_sec_begin(o, WP_RAW_TAG_RUN, 1, 40);
	wp_raw_out_bytes(o, m->profiler_id, 16);
	wp_raw_out_u32(o, m->chunk);
	wp_raw_out_u32(o, m->run_flags);
	wp_raw_out_u64(o, m->chunk_from_ns);
	wp_raw_out_u64(o, m->chunk_to_ns);
	wp_raw_sec_end(o);
}

/* async-signal-safe */
WP_AS_SAFE static void put_module(struct wp_raw_out *o, const struct wp_module *m)
{
	uint32_t blen = m->build_id_len <= WP_BUILD_ID_MAX ? m->build_id_len : WP_BUILD_ID_MAX;
	size_t plen = bounded_len(m->path, WP_RAW_PATH_MAX - 1);

	wp_raw_sec_begin(o, WP_RAW_TAG_MODL, 1, MODL_FIXED + plen);
	wp_raw_out_u64(o, m->bias);
	wp_raw_out_u64(o, m->start);
	wp_raw_out_u64(o, m->end);
	wp_raw_out_u32(o, m->flags);
	wp_raw_out_u32(o, blen);
	wp_raw_out_u32(o, (uint32_t)plen);
	wp_raw_out_u32(o, 0);
	wp_raw_out_bytes(o, m->build_id, blen);
	wp_raw_out_zeros(o, WP_BUILD_ID_MAX - blen);
	put_str(o, m->path, plen);
	wp_raw_sec_end(o);
}

/* async-signal-safe */
WP_AS_SAFE int wp_raw_write(int fd, const struct wp_raw_meta *meta, const struct wp_ring *ring,
			    const struct wp_module *mods, size_t nr_mods,
			    const struct wp_thread *threads, size_t nr_threads,
			    const struct wp_counters *ctr)
{
	struct wp_raw_out o;

	return wp_raw_write_out(&o, fd, meta, ring, mods, nr_mods, threads, nr_threads, NULL, NULL,
				ctr);
}

/* async-signal-safe */
WP_AS_SAFE int wp_raw_write_out(struct wp_raw_out *o, int fd, const struct wp_raw_meta *meta,
				const struct wp_ring *ring, const struct wp_module *mods,
				size_t nr_mods, const struct wp_thread *threads, size_t nr_threads,
				wp_raw_thread_flags_fn *flags, const void *flags_arg,
				const struct wp_counters *ctr)
{
	uint32_t v;
	uint64_t end_off;
	size_t i;

	if (!mods || nr_mods > WP_RAW_MAX_MODULES)
		nr_mods = mods ? WP_RAW_MAX_MODULES : 0;
	if (!threads || nr_threads > WP_RAW_MAX_THREADS)
		nr_threads = threads ? WP_RAW_MAX_THREADS : 0;
	wp_raw_out_init(o, fd);
	wp_raw_out_bytes(o, WP_RAW_MAGIC, 8);
	v = WP_RAW_VERSION;
	wp_raw_out_bytes(o, &v, sizeof(v));
	v = WP_RAW_BYTE_ORDER;
	wp_raw_out_bytes(o, &v, sizeof(v));

	put_meta(o, meta);
	if (meta)
		put_run(o, meta);

	wp_raw_sec_begin(o, WP_RAW_TAG_CTRS, 1, 8 + sizeof(struct wp_counters));
	wp_raw_out_u32(o, sizeof(struct wp_counters) / 8);
	wp_raw_out_u32(o, 0);
	if (ctr)
		wp_raw_out_bytes(o, ctr, sizeof(*ctr));
	wp_raw_sec_end(o);

	for (i = 0; i < nr_mods && !o->failed; i++)
		put_module(o, &mods[i]);

	wp_raw_sec_begin(o, WP_RAW_TAG_THRD, 1, 8 + (uint64_t)nr_threads * 40);
	wp_raw_out_u32(o, (uint32_t)nr_threads);
	wp_raw_out_u32(o, 0);
	for (i = 0; i < nr_threads && !o->failed; i++) {
		wp_raw_out_u32(o, threads[i].tid);
		wp_raw_out_bytes(o, threads[i].name, 16);
		wp_raw_out_u32(o, flags ? flags(flags_arg, i) : threads[i].flags);
		wp_raw_out_u64(o, threads[i].nr_signals);
		wp_raw_out_u64(o, threads[i].nr_samples);
	}
	wp_raw_sec_end(o);

	wp_ring_raw_emit(ring, o,
			 meta && meta->chunk && !(meta->run_flags & WP_RUN_TAIL)
				 ? meta->chunk_from_ns
				 : 0);

	end_off = o->off;
	wp_raw_sec_begin(o, WP_RAW_TAG_END, 1, 16);
	wp_raw_out_u64(o, end_off);
	wp_raw_out_u32(o, o->nr_sections);
	wp_raw_out_u32(o, 0);
	wp_raw_sec_end(o);
	return wp_raw_out_flush(o);
}
