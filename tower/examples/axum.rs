//! An axum server behind the fair queue: `cargo run -p fairq-tower --example axum`, then
//!
//! ```sh
//! curl -i -H 'x-user: alice' http://127.0.0.1:3000/work     # x-fair-queue-* headers
//! curl -s http://127.0.0.1:3000/metrics                      # the engine's Prometheus text
//! ```
//!
//! The tenant comes from the user → team → API key resolver over three headers; at most 4
//! requests run at once, `acme-team` is served three times as often as a tenant of weight 1, and
//! a request waits at most 2 s.

use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use fairq::{Config, Engine, Identity, TenantDimension};
use fairq_tower::{Admission, FairQueueLayer};
use http::request::Parts;

fn header<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts.headers.get(name)?.to_str().ok()
}

async fn work(admission: Option<axum::Extension<Admission>>) -> String {
    tokio::time::sleep(Duration::from_millis(50)).await;
    match admission {
        Some(axum::Extension(a)) => {
            format!("served after {} ms in the queue\n", a.waited.as_millis())
        }
        None => "served\n".to_owned(),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Arc::new(Engine::new(Config {
        enabled: true,
        max_in_flight: 4,
        max_wait_ms: 2_000,
        tenant_dimension: TenantDimension::Team,
        ..Config::default()
    })?);
    engine.set_weight("acme-team", 3)?;
    let fair = FairQueueLayer::builder(engine)
        .identity(|parts: &Parts| Identity {
            user: header(parts, "x-user"),
            team: header(parts, "x-team"),
            api_key: header(parts, "x-api-key"),
            team_is_placeholder: false,
        })
        .metrics_path("/metrics")
        .build()?;
    let app = Router::new().route("/work", get(work)).layer(fair);
    let addr = std::env::var("ADDR").unwrap_or_else(|_| "127.0.0.1:3000".to_owned());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    println!("listening on http://{addr}");
    axum::serve(listener, app).await?;
    Ok(())
}
