#!/bin/sh
# Write latency and throughput of the Raft key-value service (issue 20),
# one table row per engine and mode: three nodes on loopback
# (`pmkv-server cluster`), SET latency p50/p90/p99 from one client, p50/p90
# and throughput from 20 client threads (`pmkv-server bench`, closed loops
# against the leader), and redis-benchmark's requests per second with 1 and
# 20 clients beside them (OPS and 5 x OPS requests). A latency-distribution
# plot per run.
#
#   bench/kv-latency.sh [OPS_PER_CLIENT] [VALUE_BYTES]   (default 2000 100)
#
# Env: ENGINES (default "mem list btree wal anchor"), MODES (default
# "native pm": pm runs every node under `pmlab run --source instrumented
# --pm-latency $PM_LATENCY`, default 305 ns, with the `pmlab cargo` build of
# the server and only the pools PM), RUNTIME (the nodes' --runtime, default
# current), PMKV_BASE_PORT (7600), KV_DIR (the
# nodes' data, default on /dev/shm: see bench/kv-common.sh), OUT (plots,
# default results/kv-latency), NODE_FLAGS (more flags for every node, e.g.
# "--commit-lag-ms 0" or "--spin-us 50"), SET_TRACE=1 (one client only,
# the nodes record each SET's stages, PMKV_SET_TRACE, and the median of
# each step is printed after each row: see docs/kv-server.md). Nothing is
# recorded: copy the rows into docs/benchmarks.md with the machine line. A
# few minutes for the defaults.
set -eu
. "$(dirname "$0")/common.sh"
OPS=${1:-2000}
VALUE=${2:-100}
whole_number OPS "$OPS"
whole_number VALUE_BYTES "$VALUE"
ENGINES=${ENGINES:-mem list btree wal anchor}
MODES=${MODES:-native pm}
PM_LATENCY=${PM_LATENCY:-305}
BASE=${PMKV_BASE_PORT:-7600}
whole_number PMKV_BASE_PORT "$BASE"
OUT=${OUT:-$ROOT/results/kv-latency}
mkdir -p "$OUT"
cd "$ROOT"
. "$ROOT/bench/kv-common.sh"
kv_build "$MODES"
machine_line "SET of $VALUE B, $OPS operations per client thread"
"$SERVER" bench --mode floor --ops "$OPS" --value-size "$VALUE" --json >"$TMP/floor.json" ||
	{ echo "$BENCH: the floor measurement failed (see above)" >&2; exit 1; }
while read -r f; do
	echo "floor, $(echo "$f" | sed -n 's/.*"hops":\([0-9]*\).*/\1/p') relay(s), $(echo "$f" | sed -n 's/.*"wait":"\([a-z]*\)".*/\1/p'): round trip p50 / p90 / p99 $(json_us "$f" p50_us) / $(json_us "$f" p90_us) / $(json_us "$f" p99_us) us"
done <"$TMP/floor.json"
# The thesis' figures (real Optane, one machine) beside ours.
thesis() {
	case $1 in
	wal) echo "150 | 560 / 800" ;;
	list) echo "100 | 412 / 650" ;;
	btree) echo "120 | 480 / 780" ;;
	*) echo "- | -" ;;
	esac
}
echo "| engine | mode | 1 client p50 / p90 / p99 (us) | 20 clients p50 / p90 (us) | 20 clients ops/s | redis-benchmark 1 / 20 clients (ops/s) | thesis 1 client p50 (us) | thesis 20 clients p50 / p90 (us) |"
echo "|---|---|---|---|---|---|---|---|"
for mode in $MODES; do
	for e in $ENGINES; do
		kv_engine_ok "$e" || continue
		rm -f "$TMP"/set-trace-*.txt
		if [ "${SET_TRACE:-0}" = 1 ]; then export PMKV_SET_TRACE="$TMP/set-trace-%p.txt"; CLIENTS=1; else CLIENTS=1,20; fi
		kv_cluster_start "$mode" "$e" "$BASE" || { echo "| $e | $mode | cluster failed (see above) | | | | $(thesis "$e") |"; continue; }
		ADDRS="127.0.0.1:$BASE,127.0.0.1:$((BASE + 1)),127.0.0.1:$((BASE + 2))"
		"$SERVER" bench --addrs "$ADDRS" --clients "$CLIENTS" --ops "$OPS" --value-size "$VALUE" \
			--json --plot "$OUT/latency-$e-$mode.svg" >"$TMP/bench.json" ||
			{ kv_cluster_stop; echo "| $e | $mode | bench failed (see above) | | | | $(thesis "$e") |"; continue; }
		one=$(sed -n '1p' "$TMP/bench.json")
		many=$(sed -n '2p' "$TMP/bench.json")
		rb1=$(kv_redis_benchmark "$KV_LEADER_PORT" 1 $((OPS)) "$VALUE")
		rb20=-
		[ "$CLIENTS" = 1 ] || rb20=$(kv_redis_benchmark "$KV_LEADER_PORT" 20 $((OPS * 5)) "$VALUE")
		kv_cluster_stop
		unset PMKV_SET_TRACE
		if [ "${SET_TRACE:-0}" = 1 ]; then
			echo "| $e | $mode | $(json_us "$one" p50_us) / $(json_us "$one" p90_us) / $(json_us "$one" p99_us) | - | - | $rb1 / - | $(thesis "$e") |"
			"$SERVER" set-trace "$TMP"/set-trace-*.txt || true
			BASE=$((BASE + 3))
			continue
		fi
		echo "| $e | $mode | $(json_us "$one" p50_us) / $(json_us "$one" p90_us) / $(json_us "$one" p99_us) | $(json_us "$many" p50_us) / $(json_us "$many" p90_us) | $(json_us "$many" throughput_ops) | $rb1 / $rb20 | $(thesis "$e") |"
		BASE=$((BASE + 3))
	done
done
echo "$BENCH: plots in $OUT"
