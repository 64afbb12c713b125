"""libwallprof's benchmarks, one module per benchmark (run by scripts/bench.py).

common.py holds what they share: running a program bare, under the preload
or under another profiler; side-by-side order and medians; the table. Each
benchmark module has a docstring saying what it measures and its target, and
a BENCHMARKS list of common.Benchmark (name, run(table, tmpdir, quick),
programs under build/bench/ it needs); scripts/bench.py lists the modules in
MODULES, in the order the table shows them.
"""
