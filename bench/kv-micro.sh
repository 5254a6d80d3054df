#!/bin/sh
# bench/kv-micro.sh -- the thesis' micro-benchmark of the PM key-value
# engines, natively with the pools in DRAM (/dev/shm): ns per insert, read
# and delete of KEYS keys (default 20,000), the open/recovery time of a pool
# holding VALUES values of VALUE_SIZE bytes (default 15,000 x 4 KiB), and
# PM bytes per stored byte. list and btree run with every write durable
# (group 1) and with group commit (GROUP, default 10, the thesis' k); btree
# also at each fan-out of FANOUTS (default 4 5 6 7 8 10 12 16; the thesis
# found 4-7 best). Figures go to docs/kv.md beside the thesis' Optane
# figures: measure on a quiet machine.
#
# With EMU=LATENCY (for example EMU=305ns, FAST'20's idle random read)
# the engines run under `pmlab run --source instrumented` at that PM
# latency, built with `pmlab cargo` (target/pmlab/), only their pools PM.
#
# With WA=1 (the default; WA=0 skips it) each engine's insert-then-delete
# run of WA_KEYS keys (default 2,000) is also traced with `pmlab trace`
# (`pmlab cargo` build) and `pmlab analyze` reports its PM write
# amplification: bytes stored to PM beyond the keys and values the
# engines mark as user data.
#
# Prints one line per run, then the rows of docs/kv.md's tables (the
# median of the runs of each configuration).
#
# usage: bench/kv-micro.sh [REPEATS]   (default 3; KEYS, VALUES, VALUE_SIZE,
#        GROUP, FANOUTS, DIR, PMKV, EMU, WA, WA_KEYS from the environment)
set -eu
. "$(dirname "$0")/common.sh"
REPEATS=${1:-3}
whole_number REPEATS "$REPEATS"
KEYS=${KEYS:-20000}
VALUES=${VALUES:-15000}
VALUE_SIZE=${VALUE_SIZE:-4096}
GROUP=${GROUP:-10}
WA=${WA:-1}
WA_KEYS=${WA_KEYS:-2000}
FANOUTS=${FANOUTS:-4 5 6 7 8 10 12 16}
for v in KEYS VALUES VALUE_SIZE GROUP WA_KEYS; do eval "whole_number $v \"\$$v\""; done
case $WA in 0 | 1) ;; *) echo "$BENCH: WA=$WA: 0 or 1" >&2 && exit 2 ;; esac
for f in $FANOUTS; do whole_number FANOUTS "$f"; done
DIR=${DIR:-/dev/shm}
[ -d "$DIR" ] || DIR=$TMP
EMU=${EMU:-}
PREFIX=""
IPMKV=""
if [ -n "$EMU" ] || [ "$WA" -ne 0 ]; then
	need_pmlab
	"$PMLAB" cargo build --release -q -p pmlab-kv --bin pmkv >"$TMP/build.log" 2>&1 ||
		{ echo "$BENCH: pmlab cargo build failed:" >&2; cat "$TMP/build.log" >&2; exit 2; }
	IPMKV=$ROOT/target/pmlab/$(rustc -vV | sed -n 's/^host: //p')/release/pmkv
fi
if [ -n "$EMU" ]; then
	PMKV=${PMKV:-$IPMKV}
	export PMLAB_INSTR_PM=pool
	PREFIX="$PMLAB run --source instrumented --pm-latency $EMU --quiet --"
fi
PMKV=${PMKV:-$ROOT/target/release/pmkv}
[ -x "$PMKV" ] || { echo "$BENCH: $PMKV not built: run cargo build --release -p pmlab-kv (or set PMKV)" >&2; exit 2; }
machine_line "pools in $DIR; $KEYS keys; open with $VALUES x $VALUE_SIZE B; $REPEATS runs each${EMU:+; under pmlab run at $EMU}"
run() {
	$PREFIX "$PMKV" bench --keys "$KEYS" --values "$VALUES" --value-size "$VALUE_SIZE" --dir "$DIR" "$@" >"$TMP/out" 2>"$TMP/err" ||
		{ grep -q "not in this build" "$TMP/err" && echo "$2: skipped ($(cat "$TMP/err"))" && return 0; cat "$TMP/err" >&2; return 1; }
	cat "$TMP/out"
	cat "$TMP/out" >>"$TMP/all"
}
: >"$TMP/all"
for _ in $(seq "$REPEATS"); do
	for e in list wal btree anchor; do
		run -e "$e" --group 1
	done
	run -e list --group "$GROUP"
	for f in $FANOUTS; do
		run -e btree --group "$GROUP" --fanout "$f"
	done
done
# The table rows: configuration, then the median of each figure.
# A bench line reads: NAME insert N ns read N ns delete N ns open(V x S B)
# MS ms PM bytes per stored byte R (group G, FLUSH)
echo
echo "rows for docs/kv.md${EMU:+ (at $EMU)}: | engine, group | insert ns | read ns | delete ns | open ms | PM bytes per stored byte |"
awk '
function median(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	g = $24; sub(",", "", g)
	k = $1 ", group " g
	if (!(k in seen)) { seen[k] = 1; order[++n] = k }
	ins[k] = ins[k] " " $3; rd[k] = rd[k] " " $6; del[k] = del[k] " " $9
	op[k] = op[k] " " $15; pb[k] = pb[k] " " $22
}
END {
	for (i = 1; i <= n; i++) {
		k = order[i]
		printf "| %s | %.0f | %.0f | %.0f | %.1f | %.2f |\n", k, median(ins[k]), median(rd[k]), median(del[k]), median(op[k]), median(pb[k])
	}
}' "$TMP/all"
[ "$WA" -ne 0 ] || exit 0
# PM write amplification from a trace of a shorter run of each engine.
echo
echo "rows for docs/kv.md: | engine, group | PM write amplification ($WA_KEYS keys inserted, read, deleted; pmlab analyze) |"
export PMLAB_INSTR_PM=pool
wa() {
	name=$1
	shift
	if ! "$PMLAB" trace -o "$TMP/wa.pmt" -- "$IPMKV" bench --keys "$WA_KEYS" --values 0 --dir "$DIR" "$@" >/dev/null 2>"$TMP/err"; then
		grep -q "not in this build" "$TMP/err" && return 0
		cat "$TMP/err" >&2
		return 1
	fi
	amp=$("$PMLAB" analyze "$TMP/wa.pmt" | sed -n 's/.*write amplification *//p')
	echo "| $name | $amp |"
	rm -f "$TMP/wa.pmt"
}
wa "list, group 1" -e list --group 1
wa "list, group $GROUP" -e list --group "$GROUP"
wa "wal, group 1" -e wal --group 1
wa "btree/6, group 1" -e btree --group 1
for f in $FANOUTS; do
	wa "btree/$f, group $GROUP" -e btree --group "$GROUP" --fanout "$f"
done
