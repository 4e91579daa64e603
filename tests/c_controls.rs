//! The controls from C (`ffi/c/test_controls.c`), and the compatibility promise of the ABI
//! policy: programs compiled against the 0.1.0 header (`ffi/c/compat/fairq-0.1.0.h`) run
//! unchanged against this library, statically linked and as a shared library.
//!
//! Needs a C compiler (`cc`, or `$CC`); the libraries are the ones cargo built for this run.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::c_build::{built_library, compile, compile_with_include};

/// Runs `program` with `env` added and without `LD_LIBRARY_PATH` (cargo points it at
/// `target/<profile>/`, whose `libfairq.so` may be older than this run's), so a shared program
/// loads the library its rpath names.
fn run(program: &Path, env: &[(&str, &str)]) -> String {
    let output = Command::new(program)
        .envs(env.iter().copied())
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run C program");
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

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn c_controls_suite_passes() {
    let program = compile("ffi/c/test_controls.c", "test_controls", &[]);
    let stdout = run(&program, &[]);
    print!("{stdout}");
    assert!(
        stdout.contains("c_controls: 11 passed, 0 failed"),
        "unexpected summary:\n{stdout}"
    );
}

/// A directory holding the 0.1.0 header under the name programs include, `fairq.h`.
fn old_include_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fairq-0.1.0-include");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(
        root().join("ffi/c/compat/fairq-0.1.0.h"),
        dir.join("fairq.h"),
    )
    .expect("ffi/c/compat/fairq-0.1.0.h");
    dir
}

#[test]
fn the_old_header_declares_a_subset_of_the_new_one() {
    // Every line of the 0.1.0 header that declares something (a define, a field, a function
    // parameter line) is still in the current header: nothing was renamed, renumbered or
    // retyped. Comments and the header text may change.
    let old = std::fs::read_to_string(root().join("ffi/c/compat/fairq-0.1.0.h")).unwrap();
    let new = std::fs::read_to_string(root().join("include/fairq.h")).unwrap();
    let declarations = |text: &str| -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('*'))
            .filter(|l| !l.starts_with("/*") && !l.starts_with("#define FAIRQ_VERSION"))
            .map(str::to_string)
            .collect()
    };
    let current: std::collections::HashSet<String> = declarations(&new).into_iter().collect();
    let missing: Vec<String> = declarations(&old)
        .into_iter()
        .filter(|l| !current.contains(l))
        .collect();
    assert!(
        missing.is_empty(),
        "0.1.0 declarations missing from include/fairq.h: {missing:#?}"
    );
}

#[test]
fn quickstart_built_against_the_0_1_0_header_runs_against_the_shared_library() {
    let include = old_include_dir();
    let shared = built_library("libfairq.so");
    let program = compile_with_include(
        "ffi/c/quickstart.c",
        "quickstart-0.1.0-shared",
        &[],
        &include,
        &shared,
    );
    let ldd = Command::new("ldd")
        .arg(&program)
        .env_remove("LD_LIBRARY_PATH")
        .output();
    if let Ok(ldd) = ldd {
        let text = String::from_utf8_lossy(&ldd.stdout);
        assert!(
            text.contains(&shared.display().to_string()),
            "the program does not load {}:\n{text}",
            shared.display()
        );
    }
    let stdout = run(&program, &[]);
    assert!(
        stdout.contains("first 8 grants, both waiting: acme 6, globex 2 (weights 3:1)")
            && stdout.contains("all granted: acme 8, globex 8"),
        "{stdout}"
    );
    assert!(
        stdout.contains("enqueued 16, granted 16, completed 16, queued 0"),
        "{stdout}"
    );
}

/// The frozen 0.1.0 suite, as released.
const SUITE_0_1_0: &str = "ffi/c/compat/test_fairq-0.1.0.c";

/// Its length and FNV-1a 64 hash as released: the file is never edited.
const SUITE_0_1_0_RELEASED: (usize, u64) = (35887, 0xeaae7c99784ffe3d);

/// Deliberate changes of behaviour since 0.1.0 (CHANGELOG.md, "Changed"), each as what the 0.1.0
/// suite asserted and what holds now. A copy of the frozen suite with these replaced is what
/// runs; `changes_since_0_1_0_behave_as_the_changelog_says` checks the new behaviour itself.
const CHANGES_SINCE_0_1_0: &[(&str, &str)] = &[
    (
        // The version is 0.2.0: a library at least as new as the header, in the same major, is
        // what a program checks for (the header's ABI policy), not the exact string.
        "    assert(strcmp(fairq_version(), expected) == 0);\n",
        "    int major = -1, minor = -1;\n    assert(sscanf(fairq_version(), \"%d.%d\", &major, &minor) == 2);\n    assert(major == FAIRQ_VERSION_MAJOR && minor >= FAIRQ_VERSION_MINOR);\n    assert(strcmp(fairq_version(), expected) != 0);\n",
    ),
    (
    // Weight classes are freed once nothing refers to them: with max_weight_classes 3, a = 2 and
    // b = 3 set, the table {a: 3, b: 7} (default 1) needs only 1, 3 and 7, as 2 is then freed.
    "    fairq_weight_entry too_many[] = {{a, 3}, {b, 7}};\n    assert(fairq_replace_weights(e, too_many, 2, 1) == FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES);\n",
    "    fairq_weight_entry too_many[] = {{a, 3}, {b, 7}, {d, 9}};\n    assert(fairq_replace_weights(e, too_many, 3, 1) == FAIRQ_ERR_TOO_MANY_WEIGHT_CLASSES);\n",
    ),
];

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[test]
fn the_0_1_0_suite_is_kept_as_released() {
    let text = std::fs::read(root().join(SUITE_0_1_0)).unwrap();
    assert_eq!(
        (text.len(), fnv1a(&text)),
        SUITE_0_1_0_RELEASED,
        "{SUITE_0_1_0} was edited: keep it as released, and list a change of behaviour in \
         CHANGES_SINCE_0_1_0 and CHANGELOG.md instead"
    );
}

/// The frozen suite with the listed changes applied, written where the build puts its files.
fn suite_0_1_0_as_run(name: &str) -> String {
    let mut text = std::fs::read_to_string(root().join(SUITE_0_1_0)).unwrap();
    for (then, now) in CHANGES_SINCE_0_1_0 {
        assert_eq!(
            text.matches(then).count(),
            1,
            "a listed change must match the frozen suite exactly once: {then}"
        );
        text = text.replace(then, now);
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.c"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn run_suite_0_1_0(library: &str, name: &str) {
    let include = old_include_dir();
    let program = compile_with_include(
        &suite_0_1_0_as_run(name),
        name,
        &[],
        &include,
        &built_library(library),
    );
    // The suite's multi-thread stress part is the same code as today's; a short run suffices.
    let stdout = run(&program, &[("FAIRQ_STRESS_ITERS", "20000")]);
    assert!(
        stdout.contains("c_api: 16 passed, 0 failed"),
        "unexpected summary:\n{stdout}"
    );
}

#[test]
fn the_0_1_0_test_suite_built_against_its_header_passes_against_this_library() {
    run_suite_0_1_0("libfairq.a", "test_fairq-0.1.0");
}

#[test]
fn the_0_1_0_test_suite_passes_against_the_shared_library() {
    run_suite_0_1_0("libfairq.so", "test_fairq-0.1.0-shared");
}

/// What the 0.1.0 suite asserted and no longer holds, checked as it holds now.
#[test]
fn changes_since_0_1_0_behave_as_the_changelog_says() {
    use fairq::{Config, Engine, TenantKey};
    let engine = Engine::new(Config {
        enabled: true,
        max_weight_classes: 3,
        ..Config::default()
    })
    .unwrap();
    let (a, b) = (TenantKey::from_raw(b"a"), TenantKey::from_raw(b"b"));
    engine.set_weight_key(a, 2).unwrap();
    engine.set_weight_key(b, 3).unwrap();
    // 0.1.0 refused this (the class of 2 was never freed); now 2 is freed by the replacement.
    engine
        .replace_weight_keys(&[(a.get(), 3), (b.get(), 7)], 1)
        .unwrap();
    assert_eq!((engine.weight_of(a), engine.weight_of(b)), (3, 7));
}

#[test]
fn c_layouts_of_the_new_structs_match_rust() {
    use fairq::ffi::{
        fairq_fairness, fairq_indicators, fairq_pool_shedding, fairq_pool_stats, fairq_tick_report,
    };
    use std::mem::{offset_of, size_of};
    let probe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("controls-layout.c");
    std::fs::write(
        &probe,
        r#"#include <stddef.h>
#include <stdio.h>
#include "fairq.h"
#define S(t) printf(#t " %zu\n", sizeof(t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(t, f))
int main(void) {
    S(fairq_pool_stats); O(fairq_pool_stats, blocks); O(fairq_pool_stats, max_in_flight);
    S(fairq_fairness); O(fairq_fairness, refusal_rate_min);
    O(fairq_fairness, starvation_longest_max_s);
    S(fairq_indicators); O(fairq_indicators, fair_share_ratio); O(fairq_indicators, ready);
    S(fairq_tick_report); O(fairq_tick_report, weights_lowered);
    S(fairq_pool_shedding); O(fairq_pool_shedding, limit); O(fairq_pool_shedding, shedding);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = probe.with_extension("bin");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(&probe)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(status.success());
    let got = run(&exe, &[]);
    let expected = [
        ("fairq_pool_stats", size_of::<fairq_pool_stats>()),
        (
            "fairq_pool_stats.blocks",
            offset_of!(fairq_pool_stats, blocks),
        ),
        (
            "fairq_pool_stats.max_in_flight",
            offset_of!(fairq_pool_stats, max_in_flight),
        ),
        ("fairq_fairness", size_of::<fairq_fairness>()),
        (
            "fairq_fairness.refusal_rate_min",
            offset_of!(fairq_fairness, refusal_rate_min),
        ),
        (
            "fairq_fairness.starvation_longest_max_s",
            offset_of!(fairq_fairness, starvation_longest_max_s),
        ),
        ("fairq_indicators", size_of::<fairq_indicators>()),
        (
            "fairq_indicators.fair_share_ratio",
            offset_of!(fairq_indicators, fair_share_ratio),
        ),
        (
            "fairq_indicators.ready",
            offset_of!(fairq_indicators, ready),
        ),
        ("fairq_tick_report", size_of::<fairq_tick_report>()),
        (
            "fairq_tick_report.weights_lowered",
            offset_of!(fairq_tick_report, weights_lowered),
        ),
        ("fairq_pool_shedding", size_of::<fairq_pool_shedding>()),
        (
            "fairq_pool_shedding.limit",
            offset_of!(fairq_pool_shedding, limit),
        ),
        (
            "fairq_pool_shedding.shedding",
            offset_of!(fairq_pool_shedding, shedding),
        ),
    ];
    let want: String = expected.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
    assert_eq!(got, want);
}
