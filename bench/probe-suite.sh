#!/bin/sh
# probe-suite.sh -- time the profiler's full suites and print what they found.
#
# Usage: bench/probe-suite.sh [OUTDIR]   (default: ./probe-bench)
# Runs `pmlab probe all` against sim:optane-1dimm, sim:optane-6dimm and the
# host (default mode), each into OUTDIR/<target>/ with plots, and prints the
# wall-clock time of each plus the report. Then checks the closed loop:
# `pmlab probe infer` on the 1-DIMM results, loaded by `pmlab sim show`.
# Figures go to docs/benchmarks.md (section "Profiler"); say how loaded the
# machine was: the 2 cores are shared.
set -eu
OUT=${1:-probe-bench}
PMLAB=${PMLAB:-target/release/pmlab}
[ -x "$PMLAB" ] || { echo "probe-suite.sh: build first: cargo build --release -p pmlab-cli" >&2; exit 2; }
mkdir -p "$OUT"
echo "machine: $(nproc) CPUs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for t in sim:optane-1dimm sim:optane-6dimm host; do
    d="$OUT/$(echo "$t" | tr ':' '-')"
    rm -rf "$d"
    start=$(date +%s.%N)
    "$PMLAB" probe all --target "$t" --out "$d" --plot "$d/plots" > "$d.report.txt"
    end=$(date +%s.%N)
    echo "== $t: $(echo "$end - $start" | bc) s wall"
    cat "$d.report.txt"
done
"$PMLAB" probe infer "$OUT/sim-optane-1dimm" > "$OUT/profile.toml"
"$PMLAB" sim show --config "$OUT/profile.toml" > /dev/null && echo "profile.toml accepted by pmlab sim"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
