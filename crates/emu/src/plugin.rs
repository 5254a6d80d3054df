//! `pmlab cc`'s sampling plugin: an LLVM 14 pass plugin
//! (`crates/emu/plugin/sample.cpp`, built by this crate's build script
//! when llvm-14-dev is installed and embedded in pmlab) that gives each
//! function a clean and an instrumented copy and switches between them at
//! function entries and loop back-edges, as libpmlab's sampling switch
//! says (`source::instrumented::sample` in the runtime).
//!
//! At run time the embedded library is written once to the cache
//! directory (`$XDG_CACHE_HOME/pmlab`, else `~/.cache/pmlab`), under a name
//! that carries a hash of its bytes, and clang loads it from there with
//! `-fpass-plugin=FILE`. `PMLAB_CC_MODE=full` builds as before, with
//! sanitizer coverage on every access; `PMLAB_CC_PLUGIN=FILE` names a
//! plugin file to use instead of the embedded one.

use crate::error::{fail, Context, Result};
use std::path::{Path, PathBuf};

/// How `pmlab cc` / `pmlab c++` instrument with clang.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CcMode {
    /// Two copies per function, the instrumented one run in sampled
    /// windows (the default when the plugin is available).
    Sample,
    /// Every access hooked (`-fsanitize-coverage`), as before the plugin.
    Full,
}

/// `PMLAB_CC_MODE`: `sample` (default) or `full`.
pub fn mode_from_env() -> Result<CcMode> {
    match std::env::var("PMLAB_CC_MODE").ok().as_deref().map(str::trim) {
        None | Some("") | Some("sample") => Ok(CcMode::Sample),
        Some("full") => Ok(CcMode::Full),
        Some(other) => fail!(
            Invalid,
            "PMLAB_CC_MODE='{other}' is not one of sample, full (full hooks every access, sample runs the hooks in sampled windows)"
        ),
    }
}

/// The embedded plugin, when this build of pmlab has one.
#[cfg(not(pmlab_no_plugin))]
pub const EMBEDDED: Option<&[u8]> =
    Some(include_bytes!(concat!(env!("OUT_DIR"), "/pmlab-sample.so")));
/// The embedded plugin, when this build of pmlab has one.
#[cfg(pmlab_no_plugin)]
pub const EMBEDDED: Option<&[u8]> = None;

/// FNV-1a of `b`, to name the cached copy.
fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// The directory of pmlab's cache.
fn cache_dir() -> Result<PathBuf> {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(d).join("pmlab"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(h) => Ok(PathBuf::from(h).join(".cache/pmlab")),
        None => fail!(
            NotFound,
            "neither XDG_CACHE_HOME nor HOME is set: no place for the sampling plugin"
        ),
    }
}

/// Write `bytes` to `dir` under a name that carries their hash, unless
/// that file is already there; returns its path.
pub fn install(bytes: &[u8], dir: &Path) -> Result<PathBuf> {
    let path = dir.join(format!("pmlab-sample-{:016x}.so", fnv(bytes)));
    if path.metadata().is_ok_and(|m| m.len() == bytes.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Written under a temporary name, then renamed: a parallel build never
    // loads a half-written file.
    let tmp = dir.join(format!(".pmlab-sample-{}.tmp", std::process::id()));
    std::fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot create {}", path.display()))?;
    Ok(path)
}

/// The plugin file to load: `PMLAB_CC_PLUGIN`, else the embedded plugin
/// written to the cache. An error says why there is none.
pub fn path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("PMLAB_CC_PLUGIN").filter(|v| !v.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        fail!(NotFound, "PMLAB_CC_PLUGIN={} is not a file", p.display());
    }
    let Some(bytes) = EMBEDDED else {
        fail!(
            NotFound,
            "this pmlab was built without LLVM 14 (install llvm-14-dev and rebuild)"
        );
    };
    install(bytes, &cache_dir()?)
}

/// Whether the clang at `cc` is LLVM 14's (the plugin's ABI): by its
/// name or the file it links to (`clang-14`, `.../llvm-14/...`), else by
/// its `--version`.
pub fn clang_is_14(cc: &Path) -> bool {
    let named = |p: &Path| {
        let s = p.to_string_lossy();
        s.contains("llvm-14/")
            || p.file_name()
                .is_some_and(|n| n.to_string_lossy().ends_with("-14"))
    };
    if named(cc) || cc.canonicalize().is_ok_and(|c| named(&c)) {
        return true;
    }
    std::process::Command::new(cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("clang version 14."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cached_copy_is_named_by_its_bytes_and_reused() {
        let dir = std::env::temp_dir().join(format!("pmlab-plugin-test-{}", std::process::id()));
        let a = install(b"one", &dir).unwrap();
        let b = install(b"two", &dir).unwrap();
        assert_ne!(a, b);
        assert_eq!(std::fs::read(&a).unwrap(), b"one");
        assert_eq!(install(b"one", &dir).unwrap(), a);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn clang_14_is_told_by_name() {
        assert!(clang_is_14(Path::new("/usr/bin/clang-14")));
        assert!(clang_is_14(Path::new("/usr/lib/llvm-14/bin/clang++")));
    }
}
