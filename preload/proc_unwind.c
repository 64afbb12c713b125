/* proc_unwind: stacks of threads blocked outside the wrappers, without a
 * signal. The kernel tells where such a thread is blocked: its stack
 * pointer and PC (/proc/self/task/T/syscall), not its other registers. From
 * those two, libdwfl walks the stack with each module's CFI (.eh_frame,
 * .debug_frame, and a frame-pointer fallback) as far as it can trust it:
 * a frame whose CFA needs a register nobody saved (the frame pointer of a
 * caller whose callee never spilled it) ends the walk, marked partial.
 *
 * The thread is not held: it may return and overwrite its stack, or exit
 * and have it unmapped, while we read. So nothing is read directly: the
 * stack above the stack pointer is copied with process_vm_readv (an
 * unmapped page ends the copy, it does not fault), other words are read
 * the same way, and a walk over a stack that changed underneath gives
 * wrong frames at worst, never a crash. The caller caches the result for
 * as long as the thread stays blocked at the same place.
 *
 * Runs on the sampler thread only (libdwfl allocates and opens the modules'
 * files, in the sampler's private descriptor table). Chosen over libunwind,
 * whose local unwinder reads memory directly, and over our own CFI reader:
 * libdw already symbolizes the profile and knows every CFI form. */
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "proc_unwind.h"

#define COPY_BYTES (64 * 1024) /* stack copied above the stack pointer */
#define PAGE 4096

static struct {
	Dwfl *dwfl;
	uint64_t epoch;
	int attached;
	pid_t proc;   /* the process the session is for (a forked child is another) */
	pid_t pid;    /* the thread memory is read through: ours, alive */
	/* the walk in progress */
	pid_t tid;
	uint64_t sp, pc;
	uint64_t lo, hi; /* [lo, hi) copied into copy[] */
	uint64_t copy[COPY_BYTES / 8];
	uint64_t *out;
	int cap, n, truncated;
} u;

/* Copies [sp, sp + COPY_BYTES) page by page until a page cannot be read. */
static void copy_stack(void)
{
	struct iovec local, remote[COPY_BYTES / PAGE + 1];
	uint64_t at = u.sp & ~7ull, end = at + COPY_BYTES;
	int k = 0;
	ssize_t got;

	while (at < end && k < (int)(sizeof(remote) / sizeof(*remote))) {
		uint64_t next = (at | (PAGE - 1)) + 1;

		if (next > end)
			next = end;
		remote[k].iov_base = (void *)(uintptr_t)at;
		remote[k++].iov_len = next - at;
		at = next;
	}
	local.iov_base = u.copy;
	local.iov_len = COPY_BYTES;
	got = process_vm_readv(u.pid, &local, 1, remote, (unsigned long)k, 0);
	u.lo = u.sp & ~7ull;
	u.hi = u.lo + (got > 0 ? (uint64_t)got & ~7ull : 0);
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
	struct iovec local = { result, sizeof(*result) }, remote = { (void *)(uintptr_t)addr, 8 };

	(void)dwfl;
	(void)arg;
	if (addr >= u.lo && u.hi - u.lo >= 8 && addr <= u.hi - 8 && !(addr & 7)) {
		*result = u.copy[(addr - u.lo) / 8];
		return true;
	}
	return process_vm_readv(u.pid, &local, 1, &remote, 1, 0) == 8;
}

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
	(void)dwfl;
	(void)arg;
	if (*thread_argp)
		return 0;
	*thread_argp = &u;
	return u.tid;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
	(void)dwfl;
	(void)arg;
	*thread_argp = &u;
	return tid == u.tid;
}

/* The stack pointer (DWARF register 7) and the PC; nothing else is known. */
static bool set_initial_registers(Dwfl_Thread *thread, void *arg)
{
	Dwarf_Word sp = u.sp;

	(void)arg;
	if (!dwfl_thread_state_registers(thread, 7, 1, &sp))
		return false;
	dwfl_thread_state_register_pc(thread, u.pc);
	return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
	.next_thread = next_thread,
	.get_thread = get_thread,
	.memory_read = memory_read,
	.set_initial_registers = set_initial_registers,
};

/* Never looks for separate debug files (nor asks debuginfod): the CFI in
 * the loaded objects is what a walk needs. */
static int no_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
			const char *file_name, const char *debuglink_file, GElf_Word debuglink_crc,
			char **debuginfo_file_name)
{
	(void)mod;
	(void)userdata;
	(void)modname;
	(void)base;
	(void)file_name;
	(void)debuglink_file;
	(void)debuglink_crc;
	(void)debuginfo_file_name;
	return -1;
}

static const Dwfl_Callbacks callbacks = {
	.find_elf = dwfl_linux_proc_find_elf,
	.find_debuginfo = no_debuginfo,
};

/* Ends the session (modules changed). */
static void end_session(void)
{
	if (u.dwfl)
		dwfl_end(u.dwfl);
	u.dwfl = NULL;
	u.attached = 0;
}

static int open_session(uint64_t epoch)
{
	if (u.proc != getpid() || u.pid != gettid()) {
		/* A forked child, or a sampler started again after a failed
		 * exec: the session's files were opened in the old sampler's
		 * private table, which is gone; closing them here could close
		 * numbers of this table. Left. */
		u.dwfl = NULL;
		u.attached = 0;
	}
	if (u.dwfl && u.epoch == epoch)
		return u.attached ? 0 : -1;
	end_session();
	u.proc = getpid();
	u.pid = gettid(); /* not the pid: the leader may have exited */
	u.epoch = epoch;
	u.dwfl = dwfl_begin(&callbacks);
	if (!u.dwfl)
		return -1;
	if (dwfl_linux_proc_report(u.dwfl, u.pid) != 0 || dwfl_report_end(u.dwfl, NULL, NULL) != 0)
		return -1;
	u.attached = dwfl_attach_state(u.dwfl, NULL, u.pid, &thread_callbacks, &u);
	return u.attached ? 0 : -1;
}

static int on_frame(Dwfl_Frame *frame, void *arg)
{
	Dwarf_Addr pc;
	bool activation;

	(void)arg;
	if (!dwfl_frame_pc(frame, &pc, &activation) || pc == 0)
		return DWARF_CB_ABORT;
	if (u.n == u.cap) {
		u.truncated = 1;
		return DWARF_CB_ABORT;
	}
	u.out[u.n++] = pc;
	return DWARF_CB_OK;
}

int wp_proc_unwind(pid_t tid, uint64_t sp, uint64_t pc, uint64_t epoch, uint64_t *out, int cap,
		   int *partial, int *truncated)
{
	int rc;

	*partial = 1;
	*truncated = 0;
	out[0] = pc;
	if (cap < 1 || open_session(epoch) < 0)
		return 1;
	u.tid = tid;
	u.sp = sp;
	u.pc = pc;
	u.out = out;
	u.cap = cap;
	u.n = 0;
	u.truncated = 0;
	copy_stack();
	rc = dwfl_getthread_frames(u.dwfl, tid, on_frame, NULL);
	if (u.n == 0) {
		out[0] = pc;
		return 1;
	}
	*truncated = u.truncated;
	/* 0: the walk reached the outermost frame (its return address is
	 * undefined in the CFI); otherwise it stopped on a frame it could not
	 * follow. */
	*partial = rc != 0 && !u.truncated;
	return u.n;
}
