#!/bin/sh
# bench/dep-cost.sh -- instructions per miss of the overlap estimator
# (crates/model/src/mlp.rs) on five synthetic streams, counted by callgrind
# over the estimator's loop only, so the figures hold on a loaded machine.
# `hit` is a pointer chase whose every other node is cached: its figure is
# per logged access (half misses, half hits through the estimator's hit path).
# The other four streams miss on every access. Usage: bench/dep-cost.sh
# [ACCESSES]   (default 200000; needs valgrind)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=${1:-200000}
command -v valgrind >/dev/null || { echo "dep-cost.sh: valgrind not found (apt-get install valgrind)" >&2; exit 2; }
cd "$ROOT" && cargo build --quiet --release -p pmlab-model --example overlap_cost
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/overlap_cost
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
for kind in pointer index random novalue hit; do
    valgrind --tool=callgrind --callgrind-out-file="$OUT/$kind" \
        --toggle-collect='*run_stream*' "$BIN" "$kind" "$N" >"$OUT/$kind.txt" 2>/dev/null
    ir=$(sed -n 's/^summary: *//p' "$OUT/$kind")
    printf '%-8s %6.1f instructions per access (%s)\n' "$kind" \
        "$(echo "$ir $N" | awk '{print $1 / $2}')" "$(cat "$OUT/$kind.txt")"
done
