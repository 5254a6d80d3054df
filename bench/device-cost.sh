#!/bin/sh
# bench/device-cost.sh -- cost of the functional device model of
# `pmlab run --device` per modelled access (reads each level serves,
# write-backs, one and six DIMMs, the flushed-line table) next to the delay
# each access injects (its level less the native cost of the access),
# and the cache model's extra cost in device mode; then the whole batch
# path of the runtime (cache model, overlap estimate, device model) per
# log entry, on `workloads/lenschase.c` built by `pmlab cc` and run under
# `pmlab run --device optane-1dimm --no-inject` with every batch on the
# program's thread (PMLAB_INSTR_OFFLOAD=0, so that the statistics time
# them: hook_inline_ns over hooks.logged), next to the delay per PM read
# the model requested (requested_delay_ns over the reads the levels
# served). Both include the program's set-up (the chain's shuffle and
# stores), logged and modelled like the chase.
# Usage: bench/device-cost.sh   (uses cargo; CARGO_TARGET_DIR is honoured)
# Run it on a quiet machine: every figure is a time.
#        bench/device-cost.sh --instructions
# counts instead the instructions per modelled access under callgrind
# (valgrind): each stream above on one and six DIMMs, 200000 accesses,
# the buffers warmed by a first pass and only the measured pass counted.
# The counts hold under load.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = "--instructions" ]; then
	command -v valgrind >/dev/null || { echo "device-cost.sh: --instructions needs valgrind (apt-get install valgrind)" >&2; exit 1; }
	cd "$ROOT"
	cargo build --quiet --release -p pmlab-model --example device_cost
	B=${CARGO_TARGET_DIR:-$ROOT/target}/release/examples/device_cost
	N=200000
	OUT=$(mktemp)
	trap 'rm -f "$OUT"' EXIT
	for dimms in 1 6; do
		for s in 0 1 2 3 4; do
			what=$(valgrind --tool=callgrind --callgrind-out-file="$OUT" \
				--toggle-collect='*measured_*' "$B" --one "$dimms" "$s" "$N" 2>"$OUT.log" | cut -d: -f1)
			ir=$(sed -n 's/.*Collected : //p' "$OUT.log")
			rm -f "$OUT.log"
			echo "$what: $((ir / N)) instructions per access"
		done
	done
	exit 0
elif [ $# -gt 0 ]; then
	echo "device-cost.sh: unknown argument '$1' (usage: bench/device-cost.sh [--instructions])" >&2
	exit 2
fi
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$ROOT"
cargo run --quiet --release -p pmlab-model --example device_cost
cargo build --quiet --release -p pmlab-cli -p pmlab-runtime
T=${CARGO_TARGET_DIR:-$ROOT/target}/release
PMLAB=$T/pmlab
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
"$PMLAB" cc -O2 -I "$ROOT/include" -o "$TMP/lenschase" "$ROOT/workloads/lenschase.c"
for point in "65536 64" "4194304 64" "67108864 64" "4194304 256"; do
	set -- $point
	PMLAB_INSTR_OFFLOAD=0 "$PMLAB" run --quiet --no-inject --device optane-1dimm \
		--json "$TMP/s.json" -- "$TMP/lenschase" -r "$1" -b "$2" -n 1048576 -c > "$TMP/out"
	python3 - "$TMP/s.json" "$TMP/out" "$1" "$2" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))["stats"]
d = s["device"]
reads = d["rmw_hits"] + d["ait_hits"] + d["media_reads"]
logged = s["hooks"]["logged"]
print(f"runtime, lenschase region={sys.argv[3]} B block={sys.argv[4]} B: "
      f"{s['hook_inline_ns'] / max(logged, 1):.1f} ns per log entry, "
      f"requested {s['total']['requested_delay_ns'] / max(reads, 1):.0f} ns per PM read")
PY
done
