//! A real `redis-server` for the fleet tests (Debian package `redis-server`): started on
//! 127.0.0.1 at a free port without persistence, killed on drop; and a real Redis Cluster of
//! such servers (three masters, one replica each, made with `redis-cli --cluster create`). No
//! Redis client needed, so the `fairq-cli` fleet harness includes this file too (`#[path]`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` child, killed on drop.
pub struct RedisServer {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl RedisServer {
    /// Starts one on a free port (another one if that port is taken meanwhile).
    pub fn start() -> RedisServer {
        RedisServer::start_fresh(free_port, &[])
    }

    /// Starts one on `port` (e.g. the port of one stopped before) and waits until it answers.
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::start_with(port, &[])
    }

    /// Starts one on `port` with more `redis-server` options and waits until it answers.
    pub fn start_with(port: u16, options: &[&str]) -> RedisServer {
        RedisServer::try_start_with(port, options).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts one on a port from `pick`, with `options`; when it cannot have that port (another
    /// process bound it between the pick and the start), tries again on a new one.
    fn start_fresh(pick: fn() -> u16, options: &[&str]) -> RedisServer {
        let mut last = String::new();
        for _ in 0..5 {
            match RedisServer::try_start_with(pick(), options) {
                Ok(server) => return server,
                Err(e) => last = e,
            }
        }
        panic!("{last}");
    }

    /// Starts one on `port` and waits until it answers; an error says why it did not (with
    /// the end of its log) when it exited or did not answer within 10 s. The server answering
    /// must be this child (its `process_id`), not another process's on the same port.
    fn try_start_with(port: u16, options: &[&str]) -> Result<RedisServer, String> {
        let log =
            std::env::temp_dir().join(format!("fairq-redis-{}-{port}.log", std::process::id()));
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--logfile", log.to_str().unwrap()])
            .args(options)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server on PATH (Debian package redis-server; .ci/run installs it)");
        let mut server = RedisServer {
            child,
            port,
            log: log.clone(),
        };
        let pid = format!("process_id:{}", server.child.id());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(failed_start(port, &format!("exited ({status})"), &log));
            }
            if info(port, &["INFO", "server"]).is_some_and(|i| i.contains(&pid)) {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                return Err(failed_start(port, "did not answer within 10 s", &log));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
        let _ = std::fs::remove_file(&self.log);
    }
}

/// What a failed start says: the port, why, and the last lines of the server's log.
fn failed_start(port: u16, why: &str, log: &std::path::Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    format!(
        "redis-server on port {port} {why}; its log ends:\n{}",
        tail.join("\n")
    )
}

/// A port free now and not handed out before by this process: tests run in parallel, and the
/// system may give a port just released to the next caller.
fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut given = GIVEN.lock().unwrap();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// A free port whose cluster bus port (+10000) is free too.
fn cluster_port() -> u16 {
    loop {
        let p = free_port();
        if p < 55_000 && TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return p;
        }
    }
}

/// A Redis Cluster on loopback: three masters with one replica each, node timeout 1 s, every
/// replica in sync with its master when [`RedisCluster::start`] returns.
pub struct RedisCluster {
    nodes: Vec<Option<RedisServer>>,
    dir: std::path::PathBuf,
}

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
#[allow(dead_code)]
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// For a replica, its master's id.
    pub master_id: Option<String>,
    /// For a master, the slot ranges it serves.
    pub slots: Vec<(u16, u16)>,
}

impl RedisCluster {
    /// Starts six `redis-server --cluster-enabled yes` and joins them with `redis-cli --cluster
    /// create ... --cluster-replicas 1`; returns once every node reports `cluster_state:ok`.
    pub fn start() -> RedisCluster {
        let dir = std::env::temp_dir().join(format!("fairq-cluster-{}", free_port()));
        std::fs::create_dir_all(&dir).unwrap();
        // Each node has its own directory for its cluster state file (nodes.conf).
        let nodes: Vec<Option<RedisServer>> = (0..6)
            .map(|i| {
                let node_dir = dir.join(i.to_string());
                std::fs::create_dir_all(&node_dir).unwrap();
                let options = [
                    "--cluster-enabled",
                    "yes",
                    "--cluster-node-timeout",
                    "1000",
                    // A replica syncs at once (not after the diskless delay of 5 s), and may
                    // take over however long it was cut off from its master.
                    "--repl-diskless-sync-delay",
                    "0",
                    "--cluster-replica-validity-factor",
                    "0",
                    "--dir",
                    node_dir.to_str().unwrap(),
                ];
                Some(RedisServer::start_fresh(cluster_port, &options))
            })
            .collect();
        let ports: Vec<u16> = nodes.iter().flatten().map(|n| n.port()).collect();
        let cluster = RedisCluster { nodes, dir };
        let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli on PATH (Debian package redis-tools, with redis-server)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ports
            .iter()
            .all(|&p| info(p, &["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok")))
            || cluster.nodes().iter().filter(|n| !n.master).count() < 3
            || !cluster.nodes().iter().filter(|n| !n.master).all(|n| {
                info(n.port, &["INFO", "replication"])
                    .is_some_and(|i| i.contains("master_link_status:up"))
            })
        {
            assert!(Instant::now() < deadline, "the cluster did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        cluster
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .flatten()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}/", hosts.join(","))
    }

    /// Ports of the nodes still running.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().flatten().map(|n| n.port()).collect()
    }

    /// The cluster as a running node sees it.
    pub fn nodes(&self) -> Vec<ClusterNode> {
        let text = self
            .ports()
            .into_iter()
            .find_map(|p| info(p, &["CLUSTER", "NODES"]))
            .unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                if f.len() < 8 || f[2].contains("fail") {
                    return None;
                }
                let port = f[1].split('@').next()?.rsplit(':').next()?.parse().ok()?;
                let slots = f[8..]
                    .iter()
                    .filter_map(|r| {
                        let (a, b) = r.split_once('-').unwrap_or((r, r));
                        Some((a.parse().ok()?, b.parse().ok()?))
                    })
                    .collect();
                Some(ClusterNode {
                    id: f[0].to_string(),
                    port,
                    master: f[2].contains("master"),
                    master_id: (f[3] != "-").then(|| f[3].to_string()),
                    slots,
                })
            })
            .collect()
    }

    /// The master serving `slot` and its replica: (master port, replica port).
    pub fn owner(&self, slot: u16) -> (u16, u16) {
        let nodes = self.nodes();
        let master = nodes
            .iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot)))
            .unwrap_or_else(|| panic!("no master for slot {slot}: {nodes:?}"));
        let replica = nodes
            .iter()
            .find(|n| n.master_id.as_deref() == Some(master.id.as_str()))
            .unwrap_or_else(|| panic!("no replica of {master:?}"));
        (master.port, replica.port)
    }

    /// The slot of a key (`CLUSTER KEYSLOT`).
    pub fn slot(&self, key: &str) -> u16 {
        let port = self.ports()[0];
        info(port, &["CLUSTER", "KEYSLOT", key])
            .and_then(|s| s.trim().parse().ok())
            .expect("CLUSTER KEYSLOT")
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        for n in self.nodes.iter_mut() {
            if n.as_ref().is_some_and(|s| s.port() == port) {
                n.take().unwrap().stop();
            }
        }
    }

    /// Whether the node on `port` is a master now (`ROLE`).
    pub fn is_master(port: u16) -> bool {
        info(port, &["ROLE"]).is_some_and(|r| r.starts_with("master"))
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A command to the node on `port`: the reply's text (a bulk string, status or integer), or
/// the first bulk string of an array; None on failure.
fn info(port: u16, parts: &[&str]) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let mut req = format!("*{}\r\n", parts.len());
    for p in parts {
        req += &format!("${}\r\n{p}\r\n", p.len());
    }
    s.write_all(req.as_bytes()).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).into_owned();
        // An array (ROLE): skip to its first element.
        let body = if text.starts_with('*') {
            match text.find("\r\n") {
                Some(i) => text[i + 2..].to_string(),
                None => continue,
            }
        } else {
            text
        };
        let Some(eol) = body.find("\r\n") else {
            continue;
        };
        match body.as_bytes().first() {
            Some(b'$') => {
                let len: usize = body[1..eol].parse().ok()?;
                if body.len() >= eol + 2 + len {
                    return Some(body[eol + 2..eol + 2 + len].to_string());
                }
            }
            Some(b'+' | b':') => return Some(body[1..eol].to_string()),
            _ => return None,
        }
    }
}
