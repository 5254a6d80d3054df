#!/bin/sh
# bench/device-cost.sh -- cost of the functional device model of
# `pmlab run --device` per modelled access (reads each level serves,
# write-backs, one and six DIMMs, the flushed-line table) next to the delay
# each access injects (its level less the native cost of the access),
# and the cache model's extra cost in device mode.
# Usage: bench/device-cost.sh   (uses cargo; CARGO_TARGET_DIR is honoured)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$ROOT" && cargo run --quiet --release -p pmlab-model --example device_cost
