//! Build script. The C header generation (cbindgen) lands with the C ABI.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
}
