#!/bin/sh
# bench/kv-crash.sh -- the kill -9 test of the PM key-value engines at
# length: for each engine, N children (`pmkv stress`) are killed with
# SIGKILL at seeded random points; after each kill the pool is reopened,
# every invariant checked, and every acknowledged write must be there and
# nothing else (the one in-flight write, or group, may be either). list and
# btree also run with group commit (GROUP writes per commit).
#
# usage: bench/kv-crash.sh [N]   (default 200 per engine; SEED, GROUP,
#        PMKV, DIR from the environment; the seed is printed for reproducing)
set -eu
. "$(dirname "$0")/common.sh"
N=${1:-200}
whole_number N "$N"
GROUP=${GROUP:-8}
whole_number GROUP "$GROUP"
SEED=${SEED:-$(date +%s)}
whole_number SEED "$SEED"
PMKV=${PMKV:-$ROOT/target/release/pmkv}
DIR=${DIR:-$TMP}
[ -x "$PMKV" ] || { echo "$BENCH: $PMKV not built: run cargo build --release -p pmlab-kv (or set PMKV)" >&2; exit 2; }
machine_line "kill -9 x $N per engine, seed $SEED"
fail=0
for e in list wal btree anchor; do
	if ! "$PMKV" create -e "$e" "$TMP/probe-$e" >/dev/null 2>"$TMP/err" && grep -q "not in this build" "$TMP/err"; then
		echo "$e: skipped ($(cat "$TMP/err"))"
		continue
	fi
	"$PMKV" crashtest -e "$e" --runs "$N" --seed "$SEED" --dir "$DIR" || fail=1
	case $e in list | btree)
		if "$PMKV" crashtest -e "$e" --runs "$N" --seed "$SEED" --group "$GROUP" --dir "$DIR" >"$TMP/out"; then
			sed "s/^$e:/$e (group $GROUP):/" "$TMP/out"
		else
			fail=1
		fi
		;;
	esac
done
[ $fail -eq 0 ] || { echo "$BENCH: an engine lost an acknowledged write or broke an invariant (see above; reproduce with SEED=$SEED)" >&2; exit 1; }
