/* proc_unwind: stacks of threads blocked outside the wrappers, without a
 * signal. The kernel tells where such a thread is blocked: its stack
 * pointer and PC (/proc/self/task/T/syscall), not its other registers. From
 * those two, libunwind's remote unwinder walks the stack with each module's
 * CFI (.eh_frame through its .eh_frame_hdr search table, else .debug_frame
 * read from the file) as far as it can trust it: a frame whose CFA needs a
 * register nobody saved (the frame pointer of a caller whose callee never
 * spilled it) ends the walk, marked partial.
 *
 * The thread is not held: it may return and overwrite its stack, or exit
 * and have it unmapped, while we read. So nothing of the program's is read
 * directly: its stack is copied page by page with process_vm_readv (an
 * unmapped page ends the walk, it does not fault), and so is every other
 * word libunwind asks for (the unwind tables of a module being dlclosed
 * may vanish too). A walk over a stack that changed underneath gives wrong
 * frames at worst, never a crash. The caller caches the result for as
 * long as the thread stays blocked at the same place.
 *
 * Why libunwind's remote API with accessors of our own: symbolization is
 * leaving the target process, so the injected library must not link
 * elfutils (libdwfl did this before); libunwind is already a dependency
 * (the in-handler walker, unwind/unwind.c, uses its local API, which reads
 * memory directly and so cannot be used here); and through the accessors
 * we own every memory read, every cache and its bounds. Its DWARF
 * machinery (CIE/FDE parsing, CFA programs, the register-state cache) is
 * used as is; what it cannot find by itself in another "process" is
 * supplied here: where the modules are and their search tables.
 *
 * The parts, one file each:
 *   proc_unwind.c   the walk: libunwind's address space, our accessors, the
 *                   session (per process and module epoch);
 *   proc_mem.c      every read of the program's memory (stack window, page
 *                   cache, process_vm_readv);
 *   proc_modules.c  the module list, from /proc/thread-self/maps and the ELF
 *                   headers in memory (no loader lock), with each module's
 *                   .eh_frame_hdr table; read again when the caller's
 *                   module epoch changes;
 *   debug_frame.c   a module's .debug_frame, from its file (zlib loaded on
 *                   demand for a compressed one), in .eh_frame's form.
 *
 * Runs on the sampler thread only. Files (for .debug_frame) are opened
 * briefly, in the sampler's private descriptor table, and closed at once. */
#include <libunwind.h> /* the generic (remote-capable) API: libunwind-x86_64 */
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proc_mem.h"
#include "proc_modules.h"
#include "proc_unwind.h"
#include "../output/sys.h"

/* Exported by libunwind-x86_64 (libunwind-ptrace and libunwind-coredump,
 * separate libraries, call it) but declared in no public header of 1.6;
 * from 1.7 on, unw_get_proc_info_in_range wraps it. */
extern int UNW_OBJ(dwarf_search_unwind_table)(unw_addr_space_t as, unw_word_t ip,
					      unw_dyn_info_t *di, unw_proc_info_t *pi,
					      int need_unwind_info, void *arg);
#define search_table UNW_OBJ(dwarf_search_unwind_table)

static struct {
	pid_t proc;       /* the process the caches are for (a forked child is another) */
	int built;        /* the module list is for `epoch` */
	int usable;       /* ... and was read */
	uint64_t epoch;
	unw_addr_space_t as;
	/* the walk in progress */
	uint64_t sp, pc;
	int noinfo;       /* the last lookup found no unwind info */
} u;

/* ---- libunwind accessors --------------------------------------------- */

/* One table search, in two steps: libunwind 1.6's helper allocates the
 * unwind info before it checks that the FDE it found covers `ip`, and does
 * not free it when it does not (an address between two FDEs, every Go PC
 * looked up in a cgo binary's .eh_frame_hdr): it is asked for the info only
 * once the FDE is known to cover `ip`. */
static int search(unw_addr_space_t as, unw_word_t ip, unw_dyn_info_t *di, unw_proc_info_t *pi,
		  int need_unwind_info, void *arg)
{
	int rc;

	memset(pi, 0, sizeof(*pi));
	rc = search_table(as, ip, di, pi, 0, arg);
	if (rc < 0 || ip < pi->start_ip || ip >= pi->end_ip)
		return -UNW_ENOINFO;
	if (!need_unwind_info)
		return 0;
	memset(pi, 0, sizeof(*pi));
	return search_table(as, ip, di, pi, 1, arg);
}

static int find_proc_info(unw_addr_space_t as, unw_word_t ip, unw_proc_info_t *pi,
			  int need_unwind_info, void *arg)
{
	struct wp_pmod *m = wp_pmod_find(ip);
	const struct wp_debug_frame *df;
	unw_dyn_info_t di;

	if (!m)
		goto none;
	memset(&di, 0, sizeof(di));
	di.start_ip = m->lo;
	di.end_ip = m->hi;
	if (m->hdr) {
		di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
		di.u.rti.segbase = m->hdr;
		di.u.rti.table_data = m->table;
		di.u.rti.table_len = m->nr_fde;
		if (search(as, ip, &di, pi, need_unwind_info, arg) == 0)
			return 0;
	}
	/* Not in .eh_frame (Go's code, a file built without unwind tables):
	 * .debug_frame, as libdwfl did. Offsets from the module's start. */
	df = wp_pmod_debug_frame(m);
	if (df) {
		di.format = UNW_INFO_FORMAT_IP_OFFSET;
		di.u.rti.segbase = (uintptr_t)df->data;
		di.u.rti.table_data = (uintptr_t)df->tab;
		di.u.rti.table_len = df->nr;
		if (search(as, ip, &di, pi, need_unwind_info, arg) == 0)
			return 0;
	}
none:
	u.noinfo = 1;
	return -UNW_ENOINFO;
}

/* The unwind info handed out comes from libunwind's own helper, in its
 * format UNW_INFO_FORMAT_TABLE, which libunwind frees itself. */
static void put_unwind_info(unw_addr_space_t as, unw_proc_info_t *pi, void *arg)
{
	(void)as;
	(void)pi;
	(void)arg;
}

/* No code registered with _U_dyn_register (JIT) is looked for. */
static int get_dyn_info_list_addr(unw_addr_space_t as, unw_word_t *addr, void *arg)
{
	(void)as;
	(void)addr;
	(void)arg;
	return -UNW_ENOINFO;
}

static int access_mem(unw_addr_space_t as, unw_word_t addr, unw_word_t *val, int write, void *arg)
{
	(void)as;
	(void)arg;
	if (write)
		return -UNW_EINVAL;
	return wp_pm_read_word(addr, val, sizeof(*val)) == 0 ? 0 : -UNW_EINVAL;
}

/* The stack pointer and the PC; nothing else is known. Any other register
 * a frame's CFA or return address needs ends the walk (libunwind returns
 * the error from unw_step): it is never guessed. */
static int access_reg(unw_addr_space_t as, unw_regnum_t reg, unw_word_t *val, int write, void *arg)
{
	(void)as;
	(void)arg;
	if (write)
		return -UNW_EREADONLYREG;
	if (reg == UNW_X86_64_RIP)
		*val = u.pc;
	else if (reg == UNW_X86_64_RSP)
		*val = u.sp;
	else
		return -UNW_EBADREG;
	return 0;
}

static int access_fpreg(unw_addr_space_t as, unw_regnum_t reg, unw_fpreg_t *val, int write,
			void *arg)
{
	(void)as;
	(void)reg;
	(void)val;
	(void)write;
	(void)arg;
	return -UNW_EBADREG;
}

static int resume(unw_addr_space_t as, unw_cursor_t *c, void *arg)
{
	(void)as;
	(void)c;
	(void)arg;
	return -UNW_EINVAL;
}

static int get_proc_name(unw_addr_space_t as, unw_word_t addr, char *buf, size_t len,
			 unw_word_t *off, void *arg)
{
	(void)as;
	(void)addr;
	(void)buf;
	(void)len;
	(void)off;
	(void)arg;
	return -UNW_ENOINFO;
}

static unw_accessors_t accessors = {
	.find_proc_info = find_proc_info,
	.put_unwind_info = put_unwind_info,
	.get_dyn_info_list_addr = get_dyn_info_list_addr,
	.access_mem = access_mem,
	.access_reg = access_reg,
	.access_fpreg = access_fpreg,
	.resume = resume,
	.get_proc_name = get_proc_name,
};

/* ---- the walk -------------------------------------------------------- */

static int open_session(uint64_t epoch)
{
	pid_t pid = getpid();

	if (u.proc != pid) {
		/* A forked child: what it inherited are copies of the parent's
		 * sampler's, which may have been in the middle of a change (a
		 * list half freed, a pointer not yet stored) when the program
		 * forked. They are forgotten, not freed, and new ones made; so
		 * is the address space, whose cache lock may have been copied
		 * held. */
		wp_pmod_forked();
		u.as = NULL;
		u.built = 0;
		u.proc = pid;
	}
	if (!u.as) {
		u.as = unw_create_addr_space(&accessors, 0);
		if (!u.as)
			return -1;
		/* A new address space caches nothing: the register states of the
		 * frames walked are kept (by PC) until the modules change (without
		 * them a walk costs 2.5 times as much). Only this thread uses it:
		 * "per thread", which spares a lock, and the two sigprocmask calls
		 * libunwind makes around it, at every frame. Debian 12's build
		 * (no TLS support configured) takes it as "global", with them. */
		unw_set_caching_policy(u.as, UNW_CACHE_PER_THREAD);
	}
	wp_pm_cache_init();
	if (u.built && u.epoch == epoch)
		return u.usable ? 0 : -1;
	/* Modules loaded or unloaded: everything derived from them goes. */
	wp_pmod_free();
	unw_flush_cache(u.as, 0, 0);
	u.epoch = epoch;
	u.built = 1;
	u.usable = wp_pmod_read() == 0;
	if (!u.usable)
		wp_pmod_free();
	return u.usable ? 0 : -1;
}

int wp_proc_unwind(pid_t tid, uint64_t sp, uint64_t pc, uint64_t epoch, uint64_t *out, int cap,
		   int *partial, int *truncated)
{
	unw_cursor_t c;
	unw_word_t ip;
	int n = 1, rc;

	(void)tid; /* its memory is ours: read through our own tid */
	*partial = 1;
	*truncated = 0;
	if (cap < 1)
		return 1;
	out[0] = pc;
	/* Read through our own tid, not the pid: the leader may have exited. */
	wp_pm_begin((pid_t)wp_syscall(SYS_gettid), sp);
	u.sp = sp;
	u.pc = pc;
	if (open_session(epoch) < 0 || unw_init_remote(&c, u.as, NULL) < 0)
		return 1;
	for (;;) {
		u.noinfo = 0;
		rc = unw_step(&c);
		if (rc <= 0) {
			/* 0: the outermost frame (its return address undefined
			 * in the CFI), unless libunwind got there by giving up on
			 * a frame without unwind info (its frame-chain guess). */
			*partial = rc < 0 || u.noinfo;
			break;
		}
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0)
			break; /* partial */
		if (ip == 0) {
			/* A return address of 0 ends the chain too (Go's g0
			 * stacks, for one), as it did for libdwfl. */
			*partial = 0;
			break;
		}
		if (n == cap) {
			*truncated = 1;
			*partial = 0;
			break;
		}
		out[n++] = ip;
	}
	return n;
}
