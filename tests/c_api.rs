//! Builds the C programs in `ffi/c/` against `libfairq.a` with strict warnings and runs them, so
//! `cargo test` fails when the C side fails (after wasmtime's `tests/wasm-c-examples.rs`).
//!
//! Needs a C compiler (`cc`, or `$CC`). The static library is the one cargo built for this test
//! run, found next to the test binary (`target/<profile>/deps/libfairq.a`).

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>`: the test binary lives in `target/<profile>/deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .to_path_buf()
}

/// A library cargo built for this run: `target/<profile>/deps/NAME`, which every build rewrites,
/// else the copy in `target/<profile>/` (refreshed by `cargo build` only, so it can be stale
/// after a `cargo test`, or from a build with other features).
fn built_library(name: &str) -> PathBuf {
    let dir = profile_dir();
    [dir.join("deps").join(name), dir.join(name)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} not built under {}", dir.display()))
}

fn compile(source: &str, name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = built_library("libfairq.a");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Wpedantic",
            "-Werror",
            "-g",
        ])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join(source))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {source}");
    out
}

fn run(program: &Path) -> String {
    let output = Command::new(program).output().expect("run C program");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} failed ({}):\n{stdout}\n{stderr}",
        program.display(),
        output.status
    );
    stdout
}

#[test]
fn c_test_suite_passes() {
    let program = compile("ffi/c/test_fairq.c", "test_fairq");
    let stdout = run(&program);
    print!("{stdout}");
    assert!(
        stdout.contains("c_api: 16 passed, 0 failed"),
        "unexpected summary:\n{stdout}"
    );
}

#[test]
fn quickstart_serves_three_to_one() {
    let program = compile("ffi/c/quickstart.c", "quickstart");
    let stdout = run(&program);
    let grants: Vec<&str> = stdout.lines().filter(|l| l.starts_with("grant ")).collect();
    assert_eq!(grants.len(), 8, "{stdout}");
    // Both tenants backlogged, weights 3:1: the first 8 grants are 6 acme and 2 globex.
    let acme = grants.iter().filter(|l| l.ends_with("of acme")).count();
    assert_eq!(acme, 6, "{stdout}");
    assert!(stdout.contains("acme 8, globex 8 grants"), "{stdout}");
    assert!(stdout.contains("enqueued 16, granted 16, completed 16, queued 0"));
    assert!(stdout.contains("rate_limit_fair_queue_depth 0"), "{stdout}");
    let source =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("ffi/c/quickstart.c"))
            .expect("quickstart source");
    assert!(
        source.lines().count() < 80,
        "quickstart.c must stay under 80 lines"
    );
}
