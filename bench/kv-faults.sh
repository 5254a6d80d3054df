#!/usr/bin/env bash
# Longer fault schedules for the Raft key-value service (issue 20): three node
# processes behind per-link proxies; kill -9 and restart of leaders and
# followers, partitions, delayed and dropping links, all drawn from one seed;
# then one node's PM pool restored from `pmlab crash` images of a traced run
# (CRASH_IMAGES of them, one after another; the first loses every line not
# flushed and fenced); then a healed liveness phase that must make progress.
# Every history is checked for linearizability, and the restored node must
# hold what the final reads saw. A failure prints the seed and a reproduce
# line (and, for a history that is not linearizable, the pmkv-server
# lincheck line that re-checks the recorded history).
#
# Unlike the test (keys rotate every second), the clients stay on the same
# few keys for the whole run: every key is hot, its history holds thousands
# of operations with hundreds of unknown outcomes, and the checker must
# still decide it; each run prints the longest and the hardest key checked
# and the checker's time.
#
#   bench/kv-faults.sh [RUNS] [SAFETY_SECS] [SEED]
#
# Env: PMKV_ENGINE (default list), CRASH_IMAGES (default 3; 0 skips the
# crash-image fault and the pmlab cargo build), TRACED_SECS (default 10),
# CLIENTS (default 6), KEYS (default 4), KEY_EPOCH_MS (default 0: never
# rotate).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
SAFETY=${2:-60}
SEED=${3:-$(date +%s)}
IMAGES=${CRASH_IMAGES:-3}
TRACED=${TRACED_SECS:-10}
cargo build --release -q -p pmlab-kv-server -p pmlab-cli
set -- --runs "$RUNS" --seed "$SEED" --safety-secs "$SAFETY" --liveness-secs 10 \
    --clients "${CLIENTS:-6}" --keys "${KEYS:-4}" --key-epoch-ms "${KEY_EPOCH_MS:-0}" \
    --engine "${PMKV_ENGINE:-list}"
if [ "$IMAGES" -gt 0 ]; then
    target/release/pmlab cargo build --release -q -p pmlab-kv-server --bin pmkv-server
    set -- "$@" --crash-images "$IMAGES" --traced-secs "$TRACED"
fi
DIR=${PMKV_FAULT_DIR:-$(mktemp -d /tmp/pmkv-faults.XXXXXX)}
echo "kv-faults: $RUNS runs of ${SAFETY}s faults, $IMAGES crash images, 10s liveness, ${CLIENTS:-6} clients on ${KEYS:-4} keys, first seed $SEED, work dir $DIR"
target/release/pmkv-server faults "$@" --dir "$DIR"
rm -rf "$DIR"
