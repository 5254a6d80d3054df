#!/bin/sh
# bench/sync-epochs.sh -- issue 2's two remaining figures:
#  * sync-point epochs: mtlat with 2 threads, 150 critical sections of 10
#    steps and 2000 steps outside, a synthetic source owing 200 us per
#    epoch; lock hold and wait times with sync epochs (minimum 0) and
#    without them (minimum = maximum = 20 ms): with them the delay is paid
#    inside the critical sections and the other thread waits for it;
#  * on a machine without a PMU, how fast `pmlab run --source hw` refuses.
# Usage: bench/sync-epochs.sh [REPS]   (PMLAB=path/to/pmlab, default target/release/pmlab)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-3}
need_pmlab
cc -O2 -pthread -o "$TMP/mtlat" "$ROOT/workloads/mtlat.c"
printf 'pm=2000\nloop\n' > "$TMP/s.txt"
machine_line
for min in 0 20ms; do
	i=0
	while [ $i -lt "$REPS" ]; do
		"$PMLAB" run -q --dram-latency 100ns --pm-latency 200ns --epoch-max 20ms \
			--epoch-min "$min" --source "synthetic:$TMP/s.txt" -- \
			"$TMP/mtlat" -t 2 -k 150 -i 10 -o 2000 -r 1 |
		awk -v min="$min" '{for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
			printf "epoch-min %-5s lock held %6.1f ms, waited %6.1f ms\n", min, v["lock_hold_ns"] / 1e6, v["lock_wait_ns"] / 1e6}'
		i=$((i + 1))
	done
done
t0=$(date +%s%N)
if "$PMLAB" run --source hw --pm-latency 400ns -- true 2> "$TMP/err"; then
	echo "hw source: this machine has a usable PMU (no refusal to time)"
else
	t1=$(date +%s%N)
	echo "hw source refused in $(( (t1 - t0) / 1000000 )) ms: $(head -1 "$TMP/err")"
fi
