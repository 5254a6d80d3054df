#!/usr/bin/env bash
# bench/trace-whisper.sh -- WHISPER's metrics and HOPS's persistency
# comparison on pmlab's four transactional workloads (hash map and B-tree,
# on libpmemobj and on pmlab.h with redo logging), plus the tracing
# overhead. Figures go to docs/whisper.md and docs/benchmarks.md.
#
# usage: bench/trace-whisper.sh [THREADS] [OPS_PER_THREAD] [PRESETS] [OPS_PER_TX]
#        (default 2 threads, 20000 operations each, 20 % deletes, one
#        operation per transaction; the replay runs on each preset of
#        PRESETS, default "optane-1dimm hops-paper": our Optane model, and
#        the HOPS paper's own 80 ns PM timing. bench/hops-groupcommit.sh
#        sweeps OPS_PER_TX, three traces per point)
#        FLUSH_INVALIDATES="none auto all" replays under each of these
#        `pmlab sim --flush-invalidates` settings (default: auto)
set -euo pipefail
cd "$(dirname "$0")/.."
PMLAB=${PMLAB:-target/release/pmlab}
THREADS=${1:-2}
OPS=${2:-20000}
PRESETS=${3:-optane-1dimm hops-paper}
PER_TX=${4:-1}
FLUSH_INVALIDATES=${FLUSH_INVALIDATES:-auto}
[ -x "$PMLAB" ] || { echo "trace-whisper: $PMLAB not built: run 'cargo build --release -p pmlab-cli -p pmlab-runtime'" >&2; exit 2; }
[ -f "$(dirname "$PMLAB")/libpmlab.so" ] || [ -n "${PMLAB_RUNTIME:-}" ] || { echo "trace-whisper: libpmlab.so not built: run 'cargo build --release -p pmlab-runtime'" >&2; exit 2; }
make -s -C workloads all
# TRACE_DIR=DIR keeps the traces (and pools) there for further replays.
if [ -n "${TRACE_DIR:-}" ]; then
    dir=$TRACE_DIR; mkdir -p "$dir"
else
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
fi
field() { grep "\"$1\"" | head -1 | sed 's/.*: *//; s/,$//'; }

echo "machine: $(nproc) CPUs, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "workloads: $THREADS threads x $OPS operations, 20 % deletes, $PER_TX per transaction; replay on $PRESETS"
printf '\n%-14s %8s %6s %6s %7s %8s %6s %6s %8s %8s %8s\n' workload records tx "ep/tx" single "self-dep" cross "NT B" "amplif." "ep/s" tracing
for w in pmobj_hashmap pmobj_btree pm_hashmap pm_btree; do
    t=$("$PMLAB" trace -o "$dir/$w.pmt" --overhead --json /dev/fd/3 -- workloads/build/$w "$dir/$w.pool" "$THREADS" "$OPS" 20 "$PER_TX" 3>&1 >/dev/null)
    "$PMLAB" analyze "$dir/$w.pmt" --json > "$dir/$w.json"
    T="$t" python3 - "$w" "$dir/$w.json" <<'PY'
import json, os, sys
a = json.load(open(sys.argv[2])); t = json.loads(os.environ["T"])
pct = lambda v: "n/a" if v is None else "%.1f%%" % (100 * v)
print("%-14s %8d %6d %6s %7s %8s %6s %6s %8s %8s %7.2fx" % (sys.argv[1], a["records"], a["transactions"],
      a["epochs_per_tx"]["median"], pct(a["singleton_share"]), pct(a["self_dep_share"]),
      pct(a["cross_dep_share"]), pct(a["nt_byte_share"]), pct(a["amplification"]),
      "%.2fM" % (a["epochs_per_sec"] / 1e6), t["overhead"]))
if t["dropped"]:
    print("  (%d records dropped)" % t["dropped"])
PY
done
echo "(tracing: traced over untraced wall time of the whole program, one run each: noisy on short runs)"
models=x86-nvm,x86-adr,hops,hops-adr,hops@1,hops-adr@1,ideal
for preset in $PRESETS; do
  for inval in $FLUSH_INVALIDATES; do
    echo
    echo "persistency replay on $preset, flushes invalidating: $inval; run time normalised to x86-nvm (HOPS: 32-entry buffers draining from 16; @1: from 1)"
    echo "(RFO: reads for ownership per x86-nvm commit, and x86-nvm's fence waits for them, share of all threads' time)"
    printf '%-14s' workload; printf ' %10s' ${models//,/ }; printf ' %10s %10s\n' "RFO/tx" "RFO wait"
    for w in pmobj_hashmap pmobj_btree pm_hashmap pm_btree; do
        "$PMLAB" sim --preset "$preset" --persistency "$models" --flush-invalidates "$inval" --json "$dir/$w.pmt" |
            python3 -c '
import json, sys
j = json.load(sys.stdin)
n = j["models"]["x86-nvm"]
tot = n["compute_ns"] + n["read_ns"] + n["durability_ns"] + n["buffer_full_ns"] + n["issue_ns"]
print("%-14s" % sys.argv[1] + "".join(" %10.3f" % m["normalised_to_x86_nvm"] for m in (j["models"][k] for k in j["order"]))
      + " %10.2f %9.1f%%" % (n["rfo_reads"] / max(int(sys.argv[2]), 1), 100 * n["rfo_wait_ns"] / max(tot, 1e-9)))' "$w" "$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["transactions"])' "$dir/$w.json")"
    done
  done
done
