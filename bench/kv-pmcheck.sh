#!/bin/sh
# bench/kv-pmcheck.sh -- the PM key-value engines under pmlab's own
# correctness tools: `pmlab check` on a trace of OPS seeded operations of
# each engine (expected: no finding), and `pmlab crash` on a shorter run
# (every crash image checked by `pmkv check`; expected: all pass).
#
# Usage: bench/kv-pmcheck.sh [OPS] [CRASH_OPS] [BUDGET]   (default 200 30 300;
#        ENGINES from the environment, default "list btree wal anchor")
# Builds pmkv with `pmlab cargo` (target/pmlab/) first. Prints one line per
# engine and tool; exits 1 if any finding or failing image.
set -eu
. "$(dirname "$0")/common.sh"
OPS=${1:-200}
CRASH_OPS=${2:-30}
BUDGET=${3:-300}
whole_number OPS "$OPS"
whole_number CRASH_OPS "$CRASH_OPS"
whole_number BUDGET "$BUDGET"
need_pmlab
PMKV=$ROOT/target/release/pmkv
[ -x "$PMKV" ] || { echo "$BENCH: $PMKV not built: run cargo build --release --workspace" >&2; exit 2; }
machine_line
"$PMLAB" cargo build --release -q -p pmlab-kv --bin pmkv >"$TMP/build.log" 2>&1 ||
	{ echo "$BENCH: pmlab cargo build failed: see below" >&2; cat "$TMP/build.log" >&2; exit 2; }
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
IPMKV=$ROOT/target/pmlab/$TRIPLE/release/pmkv
# Only the registered pool is PM: the stores pmkv makes before opening it
# (argument parsing) are not.
export PMLAB_INSTR_PM=pool
bad=0
ENGINES=${ENGINES:-list btree wal anchor}
for e in $ENGINES; do
	case $e in list | btree | wal | anchor) ;; *)
		echo "$BENCH: unknown engine $e in ENGINES: pick from list btree wal anchor" >&2
		exit 2
		;;
	esac
	size=4MiB
	[ "$e" = anchor ] && size=16MiB
	if ! "$PMKV" create -e "$e" "$TMP/$e.pool" --size "$size" >/dev/null 2>"$TMP/err"; then
		echo "$e: skipped: $(head -1 "$TMP/err")"
		continue
	fi
	cp "$TMP/$e.pool" "$TMP/$e.crash.pool"
	"$PMLAB" trace --sites -o "$TMP/$e.pmt" -- "$IPMKV" stress "$TMP/$e.pool" --ops "$OPS" >/dev/null 2>&1
	out=$("$PMLAB" check "$TMP/$e.pmt" 2>&1) || bad=1
	echo "$e: check ($OPS ops): $(echo "$out" | tail -1)"
	start=$(date +%s.%N)
	out=$("$PMLAB" crash --budget "$BUDGET" --check "$PMKV check {}" -- \
		"$IPMKV" stress "$TMP/$e.crash.pool" --ops "$CRASH_OPS" 2>&1) || bad=1
	secs=$(echo "$(date +%s.%N) - $start" | bc)
	echo "$e: crash ($CRASH_OPS ops, ${secs%???????} s): $(echo "$out" | tail -1)"
done
exit $bad
