// profile_cxx: a C++ target for demangling (test/e2e/profile.py). The hot
// method is wpt::Worker::spin(int); it runs for about one second of wall time
// and prints a result that does not depend on how many rounds fit in that
// second.
#include <chrono>
#include <cstdio>

namespace wpt {

struct Worker {
	unsigned long seed;

	explicit Worker(unsigned long s) : seed(s) {}
	__attribute__((noinline)) long spin(int n);
};

long Worker::spin(int n)
{
	unsigned long x = seed;

	for (int i = 0; i < n; i++) {
		x = x * 2862933555777941757UL + 3037000493UL;
		__asm__ volatile("" : "+r"(x));
	}
	return static_cast<long>(x >> 33);
}

} // namespace wpt

int main()
{
	using clock = std::chrono::steady_clock;
	const auto end = clock::now() + std::chrono::milliseconds(1000);
	wpt::Worker w(12345);
	long result = 0;
	long rounds = 0;

	do {
		long r = w.spin(1000000);
		if (rounds++ == 0)
			result = r;
		else if (r != result)
			return 5; // spin() must be deterministic
	} while (clock::now() < end);

	std::printf("profile_cxx: spin(1000000) = %ld\n", result);
	return 0;
}
