//! `pmlab cc`'s sampling plugin (issue 17): programs built with it give
//! the same output as native builds at every optimization level, both
//! copies of their functions run, a window sees exactly the accesses full
//! instrumentation sees, and without the plugin `pmlab cc` falls back to
//! full instrumentation with one warning line.
//!
//! The pass is checked without libpmlab: the objects `pmlab cc -c` builds
//! are linked with a stub (below) that counts the hooks and answers
//! `__pmlab_sample_switch` by a policy read from `STUB_POLICY`.

mod common;

use common::{runtime_dir, TempDir, PMLAB};
use std::path::Path;
use std::process::{Command, Output};

/// Loops (nested, with early exits and a switch), calls in loops,
/// recursion, function pointers, a callee with its own loop, stack arrays
/// whose address escapes, and a checksum of everything.
const PROG: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long mix(unsigned long h, unsigned long v) { return (h ^ v) * 1099511628211UL; }
static int cmp(const void *a, const void *b) {
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}
__attribute__((noinline)) static long sum(const long *v, int n) {
	long s = 0;
	for (int i = 0; i < n; i++) s += v[i];
	return s;
}
static long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
__attribute__((noinline)) static void fill(long *buf, int n, int seed) {
	for (int i = 0; i < n; i++) buf[i] = (seed * 7919L + i * 104729L) % 1000;
}
int main(int argc, char **argv) {
	int n = argc > 1 ? atoi(argv[1]) : 4000;
	long *v = malloc(n * sizeof *v);
	double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
	unsigned long h = 14695981039346656037UL;
	for (int i = 0; i < n; i++) { v[i] = (i * 2654435761UL) % 10007; b[i] = i; c[i] = 2.0 * i; }
	for (int r = 0; r < 20; r++) {
		for (int i = 0; i < n; i++) a[i] = b[i] + 3.0 * c[i];
		h = mix(h, (unsigned long)a[r % n]);
		h = mix(h, sum(v, n));
	}
	for (int i = 0; i < n; i++) {
		switch (v[i] % 4) {
		case 0: h = mix(h, 1); break;
		case 1: if (v[i] > 5000) continue; h = mix(h, 2); break;
		case 2: h = mix(h, v[i]); break;
		default: if (v[i] == 3) goto out; break;
		}
	}
out:
	qsort(v, n, sizeof *v, cmp);
	for (int i = 1; i < n; i++) if (v[i - 1] > v[i]) { printf("unsorted\n"); return 1; }
	long stack[64];
	for (int k = 0; k < 50; k++) { fill(stack, 64, k); h = mix(h, sum(stack, 64)); }
	char text[128];
	for (int k = 0; k < 30; k++) { snprintf(text, sizeof text, "%d-%lu", k, h % 97); h = mix(h, strlen(text)); }
	h = mix(h, fib(20));
	printf("checksum %lu\n", h);
	return 0;
}
"#;

/// Counts the hooks (an update, a load and its store in one call, as two:
/// the accesses full instrumentation would hook; `updates` counts the
/// calls) and answers the switch (`__pmlab_sample_switch3`, the
/// triple of clean countdown, window countdown and window flag):
/// `STUB_POLICY` = `clean` (never a window), `full` (one endless window),
/// `alt` (windows of 50 checks, gaps of 200) or `gap` (never a window,
/// gaps of `STUB_GAP` checks). At exit, writes the counts to stderr, with
/// the checks counted down in both countdowns (as the runtime counts
/// them: what it set less what is left, at each question and at exit).
const STUB: &str = r#"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static unsigned long hooks, asks, to_instr, to_clean, cmps, updates;
static int policy = -1;
#define H(n) void __sanitizer_cov_load##n(void *p) { (void)p; hooks++; } \
	void __sanitizer_cov_store##n(void *p) { (void)p; hooks++; } \
	void __pmlab_cov_update##n(void *p) { (void)p; hooks += 2; updates++; }
H(1) H(2) H(4) H(8) H(16)
#define C(n, t) void __sanitizer_cov_trace_cmp##n(t a, t b) { (void)a; (void)b; cmps++; } \
	void __sanitizer_cov_trace_const_cmp##n(t a, t b) { (void)a; (void)b; }
C(1, uint8_t) C(2, uint16_t) C(4, uint32_t) C(8, uint64_t)
void __sanitizer_cov_trace_switch(uint64_t v, uint64_t *c) { (void)v; (void)c; }
void __sanitizer_cov_8bit_counters_init(char *a, char *b) { (void)a; (void)b; }
void __sanitizer_cov_pcs_init(const uintptr_t *a, const uintptr_t *b) { (void)a; (void)b; }
static int in_window;
static int64_t *state, set0 = 1, set1 = 1, gap = 200;
static unsigned long checks;
int __pmlab_sample_switch3(int64_t *s) {
	if (policy < 0) {
		const char *p = getenv("STUB_POLICY");
		policy = !p || !strcmp(p, "clean") ? 0 : !strcmp(p, "full") ? 1 : !strcmp(p, "gap") ? 3 : 2;
		if (getenv("STUB_GAP")) gap = atol(getenv("STUB_GAP"));
	}
	asks++;
	state = s;
	checks += (set0 - s[0]) + (set1 - s[1]);
	int r;
	if (policy == 3) { s[0] = gap; s[1] = 1; s[2] = 0; r = 0; }
	else if (policy == 0) { s[0] = 1 << 30; s[1] = 1; s[2] = 0; r = 0; }
	else if (policy == 1) { s[0] = 1; s[1] = 1L << 40; s[2] = 1; r = 1; }
	else if (in_window && s[1] > 0) { s[1]--; if (s[1] > 0) { s[0] = 1; s[2] = 1; r = 1; } else { in_window = 0; s[0] = 200; s[1] = 1; s[2] = 0; r = 0; } }
	else if (in_window) { in_window = 0; s[0] = 200; s[1] = 1; s[2] = 0; r = 0; }
	else if (s[0] > 0) { s[1] = 1; s[2] = 0; r = 0; }
	else { in_window = 1; s[0] = 1; s[1] = 50; s[2] = 1; r = 1; }
	if (r) to_instr++; else to_clean++;
	set0 = s[0]; set1 = s[1];
	return r;
}
__attribute__((destructor)) static void report(void) {
	if (state) checks += (set0 - state[0]) + (set1 - state[1]);
	fprintf(stderr, "hooks=%lu asks=%lu instr=%lu clean=%lu cmps=%lu updates=%lu checks=%lu\n", hooks, asks, to_instr, to_clean, cmps, updates, checks);
}
"#;

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The stub's counts from a run's stderr: (hooks, asks, to instrumented,
/// to clean).
fn counts(out: &Output) -> (u64, u64, u64, u64) {
    let v = all_counts(out);
    (v[0], v[1], v[2], v[3])
}

/// The stub's compare callbacks from a run's stderr.
fn compares(out: &Output) -> u64 {
    all_counts(out)[4]
}

fn all_counts(out: &Output) -> Vec<u64> {
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.starts_with("hooks="))
        .unwrap_or_else(|| panic!("no counts in {err}"));
    line.split_whitespace()
        .map(|kv| kv.split('=').nth(1).unwrap().parse().unwrap())
        .collect()
}

/// Build `prog.c` in `dir` with `pmlab cc -c FLAGS` (`mode`: the
/// `PMLAB_CC_MODE`) and link it with the stub by clang itself: `exe`.
fn build(dir: &Path, flags: &[&str], mode: &str, exe: &str) {
    build_with(dir, flags, mode, exe, &[]);
}

/// [`build`] with `env` in the compiler's environment.
fn build_with(dir: &Path, flags: &[&str], mode: &str, exe: &str, env: &[(&str, &str)]) {
    let obj = format!("{exe}.o");
    run(Command::new(PMLAB)
        .arg("cc")
        .args(flags)
        .args(["-c", "-o", &obj, "prog.c"])
        .env("PMLAB_CC_MODE", mode)
        .envs(env.iter().copied())
        .current_dir(dir));
    run(Command::new("clang-14")
        .args(flags)
        .args(["-o", exe, &obj, "stub.o"])
        .current_dir(dir));
}

fn exec(dir: &Path, exe: &str, policy: &str) -> Output {
    run(Command::new(dir.join(exe))
        .env("STUB_POLICY", policy)
        .current_dir(dir))
}

fn have_plugin(dir: &Path) -> bool {
    let out = Command::new(PMLAB)
        .args(["cc", "-c", "-o", "probe.o", "stub.c"])
        .current_dir(dir)
        .output()
        .expect("pmlab cc");
    !String::from_utf8_lossy(&out.stderr).contains("sampling plugin unavailable")
}

#[test]
fn sampled_builds_run_both_copies_and_match_native_output() {
    runtime_dir();
    if !common::require_tool("clang-14", "clang-14") {
        return;
    }
    let t = TempDir::new("sample");
    t.write("prog.c", PROG);
    t.write("stub.c", STUB);
    run(Command::new("clang-14")
        .args(["-O2", "-c", "-o", "stub.o", "stub.c"])
        .current_dir(&t.0));
    if !have_plugin(&t.0) {
        common::skip("pmlab built without LLVM 14 (apt-get install llvm-14-dev)");
        return;
    }
    run(Command::new("clang-14")
        .args(["-O2", "-o", "native", "prog.c"])
        .current_dir(&t.0));
    let want = String::from_utf8_lossy(&exec(&t.0, "native", "clean").stdout).into_owned();
    assert!(want.starts_with("checksum "), "{want}");
    for flags in [
        &["-O0"][..],
        &["-O1"],
        &["-O2"],
        &["-O3"],
        &["-O2", "-flto"],
    ] {
        let tag = flags.join("").replace('-', "");
        let (full, sampled) = (format!("full{tag}"), format!("sampled{tag}"));
        let private = format!("private{tag}");
        build(&t.0, flags, "full", &full);
        // The stack slots hooked too, so that a window sees what full
        // instrumentation sees.
        build_with(
            &t.0,
            flags,
            "sample",
            &sampled,
            &[("PMLAB_SAMPLE_HOOK_STACK", "1")],
        );
        build(&t.0, flags, "sample", &private);
        let f = exec(&t.0, &full, "clean");
        let (full_hooks, full_asks, _, _) = counts(&f);
        assert_eq!(String::from_utf8_lossy(&f.stdout), want, "{flags:?} full");
        assert!(full_hooks > 10_000, "{flags:?}: {full_hooks} hooks");
        assert_eq!(full_asks, 0, "{flags:?}: the full build has no switch");
        // The default build leaves the private stack slots unhooked: at
        // -O0 every local variable is one.
        let o = exec(&t.0, &private, "full");
        assert_eq!(String::from_utf8_lossy(&o.stdout), want, "{flags:?}");
        let private_hooks = counts(&o).0;
        assert!(
            private_hooks > 0 && private_hooks <= full_hooks,
            "{flags:?}: {private_hooks} of {full_hooks}"
        );
        if flags == ["-O0"] {
            assert!(
                private_hooks * 2 < full_hooks,
                "{flags:?}: {private_hooks} of {full_hooks}"
            );
        }
        for policy in ["clean", "full", "alt"] {
            let o = exec(&t.0, &sampled, policy);
            assert_eq!(
                String::from_utf8_lossy(&o.stdout),
                want,
                "{flags:?} sampled, {policy}"
            );
            let (hooks, asks, instr, clean) = counts(&o);
            match policy {
                // Outside windows no hook runs.
                "clean" => assert_eq!(hooks, 0, "{flags:?}"),
                // One endless window sees every access full
                // instrumentation sees, no more.
                "full" => assert_eq!(hooks, full_hooks, "{flags:?}"),
                // Both copies run, and the windows see a part.
                _ => {
                    assert!(instr > 10 && clean > 10, "{flags:?}: {asks} asks");
                    assert!(
                        hooks > 0 && hooks < full_hooks,
                        "{flags:?}: {hooks} of {full_hooks}"
                    );
                }
            }
        }
    }
}

/// The clean copy keeps the gap's countdown in a register and writes it
/// to memory only every few checks and at calls and returns: it must
/// still count every check the instrumented copy counts, so that the
/// runtime's ratio of window to gap checks extrapolates the windows'
/// counts by the work they stand for. Counted by the stub: the checks of
/// one endless window against those of gaps of several lengths (1 and 8:
/// every check and every sync asks; 37: not a multiple of the sync
/// interval), at every optimization level.
#[test]
fn the_clean_copy_counts_every_check_the_instrumented_copy_counts() {
    runtime_dir();
    if !common::require_tool("clang-14", "clang-14") {
        return;
    }
    let t = TempDir::new("sample-checks");
    t.write("prog.c", PROG);
    t.write("stub.c", STUB);
    run(Command::new("clang-14")
        .args(["-O2", "-c", "-o", "stub.o", "stub.c"])
        .current_dir(&t.0));
    if !have_plugin(&t.0) {
        common::skip("pmlab built without LLVM 14 (apt-get install llvm-14-dev)");
        return;
    }
    for flags in [&["-O0"][..], &["-O1"], &["-O2"], &["-O3"]] {
        let exe = format!("sampled{}", flags.join("").replace('-', ""));
        build(&t.0, flags, "sample", &exe);
        let full = all_counts(&exec(&t.0, &exe, "full"))[6];
        assert!(full > 10_000, "{flags:?}: {full} checks");
        for gap in ["1", "8", "37", "100000"] {
            let o = run(Command::new(t.0.join(&exe))
                .env("STUB_POLICY", "gap")
                .env("STUB_GAP", gap)
                .current_dir(&t.0));
            let v = all_counts(&o);
            assert_eq!(v[6], full, "{flags:?}: gaps of {gap}: {v:?}");
            // Every gap runs its course: a question per gap, give or take
            // the last.
            let g: u64 = gap.parse().unwrap();
            assert!(v[1] >= full / g, "{flags:?}: gaps of {gap}: {v:?}");
        }
    }
}

/// The body of `name` in the assembly `asm` (from its label to the next
/// `.cfi_endproc`).
fn asm_body<'a>(asm: &'a str, name: &str) -> &'a str {
    let start = asm
        .find(&format!("\n{name}:"))
        .unwrap_or_else(|| panic!("no {name} in the assembly"));
    let rest = &asm[start..];
    &rest[..rest.find(".cfi_endproc").unwrap_or(rest.len())]
}

/// Program shapes for the compare filter and the private stack slots:
/// `shapes SHAPE N` runs one shape N times (steps, probes or lookups).
const SHAPES: &str = r#"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#define NODES 4096
/* memlat's loop: the chain pointers in a local array indexed by a
 * variable, the chain count and the steps loaded before the loop. */
__attribute__((noinline)) uintptr_t chase(void **heads, const long *cfg) {
	void **p[8];
	long chains = cfg[0], rounds = cfg[1];
	for (long c = 0; c < chains; c++) p[c] = heads[c];
	for (long r = 0; r < rounds; r++)
		for (long c = 0; c < chains; c++) p[c] = (void **)*p[c];
	uintptr_t s = 0;
	for (long c = 0; c < chains; c++) s ^= (uintptr_t)p[c];
	return s;
}
/* A hash probe: the loop's exit compares the key just loaded. */
struct slot { uint64_t key, val; };
__attribute__((noinline)) uint64_t probe(const struct slot *t, uint64_t mask, const uint64_t *keys, long n) {
	uint64_t sum = 0;
	for (long i = 0; i < n; i++) {
		uint64_t k = keys[i], h = (k * 0x9e3779b97f4a7c15ull) & mask;
		while (t[h].key != k && t[h].key != 0) h = (h + 1) & mask;
		sum += t[h].val;
	}
	return sum;
}
/* A tree level's search: compares of the loaded keys. */
__attribute__((noinline)) uint64_t descend(const uint64_t *k, long b, const uint64_t *keys, long n) {
	uint64_t sum = 0;
	for (long i = 0; i < n; i++) {
		uint64_t j = 0;
		for (long x = 1; x < b; x++) j += k[x] <= keys[i];
		sum += j;
	}
	return sum;
}
/* A stack array whose address escapes (its accesses stay hooked) and
 * the same array private (they do not). */
static long *volatile keep;
static long kept;
__attribute__((noinline)) void look(void) { long *k = keep; if (k) kept += k[0]; }
__attribute__((noinline)) long escaped(long n) {
	long v[4] = {1, 2, 3, 4}, s = 0;
	keep = v;
	for (long i = 0; i < n; i++) { v[i & 3] += i; s += v[(i + 1) & 3]; look(); }
	keep = 0;
	return s;
}
__attribute__((noinline)) long private_(long n) {
	long v[4] = {1, 2, 3, 4}, s = 0;
	for (long i = 0; i < n; i++) { v[i & 3] += i; s += v[(i + 1) & 3]; look(); }
	return s;
}
int main(int argc, char **argv) {
	if (argc < 3) return 2;
	long n = atol(argv[2]);
	static void *nodes[NODES * 8];
	for (long i = 0; i < NODES; i++) nodes[i * 8] = &nodes[((i * 2654435761u) % NODES) * 8];
	static struct slot t[1024];
	static uint64_t keys[1 << 16];
	for (long i = 0; i < (1 << 16); i++) keys[i] = 1 + (uint64_t)i * 7 % 900;
	for (uint64_t k = 1; k <= 900; k++) {
		uint64_t h = (k * 0x9e3779b97f4a7c15ull) & 1023;
		while (t[h].key) h = (h + 1) & 1023;
		t[h].key = k; t[h].val = k;
	}
	static uint64_t sorted[16];
	for (long x = 0; x < 16; x++) sorted[x] = x * 64;
	uintptr_t r = 0;
	if (!strcmp(argv[1], "chase")) {
		void *heads[4] = {&nodes[0], &nodes[8], &nodes[16], &nodes[24]};
		long cfg[2] = {4, n / 4};
		r = chase(heads, cfg);
	} else if (!strcmp(argv[1], "probe")) r = probe(t, 1023, keys, n);
	else if (!strcmp(argv[1], "descend")) r = descend(sorted, 16, keys, n);
	else if (!strcmp(argv[1], "escaped")) r = escaped(n);
	else if (!strcmp(argv[1], "private")) r = private_(n);
	return (int)(r & 1);
}
"#;

/// Compare callbacks only where a compare can test a value loaded in its
/// loop's current iteration, and no hooks on private stack slots: a
/// chase like memlat's makes one hooked access per step and no compare
/// callback, while a hash probe's and a tree search's compares of loaded
/// keys keep theirs (the overlap estimator's control dependence), and an
/// escaping stack array stays hooked. Counted as the difference of runs
/// of N and 2N steps, in one endless window.
#[test]
fn compares_and_accesses_are_hooked_only_where_they_can_matter() {
    runtime_dir();
    if !common::require_tool("clang-14", "clang-14") {
        return;
    }
    let t = TempDir::new("sample-shapes");
    t.write("prog.c", SHAPES);
    t.write("stub.c", STUB);
    run(Command::new("clang-14")
        .args(["-O2", "-c", "-o", "stub.o", "stub.c"])
        .current_dir(&t.0));
    if !have_plugin(&t.0) {
        common::skip("pmlab built without LLVM 14 (apt-get install llvm-14-dev)");
        return;
    }
    for flags in [&["-O2"][..], &["-O1"], &["-O3"]] {
        let exe = format!("shapes{}", flags.join("").replace('-', ""));
        build(&t.0, flags, "sample", &exe);
        // (hooks, compares) per step of `shape`.
        let per_step = |shape: &str| -> (f64, f64) {
            let go = |n: u64| {
                let o = Command::new(t.0.join(&exe))
                    .args([shape, &n.to_string()])
                    .env("STUB_POLICY", "full")
                    .output()
                    .expect("run shapes");
                (counts(&o).0, compares(&o))
            };
            let (a, b) = (go(4000), go(8000));
            ((b.0 - a.0) as f64 / 4000.0, (b.1 - a.1) as f64 / 4000.0)
        };
        let (hooks, cmps) = per_step("chase");
        assert_eq!((hooks, cmps), (1.0, 0.0), "{flags:?}: chase");
        let (hooks, cmps) = per_step("probe");
        assert!(hooks >= 2.0, "{flags:?}: probe: {hooks} hooks");
        assert!(cmps >= 1.0, "{flags:?}: probe: {cmps} compares");
        let (hooks, cmps) = per_step("descend");
        assert!(hooks >= 15.0, "{flags:?}: descend: {hooks} hooks");
        assert!(cmps >= 15.0, "{flags:?}: descend: {cmps} compares");
        // The array's load, store and load per step, beside `look`'s.
        let (escaped, _) = per_step("escaped");
        let (private, _) = per_step("private");
        assert!(
            escaped >= private + 3.0,
            "{flags:?}: {escaped} hooks escaped, {private} private"
        );
    }
}

/// Program shapes for the merge of a load and the store after it to the
/// same address (`merge SHAPE N`: N steps of one shape).
const MERGES: &str = r#"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
/* idxchase -m: the chains' state in memory, the chase load between its
 * load and its store. */
static volatile uint64_t st[4];
__attribute__((noinline)) void state(const uint32_t *next, long rounds) {
	for (long r = 0; r < rounds; r++)
		for (long c = 0; c < 4; c++)
			st[c] = next[(st[c] & 1023) * 16];
}
/* A counter: x[i] += v. */
__attribute__((noinline)) void counter(uint64_t *a, long n) {
	for (long i = 0; i < n; i++)
		a[(i * 7) & 1023] += (uint64_t)i;
}
/* A call between the load and the store: both hooked. */
static volatile long seen;
__attribute__((noinline)) void look(long v) { seen = v; }
__attribute__((noinline)) void called(uint64_t *a, long n) {
	for (long i = 0; i < n; i++) {
		uint64_t x = a[i & 1023];
		look((long)x);
		a[i & 1023] = x + 1;
	}
}
/* An atomic load and a store of a narrower width: both hooked. */
__attribute__((noinline)) void atomic_(uint64_t *a, long n) {
	for (long i = 0; i < n; i++) {
		uint64_t x = __atomic_load_n(&a[i & 1023], __ATOMIC_ACQUIRE);
		a[i & 1023] = x + 1;
	}
}
/* A store to another address between: both hooked (the stores keep
 * their order). */
__attribute__((noinline)) void between(uint64_t *a, uint64_t *b, long n) {
	for (long i = 0; i < n; i++) {
		uint64_t x = a[i & 1023];
		b[i & 511] = x;
		a[i & 1023] = x + 1;
	}
}
__attribute__((noinline)) void narrow(uint64_t *a, long n) {
	for (long i = 0; i < n; i++) {
		uint64_t x = a[i & 1023];
		*(uint32_t *)&a[i & 1023] = (uint32_t)x + 1;
	}
}
int main(int argc, char **argv) {
	if (argc < 3) return 2;
	long n = atol(argv[2]);
	static uint32_t next[1024 * 16];
	static uint64_t a[1024], b[512];
	for (long i = 0; i < 1024; i++) next[i * 16] = (uint32_t)((i * 2654435761u) & 1023);
	if (!strcmp(argv[1], "state")) state(next, n / 4);
	else if (!strcmp(argv[1], "counter")) counter(a, n);
	else if (!strcmp(argv[1], "called")) called(a, n);
	else if (!strcmp(argv[1], "atomic")) atomic_(a, n);
	else if (!strcmp(argv[1], "narrow")) narrow(a, n);
	else if (!strcmp(argv[1], "between")) between(a, b, n);
	return (int)((a[3] + b[3] + st[0]) & 1);
}
"#;

/// A load followed in its block by a store to the same address gets one
/// update hook and the store none, also with other hooked accesses
/// between (the chase load of a chain whose state is in memory), but not
/// across a call or a store to another address, for an atomic load, or
/// for a store of another width;
/// with PMLAB_SAMPLE_MERGE=0 both are hooked. The accesses the hooks
/// stand for (an update counts as its load and its store) are the same
/// either way. Counted per step as the difference of runs of N and 2N
/// steps, in one endless window.
#[test]
fn a_load_and_its_store_to_the_same_address_share_one_hook() {
    runtime_dir();
    if !common::require_tool("clang-14", "clang-14") {
        return;
    }
    let t = TempDir::new("sample-merge");
    t.write("prog.c", MERGES);
    t.write("stub.c", STUB);
    run(Command::new("clang-14")
        .args(["-O2", "-c", "-o", "stub.o", "stub.c"])
        .current_dir(&t.0));
    if !have_plugin(&t.0) {
        common::skip("pmlab built without LLVM 14 (apt-get install llvm-14-dev)");
        return;
    }
    for flags in [&["-O2"][..], &["-O1"], &["-O3"]] {
        let tag = flags.join("").replace('-', "");
        let (merged, apart) = (format!("merged{tag}"), format!("apart{tag}"));
        build(&t.0, flags, "sample", &merged);
        build_with(
            &t.0,
            flags,
            "sample",
            &apart,
            &[("PMLAB_SAMPLE_MERGE", "0")],
        );
        // (accesses hooked, update calls) per step of `shape`.
        let per_step = |exe: &str, shape: &str| -> (f64, f64) {
            let go = |n: u64| {
                let o = Command::new(t.0.join(exe))
                    .args([shape, &n.to_string()])
                    .env("STUB_POLICY", "full")
                    .output()
                    .expect("run merges");
                let v = all_counts(&o);
                (v[0], v[5])
            };
            let (a, b) = (go(4000), go(8000));
            ((b.0 - a.0) as f64 / 4000.0, (b.1 - a.1) as f64 / 4000.0)
        };
        for (shape, updates) in [
            ("state", 1.0),
            ("counter", 1.0),
            ("called", 0.0),
            ("atomic", 0.0),
            ("narrow", 0.0),
            ("between", 0.0),
        ] {
            let (hooks, calls) = per_step(&merged, shape);
            assert_eq!(calls, updates, "{flags:?} {shape}: updates per step");
            let (hooks_apart, calls_apart) = per_step(&apart, shape);
            assert_eq!(calls_apart, 0.0, "{flags:?} {shape}: PMLAB_SAMPLE_MERGE=0");
            assert_eq!(hooks, hooks_apart, "{flags:?} {shape}: accesses hooked");
        }
        // The state shape: the state's load and store and the chase load,
        // in two calls.
        let (hooks, calls) = per_step(&merged, "state");
        assert_eq!((hooks, hooks - calls), (3.0, 2.0), "{flags:?} state");
    }
}

#[test]
fn leaves_without_loops_only_test_the_window_flag() {
    runtime_dir();
    if !common::require_tool("clang-14", "clang-14") {
        return;
    }
    let t = TempDir::new("sample-leaf");
    t.write(
        "leaf.c",
        r#"
#include <stdlib.h>
__attribute__((noinline)) int cmp(const void *a, const void *b) {
	long x = *(const long *)a, y = *(const long *)b;
	return (x > y) - (x < y);
}
__attribute__((noinline)) long total(const long *v, int n) {
	long s = 0;
	for (int i = 0; i < n; i++) s += v[i];
	return s;
}
__attribute__((noinline)) long twice(const long *v, int n) { return 2 * total(v, n) + v[0]; }
int main(void) {
	long v[64];
	for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
	qsort(v, 64, sizeof *v, cmp);
	return (int)(twice(v, 64) & 1);
}
"#,
    );
    t.write("stub.c", STUB);
    if !have_plugin(&t.0) {
        common::skip("pmlab built without LLVM 14 (apt-get install llvm-14-dev)");
        return;
    }
    let out = run(Command::new(PMLAB)
        .args(["cc", "-O2", "-S", "-o", "leaf.s", "leaf.c"])
        .env("PMLAB_CC_MODE", "sample")
        .env("PMLAB_SAMPLE_PASS_DEBUG", "1")
        .current_dir(&t.0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cmp: two copies, leaf: window flag at entry, 0 back-edge(s)"),
        "{err}"
    );
    // (the loop may be vectorized: a main loop and a remainder)
    assert!(err.contains("total: two copies, entry check, "), "{err}");
    assert!(
        !err.contains("total: two copies, entry check, 0 back"),
        "{err}"
    );
    // A function without loops that calls another counts at entry too.
    assert!(
        err.contains("twice: two copies, entry check, 0 back-edge(s)"),
        "{err}"
    );
    let asm = std::fs::read_to_string(t.0.join("leaf.s")).unwrap();
    // The comparison function: one load of the flag, no countdown, no
    // switch; both copies (one with hooks).
    let cmp = asm_body(&asm, "cmp");
    assert!(cmp.contains("__pmlab_sample_state3@TPOFF+16"), "{cmp}");
    assert!(!cmp.contains("__pmlab_sample_switch3"), "{cmp}");
    assert!(!cmp.contains("__pmlab_sample_state3@TPOFF,"), "{cmp}");
    assert!(cmp.contains("__sanitizer_cov_load8"), "{cmp}");
    // The loop: countdowns and the switch.
    let total = asm_body(&asm, "total");
    assert!(total.contains("__pmlab_sample_switch3"), "{total}");
    assert!(total.contains("__pmlab_sample_state3@TPOFF,"), "{total}");
    // Built and run with the stub: the leaf runs instrumented in a window
    // (as many hooks as a full build) and clean outside.
    run(Command::new("clang-14")
        .args(["-O2", "-c", "-o", "stub.o", "stub.c"])
        .current_dir(&t.0));
    let mut hooks = Vec::new();
    for mode in ["full", "sample"] {
        let exe = format!("leaf-{mode}");
        run(Command::new(PMLAB)
            .args(["cc", "-O2", "-c", "-o", "leaf.o", "leaf.c"])
            .env("PMLAB_CC_MODE", mode)
            .current_dir(&t.0));
        run(Command::new("clang-14")
            .args(["-O2", "-o", &exe, "leaf.o", "stub.o"])
            .current_dir(&t.0));
        for policy in ["full", "clean"] {
            let o = Command::new(t.0.join(&exe))
                .env("STUB_POLICY", policy)
                .output()
                .unwrap();
            hooks.push(counts(&o).0);
        }
    }
    // full build (either policy), sampled build in one window, clean.
    assert!(hooks[0] > 64 * 6, "{hooks:?}");
    assert_eq!(hooks[0], hooks[1], "{hooks:?}");
    assert_eq!(hooks[2], hooks[0], "{hooks:?}");
    assert_eq!(hooks[3], 0, "{hooks:?}");
}

#[test]
fn cxx_exceptions_and_setjmp_build_and_run_sampled() {
    runtime_dir();
    if !common::require_tool("clang++-14", "clang-14") {
        return;
    }
    let t = TempDir::new("sample-cxx");
    t.write(
        "ex.cpp",
        r#"
#include <csetjmp>
#include <cstdio>
#include <stdexcept>
#include <vector>
static std::jmp_buf jb;
static int at(std::vector<int> &v, int i) {
	if (i >= (int)v.size()) throw std::out_of_range("past the end");
	return v[i];
}
static int jump(int n) {
	volatile int k = 0;
	if (setjmp(jb) == 0) { for (int i = 0; i < n; i++) k = k + i; std::longjmp(jb, 1); }
	return k;
}
int main() {
	std::vector<int> v(100);
	for (int i = 0; i < 100; i++) v[i] = i * i;
	long s = 0;
	for (int i = 0; i < 150; i++) {
		try { s += at(v, i); } catch (const std::exception &) { s += 1; }
	}
	std::printf("%ld %d\n", s, jump(10));
}
"#,
    );
    let out = run(Command::new(PMLAB)
        .args(["c++", "-O2", "-o", "ex", "ex.cpp"])
        .current_dir(&t.0));
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let native = run(&mut Command::new(t.0.join("ex")));
    assert_eq!(String::from_utf8_lossy(&native.stdout), "328400 45\n");
    for sample in ["auto", "off", "0.01"] {
        let o = run(Command::new(PMLAB)
            .args([
                "run",
                "-q",
                "--source",
                "instrumented",
                "--no-inject",
                "--sample",
                sample,
                "./ex",
            ])
            .current_dir(&t.0));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "328400 45\n",
            "--sample {sample}"
        );
    }
}

#[test]
fn without_the_plugin_cc_hooks_every_access_and_says_so_once() {
    runtime_dir();
    if !common::require_tool("clang-14", "clang-14") {
        return;
    }
    let t = TempDir::new("sample-fallback");
    t.write(
        "a.c",
        "#include <stdio.h>\nint g[64];\nint main(void){for(int i=0;i<64;i++)g[i]=i;printf(\"%d\\n\",g[63]);return 0;}\n",
    );
    let out = run(Command::new(PMLAB)
        .args(["cc", "-O2", "-o", "a", "a.c"])
        .env("PMLAB_CC_PLUGIN", t.0.join("missing.so"))
        .env("PMLAB_CC_VERBOSE", "1")
        .current_dir(&t.0));
    let err = String::from_utf8_lossy(&out.stderr);
    let warnings: Vec<_> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(warnings[0].contains("missing.so"), "{err}");
    assert!(err.contains("-fsanitize-coverage="), "{err}");
    assert!(!err.contains("-fpass-plugin"), "{err}");
    let o = run(&mut Command::new(t.0.join("a")));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "63\n");
    // PMLAB_CC_MODE=full: the same build, no warning.
    let out = run(Command::new(PMLAB)
        .args(["cc", "-O2", "-o", "a", "a.c"])
        .env("PMLAB_CC_MODE", "full")
        .env("PMLAB_CC_VERBOSE", "1")
        .current_dir(&t.0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !err.contains("warning") && err.contains("-fsanitize-coverage="),
        "{err}"
    );
    // A bad mode is one error line.
    let out = Command::new(PMLAB)
        .args(["cc", "-O2", "-o", "a", "a.c"])
        .env("PMLAB_CC_MODE", "fast")
        .current_dir(&t.0)
        .output()
        .unwrap();
    common::assert_one_line_error(&out, "PMLAB_CC_MODE");
}

#[test]
fn bad_sample_option_is_one_error_line() {
    let t = TempDir::new("sample-opt");
    let out = common::pmlab(&t.0, &["run", "--sample", "2", "--", "true"]);
    common::assert_one_line_error(&out, "--sample");
}
