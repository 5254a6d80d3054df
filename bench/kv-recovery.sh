#!/bin/sh
# Recovery and start-up of a replica of the Raft key-value service (issue
# 20), one table row per engine and mode: three nodes on loopback; a
# follower is killed (SIGKILL), the leader takes WRITES SETs of VALUE_BYTES
# (15,000 x 4 KiB, as in the thesis), the follower is started again and
# timed until its applied index equals the leader's (recovery); then it is
# stopped (SIGTERM) and started RESTARTS times with that data, each timed
# from process start to answering and to having re-applied up to the
# leader's index (start-up; the median is shown). `pmkv-server bench --mode
# recovery` does the work; this script builds, loops and prints the rows.
#
#   bench/kv-recovery.sh [WRITES] [VALUE_BYTES] [RESTARTS]   (default 15000 4096 3)
#
# Env: ENGINES (default "mem list btree wal anchor"), MODES (default
# "native pm"; pm: every node under `pmlab run --source instrumented
# --pm-latency $PM_LATENCY`, default 305), POOL_MB (512), KV_DIR (the
# nodes' data, default on /dev/shm: see bench/kv-common.sh), PMKV_TIMING=1
# (each recovery's timed steps on stderr: snapshot build, transfer, staging,
# install, entries appended; each with the process CPU time since that
# node's previous step, the build and staging threads with their own CPU
# time and page faults: on a shared machine compare those, not the wall
# times). A few minutes (about one per row).
set -eu
. "$(dirname "$0")/common.sh"
WRITES=${1:-15000}
VALUE=${2:-4096}
RESTARTS=${3:-3}
whole_number WRITES "$WRITES"
whole_number VALUE_BYTES "$VALUE"
whole_number RESTARTS "$RESTARTS"
ENGINES=${ENGINES:-mem list btree wal anchor}
MODES=${MODES:-native pm}
cd "$ROOT"
. "$ROOT/bench/kv-common.sh"
kv_build "$MODES"
machine_line "$WRITES writes of $VALUE B missed, $RESTARTS restarts"
echo "| engine | mode | recovery (ms) | recovering node answering (ms) | start-up: answering (ms) | start-up: re-applied (ms) |"
echo "|---|---|---|---|---|---|"
for mode in $MODES; do
	for e in $ENGINES; do
		kv_engine_ok "$e" || continue
		set -- --engine "$e" --pool-mb "$POOL_MB" --writes "$WRITES" --value-size "$VALUE" \
			--restarts "$RESTARTS" --json --dir "$KV_DIR/recovery"
		[ "$mode" = pm ] && set -- "$@" --node-bin "$ISERVER" --wrap "$(kv_wrap pm)"
		if "$SERVER" bench --mode recovery "$@" >"$TMP/rec.json"; then
			r=$(cat "$TMP/rec.json")
			echo "| $e | $mode | $(json_us "$r" recovery_ms) | $(json_us "$r" recovery_serving_ms) | $(json_us "$r" startup_serving_ms) | $(json_us "$r" startup_caught_up_ms) |"
		else
			echo "| $e | $mode | failed (see above) | | | |"
		fi
	done
done
