/* Unit tests of proc_unwind: the walk of a thread of our own process that
 * is blocked in a system call issued with the syscall instruction, from the
 * stack pointer and PC /proc/self/task/T/syscall reports. The frames must be
 * the return addresses the chain's functions see themselves; cut at `cap`;
 * the same over thousands of walks while the module list keeps changing,
 * without the heap growing; harmless on a stack unmapped since; fresh in a
 * forked child; .debug_frame rewritten in .eh_frame's form, and garbage
 * there read within bounds. preload/proc_unwind.c and its parts are built
 * into this test directly (the unit tests do not link the runtime). */
#include "../../preload/debug_frame.c"
#include "../../preload/proc_mem.c"
#include "../../preload/proc_modules.c"
#include "../../preload/proc_unwind.c"

#include <dlfcn.h>
#include <limits.h>
#include <linux/futex.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "check.h"

/* The chain keeps no frame pointer (its CFA is rsp-based: /proc reports
 * no rbp) and no instrumented stack (ASan would give it one). */
#define CHAIN __attribute__((noipa, optimize("omit-frame-pointer"), no_sanitize_address))

static int word;            /* the blocked thread waits while it is 0 */
static void *ra[3];         /* return addresses, as the chain saw them */
static volatile pid_t waiter_tid;

CHAIN static long wpt_ut_leaf(void)
{
	long ret;
	register long r10 __asm__("r10") = 0; /* no timeout */

	ra[0] = __builtin_return_address(0);
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"((long)SYS_futex), "D"(&word), "S"((long)FUTEX_WAIT_PRIVATE), "d"(0L),
			   "r"(r10)
			 : "rcx", "r11", "memory");
	return ret;
}

CHAIN static long wpt_ut_middle(void)
{
	long r;

	ra[1] = __builtin_return_address(0);
	r = wpt_ut_leaf();
	__asm__ volatile("" ::: "memory");
	return r;
}

CHAIN static long wpt_ut_outer(void)
{
	long r;

	ra[2] = __builtin_return_address(0);
	r = wpt_ut_middle();
	__asm__ volatile("" ::: "memory");
	return r;
}

CHAIN static void *waiter(void *arg)
{
	(void)arg;
	waiter_tid = (pid_t)syscall(SYS_gettid);
	while (!__atomic_load_n(&word, __ATOMIC_SEQ_CST))
		wpt_ut_outer();
	return NULL;
}

/* Waits until `tid` blocks in futex(); its stack pointer and PC. */
static int blocked_at(pid_t tid, uint64_t *sp, uint64_t *pc)
{
	char path[64], buf[256];

	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", (int)tid);
	for (int i = 0; i < 5000; i++) {
		FILE *f = fopen(path, "r");
		unsigned long long v[9];
		long long nr;
		int n = 0;

		if (f) {
			n = fgets(buf, sizeof(buf), f) != NULL;
			fclose(f);
		}
		if (n &&
		    sscanf(buf, "%lld %llx %llx %llx %llx %llx %llx %llx %llx", &nr, &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 9 &&
		    nr == SYS_futex) {
			*sp = v[6];
			*pc = v[7];
			return 0;
		}
		usleep(1000);
	}
	return -1;
}

static pthread_t start_waiter(pthread_attr_t *attr, uint64_t *sp, uint64_t *pc)
{
	pthread_t t;

	word = 0;
	waiter_tid = 0;
	ra[0] = ra[1] = ra[2] = NULL;
	if (pthread_create(&t, attr, waiter, NULL))
		abort();
	while (!waiter_tid)
		usleep(100);
	if (blocked_at(waiter_tid, sp, pc) < 0)
		abort();
	return t;
}

static void stop_waiter(pthread_t t)
{
	__atomic_store_n(&word, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
	pthread_join(t, NULL);
}

static int chain_ok(const uint64_t *out, int n)
{
	return n >= 5 && out[1] == (uintptr_t)ra[0] && out[2] == (uintptr_t)ra[1] &&
	       out[3] == (uintptr_t)ra[2];
}

static void test_chain(void)
{
	uint64_t sp, pc, out[64];
	pthread_t t = start_waiter(NULL, &sp, &pc);
	int partial = -1, truncated = -1, n;

	n = wp_proc_unwind(waiter_tid, sp, pc, 1, out, 64, &partial, &truncated);
	REQ(out[0] == pc);
	REQ(chain_ok(out, n)); /* leaf, middle, outer, waiter, start_thread, clone3 */
	REQ(partial == 0 && truncated == 0); /* down to clone3's undefined return address */
	report("proc_unwind: the chain below a raw futex wait, to the thread's start");

	n = wp_proc_unwind(waiter_tid, sp, pc, 1, out, 3, &partial, &truncated);
	REQ(n == 3 && out[1] == (uintptr_t)ra[0] && out[2] == (uintptr_t)ra[1]);
	REQ(truncated == 1 && partial == 0);
	n = wp_proc_unwind(waiter_tid, sp, pc, 1, out, 1, &partial, &truncated);
	REQ(n == 1 && out[0] == pc && truncated == 1);
	report("proc_unwind: cut at cap, marked truncated");

	/* Nothing readable there: the PC alone, partial. */
	/* (Not 0: libunwind takes a register saved at address 0 for one
	 * whose rule is "undefined", the end of the stack.) */
	n = wp_proc_unwind(waiter_tid, 4096, pc, 1, out, 64, &partial, &truncated);
	REQ(n == 1 && out[0] == pc && partial == 1 && truncated == 0);
	n = wp_proc_unwind(waiter_tid, UINT64_MAX - 4, 0, 1, out, 64, &partial, &truncated);
	REQ(n == 1 && partial == 1);
	report("proc_unwind: an unreadable stack pointer gives the PC alone, partial");
	stop_waiter(t);
}

/* Thousands of walks, the module list changing (a library loaded and
 * unloaded, a new epoch) before each: same frames, a heap that stops. */
static void test_epochs(void)
{
	uint64_t sp, pc, out[64], first[64];
	pthread_t t = start_waiter(NULL, &sp, &pc);
	int partial, truncated, n, n0 = 0, same = 1;
	size_t heap_early = 0, heap_late = 0;

	for (int i = 0; i < 3000; i++) {
		void *h = dlopen("libutil.so.1", RTLD_NOW | RTLD_LOCAL);

		n = wp_proc_unwind(waiter_tid, sp, pc, 100 + (uint64_t)i, out, 64, &partial,
				   &truncated);
		if (h)
			dlclose(h);
		if (i == 0) {
			n0 = n;
			memcpy(first, out, sizeof(out));
		} else if (n != n0 || memcmp(first, out, (size_t)n * sizeof(*out)) || partial) {
			same = 0;
		}
		if (i == 300)
			heap_early = mallinfo2().uordblks;
	}
	heap_late = mallinfo2().uordblks;
	REQ(chain_ok(first, n0));
	REQ(same);
#ifndef __SANITIZE_ADDRESS__
	REQ(heap_late <= heap_early + 64 * 1024);
#endif
	if (why[0])
		printf("     (heap %zu bytes after 300 walks, %zu after 3000)\n", heap_early,
		       heap_late);
	report("proc_unwind: 3000 walks over a changing module list, same frames, no growth");
	stop_waiter(t);
}

/* A stack unmapped since /proc was read: no fault, the PC alone. */
static void test_unmapped(void)
{
	size_t size = 256 * 1024;
	void *stk = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t sp, pc, out[64];
	pthread_attr_t attr;
	pthread_t t;
	int partial, truncated, n;

	REQ(stk != MAP_FAILED);
	if (stk == MAP_FAILED)
		goto out;
	pthread_attr_init(&attr);
	pthread_attr_setstack(&attr, stk, size);
	t = start_waiter(&attr, &sp, &pc);
	REQ(sp >= (uintptr_t)stk && sp < (uintptr_t)stk + size);
	stop_waiter(t);
	pthread_attr_destroy(&attr);
	munmap(stk, size);
	n = wp_proc_unwind(getpid(), sp, pc, 1, out, 64, &partial, &truncated);
	REQ(n == 1 && out[0] == pc && partial == 1);
out:
	report("proc_unwind: a stack unmapped under the walk: the PC alone, partial");
}

/* A forked child walks its own threads (through its own tid), from a
 * session of its own. */
static void test_fork(void)
{
	uint64_t sp, pc, out[64];
	int partial, truncated, status = -1;
	pid_t child;

	/* The parent's session is open (earlier tests); the child starts one. */
	child = fork();
	if (child == 0) {
		pthread_t t = start_waiter(NULL, &sp, &pc);
		int n = wp_proc_unwind(waiter_tid, sp, pc, 100 + 2999, out, 64, &partial,
				       &truncated);
		int ok = chain_ok(out, n) && partial == 0 && u.proc == getpid();

		stop_waiter(t);
		_exit(ok ? 0 : 1);
	}
	REQ(child > 0);
	if (child > 0)
		waitpid(child, &status, 0);
	REQ(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	report("proc_unwind: a forked child walks its own thread");
}

/* Appends a .debug_frame entry: 4-byte length, then `body`. */
static size_t put(uint8_t *buf, size_t at, const void *body, uint32_t len)
{
	memcpy(buf + at, &len, 4);
	memcpy(buf + at + 4, body, len);
	return at + 4 + len;
}

static size_t fde(uint8_t *buf, size_t at, uint32_t cie, uint64_t start, uint64_t size)
{
	uint8_t b[24] = { 0 };

	memcpy(b, &cie, 4);
	memcpy(b + 4, &start, 8);
	memcpy(b + 12, &size, 8);
	b[20] = 0x41; /* DW_CFA_advance_loc 1 */
	return put(buf, at, b, 24);
}

static size_t sample_debug_frame(uint8_t *buf)
{
	/* id, version 3, "", code 1, data -8, ra 16, def_cfa rsp+8, rip at cfa-8 */
	static const uint8_t cie3[] = { 0xff, 0xff, 0xff, 0xff, 3,    0, 1, 0x78,
					16,   0x0c, 7,    8,    0x90, 1, 0, 0 };
	/* version 4: address size 8, segment size 0 */
	static const uint8_t cie4[] = { 0xff, 0xff, 0xff, 0xff, 4, 0,    8, 0, 1,
					0x78, 16,   0x0c, 7,    8, 0x90, 1, 0, 0 };
	/* an augmentation: not taken */
	static const uint8_t ciez[] = { 0xff, 0xff, 0xff, 0xff, 1,    'z', 'R', 0,
					1,    0x78, 16,   1,    0x1b, 0,   0,   0 };
	size_t at = 0, c3, c4, cz;

	c3 = at;
	at = put(buf, at, cie3, sizeof(cie3));
	at = fde(buf, at, (uint32_t)c3, 0x2000, 0x100);
	c4 = at;
	at = put(buf, at, cie4, sizeof(cie4));
	at = fde(buf, at, (uint32_t)c4, 0x1000, 0x80);
	at = fde(buf, at, (uint32_t)c3, 0x20000, 0x10); /* outside the module */
	at = fde(buf, at, (uint32_t)c3, 0, 0x10);       /* discarded function */
	cz = at;
	at = put(buf, at, ciez, sizeof(ciez));
	at = fde(buf, at, (uint32_t)cz, 0x3000, 0x10);
	at = fde(buf, at, 12345, 0x3000, 0x10);         /* no CIE there */
	return at;
}

static void test_convert(void)
{
	uint8_t buf[512], *e;
	size_t n = sample_debug_frame(buf);
	struct wp_debug_frame df;
	uint64_t start;
	int32_t rel;
	uint32_t seed = 12345;

	/* The module's code at [0x1000, 0x9000). With a bias of 0x10000, the
	 * FDEs at 0x2000 and 0x1000 fall outside: none. */
	REQ(wp_debug_frame_convert(buf, n, 0x10000, 0x1000, 0x9000, &df) < 0 && !df.data);
	REQ(wp_debug_frame_convert(buf, n, 0, 0x1000, 0x9000, &df) == 0 && df.data && df.nr == 2);
	if (df.data && df.nr == 2) {
		/* sorted by start: 0x1000 (the version 4 CIE's), then 0x2000 */
		REQ(df.tab[0] == 0 && df.tab[2] == 0x1000);
		e = df.data + df.tab[1];
		memcpy(&rel, e + 4, 4);
		memcpy(&start, e + 8, 8);
		REQ(start == 0x1000);
		/* its CIE: id 0, version 3, the address and segment sizes gone */
		REQ(get32(e + 4 - rel + 4) == 0 && e[4 - rel + 8] == 3 && e[4 - rel + 9] == 0 &&
		    e[4 - rel + 10] == 1 && e[4 - rel + 11] == 0x78);
	}
	wp_debug_frame_free(&df);
	report("proc_unwind: .debug_frame in .eh_frame's form");

	/* Damaged input (bytes changed, cut short) is read within its bounds
	 * (ASan build). */
	for (int i = 0; i < 20000; i++) {
		size_t len = n;
		uint8_t *copy;

		n = sample_debug_frame(buf);
		for (int k = 0; k < 4; k++) {
			seed = seed * 1103515245 + 12345;
			buf[(seed >> 8) % n] = (uint8_t)(seed >> 20);
		}
		seed = seed * 1103515245 + 12345;
		if (seed & 0x100)
			len = (seed >> 12) % n;
		copy = malloc(len ? len : 1); /* exactly len bytes readable, for ASan */
		memcpy(copy, buf, len);
		wp_debug_frame_convert(copy, len, 0, 0x1000, 0x9000, &df);
		wp_debug_frame_free(&df);
		free(copy);
	}
	report("proc_unwind: damaged .debug_frame read within bounds");
}

int main(void)
{
	test_chain();
	test_epochs();
	test_unmapped();
	test_fork();
	test_convert();
	printf("proc_unwind: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed != 0;
}
