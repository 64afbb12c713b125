#!/usr/bin/env bash
# demo.sh: `make demo`. Profiles build/progs/demo under the preload in
# build/demo/, summarizes the profile with `wallprof report`, writes the HTML
# flame graph beside it when this build has the html format, and prints their
# paths. Expects build/libwallprof.so, build/wallprof and build/progs/demo.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
lib="$root/build/libwallprof.so"
prog="$root/build/progs/demo"
wallprof="$root/build/wallprof"
out="$root/build/demo"

for f in "$lib" "$wallprof" "$prog"; do
	if [[ ! -e "$f" ]]; then
		echo "demo.sh: ${f#"$root"/} is missing; run 'make demo'" >&2
		exit 1
	fi
done
mkdir -p "$out"

echo "demo.sh: profiling build/progs/demo (about 3 s)"
cd "$out"
# Keep a user's own preloads after ours.
LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}" WALLPROF_OUTPUT="$out/wallprof.%p.json" "$prog" &
pid=$!
status=0
wait "$pid" || status=$?
if [[ $status -ne 0 ]]; then
	echo "demo.sh: the demo program exited with status $status" >&2
	exit 1
fi

profile="$out/wallprof.$pid.json"
if [[ ! -s "$profile" ]]; then
	echo "demo.sh: no profile was produced (expected $profile)" >&2
	exit 1
fi

echo
"$wallprof" report "$profile"
valid=0
if [[ -e "$root/test/sentry_check.py" ]]; then
	echo
	python3 "$root/test/sentry_check.py" "$profile" || valid=$?
fi
echo
echo "profile: $profile"
# The flame graph, when this build has the html writer.
html="$out/wallprof.$pid.html"
if "$wallprof" convert "$profile" -f html -o "$html" >/dev/null 2>"$out/html.err"; then
	echo "flame graph: $html"
elif grep -q "not built" "$out/html.err"; then
	echo "flame graph: not in this build yet (wallprof convert -f html)"
else
	cat "$out/html.err" >&2
	valid=1
fi
rm -f "$out/html.err"
exit "$valid"
