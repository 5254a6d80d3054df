#!/bin/sh
# bench/runtime.sh -- costs of the emulator runtime (issue 2), against
# Quartz's published figures (2.5 s start-up, ~4000 cycles per epoch,
# ~10 us = 300,000 cycles per thread registration).
#
# Prints medians and ranges over REPS runs of:
#   start-up   runtime initialisation as the runtime measures it (init_ns in
#              the stats; calibration cached, synthetic source), and the wall
#              time of `pmlab run -- true` against plain `true` (the whole
#              launcher: check run + program);
#   epoch      in-handler cost per epoch in TSC cycles (counters read, model,
#              accounting: overhead_cycles_per_epoch); the cost to the
#              thread including signal delivery (its CPU time at 1 ms epochs
#              with --no-inject against the same loop without pmlab); and
#              the process's whole CPU cost per epoch, monitor included;
#   threads    create+join cost per thread with the runtime (registration,
#              slot, counters) minus without, over 2000 threads.
# The machine is shared: figures are noisy; compare medians.
#
# Usage: bench/runtime.sh [REPS]   (PMLAB=path/to/pmlab, default target/release/pmlab)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-7}
need_pmlab
export XDG_CACHE_HOME="$TMP/cache"
"$PMLAB" calibrate --region 64MiB --accesses 1000000 --repeat 1 >/dev/null 2>&1
cc -O2 -o "$TMP/threads" "$ROOT/crates/cli/tests/c/threads.c" -lpthread
cat > "$TMP/loop.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
	volatile unsigned long x = 0;
	long n = argc > 1 ? atol(argv[1]) : 300000000L;
	struct timespec a, b;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
	for (long i = 0; i < n; i++) x += i;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
	printf("loop: thread_cpu_ns=%lld sink=%lu\n",
		(long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec),
		(unsigned long)(x & 1));
	return 0;
}
C
cc -O1 -o "$TMP/loop" "$TMP/loop.c"
printf 'pm=0\nloop\n' > "$TMP/zero.txt"
RUN="$PMLAB run -q --json $TMP/stats.json --dram-latency 100ns --pm-latency 300ns --source synthetic:$TMP/zero.txt"

# measure CMD...: prints "wall_ns cpu_ns" (cpu = user+sys of all children);
# its stdout goes to $TMP/out
measure() {
	python3 - "$TMP/out" "$@" <<'PY'
import resource, subprocess, sys, time
out = open(sys.argv[1], "w")
r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.monotonic_ns()
subprocess.run(sys.argv[2:], stdout=out, check=True)
t1 = time.monotonic_ns()
r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1e9
print(t1 - t0, int(cpu))
PY
}
stat() { # file label unit
	sort -n "$1" | awk -v label="$2" -v unit="$3" '{v[NR]=$1} END {printf "%-46s median %12.1f %s  (min %.1f, max %.1f, n=%d)\n", label, v[int((NR+1)/2)], unit, v[1], v[NR], NR}'
}
json() { # python subscript into the stats object of the last --json document
	python3 -c "import json,sys; v=json.loads(sys.stdin.read().strip().splitlines()[-1])['stats']; print(eval('v' + sys.argv[1]))" "$1"
}
field() { # key: value of key=... in the first line of $TMP/out
	head -n 1 "$TMP/out" | tr ' ' '\n' | sed -n "s/^$1=//p"
}

: > "$TMP/init"; : > "$TMP/wall_run"; : > "$TMP/wall_plain"
: > "$TMP/cyc"; : > "$TMP/epoch_total"; : > "$TMP/epoch_thread"; : > "$TMP/thr"
i=0
while [ "$i" -lt "$REPS" ]; do
	i=$((i + 1))
	set -- $(measure $RUN -- true); run_wall=$1; run_cpu=$2
	json '["init_ns"]' < "$TMP/stats.json" | awk '{print $1/1e3}' >> "$TMP/init"
	echo "$run_wall" | awk '{print $1/1e3}' >> "$TMP/wall_run"
	set -- $(measure "$TMP/loop" 1000); echo "$1" | awk '{print $1/1e3}' >> "$TMP/wall_plain"

	# Epochs: the same CPU-bound loop alone and under the runtime with
	# 1 ms epochs and nothing injected. The loop's own thread CPU time
	# (robust to a busy machine) grows by the signal delivery and the
	# handler; the whole process's CPU time adds the monitor thread.
	set -- $(measure "$TMP/loop"); plain_cpu=$2; plain_thr=$(field thread_cpu_ns)
	set -- $(measure $RUN --no-inject --epoch-max 1ms --epoch-min 1ms -- "$TMP/loop"); emu_cpu=$2; emu_thr=$(field thread_cpu_ns)
	epochs=$(json '["total"]["epochs"]' < "$TMP/stats.json")
	ghz=$(json '["tsc_ghz"]' < "$TMP/stats.json")
	json '["total"]["overhead_cycles_per_epoch"]' < "$TMP/stats.json" >> "$TMP/cyc"
	echo "$emu_thr $plain_thr $epochs $ghz" | awk '{printf "%.0f\n", ($1 - $2) / $3 * $4}' >> "$TMP/epoch_thread"
	echo "$emu_cpu $plain_cpu $run_cpu $epochs $ghz" | awk '{printf "%.0f\n", ($1 - $2 - $3) / $4 * $5}' >> "$TMP/epoch_total"

	"$TMP/threads" 2000 200 > "$TMP/out"; plain_t=$(field ns_per_thread)
	$RUN --no-inject -- "$TMP/threads" 2000 200 > "$TMP/out"; emu_t=$(field ns_per_thread)
	echo "$emu_t $plain_t" | awk '{print $1 - $2}' >> "$TMP/thr"
done
echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), load $(cut -d' ' -f1-3 /proc/loadavg)"
stat "$TMP/init" "runtime start-up (init_ns, cached calibration)" "us"
stat "$TMP/wall_run" "pmlab run -- true (wall, whole launcher)" "us"
stat "$TMP/wall_plain" "a trivial program alone (wall)" "us"
stat "$TMP/cyc" "epoch cost inside the handler" "cycles"
stat "$TMP/epoch_thread" "epoch cost to the thread (signal + handler)" "cycles"
stat "$TMP/epoch_total" "epoch cost incl. the monitor thread (CPU)" "cycles"
stat "$TMP/thr" "thread registration (create+join delta)" "ns"
