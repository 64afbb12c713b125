/* loader_lock: where glibc's loader lock is (loader_lock.h). */
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "loader_lock.h"

/* The first words of glibc's pthread_mutex_t on x86-64 (its recursive kind
 * included), as read here: the futex word, the recursion count, the owner's
 * tid, the users, the kind. */
struct mutex_words {
	int lock;
	unsigned int count;
	int owner;
	unsigned int nusers;
	int kind;
};

#define RTLD_MAX (64u << 10) /* _rtld_global is a few KiB */

/* set once in the constructor, before any handler is installed */
static const volatile struct mutex_words *the_lock;

struct probe {
	const unsigned char *base;
	size_t size;
	unsigned char *inside; /* _rtld_global's bytes inside the callback */
	int done;
};

static int copy_inside(struct dl_phdr_info *info, size_t size, void *data)
{
	struct probe *p = data;

	(void)info;
	(void)size;
	memcpy(p->inside, p->base, p->size);
	p->done = 1;
	return 1; /* the first object is enough: the lock is held */
}

int wp_loader_lock_find(void)
{
	static unsigned char outside[RTLD_MAX], inside[RTLD_MAX];
	const unsigned char *base = dlsym(RTLD_DEFAULT, "_rtld_global");
	const ElfW(Sym) *sym = NULL;
	struct probe p = { 0 };
	Dl_info info;
	int tid = (int)syscall(SYS_gettid), found = 0;
	size_t o, at = 0;

	the_lock = NULL;
	if (!base || !dladdr1(base, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym ||
	    sym->st_size < sizeof(struct mutex_words) || sym->st_size > RTLD_MAX)
		return -1;
	p.base = base;
	p.size = sym->st_size;
	p.inside = inside;
	memcpy(outside, base, p.size);
	dl_iterate_phdr(copy_inside, &p);
	if (!p.done)
		return -1;
	/* A recursive mutex free outside and ours once, inside; one only. */
	for (o = 0; o + sizeof(struct mutex_words) <= p.size; o += 8) {
		struct mutex_words out, in;

		memcpy(&out, outside + o, sizeof(out));
		memcpy(&in, inside + o, sizeof(in));
		if (out.lock == 0 && out.count == 0 && out.owner == 0 && in.lock != 0 &&
		    in.count == 1 && in.owner == tid && in.kind == out.kind &&
		    (out.kind & 3) == PTHREAD_MUTEX_RECURSIVE_NP) {
			found++;
			at = o;
		}
	}
	if (found != 1)
		return -1;
	the_lock = (const volatile struct mutex_words *)(base + at);
	return 0;
}

/* async-signal-safe */
WP_AS_SAFE int wp_loader_lock_held_by_other(pid_t tid)
{
	int owner = the_lock ? the_lock->owner : 0;

	return owner != 0 && owner != tid;
}

WP_AS_SAFE int wp_loader_lock_taken(void)
{
	return the_lock && (the_lock->lock != 0 || the_lock->owner != 0);
}

WP_AS_SAFE int wp_loader_lock_unsafe(pid_t tid)
{
	if (!the_lock)
		return 0;
	return wp_loader_lock_unsafe_words(the_lock->lock, the_lock->owner, tid);
}
