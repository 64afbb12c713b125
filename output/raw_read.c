/* raw (reader): reads a raw dump (layout in raw.h), parses it
 * (raw_parse.c) and makes the profile of it: the window, the module
 * shadowing and the per-tid thread merge are done here and nowhere else.
 * Every length, count and index in the file is checked before use: a
 * truncated, corrupt or foreign file gives a one-line error, a ring caught
 * mid-update loses only the samples that do not hold together. Not
 * async-signal-safe.
 *
 * The input is untrusted (wallprof convert runs on whatever file it is
 * given), so the work and memory are bounded by its size B:
 *   - only regular files are read (a FIFO or /dev/zero would never end),
 *     exactly the st_size bytes fstat() reported, the header checked first;
 *   - every count is backed by the bytes present before anything is
 *     allocated or looped over (a section holds exactly what its counts
 *     say), so each table costs O(its share of B) memory;
 *   - stacks are extents of the frame arena: a stack whose extent leaves the
 *     arena or overlaps another stack's is dropped with its samples (a live
 *     ring's stacks are disjoint; overlaps are a ring caught mid-compaction,
 *     or a file crafted so that a few bytes of stack table repeat the whole
 *     arena), so the stacks kept hold at most B/4 frames in all, and nothing
 *     loops over a stack more than once;
 *   - every pass is linear or n log n in the table sizes (no module against
 *     module or stack against stack loops);
 *   - a run-length record (RING v2) stands for at most the ticks of the
 *     tick table the dump carries (its ticks the table has forgotten are
 *     dropped, but for its first, at the record's own time), and of two
 *     records of one thread that share a tick the later is dropped: the
 *     samples are at most (threads x ticks in the table) plus one per
 *     record, and a dump that would stand for more than 2^31 is refused.
 *     The profile keeps the records as weighted samples: its memory is
 *     O(B).
 * The bound this gives the converter (wp_out_sentry_write of the profile
 * read, checked by test/unit/test_raw_untrusted.c), where T is the number of
 * ticks the runs add beyond their first (Sentry's format has an entry per
 * thread per tick, at most 160 bytes each):
 *
 *     JSON bytes <= 16 * B + 160 * T + 64 KiB + what symbolization adds
 *
 * T is not linear in B, by the nature of the format, not of the reader: a
 * parked thread is one 32-byte record however many ticks it spans, and a
 * tick is 8 bytes of tick table, so a dump of R records and K ticks may
 * stand for R * K samples, which a real dump does (10,000 threads parked
 * for 30 s at 101 Hz: half a megabyte of dump, 30 million samples). The
 * 2^31 cap (MAX_EXPANDED) is what bounds it. Only Sentry's format lists
 * every tick; pprof, folded, speedscope and HTML weigh a record once and
 * stay linear in B.
 *
 * where symbolization adds function names, source files and inlined frames
 * read from the module files on this machine that the dump names (not from
 * the dump). Without it, 8 * B covers the samples, threads, stacks, frames,
 * images and settings, and the module paths repeated in each frame are held
 * to another 8 * B (WP_RAW_PATH_BUDGET; a dump that would exceed it is
 * refused, which no real dump comes near: it takes frames whose module paths
 * average over a kilobyte). The symbolizer (symbolize/) loads each file
 * once however often the dump names it and finds an address's module by a
 * binary search however the modules overlap: its memory grows with the
 * distinct files it loads and its work, besides loading them, is n log n
 * in the dump's tables. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "raw_parse.h"

/* ---- rebuilding the profile --------------------------------------------- */

static uint32_t le32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint64_t le64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return v;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* A stack's extent in the frame arena, for the overlap check. */
struct extent {
	uint64_t off, end;
	size_t id;
};

static int cmp_extent(const void *a, const void *b)
{
	const struct extent *x = a, *y = b;

	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* stack_ok[s] = 1 for every stack that holds together: its extent inside
 * the arena and shared with no other stack, its frame ids in the frame
 * table. Overlapping stacks are all dropped: which one was torn is unknown.
 * Frames are checked only in disjoint extents: at most nw reads. */
static int check_stacks(const struct wp_raw_dump *d, unsigned char *stack_ok, size_t *nr_bad)
{
	struct extent *e = malloc((d->nst + 1) * sizeof(*e));
	size_t s, n = 0, i;
	uint64_t max_end = 0;

	if (!e)
		return -1;
	for (s = 0; s < d->nst; s++) {
		uint64_t off = le32(d->stacks + s * 8), len = le32(d->stacks + s * 8 + 4);

		stack_ok[s] = off + len <= d->nw;
		if (stack_ok[s] && len > 0)
			e[n++] = (struct extent){ off, off + len, s };
	}
	qsort(e, n, sizeof(*e), cmp_extent);
	/* Sorted by start: an extent overlaps an earlier one iff it starts
	 * before the furthest end so far, a later one iff it ends after the
	 * next one starts. */
	for (i = 0; i < n; i++) {
		if ((i > 0 && e[i].off < max_end) || (i + 1 < n && e[i].end > e[i + 1].off))
			stack_ok[e[i].id] = 0;
		if (e[i].end > max_end)
			max_end = e[i].end;
	}
	free(e);
	for (s = 0; s < d->nst; s++) {
		uint64_t off = le32(d->stacks + s * 8), len = le32(d->stacks + s * 8 + 4), j;

		for (j = 0; stack_ok[s] && j < len; j++)
			stack_ok[s] = le32(d->words + (off + j) * 4) < d->np;
		*nr_bad += !stack_ok[s];
	}
	return 0;
}

/* Samples a dump may stand for (each becomes a line of Sentry's JSON). */
#define MAX_EXPANDED (1ull << 31)

/* The tick table's times, oldest first: entry i is tick number
 * newest - known + 1 + i. A table whose times go back (a corrupt one) is
 * made non-decreasing, so that searches in it stay meaningful. */
static uint64_t *linear_ticks(const struct wp_raw_dump *d)
{
	uint64_t *lin = malloc((d->nticks + 1) * sizeof(*lin));

	if (!lin)
		return NULL;
	for (uint64_t i = 0; i < d->nticks; i++) {
		lin[i] = le64(d->ticks + (size_t)i * 8);
		if (i && lin[i] < lin[i - 1])
			lin[i] = lin[i - 1];
	}
	return lin;
}

static int cmp_tid_time(const void *a, const void *b)
{
	const struct wp_sample *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return x->t_ns < y->t_ns ? -1 : x->t_ns > y->t_ns;
}

/* A thread has one sample per tick: of entries of one tid that share a
 * tick (only a corrupt dump has them), the later ones are dropped. Sorts
 * by tid; returns the entries kept. */
static size_t drop_overlaps(struct wp_profile *p, size_t *nr_bad)
{
	size_t w = 0;

	qsort(p->samples, p->nr_samples, sizeof(*p->samples), cmp_tid_time);
	for (size_t i = 0; i < p->nr_samples; i++) {
		const struct wp_sample *s = &p->samples[i];

		if (w && p->samples[w - 1].tid == s->tid &&
		    s->t_ns <= wp_sample_last(p, &p->samples[w - 1])) {
			(*nr_bad)++;
			continue;
		}
		p->samples[w++] = *s;
	}
	return w;
}

/* The records whose stacks hold together as samples of out (stack ids still
 * the dump's), with the tick table they refer to: a record of c ticks
 * whose ticks the table still knows is one sample of n = c; of one whose
 * first ticks it has forgotten (older than the window), its first tick (at
 * the record's time) and its known ticks are kept, the others dropped.
 * Then only a chunk's range, and the window: within window_ns of the
 * newest tick kept. Returns 0, -1 on out of memory, -3 when the records
 * stand for more than MAX_EXPANDED samples. */
static int runs_of(const struct wp_raw_dump *d, const unsigned char *stack_ok,
		   struct wp_profile *out, struct wp_raw_info *info)
{
	uint64_t newest = 0, total = 0;
	size_t k, n = 0;

	out->samples = malloc((2 * d->ns + 1) * sizeof(*out->samples));
	if (!out->samples)
		return -1;
	if (d->nticks) {
		out->ticks = linear_ticks(d);
		if (!out->ticks)
			return -1;
		out->nr_ticks = d->nticks;
	}
	for (k = 0; k < d->ns; k++) {
		const unsigned char *r = d->samples + k * d->rec_bytes;
		uint32_t st = le32(r + 12), cnt = 1, kc = 0, age = 0;
		struct wp_sample x = { .t_ns = le64(r),
				       .tid = le32(r + 8),
				       .stack_id = st,
				       .flags = le32(r + 16),
				       .syscall = le32(r + 20),
				       .n = 1 };

		if (d->rec_bytes == 32) {
			uint32_t c = le32(r + 24);

			cnt = c & WP_RAW_COUNT_MASK;
			if ((c & (WP_RAW_COUNT_TICKED | WP_RAW_COUNT_OPEN)) ==
			    (WP_RAW_COUNT_TICKED | WP_RAW_COUNT_OPEN)) {
				/* open: every tick from its first to the newest */
				cnt = d->tick_newest - le32(r + 28) + 1;
				if (cnt > WP_RAW_COUNT_MASK)
					cnt = 0;
			}
			if (cnt > 1 && (c & WP_RAW_COUNT_TICKED) && d->nticks) {
				age = d->tick_newest - (le32(r + 28) + cnt - 1);
				if (age < d->nticks)
					kc = (uint32_t)(d->nticks - age < cnt ? d->nticks - age
									      : cnt);
			}
			if (cnt > 1 && !(c & WP_RAW_COUNT_TICKED))
				cnt = 0; /* several ticks, but which? */
		}
		if (!(st < d->nst && stack_ok[st]) || cnt == 0) {
			info->nr_bad_samples++;
			continue;
		}
		if (kc < cnt)
			out->samples[n++] = x; /* the first tick, at the record's own time */
		if (kc > 0) {
			/* the ticks the table knows: the record's last kc */
			x.tick = (uint32_t)(d->nticks - age - kc);
			x.n = kc;
			x.t_ns = out->ticks[x.tick];
			out->samples[n++] = x;
		}
	}
	out->nr_samples = n;
	/* A chunk: only its own samples. */
	if (d->chunk && !(d->run_flags & WP_RUN_TAIL))
		wp_profile_keep_range(out, d->chunk_from_ns, d->chunk_to_ns);
	for (k = 0; k < out->nr_samples; k++) {
		uint64_t t = wp_sample_last(out, &out->samples[k]);

		if (t > newest)
			newest = t;
	}
	/* t + window >= newest, without overflowing */
	if (newest > d->window_ns)
		wp_profile_keep_range(out, newest - d->window_ns, 0);
	out->nr_samples = drop_overlaps(out, &info->nr_bad_samples);
	for (k = 0; k < out->nr_samples; k++)
		total += out->samples[k].n;
	if (total > MAX_EXPANDED)
		return -3;
	qsort(out->samples, out->nr_samples, sizeof(*out->samples), wp_cmp_sample);
	return 0;
}

/* Samples, stacks and frames of the window, over the dumped tables, after
 * dropping what does not hold together: the samples within window_ns of
 * the newest; their stacks in the order they first use them, and those
 * stacks' frames in the order they first use them; the samples sorted by
 * time (a late capture is collected after a newer one). */
static int build_window(const struct wp_raw_dump *d, struct wp_profile *out,
			struct wp_raw_info *info)
{
	unsigned char *stack_ok = NULL;
	uint32_t *smap = NULL, *pmap = NULL, *byid = NULL;
	size_t nv = 0, k, s, ns = 0, np = 0, nw = 0;
	int rc = -1;

	stack_ok = calloc(d->nst + 1, 1);
	smap = calloc(d->nst + 1, sizeof(*smap));
	pmap = calloc(d->np + 1, sizeof(*pmap));
	if (!stack_ok || !smap || !pmap)
		goto out;
	if (check_stacks(d, stack_ok, &info->nr_bad_stacks) < 0)
		goto out;
	if ((rc = runs_of(d, stack_ok, out, info)) < 0)
		goto out;
	rc = -1;
	nv = out->nr_samples;
	/* The stacks the samples use, numbered in the order the ring's records
	 * first use them. */
	for (k = 0; k < nv; k++)
		stack_ok[out->samples[k].stack_id] = 2;
	for (k = 0; k < d->ns; k++) {
		uint32_t st = le32(d->samples + k * d->rec_bytes + 12);

		if (st < d->nst && stack_ok[st] == 2 && !smap[st]) {
			smap[st] = (uint32_t)++ns;
			nw += le32(d->stacks + (size_t)st * 8 + 4);
		}
	}
	if (nw > UINT32_MAX) {
		rc = -2; /* disjoint, so only from an arena of over 16 GiB */
		goto out;
	}
	out->stack_off = malloc((ns + 1) * sizeof(uint32_t));
	out->stack_frames = malloc((nw + 1) * sizeof(uint32_t));
	byid = malloc((ns + 1) * sizeof(uint32_t));
	if (!out->stack_off || !out->stack_frames || !byid)
		goto out;
	for (s = 0; s < d->nst; s++)
		if (smap[s])
			byid[smap[s] - 1] = (uint32_t)s;
	nw = 0;
	for (k = 0; k < ns; k++) {
		const unsigned char *e = d->stacks + (size_t)byid[k] * 8;
		uint32_t off = le32(e), len = le32(e + 4), j;

		out->stack_off[k] = (uint32_t)nw;
		for (j = 0; j < len; j++) {
			uint32_t p = le32(d->words + ((size_t)off + j) * 4);

			if (!pmap[p])
				pmap[p] = (uint32_t)++np;
			out->stack_frames[nw++] = pmap[p] - 1;
		}
	}
	out->stack_off[ns] = (uint32_t)nw;
	out->pcs = malloc((np + 1) * sizeof(*out->pcs));
	if (!out->pcs)
		goto out;
	for (k = 0; k < d->np; k++) {
		if (pmap[k]) {
			out->pcs[pmap[k] - 1].addr = le64(d->pcs + k * 16);
			out->pcs[pmap[k] - 1].flags = le32(d->pcs + k * 16 + 8);
		}
	}
	for (k = 0; k < nv; k++)
		out->samples[k].stack_id = smap[out->samples[k].stack_id] - 1;
	out->nr_stacks = ns;
	out->nr_pcs = np;
	rc = 0;
out:
	free(stack_ok);
	free(smap);
	free(pmap);
	free(byid);
	return rc;
}

static int cmp_mod_start(const void *a, const void *b, void *arg)
{
	const struct wp_module *m = arg;
	uint64_t x = m[*(const size_t *)a].start, y = m[*(const size_t *)b].start;

	return x < y ? -1 : x > y;
}

/* The module map: an unloaded object whose range a live one reuses is left
 * out (the live one wins: lookups must not be ambiguous). Live modules are
 * sorted by start with the furthest end of each prefix, so each unloaded
 * one is a binary search, not a scan of the map. */
static int build_modules(struct wp_raw_dump *d, struct wp_profile *out)
{
	size_t *live = malloc((d->nr_mods + 1) * sizeof(*live));
	uint64_t *max_end = malloc((d->nr_mods + 1) * sizeof(*max_end));
	size_t i, n = 0, nl = 0;

	out->modules = calloc(d->nr_mods + 1, sizeof(*out->modules));
	if (!live || !max_end || !out->modules) {
		free(live);
		free(max_end);
		return -1;
	}
	for (i = 0; i < d->nr_mods; i++)
		if (!(d->mods[i].flags & WP_MOD_UNLOADED))
			live[nl++] = i;
	qsort_r(live, nl, sizeof(*live), cmp_mod_start, d->mods);
	for (i = 0; i < nl; i++) {
		uint64_t e = d->mods[live[i]].end;

		max_end[i] = i && max_end[i - 1] > e ? max_end[i - 1] : e;
	}
	for (i = 0; i < d->nr_mods; i++) {
		const struct wp_module *u = &d->mods[i];

		if (u->flags & WP_MOD_UNLOADED) {
			/* live[0 .. lo) start before u ends; one of them overlaps
			 * u iff the furthest of their ends is past u's start. */
			size_t lo = 0, hi = nl;

			while (lo < hi) {
				size_t mid = lo + (hi - lo) / 2;

				if (d->mods[live[mid]].start < u->end)
					lo = mid + 1;
				else
					hi = mid;
			}
			if (lo > 0 && max_end[lo - 1] > u->start)
				continue;
		}
		out->modules[n++] = *u;
		d->mods[i].path = NULL; /* moved */
	}
	out->nr_modules = n;
	free(live);
	free(max_end);
	return 0;
}

/* One entry per tid that has samples in the window or was alive at the
 * dump: the name of its newest (last) entry, the signal and sample counts of
 * all its entries summed (a reused tid is one thread of the profile, as its
 * samples are), flags or'ed. Newest-first order. */
static int build_threads(const struct wp_raw_dump *d, struct wp_profile *out)
{
	uint32_t *tids = malloc((out->nr_samples + d->nr_threads + 1) * sizeof(*tids));
	int32_t *slot = NULL;
	size_t i, nt = 0, n = 0, ns = 0;

	out->threads = calloc(d->nr_threads + 1, sizeof(*out->threads));
	if (!tids || !out->threads)
		goto fail;
	for (i = 0; i < out->nr_samples; i++)
		tids[ns++] = out->samples[i].tid;
	for (i = 0; i < d->nr_threads; i++)
		if (le32(d->threads + i * WP_RAW_THREAD_BYTES + 20) & WP_THREAD_LIVE)
			tids[ns++] = le32(d->threads + i * WP_RAW_THREAD_BYTES);
	qsort(tids, ns, sizeof(*tids), cmp_u32);
	for (i = 0; i < ns; i++)
		if (nt == 0 || tids[nt - 1] != tids[i])
			tids[nt++] = tids[i];
	slot = malloc((nt + 1) * sizeof(*slot));
	if (!slot)
		goto fail;
	for (i = 0; i < nt; i++)
		slot[i] = -1;
	for (i = d->nr_threads; i-- > 0;) {
		const unsigned char *e = d->threads + i * WP_RAW_THREAD_BYTES;
		uint32_t tid = le32(e);
		uint32_t *hit = bsearch(&tid, tids, nt, sizeof(*tids), cmp_u32);
		struct wp_thread *t;

		if (!hit)
			continue;
		if (slot[hit - tids] < 0) {
			slot[hit - tids] = (int32_t)n;
			t = &out->threads[n++];
			t->tid = tid;
			memcpy(t->name, e + 4, sizeof(t->name));
			t->name[sizeof(t->name) - 1] = 0;
		}
		t = &out->threads[slot[hit - tids]];
		t->flags |= le32(e + 20);
		t->nr_signals += le64(e + 24);
		t->nr_samples += le64(e + 32);
	}
	out->nr_threads = n;
	free(tids);
	free(slot);
	return 0;
fail:
	free(tids);
	free(slot);
	return -1;
}

/* JSON bytes of repeated module paths allowed per byte of the dump. */
#define WP_RAW_PATH_BUDGET 8

/* The most bytes jansson writes for `s` between the quotes. */
static uint64_t json_cost(const char *s)
{
	uint64_t n = 0;

	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;

		n += c == '"' || c == '\\' ? 2 : c < 0x20 || c == 0x7f ? 6 : 1;
	}
	return n;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Index of the first of v[0 .. n) (ascending) that is >= x. */
static size_t lower_bound(const uint64_t *v, size_t n, uint64_t x)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v[mid] < x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The Sentry writer names its module in every frame: a few bytes of
 * frame table could repeat a 4 KiB path (6 bytes of JSON per control
 * character) thousands of times. Sets *cost to the JSON bytes of module
 * paths the frames of `p` would repeat (an upper bound: a frame inside
 * overlapping modules is charged for each) when that exceeds `budget`
 * (then at least budget + 1), else to 0. Returns -1 on out of memory. */
static int path_cost(const struct wp_profile *p, uint64_t budget, uint64_t *cost)
{
	uint64_t *la = malloc((p->nr_pcs + 1) * sizeof(*la)), total = 0;
	size_t i;

	*cost = 0;
	if (!la)
		return -1;
	for (i = 0; i < p->nr_pcs; i++) {
		const struct wp_pc *pc = &p->pcs[i];

		/* the address the writer looks up (a return address minus one) */
		la[i] = !(pc->flags & WP_PC_EXACT) && pc->addr > 0 ? pc->addr - 1 : pc->addr;
	}
	qsort(la, p->nr_pcs, sizeof(*la), cmp_u64);
	for (i = 0; i < p->nr_modules && total <= budget; i++) {
		const struct wp_module *m = &p->modules[i];
		uint64_t n, c;

		if (!m->path || m->start >= m->end)
			continue;
		n = lower_bound(la, p->nr_pcs, m->end) - lower_bound(la, p->nr_pcs, m->start);
		c = n ? json_cost(m->path) : 0;
		if (c && n > (budget - total) / c)
			total = budget + 1; /* over: the exact sum does not matter */
		else
			total += n * c;
	}
	free(la);
	if (total > budget)
		*cost = total;
	return 0;
}

int wp_raw_read_mem(const void *data, size_t len, struct wp_profile *out, struct wp_raw_info *info,
		    char *err, size_t errlen)
{
	struct wp_raw_info dummy;
	struct wp_raw_dump d;
	uint64_t cost = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	memset(&d, 0, sizeof(d));
	if (!info)
		info = &dummy;
	memset(info, 0, sizeof(*info));
	if (!data)
		len = 0;
	if (wp_raw_parse(&d, data, len, err, errlen) < 0)
		goto fail;
	info->signal = d.signal;
	info->dump_ns = d.dump_ns;
	info->start_ns = d.start_ns;
	info->nr_ring_samples = d.ns;
	info->bytes = len;
	rc = build_window(&d, out, info);
	if (rc == -2) {
		wp_raw_set_err(err, errlen, "corrupt: the stacks hold more than 2^32 frames");
		goto fail;
	}
	if (rc == -3) {
		wp_raw_set_err(err, errlen, "corrupt: its samples stand for more than %llu ticks",
			       MAX_EXPANDED);
		goto fail;
	}
	if (rc < 0 || build_modules(&d, out) < 0 ||
	    path_cost(out, (uint64_t)len * WP_RAW_PATH_BUDGET, &cost) < 0 ||
	    build_threads(&d, out) < 0 ||
	    !(out->cmdline = wp_raw_dup_bytes(d.cmdline ? d.cmdline : (const unsigned char *)"",
					      d.cmdline_len))) {
		wp_raw_set_err(err, errlen, "out of memory");
		goto fail;
	}
	if (cost) {
		wp_raw_set_err(
			err, errlen,
			"corrupt: its %zu frames would repeat more than %llu bytes of module "
			"paths (%d per byte of the %zu-byte dump)",
			out->nr_pcs, (unsigned long long)len * WP_RAW_PATH_BUDGET,
			WP_RAW_PATH_BUDGET, len);
		goto fail;
	}
	out->start_ns = out->nr_samples ? out->samples[0].t_ns : d.start_ns;
	out->end_ns = out->nr_samples ? wp_profile_last_ns(out) : d.dump_ns;
	out->realtime_offset_ns = d.rt_offset;
	out->pid = d.pid;
	out->main_tid = d.main_tid;
	out->hz = d.hz;
	out->ring_seconds = d.ring_seconds;
	out->max_depth = d.max_depth;
	out->snapshot = (int)(d.snapshot <= 1000000u ? d.snapshot : 0);
	out->has_profiler_id = d.have_run;
	memcpy(out->profiler_id, d.profiler_id, sizeof(out->profiler_id));
	out->chunks_on = !!(d.run_flags & WP_RUN_CHUNKS_ON);
	if (d.run_flags & WP_RUN_TAIL)
		out->tail_chunk = d.chunk <= 100000000u ? d.chunk : 0;
	else
		out->chunk = d.chunk <= 100000000u ? d.chunk : 0;
	out->chunk_from_ns = d.chunk_from_ns;
	out->chunk_to_ns = d.chunk_to_ns;
	out->ring_bytes = d.ring_bytes;
	out->ring_samples = d.ring_cap;
	out->counters = d.ctr;
	out->counters.nr_overwritten = d.overwritten;
	out->counters.nr_dropped_full = d.dropped_full;
	wp_raw_dump_free(&d);
	return 0;
fail:
	wp_raw_dump_free(&d);
	wp_profile_free(out);
	memset(info, 0, sizeof(*info));
	return -1;
}

/* What a file that is not a regular one is, for the message. */
static const char *file_kind(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	return "of an unknown type";
}

/* Reads up to n bytes at buf; returns the count (short at EOF) or -1. */
static ssize_t read_full(int fd, unsigned char *buf, size_t n)
{
	size_t got = 0;

	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);

		if (r > 0)
			got += (size_t)r;
		else if (r == 0)
			break;
		else if (errno != EINTR)
			return -1;
	}
	return (ssize_t)got;
}

/* Only a regular file, and only the st_size bytes it had when opened: a
 * FIFO, a device (/dev/zero) or a file that keeps growing would otherwise
 * be read without end. The header is checked before the rest is read, so a
 * large foreign file costs 16 bytes, not its size in memory. */
int wp_raw_read_ex(const char *path, struct wp_profile *out, struct wp_raw_info *info, char *err,
		   size_t errlen)
{
	unsigned char *buf = NULL, head[16];
	size_t size, len;
	struct stat st;
	ssize_t n;
	int fd, rc;

	memset(out, 0, sizeof(*out));
	if (info)
		memset(info, 0, sizeof(*info));
	/* stat() first: opening a device can have effects of its own. */
	if (stat(path, &st) < 0) {
		wp_raw_set_err(err, errlen, "cannot open: %s", strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		wp_raw_set_err(err, errlen, "not a regular file (%s)", file_kind(st.st_mode));
		return -1;
	}
	/* O_NONBLOCK: a FIFO swapped in since the stat() must not block open() */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		wp_raw_set_err(err, errlen, "cannot open: %s", strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0)
		goto read_error;
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		wp_raw_set_err(err, errlen, "not a regular file (%s)", file_kind(st.st_mode));
		return -1;
	}
	if (st.st_size <= 0) {
		close(fd);
		wp_raw_set_err(err, errlen, "empty file (not a wallprof raw dump)");
		return -1;
	}
	if ((uint64_t)st.st_size >= SIZE_MAX / 2) {
		close(fd);
		wp_raw_set_err(err, errlen, "too large (%lld bytes)", (long long)st.st_size);
		return -1;
	}
	size = (size_t)st.st_size;
	n = read_full(fd, head, size < sizeof(head) ? size : sizeof(head));
	if (n < 0)
		goto read_error;
	if (wp_raw_check_header(head, (size_t)n, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	/* One byte more than the size to see a file that grew meanwhile. */
	buf = malloc(size + 1);
	if (!buf) {
		close(fd);
		wp_raw_set_err(err, errlen, "out of memory reading %zu bytes", size);
		return -1;
	}
	memcpy(buf, head, (size_t)n);
	len = (size_t)n;
	n = read_full(fd, buf + len, size + 1 - len);
	if (n < 0)
		goto read_error;
	len += (size_t)n;
	close(fd);
	if (len > size) {
		free(buf);
		wp_raw_set_err(err, errlen,
			       "the file grew while it was read (is it still being written?)");
		return -1;
	}
	rc = wp_raw_read_mem(buf, len, out, info, err, errlen);
	free(buf);
	return rc;
read_error:
	rc = errno;
	free(buf);
	close(fd);
	wp_raw_set_err(err, errlen, "cannot read: %s", strerror(rc));
	return -1;
}

int wp_raw_read(const char *path, struct wp_profile *out, int *fatal_signal, char *err,
		size_t errlen)
{
	struct wp_raw_info info;
	int rc = wp_raw_read_ex(path, out, &info, err, errlen);

	if (fatal_signal)
		*fatal_signal = rc == 0 ? info.signal : 0;
	return rc;
}
