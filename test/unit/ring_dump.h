/* ring_dump.h: a ring's window as the library and the converter get it: a
 * raw dump of the ring written by the library's async-signal-safe writer
 * (wp_raw_write_out) into a memfd, read back by the raw reader
 * (wp_raw_read_ex, as `wallprof convert` reads a dump). The reader holds the
 * one copy of the window (samples of the window ending at the newest
 * sample, sorted by time; only the stacks and frames they use, stacks in
 * first-use order, frames in first-use order within them): the unit tests
 * of the ring look at what it keeps through it. */
#ifndef WP_TEST_RING_DUMP_H
#define WP_TEST_RING_DUMP_H

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../output/raw.h"
#include "../../preload/raw_dump.h"
#include "../../preload/ring.h"

/* The window of `r` in `out` (info, counters and settings filled as the
 * reader fills them; no modules or threads). Returns 0, or -1 after one
 * line saying why. */
static inline int ring_window(const struct wp_ring *r, struct wp_profile *out,
			      struct wp_raw_info *info)
{
	static struct wp_raw_out o; /* 2 KiB: off the stack, as the library's */
	char path[64], err[256] = "";
	int fd = memfd_create("ring-window", MFD_CLOEXEC), rc = -1;

	if (fd < 0) {
		perror("     (ring_window: memfd_create)");
		return -1;
	}
	if (wp_raw_write_out(&o, fd, NULL, r, NULL, 0, NULL, 0, NULL, NULL, NULL) == 0) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		rc = wp_raw_read_ex(path, out, info, err, sizeof(err));
	} else {
		snprintf(err, sizeof(err), "the raw dump could not be written");
	}
	if (rc < 0)
		printf("     (ring_window: %s)\n", err);
	close(fd);
	return rc;
}

#endif
