//! A real `redis-server` for the fleet tests (Debian package `redis-server`): started on
//! 127.0.0.1 at a free port without persistence, killed on drop. No Redis client needed, so the
//! `fairq-cli` fleet harness includes this file too (`#[path]`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child, killed on drop.
pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts one on a free port.
    pub fn start() -> RedisServer {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        RedisServer::start_on(port)
    }

    /// Starts one on `port` (e.g. the port of one stopped before) and waits until it answers.
    pub fn start_on(port: u16) -> RedisServer {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (Debian package redis-server; .ci/run installs it)");
        let server = RedisServer { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !answers_ping(port) {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        server
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends it a signal (`-STOP`, `-CONT`) with `kill`.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    }

    /// Kills it; returns its port, which is then dead.
    pub fn stop(mut self) -> u16 {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.port
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a server on `port` answers `PING` with `+PONG`.
fn answers_ping(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let mut reply = [0u8; 7];
    s.set_read_timeout(Some(Duration::from_secs(1))).is_ok()
        && s.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
        && s.read_exact(&mut reply).is_ok()
        && &reply == b"+PONG\r\n"
}
