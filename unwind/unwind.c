/* unwind: libunwind-based capture of the interrupted thread's stack from
 * inside the profiling signal handler. Fast path: unw_backtrace (cached,
 * no syscalls), then the handler's own frames are cut off at the interrupted
 * PC. Slow path: unw_init_local2(UNW_INIT_SIGNAL_FRAME) + unw_step. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <ucontext.h>
#include <unistd.h>

#include "unwind.h"

/* Set while this thread is inside libunwind on our behalf. */
static __thread int tls_in_unw __attribute__((tls_model("initial-exec")));

/* libunwind checks a suspicious address by writing one byte of it into a
 * pipe it creates on first use: program threads would use that pipe inside
 * our handler, so it would have to live in the program's descriptor table,
 * where the program can see it, close it or be handed its numbers. Instead
 * our pipe2 gives libunwind two numbers no descriptor table can hold, and
 * the library's read() and syscall(SYS_write) wrappers (preload/) answer for
 * them: the read end is an empty non-blocking pipe, the write end checks the
 * byte with process_vm_readv. Everyone else's pipe2 is the system call.
 * async-signal-safe */
__attribute__((visibility("default"))) int pipe2(int fds[2], int flags)
{
	if (tls_in_unw) {
		fds[0] = WP_UNW_FAKE_RFD;
		fds[1] = WP_UNW_FAKE_WFD;
		return 0;
	}
	return (int)syscall(SYS_pipe2, fds, flags);
}

/* libunwind's code, [unw_lo, unw_hi): wp_unwind_owns. */
static uint64_t unw_lo, unw_hi;

/* Set while wp_unwind_init warms libunwind up on this thread. */
static __thread int tls_warming __attribute__((tls_model("initial-exec")));
/* Set while this thread looks the next mmap up (dlsym may map memory). */
static __thread int tls_resolving __attribute__((tls_model("initial-exec")));

/* Our mmap is exported under this name and must keep its ABI: a 64-bit
 * off_t, and no renaming to mmap64 by the C library's headers. */
#if defined(_FILE_OFFSET_BITS) && _FILE_OFFSET_BITS == 64
#error "unwind.c defines mmap: build it without _FILE_OFFSET_BITS=64"
#endif
_Static_assert(sizeof(off_t) == 8, "mmap's offset is 64-bit");

/* The mmap after ours in the scope: the C library's, or a later library's
 * (a heap profiler's hook, a sanitizer's interceptor), which must see the
 * program's calls as without us. Looked up by the constructor's first
 * line (wp_unwind_resolve) or at the first call, whichever comes first. */
typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
static mmap_fn next_mmap;

/* The smallest allocation the warm-up refuses: libunwind's per-thread
 * trace cache (2^14 buckets of 16 bytes, 256 KiB) is the only one of its
 * size; its memory pools ask for a page or two. */
#define WARM_REFUSED_MIN (64u << 10)

/* The system call, with the C library's check of the offset.
 * async-signal-safe */
static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (off & 4095) {
		errno = EINVAL;
		return MAP_FAILED;
	}
	return (void *)syscall(SYS_mmap, addr, len, (long)prot, (long)flags, (long)fd, (long)off);
}

void wp_unwind_resolve(void)
{
	mmap_fn next;

	if (__atomic_load_n(&next_mmap, __ATOMIC_RELAXED) || tls_resolving)
		return;
	tls_resolving = 1;
	next = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
	tls_resolving = 0;
	__atomic_store_n(&next_mmap, next, __ATOMIC_RELAXED);
}

/* libunwind's memory comes from mmap, by name, so from the program's scope
 * and through us. libunwind's own calls made for us (tls_in_unw: the
 * warm-up, the walks in our handler) are the system call, which no hook
 * of the program's sees; during the warm-up (wp_unwind_init) its trace
 * cache's buckets are refused: libunwind then keeps no cache for the
 * thread, which it tolerates (the walk goes on without one) and makes at
 * the thread's first capture, as for every other thread. Every other call
 * goes on to the next mmap. In our handler's walks only the system call
 * is reached (sys_mmap); the program's calls are the next mmap's, as safe
 * as it is, once the constructor has looked it up. */
__attribute__((visibility("default"))) void *mmap(void *addr, size_t len, int prot, int flags,
						  int fd, off_t off)
{
	mmap_fn next;

	/* libunwind's, for us: its code known (else every call of the
	 * thread's while it is in libunwind for us) */
	if (tls_in_unw && (!unw_hi || wp_unwind_owns(__builtin_return_address(0)))) {
		if (tls_warming && len >= WARM_REFUSED_MIN) {
			errno = ENOMEM;
			return MAP_FAILED;
		}
		return sys_mmap(addr, len, prot, flags, fd, off);
	}
	if (!(next = __atomic_load_n(&next_mmap, __ATOMIC_RELAXED))) {
		wp_unwind_resolve();
		next = __atomic_load_n(&next_mmap, __ATOMIC_RELAXED);
	}
	return next ? next(addr, len, prot, flags, fd, off)
		    : sys_mmap(addr, len, prot, flags, fd, off);
}

/* async-signal-safe */
long wp_unwind_fake_write(const void *addr, size_t n)
{
	char byte;
	struct iovec local = { &byte, 1 }, remote = { (void *)addr, 1 };

	if (n == 0)
		return 0;
	/* Like a write into a pipe: EFAULT when the byte cannot be read. */
	/* Our own tid, not the pid: once the leader has exited (main's
	 * pthread_exit), the kernel reads no memory through the pid. */
	if (process_vm_readv(gettid(), &local, 1, &remote, 1, 0) != 1) {
		errno = EFAULT;
		return -1;
	}
	return 1;
}

struct code_query {
	uintptr_t addr;
	uint64_t *lo, *hi;
};

static int find_code(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct code_query *q = arg;

	(void)size;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && lo <= q->addr &&
		    q->addr - lo < ph->p_memsz) {
			*q->lo = lo;
			*q->hi = lo + ph->p_memsz;
			return 1;
		}
	}
	return 0;
}

int wp_code_segment(const void *addr, uint64_t *lo, uint64_t *hi)
{
	struct code_query q = { (uintptr_t)addr, lo, hi };

	return dl_iterate_phdr(find_code, &q) ? 0 : -1;
}

/* Where libunwind.so.8's code is: around its own unw_backtrace, looked up
 * in it by handle (the address the library links against would be the
 * program's PLT entry in a non-PIE program that takes it). */
static void find_libunwind(void)
{
	void *h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_NOLOAD), *fn;

	if (!h)
		return;
	if ((fn = dlsym(h, "unw_backtrace")))
		wp_code_segment(fn, &unw_lo, &unw_hi);
	dlclose(h); /* drops only the count RTLD_NOLOAD took */
}

/* async-signal-safe */
int wp_unwind_suspend(void)
{
	int was = tls_in_unw;

	tls_in_unw = 0;
	return was;
}

/* async-signal-safe */
void wp_unwind_resume(int was)
{
	tls_in_unw = was;
}

/* async-signal-safe */
int wp_unwind_active(void)
{
	return tls_in_unw;
}

/* async-signal-safe */
int wp_unwind_owns(const void *addr)
{
	return (uintptr_t)addr >= unw_lo && (uintptr_t)addr < unw_hi;
}

void wp_unwind_init(void)
{
	void *buf[1];

	find_libunwind();

	/* The first unw_backtrace of a process runs pthread_once, creates a
	 * pthread key, the validation pipe and its memory pools; do that here,
	 * not in a handler. One frame is asked for, which sets up all of it
	 * (and it is what this warm-up costs every process, most of which end
	 * before their first sample: each frame more, a lookup of its unwind
	 * entry with eight sigprocmask calls; about 25 us for the sixteen);
	 * without a trace cache libunwind's fallback steps once past it, a
	 * second lookup. Not this thread's trace cache: libunwind initializes
	 * its 256 KiB whole, 64 page faults that were most of the warm-up's
	 * cost; mmap refuses it (above), and the thread's first capture makes
	 * it, in the handler, as every other thread's does. */
	tls_in_unw = 1;
	tls_warming = 1;
	(void)unw_backtrace(buf, 1);
	tls_warming = 0;
	tls_in_unw = 0;
}

/* async-signal-safe */
int wp_unwind_regs(const void *ucontext, uint64_t *buf, int cap, int *truncated,
		   struct wp_unw_site *site)
{
	const ucontext_t *uc = ucontext;
	unw_cursor_t c;
	unw_word_t ip, sp, cfa, rbp, prev_sp = (unw_word_t)uc->uc_mcontext.gregs[REG_RSP];
	unw_word_t rsp0 = prev_sp; /* every word the walk reads lies above */
	unw_word_t cur_rbp = (unw_word_t)uc->uc_mcontext.gregs[REG_RBP], rbp_at = 0;
	unw_save_loc_t loc;
	int n = 0, ok = site != NULL, r = -1;

	*truncated = 0;
	if (site)
		site->nr = site->nr_chk = 0;
	tls_in_unw = 1;
	if (unw_init_local(&c, (unw_context_t *)ucontext) == 0) {
		while ((r = unw_step(&c)) > 0) {
			if (n == cap) {
				*truncated = 1;
				ok = 0;
				break;
			}
			if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0) {
				ok = 0;
				break;
			}
			buf[n++] = ip;
			if (!ok)
				continue;
			/* The frame just left had its CFA (the caller's stack
			 * pointer) at `cfa`; it was computed from the frame pointer
			 * if cfa == rbp + 16 (push %rbp; mov %rsp,%rbp), and then the
			 * word the frame pointer was restored from is checked too
			 * (the published one is part of the key). */
			cfa = 0;
			if (n > WP_SITE_MAX || unw_get_reg(&c, UNW_REG_SP, &cfa) < 0 ||
			    cfa <= prev_sp || cfa - prev_sp > (1u << 20) ||
			    unw_get_save_loc(&c, UNW_REG_IP, &loc) < 0 ||
			    loc.type != UNW_SLT_MEMORY || loc.u.addr < rsp0 ||
			    site->nr_chk + 2 > 2 * WP_SITE_MAX) {
				ok = 0;
				continue;
			}
			sp = cfa;
			site->ip[n - 1] = ip;
			site->at[site->nr_chk] = loc.u.addr;
			site->val[site->nr_chk++] = ip;
			if (cfa == cur_rbp + 16 && rbp_at) {
				site->at[site->nr_chk] = rbp_at;
				site->val[site->nr_chk++] = cur_rbp;
			}
			/* Where the caller's frame pointer comes from. */
			if (unw_get_save_loc(&c, UNW_X86_64_RBP, &loc) < 0 ||
			    unw_get_reg(&c, UNW_X86_64_RBP, &rbp) < 0) {
				ok = 0;
				continue;
			}
			if (loc.type == UNW_SLT_MEMORY) {
				if (loc.u.addr < rsp0) {
					ok = 0;
					continue;
				}
				rbp_at = loc.u.addr;
			} else if (loc.type != UNW_SLT_REG && loc.type != UNW_SLT_NONE) {
				ok = 0;
				continue;
			}
			cur_rbp = rbp;
			prev_sp = sp;
		}
	}
	tls_in_unw = 0;
	if (ok && r == 0)
		site->nr = (uint32_t)n;
	return n;
}

int wp_unwind_site_check(const struct wp_unw_site *site, int pid, uint64_t stk_lo, uint64_t stk_hi)
{
	uint64_t span[2048]; /* 16 KiB: the stretch of stack one walk read */
	struct iovec local, remote;
	uint64_t lo = UINT64_MAX, hi = 0;
	uint32_t i, n = site->nr_chk;

	if (n == 0 || site->nr == 0)
		return 0;
	for (i = 0; i < n; i++) {
		if (site->at[i] & 7)
			return 0;
		lo = site->at[i] < lo ? site->at[i] : lo;
		hi = site->at[i] > hi ? site->at[i] : hi;
	}
	if (site->rsp >= stk_lo && lo >= site->rsp && hi < stk_hi && stk_hi - hi >= 8) {
		/* Everything between the pinned thread's stack pointer and the
		 * top of its own stack is mapped while it lives: plain loads. */
		for (i = 0; i < n; i++)
			if (*(const volatile uint64_t *)(uintptr_t)site->at[i] != site->val[i])
				return 0;
		return 2;
	}
	/* Elsewhere (another stack, an alternate signal stack, a thread we did
	 * not see start): one copy of the stretch the words lie in through the
	 * kernel, which pins a page or two, not one per word; an unmapped
	 * address is a mismatch, and a wider walk is simply not replayed. */
	if (hi + 8 - lo > sizeof(span))
		return 0;
	local.iov_base = span;
	local.iov_len = remote.iov_len = hi + 8 - lo;
	remote.iov_base = (void *)(uintptr_t)lo;
	if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)(hi + 8 - lo))
		return 0;
	for (i = 0; i < n; i++)
		if (span[(site->at[i] - lo) / 8] != site->val[i])
			return 0;
	return 1;
}

/* async-signal-safe */
int wp_unwind_at_syscall_insn(const void *ucontext)
{
	const ucontext_t *uc = ucontext;
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	const uint8_t *p = (const uint8_t *)pc;

	/* Stay within the PC's page: the next page may be unmapped. */
	return (pc & 0xfff) <= 0xffe && p[0] == 0x0f && p[1] == 0x05;
}

/* async-signal-safe */
int wp_unwind_in_syscall(const void *ucontext)
{
	const ucontext_t *uc = ucontext;
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	int64_t ax = (int64_t)uc->uc_mcontext.gregs[REG_RAX];
	const uint8_t *p = (const uint8_t *)pc;

	/* SA_RESTART or ERESTARTNOINTR: the kernel rewound the PC onto the
	 * 2-byte `syscall` instruction to re-enter the call after the handler. */
	if (wp_unwind_at_syscall_insn(uc))
		return 1;
	/* The call was interrupted and returns -EINTR right after `syscall`. */
	if ((pc & 0xfff) >= 2 && p[-2] == 0x0f && p[-1] == 0x05 && ax == -EINTR)
		return 1;
	return 0;
}

/* async-signal-safe */
static int slow_unwind(ucontext_t *uc, uint64_t *buf, int cap)
{
	unw_cursor_t cursor;
	unw_word_t ip;
	int n = 0;

	if (unw_init_local2(&cursor, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) < 0)
		return 0;
	do {
		if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0)
			break;
		buf[n++] = ip;
	} while (n < cap && unw_step(&cursor) > 0);
	return n;
}

/* async-signal-safe */
int wp_unwind_capture(void *ucontext, uint64_t *buf, int max_depth, unsigned *flags)
{
	ucontext_t *uc = ucontext;
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	int cap = max_depth + WP_UNW_SCRATCH;
	int n, i, skip = -1, depth;

	*flags = wp_unwind_in_syscall(uc) ? WP_UNW_BLOCKED : 0;
	tls_in_unw = 1;

	/* The walk starts in this function, goes through the handler and the
	 * sigreturn trampoline, then reaches the interrupted PC. */
	n = unw_backtrace((void **)buf, cap);
	for (i = 0; i < n && i < WP_UNW_SCRATCH; i++) {
		if (buf[i] == pc) {
			skip = i;
			break;
		}
	}
	if (skip < 0) {
		/* Unusual CFI on the way (or the fast trace gave up): walk again
		 * from the signal frame itself, one step at a time. */
		*flags |= WP_UNW_SLOW;
		skip = 0;
		n = slow_unwind(uc, buf, cap);
		if (n == 0 || buf[0] != pc) {
			buf[0] = pc;
			*flags |= WP_UNW_FAILED;
			tls_in_unw = 0;
			return 1;
		}
	}
	depth = n - skip;
	if (n == cap || depth > max_depth) {
		*flags |= WP_UNW_TRUNCATED;
		if (depth > max_depth)
			depth = max_depth;
	}
	if (skip > 0) {
		for (i = 0; i < depth; i++)
			buf[i] = buf[i + skip];
	}
	tls_in_unw = 0;
	return depth;
}
