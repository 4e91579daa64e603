//! Builds the C programs in `ffi/c/` against `libfairq.a` with strict warnings and runs them, so
//! `cargo test` fails when the C side fails (after wasmtime's `tests/wasm-c-examples.rs`).
//!
//! Needs a C compiler (`cc`, or `$CC`). The static library is the one cargo built for this test
//! run, found next to the test binary (`target/<profile>/deps/libfairq.a`).

mod common;

use std::path::Path;
use std::process::Command;

use common::c_build::compile;

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
    let program = compile("ffi/c/test_fairq.c", "test_fairq", &[]);
    let stdout = run(&program);
    print!("{stdout}");
    assert!(
        stdout.contains("c_api: 17 passed, 0 failed"),
        "unexpected summary:\n{stdout}"
    );
}

#[test]
fn quickstart_serves_three_to_one() {
    let program = compile("ffi/c/quickstart.c", "quickstart", &[]);
    let stdout = run(&program);
    // Both tenants backlogged, weights 3:1: the first 8 grants are 6 acme and 2 globex.
    assert!(
        stdout.contains("first 8 grants, both waiting: acme 6, globex 2 (weights 3:1)")
            && stdout.contains("all granted: acme 8, globex 8"),
        "{stdout}"
    );
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
