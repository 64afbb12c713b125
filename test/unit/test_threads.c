/* Unit tests of the thread table (preload/threads.c, threads.h), linked
 * with the runtime's threads.c and slots.c (Makefile
 * UNIT_RUNTIME_test_threads): one entry per thread lifetime (a reused tid
 * gets a new one, the old keeps its name and counts), names from /proc and
 * their refresh, the prune (gone threads whose samples left the window are
 * forgotten, the others kept in order, a live thread keeps its entry), the
 * live flags a dump computes (never written in the table; right for the
 * view it loaded even when the sampler appends or rebuilds meanwhile), the
 * table's stability under a reader (what a dump holds never moves or
 * changes thread, whatever the sampler does meanwhile, and nothing is
 * rebuilt once a dump has asked the sampler to hold still), its memory
 * after a burst of threads, the restart, and the /proc listing (slots for
 * threads found, released for threads gone, sightings with no free slot
 * dropped and counted). test_threads_stress runs the table under a
 * concurrent reader and a same-thread signal. */
#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../../preload/runtime.h"
#include "../../preload/sigmask.h"
#include "../../preload/slots.h"
#include "../../preload/threads.h"

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

#define SEC 1000000000ull

/* Fake tids for threads that are not ours: below pid_max (the tid table),
 * not listed in /proc/self/task (no name is read for them). */
#define FAKE 20000u

/* A fresh slot table of `n` slots and an empty thread table; a window of
 * one second. */
static void setup(unsigned n)
{
	memset(&wp_rt, 0, sizeof(wp_rt));
	g->fix.cfg.max_threads = n;
	g->fix.cfg.max_depth = 16;
	g->fix.cfg.ring_seconds = 1;
	g->fix.pid = getpid();
	g->smp.sampler_tid = -1;
	REQ(wp_slots_alloc(&g->fix.cfg) == 0);
	wp_threads_restart();
	atomic_store(&g->sh.sampling, 1);
}

/* The table as a dump reads it: one load. */
static const struct wp_thread *table(size_t *nr)
{
	struct wp_threads_view v;

	wp_threads_view(&v);
	*nr = v.nr;
	return v.e;
}

/* The published entry at `k`, or NULL. */
static const struct wp_thread *entry(size_t k)
{
	size_t nr;
	const struct wp_thread *t = table(&nr);

	return k < nr ? &t[k] : NULL;
}

static void set_name(struct wp_thread *t, const char *name)
{
	memset(t->name, 0, sizeof(t->name));
	snprintf(t->name, sizeof(t->name), "%s", name);
}

/* ---- one entry per thread lifetime ---- */

static void test_lifetimes(void)
{
	struct wp_slot *a, *b;
	struct wp_thread *ta, *tb, *ta2;
	uint64_t t0 = wp_mono_ns();
	size_t nr;

	setup(8);
	a = wp_slot_claim(FAKE + 1);
	b = wp_slot_claim(FAKE + 2);
	REQ(a && b);
	if (!a || !b) {
		report("one entry per thread: made on first use, the same after");
		return;
	}
	ta = wp_threads_of(a);
	REQ(ta && ta->tid == FAKE + 1 && ta->nr_samples == 0 && ta->nr_signals == 0 &&
	    ta->flags == 0 && ta->last_ns >= t0 && !ta->name[0]);
	if (ta) {
		ta->nr_samples = 3;
		set_name(ta, "first");
	}
	tb = wp_threads_of(b);
	REQ(tb && tb->tid == FAKE + 2);
	ta = wp_threads_of(a);
	REQ(ta && ta->tid == FAKE + 1 && ta->nr_samples == 3 && !strcmp(ta->name, "first"));
	table(&nr);
	REQ(nr == 2 && entry(0)->tid == FAKE + 1 && entry(1)->tid == FAKE + 2);
	report("one entry per thread: made on first use, the same after");

	/* The thread ends; its tid goes to a new thread. */
	wp_slot_release(a);
	a = wp_slot_claim(FAKE + 1);
	REQ(a != NULL);
	ta2 = a ? wp_threads_of(a) : NULL;
	REQ(ta2 && ta2->tid == FAKE + 1 && ta2->nr_samples == 0 && !ta2->name[0]);
	if (ta2) {
		ta2->nr_samples = 1;
		set_name(ta2, "second");
	}
	table(&nr);
	REQ(nr == 3);
	REQ(nr == 3 && entry(0)->tid == FAKE + 1 && entry(0)->nr_samples == 3 &&
	    !strcmp(entry(0)->name, "first"));
	REQ(nr == 3 && entry(2)->tid == FAKE + 1 && entry(2)->nr_samples == 1 &&
	    !strcmp(entry(2)->name, "second"));
	report("a reused tid: a new entry, newest last; the old one keeps its name and counts");

	/* A slot reset (a forked child, a claim) is a new lifetime too. */
	if (b) {
		wp_slot_reset(b, WP_SLOT_WHOLE, FAKE + 2);
		tb = wp_threads_of(b);
		table(&nr);
		REQ(tb && nr == 4 && entry(3)->tid == FAKE + 2 && entry(1)->tid == FAKE + 2);
	}
	report("a slot reset: a new entry");

	/* WP_SLOT_SAMPLER and the table's restart: the sampler starts over. */
	wp_slots_sampler_restart();
	wp_threads_restart();
	table(&nr);
	REQ(nr == 0);
	ta = a ? wp_threads_of(a) : NULL;
	table(&nr);
	REQ(ta && nr == 1 && ta->tid == FAKE + 1 && ta->nr_samples == 0);
	report("restart: an empty table, slots get new entries");
}

/* ---- names ---- */

static pthread_mutex_t gate = PTHREAD_MUTEX_INITIALIZER;
static _Atomic uint32_t worker_tid;

static void *worker(void *arg)
{
	(void)arg;
	atomic_store(&worker_tid, (uint32_t)syscall(SYS_gettid));
	pthread_mutex_lock(&gate); /* held by the test until it is done */
	pthread_mutex_unlock(&gate);
	return NULL;
}

static void test_names(void)
{
	pthread_t th;
	struct wp_slot *s, *gone;
	struct wp_thread *t, *tg;
	struct timespec ms = { 0, 1000000 };
	int i;

	setup(8);
	pthread_mutex_lock(&gate);
	atomic_store(&worker_tid, 0);
	REQ(pthread_create(&th, NULL, worker, NULL) == 0);
	for (i = 0; i < 2000 && !atomic_load(&worker_tid); i++)
		nanosleep(&ms, NULL);
	REQ(pthread_setname_np(th, "wpt-worker") == 0);
	s = wp_slot_claim(atomic_load(&worker_tid));
	gone = wp_slot_claim(FAKE + 9);
	REQ(s && gone);
	if (!s || !gone) {
		pthread_mutex_unlock(&gate);
		pthread_join(th, NULL);
		report("names: read from /proc when the entry is made");
		return;
	}
	t = wp_threads_of(s);
	REQ(t && !strcmp(t->name, "wpt-worker"));
	report("names: read from /proc when the entry is made");

	tg = wp_threads_of(gone);
	if (tg)
		set_name(tg, "kept");
	wp_slot_release(gone);
	REQ(pthread_setname_np(th, "wpt-renamed") == 0);
	wp_threads_refresh_names();
	t = wp_threads_of(s);
	REQ(t && !strcmp(t->name, "wpt-renamed"));
	REQ(entry(1) && !strcmp(entry(1)->name, "kept"));
	report("names: a live thread's re-read, a gone thread's kept");

	pthread_mutex_unlock(&gate);
	pthread_join(th, NULL);
	wp_threads_refresh_names(); /* a live slot whose thread is gone: name kept */
	REQ(t && !strcmp(wp_threads_of(s)->name, "wpt-renamed"));
	report("names: kept when the thread is gone before the scan sees it");
}

/* ---- live flags ---- */

/* WP_THREAD_LIVE as a dump writes it for entry k of `v`. */
static int live(const struct wp_threads_view *v, size_t k)
{
	return wp_threads_flags(v, k) == WP_THREAD_LIVE;
}

static void test_live_flags(void)
{
	struct wp_slot *s[4];
	struct wp_threads_view v;
	size_t k;
	uint32_t i;

	setup(8);
	for (i = 0; i < 4; i++) {
		s[i] = wp_slot_claim(FAKE + 20 + i);
		REQ(s[i] && wp_threads_of(s[i]));
	}
	if (!s[0] || !s[1] || !s[2] || !s[3]) {
		report("live flags: the entries of live slots, only those");
		return;
	}
	wp_slot_release(s[1]);
	/* slot 2 is being claimed: not live yet, and its entry is the old
	 * thread's */
	atomic_store(&s[2]->state, S_CLAIMED);
	wp_threads_view(&v);
	REQ(v.nr == 4);
	for (k = 0; k < v.nr; k++)
		REQ(live(&v, k) == (k == 0 || k == 3));
	REQ(wp_threads_flags(&v, v.nr) == 0);
	atomic_store(&s[2]->state, S_IDLE);
	wp_slot_release(s[3]);
	for (k = 0; k < v.nr; k++)
		REQ(live(&v, k) == (k == 0 || k == 2));
	report("live flags: the entries of live slots, only those, as of the call");

	/* Another thread now has slot 0's tid in the tid table (slot 0's
	 * thread ended, the tid reused): the old entry is not live. */
	wp_slot_release(s[0]);
	s[0] = wp_slot_claim(FAKE + 20);
	REQ(s[0] && !live(&v, 0));
	REQ(s[0] && wp_threads_of(s[0]) && !live(&v, 0));
	wp_threads_view(&v);
	REQ(v.nr == 5 && !live(&v, 0) && live(&v, 4));
	for (k = 0; k < v.nr; k++)
		REQ(v.e[k].flags == 0);
	report("live flags: a reused tid's old entry not live; the table's flags never written");
}

/* Finding of a review: a dump marked the live entries in the table, then
 * loaded the table again; an entry made in between (the sampler not parked
 * yet), or a rebuild, gave it wrong flags. Now a dump loads the table once
 * and computes each entry's flag as it writes it. */
static void test_live_one_load(void)
{
	struct wp_slot *a, *b, *c, *x[200];
	struct wp_threads_view v, w;
	uint64_t now = wp_mono_ns() + 10 * SEC;
	size_t k, nr;
	uint32_t i;

	setup(256);
	a = wp_slot_claim(FAKE + 40);
	b = wp_slot_claim(FAKE + 41);
	REQ(a && b && wp_threads_of(a) && wp_threads_of(b));
	if (!a || !b) {
		report("one load: an entry made after the dump's load leaves its flags alone");
		return;
	}
	atomic_fetch_or(&g->sh.events, EV_FREEZE);
	wp_threads_view(&v);
	/* the sampler, not parked yet, makes an entry for a new thread */
	c = wp_slot_claim(FAKE + 42);
	REQ(c && wp_threads_of(c));
	REQ(v.nr == 2 && live(&v, 0) && live(&v, 1) && v.e[0].tid == FAKE + 40 &&
	    v.e[1].tid == FAKE + 41);
	wp_threads_view(&w);
	REQ(w.nr == 3 && w.e == v.e);
	for (k = 0; k < w.nr; k++)
		REQ(live(&w, k));
	report("one load: an entry made after the dump's load leaves its flags alone");
	atomic_fetch_and(&g->sh.events, ~(uint32_t)EV_FREEZE);

	/* A rebuild (growth) published between the dump's load and its
	 * writing (one under way when the dump asked the sampler to hold
	 * still): the flags of what it loaded are still right. */
	wp_slot_release(b);
	wp_threads_view(&v);
	for (i = 0; i < 200 && table(&nr) == v.e; i++) {
		x[i] = wp_slot_claim(FAKE + 100 + i);
		REQ(x[i] && wp_threads_of(x[i]));
	}
	wp_threads_view(&w);
	REQ(w.e != v.e && w.nr == 3 + i);
	REQ(v.nr == 3 && live(&v, 0) && !live(&v, 1) && live(&v, 2));
	/* and a prune's rebuild */
	wp_threads_view(&v);
	wp_slot_release(x[0]);
	wp_threads_prune(now);
	REQ(table(&nr) != v.e && nr == v.nr - 2);
	REQ(v.nr > 4 && live(&v, 0) && !live(&v, 1) && live(&v, 2) && !live(&v, 3) && live(&v, 4));
	report("one load: a rebuild after the dump's load leaves its flags right");
}

/* ---- prune ---- */

static void test_prune(void)
{
	struct wp_slot *gone_old, *gone_new, *live_old, *live_new;
	struct wp_thread *t;
	uint64_t now = wp_mono_ns() + 10 * SEC;
	size_t nr;

	setup(8);
	gone_old = wp_slot_claim(FAKE + 30);
	live_old = wp_slot_claim(FAKE + 31);
	gone_new = wp_slot_claim(FAKE + 32);
	live_new = wp_slot_claim(FAKE + 33);
	REQ(gone_old && gone_new && live_old && live_new);
	if (!gone_old || !gone_new || !live_old || !live_new) {
		report("prune: gone threads out of the window forgotten, the rest kept in order");
		return;
	}
	/* last samples: out of the window (now - 1 s), just in, long ago, now */
	(t = wp_threads_of(gone_old))->last_ns = now - SEC - 1;
	set_name(t, "gone-old");
	(t = wp_threads_of(live_old))->last_ns = now - 5 * SEC;
	set_name(t, "live-old");
	t->nr_samples = 42;
	(t = wp_threads_of(gone_new))->last_ns = now - SEC;
	set_name(t, "gone-new");
	(t = wp_threads_of(live_new))->last_ns = now;
	set_name(t, "live-new");
	wp_slot_release(gone_old);
	wp_slot_release(gone_new);
	wp_threads_prune(now);
	table(&nr);
	REQ(nr == 3);
	REQ(nr == 3 && !strcmp(entry(0)->name, "live-old") && !strcmp(entry(1)->name, "gone-new") &&
	    !strcmp(entry(2)->name, "live-new"));
	report("prune: gone threads out of the window forgotten, the rest kept in order");

	t = wp_threads_of(live_old);
	table(&nr);
	REQ(nr == 3 && t && t->tid == FAKE + 31 && t->nr_samples == 42 &&
	    !strcmp(t->name, "live-old"));
	t = wp_threads_of(live_new);
	REQ(t && t->tid == FAKE + 33 && !strcmp(t->name, "live-new"));
	table(&nr);
	REQ(nr == 3);
	report("prune: a live thread keeps its entry (no new one, same name and counts)");

	wp_threads_prune(now + SEC);
	table(&nr);
	REQ(nr == 2 && !strcmp(entry(0)->name, "live-old") && !strcmp(entry(1)->name, "live-new"));
	wp_threads_prune(now + 100 * SEC);
	table(&nr);
	REQ(nr == 2);
	report("prune: later, the other gone thread too; live ones never");
}

/* ---- stability under a reader ---- */

static void test_stable(void)
{
	struct wp_slot *s[200];
	struct wp_thread *saved;
	const struct wp_thread *view, *view2;
	size_t nr, nr2, k;
	uint64_t now = wp_mono_ns() + 10 * SEC;
	uint32_t i;

	setup(256);
	for (i = 0; i < 40; i++) {
		struct wp_thread *t;

		s[i] = wp_slot_claim(FAKE + 100 + i);
		t = s[i] ? wp_threads_of(s[i]) : NULL;
		REQ(t != NULL);
		if (t) {
			t->nr_samples = i;
			t->last_ns = i % 2 ? now : now - 2 * SEC;
			snprintf(t->name, sizeof(t->name), "t%u", i);
		}
	}
	/* Of every four: gone long ago, gone lately, live, live. */
	for (i = 0; i < 40; i++)
		if (s[i] && i % 4 < 2)
			wp_slot_release(s[i]);
	if (why[0]) {
		report("a reader's table: unchanged by a prune and by growth (nothing moved or freed)");
		return;
	}

	/* A dump reads the table as it is now, while the sampler rebuilds it
	 * (a prune: the rebuild that may be under way when a dump asks the
	 * sampler to hold still; EV_FREEZE stops the next one, below). */
	view = table(&nr);
	saved = malloc(nr * sizeof(*saved));
	memcpy(saved, view, nr * sizeof(*saved));
	wp_threads_prune(now);
	REQ(table(&nr2) != view);
	REQ(nr == 40 && !memcmp(view, saved, nr * sizeof(*saved)));
	report("a reader's table: unchanged by a rebuild under it (nothing moved or freed)");

	/* New entries, the table grows. */
	for (i = 40; i < 200; i++) {
		s[i] = wp_slot_claim(FAKE + 100 + i);
		REQ(s[i] && wp_threads_of(s[i]));
	}
	view2 = table(&nr2);
	REQ(nr2 == 40 - 10 + 160);
	for (k = 0, i = 0; i < 40 && k < nr2; i++) {
		if (i % 4 == 0)
			continue; /* forgotten */
		REQ(view2[k].tid == FAKE + 100 + i && view2[k].nr_samples == i);
		k++;
	}
	for (; i < 200 && k < nr2; i++, k++)
		REQ(view2[k].tid == FAKE + 100 + i);
	for (i = 0; i < 40; i++) {
		const struct wp_thread *t = i % 4 >= 2 && s[i] ? wp_threads_of(s[i]) : NULL;
		char name[16];

		snprintf(name, sizeof(name), "t%u", i);
		REQ(i % 4 < 2 || (t && t->tid == FAKE + 100 + i && !strcmp(t->name, name)));
	}
	table(&nr2);
	REQ(nr2 == 40 - 10 + 160);
	report("pruned and grown: survivors in order, every live slot's entry its own");

	/* A dump has asked the sampler to hold still, then reads: nothing is
	 * rebuilt, the entries it reads stay (new ones come after them). */
	for (i = 41; i < 200; i += 2)
		if (s[i])
			wp_slot_release(s[i]);
	atomic_fetch_or(&g->sh.events, EV_FREEZE);
	view = table(&nr);
	free(saved);
	saved = malloc(nr * sizeof(*saved));
	memcpy(saved, view, nr * sizeof(*saved));
	wp_threads_prune(now + 100 * SEC);
	view2 = table(&nr2);
	REQ(view2 == view && nr2 == nr && !memcmp(view, saved, nr * sizeof(*saved)));
	report("frozen for a dump: a prune leaves the table alone");

	/* Full while frozen: no entry rather than a rebuild. */
	for (i = 0; view2 == view && i < 100000; i++) {
		struct wp_slot *x = wp_slot_claim(FAKE + 1000 + i % 8000);

		if (!x)
			break;
		if (!wp_threads_of(x)) {
			view2 = NULL;
			break;
		}
		wp_slot_release(x);
		view2 = table(&nr2);
	}
	REQ(view2 == NULL && table(&nr2) == view && nr2 > nr);
	REQ(!memcmp(view, saved, nr * sizeof(*saved)));
	report("frozen for a dump: a full table makes no entry rather than moving");

	atomic_fetch_and(&g->sh.events, ~(uint32_t)EV_FREEZE);
	wp_threads_prune(now + 100 * SEC);
	view2 = table(&nr2);
	REQ(view2 != view && nr2 < nr);
	report("thawed: the next prune rebuilds");
	free(saved);
}

/* ---- memory after a burst ---- */

/* Resident KiB of the process. */
static long rss_kib(void)
{
	long size = 0, res = 0;
	FILE *f = fopen("/proc/self/statm", "r");

	if (f && fscanf(f, "%ld %ld", &size, &res) != 2)
		res = 0;
	if (f)
		fclose(f);
	return res * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Finding of a review: the table's buffers only grew, so a burst of short
 * threads left the table at its peak for good. A prune that keeps few
 * entries remaps both buffers small. */
static void test_burst(void)
{
	long r0, grown, left;
	size_t nr;
	uint32_t i;

	setup(64);
	r0 = rss_kib();
	for (i = 0; i < 200000; i++) {
		struct wp_slot *x = wp_slot_claim(FAKE + i % 10000);

		if (x) {
			wp_threads_of(x);
			wp_slot_release(x);
		}
	}
	table(&nr);
	grown = rss_kib() - r0;
	REQ(nr == 200000 && grown >= 8 * 1024);
	wp_threads_prune(wp_mono_ns() + 100 * SEC);
	table(&nr);
	left = rss_kib() - r0;
	REQ(nr == 0 && left < grown / 8);
	printf("     (200000 entries: +%ld KiB; pruned to 0: +%ld KiB)\n", grown, left);
	report("a burst of threads: the prune gives the table's memory back");
}

/* ---- the /proc listing ---- */

#define WORKERS 6
static pthread_barrier_t scan_bar;

static void *parked(void *arg)
{
	(void)arg;
	pthread_barrier_wait(&scan_bar); /* started */
	pthread_barrier_wait(&scan_bar); /* the test is done */
	return NULL;
}

/* Threads of ours in /proc/self/task now. */
static size_t nr_listed(void)
{
	DIR *d = opendir("/proc/self/task");
	struct dirent *e;
	size_t n = 0;

	while (d && (e = readdir(d)))
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void test_scan(void)
{
	pthread_t th[WORKERS];
	struct wp_slot *fake;
	uint32_t i, used = 0;
	size_t listed;
	int started = 0;

	pthread_barrier_init(&scan_bar, NULL, WORKERS + 1);
	for (i = 0; i < WORKERS; i++)
		started += pthread_create(&th[i], NULL, parked, NULL) == 0;
	REQ(started == WORKERS);
	if (started != WORKERS) {
		report("scan: a slot for every thread listed");
		return;
	}
	pthread_barrier_wait(&scan_bar);

	setup(64);
	fake = wp_slot_claim(FAKE + 500); /* not a thread of ours */
	REQ(fake != NULL);
	wp_threads_scan();
	listed = nr_listed();
	for (i = 0; i < g->tab.nr_slots; i++)
		used += atomic_load(&g->tab.slots[i].state) >= S_IDLE;
	REQ(listed >= WORKERS + 1 && used == listed);
	REQ(g->tab.tid_slot[getpid()] != 0 && g->smp.ctr.nr_threads_untracked == 0);
	report("scan: a slot for every thread listed");
	REQ(fake && atomic_load(&fake->state) == S_FREE && g->tab.tid_slot[FAKE + 500] == 0);
	report("scan: the slot of a thread no longer listed is released");

	/* Fewer slots than threads: the sightings left over are counted. */
	setup(3);
	wp_threads_scan();
	listed = nr_listed();
	used = 0;
	for (i = 0; i < g->tab.nr_slots; i++)
		used += atomic_load(&g->tab.slots[i].state) >= S_IDLE;
	REQ(used == 3 && g->smp.ctr.nr_threads_untracked == listed - 3);
	wp_threads_scan();
	REQ(g->smp.ctr.nr_threads_untracked == 2 * (listed - 3));
	report("scan: table full, each sighting without a slot dropped and counted");

	/* Our own thread (the sampler) is never given a slot. */
	setup(64);
	g->smp.sampler_tid = (pid_t)syscall(SYS_gettid);
	wp_threads_scan();
	REQ(g->tab.tid_slot[syscall(SYS_gettid)] == 0);
	report("scan: the sampler's own thread gets no slot");

	pthread_barrier_wait(&scan_bar);
	for (i = 0; i < WORKERS; i++)
		pthread_join(th[i], NULL);
	pthread_barrier_destroy(&scan_bar);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	REQ(wp_threads_alloc() == 0);
	report("alloc");
	test_lifetimes();
	test_names();
	test_live_flags();
	test_live_one_load();
	test_prune();
	test_stable();
	test_burst();
	test_scan();
	printf("threads: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
