#!/bin/sh
# bench/kv-micro.sh -- the thesis' micro-benchmark of the PM key-value
# engines, natively with the pools in DRAM (/dev/shm): ns per insert, read
# and delete of KEYS keys (default 20,000), the open/recovery time of a pool
# holding VALUES values of VALUE_SIZE bytes (default 15,000 x 4 KiB), and
# PM bytes per stored byte. list and btree run with every write durable
# (group 1) and with group commit (GROUP, default 10, the thesis' k); btree
# also at fan-outs 4..7 and 16 (the thesis found 4-7 best). Figures go to
# docs/kv.md beside the thesis' Optane figures: measure on a quiet machine.
#
# With EMU=LATENCY (for example EMU=305ns, FAST'20's idle random read)
# the engines run under `pmlab run --source instrumented` at that PM
# latency, built with `pmlab cargo` (target/pmlab/), only their pools PM.
#
# usage: bench/kv-micro.sh [REPEATS]   (default 3; one line per run;
#        KEYS, VALUES, VALUE_SIZE, GROUP, DIR, PMKV, EMU from the environment)
set -eu
. "$(dirname "$0")/common.sh"
REPEATS=${1:-3}
whole_number REPEATS "$REPEATS"
KEYS=${KEYS:-20000}
VALUES=${VALUES:-15000}
VALUE_SIZE=${VALUE_SIZE:-4096}
GROUP=${GROUP:-10}
for v in KEYS VALUES VALUE_SIZE GROUP; do eval "whole_number $v \"\$$v\""; done
DIR=${DIR:-/dev/shm}
[ -d "$DIR" ] || DIR=$TMP
EMU=${EMU:-}
PREFIX=""
if [ -n "$EMU" ]; then
	need_pmlab
	"$PMLAB" cargo build --release -q -p pmlab-kv --bin pmkv >"$TMP/build.log" 2>&1 ||
		{ echo "$BENCH: pmlab cargo build failed:" >&2; cat "$TMP/build.log" >&2; exit 2; }
	PMKV=${PMKV:-$ROOT/target/pmlab/$(rustc -vV | sed -n 's/^host: //p')/release/pmkv}
	export PMLAB_INSTR_PM=pool
	PREFIX="$PMLAB run --source instrumented --pm-latency $EMU --quiet --"
fi
PMKV=${PMKV:-$ROOT/target/release/pmkv}
[ -x "$PMKV" ] || { echo "$BENCH: $PMKV not built: run cargo build --release -p pmlab-kv (or set PMKV)" >&2; exit 2; }
machine_line "pools in $DIR; $KEYS keys; open with $VALUES x $VALUE_SIZE B; $REPEATS runs each${EMU:+; under pmlab run at $EMU}"
run() {
	$PREFIX "$PMKV" bench --keys "$KEYS" --values "$VALUES" --value-size "$VALUE_SIZE" --dir "$DIR" "$@" 2>"$TMP/err" ||
		{ grep -q "not in this build" "$TMP/err" && echo "$2: skipped ($(cat "$TMP/err"))" && return 0; cat "$TMP/err" >&2; return 1; }
}
for _ in $(seq "$REPEATS"); do
	for e in list wal btree anchor; do
		run -e "$e" --group 1
	done
	run -e list --group "$GROUP"
	for f in 4 5 6 7 16; do
		run -e btree --group "$GROUP" --fanout "$f"
	done
done
