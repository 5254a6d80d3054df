#!/bin/sh
# bench/hooked-window.sh -- the overlap the hooks leave a program, and the
# hooked-window setting that fits it: 8 independent chains with EXTRA in
# 0 1 2 4 cache-resident loads after each miss (bench/window_chains.c),
# built natively and with `pmlab cc`, the latter run counting with nothing
# injected (`pmlab run --source instrumented --no-inject`). Per EXTRA it
# prints the median ns per miss of each, the misses in flight they imply
# (DRAM latency / ns per miss, with the cached calibration's DRAM
# latency), and the window in units that the counting run's overlap
# implies at the fitted weight: overlap x (WEIGHT + EXTRA).
#
# The runtime's model of that overlap (counters.rs, model.rs): a filter
# hit takes one unit of the core's window, a logged access WEIGHT units
# (PMLAB_INSTR_LOGGED_WEIGHT), and the window holds WINDOW units
# (PMLAB_INSTR_HOOKED_WINDOW), so that W / (WEIGHT + EXTRA) misses
# overlap, at most as many as natively. Each miss here is one logged
# call and EXTRA hits, so 1 / overlap = WEIGHT / W + EXTRA / W, a line in
# EXTRA: the last line printed is its least-squares fit on EXTRA 0, 1
# and 2, and the defaults to set. The rows after the fitted ones are
# checks the fit did not see: EXTRA 4, and the chains kept as memlat
# keeps them (shape stack: a local array, unhooked, same units as EXTRA
# 0) and as idxchase -m keeps its state (shape mem: one update hit and
# one logged load per miss, units WEIGHT + 1); fit_mlp is what the model
# charges for each, hooked_mlp what the run did.
# Fit only on a quiet machine (no other process running).
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
: >"$TMP/points"
for point in "reg 0" "reg 1" "reg 2" "reg 4" "stack 0" "mem 0"; do
	set -- $point
	shape=$1 e=$2
	: >"$TMP/n" && : >"$TMP/h"
	i=0
	while [ $i -lt "$REPS" ]; do
		"$TMP/native" "$e" 500000 "$shape" | value_of ns_per_miss >>"$TMP/n"
		"$PMLAB" run --quiet --source instrumented --no-inject -- "$TMP/hooked" "$e" 500000 "$shape" |
			value_of ns_per_miss >>"$TMP/h"
		i=$((i + 1))
	done
	n=$(med <"$TMP/n")
	h=$(med <"$TMP/h")
	[ -n "$n" ] && [ -n "$h" ] || { echo "hooked-window.sh: a run printed nothing ($shape, extra=$e)" >&2; exit 1; }
	echo "$shape $e $n $h" >>"$TMP/points"
done
awk -v d="$DRAM" '
{ s[NR] = $1; e[NR] = $2; n[NR] = $3; h[NR] = $4; fit[NR] = $1 == "reg" && $2 <= 2
  hits[NR] = $2 + ($1 == "mem") }
END {
	# 1 / overlap = a + b x EXTRA on the fitted rows: W = 1 / b, WEIGHT = a / b.
	for (i = 1; i <= NR; i++) if (fit[i]) {
		x = e[i]; y = h[i] / d
		k++; sx += x; sy += y; sxx += x * x; sxy += x * y
	}
	b = (k * sxy - sx * sy) / (k * sxx - sx * sx)
	a = (sy - b * sx) / k
	if (b <= 0) { print "hooked-window.sh: the overlap does not fall as EXTRA grows: no fit (a busy machine?)" > "/dev/stderr"; exit 1 }
	W = 1 / b; w = a / b
	if (w < 1) { w = 1; W = 0; for (i = 1; i <= NR; i++) if (fit[i]) { W += d / h[i] * (1 + e[i]); m++ } W /= m }
	printf "%-6s %6s %12s %12s %10s %10s %10s %10s\n", "shape", "extra", "native_ns", "hooked_ns", "native_mlp", "hooked_mlp", "fit_mlp", "units"
	for (i = 1; i <= NR; i++)
		printf "%-6s %6d %12.1f %12.1f %10.2f %10.2f %10.2f %10.1f%s\n", s[i], e[i], n[i], h[i], d / n[i], d / h[i], W / (w + hits[i]), d / h[i] * (w + hits[i]), fit[i] ? "" : "  (check)"
	printf "fit: PMLAB_INSTR_HOOKED_WINDOW=%.1f PMLAB_INSTR_LOGGED_WEIGHT=%.2f (settings.rs: DEFAULT_HOOKED_WINDOW = %d, DEFAULT_LOGGED_WEIGHT = %d thousandths)\n", W, w, int(W * 10 + 0.5) * 100, int(w * 100 + 0.5) * 10
}' "$TMP/points"
