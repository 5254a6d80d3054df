#!/bin/sh
# bench/hooked-window.sh -- the overlap the hooks leave a program: 8
# independent chains with EXTRA in 0 1 2 4 cache-resident loads after each
# miss (bench/window_chains.c), built natively and with `pmlab cc`, the
# latter run counting with nothing injected (`pmlab run --source
# instrumented --no-inject`). Prints the median ns per miss of each, and
# the misses in flight they imply (DRAM latency / ns per miss, with the
# cached calibration's DRAM latency), and the window in units (a filter
# hit 1, a logged access 2) that the counting run's overlap implies:
# overlap x (2 + EXTRA). The runtime's default hooked window
# (PMLAB_INSTR_HOOKED_WINDOW) was fitted on such figures.
# Usage: bench/hooked-window.sh [REPS]   (default 3; needs target/release/pmlab)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-3}
whole_number REPS "$REPS"
need_pmlab
${CC:-cc} -O2 -o "$TMP/native" "$ROOT/bench/window_chains.c"
"$PMLAB" cc -O2 -o "$TMP/hooked" "$ROOT/bench/window_chains.c"
DRAM=$(cached_dram_ns)
machine_line "DRAM $DRAM ns (pmlab calibrate)"
printf '%-6s %12s %12s %10s %10s %10s\n' extra native_ns hooked_ns native_mlp hooked_mlp units
for e in 0 1 2 4; do
	: >"$TMP/n" && : >"$TMP/h"
	i=0
	while [ $i -lt "$REPS" ]; do
		"$TMP/native" "$e" | value_of ns_per_miss >>"$TMP/n"
		"$PMLAB" run --quiet --source instrumented --no-inject -- "$TMP/hooked" "$e" |
			value_of ns_per_miss >>"$TMP/h"
		i=$((i + 1))
	done
	n=$(med <"$TMP/n")
	h=$(med <"$TMP/h")
	[ -n "$n" ] && [ -n "$h" ] || { echo "hooked-window.sh: a run printed nothing (extra=$e)" >&2; exit 1; }
	awk -v e="$e" -v n="$n" -v h="$h" -v d="$DRAM" 'BEGIN {
		printf "%-6d %12.1f %12.1f %10.2f %10.2f %10.1f\n", e, n, h, d / n, d / h, d / h * (2 + e) }'
done
