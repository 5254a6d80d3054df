#!/bin/sh
# bench/oversubscribed.sh -- an oversubscribed program under the emulator:
# mtlat with THREADS threads (default 8) sharing the machine's CPUs, 2,000
# critical sections each of 100 steps inside and 100 outside, at 400 ns.
# Per repetition, interleaved: the reference (the native build waiting
# 400 - DRAM ns of its own CPU time after every step, `mtlat -x`: the
# schedule with every access at 400 ns, no emulator) and the build of
# `pmlab cc` under `pmlab run --source instrumented`. Prints each run, the
# medians, and per worker thread of the emulated runs the delay requested
# and injected, the overhead subtracted and the time the delay spins
# spent switched out (`spin_off_cpu_ns`, which lengthens a spin instead of
# counting in it), in ms. DRAM: the cached calibration.
# Usage: bench/oversubscribed.sh [REPS] [THREADS]   (default 5 8; needs
# target/release/pmlab, python3)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-5}
THREADS=${2:-8}
whole_number REPS "$REPS"
whole_number THREADS "$THREADS"
need_pmlab
command -v python3 >/dev/null || { echo "$BENCH: python3 not found: install it (apt-get install python3)" >&2; exit 2; }
${CC:-cc} -O2 -o "$TMP/native" "$ROOT/workloads/mtlat.c" -lpthread
"$PMLAB" cc -O2 -o "$TMP/emulated" "$ROOT/workloads/mtlat.c" -lpthread
DRAM=$(cached_dram_ns)
EXTRA=$(awk -v d="$DRAM" 'BEGIN { printf "%d", 400 - d + 0.5 }')
ARGS="-t $THREADS -k 2000 -i 100 -o 100 -r 256"
machine_line "DRAM $DRAM ns (pmlab calibrate); mtlat $ARGS at 400 ns"
ms() { value_of elapsed_ns | awk '{ printf "%.1f\n", $1 / 1e6 }'; }
i=0
while [ $i -lt "$REPS" ]; do
	# shellcheck disable=SC2086 # ARGS is a list of words
	r=$("$TMP/native" $ARGS -x "$EXTRA" | ms)
	# shellcheck disable=SC2086
	e=$("$PMLAB" run --quiet --source instrumented --pm-latency 400 --stats-json "$TMP/s$i.json" -- "$TMP/emulated" $ARGS | ms)
	[ -n "$r" ] && [ -n "$e" ] || { echo "$BENCH: a run printed no elapsed_ns" >&2; exit 1; }
	echo "run $i: reference $r ms, emulated $e ms"
	echo "$r" >>"$TMP/r"
	echo "$e" >>"$TMP/e"
	i=$((i + 1))
done
r=$(med <"$TMP/r")
e=$(med <"$TMP/e")
awk -v r="$r" -v e="$e" 'BEGIN { printf "median: reference %.1f ms, emulated %.1f ms (%+.2f%%)\n", r, e, (e - r) / r * 100 }'
python3 - "$TMP" "$REPS" <<'EOF'
import json, statistics, sys
tmp, reps = sys.argv[1], int(sys.argv[2])
rows = []
for i in range(reps):
    with open(f"{tmp}/s{i}.json") as f:
        s = json.load(f)
    # The workers: the threads that did not start the process.
    rows += [t for t in s["threads"] if t["tid"] != s["pid"]]
keys = ["requested_delay_ns", "injected_delay_ns", "overhead_ns", "spin_off_cpu_ns"]
print("per worker thread (ms):  " + "  ".join(f"{k[:-3]} median {statistics.median(t[k] for t in rows) / 1e6:.1f} ({min(t[k] for t in rows) / 1e6:.1f}..{max(t[k] for t in rows) / 1e6:.1f})" for k in keys))
EOF
