#!/bin/sh
# Installs the Debian packages libwallprof needs to build and test, when
# missing. As root it runs apt-get; otherwise it prints the exact command.
#
#   scripts/install-deps.sh bench   the tools `make bench` compares against or
#       drives (perf, gperftools' CPU profiler, git). Never fatal: without
#       them (not root, apt-get failed) their rows are skipped with a note.
#   scripts/install-deps.sh format  only clang-format-19 (make format-check).
#   scripts/install-deps.sh speedscope  the npm package speedscope (pinned)
#       into build/npm, which test/e2e/formats.py loads files with. Never
#       fatal: offline or without npm, that test says it skipped.
set -eu

if [ "${1:-}" = speedscope ]; then
	dir="$(cd "$(dirname "$0")/.." && pwd)/build/npm"
	[ -d "$dir/node_modules/speedscope/dist/release" ] && exit 0
	if ! command -v npm >/dev/null 2>&1; then
		echo "wallprof: npm missing: the speedscope test will be skipped (apt-get install nodejs npm)" >&2
		exit 0
	fi
	mkdir -p "$dir"
	if ! (cd "$dir" && npm install --no-audit --no-fund --silent speedscope@1.25.0 >/dev/null 2>&1); then
		echo "wallprof: npm install speedscope failed (offline?): the speedscope test will be skipped" >&2
	fi
	exit 0
fi

if [ "${1:-}" = bench ]; then
	BENCH_PKGS="linux-perf libgoogle-perftools4 git"
	bench_missing() {
		command -v perf >/dev/null 2>&1 || return 0 # C-cpubound-vs-tools
		dpkg-query -W -f='${Status}' libgoogle-perftools4 2>/dev/null | grep -q 'ok installed' || return 0
		command -v git >/dev/null 2>&1 || return 0 # K-make-follow-children clones the tree
		return 1
	}
	bench_missing || exit 0
	if [ "$(id -u)" != 0 ]; then
		echo "wallprof: benchmark tools missing (their rows will be skipped); to include them, as root:" >&2
		echo "  apt-get update && apt-get install -y $BENCH_PKGS" >&2
		exit 0
	fi
	echo "wallprof: installing benchmark tools: $BENCH_PKGS" >&2
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $BENCH_PKGS >/dev/null; }; then
		echo "wallprof: apt-get install $BENCH_PKGS failed; the rows that need them will be skipped" >&2
	fi
	exit 0
fi

# Each check that fails adds its packages to PKGS, so that only what is
# missing is installed: a machine whose Node.js comes from elsewhere (the
# nodesource build ships its own npm and conflicts with Debian's npm) keeps
# it, and the rest still installs.
PKGS=""
need() {
	case " $PKGS " in
	*" $1 "*) ;;
	*) PKGS="${PKGS:+$PKGS }$*" ;;
	esac
}
missing() {
	PKGS=""
	command -v cc >/dev/null 2>&1 || need build-essential
	command -v c++ >/dev/null 2>&1 || need build-essential
	command -v make >/dev/null 2>&1 || need build-essential
	command -v python3 >/dev/null 2>&1 || need python3
	command -v clang >/dev/null 2>&1 || need clang # make clang-check
	command -v eu-stack >/dev/null 2>&1 || need elfutils
	command -v go >/dev/null 2>&1 || need golang-go # test/e2e/golang.py (cgo test program), formats.py (go tool pprof)
	command -v npm >/dev/null 2>&1 || need nodejs npm # test/e2e/formats.py (speedscope's importer in node)
	command -v pkg-config >/dev/null 2>&1 || need pkg-config
	for pc in libunwind:libunwind-dev libdw:libdw-dev libelf:libelf-dev jansson:libjansson-dev \
		zlib:zlib1g-dev libcurl:libcurl4-openssl-dev; do # libcurl: wallprof upload
		pkg-config --exists "${pc%%:*}" 2>/dev/null || need "${pc#*:}"
	done
	[ -f /usr/lib/python3.11/test/test_eintr.py ] || need libpython3.11-testsuite
	dpkg -s libc6-dbg >/dev/null 2>&1 || need libc6-dbg # libc's file:line; test/e2e/debug_cache.py
	command -v chromium >/dev/null 2>&1 || need chromium # test/e2e/html.py (headless, DevTools pipe)
	# test/e2e/programs.py: programs nobody here wrote
	command -v xz >/dev/null 2>&1 || need xz-utils
	command -v git >/dev/null 2>&1 || need git
	command -v sqlite3 >/dev/null 2>&1 || need sqlite3
	command -v redis-server >/dev/null 2>&1 || need redis-server
	command -v redis-benchmark >/dev/null 2>&1 || need redis-tools
	[ -n "$PKGS" ]
}

if [ "${1:-}" = format ]; then
	missing() {
		PKGS="clang-format-19"
		! command -v clang-format-19 >/dev/null 2>&1
	}
fi

missing || exit 0

if [ "$(id -u)" != 0 ]; then
	echo "wallprof: missing dependencies; run as root:" >&2
	echo "  apt-get update && apt-get install -y $PKGS" >&2
	exit 1
fi
echo "wallprof: installing dependencies: $PKGS" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends $PKGS >/dev/null
if missing; then
	echo "wallprof: dependencies still missing after apt-get install: $PKGS" >&2
	exit 1
fi
