//! Tenant keys leave the process (fleet mode's Redis fields, the metrics' `tenant` label), so
//! `TenantKey::from_raw` is a specified function: XXH3-64, seed 0, over the raw bytes, 0 mapped
//! to 1. These tests pin its vectors (the same ones `docs/fleet.md`, `include/fairq.h` and the C,
//! Python and Go tests state) and check that a build with other target features (here
//! `-C target-cpu=native`, which turns on the SIMD paths of the hash) gives the same keys.

mod common;

use std::path::Path;
use std::process::Command;

use common::c_build::{built_library, compile_with};
use fairq::TenantKey;

/// `"0123456789abcdef"` × 64.
fn kib() -> Vec<u8> {
    b"0123456789abcdef".repeat(64)
}

/// (name, raw bytes, key): also `xxhsum -H3` of the same bytes (Debian package `xxhash`).
fn vectors() -> Vec<(&'static str, Vec<u8>, u64)> {
    vec![
        ("empty", Vec::new(), 0x2d06_8005_38d3_94c2),
        ("acme", b"acme".to_vec(), 0x44ad_9865_5d88_58e1),
        ("1KiB", kib(), 0x540f_fccb_f24e_a528),
        (
            "non-ascii",
            "naïve-租户".as_bytes().to_vec(),
            0xd812_6496_01f8_83b6,
        ),
    ]
}

#[test]
fn tenant_keys_are_xxh3_64_with_seed_0() {
    for (name, raw, key) in vectors() {
        assert_eq!(TenantKey::from_raw(&raw).get(), key, "{name}");
    }
    assert_eq!("naïve-租户".len(), 13);
    // 0 marks an unused slot: a hash of 0 becomes 1.
    assert_eq!(TenantKey::from_hash(0).get(), 1);
}

/// The C program's output for the vectors it checks, from a program built against `lib`.
fn c_vectors(lib: &Path, name: &str) -> String {
    let program = compile_with("ffi/c/key_vectors.c", name, &[], lib);
    let out = Command::new(&program).output().expect("run key_vectors");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{name}:\n{stdout}");
    assert!(
        stdout.contains("key_vectors: 4 passed, 0 failed"),
        "{name}:\n{stdout}"
    );
    stdout
}

/// The C library of this test run, and one built with `RUSTFLAGS="-C target-cpu=native"` in a
/// target directory of its own, give the same keys: the specified ones. (The first build of the
/// second library takes about a minute; later runs reuse it.)
#[test]
fn the_c_library_gives_the_vectors_built_for_the_default_target_and_for_this_cpu() {
    let default = c_vectors(&built_library("libfairq.a"), "key_vectors_default");

    let native_cfg = Command::new("rustc")
        .args(["--print", "cfg", "-C", "target-cpu=native"])
        .output()
        .expect("rustc --print cfg");
    let base_cfg = Command::new("rustc")
        .args(["--print", "cfg"])
        .output()
        .expect("rustc --print cfg");
    let features = |out: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .filter_map(|l| l.strip_prefix("target_feature="))
            .map(|f| f.trim_matches('"').to_string())
            .collect()
    };
    let (native, base) = (features(&native_cfg.stdout), features(&base_cfg.stdout));
    let extra: Vec<&String> = native.iter().filter(|f| !base.contains(f)).collect();
    println!("target features that -C target-cpu=native adds here: {extra:?}");

    let target_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("key-native");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "-p", "fairq", "--lib", "--target-dir"])
        .arg(&target_dir)
        .env("RUSTFLAGS", "-C target-cpu=native")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .status()
        .expect("cargo build");
    assert!(status.success(), "the native build failed");
    let native_lib = target_dir.join("debug").join("libfairq.a");
    let native_out = c_vectors(&native_lib, "key_vectors_native");
    assert_eq!(default, native_out);
}
