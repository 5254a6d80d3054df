//! The exported surface of libpmlab.so, checked against its one list,
//! `libpmlab.map`: the built library's dynamic symbols are exactly the
//! map's (so a new export not listed there, or one that got lost, fails
//! here; a listed symbol that nothing defines already fails the link), no
//! Rust symbol leaks, none carries a symbol version, every function of
//! `include/pmlab.h` is listed, and `no_mangle` appears in
//! `src/exports.rs` only.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The global names of the version script.
fn map_names() -> BTreeSet<String> {
    let text = std::fs::read_to_string(crate_dir().join("libpmlab.map")).unwrap();
    let mut names = BTreeSet::new();
    let mut global = false;
    for line in text.lines() {
        let line = line.split('#').next().unwrap().trim();
        match line {
            "global:" => global = true,
            "local:" => global = false,
            _ if global && line.ends_with(';') => {
                let name = line.trim_end_matches(';').trim();
                assert!(
                    name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                    "libpmlab.map lists '{name}': plain symbol names only"
                );
                assert!(names.insert(name.to_string()), "'{name}' is listed twice");
            }
            _ => {}
        }
    }
    names
}

/// libpmlab.so as built with this test (cargo builds the library's cdylib
/// with it, into the profile's directory).
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [
        deps.parent().unwrap().join("libpmlab.so"),
        deps.join("libpmlab.so"),
    ];
    candidates
        .iter()
        .filter(|p| p.is_file())
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .cloned()
        .unwrap_or_else(|| panic!("libpmlab.so not found next to {}", deps.display()))
}

/// The defined dynamic symbols of `lib`, as `nm -D --defined-only` names
/// them (with `@VERSION` when a symbol carries one).
fn dynamic_symbols(lib: &Path) -> Vec<(String, String)> {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("run nm (binutils)");
    assert!(o.status.success(), "nm failed on {}", lib.display());
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3).then(|| (f[1].to_string(), f[2].to_string()))
        })
        .collect()
}

#[test]
fn the_library_exports_exactly_the_map() {
    let map = map_names();
    assert!(map.len() > 150, "parsed only {} names", map.len());
    let syms = dynamic_symbols(&library());
    for (kind, name) in &syms {
        assert!(
            !name.contains('@'),
            "{name} carries a symbol version: interposers must not (keep libpmlab.map's tag anonymous)"
        );
        assert!(
            !name.starts_with("_ZN") && !name.starts_with("_R"),
            "a Rust symbol leaks: {name}"
        );
        assert_eq!(kind, "T", "{name} is exported but is not a function");
    }
    let exported: BTreeSet<String> = syms.into_iter().map(|(_, n)| n).collect();
    let unlisted: Vec<&String> = exported.difference(&map).collect();
    assert!(
        unlisted.is_empty(),
        "exported but not in libpmlab.map (add them there): {unlisted:?}"
    );
    let lost: Vec<&String> = map.difference(&exported).collect();
    assert!(
        lost.is_empty(),
        "in libpmlab.map but not exported: {lost:?}"
    );
}

#[test]
fn every_function_of_the_header_is_in_the_map() {
    let header = std::fs::read_to_string(crate_dir().join("../../include/pmlab.h")).unwrap();
    let map = map_names();
    let api: Vec<String> = header
        .lines()
        .filter(|l| {
            l.trim_end().ends_with(");")
                && !l.starts_with(' ')
                && !l.starts_with('#')
                && !l.starts_with('*')
        })
        .filter_map(|l| {
            let name = l
                .split('(')
                .next()?
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .rfind(|s| !s.is_empty())?;
            Some(name.to_string())
        })
        .collect();
    assert!(api.len() >= 20, "parsed {api:?}");
    for f in &api {
        assert!(
            map.contains(f),
            "{f} is declared in pmlab.h but not in libpmlab.map"
        );
    }
}

#[test]
fn only_the_exports_module_exports() {
    let src = crate_dir().join("src");
    let mut stack = vec![src.clone()];
    let mut found = Vec::new();
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                if text.contains("no_mangle") || text.contains("export_name") {
                    found.push(p.strip_prefix(&src).unwrap().display().to_string());
                }
            }
        }
    }
    assert_eq!(
        found,
        ["exports.rs"],
        "exported symbols are declared in src/exports.rs only"
    );
}
