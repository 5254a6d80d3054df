#!/bin/sh
# bench/spin-interleave.sh -- what this machine does to a pointer chase
# that an emulator interrupts with spins, without pmlab: 256 MiB on huge
# pages (memlat's region under pmlab validate), 400 ms of chase in
# rounds of STEPS steps, each round followed by a spin as long as the
# round's chase (about what the instrumented source injects per epoch at
# 400 ns on DRAM near 180 ns), against the same chase without spins.
# The 900 us rounds also run with a nanosleep in place of the spin.
# Configurations alternate, REPS times, so that the machine's drift falls
# on all alike. Prints the chase's ns per step (spins not timed) and
# the median slowdown of each spin length. No pmlab involved.
# Usage: bench/spin-interleave.sh [REPS]   (default 5)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-5}
whole_number REPS "$REPS"
${CC:-cc} -O2 -o "$TMP/spin_chase" "$ROOT/bench/spin_chase.c"
machine_line
# steps per round : spin us per round (~180 ns per step on this VM)
CONFIGS="2000000:0:spin 500:90:spin 5000:900:spin 25000:4500:spin 5000:900:sleep"
i=0
while [ $i -lt "$REPS" ]; do
	for c in $CONFIGS; do
		steps=${c%%:*}
		how=${c##*:}
		us=${c#*:}
		us=${us%%:*}
		rounds=$((2000000 / steps))
		if [ "$how" = sleep ]; then
			v=$("$TMP/spin_chase" 0 256 "$rounds" "$steps" "$us" sleep | value_of ns_per_step)
		else
			v=$("$TMP/spin_chase" 0 256 "$rounds" "$steps" "$us" | value_of ns_per_step)
		fi
		[ -n "$v" ] || { echo "spin-interleave.sh: spin_chase failed ($c)" >&2; exit 1; }
		echo "$how $us $v" >>"$TMP/r.txt"
	done
	i=$((i + 1))
done
python3 - "$TMP/r.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    how, us, v = line.split()
    rows.setdefault((how, int(us)), []).append(float(v))
base = statistics.median(rows[("spin", 0)])
for how, us in sorted(rows, key=lambda k: (k[0] != "spin", k[1])):
    v = rows[(how, us)]
    m = statistics.median(v)
    label = "no pause" if us == 0 else f"{how} {us:5d} us per round"
    print(f"{label:>26}: ns/step median {m:7.2f} (min {min(v):.2f}, max {max(v):.2f}, n={len(v)})  {100 * (m / base - 1):+.1f}%")
PY
