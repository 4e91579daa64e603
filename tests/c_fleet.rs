//! Builds `ffi/c/test_fleet.c` with `-DFAIRQ_FLEET` and strict warnings against the
//! fleet-enabled `libfairq.a` and runs it against a real `redis-server` (random port, no
//! persistence; Debian package `redis-server`). Run with
//! `cargo test -p fairq --features fleet --test c_fleet`.
#![cfg(feature = "fleet")]

mod common;

use std::net::TcpListener;
use std::process::Command;

use common::c_build::compile;
use common::redis_server::RedisServer;

#[test]
fn c_fleet_suite_passes_against_a_real_redis() {
    let program = compile("ffi/c/test_fleet.c", "test_fleet", &["-DFAIRQ_FLEET"]);
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
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("{fairq:c-test}:served:*")
        .query(&mut conn)
        .unwrap();
    assert!(!keys.is_empty(), "no fleet hash written");
}
