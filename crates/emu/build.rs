// Builds pmlab cc's sampling plugin (plugin/sample.cpp, an LLVM 14 pass
// plugin) with clang++-14 when llvm-config-14 is installed (Debian:
// llvm-14-dev), into OUT_DIR/pmlab-sample.so, which src/cc/plugin.rs embeds.
// Without LLVM 14 the plugin is left out (cfg `pmlab_no_plugin`) and
// `pmlab cc` instruments every access as before, saying so once.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("plugin/sample.cpp");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=PMLAB_LLVM_CONFIG");
    println!("cargo:rustc-check-cfg=cfg(pmlab_no_plugin)");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("pmlab-sample.so");
    let why = match build(&src, &out) {
        Ok(()) => return,
        Err(why) => why,
    };
    println!("cargo:warning=pmlab cc's sampling plugin not built ({why}); pmlab cc will instrument every access");
    println!("cargo:rustc-cfg=pmlab_no_plugin");
}

fn build(src: &std::path::Path, out: &std::path::Path) -> Result<(), String> {
    let llvm_config =
        std::env::var("PMLAB_LLVM_CONFIG").unwrap_or_else(|_| "llvm-config-14".into());
    let flags = Command::new(&llvm_config)
        .arg("--cxxflags")
        .output()
        .map_err(|e| format!("{llvm_config}: {e}; install llvm-14-dev"))?;
    if !flags.status.success() {
        return Err(format!("{llvm_config} --cxxflags failed"));
    }
    let bindir = Command::new(&llvm_config)
        .arg("--bindir")
        .output()
        .map_err(|e| format!("{llvm_config}: {e}"))?;
    let bindir = String::from_utf8_lossy(&bindir.stdout).trim().to_string();
    let cxx = [format!("{bindir}/clang++"), "clang++-14".to_string()]
        .into_iter()
        .find(|c| {
            Command::new(c)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or("no clang++ of LLVM 14 found")?;
    let mut cmd = Command::new(&cxx);
    cmd.args(String::from_utf8_lossy(&flags.stdout).split_whitespace())
        .args([
            "-std=c++17",
            "-fno-rtti",
            "-O2",
            "-shared",
            "-fPIC",
            "-w",
            "-o",
        ])
        .arg(out)
        .arg(src);
    let status = cmd.output().map_err(|e| format!("{cxx}: {e}"))?;
    if !status.status.success() {
        let err = String::from_utf8_lossy(&status.stderr);
        return Err(format!(
            "{cxx} failed: {}",
            err.lines().next().unwrap_or("")
        ));
    }
    Ok(())
}
