/* ring: circular sample store with deduplicated frame and stack tables
 * (open addressing, indices into flat arrays), compacted in place when full.
 * Single-owner by contract (see ring.h), so there is no locking at all. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ring_int.h"
#include "test_hooks.h"

#define EMPTY 0u /* hash slots hold index + 1 */
#define DEFAULT_TICKS 4096
#define DEFAULT_MAX_RUN 128
#define PAGE 4096

static uint64_t ring_serials; /* rings are created by one thread at a time */

/* What a ref must carry to be current: this ring, this compaction epoch
 * (never 0, so a zeroed ref never matches). */
static uint64_t ref_gen(const struct wp_ring *r)
{
	return (r->serial << 32) + r->stats.nr_compactions + 1;
}

WP_AS_SAFE static size_t pow2_at_least(size_t n)
{
	size_t p = 16;

	while (p < n)
		p <<= 1;
	return p;
}

static uint64_t mix64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ull;
	x ^= x >> 33;
	return x;
}

static uint32_t hash_words(const uint32_t *w, unsigned n)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
	unsigned i;

	for (i = 0; i < n; i++)
		h = mix64(h ^ w[i]) + i;
	return (uint32_t)h;
}

/* Layout of the single mapping that holds every table. */
struct layout {
	size_t samples, ticks, pcs, pc_hash, words, stack_off, stack_len, stack_hashv, stack_hash,
		total;
};

WP_AS_SAFE static void plan(const struct wp_ring_config *cfg, struct layout *l)
{
	size_t off = 0;

#define TAKE(field, bytes)                           \
	do {                                         \
		l->field = off;                      \
		off += ((bytes) + 63) & ~(size_t)63; \
	} while (0)
	TAKE(samples, cfg->nr_samples * sizeof(struct rsample));
	TAKE(ticks,
	     pow2_at_least(cfg->nr_ticks ? cfg->nr_ticks : DEFAULT_TICKS) * sizeof(uint64_t));
	TAKE(pcs, cfg->nr_pcs * sizeof(struct wp_pc));
	TAKE(pc_hash, pow2_at_least(cfg->nr_pcs * 2) * sizeof(uint32_t));
	TAKE(words, cfg->nr_words * sizeof(uint32_t));
	TAKE(stack_off, cfg->nr_stacks * sizeof(uint32_t));
	TAKE(stack_len, cfg->nr_stacks * sizeof(uint32_t));
	TAKE(stack_hashv, cfg->nr_stacks * sizeof(uint32_t));
	TAKE(stack_hash, pow2_at_least(cfg->nr_stacks * 2) * sizeof(uint32_t));
#undef TAKE
	l->total = off;
}

void wp_ring_default_config(struct wp_ring_config *cfg, uint64_t samples, uint64_t window_ns)
{
	cfg->nr_samples = samples > 4u << 20 ? 4u << 20 : samples;
	cfg->nr_pcs = 1u << 16;
	cfg->nr_stacks = 1u << 16;
	cfg->nr_words = 1u << 21;
	cfg->window_ns = window_ns;
	cfg->nr_ticks = DEFAULT_TICKS;
	cfg->max_run = DEFAULT_MAX_RUN;
}

WP_AS_SAFE size_t wp_ring_bytes(const struct wp_ring_config *cfg)
{
	struct layout l;

	plan(cfg, &l);
	return l.total + sizeof(struct wp_ring);
}

struct wp_ring *wp_ring_create(const struct wp_ring_config *cfg)
{
	struct wp_ring *r;
	struct layout l;
	char *base;

	if (cfg->nr_samples == 0 || cfg->nr_pcs == 0 || cfg->nr_stacks == 0 ||
	    cfg->nr_words < RING_MAX_FRAMES || cfg->nr_pcs > UINT32_MAX / 2 ||
	    cfg->nr_stacks > UINT32_MAX / 2 || cfg->nr_words > UINT32_MAX ||
	    cfg->nr_ticks > WP_RING_MAX_TICKS || cfg->max_run > COUNT_MASK) {
		errno = EINVAL;
		return NULL;
	}
	plan(cfg, &l);
	/* One anonymous mapping: pages cost memory only once touched. */
	base = mmap(NULL, l.total + sizeof(*r), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
	if (base == MAP_FAILED)
		return NULL;
	/* Not inherited by a forked child (wp_tick_forked): the child's
	 * sampler makes a ring of its own, and a fork in the middle of a
	 * replacement of this one leaves the child nothing to free. */
	(void)madvise(base, l.total + sizeof(*r), MADV_DONTFORK);
	r = (struct wp_ring *)(base + l.total);
	r->cfg = *cfg;
	if (!r->cfg.nr_ticks)
		r->cfg.nr_ticks = DEFAULT_TICKS;
	if (!r->cfg.max_run)
		r->cfg.max_run = DEFAULT_MAX_RUN;
	r->serial = ++ring_serials;
	r->map = base;
	r->map_len = l.total + sizeof(*r);
	r->samples = (struct rsample *)(base + l.samples);
	r->ticks = (uint64_t *)(base + l.ticks);
	r->tick_mask = (uint32_t)pow2_at_least(r->cfg.nr_ticks) - 1;
	r->pcs = (struct wp_pc *)(base + l.pcs);
	r->pc_hash = (uint32_t *)(base + l.pc_hash);
	r->pc_hash_size = pow2_at_least(cfg->nr_pcs * 2);
	r->words = (uint32_t *)(base + l.words);
	r->stack_off = (uint32_t *)(base + l.stack_off);
	r->stack_len = (uint32_t *)(base + l.stack_len);
	r->stack_hashv = (uint32_t *)(base + l.stack_hashv);
	r->stack_hash = (uint32_t *)(base + l.stack_hash);
	r->stack_hash_size = pow2_at_least(cfg->nr_stacks * 2);
	return r;
}

void wp_ring_destroy(struct wp_ring *r)
{
	if (r)
		munmap(r->map, r->map_len);
}

/* A hash slot, read with a write access. The tables are anonymous memory
 * touched as they fill, at random places: a plain read of an untouched page
 * maps the shared zero page, and the insert that follows must replace it,
 * which flushes that address from the TLB of every CPU the program runs on:
 * an interprocessor interrupt for each, taking its CPU from the program (a
 * VM exit on both sides in a virtual machine). An exchange-and-add of 0 is
 * one read-modify-write instruction: it faults the page in writable at once
 * and leaves the value as it was. In assembly, because a compiler may turn
 * an atomic add of 0 into a plain load; no lock prefix, the ring has one
 * owner. With a compiler as the program, a third of the sampler's CPU went
 * to these flushes (docs/PERFORMANCE.md, "Where the cost goes"). Test:
 * test_ring's test_one_fault_per_page. */
static inline uint32_t slot_load(uint32_t *slot)
{
#if defined(__x86_64__) || defined(__i386__)
	uint32_t v = 0;

	__asm__ volatile("xaddl %0, %1" : "+r"(v), "+m"(*slot));
	return v;
#else
	return __atomic_fetch_add(slot, 0u, __ATOMIC_RELAXED);
#endif
}

static uint32_t pc_slot(const struct wp_ring *r, uint64_t addr, uint32_t flags)
{
	return (uint32_t)mix64(addr * 2 + flags) & (r->pc_hash_size - 1);
}

/* Index of (addr, flags) in the frame table, inserting it; -1 when full. */
static int64_t pc_intern(struct wp_ring *r, uint64_t addr, uint32_t flags)
{
	size_t mask = r->pc_hash_size - 1;
	size_t i = pc_slot(r, addr, flags);
	uint32_t v;

	while ((v = slot_load(&r->pc_hash[i])) != EMPTY) {
		const struct wp_pc *p = &r->pcs[v - 1];

		if (p->addr == addr && p->flags == flags)
			return v - 1;
		i = (i + 1) & mask;
	}
	if (r->nr_pcs == r->cfg.nr_pcs)
		return -1;
	r->pcs[r->nr_pcs].addr = addr;
	r->pcs[r->nr_pcs].flags = flags;
	r->pc_hash[i] = (uint32_t)++r->nr_pcs;
	return (int64_t)r->nr_pcs - 1;
}

/* Index of the stack w[0..n) in the stack table, inserting it; -1 when full. */
static int64_t stack_intern(struct wp_ring *r, const uint32_t *w, unsigned n)
{
	size_t mask = r->stack_hash_size - 1;
	uint32_t h = hash_words(w, n);
	size_t i = h & mask;
	uint32_t v;

	while ((v = slot_load(&r->stack_hash[i])) != EMPTY) {
		uint32_t s = v - 1;

		if (r->stack_hashv[s] == h && r->stack_len[s] == n &&
		    memcmp(&r->words[r->stack_off[s]], w, n * sizeof(*w)) == 0)
			return s;
		i = (i + 1) & mask;
	}
	if (r->nr_stacks == r->cfg.nr_stacks || r->cfg.nr_words - r->nr_words < n)
		return -1;
	memcpy(&r->words[r->nr_words], w, n * sizeof(*w));
	r->stack_off[r->nr_stacks] = (uint32_t)r->nr_words;
	r->stack_len[r->nr_stacks] = n;
	r->stack_hashv[r->nr_stacks] = h;
	r->nr_words += n;
	r->stack_hash[i] = (uint32_t)++r->nr_stacks;
	return (int64_t)r->nr_stacks - 1;
}

/* Garbage-collects frames and stacks no live sample uses. Stacks and frames
 * keep their relative order, so both tables compact in place. */
static int compact(struct wp_ring *r)
{
	uint32_t *smap = calloc(r->nr_stacks ? r->nr_stacks : 1, sizeof(*smap));
	uint32_t *pmap = calloc(r->nr_pcs ? r->nr_pcs : 1, sizeof(*pmap));
	size_t k, s, nw = 0, ns = 0, np = 0;

	if (!smap || !pmap) {
		free(smap);
		free(pmap);
		return -1;
	}
	r->stats.nr_compactions++;
	for (k = 0; k < r->count; k++)
		smap[sample_at(r, k)->stack] = 1;
	for (s = 0; s < r->nr_stacks; s++) {
		uint32_t off = r->stack_off[s], len = r->stack_len[s], j;

		if (!smap[s])
			continue;
		for (j = 0; j < len; j++)
			pmap[r->words[off + j]] = 1;
	}
	/* New frame indices, frames moved down. */
	for (k = 0; k < r->nr_pcs; k++) {
		if (!pmap[k])
			continue;
		r->pcs[np] = r->pcs[k];
		pmap[k] = (uint32_t)np++;
	}
	/* New stack indices, stack words moved down and renumbered. */
	for (s = 0; s < r->nr_stacks; s++) {
		uint32_t off = r->stack_off[s], len = r->stack_len[s], j;

		if (!smap[s])
			continue;
		for (j = 0; j < len; j++)
			r->words[nw + j] = pmap[r->words[off + j]];
		r->stack_off[ns] = (uint32_t)nw;
		r->stack_len[ns] = len;
		r->stack_hashv[ns] = hash_words(&r->words[nw], len);
		nw += len;
		smap[s] = (uint32_t)ns++;
	}
	for (k = 0; k < r->count; k++) {
		struct rsample *x = sample_at(r, k);

		x->stack = smap[x->stack];
	}
	r->nr_pcs = np;
	r->nr_stacks = ns;
	r->nr_words = nw;
	/* Rebuild both hash indexes. */
	memset(r->pc_hash, 0, r->pc_hash_size * sizeof(uint32_t));
	for (k = 0; k < np; k++) {
		size_t i = pc_slot(r, r->pcs[k].addr, r->pcs[k].flags);

		while (r->pc_hash[i] != EMPTY)
			i = (i + 1) & (r->pc_hash_size - 1);
		r->pc_hash[i] = (uint32_t)k + 1;
	}
	memset(r->stack_hash, 0, r->stack_hash_size * sizeof(uint32_t));
	for (s = 0; s < ns; s++) {
		size_t i = r->stack_hashv[s] & (r->stack_hash_size - 1);

		while (r->stack_hash[i] != EMPTY)
			i = (i + 1) & (r->stack_hash_size - 1);
		r->stack_hash[i] = (uint32_t)s + 1;
	}
	free(smap);
	free(pmap);
	return 0;
}

/* Maps pcs[] to frame indices in r->scratch; -1 when the frame table is full. */
static int intern_frames(struct wp_ring *r, const uint64_t *pcs, unsigned n, int exact_leaf)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		int64_t idx = pc_intern(r, pcs[i], (i == 0 && exact_leaf) ? WP_PC_EXACT : 0);

		if (idx < 0)
			return -1;
		r->scratch[i] = (uint32_t)idx;
	}
	return 0;
}

/* The number of the tick at `t`: a time newer than every tick known is a
 * new tick; a known tick's time has its number (looked up among the last
 * few); any other time has none (returns 0, *ok 0). */
static uint32_t tick_of(struct wp_ring *r, uint64_t t, int *ok)
{
	uint32_t n = r->tick_newest;
	uint64_t k;

	*ok = 1;
	if (r->tick_nr == 0 || t > r->ticks[n & r->tick_mask]) {
		n++;
		r->ticks[n & r->tick_mask] = t;
		r->tick_newest = n;
		if (r->tick_nr <= r->tick_mask)
			r->tick_nr++;
		return n;
	}
	for (k = 0; k < 8 && k < r->tick_nr; k++, n--) {
		uint64_t x = r->ticks[n & r->tick_mask];

		if (x == t)
			return n;
		if (x < t)
			break;
	}
	*ok = 0;
	return 0;
}

/* Gives back to the kernel the pages of the sample array that the head
 * left behind (from the record at old_head on), so that the memory the
 * ring holds follows what it keeps rather than the most it ever kept. The
 * first page may still hold the newest records (the ring wrapped to just
 * behind the head); the last page may be shared with the next table. */
static void release_behind(struct wp_ring *r, size_t old_head)
{
	size_t per = PAGE / sizeof(struct rsample), cap = r->cfg.nr_samples;
	size_t npages = (cap + per - 1) / per, p = old_head / per, to = r->head / per;
	size_t tail = r->count ? ((r->head + r->count - 1) % cap) / per : (size_t)-1;
	size_t run_from = 0, run_len = 0;

	while (p != to) {
		int free_page = p != tail && (p + 1) * per <= cap;

		if (free_page && run_len && run_from + run_len == p) {
			run_len++;
		} else {
			if (run_len)
				madvise(&r->samples[run_from * per], run_len * PAGE, MADV_DONTNEED);
			run_from = p;
			run_len = free_page;
		}
		p = p + 1 == npages ? 0 : p + 1;
	}
	if (run_len)
		madvise(&r->samples[run_from * per], run_len * PAGE, MADV_DONTNEED);
}

static void drop_head(struct wp_ring *r)
{
	r->head = (r->head + 1) % r->cfg.nr_samples;
	r->count--;
	r->base++;
}

/* Expires what fell out of the window (which frees table entries too). */
static void expire(struct wp_ring *r, uint64_t t_ns)
{
	size_t old = r->head;

	while (r->count > 0 && rec_end(r, sample_at(r, 0)) + r->cfg.window_ns < t_ns)
		drop_head(r);
	if (r->head != old)
		release_behind(r, old);
}

/* The ticks record x stands for: its count, or for an open record every
 * tick from its first to the newest. */
static uint32_t rec_ticks(const struct wp_ring *r, const struct rsample *x)
{
	if ((x->count & (COUNT_TICKED | COUNT_OPEN)) == (COUNT_TICKED | COUNT_OPEN))
		return r->tick_newest - x->tick + 1;
	return x->count & COUNT_MASK;
}

/* Makes room for one record: overwrites the oldest if full. An open
 * record counts the ticks it was stored with; its parked thread's sampler
 * counts the rest (wp_ring_lost), which it alone knows. */
static void make_room(struct wp_ring *r)
{
	if (r->count == r->cfg.nr_samples) {
		r->stats.nr_overwritten += sample_at(r, 0)->count & COUNT_MASK;
		drop_head(r);
	}
}

/* The record `run` names, if it is still in the ring; else NULL. */
static struct rsample *run_record(const struct wp_ring *r, const struct wp_ring_run *run)
{
	if (!run || run->serial != r->serial || run->rec == 0 || run->rec - 1 < r->base ||
	    run->rec - 1 >= r->base + r->count)
		return NULL;
	return sample_at(r, run->rec - 1 - r->base);
}

/* Adds the sample to the thread's newest record when it continues it. */
static int extend(struct wp_ring *r, struct wp_ring_run *run, uint32_t tick, uint32_t tid,
		  uint32_t stack, uint32_t flags, uint32_t syscall)
{
	struct rsample *x = run_record(r, run);
	uint32_t n;

	if (!x || (x->count & COUNT_OPEN))
		return 0;
	n = x->count & COUNT_MASK;
	if (!(x->count & COUNT_TICKED) || x->tid != tid || x->stack != stack || x->flags != flags ||
	    x->syscall != syscall || n >= r->cfg.max_run || x->tick + n != tick)
		return 0;
	x->count++;
	r->stats.nr_added++;
	return 1;
}

static void append(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t stack, uint32_t flags,
		   uint32_t syscall, uint32_t tick, int ticked, struct wp_ring_run *run)
{
	struct rsample *x;

	make_room(r);
	x = sample_at(r, r->count);
	x->t_ns = t_ns;
	x->tid = tid;
	x->stack = stack;
	x->flags = flags;
	x->syscall = syscall;
	x->tick = tick;
	x->count = 1 | (ticked ? COUNT_TICKED : 0);
	if (run) {
		run->rec = r->base + r->count + 1;
		run->serial = r->serial;
	}
	r->count++;
	r->stats.nr_added++;
}

/* Stores the sample of stack id `stack`: extends `run` or appends. */
static void store(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t stack, uint32_t flags,
		  uint32_t syscall, uint32_t tick, int ticked, struct wp_ring_run *run)
{
	if (!(ticked && extend(r, run, tick, tid, stack, flags, syscall)))
		append(r, t_ns, tid, stack, flags, syscall, tick, ticked, run);
}

int wp_ring_add_ref(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t flags,
		    uint32_t syscall, const struct wp_ring_ref *ref, struct wp_ring_run *run)
{
	uint32_t tick;
	int ticked;

	if (ref->gen != ref_gen(r) || ref->stack >= r->nr_stacks)
		return -1;
	tick = tick_of(r, t_ns, &ticked);
	expire(r, t_ns);
	store(r, t_ns, tid, ref->stack, flags, syscall, tick, ticked, run);
	return 0;
}

int wp_ring_add(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t flags, uint32_t syscall,
		const uint64_t *pcs, unsigned n, int exact_leaf)
{
	return wp_ring_add_get_ref(r, t_ns, tid, flags, syscall, pcs, n, exact_leaf, NULL, NULL);
}

int wp_ring_add_get_ref(struct wp_ring *r, uint64_t t_ns, uint32_t tid, uint32_t flags,
			uint32_t syscall, const uint64_t *pcs, unsigned n, int exact_leaf,
			struct wp_ring_ref *ref, struct wp_ring_run *run)
{
	int64_t stack = -1;
	uint32_t tick;
	int attempt, ticked;

	if (n > RING_MAX_FRAMES) {
		n = RING_MAX_FRAMES;
		flags |= WP_SAMPLE_TRUNCATED;
	}
	tick = tick_of(r, t_ns, &ticked);
	expire(r, t_ns);
	for (attempt = 0; attempt < 2; attempt++) {
		if (intern_frames(r, pcs, n, exact_leaf) == 0 &&
		    (stack = stack_intern(r, r->scratch, n)) >= 0)
			break;
		if (attempt == 0 && compact(r) < 0)
			break;
	}
	if (stack < 0) {
		r->stats.nr_dropped_full++;
		return -1;
	}
	store(r, t_ns, tid, (uint32_t)stack, flags, syscall, tick, ticked, run);
	if (ref) {
		ref->stack = (uint32_t)stack;
		ref->gen = ref_gen(r);
	}
	return 0;
}

void wp_ring_tick(struct wp_ring *r, uint64_t t_ns)
{
	int ticked;

	tick_of(r, t_ns, &ticked);
	expire(r, t_ns);
}

int wp_ring_run_open(struct wp_ring *r, const struct wp_ring_run *run)
{
	struct rsample *x = run_record(r, run);

	/* Only a record that reaches the newest tick goes on from it. */
	if (!x || !(x->count & COUNT_TICKED) || (x->count & COUNT_OPEN) ||
	    x->tick + (x->count & COUNT_MASK) - 1 != r->tick_newest)
		return -1;
	x->count |= COUNT_OPEN;
	return 0;
}

uint32_t wp_ring_run_close(struct wp_ring *r, const struct wp_ring_run *run)
{
	struct rsample *x = run_record(r, run);
	uint32_t was, n;

	if (!x || !(x->count & COUNT_OPEN))
		return 0;
	was = x->count & COUNT_MASK;
	/* Through the tick before the newest: the newest is the one being
	 * sampled now. At least the ticks it had. */
	n = r->tick_newest - x->tick;
	if (n < was)
		n = was;
	if (n > COUNT_MASK)
		n = COUNT_MASK;
	x->count = (x->count & COUNT_TICKED) | n;
	r->stats.nr_added += n - was;
	return n;
}

void wp_ring_lost(struct wp_ring *r, uint64_t ticks)
{
	r->stats.nr_overwritten += ticks;
}

uint32_t wp_ring_run_ticks(const struct wp_ring *r, const struct wp_ring_run *run)
{
	const struct rsample *x = run_record(r, run);

	return x ? rec_ticks(r, x) : 0;
}

const struct wp_ring_stats *wp_ring_stats(const struct wp_ring *r)
{
	return &r->stats;
}

size_t wp_ring_nr_samples(const struct wp_ring *r)
{
	return r->count;
}

size_t wp_ring_nr_stacks(const struct wp_ring *r)
{
	return r->nr_stacks;
}

size_t wp_ring_nr_pcs(const struct wp_ring *r)
{
	return r->nr_pcs;
}
