# bench/kv-common.sh -- what the pmkv-server scripts share (kv-latency.sh,
# kv-recovery.sh). Sourced after common.sh, in $ROOT.
#
#   kv_build MODES       build the server ($SERVER); with "pm" in MODES also
#                        pmlab and the `pmlab cargo` build ($ISERVER)
#   kv_engine_ok E       false (and a note) when engine E is not in this build
#   kv_wrap MODE         the --wrap command of a mode ("" for native)
#   kv_cluster_start MODE ENGINE BASE   three nodes; sets KV_LEADER_PORT
#   kv_cluster_stop
#   kv_redis_benchmark PORT CLIENTS REQUESTS BYTES   requests/s ("-" without it)
#
# KV_DIR: the nodes' data directory (default a fresh one on /dev/shm).
#   json_us LINE KEY     a number of a one-line JSON object, one decimal

SERVER=$ROOT/target/release/pmkv-server
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
ISERVER=$ROOT/target/pmlab/$TRIPLE/release/pmkv-server
PM_LATENCY=${PM_LATENCY:-305}
POOL_MB=${POOL_MB:-512}
# Only the pools are PM under the instrumented source.
export PMLAB_INSTR_PM=pool
# The nodes' data (Raft log, pools) on tmpfs, so that the figures measure
# the service and the emulated PM rather than the disk's fdatasync; KV_DIR
# picks another directory (a disk: the log's fdatasync then dominates).
KV_DIR=${KV_DIR:-}
if [ -z "$KV_DIR" ]; then
	if [ -d /dev/shm ] && [ -w /dev/shm ]; then KV_DIR=$(mktemp -d /dev/shm/pmkv-bench.XXXXXX); else KV_DIR=$TMP/data; fi
	KV_DIR_OWNED=1
fi
mkdir -p "$KV_DIR"

kv_build() {
	cargo build --release -q -p pmlab-kv-server -p pmlab-kv -p pmlab-cli
	case " $1 " in *" pm "*)
		need_pmlab
		"$PMLAB" cargo build --release -q -p pmlab-kv-server --bin pmkv-server >"$TMP/icargo.log" 2>&1 ||
			{ echo "$BENCH: pmlab cargo build of pmkv-server failed:" >&2; cat "$TMP/icargo.log" >&2; exit 2; }
		;;
	esac
	for m in $1; do
		case $m in native | pm) ;; *) echo "$BENCH: MODES: unknown mode $m (native, pm)" >&2; exit 2 ;; esac
	done
}

kv_engine_ok() {
	case $1 in mem | list | btree | wal) return 0 ;; anchor) ;; *) echo "$BENCH: ENGINES: unknown engine $1 (mem list btree wal anchor)" >&2; exit 2 ;; esac
	if ! "$ROOT/target/release/pmkv" create -e anchor "$TMP/probe.pool" >/dev/null 2>"$TMP/probe.err" &&
		grep -q "not in this build" "$TMP/probe.err"; then
		echo "| anchor | - | not in this build (no libpmemobj) | | | |"
		return 1
	fi
	return 0
}

kv_wrap() {
	case $1 in pm) echo "$PMLAB run --source instrumented --pm-latency $PM_LATENCY --" ;; *) echo "" ;; esac
}

KV_CLUSTER=""
kv_cluster_start() {
	_bin=$SERVER
	[ "$1" = pm ] && _bin=$ISERVER
	rm -rf "$KV_DIR/cluster"
	"$_bin" cluster --nodes 3 --dir "$KV_DIR/cluster" --base-port "$3" --engine "$2" --pool-mb "$POOL_MB" --runtime "${RUNTIME:-current}" \
		${NODE_FLAGS:-} --wrap "$(kv_wrap "$1")" >"$TMP/cluster.out" 2>&1 &
	KV_CLUSTER=$!
	_i=0
	until grep -q '^leader: node' "$TMP/cluster.out" 2>/dev/null; do
		_i=$((_i + 1))
		if [ "$_i" -gt 600 ] || ! kill -0 "$KV_CLUSTER" 2>/dev/null || grep -q '^no leader' "$TMP/cluster.out"; then
			echo "$BENCH: the $2 cluster ($1) elected no leader; its output and node logs:" >&2
			cat "$TMP/cluster.out" "$KV_DIR"/cluster/node-*.log >&2 2>/dev/null || true
			kv_cluster_stop
			return 1
		fi
		sleep 0.1
	done
	KV_LEADER_PORT=$(sed -n 's/^leader: node [0-9]* at 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$TMP/cluster.out")
}

# TERM, not KILL: the launcher stops its node processes on TERM.
kv_cluster_stop() {
	[ -n "$KV_CLUSTER" ] || return 0
	kill -TERM "$KV_CLUSTER" 2>/dev/null && wait "$KV_CLUSTER" 2>/dev/null || true
	KV_CLUSTER=""
}
kv_cleanup() {
	kv_cluster_stop
	[ -z "${KV_DIR_OWNED:-}" ] || rm -rf "$KV_DIR"
	bench_cleanup
}
trap kv_cleanup EXIT

kv_redis_benchmark() {
	command -v redis-benchmark >/dev/null 2>&1 || { echo "-"; return 0; }
	redis-benchmark -p "$1" -t set -n "$3" -c "$2" -d "$4" -r 10000 -q 2>/dev/null |
		tr '\r' '\n' | sed -n 's/^SET: \([0-9.]*\) requests per second.*/\1/p' | tail -1 | awk '{printf "%.0f", $1}'
}

json_us() {
	echo "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p" | awk '{printf "%.1f", $1}'
}
