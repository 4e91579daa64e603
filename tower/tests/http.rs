//! The layer in a real axum server on 127.0.0.1, driven by real HTTP clients (hyper's client and
//! raw TCP). The upstream handler takes 50 ms ± 20 % and has 4 workers (a FIFO semaphore), and
//! the engine 4 permits, so with the layer on the upstream never queues; with it off, every
//! request queues at the upstream in arrival order.
//!
//! The tests share the machine's cores, so they run one at a time (`SERIAL`).

use std::collections::HashSet;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request as AxumRequest, State};
use axum::http::HeaderMap;
use axum::middleware::{self, Next};
use axum::response::Response as AxumResponse;
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use fairq::{Config, Dimension, Engine, Stats};
use fairq_tower::{Admission, Decision, FairQueueLayer};
use http::request::Parts;
use http::{Request, StatusCode};
use http_body::Frame;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

static SERIAL: Mutex<()> = Mutex::new(());

/// Runs one test alone, on a fresh two-worker runtime.
fn run<F: Future<Output = ()>>(test: F) {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(test);
}

// ------------------------------------------------------------------------------ the upstream

/// The service behind the layer: `workers` at a time (FIFO), each request taking `base` ± 20 %.
struct Upstream {
    workers: Semaphore,
    base: Duration,
    seen: Mutex<HashSet<u64>>,
    duplicates: AtomicU64,
    handled: AtomicU64,
    /// `/hold` requests wait here until the test adds permits.
    gate: Semaphore,
}

impl Upstream {
    fn new(base: Duration) -> Arc<Upstream> {
        Arc::new(Upstream {
            workers: Semaphore::new(4),
            base,
            seen: Mutex::new(HashSet::new()),
            duplicates: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            gate: Semaphore::new(0),
        })
    }

    /// `base` × [0.8, 1.2), from a hash of the request id.
    fn service_time(&self, id: u64) -> Duration {
        let mut x = id.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5851_f42d_4c95_7f2d;
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 32;
        let unit = (x % 10_000) as f64 / 10_000.0;
        self.base.mul_f64(0.8 + 0.4 * unit)
    }

    fn record(&self, headers: &HeaderMap) -> u64 {
        let id = header_u64(headers, "x-req-id").unwrap_or(0);
        if id != 0 && !self.seen.lock().unwrap().insert(id) {
            self.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        self.handled.fetch_add(1, Ordering::Relaxed);
        id
    }
}

fn header_u64(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.parse().ok()
}

async fn work(State(up): State<Arc<Upstream>>, headers: HeaderMap) -> String {
    let id = up.record(&headers);
    let _worker = up.workers.acquire().await.unwrap();
    tokio::time::sleep(up.service_time(id)).await;
    "ok".to_owned()
}

async fn hold(State(up): State<Arc<Upstream>>, headers: HeaderMap) -> &'static str {
    up.record(&headers);
    up.gate.acquire().await.unwrap().forget();
    "released"
}

/// The admission the layer put into the request, echoed as headers for the tests.
async fn admission(req: AxumRequest) -> String {
    match req.extensions().get::<Admission>() {
        Some(a) => format!("position={} waited_ms={}", a.position, a.waited.as_millis()),
        None => "none".to_owned(),
    }
}

/// A body of two chunks 200 ms apart: its permit must be held until the second.
struct SlowBody {
    step: u8,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for SlowBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.step {
            0 => {
                self.step = 1;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"first ")))))
            }
            1 => {
                std::task::ready!(self.sleep.as_mut().poll(cx));
                self.step = 2;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"last")))))
            }
            _ => Poll::Ready(None),
        }
    }
}

async fn slow_body() -> AxumResponse {
    AxumResponse::new(Body::new(SlowBody {
        step: 0,
        sleep: Box::pin(tokio::time::sleep(Duration::from_millis(200))),
    }))
}

/// Records every response that leaves the layer, by request id: none may be answered twice.
#[derive(Default)]
struct Answers {
    ids: Mutex<HashSet<u64>>,
    twice: AtomicU64,
}

async fn count_answers(
    State(answers): State<Arc<Answers>>,
    req: AxumRequest,
    next: Next,
) -> AxumResponse {
    let id = header_u64(req.headers(), "x-req-id");
    let response = next.run(req).await;
    if let Some(id) = id {
        if !answers.ids.lock().unwrap().insert(id) {
            answers.twice.fetch_add(1, Ordering::Relaxed);
        }
    }
    response
}

fn routes(up: &Arc<Upstream>) -> Router<()> {
    Router::new()
        .route("/work", get(work).post(work))
        .route("/hold", get(hold))
        .route("/admission", get(admission))
        .route("/stream", get(slow_body))
        .with_state(up.clone())
}

fn tenant_header(parts: &Parts) -> Option<String> {
    parts
        .headers
        .get("x-tenant")?
        .to_str()
        .ok()
        .map(str::to_owned)
}

fn engine(config: Config) -> Arc<Engine> {
    Arc::new(
        Engine::new(Config {
            enabled: true,
            max_in_flight: 4,
            ..config
        })
        .unwrap(),
    )
}

fn layer(engine: &Arc<Engine>) -> FairQueueLayer {
    FairQueueLayer::builder(engine.clone())
        .tenant(tenant_header)
        .metrics_path("/metrics")
        .build()
        .unwrap()
}

async fn serve(app: Router<()>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    addr
}

// ------------------------------------------------------------------------------- the clients

type HttpClient = Client<HttpConnector, Empty<Bytes>>;

fn client() -> HttpClient {
    Client::builder(TokioExecutor::new()).build_http()
}

static REQ_ID: AtomicU64 = AtomicU64::new(1);

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
    latency: Duration,
}

async fn get_from(client: &HttpClient, addr: SocketAddr, path: &str, tenant: &str) -> Answer {
    get_with(client, addr, path, &[("x-tenant", tenant)]).await
}

async fn get_with(
    client: &HttpClient,
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Answer {
    let id = REQ_ID.fetch_add(1, Ordering::Relaxed);
    let mut request = Request::get(format!("http://{addr}{path}")).header("x-req-id", id);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request.body(Empty::new()).unwrap();
    let started = Instant::now();
    let response = client.request(request).await.unwrap();
    let (parts, body) = response.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body,
        latency: started.elapsed(),
    }
}

/// `clients` closed-loop clients of `tenant` until `until`; the latency of each 200, and the
/// instant it completed.
async fn closed_loop(
    addr: SocketAddr,
    tenant: &'static str,
    clients: usize,
    until: Instant,
) -> Vec<(Instant, Duration)> {
    let mut tasks = Vec::new();
    for _ in 0..clients {
        tasks.push(tokio::spawn(async move {
            let client = client();
            let mut done = Vec::new();
            while Instant::now() < until {
                let answer = get_from(&client, addr, "/work", tenant).await;
                assert_eq!(answer.status, StatusCode::OK, "{tenant}: {:?}", answer.body);
                done.push((Instant::now(), answer.latency));
            }
            done
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

fn p95(samples: &[(Instant, Duration)]) -> Duration {
    let mut latencies: Vec<Duration> = samples.iter().map(|s| s.1).collect();
    latencies.sort();
    assert!(!latencies.is_empty());
    latencies[(latencies.len() * 95).div_ceil(100) - 1]
}

/// Waits until the stats satisfy `ok` and stay the same over a short pause. The fields are read
/// one by one, so a read taken while a call is still ending can mix its before and after (the
/// permit back, the completion not yet counted); a second equal read means nothing was moving.
async fn wait_for(engine: &Engine, what: &str, ok: impl Fn(&Stats) -> bool) -> Stats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = engine.stats();
        if ok(&stats) {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if engine.stats() == stats {
                return stats;
            }
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn header<'a>(answer: &'a Answer, name: &str) -> &'a str {
    answer
        .headers
        .get(name)
        .unwrap_or_else(|| panic!("no {name} header in {:?}", answer.headers))
        .to_str()
        .unwrap()
}

// -------------------------------------------------------------------------------- the tests

/// 40 closed-loop clients of one tenant and 2 of another: with the layer, the victim waits for
/// one free permit at most, so its p95 stays within twice its p95 alone; without it, it waits
/// behind the flood's 40 requests at the upstream.
#[test]
fn a_flood_leaves_the_victims_p95_within_twice_its_p95_alone() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config::default());
        let on = serve(routes(&up).layer(layer(&engine))).await;
        let off = serve(routes(&up)).await;

        let alone = closed_loop(
            on,
            "victim",
            2,
            Instant::now() + Duration::from_millis(2000),
        );
        let alone = p95(&alone.await);

        let mut with = Vec::new();
        for (addr, run_for) in [(on, 5000), (off, 3000)] {
            let flood_until = Instant::now() + Duration::from_millis(300 + run_for + 300);
            let flood = tokio::spawn(closed_loop(addr, "flood", 40, flood_until));
            tokio::time::sleep(Duration::from_millis(300)).await;
            let victim = closed_loop(
                addr,
                "victim",
                2,
                Instant::now() + Duration::from_millis(run_for),
            );
            with.push(victim.await);
            flood.await.unwrap();
        }
        let (fair, unfair) = (p95(&with[0]), p95(&with[1]));
        eprintln!(
            "victim p95: alone {alone:?}, with the flood {fair:?} ({:.2}x, {} samples), \
             without the layer {unfair:?} ({:.2}x, {} samples)",
            fair.as_secs_f64() / alone.as_secs_f64(),
            with[0].len(),
            unfair.as_secs_f64() / alone.as_secs_f64(),
            with[1].len(),
        );
        assert!(
            fair <= alone * 2,
            "with the layer: {fair:?} > 2 x {alone:?}"
        );
        assert!(
            unfair >= alone * 4,
            "without the layer: {unfair:?} < 4 x {alone:?}"
        );
        let stats = wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
        assert_eq!(stats.queued, 0);
        assert_eq!(stats.enqueued, stats.ended());
    });
}

/// Weights 3:1, both tenants backlogged: the responses completed inside a window are 3:1.
#[test]
fn weights_three_to_one_give_three_to_one_completions() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config::default());
        engine.set_weight("heavy", 3).unwrap();
        engine.set_weight("light", 1).unwrap();
        let addr = serve(routes(&up).layer(layer(&engine))).await;
        let start = Instant::now();
        let until = start + Duration::from_millis(4500);
        let heavy = tokio::spawn(closed_loop(addr, "heavy", 8, until));
        let light = tokio::spawn(closed_loop(addr, "light", 8, until));
        let (heavy, light) = (heavy.await.unwrap(), light.await.unwrap());
        let window = |s: &[(Instant, Duration)]| {
            let (from, to) = (
                start + Duration::from_millis(500),
                start + Duration::from_millis(4500),
            );
            s.iter().filter(|(at, _)| *at >= from && *at < to).count()
        };
        let (h, l) = (window(&heavy), window(&light));
        let ratio = h as f64 / l as f64;
        eprintln!("completed in a 4 s window: heavy {h}, light {l}, ratio {ratio:.3}");
        assert!(
            (2.7..=3.3).contains(&ratio),
            "ratio {ratio:.3} (heavy {h}, light {l})"
        );
        let stats = wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
        assert_eq!(stats.enqueued, stats.ended());
    });
}

/// A tenant over its queue bound gets 429 with Retry-After, the position and wait headers and
/// every field of the JSON body; the requests that were queued then get the granted headers.
#[test]
fn a_tenant_over_its_queue_bound_gets_429_with_every_field() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config {
            tenant_queue_capacity: 4,
            ..Config::default()
        });
        let addr = serve(routes(&up).layer(layer(&engine))).await;
        let client = client();
        let mut held = Vec::new();
        for _ in 0..4 {
            let client = client.clone();
            held.push(tokio::spawn(async move {
                get_from(&client, addr, "/hold", "holder").await
            }));
        }
        wait_for(&engine, "4 in flight", |s| s.in_flight == 4).await;
        let mut queued = Vec::new();
        for n in 1..=4 {
            let client = client.clone();
            queued.push(tokio::spawn(async move {
                get_from(&client, addr, "/admission", "acme").await
            }));
            wait_for(&engine, "queued", |s| s.queued == n).await;
        }

        let refused = get_from(&client, addr, "/admission", "acme").await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(header(&refused, "retry-after"), "1");
        assert_eq!(header(&refused, "x-fair-queue-position"), "5");
        assert_eq!(header(&refused, "x-fair-queue-wait-ms"), "0");
        assert_eq!(header(&refused, "content-type"), "application/json");
        let body: serde_json::Value = serde_json::from_slice(&refused.body).unwrap();
        assert_eq!(body["error"]["type"], "rate_limited");
        let details = &body["error"]["details"]["fair_queue"];
        assert_eq!(details["reason"], "tenant_queue_full");
        assert_eq!(details["position"], 5);
        assert_eq!(details["wait_ms"], 0);
        assert_eq!(details["tenant_dimension"], "user");
        assert_eq!(
            engine.stats().refused_for(fairq::Reason::TenantQueueFull),
            1
        );

        up.gate.add_permits(4);
        for answer in held {
            assert_eq!(answer.await.unwrap().status, StatusCode::OK);
        }
        let mut positions = Vec::new();
        for (n, answer) in queued.into_iter().enumerate() {
            let answer = answer.await.unwrap();
            assert_eq!(answer.status, StatusCode::OK);
            let position: u32 = header(&answer, "x-fair-queue-position").parse().unwrap();
            let waited: u64 = header(&answer, "x-fair-queue-wait-ms").parse().unwrap();
            let _estimate: u64 = header(&answer, "x-fair-queue-estimated-wait-ms")
                .parse()
                .unwrap();
            assert_eq!(
                std::str::from_utf8(&answer.body).unwrap(),
                format!("position={position} waited_ms={waited}"),
                "request {n}: the handler sees the same admission"
            );
            positions.push(position);
        }
        assert_eq!(positions, [1, 2, 3, 4]);
        let stats = wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
        assert_eq!((stats.enqueued, stats.completed), (8, 8));
    });
}

/// The budget: a request that cannot be granted within `timeout` is answered 429
/// `deadline_exceeded` when it runs out, while every permit is still held.
#[test]
fn a_request_whose_budget_runs_out_gets_429_deadline_exceeded() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config::default());
        let fair = FairQueueLayer::builder(engine.clone())
            .tenant(tenant_header)
            .timeout(Duration::from_millis(150))
            .build()
            .unwrap();
        let addr = serve(routes(&up).layer(fair.clone())).await;
        let client = client();
        let mut held = Vec::new();
        for _ in 0..4 {
            let client = client.clone();
            held.push(tokio::spawn(async move {
                get_from(&client, addr, "/hold", "holder").await
            }));
        }
        wait_for(&engine, "4 in flight", |s| s.in_flight == 4).await;
        let late = get_from(&client, addr, "/work", "late").await;
        assert_eq!(late.status, StatusCode::TOO_MANY_REQUESTS);
        let body: serde_json::Value = serde_json::from_slice(&late.body).unwrap();
        let details = &body["error"]["details"]["fair_queue"];
        assert_eq!(details["reason"], "deadline_exceeded");
        assert_eq!(details["position"], 1);
        let waited = details["wait_ms"].as_u64().unwrap();
        assert!((150..1000).contains(&waited), "waited {waited} ms");
        assert_eq!(header(&late, "x-fair-queue-wait-ms"), waited.to_string());
        assert_eq!(header(&late, "retry-after"), "1");
        assert!(late.latency >= Duration::from_millis(150));
        assert_eq!(engine.stats().expired, 1);
        assert_eq!(fair.waiting(), 0);
        up.gate.add_permits(4);
        for answer in held {
            assert_eq!(answer.await.unwrap().status, StatusCode::OK);
        }
        wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
    });
}

/// A client that hangs up while its request is queued: the request's future is dropped, its
/// ticket cancelled, and no permit leaks.
#[test]
fn a_client_that_disconnects_while_queued_is_cancelled_without_a_leak() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config::default());
        let fair = layer(&engine);
        let addr = serve(routes(&up).layer(fair.clone())).await;
        let client = client();
        let mut held = Vec::new();
        for _ in 0..4 {
            let client = client.clone();
            held.push(tokio::spawn(async move {
                get_from(&client, addr, "/hold", "holder").await
            }));
        }
        wait_for(&engine, "4 in flight", |s| s.in_flight == 4).await;

        // A GET, then a POST whose whole body was sent.
        let requests: [&[u8]; 2] = [
            b"GET /work HTTP/1.1\r\nhost: test\r\nx-tenant: gone\r\n\r\n",
            b"POST /work HTTP/1.1\r\nhost: test\r\nx-tenant: gone\r\ncontent-length: 4\r\n\r\nbody",
        ];
        for (n, request) in (1..).zip(requests) {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(request).await.unwrap();
            wait_for(&engine, "queued", |s| s.queued == 1).await;
            assert_eq!(fair.waiting(), 1);
            drop(stream);
            // Stats fields are read one by one (gauges first): a read can see the cancel counted
            // while the queued gauge, read just before, still counts the request. Wait for both.
            let stats = wait_for(&engine, "the cancel, nothing queued", |s| {
                s.cancelled == n && s.queued == 0
            })
            .await;
            assert_eq!(stats.in_flight, 4);
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while fair.waiting() != 0 {
                assert!(std::time::Instant::now() < deadline, "still waiting");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }

        up.gate.add_permits(4);
        for answer in held {
            assert_eq!(answer.await.unwrap().status, StatusCode::OK);
        }
        let stats = wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
        assert_eq!((stats.completed, stats.cancelled, stats.granted), (4, 2, 4));
        // The permits all came back: a new request is admitted at once.
        let answer = get_from(&client, addr, "/work", "after").await;
        assert_eq!(answer.status, StatusCode::OK);
        assert_eq!(header(&answer, "x-fair-queue-position"), "1");
    });
}

/// The permit is held until the body ends, not until the headers are sent.
#[test]
fn the_permit_goes_back_when_the_body_ends() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config::default());
        let addr = serve(routes(&up).layer(layer(&engine))).await;
        let request = Request::get(format!("http://{addr}/stream"))
            .header("x-tenant", "streamer")
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = client().request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut body = response.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"first ");
        // The permit is still out (a concurrent `next_grant` may count one more for a moment,
        // so completions tell, not the in-flight gauge).
        let stats = engine.stats();
        assert!(
            stats.in_flight >= 1 && stats.completed == 0,
            "headers and the first chunk are out: {stats:?}"
        );
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(&rest[..], b"last");
        let stats = wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
        assert_eq!(stats.completed, 1);
    });
}

/// With a limiter, only its refusals are queued; a granted request is re-checked (and requeued
/// while it is still refused); the engine's wake-up time drives the retry.
#[test]
fn a_limiter_refusal_is_queued_until_its_retry_after_then_rechecked() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config::default());
        let checks = Arc::new(AtomicUsize::new(0));
        let counted = checks.clone();
        let limiter = move |tenant: Option<fairq::TenantKey>, parts: &Parts| {
            let n = counted.fetch_add(1, Ordering::Relaxed);
            match parts.headers.get("x-tenant").map(|v| v.as_bytes()) {
                Some(b"global") => Decision::Refuse {
                    dimension: Dimension::Global,
                    retry_after: Duration::from_secs(2),
                },
                // "retried": refused on arrival and at its first grant, allowed at the second.
                Some(b"retried") if n < 2 => Decision::Refuse {
                    dimension: Dimension::User,
                    retry_after: Duration::from_millis(40),
                },
                _ => {
                    assert!(tenant.is_some());
                    Decision::Allow
                }
            }
        };
        let fair = FairQueueLayer::builder(engine.clone())
            .tenant(tenant_header)
            .limiter(limiter)
            .build()
            .unwrap();
        let addr = serve(routes(&up).layer(fair)).await;
        let client = client();

        let answer = get_from(&client, addr, "/admission", "retried").await;
        assert_eq!(answer.status, StatusCode::OK);
        let waited: u64 = header(&answer, "x-fair-queue-wait-ms").parse().unwrap();
        assert!(waited >= 80, "two 40 ms Retry-Afters, waited {waited} ms");
        let estimate: u64 = header(&answer, "x-fair-queue-estimated-wait-ms")
            .parse()
            .unwrap();
        assert!(
            estimate >= 40,
            "the estimate includes the Retry-After: {estimate} ms"
        );
        assert_eq!(checks.load(Ordering::Relaxed), 3);
        let stats = engine.stats();
        assert_eq!((stats.enqueued, stats.requeued, stats.granted), (1, 1, 2));

        let allowed = get_from(&client, addr, "/admission", "free").await;
        assert_eq!(allowed.status, StatusCode::OK);
        assert_eq!(
            &allowed.body[..],
            b"none",
            "an allowed request is not queued"
        );
        assert!(allowed.headers.get("x-fair-queue-position").is_none());

        let global = get_from(&client, addr, "/work", "global").await;
        assert_eq!(global.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            header(&global, "retry-after"),
            "2",
            "the limiter's Retry-After"
        );
        let body: serde_json::Value = serde_json::from_slice(&global.body).unwrap();
        assert_eq!(
            body["error"]["details"]["fair_queue"]["reason"],
            "not_queueable"
        );
        wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
    });
}

/// The metrics path serves the engine's Prometheus text; a request without a tenant is refused
/// `no_tenant`; a disabled engine lets requests through as if the layer were not there.
#[test]
fn metrics_no_tenant_and_off() {
    run(async {
        let up = Upstream::new(Duration::from_millis(50));
        let engine = engine(Config::default());
        let addr = serve(routes(&up).layer(layer(&engine))).await;
        let client = client();
        assert_eq!(
            get_from(&client, addr, "/work", "acme").await.status,
            StatusCode::OK
        );

        let metrics = get_from(&client, addr, "/metrics", "").await;
        assert_eq!(metrics.status, StatusCode::OK);
        assert!(header(&metrics, "content-type").starts_with("text/plain; version=0.0.4"));
        let text = std::str::from_utf8(&metrics.body).unwrap();
        assert!(
            text.contains("rate_limit_fair_queue_grants_total{tenant_dimension=\"user\"} 1"),
            "{text}"
        );

        let request = Request::get(format!("http://{addr}/work"))
            .body(Empty::new())
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        // Sent again, it is refused again: no Retry-After.
        assert!(response.headers().get("retry-after").is_none());
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            body["error"]["details"]["fair_queue"]["reason"],
            "no_tenant"
        );
        assert_eq!(body["error"]["details"]["fair_queue"]["position"], 0);

        engine.set_enabled(false);
        let answer = get_from(&client, addr, "/admission", "acme").await;
        assert_eq!(
            (answer.status, &answer.body[..]),
            (StatusCode::OK, &b"none"[..])
        );
        assert!(answer.headers.get("x-fair-queue-position").is_none());
    });
}

/// 10,000 requests through one layer: a flood over its queue bound (429s), a victim, tenants of
/// weight 3 and 1, and clients that hang up after a random few milliseconds. Afterwards no permit
/// is held, no request waits, nothing was answered twice, and memory did not grow. The upstream
/// takes 2 ms ± 20 % here (4 permits still), so the run takes seconds rather than minutes.
#[test]
fn ten_thousand_mixed_requests_leak_nothing() {
    run(async {
        const TOTAL: u64 = 10_000;
        let up = Upstream::new(Duration::from_millis(2));
        let engine = engine(Config {
            tenant_queue_capacity: 16,
            ..Config::default()
        });
        engine.set_weight("heavy", 3).unwrap();
        let fair = layer(&engine);
        let answers = Arc::new(Answers::default());
        let app = routes(&up)
            .layer(fair.clone())
            .layer(middleware::from_fn_with_state(
                answers.clone(),
                count_answers,
            ));
        let addr = serve(app).await;

        let issued = Arc::new(AtomicU64::new(0));
        let ok = Arc::new(AtomicU64::new(0));
        let refused = Arc::new(AtomicU64::new(0));
        let hung_up = Arc::new(AtomicU64::new(0));
        let rss_at_2000 = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        let mix: [(&'static str, usize); 5] = [
            ("flood", 24),
            ("victim", 2),
            ("heavy", 4),
            ("light", 4),
            ("hangup", 4),
        ];
        for (tenant, clients) in mix {
            for c in 0..clients {
                let (issued, ok, refused, hung_up, rss) = (
                    issued.clone(),
                    ok.clone(),
                    refused.clone(),
                    hung_up.clone(),
                    rss_at_2000.clone(),
                );
                tasks.push(tokio::spawn(async move {
                    let client = client();
                    loop {
                        let n = issued.fetch_add(1, Ordering::Relaxed);
                        if n >= TOTAL {
                            return;
                        }
                        if n == 2_000 {
                            rss.store(rss_kib(), Ordering::Relaxed);
                        }
                        if tenant == "hangup" {
                            let mut stream = TcpStream::connect(addr).await.unwrap();
                            let request = format!(
                                "GET /work HTTP/1.1\r\nhost: t\r\nx-tenant: hangup\r\nx-req-id: {}\r\n\r\n",
                                REQ_ID.fetch_add(1, Ordering::Relaxed)
                            );
                            stream.write_all(request.as_bytes()).await.unwrap();
                            tokio::time::sleep(Duration::from_micros(500 + 1000 * (n % 8) + c as u64)).await;
                            drop(stream);
                            hung_up.fetch_add(1, Ordering::Relaxed);
                            continue;
                        }
                        let answer = get_from(&client, addr, "/work", tenant).await;
                        match answer.status {
                            StatusCode::OK => ok.fetch_add(1, Ordering::Relaxed),
                            StatusCode::TOO_MANY_REQUESTS => {
                                let body: serde_json::Value = serde_json::from_slice(&answer.body).unwrap();
                                assert_eq!(body["error"]["details"]["fair_queue"]["reason"], "tenant_queue_full");
                                // A client backs off a little before it tries again.
                                tokio::time::sleep(Duration::from_millis(5)).await;
                                refused.fetch_add(1, Ordering::Relaxed)
                            }
                            other => panic!("unexpected status {other}"),
                        };
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        let stats = wait_for(&engine, "everything ended", |s| {
            s.in_flight == 0 && s.queued == 0 && s.enqueued == s.ended()
        })
        .await;
        // Let the server finish the hung-up connections' handlers.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let rss_end = rss_kib();
        let (ok, refused, hung_up) = (
            ok.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed),
            hung_up.load(Ordering::Relaxed),
        );
        let rss_2000 = rss_at_2000.load(Ordering::Relaxed);
        eprintln!(
            "10,000 requests: {ok} ok, {refused} refused 429, {hung_up} hung up; engine {stats:?}; \
             RSS {rss_2000} KiB after 2,000, {rss_end} KiB after 10,000"
        );
        assert_eq!(ok + refused + hung_up, TOTAL);
        assert!(refused > 0, "the flood went over its bound");
        assert!(
            stats.cancelled > 0,
            "some hang-ups were cancelled while queued"
        );
        assert_eq!(fair.waiting(), 0, "no request is left waiting");
        assert_eq!(
            up.duplicates.load(Ordering::Relaxed),
            0,
            "no request ran twice"
        );
        assert_eq!(
            answers.twice.load(Ordering::Relaxed),
            0,
            "no request was answered twice"
        );
        // Each 429 the clients saw is one refusal the engine counted, and each 200 one grant
        // that completed.
        assert_eq!(stats.refused_for(fairq::Reason::TenantQueueFull), refused);
        assert!(stats.completed >= ok && stats.granted >= stats.completed);
        assert!(
            rss_end <= rss_2000 + 8 * 1024,
            "RSS grew from {rss_2000} KiB to {rss_end} KiB"
        );
    });
}

/// Plain hyper, without axum: the layer around a `tower::service_fn`, served by hyper's HTTP/1
/// connection through `hyper_util`'s `TowerToHyperService`.
#[test]
fn the_layer_serves_under_plain_hyper() {
    run(async {
        let engine = engine(Config::default());
        let service = tower::ServiceBuilder::new()
            .layer(layer(&engine))
            .service_fn(|_req: Request<hyper::body::Incoming>| async {
                Ok::<_, Infallible>(http::Response::new(http_body_util::Full::new(
                    Bytes::from_static(b"plain hyper"),
                )))
            });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let service = hyper_util::service::TowerToHyperService::new(service.clone());
                let io = hyper_util::rt::TokioIo::new(stream);
                tokio::spawn(
                    hyper::server::conn::http1::Builder::new().serve_connection(io, service),
                );
            }
        });
        let answer = get_from(&client(), addr, "/", "acme").await;
        assert_eq!(
            (answer.status, &answer.body[..]),
            (StatusCode::OK, &b"plain hyper"[..])
        );
        assert_eq!(header(&answer, "x-fair-queue-position"), "1");
        let refused = get_from(&client(), addr, "/", "").await;
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        let stats = wait_for(&engine, "in_flight 0", |s| s.in_flight == 0).await;
        assert_eq!(stats.completed, 1);
    });
}

/// A layer outlives the runtime it first ran on: its dispatcher is dropped with that runtime,
/// and the next request, on another runtime, starts a new one.
#[test]
fn a_layer_outlives_its_first_runtime() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let engine = engine(Config::default());
    let fair = layer(&engine);
    for round in 0..2 {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let up = Upstream::new(Duration::from_millis(5));
        let app = routes(&up).layer(fair.clone());
        runtime.block_on(async {
            let addr = serve(app).await;
            let client = client();
            let answer = get_from(&client, addr, "/work", "acme");
            let answer = tokio::time::timeout(Duration::from_secs(5), answer)
                .await
                .unwrap_or_else(|_| panic!("round {round}: no answer (no dispatcher?)"));
            assert_eq!(answer.status, StatusCode::OK, "round {round}");
        });
    }
    assert_eq!(engine.stats().completed, 2);
}

/// The user → team → API key resolver: with `tenant_dimension` team, a request's team names its
/// tenant; without one, its user does; with neither identifier, it is refused `no_tenant`.
#[test]
fn the_identity_resolver_names_the_tenant() {
    run(async {
        let up = Upstream::new(Duration::from_millis(5));
        let engine = engine(Config {
            tenant_dimension: fairq::TenantDimension::Team,
            ..Config::default()
        });
        fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
            parts.headers.get(name)?.to_str().ok()
        }
        let fair = FairQueueLayer::builder(engine.clone())
            .identity(|parts: &Parts| fairq::Identity {
                user: header(parts, "x-user"),
                team: header(parts, "x-team"),
                api_key: header(parts, "x-api-key"),
                team_is_placeholder: false,
            })
            .build()
            .unwrap();
        let addr = serve(routes(&up).layer(fair)).await;
        let client = client();
        let both = [("x-user", "alice"), ("x-team", "acme")];
        assert_eq!(
            get_with(&client, addr, "/work", &both).await.status,
            StatusCode::OK
        );
        let user_only = [("x-user", "bob"), ("x-api-key", "k1")];
        assert_eq!(
            get_with(&client, addr, "/work", &user_only).await.status,
            StatusCode::OK
        );
        let granted = |raw: &[u8]| engine.tenant_granted(fairq::TenantKey::from_raw(raw));
        assert_eq!(granted(b"acme"), Some((1, 1)));
        assert_eq!(granted(b"bob"), Some((1, 1)));
        assert_eq!((granted(b"alice"), granted(b"k1")), (None, None));
        let nobody = get_with(&client, addr, "/work", &[]).await;
        assert_eq!(nobody.status, StatusCode::TOO_MANY_REQUESTS);
        let body: serde_json::Value = serde_json::from_slice(&nobody.body).unwrap();
        let details = &body["error"]["details"]["fair_queue"];
        assert_eq!(
            (
                details["reason"].as_str(),
                details["tenant_dimension"].as_str()
            ),
            (Some("no_tenant"), Some("team"))
        );
    });
}
