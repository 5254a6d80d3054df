#!/bin/sh
# Latency and throughput of the Raft key-value service (issue 20): a local
# cluster of three nodes on loopback, SET latency p50/p90/p99 from one client
# and p50/p90 plus throughput from 20 client threads (pmkv-server bench, a
# closed loop against the leader), redis-benchmark's figures beside them,
# and a latency-distribution plot.
#
#   bench/kv-latency.sh [OPS_PER_CLIENT] [VALUE_BYTES]
#
# Env: PMKV_ENGINE (default list), PMKV_BASE_PORT (default 7600), OUT (plot
# directory, default results/kv-latency). Nothing is recorded by this
# script: copy its output into docs/benchmarks.md by hand, with the machine.
set -eu
. "$(dirname "$0")/common.sh"
OPS=${1:-2000}
VALUE=${2:-100}
whole_number OPS "$OPS"
whole_number VALUE_BYTES "$VALUE"
ENGINE=${PMKV_ENGINE:-list}
BASE=${PMKV_BASE_PORT:-7600}
OUT=${OUT:-$ROOT/results/kv-latency}
mkdir -p "$OUT"
cd "$ROOT"
cargo build --release -q -p pmlab-kv-server
SERVER=$ROOT/target/release/pmkv-server

"$SERVER" cluster --nodes 3 --dir "$TMP/cluster" --base-port "$BASE" --engine "$ENGINE" >"$TMP/cluster.out" 2>&1 &
CLUSTER=$!
# TERM, not KILL: the launcher stops its node processes on TERM.
stop_cluster() { kill -TERM "$CLUSTER" 2>/dev/null && wait "$CLUSTER" 2>/dev/null || true; }
trap 'stop_cluster; bench_cleanup' EXIT
i=0
until grep -q '^leader:' "$TMP/cluster.out" 2>/dev/null; do
	i=$((i + 1))
	if [ "$i" -gt 300 ] || ! kill -0 "$CLUSTER" 2>/dev/null; then
		echo "$BENCH: error: the cluster did not elect a leader; its output:" >&2
		cat "$TMP/cluster.out" >&2
		exit 1
	fi
	sleep 0.1
done
cat "$TMP/cluster.out"
ADDRS="127.0.0.1:$BASE,127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2))"
LEADER_PORT=$(sed -n 's/^leader: node [0-9]* at 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/cluster.out")

echo "== pmkv-server bench: SET of $VALUE B, $OPS operations per client, engine $ENGINE =="
"$SERVER" bench --addrs "$ADDRS" --clients 1,20 --ops "$OPS" --value-size "$VALUE" --plot "$OUT/latency.svg"

if command -v redis-benchmark >/dev/null 2>&1; then
	for c in 1 20; do
		echo "== redis-benchmark SET, $c client(s), leader port $LEADER_PORT =="
		redis-benchmark -p "$LEADER_PORT" -t set -n $((OPS * c)) -c "$c" -d "$VALUE" -r 10000 --precision 3 -q 2>&1 \
			| tr '\r' '\n' | grep -v 'rps=' | sed '/^[[:space:]]*$/d'
	done
else
	echo "$BENCH: redis-benchmark not found (apt-get install redis-tools): its figures are skipped"
fi
stop_cluster
echo "$BENCH: plot in $OUT/latency.svg"
