// Give libpmlab.so a SONAME so that a program linked with -lpmlab and
// also run under LD_PRELOAD loads the runtime once.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpmlab.so");
}
