/* check.h: the unit tests' check harness. REQ(cond) records the first
 * failed condition of the current check; report(name) prints "ok NAME" or
 * "FAIL NAME: line N: cond" and counts it. */
#ifndef WP_TEST_CHECK_H
#define WP_TEST_CHECK_H

#include <stdio.h>

static int nr_passed, nr_failed;

static char why[512];
#define REQ(c)                                                                   \
	do {                                                                     \
		if (!(c) && !why[0])                                             \
			snprintf(why, sizeof(why), "line %d: %s", __LINE__, #c); \
	} while (0)

static void report(const char *name)
{
	if (why[0]) {
		printf("FAIL %s: %s\n", name, why);
		nr_failed++;
	} else {
		printf("ok   %s\n", name);
		nr_passed++;
	}
	why[0] = '\0';
}

#endif
