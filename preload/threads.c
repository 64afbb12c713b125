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

/* The sampler's, or the exiting thread's once the sampler is joined. */
static struct {
	struct wp_thread *names;    /* every thread seen: latest name and counters */
	size_t nr_names, cap_names;
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

static void read_comm(uint32_t tid, char name[16])
{
	char path[64];
	int fd;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/task/%u/comm", tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	n = read(fd, name, 15);
	close(fd);
	if (n <= 0)
		return;
	if (name[n - 1] == '\n')
		n--;
	name[n] = 0;
}

/* A names-table entry for a slot's thread (one per thread lifetime). */
struct wp_thread *wp_threads_of(struct wp_slot *s)
{
	struct wp_thread *t;

	if (s->smp.name_idx != UINT32_MAX)
		return &thr.names[s->smp.name_idx];
	if (thr.nr_names == thr.cap_names) {
		size_t cap = thr.cap_names ? thr.cap_names * 2 : 64;
		struct wp_thread *n = realloc(thr.names, cap * sizeof(*n));

		if (!n)
			return NULL;
		thr.names = n;
		thr.cap_names = cap;
	}
	t = &thr.names[thr.nr_names];
	memset(t, 0, sizeof(*t));
	t->tid = atomic_load(&s->tid);
	t->last_ns = wp_mono_ns();
	read_comm(t->tid, t->name);
	s->smp.name_idx = (uint32_t)thr.nr_names++;
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
 * that thread churn costs no memory over time. A live slot keeps its entry,
 * moved down: its index is remapped here, the one place that moves them. */
void wp_threads_prune(uint64_t now)
{
	uint32_t *map, i, hw = atomic_load(&g->tab.hiwater);
	char *live;
	size_t k, n = 0;
	uint64_t window = (uint64_t)g->fix.cfg.ring_seconds * 1000000000ull;

	live = calloc(thr.nr_names + 1, 1);
	map = malloc((thr.nr_names + 1) * sizeof(*map));
	if (!live || !map)
		goto out;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];

		if (atomic_load(&s->state) >= S_IDLE && s->smp.name_idx != UINT32_MAX)
			live[s->smp.name_idx] = 1;
	}
	for (k = 0; k < thr.nr_names; k++) {
		map[k] = UINT32_MAX;
		if (live[k] || thr.names[k].last_ns + window >= now) {
			thr.names[n] = thr.names[k];
			map[k] = (uint32_t)n++;
		}
	}
	thr.nr_names = n;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];

		/* A free slot's index is stale, and a thread claiming it now
		 * resets it (wp_slot_reset): not written here. */
		if (atomic_load(&s->state) >= S_IDLE && s->smp.name_idx != UINT32_MAX)
			s->smp.name_idx = map[s->smp.name_idx];
	}
out:
	free(live);
	free(map);
}

/* The latest names of live threads (not in a signal handler). */
void wp_threads_refresh_names(void)
{
	uint32_t i, hw = atomic_load(&g->tab.hiwater);

	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];

		if (atomic_load(&s->state) >= S_IDLE && s->smp.name_idx < thr.nr_names)
			read_comm(thr.names[s->smp.name_idx].tid, thr.names[s->smp.name_idx].name);
	}
}

/* Live threads are listed even without samples (one that blocks our
 * signal, say), so that their signals and losses are accounted.
 * async-signal-safe */
WP_AS_SAFE void wp_threads_mark_live(void)
{
	uint32_t i, hw = atomic_load(&g->tab.hiwater);

	for (i = 0; i < thr.nr_names; i++)
		thr.names[i].flags &= ~WP_THREAD_LIVE;
	for (i = 0; i < hw; i++) {
		struct wp_slot *s = &g->tab.slots[i];
		uint32_t k = s->smp.name_idx;

		if (atomic_load(&s->state) >= S_IDLE && k < thr.nr_names)
			thr.names[k].flags |= WP_THREAD_LIVE;
	}
}

/* async-signal-safe */
WP_AS_SAFE const struct wp_thread *wp_threads_table(size_t *nr)
{
	*nr = thr.nr_names;
	return thr.names;
}

void wp_threads_restart(void)
{
	thr.nr_names = 0;
}

/* async-signal-safe */
WP_AS_SAFE void wp_sampler_names_changed(void)
{
	atomic_store(&g->sh.names_dirty, 1);
}
