/* sigqueue.h: the user's signal queue (RLIMIT_SIGPENDING) filled, for test
 * programs that check what the profiler does when it is full. */
#ifndef SIGQUEUE_H
#define SIGQUEUE_H

#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* RLIMIT_SIGPENDING 64, and `sig` (blocked in *set, in this thread and
 * those it creates) queued to the process until the queue is full, then
 * `room` entries taken back. Returns 0, or -1 if the limit cannot be set. */
static int wpt_sigqueue_fill(int sig, int room, sigset_t *set)
{
	struct rlimit rl = { 64, 64 };
	struct timespec zero = { 0, 0 };
	union sigval v = { 0 };

	if (setrlimit(RLIMIT_SIGPENDING, &rl) < 0)
		return -1;
	sigemptyset(set);
	sigaddset(set, sig);
	pthread_sigmask(SIG_BLOCK, set, NULL);
	while (sigqueue(getpid(), sig, v) == 0)
		;
	for (int i = 0; i < room; i++)
		sigtimedwait(set, NULL, &zero);
	return 0;
}

/* Takes every entry of the signals in *set back. */
static void wpt_sigqueue_drain(const sigset_t *set)
{
	struct timespec zero = { 0, 0 };

	while (sigtimedwait(set, NULL, &zero) >= 0)
		;
}

#endif
