/* block: interposed blocking libc calls (see block.c). */
#ifndef WP_BLOCK_H
#define WP_BLOCK_H

/* Resolves every real libc function the wrappers call. Called from the
 * constructor; wrappers that run earlier resolve lazily. Not
 * async-signal-safe. */
void wp_block_init(void);

#endif
