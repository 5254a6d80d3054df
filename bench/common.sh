# bench/common.sh -- what the bench scripts share. Sourced (POSIX sh) right
# after `set -eu`:
#
#   . "$(dirname "$0")/common.sh"
#
# It sets BENCH (the script's name, for messages), ROOT (the source tree),
# PMLAB (the pmlab binary: $PMLAB, default target/release/pmlab; checked
# by need_pmlab) and TMP (a fresh directory, removed at exit together with
# any busy loops that busy_loops started).

BENCH=$(basename "$0")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PMLAB=${PMLAB:-$ROOT/target/release/pmlab}
TMP=$(mktemp -d)
BUSY_PIDS=""
bench_cleanup() {
	# KILL: a loop just forked may not have dropped the traps it
	# inherited yet, and would outlive a TERM.
	for p in $BUSY_PIDS; do kill -KILL "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap bench_cleanup EXIT
# A signal (^C, a closed pipe) ends the script through exit, so that the
# EXIT trap runs: sh does not run it when a signal kills the shell.
trap 'exit 130' INT
trap 'exit 141' PIPE
trap 'exit 143' TERM HUP

# whole_number NAME VALUE: exit 2 with a one-line error unless VALUE is a
# whole number of at least 1.
whole_number() {
	case $2 in '' | *[!0-9]* | 0) echo "$BENCH: $1=$2: a whole number of at least 1" >&2; exit 2 ;; esac
}

# need_pmlab: exit 2 with a one-line error unless $PMLAB is built.
need_pmlab() {
	[ -x "$PMLAB" ] || { echo "$BENCH: $PMLAB not built: run cargo build --release --workspace (or set PMLAB)" >&2; exit 2; }
}

# busy_loops N: start N busy loops (shell loops holding a CPU each), killed
# at exit.
busy_loops() {
	_i=0
	while [ $_i -lt "$1" ]; do
		sh -c 'while :; do :; done' &
		BUSY_PIDS="$BUSY_PIDS $!"
		_i=$((_i + 1))
	done
}

# machine_line [MORE]: the line a bench prints first: CPUs and load average,
# then MORE (after "; ") if given.
machine_line() {
	echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)${1:+; $1}"
}

# value_of KEY: the number after KEY= on each line of standard input that
# has one (the workloads' key=value output).
value_of() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }

# med: the median of the numbers on standard input, one a line (the lower
# middle one of an even count).
med() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# cached_dram_ns: the DRAM latency of pmlab's calibration cache (measured
# first if there is none), ns; fails with a one-line error if pmlab prints
# none.
cached_dram_ns() {
	_d=$( ("$PMLAB" calibrate --show --json 2>/dev/null || "$PMLAB" calibrate --json) | sed -n 's/.*"dram_latency_ns": *\([0-9.]*\).*/\1/p' | head -1)
	[ -n "$_d" ] || { echo "$BENCH: pmlab calibrate printed no DRAM latency" >&2; return 1; }
	echo "$_d"
}
