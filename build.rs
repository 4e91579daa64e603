//! Build script: generates the C header `include/fairq.h` from `src/ffi/` with cbindgen.
//!
//! The header is committed. It is rewritten only when its content changes, so builds do not
//! touch it needlessly, and CI regenerates it and fails on any difference (`git diff
//! --exit-code include/fairq.h`). cbindgen is pinned exactly in `Cargo.toml`.
//!
//! A cbindgen failure (most often a syntax error in the crate, which rustc will report better)
//! is a warning, unless `FAIRQ_REQUIRE_HEADER` is set (CI sets it): then it fails the build.

use std::env;
use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    println!("cargo:rerun-if-changed=src/ffi");
    println!("cargo:rerun-if-env-changed=FAIRQ_REQUIRE_HEADER");

    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let strict = env::var_os("FAIRQ_REQUIRE_HEADER").is_some();
    let fail = |what: String| {
        if strict {
            panic!("{what}");
        }
        println!("cargo:warning={what}");
    };

    let mut config = match cbindgen::Config::from_file(root.join("cbindgen.toml")) {
        Ok(config) => config,
        Err(e) => return fail(format!("cbindgen.toml: {e}")),
    };
    let version = |part: &str| env::var(format!("CARGO_PKG_VERSION_{part}")).expect("set by cargo");
    config.after_includes = Some(format!(
        "\n#define FAIRQ_VERSION_MAJOR {}\n#define FAIRQ_VERSION_MINOR {}\n#define FAIRQ_VERSION_PATCH {}\n",
        version("MAJOR"),
        version("MINOR"),
        version("PATCH"),
    ));

    // Parse only the FFI module (it follows its `mod` declarations): the rest of the crate has
    // public Rust constants that must not leak into the C header.
    match cbindgen::Builder::new()
        .with_config(config)
        .with_src(root.join("src/ffi/mod.rs"))
        .generate()
    {
        Ok(bindings) => {
            let mut text = Vec::new();
            bindings.write(&mut text);
            let text = parenthesise_negative_defines(&String::from_utf8_lossy(&text));
            let path = root.join("include/fairq.h");
            // Rewrite only on change, so an unchanged header keeps its mtime.
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                if let Err(e) = std::fs::write(&path, text) {
                    fail(format!("cannot write {}: {e}", path.display()));
                }
            }
        }
        Err(e) => fail(format!("cbindgen could not generate include/fairq.h: {e}")),
    }
}

/// `#define FAIRQ_ERR_NULL -1` becomes `#define FAIRQ_ERR_NULL (-1)`, so `x-FAIRQ_ERR_NULL`
/// expands safely. (cbindgen drops the parentheses written in Rust.)
fn parenthesise_negative_defines(header: &str) -> String {
    let mut out = String::with_capacity(header.len() + 64);
    for line in header.split_inclusive('\n') {
        let body = line.trim_end_matches('\n');
        let mut parts = body.splitn(3, ' ');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("#define"), Some(name), Some(value))
                if value.starts_with('-') && value[1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                out.push_str(&format!("#define {name} ({value})"));
                out.push_str(&line[body.len()..]);
            }
            _ => out.push_str(line),
        }
    }
    out
}
