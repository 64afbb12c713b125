/* as_safe: the tag for async-signal-safe functions.
 *
 * WP_AS_SAFE stands first on the declaration (and on the definition of a
 * static function) of every function of the runtime that a signal handler
 * or an async-signal-safe interposer path may reach: such a function makes
 * only async-signal-safe calls, allocates nothing, takes no lock that the
 * interrupted code may hold and keeps its frame small (it may run on a
 * small alternate signal stack). It expands to nothing;
 * scripts/check-as-safe.py checks that everything reachable from the
 * handlers carries it, and sums their frames. */
#ifndef WP_AS_SAFE_H
#define WP_AS_SAFE_H

#define WP_AS_SAFE

#endif
