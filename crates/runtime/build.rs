// Link options of libpmlab.so:
// * a SONAME, so that a program linked with -lpmlab and also run under
//   LD_PRELOAD loads the runtime once;
// * the version script libpmlab.map: exactly the symbols of
//   src/exports.rs are global, everything else local (tests/exports.rs
//   checks the result).
fn main() {
    let map = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("libpmlab.map");
    println!("cargo:rerun-if-changed=libpmlab.map");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmlab.so");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        map.display()
    );
}
