#!/bin/sh
# bench/memfns.sh -- cost of pmlab's libc memcpy interposer
# (crates/runtime/src/source/instrumented/memfns.rs). For copies of 64 B and 4 KiB that stay in
# the cache, REPS runs each (median [min..max] ns per call):
#   native     clang -O2, no pmlab;
#   preloaded  the same binary with libpmlab.so preloaded but not emulating
#              (the pass-through every program under pmlab pays);
#   counting   built with `pmlab cc`, under `pmlab run --source instrumented
#              --no-inject` (every line offered to the hooks).
# Usage: bench/memfns.sh [REPS]   (PMLAB=path/to/pmlab, default target/release/pmlab)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-5}
CLANG=${CLANG:-clang-14}
LIB=$(dirname "$PMLAB")/libpmlab.so
[ -x "$PMLAB" ] && [ -f "$LIB" ] || { echo "memfns.sh: $PMLAB or $LIB not found: cargo build --release -p pmlab-cli -p pmlab-runtime, or set PMLAB" >&2; exit 2; }
"$CLANG" -O2 -o "$TMP/native" "$ROOT/bench/memcpy_kernel.c"
"$PMLAB" cc -O2 -o "$TMP/instr" "$ROOT/bench/memcpy_kernel.c"

stats() { # values on stdin -> "median min max"
	sort -g | awk '{v[NR]=$1} END {m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.2f [%.2f..%.2f]", m, v[1], v[NR]}'
}

echo "memcpy interposer cost, $REPS runs each; machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
for size in 64 4096; do
	n=$((20000000 * 64 / size)); [ "$n" -lt 200000 ] && n=200000
	for v in native preloaded counting; do
		i=0
		while [ $i -lt "$REPS" ]; do
			case $v in
			native) "$TMP/native" "$size" "$n" ;;
			preloaded) LD_PRELOAD="$LIB" "$TMP/native" "$size" "$n" ;;
			counting) "$PMLAB" run --quiet --source instrumented --no-inject -- "$TMP/instr" "$size" "$n" ;;
			esac
			i=$((i + 1))
		done | value_of ns_per_call > "$TMP/$v.ns"
		printf "%6s B  %-9s %s ns per call\n" "$size" "$v" "$(stats < "$TMP/$v.ns")"
	done
done
