/* cancel_guard: a C program linked with a C++ library (libcancel_guard.so,
 * test/e2e/cancel.py): libgcc_s comes into the program's global scope with
 * libstdc++, after the profiler's own libraries. A thread blocked in the
 * library's read is cancelled; the library's destructor prints
 * "cancel_guard: destructor ran" on stderr, and main "cancel_guard:
 * cancelled". */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

void cancel_guard_read(int fd);

static int fds[2];

static void *reader(void *arg)
{
	(void)arg;
	cancel_guard_read(fds[0]);
	return NULL;
}

int main(void)
{
	struct timespec pause = { 0, 100000000 };
	pthread_t t;
	void *r;

	if (pipe(fds) < 0 || pthread_create(&t, NULL, reader, NULL) != 0)
		return 1;
	nanosleep(&pause, NULL);
	pthread_cancel(t);
	pthread_join(t, &r);
	printf("cancel_guard: %s\n", r == PTHREAD_CANCELED ? "cancelled" : "not cancelled");
	return r == PTHREAD_CANCELED ? 0 : 1;
}
