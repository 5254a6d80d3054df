#!/usr/bin/env bash
# bench/crash-scale.sh -- how `pmlab crash` scales with the number of
# images: the planted-bug program's correct version (crates/check/tests/c/
# planted.c, every image passes) and the libpmemobj hash map with
# libpmemobj's own recovery as the check (pmobj_open.c), at budgets of
# 10..1000 images. Prints seconds and images per second for each budget.
# Figures go to docs/benchmarks.md.
#
# usage: bench/crash-scale.sh [BUDGETS...]   (default 10 30 100 300 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/common.sh
BUDGETS=${*:-10 30 100 300 1000}
[ -x "$PMLAB" ] || { echo "crash-scale: $PMLAB not built: run 'cargo build --release'" >&2; exit 2; }
rt=$(dirname "$PMLAB")
dir=$TMP
machine_line
"$PMLAB" cc -O0 -g -Iinclude -o "$dir/planted" crates/check/tests/c/planted.c -L"$rt" -lpmlab -Wl,-rpath,"$rt"
cc -O2 -o "$dir/pmobj_open" crates/check/tests/c/pmobj_open.c -lpmemobj
"$PMLAB" cc -O2 -g -std=gnu11 -Iinclude -o "$dir/pmobj_hashmap" workloads/pmobj_hashmap.c -lpmemobj -lpthread
PMLAB_PM_FILE="$dir/p.pool" PMLAB_PM_POOL_SIZE=1048576 \
    "$PMLAB" trace --sites --data -o "$dir/planted.pmt" -- "$dir/planted" ok 2>/dev/null
PMEM_IS_PMEM_FORCE=1 "$PMLAB" trace --sites --data -o "$dir/hm.pmt" -- "$dir/pmobj_hashmap" "$dir/hm.pool" 1 500 50 >/dev/null 2>&1
one() { # NAME TRACE CHECK BUDGET
    local s e j
    s=$(date +%s.%N)
    j=$("$PMLAB" crash --json --budget "$4" --points "$4" --check "$3" --dir "$dir/c" --trace "$2" || true)
    e=$(date +%s.%N)
    echo "$j" | python3 -c "import json,sys; j=json.load(sys.stdin); t=$e-$s; print('crash ($1): budget=$4 images=%d points=%d failed=%s seconds=%.2f images_per_s=%.1f' % (j['images'], j['points'], j['failed'], t, j['images']/t))"
}
for b in $BUDGETS; do
    one planted "$dir/planted.pmt" "PMLAB_PM_FILE={} PMLAB_PM_POOL_SIZE=1048576 $dir/planted check" "$b"
done
for b in $BUDGETS; do
    one pmobj_hashmap "$dir/hm.pmt" "PMEM_IS_PMEM_FORCE=1 $dir/pmobj_open {}" "$b"
done
