/* threads: the thread table (every thread seen, with its latest name and
 * counts) and the /proc/self/task listings: finding threads no wrapper
 * announced, confirming exits, the leader's end, whether any other thread
 * lives on (see threads.h). */
#include <dirent.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_hooks.h"
#include "runtime.h"
#include "sampler.h"
#include "active.h"
#include "slots.h"
#include "threads.h"

/* The thread table. A dump reads it (wp_threads_view, then
 * wp_threads_flags per entry) while the sampler is parked, but also while
 * the sampler runs on (a raw dump that stopped waiting for it to park) or
 * from a fatal signal on the sampler thread itself, in the middle of
 * anything below; two dumps may read it at once (the sampler's snapshot, a
 * fatal signal's on another thread). Only the sampler (or the exiting
 * thread) writes it: a dump writes nothing here, and computes each entry's
 * WP_THREAD_LIVE as it writes it (entry_live). So a published entry never
 * moves, never goes to another thread and its memory is never freed while
 * a dump may read it:
 *
 * - entries are made past the published count, which is raised only once
 *   the entry is written (and every entry is a new thread's: its serial
 *   number, `id`, is new);
 * - counts and names are updated in place (a dump may read a name half
 *   old, half new: acceptable, and byte 15 is always NUL, so it is never
 *   unterminated); `flags` stays 0 in the table;
 * - the table is pruned or grown by copying the entries it keeps, in
 *   order, into the other of its two buffers, which nobody reads, and
 *   publishing that buffer in one store (`pub`, buffer and count);
 * - a rebuild writes (or remaps) only the buffer not published when it
 *   begins, and none begins once a raw dump has asked the sampler to hold
 *   still (EV_FREEZE, set before the dump reads): the buffer a dump holds,
 *   read after that request, is not written until the dump is over (the
 *   process ends, or a failed exec thaws the sampler).
 *
 * That last point is a Dekker pattern: the dump stores EV_FREEZE then
 * loads `pub`; the sampler stores `pub` (publishing a rebuild) then loads
 * EV_FREEZE before the next rebuild. Both sides must be seq_cst (plain
 * atomic_load/atomic_store/atomic_fetch_or, or seq_cst fences): with
 * release/acquire alone each side may miss the other's store, the dump
 * holding a buffer the sampler's next rebuild writes. Do not relax them.
 *
 * A slot names its thread's entry by that serial (smp.entry_serial), found
 * in the published buffer by a binary search (serials ascend in table
 * order): nothing in a slot is renumbered when the table changes. */
struct tbuf {
	struct wp_thread *e; /* entries, in the order they were made */
	uint64_t *id;        /* id[k]: the serial of e[k], ascending */
	size_t cap;          /* entries the mapping holds */
	size_t map_len;
};

#define PUB_BUF (1ull << 63) /* pub: which buffer, above the entry count */

/* The sampler's, or the exiting thread's once the sampler is joined (the
 * dump's reads aside, as above). */
static struct {
	struct tbuf buf[2];
	_Atomic uint64_t pub;       /* the published table: PUB_BUF (buffer 1) | count */
	uint64_t next_id;           /* serial of the last entry made (0: none yet; serials
				     * start at 1, as 0 in a slot means no entry) */
	char *dents;                /* getdents64 buffer for /proc/self/task */
	size_t dents_len;
	size_t name_cursor;         /* wp_threads_refresh_some's place */
	size_t name_owed;           /* ... and the share of an entry it owes */
} thr;

int wp_threads_alloc(void)
{
	void *p;

	thr.dents_len = 64 * 1024;
	p = mmap(NULL, thr.dents_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	thr.dents = p == MAP_FAILED ? NULL : p;
	return thr.dents ? 0 : -1;
}

/* The published buffer and its count, read in one load. The sampler
 * writes through it (counts, names, appends past the count); a dump only
 * reads (wp_threads_view). async-signal-safe */
WP_AS_SAFE static struct tbuf *published(size_t *n)
{
	uint64_t v = atomic_load(&thr.pub);

	*n = (size_t)(v & ~PUB_BUF);
	return &thr.buf[(v & PUB_BUF) != 0];
}

static void publish(const struct tbuf *b, size_t n)
{
	atomic_store(&thr.pub, (b == &thr.buf[1] ? PUB_BUF : 0) | n);
}

/* Index of the entry with serial `id` in b->e[0 .. n), or n if none.
 * async-signal-safe */
WP_AS_SAFE static size_t find(const struct tbuf *b, size_t n, uint64_t id)
{
	size_t lo = 0, hi = n;

	while (id && lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (b->id[mid] < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return id && lo < n && b->id[lo] == id ? lo : n;
}

/* Whether a rebuild may write the buffer nobody should be reading: not
 * once a raw dump has asked the sampler to hold still. */
static int may_rebuild(void)
{
	return !(atomic_load(&g->sh.events) & EV_FREEZE);
}

/* Maps the unpublished buffer anew for `cap` entries (its contents are not
 * kept); the old mapping stays on failure. Returns 0 or -1. */
static int remap(struct tbuf *b, size_t cap)
{
	size_t len = cap * (sizeof(*b->e) + sizeof(*b->id));
	void *p;

	len = (len + 4095) & ~(size_t)4095;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	(void)madvise(p, len, MADV_DONTFORK); /* wp_threads_forked */
	if (b->e)
		munmap(b->e, b->map_len);
	b->e = p;
	b->id = (uint64_t *)(void *)(b->e + cap);
	b->cap = cap;
	b->map_len = len;
	return 0;
}

/* Gives the unpublished buffer room for `cap` entries, and no more than
 * four times that (thread churn does not leave the table at its peak).
 * Returns 0 or -1. */
static int reserve(struct tbuf *b, size_t cap)
{
	if (b->cap >= cap && b->cap <= 4 * cap)
		return 0;
	return remap(b, cap);
}

/* Whether the entry with serial `id` and thread `tid` is a live thread's:
 * the slot the tid table gives for `tid` is in use (S_IDLE or later), still
 * that tid's, and names this entry. A live slot is in the tid table from
 * its claim to its release, and no other slot names the entry, so this is
 * "some live slot names it", without a walk of the slots. The one test of
 * liveness: the prune, the names' refresh and a dump's flags.
 * async-signal-safe */
WP_AS_SAFE static int entry_live(uint32_t tid, uint64_t id)
{
	const struct wp_slot *s;
	uint32_t idx;

	if (!g->tab.tid_slot || tid >= g->tab.nr_tids)
		return 0;
	idx = atomic_load_explicit(&g->tab.tid_slot[tid], memory_order_acquire);
	if (!idx || idx > g->tab.nr_slots)
		return 0;
	s = &g->tab.slots[idx - 1];
	return atomic_load_explicit(&s->state, memory_order_acquire) >= S_IDLE &&
	       atomic_load_explicit(&s->tid, memory_order_relaxed) == tid &&
	       atomic_load_explicit(&s->smp.entry_serial, memory_order_relaxed) == id;
}

/* Whether entry k is kept: a live thread's, or one whose samples may still
 * be in the window ending at `now`. */
static int keep(const struct tbuf *b, size_t k, uint64_t now)
{
	uint64_t window = (uint64_t)g->fix.cfg.ring_seconds * 1000000000ull;

	return b->e[k].last_ns + window >= now || entry_live(b->e[k].tid, b->id[k]);
}

/* Copies the entries kept (all of them without `now`) into the other
 * buffer, with room for `extra` more, and publishes it. The buffer left
 * behind is remapped smaller too if it is over four times the size needed
 * and no dump has asked to hold still since the publication (a dump that
 * loaded it before would have: see the Dekker note above). Returns 0, or
 * -1 (no memory, or a dump is reading). */
static int rebuild(uint64_t now, size_t extra)
{
	size_t n, k, m = 0, want;
	struct tbuf *b = published(&n);
	struct tbuf *o = &thr.buf[b == &thr.buf[0]];

	if (!may_rebuild())
		return -1;
	for (k = 0; k < n; k++)
		m += !now || keep(b, k, now);
	want = 2 * (m + extra) > 64 ? 2 * (m + extra) : 64;
	if (reserve(o, want) < 0)
		return -1;
	for (k = 0, m = 0; k < n && m < o->cap; k++) {
		if (now && !keep(b, k, now))
			continue; /* (liveness may change between the two passes) */
		o->e[m] = b->e[k];
		o->id[m++] = b->id[k];
	}
	publish(o, m);
	if (b->cap > 4 * want && may_rebuild())
		remap(b, want);
	return 0;
}

/* A thread's comm into `name`, left as it was when it cannot be read. */
static void read_comm(uint32_t tid, char name[16])
{
	char path[64], buf[16];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%u/comm", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, buf, 15);
	close(fd);
	if (n <= 0)
		return;
	if (buf[n - 1] == '\n')
		n--;
	memset(buf + n, 0, sizeof(buf) - (size_t)n);
	/* A dump may be reading it: one copy, which it may see torn (half old,
	 * half new name), never unterminated (byte 15 is 0 in both). */
	memcpy(name, buf, sizeof(buf));
}

/* The entry of a slot's thread, made on first use (one per thread
 * lifetime: a slot reset clears entry_serial). A NULL answer loses the
 * thread's counts of this tick: counted in nr_threads_untracked. */
struct wp_thread *wp_threads_of(struct wp_slot *s)
{
	size_t n, k;
	struct tbuf *b = published(&n);
	struct wp_thread *t;

	k = find(b, n, atomic_load_explicit(&s->smp.entry_serial, memory_order_relaxed));
	if (k < n)
		return &b->e[k];
	if (n == b->cap) {
		if (rebuild(0, 1) < 0) {
			g->smp.ctr.nr_threads_untracked++;
			return NULL;
		}
		b = published(&n);
	}
	t = &b->e[n];
	memset(t, 0, sizeof(*t));
	t->tid = atomic_load(&s->tid);
	t->last_ns = wp_mono_ns();
	read_comm(t->tid, t->name);
	b->id[n] = ++thr.next_id;
	atomic_store_explicit(&s->smp.entry_serial, thr.next_id, memory_order_relaxed);
	publish(b, n + 1);
	return t;
}

/* Lists /proc/self/task: finds threads no wrapper or pthread_create hook
 * registered (raw clone, threads started before us), and confirms exits. */
void wp_threads_scan(void)
{
	int fd = open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	uint32_t i, hw;

	if (fd < 0)
		return;
	/* Before the listing: a thread that takes a slot from now on, maybe
	 * too late to be listed, takes this number with it (wp_slot_reset). */
	atomic_fetch_add(&g->tab.scan, 1);
	for (;;) {
		long n = wp_syscall(SYS_getdents64, fd, thr.dents, thr.dents_len);
		long off = 0;

		if (n <= 0)
			break;
		while (off < n) {
			struct {
				uint64_t ino;
				int64_t off;
				unsigned short reclen;
				unsigned char type;
				char name[];
			} *d = (void *)(thr.dents + off);
			char *end;
			unsigned long tid = strtoul(d->name, &end, 10);
			struct wp_slot *s;

			off += d->reclen;
			if (*end || tid == 0 || (pid_t)tid == g->smp.sampler_tid)
				continue;
			/* main() left through pthread_exit: a zombie until the end */
			if ((pid_t)tid == g->fix.pid && atomic_load(&g->sh.main_exited))
				continue;
			s = wp_slot_claim((uint32_t)tid);
			if (!s) {
				g->smp.ctr.nr_threads_untracked++;
				continue;
			}
			s->smp.scan = atomic_load_explicit(&g->tab.scan, memory_order_relaxed);
		}
	}
	close(fd);
	if (WP_TESTING)
		wp_test_hold_us(g->fix.cfg.test_scan_hold_us);
	/* Slots still on the claim stack are not to be released (active.h). */
	wp_active_gather_claims();
	hw = atomic_load(&g->tab.hiwater);
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];
		uint32_t st = atomic_load(&s->state);

		/* Neither listed nor claimed since the listing began: gone.
		 * One with a signal in flight or a capture waiting is on the
		 * active list: its visit this tick finds it gone too, and keeps
		 * the capture or counts the signal lost (release_gone). */
		if (st == S_IDLE &&
		    s->smp.scan != atomic_load_explicit(&g->tab.scan, memory_order_relaxed))
			wp_slot_release(s);
	}
}

/* Whether a thread of the program (not ours, not the exited main thread)
 * is still alive; confirmed by a fresh listing before answering no. */
int wp_threads_user_left(void)
{
	uint32_t i, hw = atomic_load(&g->tab.hiwater);
	int pass;

	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < hw; i++) {
			struct wp_slot *s = &g->tab.slots[i];

			if (atomic_load(&s->state) >= S_IDLE &&
			    atomic_load(&s->tid) != (uint32_t)g->fix.pid)
				return 1;
		}
		wp_threads_scan();
		hw = atomic_load(&g->tab.hiwater);
	}
	return 0;
}

/* The leader's clear-child-tid word (glibc's copy of its tid in its
 * thread descriptor, which the kernel zeroes when the leader ends as a
 * thread), or NULL when it is not known. */
static const volatile int *leader_word;

void wp_threads_note_leader(void)
{
	int *addr = NULL;

	leader_word = NULL;
	if ((uint32_t)wp_syscall(SYS_gettid) != (uint32_t)g->fix.pid)
		return;
	/* A kernel without checkpoint/restore support has no
	 * PR_GET_TID_ADDRESS: /proc is read instead. The word is in the
	 * leader's thread descriptor: the initial thread's is never freed;
	 * a fork child's leader's is a thread stack glibc may reuse only
	 * after that thread left by pthread_exit, which says so first
	 * (main_exited, after which the word is not read). */
	if (wp_syscall(SYS_prctl, PR_GET_TID_ADDRESS, &addr, 0, 0, 0) == 0 && addr &&
	    *addr == (int)g->fix.pid)
		leader_word = addr;
}

int wp_threads_leader_word_ended(void)
{
	return leader_word ? *leader_word == 0 : -1;
}

int wp_threads_leader_ended(void)
{
	int w = wp_threads_leader_word_ended();

	return w >= 0 ? w : wp_threads_leader_ended_proc();
}

int wp_threads_leader_proc(void)
{
	char path[64], buf[512];
	const char *p;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)g->fix.pid);
	if (wp_sys_read_file(path, buf, sizeof(buf)) <= 0 || !(p = strrchr(buf, ')')) ||
	    p[1] != ' ')
		return -1;
	return p[2] == 'Z' || p[2] == 'X';
}

int wp_threads_leader_ended_proc(void)
{
	return wp_threads_leader_proc() == 1;
}

/* Whether every thread of the program but the caller and the exited leader
 * is gone from /proc/self/task, waiting up to 50 ms for those still listed
 * (a thread that just ended is listed a little longer). A thread the count
 * never saw (C11 thrd_create, created before our constructor) stays: no. */
int wp_threads_others_gone(uint32_t self)
{
	int tries;

	for (tries = 0; tries < 50; tries++) {
		char buf[1024];
		int fd = (int)wp_syscall(SYS_openat, AT_FDCWD, "/proc/self/task",
					 O_RDONLY | O_DIRECTORY | O_CLOEXEC),
		    other = 0;
		long n;
		struct timespec ms = { 0, 1000000 };

		if (fd < 0)
			return 0;
		while (!other && (n = wp_syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
			long off;

			for (off = 0; off < n && !other;
			     off += ((struct dirent64 *)(buf + off))->d_reclen) {
				uint32_t tid =
					(uint32_t)strtoul(((struct dirent64 *)(buf + off))->d_name,
							  NULL, 10);

				other = tid && tid != self && tid != (uint32_t)g->fix.pid &&
					(pid_t)tid != g->smp.sampler_tid;
			}
		}
		wp_syscall(SYS_close, fd);
		if (!other)
			return 1;
		wp_syscall(SYS_nanosleep, &ms, NULL);
	}
	return 0;
}

/* Forgets threads that are gone and whose samples all left the window: the
 * others are copied into the table's other buffer (nothing is moved where
 * a dump may read it), which is remapped smaller when it is far too big
 * for them (reserve), and so is the buffer left behind (rebuild). */
void wp_threads_prune(uint64_t now)
{
	size_t n, k, drop = 0;
	const struct tbuf *b = published(&n);

	if (!n || !may_rebuild())
		return;
	for (k = 0; k < n && !drop; k++)
		drop = !keep(b, k, now);
	if (drop)
		rebuild(now, 0);
}

/* The latest names of live threads (not in a signal handler). */
void wp_threads_refresh_names(void)
{
	size_t n, k;
	struct tbuf *b = published(&n);

	for (k = 0; k < n; k++)
		if (entry_live(b->e[k].tid, b->id[k]))
			read_comm(b->e[k].tid, b->e[k].name);
}

void wp_threads_refresh_some(size_t every)
{
	size_t n;
	struct tbuf *b = published(&n);

	if (!n || !every)
		return;
	/* n reads spread over `every` calls: a read each time the share owed
	 * reaches a whole entry, from where the last one stopped. */
	for (thr.name_owed += n; thr.name_owed >= every; thr.name_owed -= every) {
		size_t i = thr.name_cursor++ % n;

		if (entry_live(b->e[i].tid, b->id[i]))
			read_comm(b->e[i].tid, b->e[i].name);
	}
}

/* async-signal-safe */
WP_AS_SAFE void wp_threads_view(struct wp_threads_view *v)
{
	const struct tbuf *b = published(&v->nr);

	v->e = b->e;
	v->id = b->id;
}

/* Live threads are listed even without samples (one that blocks our
 * signal, say), so that their signals and losses are accounted.
 * async-signal-safe */
WP_AS_SAFE uint32_t wp_threads_flags(const void *view, size_t k)
{
	const struct wp_threads_view *v = view;

	return k < v->nr && entry_live(v->e[k].tid, v->id[k]) ? WP_THREAD_LIVE : 0;
}

/* An empty table in the other buffer: the one published stays as it was
 * for whoever reads it (no one should, at a restart). */
void wp_threads_restart(void)
{
	size_t n;
	const struct tbuf *b = published(&n);

	publish(&thr.buf[b == &thr.buf[0]], 0);
}

void wp_threads_forked(void)
{
	memset(thr.buf, 0, sizeof(thr.buf));
	atomic_store(&thr.pub, 0);
	thr.name_cursor = thr.name_owed = 0;
}

/* async-signal-safe */
WP_AS_SAFE void wp_sampler_names_changed(void)
{
	atomic_store(&g->sh.names_dirty, 1);
}
