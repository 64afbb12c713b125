/* launcher_static: linked with -static (its own Makefile rule), so the
 * dynamic loader never runs and LD_PRELOAD cannot reach it. Prints one line
 * and exits with the status given as its argument (default 5), so a launcher
 * test can check that the status is passed through. */
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
	int status = argc > 1 ? atoi(argv[1]) : 5;

	printf("launcher_static: status %d\n", status);
	return status;
}
