#!/bin/sh
# bench/llc-warmth.sh -- the bias that bench/synthetic-delay.sh avoids:
# 100,000 steps of a chain right after building it, with and without a
# 250 ms spin in between, over an LLC-resident region (8 MiB) and a larger
# one (128 MiB), on huge pages as memlat. No pmlab involved. Usage: bench/llc-warmth.sh [REPS]
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-3}
${CC:-cc} -O2 -o "$TMP/spin_chase" "$ROOT/bench/spin_chase.c"
machine_line
for mib in 8 128; do
	for spin in 0 250; do
		printf 'region %3s MiB, spin %3s ms: chase ms' "$mib" "$spin"
		i=0
		while [ $i -lt "$REPS" ]; do
			printf ' %s' "$("$TMP/spin_chase" "$spin" "$mib" | sed 's/.*chase_ms=\([0-9.]*\).*/\1/')"
			i=$((i + 1))
		done
		echo
	done
done
