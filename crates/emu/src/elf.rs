//! What `pmlab` reads from a program's ELF file before it runs it: the
//! dynamic symbols (does it import the instrumentation hooks of `pmlab
//! cc`, does it define ThreadSanitizer's runtime?) and the libraries it
//! needs.
//!
//! The file is read with the `object` crate through its `ReadCache`, which
//! reads each range the parser asks for (the ELF header, the section
//! header table, `.dynsym`, `.dynamic` and the names they point to) at its
//! offset: a program of gigabytes (debug information, a large text) costs
//! a few small reads, not its size in memory (crates/emu/README.md gives
//! the measured cost). Anything that is not a 64-bit ELF, and any file
//! whose headers point outside it, reads as having no dynamic symbols and
//! needing nothing.

use crate::error::{Context, Result};
use object::elf::{FileHeader64, DT_NEEDED, DT_NULL, SHT_DYNSYM};
use object::read::elf::{Dyn, FileHeader, SectionHeader, SectionTable, Sym};
use object::read::StringTable;
use object::{Endianness, ReadCache, ReadRef, SectionIndex};
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
        .symbols
        .iter()
        .any(|(n, defined)| !defined && n.starts_with(prefix.as_bytes())))
}

/// True when the program at `path` needs (`DT_NEEDED`) a library whose
/// name starts with `prefix` (`libpmem.so`).
pub fn needs_library(path: &Path, prefix: &str) -> Result<bool> {
    Ok(Elf::open(path)?
        .needed
        .iter()
        .any(|l| l.starts_with(prefix.as_bytes())))
}

/// A file that counts the bytes read from it.
struct Counted {
    file: File,
    read: u64,
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read(buf)?;
        self.read += n as u64;
        Ok(n)
    }
}

impl Seek for Counted {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

/// What was read of an ELF file.
struct Elf {
    /// The `.dynsym` symbols: (name, defined).
    symbols: Vec<(Vec<u8>, bool)>,
    /// The `DT_NEEDED` library names of `.dynamic`.
    needed: Vec<Vec<u8>>,
    /// Bytes read from the file.
    #[cfg_attr(not(test), allow(dead_code))]
    bytes_read: u64,
}

impl Elf {
    /// Read the dynamic symbols and needed libraries of the file at
    /// `path`. Fails only when the file cannot be opened.
    fn open(path: &Path) -> Result<Elf> {
        let file = File::open(path).with_context(|| format!("cannot read {}", path.display()))?;
        let cache = ReadCache::new(Counted { file, read: 0 });
        let (symbols, needed) = (dynamic_symbols(&cache), needed(&cache));
        Ok(Elf {
            symbols,
            needed,
            bytes_read: cache.into_inner().read,
        })
    }

    /// A whole file's bytes, already in memory.
    #[cfg(test)]
    fn from_bytes(d: &[u8]) -> Elf {
        Elf {
            symbols: dynamic_symbols(d),
            needed: needed(d),
            bytes_read: d.len() as u64,
        }
    }

    /// Whether a symbol named by one of [`HOOK_PREFIXES`] is imported
    /// (left undefined).
    fn imports_hooks(&self) -> bool {
        self.symbols
            .iter()
            .any(|(n, defined)| !defined && HOOK_PREFIXES.iter().any(|p| n.starts_with(p)))
    }

    /// See [`uses_tsan_runtime`].
    fn uses_tsan_runtime(&self) -> bool {
        self.needed.iter().any(|l| l.starts_with(b"libtsan"))
            || self
                .symbols
                .iter()
                .any(|(n, defined)| *defined && n == b"__tsan_init")
    }
}

/// The `.dynsym` symbols of `data`: (name, defined); empty when it is not
/// a 64-bit ELF or its tables do not fit in it.
fn dynamic_symbols<'a, R: ReadRef<'a>>(data: R) -> Vec<(Vec<u8>, bool)> {
    let read = || -> object::read::Result<Vec<(Vec<u8>, bool)>> {
        let header = FileHeader64::<Endianness>::parse(data)?;
        let endian = header.endian()?;
        let sections = header.sections(endian, data)?;
        let table = sections.symbols(endian, data, SHT_DYNSYM)?;
        let strings = whole_strings(&sections, endian, data, table.string_section())?;
        Ok(table
            .symbols()
            .iter()
            .map(|s| {
                let name = s.name(endian, strings).unwrap_or_default();
                (name.to_vec(), !s.is_undefined(endian))
            })
            .collect())
    };
    read().unwrap_or_default()
}

/// The string table at section `index`, read in one piece: `object`
/// reads a table it is given as a range name by name, at least 256 bytes
/// each, which for a program with thousands of symbols costs 7 times the
/// bytes and 60 times the time of one read of the table
/// (crates/emu/README.md).
fn whole_strings<'a, R: ReadRef<'a>>(
    sections: &SectionTable<'a, FileHeader64<Endianness>, R>,
    endian: Endianness,
    data: R,
    index: SectionIndex,
) -> object::read::Result<StringTable<'a>> {
    if index == SectionIndex(0) {
        return Ok(StringTable::default());
    }
    let bytes = sections.section(index)?.data(endian, data)?;
    Ok(StringTable::new(bytes, 0, bytes.len() as u64))
}

/// The `DT_NEEDED` names of `data`'s `.dynamic` (empty as above).
fn needed<'a, R: ReadRef<'a>>(data: R) -> Vec<Vec<u8>> {
    let read = || -> object::read::Result<Vec<Vec<u8>>> {
        let header = FileHeader64::<Endianness>::parse(data)?;
        let endian = header.endian()?;
        let sections = header.sections(endian, data)?;
        let Some((entries, link)) = sections.dynamic(endian, data)? else {
            return Ok(Vec::new());
        };
        let strings = whole_strings(&sections, endian, data, link)?;
        let mut out = Vec::new();
        for e in entries {
            match e.tag32(endian) {
                Some(DT_NULL) => break,
                Some(DT_NEEDED) => {
                    let at = u32::try_from(e.d_val(endian)).unwrap_or(u32::MAX);
                    if let Ok(name) = strings.get(at) {
                        out.push(name.to_vec());
                    }
                }
                _ => {}
            }
        }
        Ok(out)
    };
    read().unwrap_or_default()
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
        let read = elf.bytes_read;
        assert!(read < 64 << 10, "read {read} bytes");
        eprintln!("read {read} bytes of a 1 GiB object");
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
        assert!(elf.symbols.is_empty() && elf.needed.is_empty());
        assert!(!elf.imports_hooks() && !elf.uses_tsan_runtime());
        // The whole file reads both.
        let elf = Elf::open(&exe).unwrap();
        assert!(!elf.symbols.is_empty() && !elf.needed.is_empty());
    }
}
