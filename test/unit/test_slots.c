/* Unit tests of the slot table (preload/slots.c, slots.h), linked with the
 * runtime's slots.c itself (Makefile UNIT_RUNTIME_test_slots): claim and
 * release, one slot per tid (also when threads race for it), a full table,
 * the one reset (wp_slot_reset: a released slot is claimed back clean, field
 * by field; the sampler's restart forgets only `smp`; a forked child's
 * table), the calling thread's own slot (wp_slot_self, wp_slot_mine), a
 * wrapped call's publication, liveness and retraction, the pin, the
 * loader's users. The runtime's globals slots.c uses are defined here. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../unwind/unwind.h"
#include "../../preload/runtime.h"
#include "../../preload/sampler.h"
#include "../../preload/sigmask.h"
#include "../../preload/active.h"
#include "../../preload/slots.h"

#include "check.h"

/* What the library's other files define (lifecycle.c, sigmask.c, tick.c). */
struct wp_rt wp_rt;
__thread int wp_sigmask_bypass __attribute__((tls_model("initial-exec")));
__thread int wp_tls_internal __attribute__((tls_model("initial-exec")));
/* The library's logger (config.c), which timers.c calls: quiet here. */
void wp_log(int level, const char *fmt, ...)
{
	(void)level;
	(void)fmt;
}
/* park.c's end of a parked thread's record, which a release calls: no
 * slot is parked here (park.c needs the sampler's policy). */
void wp_park_release(struct wp_slot *s)
{
	(void)s;
}

#define DEPTH 16

/* A fresh table of `n` slots, sampling on. The previous one is left
 * mapped (a test process). */
static void setup(unsigned n)
{
	memset(&wp_rt, 0, sizeof(wp_rt));
	g->fix.cfg.max_threads = n;
	g->fix.cfg.max_depth = DEPTH;
	g->fix.pid = getpid();
	REQ(wp_slots_alloc(&g->fix.cfg) == 0);
	atomic_store(&g->sh.sampling, 1);
	wp_slot_forked(); /* this thread's TLS: no slot of an earlier table */
}

static uint32_t idx_of(const struct wp_slot *s)
{
	return (uint32_t)(s - g->tab.slots);
}

static uint32_t my_tid(void)
{
	return (uint32_t)syscall(SYS_gettid);
}

/* ---- claim, release, full ---- */

static void test_alloc(void)
{
	unsigned long pid_max = 0;
	FILE *f = fopen("/proc/sys/kernel/pid_max", "r");
	uint32_t i;

	if (f) {
		if (fscanf(f, "%lu", &pid_max) != 1)
			pid_max = 0;
		fclose(f);
	}
	setup(8);
	REQ(g->tab.nr_slots == 8 && g->tab.slots && g->tab.tid_slot && g->tab.bufs && g->tab.stks &&
	    g->tab.sites);
	REQ(pid_max == 0 || g->tab.nr_tids == pid_max + 1);
	REQ(g->tab.buf_depth == DEPTH + WP_UNW_SCRATCH);
	REQ(atomic_load(&g->tab.hiwater) == 0);
	for (i = 0; i < 8; i++)
		REQ(atomic_load(&g->tab.slots[i].state) == S_FREE &&
		    atomic_load(&g->tab.slots[i].tid) == 0);
	report("alloc: every slot free, a tid table up to pid_max, nothing in use");
}

static void test_claim_release(void)
{
	struct wp_slot *s, *t;
	uint32_t i, gen;

	setup(8);
	s = wp_slot_claim(1000);
	REQ(s != NULL);
	if (!s) {
		report("claim: a free slot for a tid, published in the tid table");
		return;
	}
	i = idx_of(s);
	REQ(atomic_load(&s->state) == S_IDLE && atomic_load(&s->tid) == 1000);
	REQ(atomic_load(&g->tab.tid_slot[1000]) == i + 1);
	REQ(atomic_load(&g->tab.hiwater) >= i + 1);
	REQ(s->buf == g->tab.bufs + i * g->tab.buf_depth && s->stk == g->tab.stks + i * DEPTH);
	REQ(atomic_load(&s->gen) == 1);
	report("claim: a free slot for a tid, published in the tid table");

	gen = atomic_load(&s->gen);
	s->smp.cpu_ns = 77;
	REQ(wp_slot_claim(1000) == s);
	REQ(atomic_load(&s->gen) == gen && s->smp.cpu_ns == 77);
	report("claim of a tid that has a slot: the same slot, not reset");

	REQ(wp_slot_claim(g->tab.nr_tids) == NULL && wp_slot_claim(UINT32_MAX) == NULL);
	report("claim of a tid past pid_max: none");

	wp_slot_release(s);
	REQ(atomic_load(&s->state) == S_FREE && atomic_load(&s->tid) == 0);
	REQ(atomic_load(&g->tab.tid_slot[1000]) == 0);
	REQ(atomic_load(&s->gen) == gen + 1);
	report("release: slot free, tid table entry cleared, a new generation");

	/* The tid's entry points elsewhere by now (another slot took the
	 * tid): a release of the old slot leaves it alone. */
	s = wp_slot_claim(1001);
	t = wp_slot_claim(1002);
	REQ(s && t && s != t);
	if (s && t) {
		atomic_store(&g->tab.tid_slot[1001], idx_of(t) + 1);
		wp_slot_release(s);
		REQ(atomic_load(&g->tab.tid_slot[1001]) == idx_of(t) + 1);
	}
	report("release: a tid table entry that names another slot stays");

	/* A stale entry (its slot changed hands) does not give that slot. */
	setup(8);
	s = wp_slot_claim(2000);
	if (s) {
		atomic_store(&s->tid, 2001); /* as if released and claimed by 2001 */
		t = wp_slot_claim(2000);
		REQ(t && t != s && atomic_load(&t->tid) == 2000);
		REQ(t && atomic_load(&g->tab.tid_slot[2000]) == idx_of(t) + 1);
	}
	REQ(s != NULL);
	report("claim: a stale tid table entry is replaced, its slot not taken");
}

static void test_full(void)
{
	struct wp_slot *s[4], *x;
	int distinct = 1;
	uint32_t i, j;

	setup(4);
	for (i = 0; i < 4; i++)
		s[i] = wp_slot_claim(3000 + i);
	for (i = 0; i < 4; i++)
		for (j = 0; j < i; j++)
			distinct &= s[i] && s[i] != s[j];
	REQ(s[0] && distinct);
	REQ(atomic_load(&g->tab.hiwater) == 4);
	REQ(wp_slot_claim(3100) == NULL);
	REQ(atomic_load(&g->tab.tid_slot[3100]) == 0);
	report("full table: four tids, four slots; a fifth gets none and no entry");

	if (s[2]) {
		wp_slot_release(s[2]);
		x = wp_slot_claim(3100);
		REQ(x == s[2] && atomic_load(&x->tid) == 3100);
		REQ(wp_slot_claim(3101) == NULL);
	}
	report("full table: a released slot is the one the next claim gets");
}

/* ---- the one reset ---- */

struct field {
	const char *name;
	size_t off, size;
};
#define F(x) { #x, offsetof(struct wp_slot, x), sizeof(((struct wp_slot *)0)->x) }

/* Every field of struct wp_slot, in order. test_field_table checks that
 * only the compiler's padding lies between them. */
static const struct field fields[] = {
	F(state),
	F(gen),
	F(tid),
	F(blk_pin),
	F(claim_next),
	F(buf),
	F(stk),
	F(thr.blk_seq),
	F(thr.blk_foreign),
	F(thr.blk_sysno),
	F(thr.blk_fn),
	F(thr.blk_regs),
	F(thr.blk_frame),
	F(thr.nr_foreign),
	F(thr.hdl_seq),
	F(thr.hdl_depth),
	F(thr.in_loader),
	F(thr.tp),
	F(thr.exiting),
	F(hdl.nr),
	F(hdl.uflags),
	F(hdl.timer),
	F(hdl.t_ns),
	F(hdl.ours_seq),
	F(hdl.rst_seq),
	F(hdl.rst_pc),
	F(hdl.rst_nr),
	F(hdl.rst_sp),
	F(hdl.cut_seq),
	F(hdl.cut_ret),
	F(smp.t_ns),
	F(smp.sig_sysno),
	F(smp.sampled_seq),
	F(smp.cached_nr),
	F(smp.cached_flags),
	F(smp.cached_sysno),
	F(smp.nr_cached_ok),
	F(smp.site_next),
	F(smp.site_last),
	F(smp.sites_used),
	F(smp.stk_gen),
	F(smp.stk_tp),
	F(smp.stk_lo),
	F(smp.stk_hi),
	F(smp.fp_sp),
	F(smp.fp_pc),
	F(smp.fp_nr),
	F(smp.cpu_ns),
	F(smp.cpu_at),
	F(smp.sig_last),
	F(smp.pend_ns),
	F(smp.nr_pend),
	F(smp.scan),
	F(smp.entry_serial),
	F(smp.stk_ref),
	F(smp.run),
	F(smp.act_pos),
	F(smp.parked),
	F(smp.park_tick),
	F(smp.park_counted),
	F(smp.cap_tick),
	F(smp.timer_id),
	F(smp.timer_on),
	F(smp.busy_ticks),
	F(smp.exit_tick),
};
#define NR_FIELDS (sizeof(fields) / sizeof(*fields))

static const struct field *field_named(const char *name)
{
	size_t i;

	for (i = 0; i < NR_FIELDS; i++)
		if (!strcmp(fields[i].name, name))
			return &fields[i];
	return NULL;
}

/* A field added to struct wp_slot and not to `fields` shows as a gap wider
 * than alignment needs (or a size that no longer adds up). */
static void test_field_table(void)
{
	size_t i, end = 0;

	for (i = 0; i < NR_FIELDS; i++) {
		REQ(fields[i].off >= end);
		REQ(fields[i].off - end < 8);
		end = fields[i].off + fields[i].size;
	}
	REQ(end <= sizeof(struct wp_slot) && sizeof(struct wp_slot) - end < 8);
	if (why[0])
		printf("     (struct wp_slot changed: list its fields in test_slots.c)\n");
	report("field table: covers struct wp_slot but for padding");
}

/* Fills every field but the ownership words with `pat`, the slot held
 * (S_CLAIMED) by tid `tid`. */
static void dirty(struct wp_slot *s, unsigned char pat)
{
	uint32_t gen = atomic_load(&s->gen);
	uint64_t *buf = s->buf, *stk = s->stk;

	memset(s, pat, sizeof(*s));
	atomic_store(&s->state, S_CLAIMED);
	atomic_store(&s->gen, gen);
	s->buf = buf;
	s->stk = stk;
}

/* The fields a WP_SLOT_WHOLE reset puts to a value of its own. Not
 * sites_used: what the slot's index has filled of the walk cache, whoever
 * owned it (so that lookups read no untouched page). */
static int reset_sets(const char *name)
{
	return strcmp(name, "state") && strcmp(name, "gen") && strcmp(name, "smp.pend_ns") &&
	       strcmp(name, "smp.sites_used");
}

static void check_clean(const struct wp_slot *s, uint32_t tid, uint32_t old_seq)
{
	uint32_t i = idx_of(s);
	static const struct wp_regs zero_regs;
	static const struct wp_ring_ref zero_ref;

	REQ(atomic_load(&s->tid) == tid);
	REQ(atomic_load(&s->blk_pin) == 0);
	REQ(s->buf == g->tab.bufs + i * g->tab.buf_depth && s->stk == g->tab.stks + i * DEPTH);
	/* not in a call, at a sequence no earlier owner holds */
	REQ(!(atomic_load(&s->thr.blk_seq) & 1));
	REQ(atomic_load(&s->thr.blk_seq) == (old_seq | 1) + 1);
	REQ(s->thr.blk_foreign == 0 && s->thr.blk_sysno == 0 && s->thr.blk_fn == 0 &&
	    s->thr.blk_frame == 0 && !memcmp(&s->thr.blk_regs, &zero_regs, sizeof(zero_regs)));
	REQ(atomic_load(&s->thr.nr_foreign) == 0 && atomic_load(&s->thr.hdl_seq) == 0 &&
	    atomic_load(&s->thr.hdl_depth) == 0 && atomic_load(&s->thr.in_loader) == 0 &&
	    s->thr.tp == 0 && atomic_load(&s->thr.exiting) == 0);
	REQ(s->hdl.nr == 0 && s->hdl.uflags == 0 && atomic_load(&s->hdl.ours_seq) == 0 &&
	    s->hdl.rst_seq == 0 && s->hdl.rst_pc == 0 && s->hdl.rst_nr == 0 && s->hdl.rst_sp == 0 &&
	    s->hdl.cut_seq == 0 && s->hdl.cut_ret == 0);
	REQ(s->smp.t_ns == 0 && s->smp.sig_sysno == 0 && s->smp.sampled_seq == 0 &&
	    s->smp.cached_nr == 0 && s->smp.cached_flags == 0 && s->smp.cached_sysno == 0 &&
	    s->smp.nr_cached_ok == 0 && s->smp.site_next == 0 && s->smp.site_last == 0);
	REQ(s->smp.stk_gen == 0 && s->smp.stk_tp == 0 && s->smp.stk_lo == 0 && s->smp.stk_hi == 0);
	REQ(s->smp.fp_sp == 0 && s->smp.fp_pc == 0 && s->smp.fp_nr == UINT64_MAX);
	REQ(s->smp.cpu_ns == WP_CPU_UNKNOWN && s->smp.cpu_at == 0 && s->smp.sig_last == 0 &&
	    s->smp.nr_pend == 0 && s->smp.exit_tick == 0);
	REQ(s->smp.scan == atomic_load(&g->tab.scan));
	REQ(atomic_load(&s->smp.entry_serial) == 0);
	REQ(!memcmp(&s->smp.stk_ref, &zero_ref, sizeof(zero_ref)));
	REQ(s->smp.run.rec == 0 && s->smp.run.serial == 0);
	REQ(s->smp.act_pos == 0 && s->smp.parked == 0 && s->smp.park_tick == 0);
}

static void test_reuse_clean(void)
{
	struct wp_slot *s, *t;
	uint32_t gen, seq;

	setup(1);
	s = wp_slot_claim(4000);
	REQ(s != NULL);
	if (!s) {
		report("reuse: a released slot is claimed back clean, field by field");
		return;
	}
	/* Its thread used every field, was inside a wrapped call (odd
	 * sequence), pinned, in the loader, exiting... */
	dirty(s, 0xa5);
	/* (but the sampler's list bookkeeping, which is never garbage: the
	 * slot is off the list and not parked when the sampler releases it
	 * here, never having gathered it) */
	s->smp.act_pos = 0;
	s->smp.parked = 0;
	atomic_store(&s->state, S_IDLE);
	atomic_store(&s->tid, 4000);
	atomic_store(&s->thr.blk_seq, 41);
	atomic_store(&g->tab.scan, 9);
	gen = atomic_load(&s->gen);
	wp_slot_release(s);
	REQ(atomic_load(&s->gen) == gen + 1);
	t = wp_slot_claim(4001);
	REQ(t == s);
	if (t == s) {
		REQ(atomic_load(&s->state) == S_IDLE && atomic_load(&s->gen) == gen + 2);
		check_clean(s, 4001, 41);
	}
	report("reuse: a released slot is claimed back clean, field by field");

	/* The same through the reset alone: whatever a field held, WHOLE puts
	 * the same value back (two different patterns give the same bytes). */
	if (t == s) {
		struct wp_slot a, b;
		size_t i;

		dirty(s, 0xa5);
		wp_slot_reset(s, WP_SLOT_WHOLE, 4002);
		a = *s;
		REQ(a.smp.sites_used == 0xa5a5a5a5u); /* kept, whatever it held */
		dirty(s, 0x5a);
		wp_slot_reset(s, WP_SLOT_WHOLE, 4002);
		b = *s;
		for (i = 0; i < NR_FIELDS; i++) {
			const struct field *f = &fields[i];

			if (!reset_sets(f->name) || !strcmp(f->name, "thr.blk_seq"))
				continue;
			if (memcmp((char *)&a + f->off, (char *)&b + f->off, f->size)) {
				REQ(!"a field WP_SLOT_WHOLE leaves as it was");
				printf("     (not reset: %s)\n", f->name);
			}
		}
		REQ(field_named("smp.pend_ns") && field_named("thr.blk_seq"));
		REQ(!(atomic_load(&a.thr.blk_seq) & 1) && !(atomic_load(&b.thr.blk_seq) & 1));
		check_clean(s, 4002, 0x5a5a5a5a);
		atomic_store(&s->state, S_IDLE);
	}
	report("WP_SLOT_WHOLE: every field reset whatever it held (but pend_ns, unused at 0, and "
	       "sites_used, kept)");

	/* A thread that still has the slot (it left a call by longjmp, or was
	 * taken for gone) cannot retract the new owner's publication. */
	if (t == s) {
		seq = atomic_load(&s->thr.blk_seq);
		wp_slot_reset(s, WP_SLOT_WHOLE, 4003);
		REQ(atomic_load(&s->thr.blk_seq) > seq);
		wp_block_leave(s, seq - 1); /* the old owner's odd sequence */
		REQ(atomic_load(&s->thr.blk_seq) == (seq | 1) + 1);
	}
	report("WP_SLOT_WHOLE: a sequence no earlier owner holds; an old wrapper's leave is a no-op");
}

static void test_reset_sampler(void)
{
	struct wp_slot *s, before;
	size_t i;

	setup(2);
	s = wp_slot_claim(5000);
	REQ(s != NULL);
	if (!s) {
		report("WP_SLOT_SAMPLER: smp forgotten but t_ns and pend_ns; thr, hdl, owner kept");
		return;
	}
	dirty(s, 0x3c);
	atomic_store(&s->state, S_SENT);
	atomic_store(&s->tid, 5000);
	atomic_store(&s->thr.blk_seq, 7);
	atomic_store(&g->tab.scan, 3);
	before = *s;
	wp_slots_sampler_restart();
	/* The parked bit of blk_pin is the sampler's: a restarted one has
	 * parked nothing. The rest of the word is the thread's. */
	REQ(!(atomic_load(&s->blk_pin) & WP_PIN_PARKED));
	atomic_store(&before.blk_pin, atomic_load(&before.blk_pin) & ~WP_PIN_PARKED);
	for (i = 0; i < NR_FIELDS; i++) {
		const struct field *f = &fields[i];
		int same = !memcmp((char *)&before + f->off, (char *)s + f->off, f->size);
		int smp = !strncmp(f->name, "smp.", 4) && strcmp(f->name, "smp.t_ns") &&
			  strcmp(f->name, "smp.pend_ns") && strcmp(f->name, "smp.sites_used");

		if (smp == same) {
			REQ(!"WP_SLOT_SAMPLER resets smp alone, but t_ns, pend_ns and sites_used");
			printf("     (%s %s)\n", f->name, same ? "kept" : "changed");
		}
	}
	REQ(s->smp.fp_nr == UINT64_MAX && atomic_load(&s->smp.entry_serial) == 0 &&
	    s->smp.scan == 3 && s->smp.nr_pend == 0 && s->smp.cached_nr == 0);
	report("WP_SLOT_SAMPLER: smp forgotten but t_ns and pend_ns; thr, hdl, owner kept");
}

static void test_after_fork(void)
{
	struct wp_slot *s[3];
	uint32_t i;

	setup(4);
	for (i = 0; i < 3; i++)
		s[i] = wp_slot_claim(6000 + i);
	REQ(s[0] && s[1] && s[2]);
	if (!(s[0] && s[1] && s[2])) {
		report("after fork, not followed: only the pins let go");
		return;
	}
	for (i = 0; i < 3; i++) {
		s[i]->smp.cpu_ns = 5;
		atomic_store(&s[i]->blk_pin, 1);
	}
	wp_slots_after_fork(0);
	for (i = 0; i < 3; i++)
		REQ(atomic_load(&s[i]->blk_pin) == 0 && atomic_load(&s[i]->state) == S_IDLE &&
		    s[i]->smp.cpu_ns == 5 && atomic_load(&s[i]->tid) == 6000 + i);
	report("after fork, not followed: only the pins let go");

	for (i = 0; i < 3; i++) {
		uint32_t q = atomic_load(&s[i]->thr.blk_seq);

		dirty(s[i], 0x77);
		atomic_store(&s[i]->state, S_IDLE);
		atomic_store(&s[i]->thr.blk_seq, q);
	}
	wp_slots_after_fork(1);
	REQ(atomic_load(&g->tab.hiwater) == 0);
	for (i = 0; i < 3; i++) {
		REQ(atomic_load(&s[i]->state) == S_FREE);
		check_clean(s[i], 0, atomic_load(&s[i]->thr.blk_seq) - 1);
	}
	/* The tid table is the parent's: a claim replaces the stale entry. */
	REQ(wp_slot_claim(6000) != NULL && atomic_load(&g->tab.hiwater) >= 1);
	report("after fork, followed: every slot reset and free, claims start over");
}

/* ---- racing claimers ---- */

#define RACERS 8
#define ROUNDS 300
static pthread_barrier_t race_bar;
static struct wp_slot *race_got[RACERS];
static _Atomic uint32_t race_tid;

static void *racer(void *arg)
{
	size_t k = (size_t)(uintptr_t)arg;
	int round;

	for (round = 0; round < ROUNDS; round++) {
		pthread_barrier_wait(&race_bar); /* go */
		race_got[k] = wp_slot_claim(atomic_load(&race_tid));
		pthread_barrier_wait(&race_bar); /* done */
	}
	return NULL;
}

static void test_race(void)
{
	pthread_t th[RACERS];
	int round, k, bad = 0, started = 0;
	uint32_t i;

	setup(RACERS * 2);
	pthread_barrier_init(&race_bar, NULL, RACERS + 1);
	for (k = 0; k < RACERS; k++)
		started += pthread_create(&th[k], NULL, racer, (void *)(uintptr_t)k) == 0;
	REQ(started == RACERS);
	if (started != RACERS) {
		report("racing claimers of one tid: all get the same slot, one slot in use");
		return; /* (the started racers stay blocked; the test fails anyway) */
	}
	for (round = 0; round < ROUNDS; round++) {
		uint32_t in_use = 0;

		atomic_store(&race_tid, 7000 + (uint32_t)round % 50);
		pthread_barrier_wait(&race_bar);
		pthread_barrier_wait(&race_bar);
		for (k = 1; k < RACERS; k++)
			bad += race_got[k] != race_got[0];
		bad += !race_got[0] || atomic_load(&race_got[0]->tid) != atomic_load(&race_tid);
		for (i = 0; i < g->tab.nr_slots; i++)
			in_use += atomic_load(&g->tab.slots[i].state) != S_FREE;
		bad += in_use != 1;
		if (race_got[0])
			wp_slot_release(race_got[0]);
	}
	for (k = 0; k < RACERS; k++)
		pthread_join(th[k], NULL);
	pthread_barrier_destroy(&race_bar);
	REQ(bad == 0);
	report("racing claimers of one tid: all get the same slot, one slot in use");
}

/* ---- the calling thread's slot ---- */

static void test_self(void)
{
	struct wp_slot *s, *t;

	setup(4);
	atomic_store(&g->sh.sampling, 0);
	REQ(wp_slot_self() == NULL && atomic_load(&g->tab.hiwater) == 0);
	atomic_store(&g->sh.sampling, 1);
	wp_tls_internal = 1;
	REQ(wp_slot_self() == NULL && atomic_load(&g->tab.hiwater) == 0);
	wp_tls_internal = 0;
	wp_sigmask_bypass = 1;
	REQ(wp_slot_self() == NULL && atomic_load(&g->tab.hiwater) == 0);
	wp_sigmask_bypass = 0;
	REQ(wp_slot_mine() == NULL);
	report("self: none when not sampling, on our own threads, in libunwind");

	s = wp_slot_self();
	REQ(s && atomic_load(&s->tid) == my_tid() && wp_tls_slot == s && wp_tls_tid == my_tid());
	REQ(s && s->thr.tp == (uint64_t)pthread_self());
	REQ(wp_slot_mine() == s && wp_slot_self() == s);
	/* The sampler, finding the thread in /proc, agrees. */
	REQ(wp_slot_claim(my_tid()) == s);
	report("self: the thread claims its slot; the sampler's claim finds the same");

	if (s) {
		wp_slot_release(s);
		REQ(wp_slot_mine() == NULL);
		t = wp_slot_self();
		REQ(t && atomic_load(&t->tid) == my_tid() && wp_slot_mine() == t);
	}
	report("self: a slot released under the thread is not its own; it claims again");

	/* A slot the sampler claimed for the thread, adopted by our handler. */
	setup(4);
	s = wp_slot_claim(my_tid());
	REQ(s && wp_slot_mine() == NULL);
	if (s) {
		wp_slot_adopt(s);
		REQ(wp_slot_mine() == s);
		wp_slot_forked();
		REQ(wp_slot_mine() == NULL && wp_tls_tid == 0);
	}
	report("adopt: a slot a scan gave the thread becomes its own; forked: forgotten");
}

/* ---- a wrapped call's publication ---- */

/* These functions keep their frames on the thread's real stack (ASan would
 * move the records to a fake stack of its own), and ask for the real stack
 * pointer: liveness is judged by where the records lie. */
#define REAL_STACK __attribute__((noinline, noclone, no_sanitize_address))

static inline __attribute__((always_inline)) uint64_t cur_sp(void)
{
	uint64_t sp;

	__asm__ volatile("mov %%rsp, %0" : "=r"(sp));
	return sp;
}

static uint32_t left_seq;
static uint64_t left_frame;

/* Enters a wrapped call and returns without leaving it (as a longjmp out
 * of the call would). */
REAL_STACK static void enter_and_leave_by_jump(void)
{
	struct wp_blk b;

	wp_block_enter(&b, SYS_read, (void *)read);
	left_seq = b.seq;
	left_frame = (uint64_t)(uintptr_t)&b;
	__asm__ volatile("" ::: "memory");
}

/* Overwrites the stack below the caller (where the left call's frame was). */
REAL_STACK static void scribble(void)
{
	volatile char junk[512];

	memset((char *)junk, 0x11, sizeof(junk));
	__asm__ volatile("" ::: "memory");
}

REAL_STACK static void nested_call(struct wp_blk *out)
{
	struct wp_blk b;

	wp_block_enter(&b, SYS_write, (void *)write);
	*out = b;
	wp_block_leave(b.s, b.seq);
}

REAL_STACK static void in_call(struct wp_slot *s)
{
	struct wp_blk b, inner;
	uint64_t sp = cur_sp();
	uint32_t q = atomic_load(&s->thr.blk_seq);
	int holds;

	wp_block_enter(&b, SYS_read, (void *)read);
	REQ(b.s == s && (b.seq & 1) && b.seq == q + 1);
	REQ(atomic_load(&s->thr.blk_seq) == b.seq);
	REQ(s->thr.blk_frame == (uint64_t)(uintptr_t)&b && s->thr.blk_sysno == SYS_read &&
	    s->thr.blk_fn == (uint64_t)(uintptr_t)read && s->thr.blk_regs.rsp != 0);
	report("block_enter: publishes registers, call, frame; the sequence goes odd");

	holds = wp_slot_record_holds((pid_t)my_tid(), (uint64_t)(uintptr_t)&b, s, b.seq);
	REQ(holds == 1 || holds == -1);
	if (holds == 1) {
		REQ(wp_slot_record_holds((pid_t)my_tid(), (uint64_t)(uintptr_t)&b, s, b.seq + 2) ==
		    0);
		REQ(wp_slot_record_holds((pid_t)my_tid(), 8, s, b.seq) == 0);
	} else {
		printf("     (process_vm_readv refused: record checks skipped)\n");
	}
	REQ(wp_slot_live(s, b.seq, sp, NULL));
	report("live: the record holds the slot and sequence, the frame is above sp");

	/* A handler's wrapped call inside (a deeper frame): the outer call
	 * keeps its context. */
	nested_call(&inner);
	REQ(inner.s == NULL && atomic_load(&s->thr.blk_seq) == b.seq &&
	    s->thr.blk_sysno == SYS_read);
	REQ(atomic_load(&s->thr.blk_seq) == b.seq);
	report("nested wrapped call: publishes nothing, the outer call stays");

	wp_block_leave(s, b.seq);
	REQ(atomic_load(&s->thr.blk_seq) == b.seq + 1);
	report("block_leave: the sequence goes even");
}

REAL_STACK static void test_publication(void)
{
	struct wp_slot *s;
	uint64_t sp;
	uint32_t q;
	struct wp_blk b;

	setup(2);
	s = wp_slot_self();
	REQ(s != NULL);
	if (!s)
		return;
	in_call(s);

	enter_and_leave_by_jump();
	scribble();
	sp = cur_sp();
	REQ((left_seq & 1) && atomic_load(&s->thr.blk_seq) == left_seq);
	REQ(left_frame < sp);
	REQ(!wp_slot_live(s, left_seq, sp, NULL));
	report("live: a call left by a jump (frame below sp) is not");

	/* The next wrapped call retracts it and publishes its own. */
	wp_block_enter(&b, SYS_read, (void *)read);
	q = b.seq;
	REQ(b.s == s && q == left_seq + 2 && s->thr.blk_frame == (uint64_t)(uintptr_t)&b);
	wp_block_leave(s, q);
	REQ(atomic_load(&s->thr.blk_seq) == q + 1);
	report("block_enter after a call left by a jump: retracts it, publishes anew");

	/* No slot: nothing published. */
	wp_slot_release(s);
	atomic_store(&g->sh.sampling, 0);
	wp_block_enter(&b, SYS_read, (void *)read);
	REQ(b.s == NULL && b.seq == 0);
	wp_block_leave(b.s, b.seq);
	report("block_enter without a slot: nothing published");
}

static void test_frame_left(void)
{
	char alt_mem[4096];
	stack_t alt = { .ss_sp = alt_mem, .ss_size = sizeof(alt_mem), .ss_flags = 0 };
	uintptr_t on_alt = (uintptr_t)alt_mem + 100, on_alt_hi = (uintptr_t)alt_mem + 2000;
	uintptr_t main_lo = 0x7000000000, main_hi = 0x7000001000;

	REQ(wp_slot_frame_left(main_lo, main_hi, NULL) == 1);
	REQ(wp_slot_frame_left(main_hi, main_lo, NULL) == 0);
	REQ(wp_slot_frame_left(main_hi, main_hi, NULL) == 0);
	REQ(wp_slot_frame_left(on_alt, on_alt_hi, &alt) == 1);
	REQ(wp_slot_frame_left(on_alt_hi, on_alt, &alt) == 0);
	/* a frame on the thread's stack under a handler on the alternate one */
	REQ(wp_slot_frame_left(main_lo, on_alt, &alt) == 0);
	/* a frame on the alternate stack once the thread runs elsewhere */
	REQ(wp_slot_frame_left(on_alt_hi, main_hi, &alt) == 1);
	report("frame_left: below sp on one stack; the alternate stack's frames once off it");
}

/* ---- pin, exit, loader ---- */

static void *unpin_later(void *arg)
{
	struct wp_slot *s = arg;
	struct timespec ts = { 0, 20000000 };

	nanosleep(&ts, NULL);
	/* as the sampler unpins (sample.c) */
	if (atomic_fetch_and(&s->blk_pin, ~(WP_PIN_HELD | WP_PIN_WAITING)) & WP_PIN_WAITING)
		syscall(SYS_futex, &s->blk_pin, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	return NULL;
}

static void test_pin_exit_loader(void)
{
	struct wp_slot *s, *other;
	pthread_t th;
	int saved;

	setup(4);
	s = wp_slot_self();
	other = wp_slot_claim(8000);
	REQ(s && other);
	if (!s || !other)
		return;
	atomic_store(&s->blk_pin, 1);
	REQ(pthread_create(&th, NULL, unpin_later, s) == 0);
	errno = 1234;
	wp_slot_wait_unpinned(s);
	saved = errno;
	pthread_join(th, NULL);
	REQ(atomic_load(&s->blk_pin) == 0 && saved == 1234);
	report("wait_unpinned: waits for the sampler's unpin, errno kept");

	wp_slot_exiting(other);
	REQ(atomic_load(&other->thr.exiting) == 0);
	wp_slot_exiting(s);
	REQ(atomic_load(&s->thr.exiting) == 1);
	report("exiting: marks the caller's own slot only");

	wp_sampler_loader_enter();
	wp_sampler_loader_enter();
	REQ(wp_tls_in_loader == 2 && atomic_load(&g->sh.loader_users) == 2 &&
	    atomic_load(&s->thr.in_loader) == 2);
	wp_sampler_loader_leave();
	REQ(wp_tls_in_loader == 1 && atomic_load(&g->sh.loader_users) == 1 &&
	    atomic_load(&s->thr.in_loader) == 1);
	/* The slot changes hands while the thread is in the loader. */
	wp_slot_release(s);
	wp_slot_reset(s, WP_SLOT_WHOLE, 8001);
	atomic_store(&s->thr.in_loader, 1);
	wp_sampler_loader_leave();
	REQ(wp_tls_in_loader == 0 && atomic_load(&g->sh.loader_users) == 0 &&
	    atomic_load(&s->thr.in_loader) == 1);
	report("loader: counted per thread, slot and process; a slot that changed hands is not");

	atomic_store(&g->sh.nr_eintr_retried, 0);
	wp_sampler_count_eintr_retry();
	REQ(atomic_load(&g->sh.nr_eintr_retried) == 1);
	report("eintr retries counted");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_alloc();
	test_claim_release();
	test_full();
	test_field_table();
	test_reuse_clean();
	test_reset_sampler();
	test_after_fork();
	test_race();
	test_self();
	test_publication();
	test_frame_left();
	test_pin_exit_loader();
	printf("slots: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
