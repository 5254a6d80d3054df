#!/usr/bin/env bash
# bench/sim-speed.sh -- simulator speed: requests per wall-clock second and
# peak memory for 1 M random 64 B reads over 1 GiB and 1 M sequential 64 B
# writes, on optane-1dimm and ddr4-2666, from the binary trace format; then
# the parsing rate of the text formats. Figures go to docs/benchmarks.md.
#
# usage: bench/sim-speed.sh [REPEATS]   (default 5; prints median and spread)
set -euo pipefail
cd "$(dirname "$0")/.."
PMLAB=${PMLAB:-target/release/pmlab}
REPEATS=${1:-5}
[ -x "$PMLAB" ] || { echo "sim-speed: $PMLAB not built: run 'cargo build --release -p pmlab-cli'" >&2; exit 2; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

"$PMLAB" sim gen random-read "$dir/rr.pmt" --count 1000000 --span 1GiB
"$PMLAB" sim gen seq-write "$dir/sw.pmt" --count 1000000
"$PMLAB" sim gen random-read "$dir/rr.txt" --count 1000000 --span 1GiB --format text
"$PMLAB" sim gen random-read "$dir/rr.dramsim" --count 1000000 --span 1GiB --format dramsim
# A lackey-style trace (valgrind --tool=lackey --trace-mem=yes) from the same addresses.
awk '{ printf "I  0400%04x,3\n L %x,8\n", NR % 65536, $1 }' "$dir/rr.dramsim" > "$dir/rr.lackey"

# median and spread (min-max) of a list of numbers
stats() { sort -g | awk '{ v[NR] = $1 } END { printf "median %.3f (min %.3f, max %.3f, n=%d)", v[int((NR + 1) / 2)], v[1], v[NR], NR }'; }
field() { grep "\"$1\"" | head -1 | sed 's/.*: *//; s/,$//'; }

echo "machine: $(nproc) CPUs, $(uname -r), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "repeats: $REPEATS (others may be using the CPUs: see the spread)"
for preset in optane-1dimm ddr4-2666; do
    for t in rr sw; do
        rates=""; rss=0
        for _ in $(seq "$REPEATS"); do
            out=$("$PMLAB" sim --preset "$preset" "$dir/$t.pmt" --json)
            rates+="$(echo "$out" | field requests_per_second | awk '{ print $1 / 1e6 }')"$'\n'
            r=$(echo "$out" | field peak_rss_kib); [ "$r" -gt "$rss" ] && rss=$r
        done
        name=$([ "$t" = rr ] && echo "1M random 64 B reads over 1 GiB" || echo "1M sequential 64 B writes")
        printf '%-13s %-34s M req/s: %s; peak RSS %d KiB\n' "$preset" "$name" "$(printf '%s' "$rates" | stats)" "$rss"
    done
done
for f in rr.pmt rr.txt rr.dramsim rr.lackey; do
    fmt=""
    case $f in *.dramsim) fmt="--trace-format dramsim";; *.lackey) fmt="--trace-format lackey";; esac
    rates=""
    for _ in $(seq "$REPEATS"); do
        # shellcheck disable=SC2086
        rates+="$("$PMLAB" sim "$dir/$f" $fmt --parse-only --json | field records_per_second | awk '{ print $1 / 1e6 }')"$'\n'
    done
    printf '%-13s %-34s M records/s: %s (%d bytes)\n' "parse" "$f" "$(printf '%s' "$rates" | stats)" "$(stat -c %s "$dir/$f")"
done
