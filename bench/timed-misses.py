#!/usr/bin/env python3
"""Timed misses (PMLAB_TIMED_MISSES, pmlab run --timed-misses): emulated
runs with the timing off and on against the studies' expectation, in
interleaved pairs (native, off, on, native), so that a busy machine's drift
touches both alike.

    bench/timed-misses.py [--reps 3] [--every 64] [--out FILE] [--only NAME,...]

memlat (-q) and idxchase: expected = native + m x (L - DRAM), m = clamp((native
- c_k) / (D - c_1), 0, 1) as the working-set study (c_k the native at 4 MiB with
the same chains, D the DRAM latency, here memlat's one-chain native at 256 MiB
measured in the same repetition, given to the emulated runs as
--dram-latency). bptree and skiplist: expected = native + waited - timed as the
shapes study (native runs with -x 0 and -x (L - DRAM)). Reports per point the
median error (%) with the timing off and on, and the timed-miss statistics.
Builds the workloads with pmlab cc -O2 as validate does (into $TMPDIR).
"""
import argparse, json, os, re, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The pmlab and libpmlab.so to use (a copy, so that a rebuild does not change
# them under a long measurement): $PMLAB_BIN_DIR, else target/release.
BIN = os.environ.get("PMLAB_BIN_DIR", os.path.join(ROOT, "target/release"))
PMLAB = os.path.join(BIN, "pmlab")
LIB = BIN


def build(d):
    for sub in ("native", "instr"):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
    for w in ("memlat", "idxchase", "bptree", "skiplist"):
        src = os.path.join(ROOT, "workloads", w + ".c")
        common = ["-O2", "-g", "-std=gnu11", "-I", os.path.join(ROOT, "include")]
        subprocess.run([PMLAB, "cc", *common, "-o", os.path.join(d, "instr", w), src,
                        "-lpthread", "-lm"], check=True)
        subprocess.run(["cc", *common, "-o", os.path.join(d, "native", w), src, "-lpthread",
                        "-lm", "-L" + LIB, "-Wl,-rpath," + LIB, "-lpmlab"], check=True)


def value(out, key):
    m = re.findall(r"\b%s=([0-9.]+)" % key, out)
    if not m:
        raise SystemExit("no %s in: %s" % (key, out))
    return float(m[-1])


def native(d, prog, args, key):
    o = subprocess.run([os.path.join(d, "native", prog), *args], capture_output=True,
                       text=True, check=True)
    return value(o.stdout + o.stderr, key)


def emulated(d, prog, args, key, lat, dram, timed, no_inject=False):
    with tempfile.NamedTemporaryFile(suffix=".json") as st:
        cmd = [PMLAB, "run", "--quiet", "--source", "instrumented", "--pm-latency", "%gns" % lat,
               "--dram-latency", "%.2fns" % dram, "--timed-misses", timed,
               "--stats-json", st.name]
        if no_inject:
            cmd.append("--no-inject")
        o = subprocess.run([*cmd, "--", os.path.join(d, "instr", prog), *args],
                           capture_output=True, text=True, check=True)
        h = json.load(open(st.name)).get("hooks", {})
    return value(o.stdout + o.stderr, key), h


def dram_now(d):
    """The DRAM latency now: the lower of two one-chain memlat runs over
    256 MiB (a busy machine only makes a run slower)."""
    return min(native(d, "memlat", ["-q", "-c", "1", "-r", "256", "-n", "300000"], "ns_per_access")
               for _ in range(2))


def med(x):
    return statistics.median(x) if x else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--every", default="64")
    ap.add_argument("--out", default="/dev/stdout")
    ap.add_argument("--only", default="")
    ap.add_argument("--build", default=os.path.join(tempfile.gettempdir(), "pmlab-timed"))
    ap.add_argument("--charged", action="store_true",
                    help="compare the serial misses per access the emulator charges (from two run "
                         "lengths' hooks.serial) with the native m, instead of the times")
    ap.add_argument("--charged-lookups", action="store_true",
                    help="as --charged for bptree (256 MiB) and skiplist (64 MiB) at 1000 ns: the "
                         "serial misses per lookup charged against the misses per lookup the native "
                         "run times itself (-x 0)")
    a = ap.parse_args()
    build(a.build)
    d = a.build
    if a.charged:
        return charged(a, d)
    if a.charged_lookups:
        return charged_lookups(a, d)
    only = set(x for x in a.only.split(",") if x)
    out = open(a.out, "w", buffering=1)
    lats = [300.0, 1000.0]
    pts = [("memlat", k, r) for k in (1, 4) for r in (8, 16, 32, 256)] + [("idxchase", 1, 16)]
    pts = [p for p in pts if not only or "%s-%d-%d" % p in only]
    for prog, k, r in pts:
        name = "%s-%d-%d" % (prog, k, r)
        n = 300_000 if r >= 128 else 1_000_000
        args = ["-c", str(k), "-r", str(r), "-n", str(n)] + (["-q"] if prog == "memlat" else [])
        key = "ns_per_access"
        err = {(lat, t): [] for lat in lats for t in ("off", a.every)}
        stats = {}
        for _ in range(a.reps):
            dram = dram_now(d)
            c1 = native(d, prog, ["-c", "1", "-r", "4", "-n", "1000000"] + (["-q"] if prog == "memlat" else []), key)
            ck = native(d, prog, ["-c", str(k), "-r", "4", "-n", "1000000"] + (["-q"] if prog == "memlat" else []), key)
            big = r >= 128
            nat = [native(d, prog, args, key)]
            for lat in lats:
                if dram >= lat:
                    print("%s L=%g: DRAM %.1f ns now, skipped" % (name, lat, dram), file=sys.stderr)
                    continue
                runs = {}
                for t in ("off", a.every):
                    runs[t], stats[(lat, t)] = emulated(d, prog, args, key, lat, dram, t)
                nat.append(native(d, prog, args, key))
                nv = (nat[-2] + nat[-1]) / 2
                D = nv if (big and k == 1) else dram
                if big and k > 1:
                    D = dram
                m = min(max((nv - ck) / (D - c1), 0.0), 1.0) if D > c1 else 0.0
                exp = nv + m * (lat - dram)
                for t in runs:
                    err[(lat, t)].append(100.0 * (runs[t] / exp - 1.0))
                print("%s L=%g native=%.1f dram=%.1f m=%.3f expected=%.1f off=%.1f on=%.1f" % (
                    name, lat, nv, dram, m, exp, runs["off"], runs[a.every]), file=sys.stderr)
        for lat in lats:
            h = stats.get((lat, a.every), {})
            out.write("%s L=%g: error off %+.1f%% [%s], on %+.1f%% [%s]; real miss %.3f model miss %.3f correction %.3f\n" % (
                name, lat, med(err[(lat, "off")]), " ".join("%+.1f" % e for e in err[(lat, "off")]),
                med(err[(lat, a.every)]), " ".join("%+.1f" % e for e in err[(lat, a.every)]),
                h.get("timed_real_miss_share", 0), h.get("timed_model_miss_share", 0),
                h.get("timed_correction", 1)))
    # The lookups, as the shapes study: expected = native + waited - timed.
    for prog, mib, count in (("bptree", 256, 200_000), ("skiplist", 64, 20_000)):
        if only and prog not in only:
            continue
        big = ["-r", str(mib), "-n", str(count)]
        key = "ns_per_lookup"
        lat = 1000.0
        err = {"off": [], a.every: []}
        h = {}
        for _ in range(a.reps):
            dram = dram_now(d)
            if dram >= lat:
                continue
            nat = native(d, prog, big, key)
            timed0 = native(d, prog, big + ["-x", "0"], key)
            waited = native(d, prog, big + ["-x", str(round(max(lat - dram, 0)))], key)
            runs = {}
            for t in ("off", a.every):
                runs[t], hh = emulated(d, prog, big, key, lat, dram, t)
                if t != "off":
                    h = hh
            nat2 = native(d, prog, big, key)
            t0 = (nat + nat2) / 2
            exp = t0 + waited - timed0
            for t in runs:
                err[t].append(100.0 * (runs[t] / exp - 1.0))
            print("%s L=1000 native=%.1f expected=%.1f off=%.1f on=%.1f" % (
                prog, t0, exp, runs["off"], runs[a.every]), file=sys.stderr)
        out.write("%s %dMiB L=1000: error off %+.1f%% [%s], on %+.1f%% [%s]; real miss %.3f model miss %.3f correction %.3f\n" % (
            prog, mib, med(err["off"]), " ".join("%+.1f" % e for e in err["off"]),
            med(err[a.every]), " ".join("%+.1f" % e for e in err[a.every]),
            h.get("timed_real_miss_share", 0), h.get("timed_model_miss_share", 0),
            h.get("timed_correction", 1)))


def charged(a, d):
    """Serial misses per access charged, timing off and on, against the
    native m: independent of how long the emulated runs took (a busy
    machine stretches those), dependent on the machine's caches only
    through the timed loads (on) and the native runs."""
    out = open(a.out, "w", buffering=1)
    key = "ns_per_access"
    for prog, k, r in [("memlat", k, r) for k in (1, 4) for r in (8, 16, 32, 256)] + [("idxchase", 1, 16)]:
        q = ["-q"] if prog == "memlat" else []
        n1, n2 = (100_000, 400_000) if r >= 128 else (200_000, 1_200_000)
        res = {"off": [], a.every: []}
        ms, pct = [], {}
        for _ in range(a.reps):
            dram = dram_now(d)
            c1 = native(d, prog, ["-c", "1", "-r", "4", "-n", "1000000"] + q, key)
            ck = native(d, prog, ["-c", str(k), "-r", "4", "-n", "1000000"] + q, key)
            nat = native(d, prog, ["-c", str(k), "-r", str(r), "-n", str(n2)] + q, key)
            D = nat if (r >= 128 and k == 1) else dram
            ms.append(min(max((nat - ck) / (D - c1), 0.0), 1.0) if D > c1 else 0.0)
            for t in res:
                ser = []
                for n in (n1, n2):
                    _, h = emulated(d, prog, ["-c", str(k), "-r", str(r), "-n", str(n)] + q, key,
                                    300.0, max(dram, 100.0) if dram < 290 else 150.0, t)
                    ser.append(h.get("serial", 0.0))
                    pct[t] = h
                res[t].append((ser[1] - ser[0]) / (n2 - n1))
        h = pct[a.every]
        out.write("%s-%d-%d: native m %.3f [%s]; charged off %.3f [%s], on %.3f [%s]; real miss %.3f model miss %.3f pace %.3f correction %.3f\n" % (
            prog, k, r, med(ms), " ".join("%.3f" % x for x in ms),
            med(res["off"]), " ".join("%.3f" % x for x in res["off"]),
            med(res[a.every]), " ".join("%.3f" % x for x in res[a.every]),
            h.get("timed_real_miss_share", 0), h.get("timed_model_miss_share", 0),
            h.get("timed_pace", 1), h.get("timed_correction", 1)))


def charged_lookups(a, d):
    out = open(a.out, "w", buffering=1)
    for prog, mib, n1, n2 in (("bptree", 256, 50_000, 200_000), ("skiplist", 64, 5_000, 20_000)):
        res = {"off": [], a.every: []}
        nat, hs = [], {}
        for _ in range(a.reps):
            o = subprocess.run([os.path.join(d, "native", prog), "-r", str(mib), "-n", str(n2), "-x", "0"],
                               capture_output=True, text=True, check=True)
            nat.append(value(o.stdout + o.stderr, "misses_per_lookup"))
            for t in res:
                ser = []
                for n in (n1, n2):
                    _, h = emulated(d, prog, ["-r", str(mib), "-n", str(n)], "ns_per_lookup", 1000.0,
                                    150.0, t)
                    ser.append(h.get("serial", 0.0))
                    hs[t] = h
                res[t].append((ser[1] - ser[0]) / (n2 - n1))
        h = hs[a.every]
        out.write("%s %dMiB: native misses/lookup %.2f [%s]; charged serial/lookup off %.2f [%s], on %.2f [%s]; real miss %.3f model miss %.3f pace %.3f correction %.3f\n" % (
            prog, mib, med(nat), " ".join("%.2f" % x for x in nat),
            med(res["off"]), " ".join("%.2f" % x for x in res["off"]),
            med(res[a.every]), " ".join("%.2f" % x for x in res[a.every]),
            h.get("timed_real_miss_share", 0), h.get("timed_model_miss_share", 0),
            h.get("timed_pace", 1), h.get("timed_correction", 1)))


if __name__ == "__main__":
    main()
