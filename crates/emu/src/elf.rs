//! What `pmlab` reads from a program's ELF file before it runs it: the
//! dynamic symbols (does it import the instrumentation hooks of `pmlab
//! cc`, does it define ThreadSanitizer's runtime?) and the libraries it
//! needs.
//!
//! Only the ELF header, the section header table and the `.dynsym` and
//! `.dynamic` sections with their string tables are read, each at its
//! offset: a program of gigabytes (debug information, a large text) costs
//! a few small reads, not its size in memory. Anything that is not a
//! 64-bit little-endian ELF, and any file whose headers point outside it,
//! reads as having no dynamic symbols and needing nothing.

use crate::error::{Context, Result};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Symbol prefixes of the load/store hooks: clang's, then gcc's.
const HOOK_PREFIXES: [&[u8]; 6] = [
    b"__sanitizer_cov_load",
    b"__sanitizer_cov_store",
    b"__tsan_read",
    b"__tsan_write",
    b"__tsan_unaligned_",
    b"__tsan_volatile_",
];

/// `sh_type` of `.dynamic`.
const SHT_DYNAMIC: usize = 6;
/// `sh_type` of `.dynsym`.
const SHT_DYNSYM: usize = 11;
/// Larger tables than this are taken for a malformed file (a `.dynsym`
/// of 64 MiB would hold 2.8 million symbols).
const MAX_PART: u64 = 64 << 20;

/// True when the program at `path` was built by `pmlab cc` (so the
/// `instrumented` counter source can drive it): it is an ELF file whose
/// dynamic symbol table imports the SanitizerCoverage load/store hooks
/// (clang) or the ThreadSanitizer read/write hooks (gcc). Used by
/// `pmlab run --source auto`.
pub fn is_instrumented(path: &Path) -> Result<bool> {
    Ok(Elf::open(path)?.imports_hooks())
}

/// True when the program at `path` carries ThreadSanitizer's own runtime:
/// it needs `libtsan` (gcc's `-fsanitize=thread`) or defines `__tsan_init`
/// itself (clang links the runtime statically). libpmlab, preloaded, would
/// then fight that runtime over the `__tsan_*` callbacks and the thread
/// and signal functions both interpose. Programs built by `pmlab gcc`
/// import the callbacks and need neither.
pub fn uses_tsan_runtime(path: &Path) -> Result<bool> {
    Ok(Elf::open(path)?.uses_tsan_runtime())
}

/// True when the program at `path` imports (leaves undefined) a dynamic
/// symbol whose name starts with `prefix`: for example `pmalloc`, pmlab's
/// PM API.
pub fn imports_symbol(path: &Path, prefix: &str) -> Result<bool> {
    Ok(Elf::open(path)?
        .dynamic_symbols()
        .iter()
        .any(|(n, defined)| !defined && n.starts_with(prefix.as_bytes())))
}

/// True when the program at `path` needs (`DT_NEEDED`) a library whose
/// name starts with `prefix` (`libpmem.so`).
pub fn needs_library(path: &Path, prefix: &str) -> Result<bool> {
    Ok(Elf::open(path)?
        .needed()
        .iter()
        .any(|l| l.starts_with(prefix.as_bytes())))
}

/// The parts of an ELF file read so far, each with its file offset.
struct Elf {
    parts: Vec<(u64, Vec<u8>)>,
}

/// One section of interest, with the string table it links to.
struct Section<'a> {
    /// `sh_type` ([`SHT_DYNSYM`] or [`SHT_DYNAMIC`]).
    kind: usize,
    /// The section's bytes.
    data: &'a [u8],
    /// `sh_entsize`.
    entsize: usize,
    /// The linked string table's bytes.
    strtab: &'a [u8],
}

/// A section header's fields that matter here.
struct Header {
    kind: usize,
    offset: u64,
    size: u64,
    link: usize,
    entsize: usize,
}

impl Elf {
    /// Read the headers of the file at `path` and the sections of
    /// interest. Fails only when the file cannot be opened or read.
    fn open(path: &Path) -> Result<Elf> {
        let what = || format!("cannot read {}", path.display());
        let mut f = File::open(path).with_context(what)?;
        let len = f.metadata().with_context(what)?.len();
        let mut elf = Elf { parts: Vec::new() };
        let Some(header) = read_at(&mut f, len, 0, 64).with_context(what)? else {
            return Ok(elf);
        };
        let table = table_of(&header).map(|(off, n, size)| (off, n * size));
        elf.parts.push((0, header));
        let Some((shoff, bytes)) = table else {
            return Ok(elf);
        };
        let Some(table) = read_at(&mut f, len, shoff, bytes).with_context(what)? else {
            return Ok(elf);
        };
        elf.parts.push((shoff, table));
        let headers = elf.headers();
        for h in headers
            .iter()
            .filter(|h| h.kind == SHT_DYNSYM || h.kind == SHT_DYNAMIC)
        {
            let Some(strtab) = headers.get(h.link) else {
                continue;
            };
            for (off, size) in [(h.offset, h.size), (strtab.offset, strtab.size)] {
                if elf.get(off, size).is_none() {
                    if let Some(bytes) = read_at(&mut f, len, off, size).with_context(what)? {
                        elf.parts.push((off, bytes));
                    }
                }
            }
        }
        Ok(elf)
    }

    /// A whole file's bytes, already in memory.
    #[cfg(test)]
    fn from_bytes(d: &[u8]) -> Elf {
        Elf {
            parts: vec![(0, d.to_vec())],
        }
    }

    /// `len` bytes at file offset `off`, when one part holds them.
    fn get(&self, off: u64, len: u64) -> Option<&[u8]> {
        let end = off.checked_add(len)?;
        self.parts.iter().find_map(|(at, bytes)| {
            let (from, to) = (off.checked_sub(*at)?, end.checked_sub(*at)?);
            bytes.get(usize::try_from(from).ok()?..usize::try_from(to).ok()?)
        })
    }

    /// The section headers (empty when the file is not a 64-bit
    /// little-endian ELF or its table was not read).
    fn headers(&self) -> Vec<Header> {
        let Some((shoff, n, size)) = self.get(0, 64).and_then(table_of) else {
            return Vec::new();
        };
        let Some(table) = self.get(shoff, n * size) else {
            return Vec::new();
        };
        let size = size as usize;
        let parse = |h: &[u8]| {
            Some(Header {
                kind: u32_at(h, 4)?,
                offset: u64_at(h, 0x18)? as u64,
                size: u64_at(h, 0x20)? as u64,
                link: u32_at(h, 0x28)?,
                entsize: u64_at(h, 0x38)?,
            })
        };
        table.chunks_exact(size).map_while(parse).collect()
    }

    /// The sections of interest with their string tables.
    fn sections(&self) -> Vec<Section<'_>> {
        let headers = self.headers();
        headers
            .iter()
            .filter(|h| h.kind == SHT_DYNSYM || h.kind == SHT_DYNAMIC)
            .filter_map(|h| {
                let s = headers.get(h.link)?;
                Some(Section {
                    kind: h.kind,
                    data: self.get(h.offset, h.size)?,
                    entsize: h.entsize,
                    strtab: self.get(s.offset, s.size)?,
                })
            })
            .collect()
    }

    /// The `.dynsym` symbols: (name, defined).
    fn dynamic_symbols(&self) -> Vec<(&[u8], bool)> {
        let mut out = Vec::new();
        for sec in self.sections().into_iter().filter(|s| s.kind == SHT_DYNSYM) {
            for e in sec.data.chunks_exact(sec.entsize.max(24)) {
                let (Some(name), Some(shndx)) = (u32_at(e, 0), u16_at(e, 6)) else {
                    continue;
                };
                out.push((c_str(sec.strtab, name), shndx != 0));
            }
        }
        out
    }

    /// The `DT_NEEDED` library names of `.dynamic`.
    fn needed(&self) -> Vec<&[u8]> {
        let mut out = Vec::new();
        for sec in self
            .sections()
            .into_iter()
            .filter(|s| s.kind == SHT_DYNAMIC)
        {
            for e in sec.data.chunks_exact(16) {
                match (u64_at(e, 0), u64_at(e, 8)) {
                    (Some(0), _) | (None, _) => break, // DT_NULL
                    (Some(1), Some(at)) => out.push(c_str(sec.strtab, at)),
                    _ => {}
                }
            }
        }
        out
    }

    /// Whether a symbol named by one of [`HOOK_PREFIXES`] is imported
    /// (left undefined).
    fn imports_hooks(&self) -> bool {
        self.dynamic_symbols()
            .iter()
            .any(|(n, defined)| !defined && HOOK_PREFIXES.iter().any(|p| n.starts_with(p)))
    }

    /// See [`uses_tsan_runtime`].
    fn uses_tsan_runtime(&self) -> bool {
        self.needed().iter().any(|l| l.starts_with(b"libtsan"))
            || self
                .dynamic_symbols()
                .iter()
                .any(|&(n, defined)| defined && n == b"__tsan_init")
    }
}

/// From a 64-byte ELF header: the section header table's offset, entry
/// count and entry size, for a 64-bit little-endian ELF.
fn table_of(h: &[u8]) -> Option<(u64, u64, u64)> {
    if h.get(0..4)? != b"\x7fELF" || *h.get(4)? != 2 || *h.get(5)? != 1 {
        return None;
    }
    let size = u16_at(h, 0x3a)? as u64;
    (size >= 64).then_some((u64_at(h, 0x28)? as u64, u16_at(h, 0x3c)? as u64, size))
}

/// `len` bytes at `off` of a file of `file_len` bytes; `None` when they
/// lie outside the file or are implausibly many (a malformed header).
fn read_at(f: &mut File, file_len: u64, off: u64, len: u64) -> std::io::Result<Option<Vec<u8>>> {
    let fits = off.checked_add(len).is_some_and(|end| end <= file_len);
    if !fits || len > MAX_PART {
        return Ok(None);
    }
    let mut v = vec![0; len as usize];
    f.seek(SeekFrom::Start(off))?;
    f.read_exact(&mut v)?;
    Ok(Some(v))
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

/// The NUL-terminated string at `at` of a string table (empty if out of
/// range).
fn c_str(strtab: &[u8], at: usize) -> &[u8] {
    let rest = strtab.get(at..).unwrap_or_default();
    &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A scratch directory removed on drop.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new(name: &str) -> Dir {
            let d = std::env::temp_dir().join(format!("pmlab-elf-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&d).unwrap();
            Dir(d)
        }

        /// Build `src` with `cc` and `flags`; `None` when the compiler is
        /// missing or fails (the check is then skipped).
        fn build(
            &self,
            cc: &str,
            flags: &[&str],
            src: &str,
            out: &str,
        ) -> Option<std::path::PathBuf> {
            let c = self.0.join(format!("{out}.c"));
            std::fs::write(&c, src).unwrap();
            let exe = self.0.join(out);
            Command::new(cc)
                .args(flags)
                .arg("-o")
                .arg(&exe)
                .arg(&c)
                .status()
                .is_ok_and(|s| s.success())
                .then_some(exe)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const MAIN: &str = "int main(void) { return 0; }\n";
    /// A function with a load and a store, for the hooks.
    const LOADS: &str = "int f(int *p) { p[1] = p[0] + 1; return p[1]; }\n";

    #[test]
    fn tsan_runtime_is_told_from_pmlab_gcc_builds() {
        // Real binaries where the tools exist; nothing to check otherwise.
        let d = Dir::new("tsan");
        if let Some(exe) = d.build("gcc", &["-fsanitize=thread"], MAIN, "gcc_tsan") {
            assert!(uses_tsan_runtime(&exe).unwrap(), "gcc: needs libtsan");
        }
        if let Some(exe) = d.build("clang-14", &["-fsanitize=thread"], MAIN, "clang_tsan") {
            assert!(
                uses_tsan_runtime(&exe).unwrap(),
                "clang: defines __tsan_init"
            );
        }
        if let Some(exe) = d.build("gcc", &[], MAIN, "plain") {
            assert!(!uses_tsan_runtime(&exe).unwrap());
            assert!(!is_instrumented(&exe).unwrap());
            // It needs the C library and imports nothing of pmlab's.
            assert!(needs_library(&exe, "libc.so").unwrap());
            assert!(!needs_library(&exe, "libpmem").unwrap());
            assert!(!imports_symbol(&exe, "pmalloc").unwrap());
        }
        // Not ELF, or cut short: no.
        assert!(!Elf::from_bytes(b"#!/bin/sh\n").uses_tsan_runtime());
        assert!(!Elf::from_bytes(b"\x7fELF\x02\x01").uses_tsan_runtime());
    }

    #[test]
    fn non_elf_files_are_not_instrumented() {
        assert!(!Elf::from_bytes(b"#!/bin/sh\necho hi\n").imports_hooks());
        assert!(!Elf::from_bytes(b"\x7fELF").imports_hooks());
        assert!(!Elf::from_bytes(&[]).imports_hooks());
        let d = Dir::new("nonelf");
        for (name, bytes) in [
            ("empty", &b""[..]),
            ("script", b"#!/bin/sh\n"),
            ("elf", b"\x7fELF\x02\x01\x01"),
        ] {
            let p = d.0.join(name);
            std::fs::write(&p, bytes).unwrap();
            assert!(!is_instrumented(&p).unwrap(), "{name}");
            assert!(!uses_tsan_runtime(&p).unwrap(), "{name}");
        }
        assert!(is_instrumented(&d.0.join("missing")).is_err());
    }

    #[test]
    fn hooks_are_found_reading_only_the_headers_and_dynamic_tables() {
        let d = Dir::new("hooks");
        // A shared object may leave the hooks undefined (a program built
        // by pmlab cc gets them from libpmlab).
        let flags = [
            "-shared",
            "-fPIC",
            "-fsanitize-coverage=func,inline-8bit-counters,trace-loads,trace-stores",
        ];
        let Some(so) = d.build("clang-14", &flags, LOADS, "hooked.so") else {
            eprintln!("skipped: clang-14 cannot build the object");
            return;
        };
        assert!(is_instrumented(&so).unwrap());
        // The same object followed by a gigabyte (sparse: no disk used):
        // still found, and what was read stays small.
        let big = d.0.join("big.so");
        std::fs::copy(&so, &big).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&big).unwrap();
        f.set_len(f.metadata().unwrap().len() + (1 << 30)).unwrap();
        let elf = Elf::open(&big).unwrap();
        assert!(elf.imports_hooks());
        let read: usize = elf.parts.iter().map(|(_, b)| b.len()).sum();
        assert!(read < 64 << 10, "read {read} bytes");
        if let Some(plain) = d.build("clang-14", &["-shared", "-fPIC"], LOADS, "plain.so") {
            assert!(!is_instrumented(&plain).unwrap());
        }
    }

    #[test]
    fn headers_pointing_outside_the_file_read_as_nothing() {
        let d = Dir::new("cut");
        let Some(exe) = d.build("gcc", &[], MAIN, "plain") else {
            return;
        };
        // Cut the file before its section header table.
        let bytes = std::fs::read(&exe).unwrap();
        let cut = d.0.join("cut");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let elf = Elf::open(&cut).unwrap();
        assert!(elf.headers().is_empty());
        assert!(!elf.imports_hooks() && !elf.uses_tsan_runtime());
    }
}
