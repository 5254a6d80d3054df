#!/bin/sh
# bench/pause-penalty.sh -- can the emulator subtract this host's pause
# penalty (bench/spin-interleave.sh)? Each round measures a continuous
# chase and a paused one (bench/spin_chase.c: 2M steps over 256 MiB on
# huge pages; 25,000-step rounds with 4.5 ms spins, about the pattern of
# 10 ms epochs at 400 ns), then runs memlat built with `pmlab cc` under
# `pmlab run --source instrumented --pm-latency 400ns`, given the
# continuous figure as the DRAM latency. Prints, per round, the penalty
# (paused - continuous) and memlat's bias (ns per access - 400).
# Usage: bench/pause-penalty.sh [ROUNDS]   (default 6; PMLAB=path/to/pmlab,
#   default target/release/pmlab)
set -eu
. "$(dirname "$0")/common.sh"
ROUNDS=${1:-6}
whole_number ROUNDS "$ROUNDS"
need_pmlab
${CC:-cc} -O2 -o "$TMP/spin_chase" "$ROOT/bench/spin_chase.c"
"$PMLAB" cc -O2 -o "$TMP/memlat" "$ROOT/workloads/memlat.c"
machine_line
i=0
while [ $i -lt "$ROUNDS" ]; do
	c=$("$TMP/spin_chase" 0 256 1 2000000 0 | value_of ns_per_step)
	p=$("$TMP/spin_chase" 0 256 80 25000 4500 | value_of ns_per_step)
	m=$("$PMLAB" run -q --source instrumented --dram-latency "${c}ns" --pm-latency 400ns -- \
		"$TMP/memlat" -r 256 -n 4000000 | value_of ns_per_access)
	python3 -c "print(f'round $((i + 1)): continuous {$c:.1f} paused {$p:.1f} penalty {$p - $c:+.1f} ns; memlat at 400 ns {$m:.1f}, bias {$m - 400:+.1f} ns')"
	i=$((i + 1))
done
