#!/usr/bin/env bash
# bench/hops-groupcommit.sh -- HOPS's persistency comparison on pmlab's four
# transactional workloads with N operations per transaction (group commit:
# the workloads' fifth argument, OPS_PER_TX). For each N, each workload is
# traced REPS times (separate runs: the compute gaps differ), analysed, and
# each trace is replayed under every persistency model on each preset.
# Prints WHISPER's per-transaction figures by N, the replay's run times
# normalised to x86-nvm (min-max over the REPS traces), and on how many
# traces HOPS's direction holds (x86-adr < x86-nvm, the HOPS variant below
# both, ideal fastest; "below" means by more than 0.005, half a percent of
# x86-nvm's run time, so that ties do not count). Figures go to
# docs/whisper.md.
#
# usage: bench/hops-groupcommit.sh [THREADS] [OPS_PER_THREAD] [NS] [REPS] [PRESETS]
#        (default 2 threads x 20000 operations, 20 % deletes, NS "1 4 16 32 64 256",
#        REPS 3, PRESETS "optane-1dimm hops-paper"; TRACE_DIR=DIR keeps the
#        JSON results there, and with SUMMARY_ONLY=1 the tables are printed
#        again from them without tracing; FLUSH_INVALIDATES="none auto all"
#        replays every trace under each of these `pmlab sim
#        --flush-invalidates` settings, default auto)
set -euo pipefail
cd "$(dirname "$0")/.."
PMLAB=${PMLAB:-target/release/pmlab}
THREADS=${1:-2}
OPS=${2:-20000}
NS=${3:-1 4 16 32 64 256}
REPS=${4:-3}
PRESETS=${5:-optane-1dimm hops-paper}
WORKLOADS="pmobj_hashmap pmobj_btree pm_hashmap pm_btree"
FLUSH_INVALIDATES=${FLUSH_INVALIDATES:-auto}
[ -x "$PMLAB" ] || { echo "hops-groupcommit: $PMLAB not built: run 'cargo build --release -p pmlab-cli -p pmlab-runtime'" >&2; exit 2; }
[ -f "$(dirname "$PMLAB")/libpmlab.so" ] || [ -n "${PMLAB_RUNTIME:-}" ] || { echo "hops-groupcommit: libpmlab.so not built: run 'cargo build --release -p pmlab-runtime'" >&2; exit 2; }
make -s -C workloads $(for w in $WORKLOADS; do echo "build/$w"; done)
if [ -n "${TRACE_DIR:-}" ]; then
    dir=$TRACE_DIR; mkdir -p "$dir"
else
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
fi
models=x86-nvm,x86-adr,hops,hops-adr,hops@1,hops-adr@1,ideal

echo "machine: $(nproc) CPUs, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "workloads: $THREADS threads x $OPS operations, 20 % deletes; OPS_PER_TX in $NS; $REPS traces each; replay on $PRESETS; flushes invalidating: $FLUSH_INVALIDATES"
for n in $NS; do
    [ -n "${SUMMARY_ONLY:-}" ] && break
    for r in $(seq 1 "$REPS"); do
        for w in $WORKLOADS; do
            base=$dir/$w.n$n.r$r
            "$PMLAB" trace -o "$base.pmt" -- workloads/build/$w "$dir/$w.pool" "$THREADS" "$OPS" 20 "$n" > "$base.out" 2> "$base.err" ||
                { cat "$base.err" >&2; exit 1; }
            "$PMLAB" analyze "$base.pmt" --json > "$base.analyze.json"
            for p in $PRESETS; do
                for f in $FLUSH_INVALIDATES; do
                    "$PMLAB" sim --preset "$p" --persistency "$models" --flush-invalidates "$f" --json "$base.pmt" > "$base.$p.$f.json"
                done
            done
            rm -f "$base.pmt"
        done
    done
    echo "  N=$n traced and replayed" >&2
done

python3 - "$dir" "$NS" "$REPS" "$PRESETS" "$WORKLOADS" "$models" "$FLUSH_INVALIDATES" <<'PY'
import json, sys
d, ns, reps, presets, wls, models = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5].split(), sys.argv[6].split(",")
invals = sys.argv[7].split()
def load(w, n, r, what):
    return json.load(open(f"{d}/{w}.n{n}.r{r}.{what}.json"))
def rng(v, f="%.2f"):
    lo, hi = f % min(v), f % max(v)
    return lo if lo == hi else lo + "-" + hi
pct = lambda v: "n/a" if None in v else rng([100 * x for x in v], "%.0f") + "%"

print("\nper transaction (analyze: epochs per transaction, median (a histogram bin's low end from 128) and mean; persist-buffer")
print("entries and epochs drained per dfence in the hops replay on %s; min-max over traces)" % presets[0])
print("%-14s %5s %7s %7s %11s %9s %8s %8s %11s %11s" % ("workload", "N", "tx", "ep/tx", "ep/tx mean", "singleton", "self-dep", "amplif.", "PB/dfence", "ep/dfence"))
for w in wls:
    for n in ns:
        a = [load(w, n, r, "analyze") for r in range(1, reps + 1)]
        h = [load(w, n, r, presets[0] + "." + invals[0])["models"]["hops"] for r in range(1, reps + 1)]
        print("%-14s %5s %7d %7s %11s %9s %8s %8s %11s %11s" % (w, n, a[0]["transactions"],
              rng([x["epochs_per_tx"]["median"] for x in a], "%d"),
              rng([x["epochs_per_tx"]["mean"] for x in a], "%.1f"),
              pct([x["singleton_share"] for x in a]), pct([x["self_dep_share"] for x in a]),
              pct([x["amplification"] for x in a]),
              rng([m["lines_written"] / max(m["durability_points"], 1) for m in h], "%.1f"),
              rng([m["epochs_drained"] / max(m["durability_points"], 1) for m in h], "%.1f")))

variants = ["hops", "hops-adr", "hops@1", "hops-adr@1"]
TIE = 0.005  # differences of normalised run time up to this are ties
for p, f in [(p, f) for p in presets for f in invals]:
    print("\npersistency replay on %s, flushes invalidating: %s; run time normalised to x86-nvm (min-max over %d traces; HOPS drains from 16 entries, @1 from 1;" % (p, f, reps))
    print("RFO/tx: x86-nvm's reads for ownership per transaction)")
    print("%-14s %5s" % ("workload", "N") + "".join(" %11s" % m for m in models) + " %11s" % "RFO/tx")
    holds = {}
    for w in wls:
        for n in ns:
            rows = []
            rfo = []
            for r in range(1, reps + 1):
                j = load(w, n, r, p + "." + f)
                v = {k: m["normalised_to_x86_nvm"] for k, m in j["models"].items()}
                rows.append(v)
                nvm = j["models"]["x86-nvm"]
                rfo.append(nvm["rfo_reads"] / max(load(w, n, r, "analyze")["transactions"], 1))
                for var in variants:
                    ok = (v["x86-adr"] < v["x86-nvm"] - TIE and v[var] < v["x86-adr"] - TIE
                          and all(v["ideal"] <= v[m] + TIE for m in models))
                    holds.setdefault((w, n, var), []).append(ok)
            print("%-14s %5s" % (w, n) + "".join(" %11s" % rng([x[m] for x in rows]) for m in models) + " %11s" % rng(rfo, "%.1f"))
    print("direction (x86-adr < x86-nvm, variant < x86-adr, each by more than %.3f; ideal fastest) holds on how many traces:" % TIE)
    print("%-14s %5s" % ("workload", "N") + "".join(" %11s" % v for v in variants))
    for w in wls:
        for n in ns:
            print("%-14s %5s" % (w, n) + "".join(" %11s" % ("%d/%d" % (sum(holds[(w, n, v)]), reps)) for v in variants))
    for n in ns:
        print("%-14s %5s" % ("all", n) + "".join(" %11s" % ("%d/%d" % (sum(sum(holds[(w, n, v)]) for w in wls), reps * len(wls))) for v in variants))
PY
