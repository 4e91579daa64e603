//! The shared library exports exactly the functions the header declares, the header's version
//! macros match `Cargo.toml` and `fairq_version()`, and the C compiler sees the same struct
//! layouts as Rust.

use std::collections::BTreeSet;
use std::ffi::CStr;
use std::mem::{offset_of, size_of};
mod common;

use std::path::Path;
use std::process::Command;

use common::c_build::built_library;
use fairq::ffi::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn header() -> String {
    std::fs::read_to_string(root().join("include/fairq.h")).expect("include/fairq.h")
}

/// The guard around the declarations of cargo feature `fleet` (cbindgen.toml `[defines]`).
const FLEET_GUARD: &str = "#if defined(FAIRQ_FLEET)";

/// Function names declared in the header: identifiers `fairq_*` followed by `(` outside comments.
/// Returns (always declared, declared only inside `#if defined(FAIRQ_FLEET)`).
fn declared_functions(header: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let mut names = BTreeSet::new();
    let mut fleet = BTreeSet::new();
    let mut in_fleet = false;
    for line in header.lines() {
        let code = line.trim_start();
        if code == FLEET_GUARD {
            assert!(!in_fleet, "nested {FLEET_GUARD}");
            in_fleet = true;
            continue;
        }
        if code.starts_with('#') {
            // cbindgen writes one flat `#if ... #endif` per gated item: the next directive ends
            // it. Other directives (the include guard, `__cplusplus`) declare no function.
            if in_fleet {
                assert!(
                    code.starts_with("#endif"),
                    "unexpected `{code}` in {FLEET_GUARD}"
                );
                in_fleet = false;
            }
            continue;
        }
        if code.starts_with("//") || code.starts_with('*') || code.starts_with("/*") {
            continue;
        }
        let mut rest = code;
        while let Some(start) = rest.find("fairq_") {
            let tail = &rest[start..];
            let end = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(tail.len());
            if tail[end..].starts_with('(') {
                let set = if in_fleet { &mut fleet } else { &mut names };
                set.insert(tail[..end].to_string());
            }
            rest = &tail[end..];
        }
    }
    assert!(!in_fleet, "unterminated {FLEET_GUARD}");
    (names, fleet)
}

#[test]
fn shared_library_exports_exactly_the_header_functions() {
    let (declared, fleet) = declared_functions(&header());
    assert!(
        declared.len() >= 20,
        "parsed too few functions: {declared:?}"
    );
    for fixed in [
        "fairq_version",
        "fairq_config_default",
        "fairq_engine_new",
        "fairq_engine_free",
        "fairq_tenant_key",
        "fairq_set_weight",
        "fairq_enqueue",
        "fairq_next_grant",
        "fairq_complete",
        "fairq_cancel",
        "fairq_get_stats",
        "fairq_metrics_prometheus",
        "fairq_status_str",
        "fairq_reason_str",
        "fairq_queue_status",
        "fairq_queue_status_at",
        "fairq_queue_status_text",
        "fairq_queue_status_text_at",
    ] {
        assert!(declared.contains(fixed), "header lacks {fixed}");
    }
    for name in [
        "fairq_fleet_config_default",
        "fairq_fleet_new",
        "fairq_fleet_free",
        "fairq_fleet_sync",
        "fairq_fleet_sync_at",
        "fairq_fleet_start",
        "fairq_fleet_stop",
        "fairq_fleet_get_status",
    ] {
        assert!(
            fleet.contains(name),
            "header lacks {name} under {FLEET_GUARD}"
        );
    }
    assert!(
        fleet.iter().all(|n| n.starts_with("fairq_fleet_")),
        "{fleet:?}"
    );

    let so = built_library("libfairq.so");
    let output = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .expect("run nm (binutils)");
    assert!(output.status.success(), "nm failed on {}", so.display());
    let text = String::from_utf8_lossy(&output.stdout);
    let exported: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(str::to_string)
        .collect();
    let not_fairq: Vec<&String> = exported
        .iter()
        .filter(|s| !s.starts_with("fairq_"))
        .collect();
    assert!(not_fairq.is_empty(), "unexpected exports: {not_fairq:?}");
    // The FAIRQ_FLEET block is exported exactly when the library has feature `fleet`.
    let fleet_exported: Vec<&String> = exported.intersection(&fleet).collect();
    if cfg!(feature = "fleet") {
        assert_eq!(
            fleet_exported.len(),
            fleet.len(),
            "fleet exports: {fleet_exported:?}"
        );
    } else {
        assert!(
            fleet_exported.is_empty(),
            "fleet without the feature: {fleet_exported:?}"
        );
    }
    let mut expected = declared;
    if cfg!(feature = "fleet") {
        expected.extend(fleet);
    }
    assert_eq!(exported, expected, "nm -D vs include/fairq.h");
}

#[test]
fn version_macros_match_cargo_and_the_library() {
    let header = header();
    let define = |name: &str| -> String {
        header
            .lines()
            .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
            .unwrap_or_else(|| panic!("{name} missing"))
            .trim()
            .to_string()
    };
    assert_eq!(
        define("FAIRQ_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MAJOR")
    );
    assert_eq!(
        define("FAIRQ_VERSION_MINOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    assert_eq!(
        define("FAIRQ_VERSION_PATCH"),
        env!("CARGO_PKG_VERSION_PATCH")
    );
    // SAFETY: fairq_version returns a static NUL-terminated string.
    let version = unsafe { CStr::from_ptr(fairq_version()) }.to_str().unwrap();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let cargo_toml = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(cargo_toml.contains(&format!("version = \"{version}\"")));
}

#[test]
fn header_promises_thread_safety_and_the_fixed_names() {
    let header = header();
    assert!(header.contains("EXCEPT fairq_engine_free"));
    for name in [
        "typedef struct fairq_engine fairq_engine;",
        "typedef struct fairq_config {",
        "typedef struct fairq_request {",
        "typedef struct fairq_enqueue_result {",
        "typedef struct fairq_grant {",
        "typedef struct fairq_stats {",
        "#define FAIRQ_ERR_NULL (-1)",
        "#define FAIRQ_REASON_CANCELLED 9",
        "#define FAIRQ_DIM_STORE 7",
        "#define FAIRQ_STATUS_BY_DEPTH 0",
        "#define FAIRQ_STATUS_BY_OLDEST_WAIT 1",
        "#define FAIRQ_STATUS_JSON 0",
        "#define FAIRQ_STATUS_TEXT 1",
        "#define FAIRQ_STATUS_NAME_LEN 64",
        "#define FAIRQ_STATUS_TIER_LEN 40",
        "typedef struct fairq_status_totals {",
        "typedef struct fairq_tenant_status {",
    ] {
        assert!(header.contains(name), "header lacks `{name}`");
    }
}

/// The C compiler's sizes and offsets equal Rust's, for every struct and a few fields each.
#[test]
fn c_struct_layouts_match_rust() {
    let probe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("layout.c");
    let program = r#"
#include <stddef.h>
#include <stdio.h>
#include "fairq.h"
#define S(t) printf(#t " %zu\n", sizeof(t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(t, f))
int main(void) {
    S(fairq_config); O(fairq_config, tenant_dimension); O(fairq_config, max_wait_ms);
    O(fairq_config, tenant_idle_ms);
    S(fairq_request); O(fairq_request, dimension); O(fairq_request, cost);
    S(fairq_enqueue_result); O(fairq_enqueue_result, reason);
    S(fairq_grant); O(fairq_grant, remaining_budget_ns); O(fairq_grant, reason);
    S(fairq_completion); O(fairq_completion, reason);
    S(fairq_stats); O(fairq_stats, refused);
    S(fairq_identity); O(fairq_identity, team_is_placeholder);
    S(fairq_weight_entry); O(fairq_weight_entry, weight);
    S(fairq_status_totals); O(fairq_status_totals, max_in_flight); O(fairq_status_totals, seats);
    S(fairq_tenant_status); O(fairq_tenant_status, weight); O(fairq_tenant_status, parked);
    O(fairq_tenant_status, name); O(fairq_tenant_status, tier);
#if defined(FAIRQ_FLEET)
    S(fairq_fleet_config); O(fairq_fleet_config, period_ms); O(fairq_fleet_config, smoothing);
    O(fairq_fleet_config, top_k);
    S(fairq_fleet_status); O(fairq_fleet_status, consecutive_failures);
    O(fairq_fleet_status, running);
#endif
    return 0;
}
"#;
    std::fs::write(&probe, program).unwrap();
    let exe = probe.with_extension("bin");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let mut cmd = Command::new(&cc);
    if cfg!(feature = "fleet") {
        cmd.arg("-DFAIRQ_FLEET");
    }
    let status = cmd
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg(&probe)
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run cc");
    assert!(status.success());
    let out = Command::new(&exe).output().expect("run layout probe");
    let got = String::from_utf8_lossy(&out.stdout).into_owned();
    let expected = [
        ("fairq_config", size_of::<fairq_config>()),
        (
            "fairq_config.tenant_dimension",
            offset_of!(fairq_config, tenant_dimension),
        ),
        (
            "fairq_config.max_wait_ms",
            offset_of!(fairq_config, max_wait_ms),
        ),
        (
            "fairq_config.tenant_idle_ms",
            offset_of!(fairq_config, tenant_idle_ms),
        ),
        ("fairq_request", size_of::<fairq_request>()),
        (
            "fairq_request.dimension",
            offset_of!(fairq_request, dimension),
        ),
        ("fairq_request.cost", offset_of!(fairq_request, cost)),
        ("fairq_enqueue_result", size_of::<fairq_enqueue_result>()),
        (
            "fairq_enqueue_result.reason",
            offset_of!(fairq_enqueue_result, reason),
        ),
        ("fairq_grant", size_of::<fairq_grant>()),
        (
            "fairq_grant.remaining_budget_ns",
            offset_of!(fairq_grant, remaining_budget_ns),
        ),
        ("fairq_grant.reason", offset_of!(fairq_grant, reason)),
        ("fairq_completion", size_of::<fairq_completion>()),
        (
            "fairq_completion.reason",
            offset_of!(fairq_completion, reason),
        ),
        ("fairq_stats", size_of::<fairq_stats>()),
        ("fairq_stats.refused", offset_of!(fairq_stats, refused)),
        ("fairq_identity", size_of::<fairq_identity>()),
        (
            "fairq_identity.team_is_placeholder",
            offset_of!(fairq_identity, team_is_placeholder),
        ),
        ("fairq_weight_entry", size_of::<fairq_weight_entry>()),
        (
            "fairq_weight_entry.weight",
            offset_of!(fairq_weight_entry, weight),
        ),
        ("fairq_status_totals", size_of::<fairq_status_totals>()),
        (
            "fairq_status_totals.max_in_flight",
            offset_of!(fairq_status_totals, max_in_flight),
        ),
        (
            "fairq_status_totals.seats",
            offset_of!(fairq_status_totals, seats),
        ),
        ("fairq_tenant_status", size_of::<fairq_tenant_status>()),
        (
            "fairq_tenant_status.weight",
            offset_of!(fairq_tenant_status, weight),
        ),
        (
            "fairq_tenant_status.parked",
            offset_of!(fairq_tenant_status, parked),
        ),
        (
            "fairq_tenant_status.name",
            offset_of!(fairq_tenant_status, name),
        ),
        (
            "fairq_tenant_status.tier",
            offset_of!(fairq_tenant_status, tier),
        ),
    ];
    #[cfg(feature = "fleet")]
    let expected = {
        let mut all = expected.to_vec();
        all.extend([
            ("fairq_fleet_config", size_of::<fairq_fleet_config>()),
            (
                "fairq_fleet_config.period_ms",
                offset_of!(fairq_fleet_config, period_ms),
            ),
            (
                "fairq_fleet_config.smoothing",
                offset_of!(fairq_fleet_config, smoothing),
            ),
            (
                "fairq_fleet_config.top_k",
                offset_of!(fairq_fleet_config, top_k),
            ),
            ("fairq_fleet_status", size_of::<fairq_fleet_status>()),
            (
                "fairq_fleet_status.consecutive_failures",
                offset_of!(fairq_fleet_status, consecutive_failures),
            ),
            (
                "fairq_fleet_status.running",
                offset_of!(fairq_fleet_status, running),
            ),
        ]);
        all
    };
    let want: String = expected.iter().map(|(n, v)| format!("{n} {v}\n")).collect();
    assert_eq!(got, want);
}
