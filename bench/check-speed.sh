#!/usr/bin/env bash
# bench/check-speed.sh -- speed of `pmlab check` (goal: at least 10 M
# records per second) on a generated trace of N records (default 20 M: 4
# threads storing, flushing and fencing lines of 64 MiB, a transaction
# every 64 operations; crates/check/examples/gen_trace.rs), and on a real
# trace (the libpmemobj hash map built with `pmlab cc`, traced with
# --sites). Compares with pmemcheck under valgrind when this valgrind has
# it (Debian's does not: the script says so). Figures go to
# docs/benchmarks.md.
#
# usage: bench/check-speed.sh [REPEATS]   (default 3)   env: N, OPS
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
REPEATS=${1:-3}
N=${N:-20000000}
OPS=${OPS:-20000}
[ -x "$PMLAB" ] || { echo "check-speed: $PMLAB not built: run 'cargo build --release'" >&2; exit 2; }
dir=$TMP
machine_line
cargo run -q --release -p pmlab-check --example gen_trace -- "$dir/gen.pmt" "$N"
echo "generated trace: $(stat -c %s "$dir/gen.pmt") bytes"
rate() { # TRACE: M records per wall and per CPU second of one `pmlab check --json`, records, findings
    "$PMLAB" check --json "$1" | python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.2f %.2f %d %d" % (j["records"]/j["check_seconds"]/1e6, j["records"]/max(j["check_cpu_seconds"],1e-6)/1e6, j["records"], j["findings"]))' || true
}
for _ in $(seq "$REPEATS"); do
    r=$(rate "$dir/gen.pmt")
    echo "check (generated): M_records_per_s=$(echo "$r" | cut -d' ' -f1) M_records_per_cpu_s=$(echo "$r" | cut -d' ' -f2) findings=$(echo "$r" | cut -d' ' -f4)"
done
if "$PMLAB" cc -O2 -g -std=gnu11 -Iinclude -o "$dir/pmobj_hashmap" workloads/pmobj_hashmap.c -lpmemobj -lpthread 2>/dev/null; then
    "$PMLAB" trace --sites -o "$dir/real.pmt" -- "$dir/pmobj_hashmap" "$dir/pool" 1 "$OPS" 50 >/dev/null 2>&1
    for _ in $(seq "$REPEATS"); do
        r=$(rate "$dir/real.pmt")
        echo "check (pmobj_hashmap, $OPS ops): M_records_per_s=$(echo "$r" | cut -d' ' -f1) M_records_per_cpu_s=$(echo "$r" | cut -d' ' -f2) records=$(echo "$r" | cut -d' ' -f3) findings=$(echo "$r" | cut -d' ' -f4)"
    done
else
    echo "check (pmobj_hashmap): skipped (pmlab cc or libpmemobj-dev missing)"
fi
if valgrind --tool=pmemcheck --help >/dev/null 2>&1; then
    cc -O2 -g -std=gnu11 -Iinclude -o "$dir/pmobj_plain" workloads/pmobj_hashmap.c -lpmemobj -lpthread
    s=$(date +%s.%N)
    PMEM_IS_PMEM_FORCE=1 valgrind --tool=pmemcheck -q "$dir/pmobj_plain" "$dir/vpool" 1 "$OPS" 50 >/dev/null 2>&1 || true
    e=$(date +%s.%N)
    s2=$(date +%s.%N)
    "$PMLAB" trace --sites -o "$dir/t2.pmt" -- "$dir/pmobj_hashmap" "$dir/pool2" 1 "$OPS" 50 >/dev/null 2>&1
    "$PMLAB" check "$dir/t2.pmt" >/dev/null || true
    e2=$(date +%s.%N)
    echo "pmemcheck: seconds=$(echo "$e - $s" | bc) pmlab_trace_and_check_seconds=$(echo "$e2 - $s2" | bc)"
else
    echo "pmemcheck: not available (valgrind --tool=pmemcheck fails: this valgrind, $(valgrind --version 2>/dev/null || echo none), does not carry PMDK's pmemcheck tool; it lives in the pmem/valgrind fork)"
fi
