//! Builds `ffi/c/test_fleet.c` with `-DFAIRQ_FLEET` and strict warnings against the
//! fleet-enabled `libfairq.a` and runs it against a real `redis-server` (random port, no
//! persistence; Debian package `redis-server`). Run with
//! `cargo test -p fairq --features fleet --test c_fleet`.
#![cfg(feature = "fleet")]

mod common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::redis_server::RedisServer;

/// The static library cargo built for this run: `target/<profile>/deps/libfairq.a` (every
/// build rewrites it, with this run's features), else the copy `cargo build` leaves in
/// `target/<profile>/`.
fn static_library() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    [dir.join("deps/libfairq.a"), dir.join("libfairq.a")]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("libfairq.a not built under {}", dir.display()))
}

fn compile(source: &str, name: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
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
        .arg("-DFAIRQ_FLEET")
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join(source))
        .arg(static_library())
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&out)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "{cc} failed on {source}");
    out
}

#[test]
fn c_fleet_suite_passes_against_a_real_redis() {
    let program = compile("ffi/c/test_fleet.c", "test_fleet");
    let server = RedisServer::start();
    // A port nothing listens on: bound, then released.
    let dead_port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let output = Command::new(&program)
        .env("FAIRQ_REDIS_URL", server.url())
        .env(
            "FAIRQ_DEAD_REDIS_URL",
            format!("redis://127.0.0.1:{dead_port}/"),
        )
        .output()
        .expect("run test_fleet");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "test_fleet failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    print!("{stdout}");
    assert!(
        stdout.contains("c_fleet: 8 passed, 0 failed"),
        "unexpected summary:\n{stdout}"
    );
    // The C side synced through this server: the fleet hash holds its heartbeat.
    let mut conn = server.client().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{fairq:c-test}:served:*")
        .query(&mut conn)
        .unwrap();
    assert!(!keys.is_empty(), "no fleet hash written");
}
