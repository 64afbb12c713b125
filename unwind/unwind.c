/* unwind: libunwind-based capture of the interrupted thread's stack from
 * inside the profiling signal handler. Fast path: unw_backtrace (cached,
 * no syscalls), then the handler's own frames are cut off at the interrupted
 * PC. Slow path: unw_init_local2(UNW_INIT_SIGNAL_FRAME) + unw_step. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>

#include <errno.h>
#include <stdint.h>
#include <ucontext.h>

#include "unwind.h"

void wp_unwind_init(void)
{
	void *buf[16];

	/* The first unw_backtrace of a process runs pthread_once, creates a
	 * pthread key and maps cache memory; do that here, not in a handler. */
	(void)unw_backtrace(buf, 16);
}

/* async-signal-safe */
int wp_unwind_in_syscall(const void *ucontext)
{
	const ucontext_t *uc = ucontext;
	uint64_t pc = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	int64_t ax = (int64_t)uc->uc_mcontext.gregs[REG_RAX];
	const uint8_t *p = (const uint8_t *)pc;

	/* SA_RESTART or ERESTARTNOINTR: the kernel rewound the PC onto the
	 * 2-byte `syscall` instruction to re-enter the call after the handler.
	 * Stay within the PC's page: the next page may be unmapped. */
	if ((pc & 0xfff) <= 0xffe && p[0] == 0x0f && p[1] == 0x05)
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
	return depth;
}
