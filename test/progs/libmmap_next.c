/* libmmap_next: a library that defines mmap, as a heap profiler's hook
 * does (gperftools' HEAP_PROFILE_MMAP, a sanitizer's interceptor): it
 * counts the calls that reach it, per thread (the profiler's sampler maps
 * memory of its own meanwhile), and hands them to the next mmap in the
 * scope. Linked by mmap_next (test/e2e/wrappers.py, wrap_mmap_next). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

__thread unsigned long mmap_next_calls;

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	static void *(*next)(void *, size_t, int, int, int, off_t);

	mmap_next_calls++;
	if (!next)
		*(void **)&next = dlsym(RTLD_NEXT, "mmap");
	if (next)
		return next(addr, len, prot, flags, fd, off);
	return (void *)syscall(SYS_mmap, addr, len, (long)prot, (long)flags, (long)fd, (long)off);
}
