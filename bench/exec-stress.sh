#!/bin/sh
# bench/exec-stress.sh -- the exec race of issue 2 under load: runs the
# threaded exec test program (crates/cli/tests/c/exec.c: a thread spins
# while main execs itself) RUNS times under `pmlab run` with 1 ms epochs,
# with BUSY busy loops competing for the CPUs, and counts the runs whose
# new image did not finish with the runtime loaded. Before the exec hooks
# an epoch signal pending across execve killed about 1 run in 20.
# Usage: bench/exec-stress.sh [RUNS] [BUSY]   (PMLAB=path/to/pmlab, default target/release/pmlab)
set -eu
. "$(dirname "$0")/common.sh"
RUNS=${1:-200}
BUSY=${2:-4}
CC=${CC:-cc}
need_pmlab
"$CC" -O2 -pthread -o "$TMP/exec" "$ROOT/crates/cli/tests/c/exec.c"
printf 'pm=100\nloop\n' > "$TMP/s.txt"
busy_loops "$BUSY"
echo "machine: $(nproc) CPUs, $BUSY busy loops, load $(cut -d' ' -f1-3 /proc/loadavg)"
fails=0
i=0
while [ $i -lt "$RUNS" ]; do
	if ! "$PMLAB" run -q --pm-latency 200ns --epoch-max 1ms --epoch-min 10us \
		--source "synthetic:$TMP/s.txt" -- "$TMP/exec" > "$TMP/out" 2>/dev/null \
		|| ! grep -q "preload=yes" "$TMP/out"; then
		fails=$((fails + 1))
	fi
	i=$((i + 1))
done
echo "exec under load: $fails of $RUNS runs failed"
