// cancel_cxx: a thread cancelled inside a wrapped read goes on working in
// a catch of the cancellation (abi::__forced_unwind) before it rethrows
// (test/e2e/cancel.py). The wrapper's cleanup must have run by then: the
// thread spins in spin_after_cancel for 400 ms of CPU, and its samples must
// show that, not the read it left. Prints "cancel_cxx: cancelled after
// the spin".
#include <cxxabi.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int fds[2];
static volatile unsigned long sink;

static double cpu_s()
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void spin_after_cancel()
{
	double end = cpu_s() + 0.4;

	while (cpu_s() < end)
		for (int i = 0; i < 10000; i++)
			sink += i;
}

static void *reader(void *)
{
	char c;

	try {
		if (read(fds[0], &c, 1) < 0)
			perror("cancel_cxx: read");
	} catch (abi::__forced_unwind &) {
		spin_after_cancel();
		throw;
	}
	return nullptr;
}

int main()
{
	struct timespec pause = { 0, 200000000 };
	pthread_t t;
	void *r;

	if (pipe(fds) < 0 || pthread_create(&t, nullptr, reader, nullptr) != 0)
		return 1;
	nanosleep(&pause, nullptr); // its wait, for the profile; cancel needs none
	pthread_cancel(t);
	pthread_join(t, &r);
	printf("cancel_cxx: %s\n", r == PTHREAD_CANCELED ? "cancelled after the spin" : "not cancelled");
	return r == PTHREAD_CANCELED ? 0 : 1;
}
