//! `pmlab cc` / `pmlab c++`: a drop-in for CC/CXX that builds programs
//! whose every load and store calls into libpmlab (the `instrumented`
//! counter source).
//!
//! # Compiler
//!
//! `PMLAB_CC` (for `pmlab cc`) or `PMLAB_CXX` (for `pmlab c++`), a name on
//! PATH or a path, picks the compiler, gcc or clang; else `PMLAB_CLANG` /
//! `PMLAB_CLANGXX`; else `clang-14`, else `clang` (`clang++-14`,
//! `clang++`). Whether it is gcc or clang is told by its name (`gcc`, `g++`,
//! `clang` in the name or in that of the file it links to), else by its
//! `--version`. So `CC="pmlab cc" PMLAB_CC=gcc make` builds with gcc (keep
//! the variable set for every step: CMake records `CC`, not `PMLAB_CC`).
//! `pmlab gcc` and `pmlab g++` always wrap gcc (`PMLAB_GCC` / `PMLAB_GXX`,
//! else `gcc` / `g++` on PATH): `CC="pmlab gcc" cmake ...` records the
//! choice with the build, and no variable has to stay set.
//!
//! # clang
//!
//! The wrapper runs clang with the caller's arguments plus
//! `-fsanitize-coverage=func,inline-8bit-counters,trace-loads,trace-stores,trace-cmp`
//! (`trace-cmp`: the compares of loaded values, for the overlap
//! estimator's control dependences) when it compiles, and, when it links, libpmlab.so (found next to the
//! pmlab executable) with an rpath, so the program runs normally (no delay)
//! outside `pmlab run` (and `-fno-sanitize-link-runtime`, so that clang does
//! not link a sanitizer runtime of its own). clang needs a coverage mode
//! for `trace-loads`/`trace-stores`; `func` with inline 8-bit counters is
//! the cheapest one (one byte increment per function entry).
//!
//! By default (`PMLAB_CC_MODE=sample`) clang loads pmlab's sampling plugin
//! instead ([`crate::plugin`], `-fpass-plugin=FILE`): each function gets
//! a clean copy and an instrumented copy that calls the same
//! `__sanitizer_cov_load*/store*` hooks, and libpmlab decides at function
//! entries and loop back-edges which copy runs (see the runtime's
//! `source::instrumented::sample`); outside `pmlab run` the clean copy
//! runs, at near-native speed. `PMLAB_CC_MODE=full` hooks every access
//! as described above. Where the plugin cannot be used (pmlab built
//! without LLVM 14, a clang other than 14, no cache directory) the
//! wrapper says so in one line and hooks every access.
//!
//! # gcc
//!
//! gcc has no load/store callbacks of that kind; its ThreadSanitizer
//! instrumentation without its runtime serves instead: compiling adds
//! [`GCC_COMPILE_FLAGS`] (`-fsanitize=thread`, no calls at function entry
//! and exit, and `__SANITIZE_THREAD__` left undefined, since no race
//! detector runs), so that every access calls a `__tsan_*` callback that
//! libpmlab defines (`pmlab::tsan_hooks`). With `-fsanitize=thread` on the
//! command line gcc's driver would also link libtsan, whose runtime would
//! take over the process; without it, a compile-and-link call would not
//! instrument, nor would an `-flto` link (gcc instruments at link time
//! then). So a linking call keeps the flags and passes `-specs=FILE`: a
//! temporary specs file with gcc's own `link_command` (from
//! `gcc -dumpspecs`) minus its ThreadSanitizer parts (`libtsan_preinit.o`,
//! `-ltsan`), removed when gcc returns; then `-lpmlab` with an rpath as for
//! clang. One side effect: Debian's gcc omits `--as-needed` when any
//! `-fsanitize` is given, so the program may list libraries it does not
//! use.
//!
//! With either compiler, preprocessing (`-E`, `-M`, `-MM`), version and
//! `-print-*` queries and `-###` pass through untouched; the compiler's
//! diagnostics and exit status are the wrapper's.

use crate::error::{fail, Context, Result};
use crate::{Error, ErrorKind};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The coverage flags added when clang compiles.
pub const COVERAGE_FLAG: &str =
    "-fsanitize-coverage=func,inline-8bit-counters,trace-loads,trace-stores,trace-cmp";

/// The flags added when gcc compiles (and links: see the module's
/// documentation).
pub const GCC_COMPILE_FLAGS: [&str; 3] = [
    "-fsanitize=thread",
    "--param=tsan-instrument-func-entry-exit=0",
    "-U__SANITIZE_THREAD__",
];

/// Which compiler the wrapper runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// clang: SanitizerCoverage load/store callbacks.
    Clang,
    /// gcc: ThreadSanitizer callbacks, without libtsan.
    Gcc,
}

/// Which compiler driver to wrap.
#[derive(Clone, Copy)]
pub enum Lang {
    /// C (`clang`).
    C,
    /// C++ (`clang++`).
    Cxx,
}

/// What one compiler invocation does, as far as the wrapper cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Version, help or `-print-*` queries, `-###`: untouched.
    Query,
    /// Preprocess only (`-E`, `-M`, `-MM`): untouched.
    Preprocess,
    /// Compile without linking (`-c`, `-S`, `-fsyntax-only`).
    Compile,
    /// Compile (if sources are given) and link.
    Link,
}

/// Classify a compiler command line.
pub fn classify(args: &[String]) -> Mode {
    let mut mode = Mode::Link;
    let mut inputs = 0;
    let mut skip_next = false;
    for a in args {
        if skip_next {
            skip_next = false;
            continue;
        }
        match a.as_str() {
            "-v" if args.len() > 1 => {}
            "--version" | "-v" | "-dumpversion" | "-dumpmachine" | "--help" | "-###" => {
                return Mode::Query
            }
            "-E" | "-M" | "-MM" => mode = Mode::Preprocess,
            "-c" | "-S" | "-fsyntax-only" if mode != Mode::Preprocess => mode = Mode::Compile,
            // Options that take a separate value.
            "-o" | "-x" | "-MF" | "-MT" | "-MQ" | "-I" | "-D" | "-U" | "-include" | "-isystem"
            | "-idirafter" | "-iquote" | "-L" | "-l" | "-Xlinker" | "-Xpreprocessor"
            | "-Xassembler" | "-target" | "--target" | "-arch" | "-isysroot" | "--sysroot"
            | "-imacros" | "--param" | "-dumpbase" | "-dumpdir" | "-dumpbase-ext" => {
                skip_next = true
            }
            s if s.starts_with("-print-") || s.starts_with("--print-") => return Mode::Query,
            // A file, or "-" (source on stdin).
            s if !s.starts_with('-') || s == "-" => inputs += 1,
            _ => {}
        }
    }
    if inputs == 0 && mode == Mode::Link {
        // `pmlab cc -v` or a bare call: let clang answer.
        return Mode::Query;
    }
    mode
}

/// The compiler to run for `lang`: `PMLAB_CC`/`PMLAB_CXX`, else
/// `PMLAB_CLANG`/`PMLAB_CLANGXX`, else clang from PATH; with `gcc` (`pmlab
/// gcc`, `pmlab g++`): `PMLAB_GCC`/`PMLAB_GXX`, else gcc from PATH.
pub fn find_compiler(lang: Lang, gcc: bool) -> Result<PathBuf> {
    if gcc {
        let (var, name) = match lang {
            Lang::C => ("PMLAB_GCC", "gcc"),
            Lang::Cxx => ("PMLAB_GXX", "g++"),
        };
        let p = std::env::var_os(var)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(name), PathBuf::from);
        let Some(found) = which(&p) else {
            fail!(
            NotFound,
                "{} not found: install gcc (Debian: apt-get install gcc g++), or set {var} to a gcc",
                p.display()
            );
        };
        if family(&found)? != Family::Gcc {
            fail!(
            Invalid,
                "{} is not gcc (its name and --version say clang): use pmlab cc / pmlab c++ for clang, or set {var} to a gcc",
                found.display()
            );
        }
        return Ok(found);
    }
    let (any_var, clang_var, names): (&str, &str, &[&str]) = match lang {
        Lang::C => ("PMLAB_CC", "PMLAB_CLANG", &["clang-14", "clang"]),
        Lang::Cxx => ("PMLAB_CXX", "PMLAB_CLANGXX", &["clang++-14", "clang++"]),
    };
    for (var, what) in [(any_var, "gcc or clang"), (clang_var, "clang")] {
        let Some(v) = std::env::var_os(var).filter(|v| !v.is_empty()) else {
            continue;
        };
        let p = PathBuf::from(&v);
        if let Some(found) = which(&p) {
            return Ok(found);
        }
        fail!(
            Invalid,
            "{var}={} is not an executable compiler; point it at {what} or unset it",
            p.display()
        );
    }
    for n in names {
        if let Some(p) = which(Path::new(n)) {
            return Ok(p);
        }
    }
    fail!(
            NotFound,
        "{} not found on PATH: install clang (Debian: apt-get install clang-14), or set {clang_var}, or {any_var}=gcc",
        names.join(" or ")
    )
}

/// The family of a compiler's file name, if the name tells.
fn family_of_name(p: &Path) -> Option<Family> {
    let n = p.file_name()?.to_string_lossy();
    if n.contains("clang") {
        Some(Family::Clang)
    } else if n.contains("gcc") || n.contains("g++") {
        Some(Family::Gcc)
    } else {
        None
    }
}

/// Whether the compiler at `cc` is gcc or clang: by its name, the name of
/// the file it links to, else its `--version`.
pub fn family(cc: &Path) -> Result<Family> {
    if let Some(f) = family_of_name(cc) {
        return Ok(f);
    }
    if let Some(f) = cc.canonicalize().ok().as_deref().and_then(family_of_name) {
        return Ok(f);
    }
    let out = Command::new(cc)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", cc.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if text.contains("clang") {
        Ok(Family::Clang)
    } else if text.contains("Free Software Foundation") || text.contains("(GCC)") {
        Ok(Family::Gcc)
    } else {
        fail!(
            Failed,
            "cannot tell whether {} is gcc or clang (its --version names neither)",
            cc.display()
        )
    }
}

pub(crate) fn which(p: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let ok = |c: &Path| {
        c.metadata()
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
    };
    if p.components().count() > 1 {
        return ok(p).then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| ok(c))
}

/// The directory holding libpmlab.so: `PMLAB_LIB_DIR`, else the directory
/// of the running pmlab executable (cargo puts both there), else its
/// `../lib`.
pub fn runtime_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("PMLAB_LIB_DIR") {
        let d = PathBuf::from(d);
        if d.join("libpmlab.so").is_file() {
            return Ok(d);
        }
        fail!(
            NotFound,
            "PMLAB_LIB_DIR={} holds no libpmlab.so; build it (cargo build --release -p pmlab-runtime) or unset it",
            d.display()
        );
    }
    let exe = std::env::current_exe().context("cannot locate the pmlab executable")?;
    let exe = exe.canonicalize().unwrap_or(exe);
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    for d in [dir.clone(), dir.join("../lib")] {
        if d.join("libpmlab.so").is_file() {
            return Ok(d.canonicalize().unwrap_or(d));
        }
    }
    fail!(
            NotFound,
        "libpmlab.so not found next to {}: build it with 'cargo build --release -p pmlab-runtime' (or set PMLAB_LIB_DIR)",
        exe.display()
    )
}

/// The full command line for one wrapped compiler call: `lib_dir` is
/// where libpmlab.so is (linking calls), `specs` the specs file that keeps
/// gcc from linking libtsan (gcc's linking calls), `plugin` the sampling
/// plugin clang loads instead of sanitizer coverage (clang only; `None`:
/// every access hooked).
pub fn wrapped_args(
    family: Family,
    args: &[String],
    lib_dir: Option<&Path>,
    specs: Option<&Path>,
    plugin: Option<&Path>,
) -> Vec<String> {
    let mode = classify(args);
    let mut out: Vec<String> = args.to_vec();
    if matches!(mode, Mode::Query | Mode::Preprocess) {
        return out;
    }
    match family {
        Family::Clang => match plugin {
            Some(p) => out.push(format!("-fpass-plugin={}", p.display())),
            None => out.push(COVERAGE_FLAG.to_string()),
        },
        Family::Gcc => out.extend(GCC_COMPILE_FLAGS.iter().map(|f| f.to_string())),
    }
    if mode == Mode::Link {
        match family {
            // Without this clang links its UBSan runtime, which defines
            // weak coverage callbacks of its own.
            Family::Clang => out.push("-fno-sanitize-link-runtime".into()),
            Family::Gcc => {
                if let Some(s) = specs {
                    out.push(format!("-specs={}", s.display()));
                }
            }
        }
        if let Some(d) = lib_dir {
            let d = d.display();
            out.push(format!("-L{d}"));
            out.push(format!("-Wl,-rpath,{d}"));
            out.push("-Wl,--push-state,--no-as-needed".into());
            out.push("-lpmlab".into());
            out.push("-Wl,--pop-state".into());
        }
    }
    out
}

/// Remove every spec group that starts with `open` (`%{...:`, up to its
/// matching brace) from `spec`; None when a group is not closed.
fn strip_groups(spec: &str, open: &str) -> Option<String> {
    let mut out = String::with_capacity(spec.len());
    let mut rest = spec;
    while let Some(at) = rest.find(open) {
        out.push_str(&rest[..at]);
        let mut depth = 0usize;
        let mut end = None;
        for (i, c) in rest[at..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = Some(at + i + 1);
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &rest[end?..];
    }
    out.push_str(rest);
    Some(out)
}

/// A specs file that redefines gcc's `link_command`, taken from the output
/// of `gcc -dumpspecs`, without its ThreadSanitizer parts (the groups on
/// `%:sanitize(thread)`, or on `fsanitize=thread` in older gcc). None when
/// the dump has no `link_command`, or when something naming tsan remains.
pub fn gcc_link_specs(dump: &str) -> Option<String> {
    let start = dump.find("*link_command:\n")? + "*link_command:\n".len();
    let body = &dump[start..];
    let body = &body[..body.find("\n\n").unwrap_or(body.len())];
    let mut spec = body.to_string();
    for open in ["%{%:sanitize(thread):", "%{fsanitize=thread:"] {
        spec = strip_groups(&spec, open)?;
    }
    if spec.contains("tsan") || spec.contains("sanitize(thread)") {
        return None;
    }
    Some(format!("*link_command:\n{spec}\n\n"))
}

/// A temporary file, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    /// Create a new file in the temporary directory holding `text`.
    fn new(stem: &str, text: &str) -> Result<TempFile> {
        use std::io::Write;
        let dir = std::env::temp_dir();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        for i in 0..100u32 {
            let p = dir.join(format!("{stem}-{}-{nanos}-{i}.specs", std::process::id()));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&p)
            {
                Ok(mut f) => {
                    let file = TempFile(p);
                    f.write_all(text.as_bytes())
                        .with_context(|| format!("cannot write {}", file.0.display()))?;
                    return Ok(file);
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).with_context(|| format!("cannot create {}", p.display())),
            }
        }
        fail!(Io, "cannot create a temporary file in {}", dir.display())
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The specs file for one gcc link (see [`gcc_link_specs`]).
fn gcc_specs_file(cc: &Path) -> Result<TempFile> {
    let out = Command::new(cc)
        .arg("-dumpspecs")
        .output()
        .with_context(|| format!("cannot run {}", cc.display()))?;
    if !out.status.success() {
        fail!(Failed, "{} -dumpspecs failed", cc.display());
    }
    let specs = gcc_link_specs(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| {
        Error::new(
            ErrorKind::Failed,
            format!(
            "cannot keep {} from linking libtsan: its link_command spec (gcc -dumpspecs) has no ThreadSanitizer part pmlab recognises; use clang (unset PMLAB_CC)",
            cc.display()
        ),
        )
    })?;
    TempFile::new("pmlab-cc", &specs)
}

/// Run the compiler for `pmlab cc` / `pmlab c++` (`gcc` false) and `pmlab
/// gcc` / `pmlab g++` (`gcc` true) with the caller's arguments `rest`,
/// instrumenting and linking libpmlab as the module documentation says;
/// the compiler's exit status is returned.
pub fn compile(rest: &[String], lang: Lang, gcc: bool) -> Result<u8> {
    let cc = find_compiler(lang, gcc)?;
    let mode = classify(rest);
    if matches!(mode, Mode::Query | Mode::Preprocess) {
        return status_of(&cc, rest);
    }
    let family = family(&cc)?;
    let (lib, specs) = if mode == Mode::Link {
        let specs = match family {
            Family::Gcc => Some(gcc_specs_file(&cc)?),
            Family::Clang => None,
        };
        (Some(runtime_dir()?), specs)
    } else {
        (None, None)
    };
    let plugin = match family {
        Family::Clang => sampling_plugin(&cc)?,
        Family::Gcc => None,
    };
    let full = wrapped_args(
        family,
        rest,
        lib.as_deref(),
        specs.as_ref().map(|s| s.0.as_path()),
        plugin.as_deref(),
    );
    status_of(&cc, &full)
    // `specs` is removed here, after the compiler has returned.
}

/// The sampling plugin for clang at `cc`, unless `PMLAB_CC_MODE=full`;
/// `None` (with one warning line) where it cannot be used.
fn sampling_plugin(cc: &Path) -> Result<Option<PathBuf>> {
    if crate::plugin::mode_from_env()? == crate::plugin::CcMode::Full {
        return Ok(None);
    }
    let why = match crate::plugin::path() {
        Ok(p) if crate::plugin::clang_is_14(cc) => return Ok(Some(p)),
        Ok(_) => format!("{} is not clang 14, the plugin's LLVM", cc.display()),
        Err(e) => e.to_string(),
    };
    eprintln!(
        "pmlab cc: warning: sampling plugin unavailable ({why}); hooking every access (PMLAB_CC_MODE=full silences this)"
    );
    Ok(None)
}

/// Run `cc` with `args` and return its exit status.
fn status_of(cc: &Path, args: &[String]) -> Result<u8> {
    if std::env::var_os("PMLAB_CC_VERBOSE").is_some() {
        eprintln!("pmlab cc: {} {}", cc.display(), args.join(" "));
    }
    let status = Command::new(cc)
        .args(args)
        .status()
        .with_context(|| format!("cannot run {}", cc.display()))?;
    match status.code() {
        Some(c) => Ok(c.clamp(0, 255) as u8),
        None => fail!(Failed, "{} was killed by a signal", cc.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn classifies_compiler_modes() {
        assert_eq!(classify(&v("--version")), Mode::Query);
        assert_eq!(classify(&v("-v")), Mode::Query);
        assert_eq!(classify(&v("-print-file-name=libc.so")), Mode::Query);
        assert_eq!(classify(&v("-E a.c")), Mode::Preprocess);
        assert_eq!(classify(&v("-MM a.c")), Mode::Preprocess);
        assert_eq!(classify(&v("-c -o a.o a.c")), Mode::Compile);
        assert_eq!(classify(&v("-MD -MF a.d -c a.c")), Mode::Compile);
        assert_eq!(classify(&v("-S a.c")), Mode::Compile);
        assert_eq!(classify(&v("-O2 -o app a.o b.o -lm")), Mode::Link);
        assert_eq!(classify(&v("-O2 a.c")), Mode::Link);
        // `-o -c` would be a file called "-c"? no: -o takes its value.
        assert_eq!(classify(&v("-o out a.c")), Mode::Link);
        assert_eq!(classify(&v("-v -c a.c")), Mode::Compile);
        assert_eq!(classify(&v("-x c -c -")), Mode::Compile);
        assert_eq!(classify(&v("-x c - -o a")), Mode::Link);
        // gcc's options with a separate value.
        assert_eq!(
            classify(&v("--param max-inline-insns-auto=10 -dumpspecs")),
            Mode::Query
        );
        assert_eq!(classify(&v("-dumpdir d/ -o a a.c")), Mode::Link);
        assert_eq!(classify(&v("--help=params")), Mode::Query);
    }

    #[test]
    fn adds_instrumentation_and_runtime_only_where_needed() {
        let d = Path::new("/opt/pmlab");
        let link = wrapped_args(Family::Clang, &v("-o app a.c"), Some(d), None, None);
        assert!(link.contains(&COVERAGE_FLAG.to_string()));
        assert!(link.contains(&"-fno-sanitize-link-runtime".to_string()));
        assert!(link.contains(&"-lpmlab".to_string()));
        assert!(link.contains(&"-Wl,-rpath,/opt/pmlab".to_string()));
        let comp = wrapped_args(Family::Clang, &v("-c a.c"), Some(d), None, None);
        assert!(comp.contains(&COVERAGE_FLAG.to_string()));
        assert!(!comp.contains(&"-lpmlab".to_string()));
        for f in [Family::Clang, Family::Gcc] {
            assert_eq!(
                wrapped_args(f, &v("-E a.c"), Some(d), None, None),
                v("-E a.c")
            );
            assert_eq!(
                wrapped_args(f, &v("--version"), Some(d), None, None),
                v("--version")
            );
            assert_eq!(
                wrapped_args(f, &v("-print-file-name=libc.so"), Some(d), None, None),
                v("-print-file-name=libc.so")
            );
        }
    }

    #[test]
    fn the_sampling_plugin_replaces_coverage_for_clang_only() {
        let d = Path::new("/opt/pmlab");
        let p = Path::new("/c/pmlab-sample.so");
        for args in ["-O2 -c a.c", "-O2 -o app a.c"] {
            let out = wrapped_args(Family::Clang, &v(args), Some(d), None, Some(p));
            assert!(out.contains(&"-fpass-plugin=/c/pmlab-sample.so".to_string()));
            assert!(!out.contains(&COVERAGE_FLAG.to_string()));
        }
        let gcc = wrapped_args(Family::Gcc, &v("-c a.c"), Some(d), None, Some(p));
        assert!(!gcc.iter().any(|a| a.contains("pass-plugin")));
        assert_eq!(
            wrapped_args(Family::Clang, &v("-E a.c"), Some(d), None, Some(p)),
            v("-E a.c")
        );
    }

    #[test]
    fn gcc_compiles_with_tsan_callbacks_and_links_without_libtsan() {
        let d = Path::new("/opt/pmlab");
        let specs = Path::new("/tmp/x.specs");
        let tsan = GCC_COMPILE_FLAGS.map(String::from);
        // A compile step: the user's arguments first, then the flags; no
        // runtime, no specs.
        let comp = wrapped_args(
            Family::Gcc,
            &v("-O2 -MMD -c -o a.o a.c"),
            Some(d),
            None,
            None,
        );
        assert_eq!(comp[..6], v("-O2 -MMD -c -o a.o a.c")[..]);
        assert_eq!(comp[6..], tsan[..]);
        assert!(!comp.iter().any(|a| a.contains("coverage")));
        // A link step (objects only, or compile-and-link in one call): the
        // same flags, so that -flto and sources still get instrumented,
        // the specs file that drops libtsan, and libpmlab.
        for args in ["-O2 -o app a.o b.o -lm", "-O2 -o app a.c b.c", "-flto a.o"] {
            let user = v(args);
            let link = wrapped_args(Family::Gcc, &user, Some(d), Some(specs), None);
            assert_eq!(link[..user.len()], user[..]);
            let added = &link[user.len()..];
            assert_eq!(added[..3], tsan[..]);
            assert_eq!(added[3], "-specs=/tmp/x.specs");
            assert!(added.contains(&"-lpmlab".to_string()));
            assert!(added.contains(&"-Wl,-rpath,/opt/pmlab".to_string()));
            assert!(!added.contains(&"-fno-sanitize-link-runtime".to_string()));
        }
        // -S and -fsyntax-only compile.
        let s = wrapped_args(Family::Gcc, &v("-S a.c"), Some(d), None, None);
        assert_eq!(s[2..], tsan[..]);
        // Preprocessing, even of several files, is untouched.
        assert_eq!(
            wrapped_args(Family::Gcc, &v("-MM a.c b.c"), Some(d), Some(specs), None),
            v("-MM a.c b.c")
        );
    }

    #[test]
    fn link_specs_drop_the_tsan_groups_only() {
        let dump = "*asm:\n%{v}\n\n*link_command:\n%{!c:%(linker) %{%:sanitize(address):-lasan} \
%{%:sanitize(thread):%{!shared:libtsan_preinit%O%s} %{static-libtsan:-Bstatic -ltsan}%{!static-libtsan:-ltsan}} %o \
%{%:sanitize(thread): %{static-libtsan|static:%:include(libsanitizer.spec)%(link_libtsan)}}\n%(post_link) }\n\n*lib:\n-lc\n\n";
        let got = gcc_link_specs(dump).unwrap();
        assert_eq!(
            got,
            "*link_command:\n%{!c:%(linker) %{%:sanitize(address):-lasan}  %o \n%(post_link) }\n\n"
        );
        // Nothing to strip (or an unclosed group): refuse.
        assert!(gcc_link_specs("*link_command:\n%{!c:ld %{fsanitize=*:-ltsan}}\n\n").is_none());
        assert!(gcc_link_specs("*link_command:\n%{%:sanitize(thread):-ltsan\n\n").is_none());
        assert!(gcc_link_specs("*lib:\n-lc\n\n").is_none());
        // Older gcc's spelling.
        assert_eq!(
            gcc_link_specs("*link_command:\nld %{fsanitize=thread:-ltsan} %o\n\n").unwrap(),
            "*link_command:\nld  %o\n\n"
        );
    }

    #[test]
    fn compiler_family_from_its_name() {
        assert_eq!(family_of_name(Path::new("/usr/bin/gcc")), Some(Family::Gcc));
        assert_eq!(
            family_of_name(Path::new("x86_64-linux-gnu-g++-12")),
            Some(Family::Gcc)
        );
        assert_eq!(family_of_name(Path::new("clang-14")), Some(Family::Clang));
        assert_eq!(
            family_of_name(Path::new("/usr/lib/llvm-14/bin/clang++")),
            Some(Family::Clang)
        );
        assert_eq!(family_of_name(Path::new("/usr/bin/cc")), None);
    }
}
