//! The layer keeps no memory per request: the live heap after 20,000 more requests (queued,
//! admitted at once, refused, and abandoned while queued) is what it was after a warm-up, give or
//! take 64 KiB. A leak of 100 bytes a request (2 MB) fails it; the RSS check in `http.rs` would
//! not see one that small.
//!
//! A global allocator counts the bytes live; this file is its own test binary so that nothing
//! else runs beside the measurement.

use std::alloc::{GlobalAlloc, Layout, System};
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fairq::{Config, Engine};
use fairq_tower::FairQueueLayer;
use http::Request;
use http_body_util::{BodyExt, Empty, Full};
use tower::{Service, ServiceExt};

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the count is a side
// effect.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic read after the threads that allocate are quiet.
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn tenant(parts: &http::request::Parts) -> Option<String> {
    parts
        .headers
        .get("x-tenant")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .map(str::to_owned)
}

/// `n` requests, `concurrency` at a time, over 12 tenants (one in 16 has none: refused at once;
/// one in 16 is dropped while it may still be queued).
async fn burst<S>(service: &S, n: usize, concurrency: usize)
where
    S: Service<Request<Empty<Bytes>>> + Clone + Send + 'static,
    S::Future: Send,
    S::Response: Send,
    S::Error: std::fmt::Debug + Send,
{
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        if tasks.len() >= concurrency {
            tasks.join_next().await.unwrap().unwrap();
        }
        let service = service.clone();
        tasks.spawn(async move {
            let name = match i % 16 {
                0 => String::new(),
                k => format!("t{}", k % 12),
            };
            let request = Request::get("/")
                .header("x-tenant", name)
                .body(Empty::<Bytes>::new())
                .unwrap();
            let call = service.oneshot(request);
            if i % 16 == 7 {
                // A client that gives up: its request may be queued or running.
                let _ = tokio::time::timeout(Duration::from_micros(50), call).await;
            } else {
                call.await.unwrap();
            }
        });
    }
    while let Some(t) = tasks.join_next().await {
        t.unwrap();
    }
}

async fn quiet(engine: &Engine) -> i64 {
    for _ in 0..500 {
        let s = engine.stats();
        if s.in_flight == 0 && s.queued == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    LIVE.load(Ordering::Relaxed)
}

#[test]
fn twenty_thousand_requests_leave_no_heap_behind() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let engine = Arc::new(
            Engine::new(Config {
                enabled: true,
                max_in_flight: 4,
                ..Config::default()
            })
            .unwrap(),
        );
        let layer = FairQueueLayer::builder(engine.clone())
            .tenant(tenant)
            .build()
            .unwrap();
        let service = tower::ServiceBuilder::new().layer(layer).service_fn(
            |_req: Request<Empty<Bytes>>| async {
                tokio::task::yield_now().await;
                Ok::<_, Infallible>(http::Response::new(Full::new(Bytes::from_static(b"ok"))))
            },
        );
        // Warm-up: the tenant table, the dispatcher and the runtime reach their working size.
        burst(&service, 4_000, 32).await;
        let before = quiet(&engine).await;
        burst(&service, 20_000, 32).await;
        let after = quiet(&engine).await;
        let s = engine.stats();
        eprintln!(
            "live heap {before} B after the warm-up, {after} B after 20,000 more \
             ({:+} B); engine {s:?}",
            after - before
        );
        assert!(s.cancelled > 0, "some requests were abandoned while queued");
        assert!(s.refused_for(fairq::Reason::NoTenant) > 0);
        assert!(
            after - before <= 64 * 1024,
            "the live heap grew {} B over 20,000 requests",
            after - before
        );
        // Keep the response type's body in use, so the test builds the layer's full path.
        let _ = Full::new(Bytes::new()).collect().await;
    });
}
