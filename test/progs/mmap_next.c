/* mmap_next: maps and unmaps a page ten times through mmap, by name, with
 * a library of its own that defines mmap (libmmap_next.c), and prints how
 * many of those calls the library saw. Whatever else is preloaded before it
 * must hand the program's calls on: "mmap_next: 10 of 10" (test
 * test/e2e/wrappers.py, wrap_mmap_next). */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/mman.h>

extern __thread unsigned long mmap_next_calls;

int main(void)
{
	unsigned long before = mmap_next_calls;
	int ok = 0;

	for (int i = 0; i < 10; i++) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
			       0);

		if (p != MAP_FAILED) {
			ok++;
			munmap(p, 4096);
		}
	}
	printf("mmap_next: %lu of %d\n", mmap_next_calls - before, ok);
	return ok == 10 ? 0 : 1;
}
