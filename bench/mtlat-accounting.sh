#!/bin/sh
# bench/mtlat-accounting.sh -- where a short-epoch run's time goes under
# the instrumented source: mtlat with 1 thread and sections only (2,000
# sections of 100 steps, one epoch each) at 400 ns, the native build and
# the `pmlab cc` build under `pmlab run --source instrumented
# --stats-json`, with the modeller thread on and off
# (PMLAB_INSTR_OFFLOAD=1 / 0), interleaved. Per variant, medians of: the
# native run, the emulated run, the delay requested, the time inside
# epochs, the overhead subtracted, and the emulated run's error against
# native + requested (what it would take if the overhead accounting were
# exact), with each run's error.
# Usage: bench/mtlat-accounting.sh [REPS]   (default 9; needs
# target/release/pmlab, python3)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-9}
whole_number REPS "$REPS"
need_pmlab
command -v python3 >/dev/null || { echo "$BENCH: python3 not found: install it (apt-get install python3)" >&2; exit 2; }
${CC:-cc} -O2 -o "$TMP/native" "$ROOT/workloads/mtlat.c" -lpthread
"$PMLAB" cc -O2 -o "$TMP/emulated" "$ROOT/workloads/mtlat.c" -lpthread
ARGS="-t 1 -k 2000 -i 100 -o 0 -r 256"
machine_line "mtlat $ARGS at 400 ns"
i=0
while [ $i -lt "$REPS" ]; do
	for off in 1 0; do
		# shellcheck disable=SC2086 # ARGS is a list of words
		n=$("$TMP/native" $ARGS | value_of elapsed_ns)
		# shellcheck disable=SC2086
		e=$(PMLAB_INSTR_OFFLOAD=$off "$PMLAB" run --quiet --source instrumented --pm-latency 400 \
			--stats-json "$TMP/s.json" -- "$TMP/emulated" $ARGS | value_of elapsed_ns)
		[ -n "$n" ] && [ -n "$e" ] || { echo "$BENCH: a run printed no elapsed_ns" >&2; exit 1; }
		python3 - "$TMP/s.json" "$off" "$n" "$e" >>"$TMP/rows" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
w = [t for t in s["threads"] if t["tid"] != s["pid"]]
get = lambda k: sum(t[k] for t in w) / 1e6
print(sys.argv[2], int(sys.argv[3]) / 1e6, int(sys.argv[4]) / 1e6,
      get("requested_delay_ns"), get("epoch_time_ns"), get("overhead_ns"))
PY
	done
	i=$((i + 1))
done
python3 - "$TMP/rows" <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
for off, name in (("1", "modeller on "), ("0", "modeller off")):
    r = [list(map(float, x[1:])) for x in rows if x[0] == off]
    err = [100 * (e - n - q) / (n + q) for n, e, q, _, _ in r]
    m = [st.median(c) for c in zip(*r)]
    print(f"{name}: native {m[0]:.2f} ms, emulated {m[1]:.2f} ms, requested {m[2]:.2f} ms, "
          f"in epochs {m[3]:.2f} ms, overhead {m[4]:.2f} ms; error against native + requested "
          f"median {st.median(err):+.2f}% ({' '.join(f'{x:+.1f}' for x in err)})")
PY
