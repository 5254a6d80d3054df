#!/bin/sh
# bench/batch-cost.sh -- instructions per logged access of the instrumented
# source's batch path (ModelState::run: decode, prefetch, cache model,
# overlap estimator, counts), replayed in-process on the entry streams the
# hooks log for memlat-like chases (8 and 1 chains over 256 MiB), an index
# chase and a mix of loads, stores, updates and compares, and split by
# stage: the cache model alone, the estimator alone, the rest. Counted by
# callgrind over each stage's function only, so the figures hold on a
# loaded machine. "reference" is the batch path as it was before it was
# made cheaper (kept in the tests, which check that both give the same
# totals).
# Usage: bench/batch-cost.sh [ENTRIES]   (default 200000 per stream, the
# first 3/4 warm the model; needs valgrind)
set -eu
. "$(dirname "$0")/common.sh"
N=${1:-200000}
whole_number ENTRIES "$N"
command -v valgrind >/dev/null || { echo "$BENCH: valgrind not found (apt-get install valgrind)" >&2; exit 2; }
cd "$ROOT"
BIN=$(cargo test --release -p pmlab-runtime --lib --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -x "$BIN" ] || { echo "$BENCH: could not build the runtime's test binary (cargo test --release -p pmlab-runtime --no-run)" >&2; exit 2; }
echo "machine: $(nproc) CPUs (instruction counts do not depend on the load)"
printf '%-9s %8s %8s %8s %8s %8s %8s %10s\n' stream entries misses batch cache estim. rest reference
for s in chase8 chase1 idxchase mixed; do
    PMLAB_REPLAY_ENTRIES=$N PMLAB_REPLAY_STREAM=$s valgrind --tool=callgrind \
        --callgrind-out-file="$TMP/$s" --toggle-collect='*replay::stage_*' \
        "$BIN" --ignored --exact source::instrumented::model::replay::batch_cost \
        --test-threads=1 --nocapture >"$TMP/$s.txt" 2>/dev/null
    line=$(grep -o "replay $s: .*" "$TMP/$s.txt") || { echo "$BENCH: the replay of $s failed (see cargo test --release -p pmlab-runtime replay)" >&2; exit 1; }
    entries=$(echo "$line" | sed 's/^replay [^:]*: \([0-9]*\) entries, \([0-9]*\) misses.*/\1/')
    misses=$(echo "$line" | sed 's/^replay [^:]*: \([0-9]*\) entries, \([0-9]*\) misses.*/\2/')
    callgrind_annotate --inclusive=yes --threshold=100 "$TMP/$s" >"$TMP/$s.ann" 2>/dev/null
    ir() { grep "replay::stage_$1 \[" "$TMP/$s.ann" | head -n 1 | awk '{gsub(",", "", $1); print $1}'; }
    batch=$(ir batch) cache=$(ir cache) est=$(ir estimator) ref=$(ir reference)
    echo "$entries $misses ${batch:-0} ${cache:-0} ${est:-0} ${ref:-0}" | awk -v s="$s" '{
        n = $1; printf "%-9s %8d %8d %8.1f %8.1f %8.1f %8.1f %10.1f\n", s, $1, $2,
            $3 / n, $4 / n, $5 / n, ($3 - $4 - $5) / n, $6 / n }'
done
echo "(instructions per entry; every entry of the chases is a miss)"
