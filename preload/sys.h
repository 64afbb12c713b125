/* sys: the runtime's raw system calls (wp_syscall and wp_sysN), straight to
 * the kernel, past the library's own interposers. They live in output/sys.h,
 * which the writers the library shares with the converter use as well;
 * this name is the runtime's (its files include "sys.h").
 * async-signal-safe */
#ifndef WP_PRELOAD_SYS_H
#define WP_PRELOAD_SYS_H

#include "../output/sys.h"

#endif
