#!/usr/bin/env bash
# bench/trace-speed.sh -- speed of `pmlab analyze` (goal: at least 20 M
# events per second on one core) and its memory, on a real trace of about
# 15 M records (the libpmemobj hash map, 2 threads x 400 000 operations),
# and the tracing overhead on that run. Figures go to docs/benchmarks.md.
#
# usage: bench/trace-speed.sh [REPEATS]   (default 5; prints median and spread)
set -euo pipefail
cd "$(dirname "$0")/.."
PMLAB=${PMLAB:-target/release/pmlab}
REPEATS=${1:-5}
OPS=${OPS:-400000}
[ -x "$PMLAB" ] || { echo "trace-speed: $PMLAB not built: run 'cargo build --release -p pmlab-cli -p pmlab-runtime'" >&2; exit 2; }
make -s -C workloads all
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "median %.2f (min %.2f, max %.2f, n=%d)", v[int((NR + 1) / 2)], v[1], v[NR], NR }'; }

echo "machine: $(nproc) CPUs, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "repeats: $REPEATS (others may be using the CPUs: see the spread)"
t=$("$PMLAB" trace -o "$dir/big.pmt" --overhead --json /dev/fd/3 -- workloads/build/pmobj_hashmap "$dir/pool" 2 "$OPS" 20 3>&1 >/dev/null)
echo "trace: $(echo "$t" | python3 -c 'import json,sys; t=json.load(sys.stdin); print("%d records, %d dropped, %d buffer waits; traced %.2f s, untraced %.2f s: overhead %.2fx" % (t["records"], t["dropped"], t["buffer_waits"], t["seconds"], t["baseline_seconds"], t["overhead"]))')"
echo "file: $(stat -c %s "$dir/big.pmt") bytes"
rates=""; cpu=""; rss=0
for _ in $(seq "$REPEATS"); do
    out=$( { /usr/bin/time -f 'TIME %U %M' "$PMLAB" analyze "$dir/big.pmt" --json; } 2>&1 )
    line=$(echo "$out" | python3 -c '
import json, sys
text = sys.stdin.read()
j = json.loads(text[: text.rindex("}") + 1])
user, rss = text[text.rindex("TIME"):].split()[1:3]
print(j["records"] / j["analysis_seconds"] / 1e6, j["records"] / max(float(user), 1e-3) / 1e6, rss)')
    rates+="$(echo "$line" | cut -d' ' -f1)"$'\n'
    cpu+="$(echo "$line" | cut -d' ' -f2)"$'\n'
    r=$(echo "$line" | cut -d' ' -f3); [ "$r" -gt "$rss" ] && rss=$r
done
echo "analyze (decode + all metrics, one thread): M records per wall second: $(printf '%s' "$rates" | stats)"
echo "analyze: M records per CPU (user) second: $(printf '%s' "$cpu" | stats); peak RSS $rss KiB"
rates=""
for _ in $(seq "$REPEATS"); do
    s=$(date +%s.%N)
    "$PMLAB" sim --preset optane-1dimm --persistency hops --json "$dir/big.pmt" > /dev/null
    e=$(date +%s.%N)
    rates+="$(awk -v s="$s" -v e="$e" -v n="$(echo "$t" | python3 -c 'import json,sys; print(json.load(sys.stdin)["records"])')" 'BEGIN { print n / (e - s) / 1e6 }')"$'\n'
done
echo "persistency replay (hops on optane-1dimm): M records/s: $(printf '%s' "$rates" | stats)"
# Tracing overhead on a single-threaded run (less noise than the 2-thread
# run above, whose time is dominated by lock hand-offs on 2 shared cores).
over=""
for _ in $(seq "$REPEATS"); do
    over+="$("$PMLAB" trace -o "$dir/o.pmt" --overhead --json /dev/fd/3 -- workloads/build/pmobj_btree "$dir/pool" 1 100000 20 3>&1 >/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["overhead"])')"$'\n'
done
echo "tracing overhead, pmobj_btree 1 thread x 100000 operations (traced / untraced wall time): $(printf '%s' "$over" | stats)"
