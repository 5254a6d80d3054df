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
REPS=${1:-5}
THREADS=${2:-8}
for v in "$REPS" "$THREADS"; do
	case $v in '' | *[!0-9]* | 0) echo "oversubscribed.sh: $v: REPS and THREADS are whole numbers of at least 1" >&2; exit 2 ;; esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PMLAB=${PMLAB:-$ROOT/target/release/pmlab}
[ -x "$PMLAB" ] || { echo "oversubscribed.sh: $PMLAB not built: run cargo build --release (or set PMLAB)" >&2; exit 2; }
command -v python3 >/dev/null || { echo "oversubscribed.sh: python3 not found: install it (apt-get install python3)" >&2; exit 2; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
${CC:-cc} -O2 -o "$TMP/native" "$ROOT/workloads/mtlat.c" -lpthread
"$PMLAB" cc -O2 -o "$TMP/emulated" "$ROOT/workloads/mtlat.c" -lpthread
DRAM=$( ("$PMLAB" calibrate --show --json 2>/dev/null || "$PMLAB" calibrate --json) | sed -n 's/.*"dram_latency_ns": *\([0-9.]*\).*/\1/p' | head -1)
[ -n "$DRAM" ] || { echo "oversubscribed.sh: pmlab calibrate printed no DRAM latency" >&2; exit 1; }
EXTRA=$(awk -v d="$DRAM" 'BEGIN { printf "%d", 400 - d + 0.5 }')
ARGS="-t $THREADS -k 2000 -i 100 -o 100 -r 256"
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); DRAM $DRAM ns (pmlab calibrate); mtlat $ARGS at 400 ns"
ms() { sed -n 's/.*elapsed_ns=\([0-9]*\).*/\1/p' | awk '{ printf "%.1f\n", $1 / 1e6 }'; }
i=0
while [ $i -lt "$REPS" ]; do
	# shellcheck disable=SC2086 # ARGS is a list of words
	r=$("$TMP/native" $ARGS -x "$EXTRA" | ms)
	# shellcheck disable=SC2086
	e=$("$PMLAB" run --quiet --source instrumented --pm-latency 400 --stats-json "$TMP/s$i.json" -- "$TMP/emulated" $ARGS | ms)
	[ -n "$r" ] && [ -n "$e" ] || { echo "oversubscribed.sh: a run printed no elapsed_ns" >&2; exit 1; }
	echo "run $i: reference $r ms, emulated $e ms"
	echo "$r" >>"$TMP/r"
	echo "$e" >>"$TMP/e"
	i=$((i + 1))
done
med() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
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
