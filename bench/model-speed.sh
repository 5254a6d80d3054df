#!/bin/sh
# bench/model-speed.sh -- speed of the instrumented source's cache model and
# overlap estimator on a random stream (the work of one batch entry).
# Usage: bench/model-speed.sh   (uses cargo; CARGO_TARGET_DIR is honoured)
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
cd "$ROOT" && cargo run --quiet --release -p pmlab-model --example cache_speed
