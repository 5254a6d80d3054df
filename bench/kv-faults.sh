#!/usr/bin/env bash
# Longer fault schedules for the Raft key-value service (issue 20): three node
# processes behind per-link proxies; kill -9 and restart of leaders and
# followers, partitions, delayed and dropping links, all drawn from one seed;
# then a healed liveness phase that must make progress. Every history is
# checked for linearizability. A failure prints the seed and a reproduce line.
#
#   bench/kv-faults.sh [RUNS] [SAFETY_SECS] [SEED]   (env PMKV_ENGINE, default list)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SAFETY=${2:-60}
SEED=${3:-$(date +%s)}
cargo build --release -q -p pmlab-kv-server
DIR=${PMKV_FAULT_DIR:-$(mktemp -d /tmp/pmkv-faults.XXXXXX)}
echo "kv-faults: $RUNS runs of ${SAFETY}s faults + 10s liveness, first seed $SEED, work dir $DIR"
target/release/pmkv-server faults --runs "$RUNS" --seed "$SEED" --safety-secs "$SAFETY" \
    --liveness-secs 10 --clients 6 --keys 10 --dir "$DIR" --engine "${PMKV_ENGINE:-list}"
rm -rf "$DIR"
