/* syscalls: x86-64 Linux system call names, for labelling samples taken
 * while a thread was blocked. The table is generated from the kernel's
 * asm/unistd_64.h by scripts/gen-syscall-names.sh and checked in, so the
 * build does not need the header. */
#include <stddef.h>

#include "output.h"

/* Indexed by number; the gaps (no system call has that number) are NULL. */
static const char *const syscall_names[] = {
#include "syscall_names.inc"
};

const char *wp_out_syscall_name(unsigned nr)
{
	if (nr >= sizeof(syscall_names) / sizeof(syscall_names[0]))
		return NULL;
	return syscall_names[nr];
}
