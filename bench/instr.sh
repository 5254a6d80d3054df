#!/bin/sh
# bench/instr.sh -- cost of pmlab's compiler instrumentation (issue 3).
#
# Builds bench/instr_kernel.c with clang and with `pmlab cc`, runs each
# variant REPS times and prints medians and ranges:
#   native      clang -O2 (gcc -O2 with CC_UNDER_TEST=gcc), no pmlab;
#   inactive    pmlab cc -O2, run directly (hooks compiled in, not counting);
#   active      pmlab cc -O2 under `pmlab run --source instrumented --no-inject`
#               (hooks counting, nothing injected).
# The hit kernel makes exactly one instrumented load per iteration that hits
# the hooks' filter, so (active - native) ns/iter is the hit-path cost per
# access; the sort kernel gives the slowdown of compute-bound code; the miss
# kernel (a pointer chase over 256 MiB) the slow path's cost per miss.
# Issue 17's programs come last: the STREAM-like triad (workloads/stream.c,
# 1 thread, 3 x 128 MiB, GB/s) and the compute-bound sort (workloads/sort.c,
# qsort and radix over 16 MiB, ns per element), native against `pmlab run
# --no-inject`: the slowdown the hooks cost where no delay hides them.
# Each program runs as a full build (PMLAB_CC_MODE=full: a hook on every
# access) and, with clang, as a sampled build (pmlab cc's default, the
# sampling plugin) under --sample off and --sample auto; memlat (one and
# four chains over 256 MiB) is the latency-bound case.
# Then, under --no-inject --sample auto, the share of the radix sort's and
# the triad's checks run in windows (a count, but the share follows the
# timed slowdown of the windows, which the machine's load moves).
# Last, the hooks per access of memlat with 1 and 8 chains (sampled build,
# --sample off, 256 MiB): the calibrated cost of each kind of call and the
# calls of each kind per access, from the statistics' `hooks` object of
# two --no-inject runs of 1M and 3M accesses (their difference).
# qsort moves the keys inside libc, which pmlab cc does not instrument
# (only its comparison calls are): radix, all in the program, is the
# sort that pays the hooks on every access.
#
# Usage: bench/instr.sh [REPS]   (PMLAB=path/to/pmlab, default target/release/pmlab;
#   CC_UNDER_TEST=clang (default, CLANG=clang-14) or gcc (GCC=gcc): the
#   compiler of both builds; with gcc, `pmlab cc` runs with PMLAB_CC=$GCC)
set -eu
. "$(dirname "$0")/common.sh"
REPS=${1:-5}
CLANG=${CLANG:-clang-14}
CC_UNDER_TEST=${CC_UNDER_TEST:-clang}
case $CC_UNDER_TEST in
clang) NATIVE_CC=$CLANG; unset PMLAB_CC ;;
gcc) NATIVE_CC=${GCC:-gcc}; PMLAB_CC=$NATIVE_CC; export PMLAB_CC ;;
*) echo "instr.sh: CC_UNDER_TEST=$CC_UNDER_TEST: clang or gcc" >&2; exit 2 ;;
esac
need_pmlab
"$NATIVE_CC" -O2 -o "$TMP/native" "$ROOT/bench/instr_kernel.c"
PMLAB_CC_MODE=full "$PMLAB" cc -O2 -o "$TMP/instr" "$ROOT/bench/instr_kernel.c"
for w in stream sort memlat; do
	"$NATIVE_CC" -O2 -std=gnu11 -I"$ROOT/include" -o "$TMP/$w.native" "$ROOT/workloads/$w.c" -lpthread
	PMLAB_CC_MODE=full "$PMLAB" cc -O2 -std=gnu11 -I"$ROOT/include" -o "$TMP/$w.instr" "$ROOT/workloads/$w.c" -lpthread
	if [ "$CC_UNDER_TEST" = clang ]; then
		PMLAB_CC_MODE=sample "$PMLAB" cc -O2 -std=gnu11 -I"$ROOT/include" -o "$TMP/$w.sampled" "$ROOT/workloads/$w.c" -lpthread
	fi
done

run_variant() { # name command...
	name=$1; shift
	: > "$TMP/$name.hit"; : > "$TMP/$name.sort"; : > "$TMP/$name.miss"
	i=0
	while [ $i -lt "$REPS" ]; do
		"$@" > "$TMP/out" 2>/dev/null
		sed -n 's/.*kernel=hit .*ns_per_iter=\([0-9.]*\).*/\1/p' "$TMP/out" >> "$TMP/$name.hit"
		sed -n 's/.*kernel=sort .*ns_per_rep=\([0-9.]*\).*/\1/p' "$TMP/out" >> "$TMP/$name.sort"
		sed -n 's/.*kernel=miss .*ns_per_step=\([0-9.]*\).*/\1/p' "$TMP/out" >> "$TMP/$name.miss"
		i=$((i + 1))
	done
}

stats() { # file -> "median min max"
	sort -g "$1" | awk '{v[NR]=$1} END {m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2; printf "%.3f %.3f %.3f", m, v[1], v[NR]}'
}

run_variant native "$TMP/native"
run_variant inactive "$TMP/instr"
run_variant active "$PMLAB" run --quiet --source instrumented --no-inject --pm-latency 400ns -- "$TMP/instr"

echo "instrumentation cost ($CC_UNDER_TEST: $NATIVE_CC), $REPS runs each (median [min..max]); machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
for v in native inactive active; do
	set -- $(stats "$TMP/$v.hit"); h=$1; hl=$2; hh=$3
	set -- $(stats "$TMP/$v.sort"); s=$1; sl=$2; sh=$3
	set -- $(stats "$TMP/$v.miss"); m=$1; ml=$2; mh=$3
	printf "%-9s hit %7.3f ns/iter [%.3f..%.3f]   sort %10.0f ns/rep [%.0f..%.0f]   miss %7.1f ns/step [%.1f..%.1f]\n" "$v" "$h" "$hl" "$hh" "$s" "$sl" "$sh" "$m" "$ml" "$mh"
done
set -- $(stats "$TMP/native.hit"); nh=$1
set -- $(stats "$TMP/inactive.hit"); ih=$1
set -- $(stats "$TMP/active.hit"); ah=$1
set -- $(stats "$TMP/native.miss"); nm=$1
set -- $(stats "$TMP/active.miss"); am=$1
set -- $(stats "$TMP/native.sort"); ns=$1
set -- $(stats "$TMP/inactive.sort"); is=$1
set -- $(stats "$TMP/active.sort"); as=$1
awk -v nh="$nh" -v ih="$ih" -v ah="$ah" -v ns="$ns" -v is="$is" -v as="$as" -v nm="$nm" -v am="$am" 'BEGIN {
	printf "hit path (filter hit, counting): %.2f ns per instrumented access\n", ah - nh
	printf "hooks compiled in but inactive:  %.2f ns per instrumented access\n", ih - nh
	printf "compute-bound sort slowdown: %.1fx inactive, %.1fx counting\n", is / ns, as / ns
	printf "slow path (model miss, counting): %.1f ns per miss\n", am - nm
}'

# Issue 17's programs: native against --no-inject, REPS runs each. The
# readings go to $TMP/res.NAME (not $TMP/NAME: memlat.native and
# memlat.sampled are the binaries themselves).
program_runs() { # name key command...
	name=$1; key=$2; shift 2
	: > "$TMP/res.$name"
	i=0
	while [ $i -lt "$REPS" ]; do
		"$@" 2>/dev/null | sed -n "s/.* $key=\([0-9.]*\).*/\1/p" >> "$TMP/res.$name"
		i=$((i + 1))
	done
}
NOINJ="$PMLAB run --quiet --source instrumented --no-inject --pm-latency 400ns"
# Builds: "full" hooks every access (PMLAB_CC_MODE=full); "sampled" is
# pmlab cc's default with clang (the sampling plugin), run under
# --sample off (every check in one window: the full cost, "sampled-off")
# and --sample auto ("sampled").
BUILDS="full"
[ -x "$TMP/stream.sampled" ] && BUILDS="full sampled-off sampled"
program_runs triad.native gbps "$TMP/stream.native" -k triad -t 1
program_runs memlat.native ns_per_access "$TMP/memlat.native" -r 256
for a in qsort radix; do
	program_runs $a.native ns_per_element "$TMP/sort.native" -a $a
done
program_runs memlat4.native ns_per_access "$TMP/memlat.native" -r 256 -c 4
program_runs memlat8.native ns_per_access "$TMP/memlat.native" -r 256 -c 8
for b in $BUILDS; do
	x=$b; s=off
	[ "$b" = full ] && x=instr
	[ "$b" = sampled-off ] && x=sampled
	[ "$b" = sampled ] && s=auto
	program_runs triad.$b gbps $NOINJ --sample $s -- "$TMP/stream.$x" -k triad -t 1
	program_runs memlat.$b ns_per_access $NOINJ --sample $s -- "$TMP/memlat.$x" -r 256
	program_runs memlat4.$b ns_per_access $NOINJ --sample $s -- "$TMP/memlat.$x" -r 256 -c 4
	program_runs memlat8.$b ns_per_access $NOINJ --sample $s -- "$TMP/memlat.$x" -r 256 -c 8
	for a in qsort radix; do
		program_runs $a.$b ns_per_element $NOINJ --sample $s -- "$TMP/sort.$x" -a $a
	done
done
set -- $(stats "$TMP/res.triad.native"); tn=$1; tnl=$2; tnh=$3
for b in $BUILDS; do
	set -- $(stats "$TMP/res.triad.$b"); ta=$1; tal=$2; tah=$3
	printf "triad (1 thread, 3 x 128 MiB): native %.2f GB/s [%.2f..%.2f], --no-inject %-11s %.2f GB/s [%.2f..%.2f]: %.2fx slower\n" \
		"$tn" "$tnl" "$tnh" "$b" "$ta" "$tal" "$tah" "$(awk -v n="$tn" -v a="$ta" 'BEGIN { print n / a }')"
done
for a in qsort radix; do
	set -- $(stats "$TMP/res.$a.native"); sn=$1; snl=$2; snh=$3
	for b in $BUILDS; do
		set -- $(stats "$TMP/res.$a.$b"); sa=$1; sal=$2; sah=$3
		printf "sort %-5s (4M keys, 16 MiB): native %.2f ns/element [%.2f..%.2f], --no-inject %-11s %.2f [%.2f..%.2f]: %.2fx slower\n" \
			"$a" "$sn" "$snl" "$snh" "$b" "$sa" "$sal" "$sah" "$(awk -v n="$sn" -v a="$sa" 'BEGIN { print a / n }')"
	done
done
for m in memlat memlat4 memlat8; do
	chains=1; [ $m = memlat4 ] && chains=4; [ $m = memlat8 ] && chains=8
	set -- $(stats "$TMP/res.$m.native"); mn=$1; mnl=$2; mnh=$3
	for b in $BUILDS; do
		set -- $(stats "$TMP/res.$m.$b"); ma=$1; mal=$2; mah=$3
		printf "memlat (%d chain(s), 256 MiB): native %.1f ns/access [%.1f..%.1f], --no-inject %-11s %.1f [%.1f..%.1f]: %.2fx slower\n" \
			"$chains" "$mn" "$mnl" "$mnh" "$b" "$ma" "$mal" "$mah" "$(awk -v n="$mn" -v a="$ma" 'BEGIN { print a / n }')"
	done
done

# Under --sample auto, the share of the checks run in windows (the stats'
# `sample` object): what the hooks cost a program is about that share
# times the instrumented copy's slowdown per check.
if [ -x "$TMP/sort.sampled" ]; then
	share_of() { # stats.json -> "window_checks of all (share)"
		sed -n 's/.*"sample":{\([^}]*\)}.*/\1/p' "$1" | tr ',' '\n' | awk -F: '
			$1 == "\"window_checks\"" { w = $2 } $1 == "\"gap_checks\"" { g = $2 }
			END { if (w + g > 0) printf "%d of %d checks in windows (%.4f)", w, w + g, w / (w + g) }'
	}
	$NOINJ --sample auto --stats-json "$TMP/share.radix.json" -- "$TMP/sort.sampled" -a radix >/dev/null 2>&1
	$NOINJ --sample auto --stats-json "$TMP/share.triad.json" -- "$TMP/stream.sampled" -k triad -t 1 >/dev/null 2>&1
	echo "--no-inject --sample auto: radix sort $(share_of "$TMP/share.radix.json"); triad $(share_of "$TMP/share.triad.json")"
fi

# The hooks per access (sampled build with clang, else the full one).
hooks_of() { # stats.json key -> the number after "key": in the hooks object
	sed -n 's/.*"hooks":{\([^}]*\)}.*/\1/p' "$1" | tr ',' '\n' | sed -n "s/^\"$2\":\([0-9.]*\)$/\1/p"
}
x=instr
[ -x "$TMP/memlat.sampled" ] && x=sampled
for chains in 1 8; do
	for n in 1000000 3000000; do
		$NOINJ --sample off --stats-json "$TMP/hooks.$n.json" -- "$TMP/memlat.$x" -r 256 -c $chains -n $n >/dev/null 2>&1
	done
	a="$TMP/hooks.1000000.json"; b="$TMP/hooks.3000000.json"
	line=""
	for k in accesses logged compares compares_logged serial window_loss_ns; do
		line="$line $k $(hooks_of "$a" $k) $(hooks_of "$b" $k)"
	done
	echo "$line" | awk -v c="$chains" -v build="$x" -v hit="$(hooks_of "$b" hit_ns)" -v miss="$(hooks_of "$b" logged_miss_ns)" \
		-v cmp="$(hooks_of "$b" cmp_ns)" -v cmpl="$(hooks_of "$b" cmp_logged_ns)" '{
		for (i = 1; i < NF; i += 3) { v = ($(i + 2) - $(i + 1)) / 2e6; d[$i] = v == 0 ? 0 : v }
		if (c == 1) printf "calibrated per call: filter hit %.2f ns, logged miss %.2f ns, compare %.2f ns, logged compare %.2f ns\n", hit, miss, cmp, cmpl
		printf "memlat %d chain(s) (%s build), per access: %.3f calls (%.3f logged), %.3f compares (%.3f logged), %.3f serial, window loss charged %.1f ns\n", \
			c, build, d["accesses"], d["logged"], d["compares"], d["compares_logged"], d["serial"], d["window_loss_ns"]
	}'
done
