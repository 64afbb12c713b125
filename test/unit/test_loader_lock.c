/* Unit tests of loader_lock (preload/loader_lock.h): glibc's loader lock is
 * found at start, and a thread inside a dl_iterate_phdr callback (which
 * holds it) is told apart from one outside it and from another thread. */
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../preload/loader_lock.h"
#include "check.h"

static pid_t gettid_raw(void)
{
	return (pid_t)syscall(SYS_gettid);
}

struct seen {
	int unsafe_self, unsafe_other;
	pid_t other;
};

static int look_inside(struct dl_phdr_info *info, size_t size, void *data)
{
	struct seen *s = data;

	(void)info;
	(void)size;
	s->unsafe_self = wp_loader_lock_unsafe(gettid_raw());
	s->unsafe_other = wp_loader_lock_unsafe(s->other);
	return 1;
}

/* A thread that holds the lock (in a callback) until told to go. */
static sem_t holding, go;
static pid_t holder_tid;

static int hold_inside(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)info;
	(void)size;
	(void)data;
	holder_tid = gettid_raw();
	sem_post(&holding);
	while (sem_wait(&go) != 0)
		;
	return 1;
}

static void *holder(void *arg)
{
	(void)arg;
	dl_iterate_phdr(hold_inside, NULL);
	return NULL;
}

static void test_found(void)
{
	REQ(wp_loader_lock_find() == 0);
	REQ(wp_loader_lock_unsafe(gettid_raw()) == 0);
	report("loader lock: found, free outside any callback");
}

static void test_own(void)
{
	struct seen s = { -1, -1, gettid_raw() + 1 };

	dl_iterate_phdr(look_inside, &s);
	REQ(s.unsafe_self == 1);  /* we hold it: a walk here would take it again */
	REQ(s.unsafe_other == 0); /* owned by us: another thread would only wait */
	REQ(wp_loader_lock_unsafe(gettid_raw()) == 0);
	report("loader lock: unsafe for its holder only");
}

static void test_other_thread(void)
{
	pthread_t t;

	sem_init(&holding, 0, 0);
	sem_init(&go, 0, 0);
	REQ(pthread_create(&t, NULL, holder, NULL) == 0);
	while (sem_wait(&holding) != 0)
		;
	/* another thread holds it, its owner recorded: we may wait for it */
	REQ(wp_loader_lock_unsafe(gettid_raw()) == 0);
	REQ(wp_loader_lock_unsafe(holder_tid) == 1);
	sem_post(&go);
	pthread_join(t, NULL);
	REQ(wp_loader_lock_unsafe(holder_tid) == 0);
	report("loader lock: held by another thread, unsafe only for that one");
}

/* The rule on the words as read: the windows of taking and releasing the
 * lock (futex word set, no owner) are unsafe for every thread. */
static void test_rule(void)
{
	REQ(wp_loader_lock_unsafe_words(0, 0, 77) == 0);   /* free */
	REQ(wp_loader_lock_unsafe_words(1, 0, 77) == 1);   /* taken, owner not recorded */
	REQ(wp_loader_lock_unsafe_words(2, 0, 77) == 1);   /* the same, contended */
	REQ(wp_loader_lock_unsafe_words(1, 77, 77) == 1);  /* ours */
	REQ(wp_loader_lock_unsafe_words(1, 78, 77) == 0);  /* another's: a walk waits */
	REQ(wp_loader_lock_unsafe_words(0, 77, 77) == 1);  /* ours, word not yet seen */
	report("loader lock: the rule, windows of taking and releasing included");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	test_rule();
	test_found();
	test_own();
	test_other_thread();
	printf("loader_lock: %d passed, %d failed\n", nr_passed, nr_failed);
	return nr_failed ? 1 : 0;
}
