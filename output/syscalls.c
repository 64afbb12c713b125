/* syscalls: x86-64 Linux system call names, for labelling samples taken
 * while a thread was blocked. The table is generated from the kernel's
 * asm/unistd_64.h by scripts/gen-syscall-names.sh and checked in, so the
 * build does not need the header. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "model_int.h"
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

/* Name -> number: the table's indices sorted by name, built at the first
 * call (the converter is single-threaded). */
static unsigned short by_name[sizeof(syscall_names) / sizeof(syscall_names[0])];
static size_t nr_by_name;

static int cmp_name(const void *a, const void *b)
{
	return strcmp(syscall_names[*(const unsigned short *)a],
		      syscall_names[*(const unsigned short *)b]);
}

int wp_out_syscall_number(const char *name)
{
	size_t lo = 0, hi;

	if (!name || !*name)
		return -1;
	if (!strncmp(name, "syscall_", 8) && name[8] >= '0' && name[8] <= '9') {
		unsigned long v = 0;
		const char *p = name + 8;

		for (; *p >= '0' && *p <= '9' && v <= 0xffffff; p++)
			v = v * 10 + (unsigned long)(*p - '0');
		return *p || v > 0xffffff ? -1 : (int)v;
	}
	if (!nr_by_name) {
		for (size_t i = 0; i < sizeof(syscall_names) / sizeof(syscall_names[0]); i++)
			if (syscall_names[i])
				by_name[nr_by_name++] = (unsigned short)i;
		qsort(by_name, nr_by_name, sizeof(by_name[0]), cmp_name);
	}
	hi = nr_by_name;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, syscall_names[by_name[mid]]);

		if (!c)
			return by_name[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}
