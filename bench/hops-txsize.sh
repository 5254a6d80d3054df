#!/usr/bin/env bash
# bench/hops-txsize.sh -- when do HOPS's persist buffers pay? Synthetic
# PMDK-like transactions (E epochs of 2 stores, each store flushed, an
# sfence per epoch, 200 ns of compute before each epoch; 2000 transactions,
# one thread) replayed under every persistency model, for E from 2 to 32.
# HOPS (32-entry buffers draining from 16) drains before the commit only
# once a transaction holds 16 stores. Figures go to docs/whisper.md.
#
# usage: bench/hops-txsize.sh [PRESETS]   (default "hops-paper optane-1dimm")
set -euo pipefail
cd "$(dirname "$0")/.."
PMLAB=${PMLAB:-target/release/pmlab}
PRESETS=${1:-hops-paper optane-1dimm}
[ -x "$PMLAB" ] || { echo "hops-txsize: $PMLAB not built: run 'cargo build --release -p pmlab-cli'" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for preset in $PRESETS; do
    echo "persistency replay on $preset: run time normalised to x86-nvm"
    printf '%-9s %-9s' epochs/tx stores/tx; printf ' %9s' x86-nvm x86-adr hops hops-adr ideal; echo
    for e in 2 4 6 8 12 16 32; do
        python3 - "$e" "$dir/t.txt" <<'PY'
import sys
epochs, path = int(sys.argv[1]), sys.argv[2]
t, n, out = 0, 0, []
for i in range(2000):
    t += 200
    out.append(f"{t} 0 TXBEGIN {i} 0")
    for _ in range(epochs):
        t += 200
        for _ in range(2):
            a = 0x100000 + (n % 4096) * 64
            n += 1
            t += 5
            out.append(f"{t} 0 W {a:#x} 8")
            t += 5
            out.append(f"{t} 0 CLWB {a:#x} 64")
        t += 5
        out.append(f"{t} 0 SFENCE 0 0")
    t += 5
    out.append(f"{t} 0 TXEND {i} 0")
open(path, "w").write("\n".join(out) + "\n")
PY
        "$PMLAB" sim --preset "$preset" --persistency all --json "$dir/t.txt" |
            python3 -c '
import json, sys
j = json.load(sys.stdin)
e = int(sys.argv[1])
print("%-9d %-9d" % (e, 2 * e) + "".join(" %9.3f" % m["normalised_to_x86_nvm"] for m in (j["models"][k] for k in j["order"])))' "$e"
    done
    echo
done
