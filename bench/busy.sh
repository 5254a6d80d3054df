#!/bin/sh
# bench/busy.sh -- the emulator's error with CPU-bound processes beside the
# program (issue 16, "honest on a busy machine"). For BUSY = 0, 1 and 2 busy
# loops (shell loops holding a CPU each, started before and killed after
# the BUSY level's runs), REPS times each:
#
#   memlat over 16, 64 and 256 MiB at 400 ns, and idxchase (an index-linked
#   chase) over 256 MiB at 300 ns: the native build (clang/cc -O2) and the
#   build of `pmlab cc` under `pmlab run --source instrumented`;
#   memlat over 2 MiB natively, the in-cache time c.
#
# Expected per access, as pmlab validate's working-set study has it:
# native(r) + m(r) x (L - DRAM), m(r) = clamp((native(r) - c) / (DRAM - c),
# 0, 1), every figure measured at the same BUSY level (the busy loops slow
# the native runs too). DRAM: the cached calibration (`pmlab calibrate`).
# Prints one line a point: the medians of native, expected and emulated
# ns per access, the error, and from the emulated runs' statistics the
# medians of `hook_inline_share` (the cache model run on the program's
# threads, over their time) and `run_delay_share` (time runnable but
# waiting for a CPU), and how many runs set `busy_warning`; after each
# BUSY level one summary line (the errors' range and mean |error|, the runs
# warned) and the first warning pmlab printed at that level, if any.
#
# Run it on a quiet machine: other load adds to the busy loops.
# Usage: bench/busy.sh [REPS] [ACCESSES]   (default 3 2000000; needs
# target/release/pmlab, python3)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-3}
N=${2:-2000000}
whole_number REPS "$REPS"
whole_number ACCESSES "$N"
need_pmlab
command -v python3 >/dev/null || { echo "$BENCH: python3 not found: install it (apt-get install python3)" >&2; exit 2; }
for w in memlat idxchase; do
	${CC:-cc} -O2 -o "$TMP/$w.native" "$ROOT/workloads/$w.c"
	"$PMLAB" cc -O2 -o "$TMP/$w.emu" "$ROOT/workloads/$w.c"
done
DRAM=$(cached_dram_ns)
machine_line "DRAM $DRAM ns (pmlab calibrate); $REPS runs a point, $N accesses"
ns() { value_of ns_per_access; }
# The points: program, region (MiB), target (ns).
POINTS="memlat:16:400 memlat:64:400 memlat:256:400 idxchase:256:300"
printf '%-5s %-22s %8s %9s %9s %8s %8s %8s %s\n' busy point native expected emulated error% inline% waiting% warned
for BUSY in 0 1 2; do
	busy_loops "$BUSY"
	r=0
	while [ $r -lt "$REPS" ]; do
		"$TMP/memlat.native" -r 2 -n "$N" | ns >>"$TMP/c.$BUSY"
		for p in $POINTS; do
			w=${p%%:*}
			rest=${p#*:}
			mib=${rest%%:*}
			lat=${rest#*:}
			"$TMP/$w.native" -r "$mib" -n "$N" | ns >>"$TMP/n.$BUSY.$w.$mib"
			# pmlab's busy warning goes to a file: the table counts it.
			e=$("$PMLAB" run --quiet --source instrumented --pm-latency "$lat" \
				--stats-json "$TMP/s.$BUSY.$w.$mib.$r.json" -- \
				"$TMP/$w.emu" -r "$mib" -n "$N" 2>"$TMP/err" | ns)
			[ -n "$e" ] || { cat "$TMP/err" >&2; echo "$BENCH: pmlab run $w -r $mib printed no ns_per_access" >&2; exit 1; }
			echo "$e" >>"$TMP/e.$BUSY.$w.$mib"
		done
		r=$((r + 1))
	done
	for p in $BUSY_PIDS; do kill -KILL "$p" 2>/dev/null || true; done
	BUSY_PIDS=""
	for p in $POINTS; do
		w=${p%%:*}
		rest=${p#*:}
		mib=${rest%%:*}
		lat=${rest#*:}
		python3 - "$TMP" "$BUSY" "$w" "$mib" "$lat" "$DRAM" "$REPS" <<'EOF'
import json, statistics, sys
tmp, busy, w, mib, lat, dram, reps = sys.argv[1:]
lat, dram, reps = float(lat), float(dram), int(reps)
def nums(f):
    with open(f"{tmp}/{f}") as fh:
        return [float(x) for x in fh.read().split()]
c = statistics.median(nums(f"c.{busy}"))
native = statistics.median(nums(f"n.{busy}.{w}.{mib}"))
emu = statistics.median(nums(f"e.{busy}.{w}.{mib}"))
m = min(max((native - c) / (dram - c), 0.0), 1.0)
expected = native + m * (lat - dram)
inline, wait, warned = [], [], 0
for r in range(reps):
    with open(f"{tmp}/s.{busy}.{w}.{mib}.{r}.json") as fh:
        s = json.load(fh)
    inline.append(s.get("hook_inline_share") or 0.0)
    wait.append(s.get("run_delay_share") or 0.0)
    warned += 1 if s.get("busy_warning") else 0
    if s.get("busy_warning"):
        with open(f"{tmp}/warn.{busy}", "a") as fh:
            fh.write(s["busy_warning"] + "\n")
with open(f"{tmp}/errors.{busy}", "a") as fh:
    fh.write(f"{(emu - expected) / expected * 100} {warned} {reps}\n")
print(f"{busy:<5} {w + ' ' + mib + 'MiB ' + str(int(lat)) + 'ns':<22} {native:8.1f} {expected:9.1f} {emu:9.1f} "
      f"{(emu - expected) / expected * 100:+8.2f} {statistics.median(inline) * 100:8.1f} "
      f"{statistics.median(wait) * 100:8.1f} {warned}/{reps}")
EOF
	done
	python3 - "$TMP" "$BUSY" <<'EOF'
import sys
tmp, busy = sys.argv[1:]
rows = [l.split() for l in open(f"{tmp}/errors.{busy}")]
e = [float(r[0]) for r in rows]
warned = sum(int(r[1]) for r in rows)
runs = sum(int(r[2]) for r in rows)
print(f"busy={busy}: errors {min(e):+.2f}..{max(e):+.2f}%, mean |error| "
      f"{sum(abs(x) for x in e) / len(e):.2f}%; busy warning in {warned}/{runs} emulated runs")
EOF
	[ ! -s "$TMP/warn.$BUSY" ] || echo "busy=$BUSY: first warning: $(head -1 "$TMP/warn.$BUSY")"
done
