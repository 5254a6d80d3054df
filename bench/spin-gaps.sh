#!/bin/sh
# bench/spin-gaps.sh -- what interrupts a TSC spin on this machine, and
# which of it pmlab's delay spin counts as delay: bench/spin_gaps.c spins
# SECONDS and sorts the gaps of over 1 us between two TSC reads by length
# and by whether the thread was switched out across them. Run twice: alone,
# and with one busy loop per CPU beside it (so that the scheduler switches
# it out). The delay spin (crates/runtime/src/clock.rs) counts the gaps
# without a switch (interrupts, the hypervisor), as a stall would go on
# through them, and not the switched-out ones.
# Usage: bench/spin-gaps.sh [SECONDS]   (default 2)
set -eu
. "$(dirname "$0")/common.sh"
SECONDS_=${1:-2}
whole_number SECONDS "$SECONDS_"
${CC:-cc} -O2 -o "$TMP/spin_gaps" "$ROOT/bench/spin_gaps.c"
machine_line
summary() {
	awk -v s="$SECONDS_" '
		/^gaps:/ { split($2, b, "="); split($3, w, "="); split($4, c, "="); split($5, t, "=");
			printf "  %-18s %-13s %7d gaps %10.3f ms\n", b[2] " us", (w[2] ? "switched out" : "not switched"), c[2], t[2];
			tot[w[2]] += t[2] }
		END { printf "  counted as delay (not switched): %.3f ms (%.2f%% of the spin); not counted (switched out): %.3f ms\n",
			tot[0], tot[0] / (s * 10), tot[1] }'
}
echo "alone:"
"$TMP/spin_gaps" "$SECONDS_" | summary
n=$(nproc)
busy_loops "$n"
echo "beside $n busy loops:"
"$TMP/spin_gaps" "$SECONDS_" | summary
