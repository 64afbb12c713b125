/* html_data: a model (model.h) as the data of the HTML flame graph
 * (html.c), one JSON object small enough for a full ring of 64 threads to
 * stay under 2 MB. docs/FORMATS.md ("HTML flame graph") describes it:
 *
 *   strings   every function name, file and module once
 *   frames    source frames, 5 integers each: name, file, line, module
 *             (string indices, 0 for none) and kind (WP_HTML_FRAME_*)
 *   nodes     the stacks as one trie, root first: node i >= 1 is
 *             (i - parent, frame), packed as numbers (below); node 0 is the
 *             root; a parent always comes before its children
 *   threads   [tid, name, samples] of every thread with samples
 *   runs      per thread, its samples as runs of (node, state, gap, count)
 *             packed as numbers: `count` samples of one stack and state at
 *             consecutive ticks, starting `gap` ticks after the previous
 *             run's end; state 0 on-CPU, 1 off-CPU in no known system
 *             call, 2 + k off-CPU in system call syscalls[k]
 *
 * Numbers are packed into strings of JSON-safe characters, 5 bits a
 * character (html_json.h). Every string is escaped for JSON inside an HTML
 * <script> element (html_json.h), so no name can end the element. Not
 * async-signal-safe. */
#ifndef WP_HTML_DATA_H
#define WP_HTML_DATA_H

#include <stddef.h>

#include "formats.h"

#define WP_HTML_FRAME_INLINED 1 /* inlined into the next (outer) frame */
#define WP_HTML_FRAME_UNKNOWN 2 /* no function name: the label is module+offset or address */
#define WP_HTML_FRAME_APP 4     /* in the main executable */

/* What wp_html_data() wrote, for the writer's statistics. */
struct wp_html_data_stats {
	size_t nr_samples; /* samples with a valid stack */
	size_t nr_threads; /* threads with such samples */
	size_t nr_nodes;   /* trie nodes (without the root) */
	size_t nr_runs;
};

/* Writes `m` as the JSON object above through `s`. Returns 0, or -1 when
 * out of memory (the sink's `err` says so) or when the sink failed. */
int wp_html_data(const struct wp_model *m, struct wp_out_sink *s, struct wp_html_data_stats *st);

#endif
