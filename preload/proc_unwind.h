/* proc_unwind: the stack of a thread blocked in a system call that no
 * wrapper published, taken without a signal (see proc_unwind.c). Sampler
 * thread only; none of it is async-signal-safe. */
#ifndef WP_PROC_UNWIND_H
#define WP_PROC_UNWIND_H

#include <stdint.h>
#include <sys/types.h>

/* Unwinds thread `tid` of this process from the stack pointer `sp` and the
 * PC `pc` the kernel reports for it (/proc/self/task/T/syscall), reading
 * its stack only through process_vm_readv. Stores the PC then the return
 * addresses, at most `cap`, in `out`; returns how many (>= 1). *partial is
 * set when the walk stopped before the outermost frame (a frame it could
 * not trust: a register the CFI needs is unknown, memory unreadable),
 * *truncated when `cap` cut it. `epoch` changes when modules were loaded or
 * unloaded since the last call (the module list is then read again; a
 * forked child starts a session of its own). */
int wp_proc_unwind(pid_t tid, uint64_t sp, uint64_t pc, uint64_t epoch, uint64_t *out, int cap,
		   int *partial, int *truncated);

#endif
