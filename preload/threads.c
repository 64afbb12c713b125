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
#include <sys/syscall.h>
#include <unistd.h>

#include "test_hooks.h"
#include "runtime.h"
#include "sampler.h"
#include "slots.h"
#include "threads.h"

/* The thread table. A dump reads it (wp_threads_mark_live,
 * wp_threads_table) while the sampler is parked, but also while the
 * sampler runs on (a raw dump that stopped waiting for it to park) or from
 * a fatal signal on the sampler thread itself, in the middle of anything
 * below. So a published entry never moves, never goes to another thread
 * and its memory is never freed while a dump may read it:
 *
 * - entries are made past the published count, which is raised only once
 *   the entry is written (and every entry is a new thread's: its serial
 *   number, `id`, is new);
 * - counts, names and flags are updated in place;
 * - the table is pruned or grown by copying the entries it keeps, in
 *   order, into the other of its two buffers, which nobody reads, and
 *   publishing that buffer in one store (`pub`, buffer and count);
 * - a rebuild writes only the buffer not published when it begins, and
 *   none begins once a raw dump has asked the sampler to hold still
 *   (EV_FREEZE, set before the dump reads): the buffer a dump holds, read
 *   after that request, is not written until the dump is over (the
 *   process ends, or a failed exec thaws the sampler).
 *
 * A slot names its thread's entry by that serial (smp.thread_id), found in
 * the published buffer by a binary search (serials ascend in table order):
 * nothing in a slot is renumbered when the table changes. */
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
	uint64_t next_id;           /* serial of the next entry (0: none) */
	char *dents;                /* getdents64 buffer for /proc/self/task */
	size_t dents_len;
} thr;

int wp_threads_alloc(void)
{
	void *p;

	thr.dents_len = 64 * 1024;
	p = mmap(NULL, thr.dents_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	thr.dents = p == MAP_FAILED ? NULL : p;
	return thr.dents ? 0 : -1;
}

/* The published buffer and its count, read in one load. async-signal-safe */
WP_AS_SAFE static const struct tbuf *published(size_t *n)
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

/* Gives the unpublished buffer room for `cap` entries (its contents are
 * not kept). Returns 0 or -1. */
static int reserve(struct tbuf *b, size_t cap)
{
	size_t len = cap * (sizeof(*b->e) + sizeof(*b->id));
	void *p;

	if (b->cap >= cap)
		return 0;
	len = (len + 4095) & ~(size_t)4095;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	if (b->e)
		munmap(b->e, b->map_len);
	b->e = p;
	b->id = (uint64_t *)(void *)(b->e + cap);
	b->cap = cap;
	b->map_len = len;
	return 0;
}

/* live[k] = 1 for the entries of b->e[0 .. n) a live slot names; NULL
 * without memory. */
static char *live_marks(const struct tbuf *b, size_t n)
{
	char *live = calloc(n + 1, 1);
	uint32_t i, hw = atomic_load(&g->tab.hiwater);

	for (i = 0; live && i < hw; i++) {
		const struct wp_slot *s = &g->tab.slots[i];

		if (atomic_load(&s->state) >= S_IDLE)
			live[find(b, n, s->smp.thread_id)] = 1;
	}
	return live;
}

/* Whether entry k is kept: a live thread's, or one whose samples may still
 * be in the window ending at `now`. */
static int keep(const struct tbuf *b, size_t k, const char *live, uint64_t now)
{
	uint64_t window = (uint64_t)g->fix.cfg.ring_seconds * 1000000000ull;

	return live[k] || b->e[k].last_ns + window >= now;
}

/* Copies the entries kept (all of them without `now`) into the other
 * buffer, with room for `extra` more, and publishes it. Returns 0, or -1
 * (no memory, or a dump is reading). */
static int rebuild(const char *live, uint64_t now, size_t extra)
{
	size_t n, k, m = 0;
	const struct tbuf *b = published(&n);
	struct tbuf *o = &thr.buf[b == &thr.buf[0]];

	if (!may_rebuild())
		return -1;
	for (k = 0; k < n; k++)
		m += !now || keep(b, k, live, now);
	if (reserve(o, 2 * (m + extra) > 64 ? 2 * (m + extra) : 64) < 0)
		return -1;
	for (k = 0, m = 0; k < n; k++) {
		if (now && !keep(b, k, live, now))
			continue;
		o->e[m] = b->e[k];
		o->id[m++] = b->id[k];
	}
	publish(o, m);
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
	memcpy(name, buf, sizeof(buf)); /* a dump may be reading it: one copy */
}

/* The entry of a slot's thread, made on first use (one per thread
 * lifetime: a slot reset clears thread_id). */
struct wp_thread *wp_threads_of(struct wp_slot *s)
{
	size_t n, k;
	const struct tbuf *b = published(&n);
	struct wp_thread *t;

	k = find(b, n, s->smp.thread_id);
	if (k < n)
		return &b->e[k];
	if (n == b->cap) {
		if (rebuild(NULL, 0, 1) < 0)
			return NULL;
		b = published(&n);
	}
	t = &b->e[n];
	memset(t, 0, sizeof(*t));
	t->tid = atomic_load(&s->tid);
	t->last_ns = wp_mono_ns();
	read_comm(t->tid, t->name);
	b->id[n] = ++thr.next_id;
	s->smp.thread_id = thr.next_id;
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
	if (WP_TESTING && g->fix.cfg.test_scan_hold_us) {
		struct timespec hold = { (time_t)(g->fix.cfg.test_scan_hold_us / 1000000),
					 (long)(g->fix.cfg.test_scan_hold_us % 1000000) * 1000 };

		wp_syscall(SYS_nanosleep, &hold, NULL);
	}
	hw = atomic_load(&g->tab.hiwater);
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];
		uint32_t st = atomic_load(&s->state);

		/* Neither listed nor claimed since the listing began: gone. */
		if (st >= S_IDLE &&
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

/* Whether the thread group's leader has ended as a thread (a zombie while
 * the other threads live on): main() left by a way we do not interpose
 * (thrd_exit, glibc's internal pthread_exit, a raw exit system call). */
int wp_threads_leader_ended(void)
{
	char path[64], buf[512], *p;
	int fd;
	long n;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)g->fix.pid);
	fd = (int)wp_syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = wp_syscall(SYS_read, fd, buf, sizeof(buf) - 1);
	wp_syscall(SYS_close, fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && (p[2] == 'Z' || p[2] == 'X');
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
					 O_RDONLY | O_DIRECTORY | O_CLOEXEC), other = 0;
		long n;
		struct timespec ms = { 0, 1000000 };

		if (fd < 0)
			return 0;
		while (!other && (n = wp_syscall(SYS_getdents64, fd, buf, sizeof(buf))) > 0) {
			long off;

			for (off = 0; off < n && !other; off += ((struct dirent64 *)(buf + off))->d_reclen) {
				uint32_t tid = (uint32_t)strtoul(((struct dirent64 *)(buf + off))->d_name,
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

/* Forgets threads that are gone and whose samples all left the window, so
 * that thread churn costs no memory over time: the others are copied into
 * the table's other buffer (nothing is moved where a dump may read it). */
void wp_threads_prune(uint64_t now)
{
	size_t n, k, drop = 0;
	const struct tbuf *b = published(&n);
	char *live;

	if (!n || !may_rebuild())
		return;
	live = live_marks(b, n);
	if (!live)
		return;
	for (k = 0; k < n; k++)
		drop += !keep(b, k, live, now);
	if (drop)
		rebuild(live, now, 0);
	free(live);
}

/* The latest names of live threads (not in a signal handler). */
void wp_threads_refresh_names(void)
{
	uint32_t i, hw = atomic_load(&g->tab.hiwater);
	size_t n, k;
	const struct tbuf *b = published(&n);

	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];

		if (atomic_load(&s->state) >= S_IDLE && (k = find(b, n, s->smp.thread_id)) < n)
			read_comm(b->e[k].tid, b->e[k].name);
	}
}

/* Live threads are listed even without samples (one that blocks our
 * signal, say), so that their signals and losses are accounted. A slot
 * whose entry is not in the table the dump reads marks nothing.
 * async-signal-safe */
WP_AS_SAFE void wp_threads_mark_live(void)
{
	uint32_t i, hw = atomic_load(&g->tab.hiwater);
	size_t n, k;
	const struct tbuf *b = published(&n);

	for (k = 0; k < n; k++)
		b->e[k].flags &= ~WP_THREAD_LIVE;
	for (i = 0; i < hw; i++) {
		const struct wp_slot *s = &g->tab.slots[i];

		if (atomic_load(&s->state) >= S_IDLE && (k = find(b, n, s->smp.thread_id)) < n)
			b->e[k].flags |= WP_THREAD_LIVE;
	}
}

/* async-signal-safe */
WP_AS_SAFE const struct wp_thread *wp_threads_table(size_t *nr)
{
	return published(nr)->e;
}

/* An empty table in the other buffer: the one published stays as it was
 * for whoever reads it (no one should, at a restart). */
void wp_threads_restart(void)
{
	size_t n;
	const struct tbuf *b = published(&n);

	publish(&thr.buf[b == &thr.buf[0]], 0);
}

/* async-signal-safe */
WP_AS_SAFE void wp_sampler_names_changed(void)
{
	atomic_store(&g->sh.names_dirty, 1);
}
