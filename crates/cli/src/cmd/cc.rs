//! `pmlab cc` / `pmlab c++`: a drop-in for CC/CXX that builds programs
//! whose every load and store calls into libpmlab (the `instrumented`
//! counter source).
//!
//! The wrapper runs clang (`PMLAB_CLANG`/`PMLAB_CLANGXX`, else `clang-14`,
//! else `clang`) with the caller's arguments plus
//! `-fsanitize-coverage=func,inline-8bit-counters,trace-loads,trace-stores`
//! when it compiles, and, when it links, libpmlab.so (found next to the
//! pmlab executable) with an rpath, so the program runs normally (no delay)
//! outside `pmlab run` (and `-fno-sanitize-link-runtime`, so that clang does
//! not link a sanitizer runtime of its own). Preprocessing (`-E`, `-M`, `-MM`), version and
//! `-print-*` queries and `-###` pass through untouched.
//!
//! clang needs a coverage mode for `trace-loads`/`trace-stores`; `func`
//! with inline 8-bit counters is the cheapest one (one byte increment per
//! function entry).

use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The coverage flags added when compiling.
pub const COVERAGE_FLAG: &str =
    "-fsanitize-coverage=func,inline-8bit-counters,trace-loads,trace-stores";

/// Which compiler driver to wrap.
#[derive(Clone, Copy)]
pub enum Lang {
    /// C (`clang`).
    C,
    /// C++ (`clang++`).
    Cxx,
}

/// Arguments of `pmlab cc`: passed to the compiler untouched.
#[derive(clap::Args)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct Args {
    /// Compiler arguments (as for clang).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    rest: Vec<OsString>,
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
            | "-imacros" => skip_next = true,
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

/// The compiler to run for `lang`.
pub fn find_compiler(lang: Lang) -> Result<PathBuf> {
    let (var, names): (&str, &[&str]) = match lang {
        Lang::C => ("PMLAB_CLANG", &["clang-14", "clang"]),
        Lang::Cxx => ("PMLAB_CLANGXX", &["clang++-14", "clang++"]),
    };
    if let Some(v) = std::env::var_os(var) {
        let p = PathBuf::from(&v);
        if let Some(found) = which(&p) {
            return Ok(found);
        }
        bail!(
            "{var}={} is not an executable compiler; point it at clang or unset it",
            p.display()
        );
    }
    for n in names {
        if let Some(p) = which(Path::new(n)) {
            return Ok(p);
        }
    }
    bail!(
        "{} not found on PATH: install clang (Debian: apt-get install clang-14) or set {var}",
        names.join(" or ")
    )
}

fn which(p: &Path) -> Option<PathBuf> {
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
        bail!(
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
    bail!(
        "libpmlab.so not found next to {}: build it with 'cargo build --release -p pmlab-runtime' (or set PMLAB_LIB_DIR)",
        exe.display()
    )
}

/// The full command line for one wrapped compiler call.
pub fn wrapped_args(args: &[String], lib_dir: Option<&Path>) -> Vec<String> {
    let mode = classify(args);
    let mut out: Vec<String> = args.to_vec();
    match mode {
        Mode::Query | Mode::Preprocess => {}
        Mode::Compile => out.push(COVERAGE_FLAG.to_string()),
        Mode::Link => {
            out.push(COVERAGE_FLAG.to_string());
            // Without this clang links its UBSan runtime, which defines
            // weak coverage callbacks of its own.
            out.push("-fno-sanitize-link-runtime".into());
            if let Some(d) = lib_dir {
                let d = d.display();
                out.push(format!("-L{d}"));
                out.push(format!("-Wl,-rpath,{d}"));
                out.push("-Wl,--push-state,--no-as-needed".into());
                out.push("-lpmlab".into());
                out.push("-Wl,--pop-state".into());
            }
        }
    }
    out
}

/// Run the command: exec the compiler (its exit status becomes ours).
pub fn run(args: Args, lang: Lang) -> Result<u8> {
    let rest: Vec<String> = args
        .rest
        .into_iter()
        .map(|a| {
            a.into_string()
                .map_err(|a| anyhow::anyhow!("argument {a:?} is not valid UTF-8"))
        })
        .collect::<Result<_>>()?;
    let cc = find_compiler(lang)?;
    let lib = if classify(&rest) == Mode::Link {
        Some(runtime_dir()?)
    } else {
        None
    };
    let full = wrapped_args(&rest, lib.as_deref());
    if std::env::var_os("PMLAB_CC_VERBOSE").is_some() {
        eprintln!("pmlab cc: {} {}", cc.display(), full.join(" "));
    }
    let status = Command::new(&cc)
        .args(&full)
        .status()
        .with_context(|| format!("cannot run {}", cc.display()))?;
    match status.code() {
        Some(c) => Ok(c.clamp(0, 255) as u8),
        None => bail!("{} was killed by a signal", cc.display()),
    }
}

/// True when the program at `path` was built by `pmlab cc` (so the
/// `instrumented` counter source can drive it): it is an ELF file whose
/// dynamic symbol table imports the SanitizerCoverage load/store hooks.
/// Used by `pmlab run --source auto`.
pub fn is_instrumented(path: &Path) -> Result<bool> {
    let data = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    Ok(elf_imports_hooks(&data))
}

fn rd<const N: usize>(d: &[u8], off: usize) -> Option<[u8; N]> {
    d.get(off..off.checked_add(N)?)?.try_into().ok()
}

fn u16_at(d: &[u8], off: usize) -> Option<usize> {
    rd::<2>(d, off).map(|b| u16::from_le_bytes(b) as usize)
}

fn u32_at(d: &[u8], off: usize) -> Option<usize> {
    rd::<4>(d, off).map(|b| u32::from_le_bytes(b) as usize)
}

fn u64_at(d: &[u8], off: usize) -> Option<usize> {
    rd::<8>(d, off).map(|b| u64::from_le_bytes(b) as usize)
}

/// Scan a 64-bit little-endian ELF's `.dynsym` for undefined
/// `__sanitizer_cov_load*`/`__sanitizer_cov_store*` symbols.
fn elf_imports_hooks(d: &[u8]) -> bool {
    fn scan(d: &[u8]) -> Option<bool> {
        if d.get(0..4)? != b"\x7fELF" || *d.get(4)? != 2 || *d.get(5)? != 1 {
            return Some(false);
        }
        let shoff = u64_at(d, 0x28)?;
        let shentsize = u16_at(d, 0x3a)?;
        let shnum = u16_at(d, 0x3c)?;
        let sh = |i: usize| shoff.checked_add(i.checked_mul(shentsize)?);
        for i in 0..shnum {
            let h = sh(i)?;
            // SHT_DYNSYM = 11
            if u32_at(d, h + 4)? != 11 {
                continue;
            }
            let off = u64_at(d, h + 0x18)?;
            let size = u64_at(d, h + 0x20)?;
            let link = u32_at(d, h + 0x28)?;
            let entsize = u64_at(d, h + 0x38)?.max(24);
            let sh_str = sh(link)?;
            let str_off = u64_at(d, sh_str + 0x18)?;
            let str_size = u64_at(d, sh_str + 0x20)?;
            let strtab = d.get(str_off..str_off.checked_add(str_size)?)?;
            for s in (off..off.checked_add(size)?).step_by(entsize) {
                let name = u32_at(d, s)?;
                let shndx = u16_at(d, s + 6)?;
                let rest = strtab.get(name..)?;
                let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
                let n = &rest[..end];
                if shndx == 0
                    && (n.starts_with(b"__sanitizer_cov_load")
                        || n.starts_with(b"__sanitizer_cov_store"))
                {
                    return Some(true);
                }
            }
        }
        Some(false)
    }
    scan(d).unwrap_or(false)
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
    }

    #[test]
    fn adds_instrumentation_and_runtime_only_where_needed() {
        let d = Path::new("/opt/pmlab");
        let link = wrapped_args(&v("-o app a.c"), Some(d));
        assert!(link.contains(&COVERAGE_FLAG.to_string()));
        assert!(link.contains(&"-lpmlab".to_string()));
        assert!(link.contains(&"-Wl,-rpath,/opt/pmlab".to_string()));
        let comp = wrapped_args(&v("-c a.c"), Some(d));
        assert!(comp.contains(&COVERAGE_FLAG.to_string()));
        assert!(!comp.contains(&"-lpmlab".to_string()));
        assert_eq!(wrapped_args(&v("-E a.c"), Some(d)), v("-E a.c"));
        assert_eq!(wrapped_args(&v("--version"), Some(d)), v("--version"));
    }

    #[test]
    fn non_elf_files_are_not_instrumented() {
        assert!(!elf_imports_hooks(b"#!/bin/sh\necho hi\n"));
        assert!(!elf_imports_hooks(b"\x7fELF"));
        assert!(!elf_imports_hooks(&[]));
    }
}
