// libcancel_guard: the C++ half of cancel_guard (test/e2e/cancel.py): a
// function that blocks in read with an object whose destructor prints a
// line. A thread cancelled in that read must run the destructor on its way
// out, as without the profiler.
#include <stdio.h>
#include <unistd.h>

namespace {
struct Guard {
	~Guard() { fprintf(stderr, "cancel_guard: destructor ran\n"); }
};
} // namespace

extern "C" void cancel_guard_read(int fd)
{
	Guard g;
	char c;

	if (read(fd, &c, 1) < 0)
		perror("cancel_guard: read");
}
