//! Builds the anchor engine's C shim against libpmemobj when its header is
//! installed; otherwise the engine is compiled out (selecting it then fails
//! in one line). `PMKV_NO_ANCHOR=1` compiles it out on purpose.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rustc-check-cfg=cfg(pmkv_anchor)");
    println!("cargo:rerun-if-changed=csrc/anchor.c");
    println!("cargo:rerun-if-env-changed=PMKV_NO_ANCHOR");
    println!("cargo:rerun-if-env-changed=CC");
    if std::env::var("PMKV_NO_ANCHOR").is_ok_and(|v| v == "1") {
        return;
    }
    let header = [
        "/usr/include/libpmemobj.h",
        "/usr/local/include/libpmemobj.h",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    // Installing the header later (make test after make demo on a fresh
    // machine) must rebuild with the engine: watch the header, or while it
    // is missing the directories it would appear in.
    for dir in ["/usr/include", "/usr/local/include"] {
        let h = format!("{dir}/libpmemobj.h");
        if Path::new(&h).exists() {
            println!("cargo:rerun-if-changed={h}");
        } else if Path::new(dir).exists() {
            println!("cargo:rerun-if-changed={dir}");
        }
    }
    if !header {
        println!("cargo:warning=libpmemobj.h not found: the anchor engine is compiled out (apt-get install libpmemobj-dev)");
        return;
    }
    let out = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let obj = format!("{out}/anchor.o");
    let lib = format!("{out}/libpmkvanchor.a");
    let ok = Command::new(&cc)
        .args(["-O2", "-fPIC", "-Wall", "-c", "csrc/anchor.c", "-o", &obj])
        .status()
        .is_ok_and(|s| s.success())
        && Command::new("ar")
            .args(["crs", &lib, &obj])
            .status()
            .is_ok_and(|s| s.success());
    if !ok {
        println!("cargo:warning=compiling csrc/anchor.c failed: the anchor engine is compiled out");
        return;
    }
    println!("cargo:rustc-link-search=native={out}");
    println!("cargo:rustc-link-lib=static=pmkvanchor");
    println!("cargo:rustc-link-lib=pmemobj");
    println!("cargo:rustc-cfg=pmkv_anchor");
}
