//! The example of `docs/middleware.md`: `cargo run -p fairq-tower --example hello`.
use std::sync::Arc;

use fairq::{Config, Engine};
use fairq_tower::FairQueueLayer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let engine = Arc::new(Engine::new(Config {
        enabled: true,
        max_in_flight: 4,
        ..Config::default()
    })?);
    engine.set_weight("acme", 3)?;
    let fair = FairQueueLayer::builder(engine)
        .tenant(|req: &http::request::Parts| {
            req.headers
                .get("x-tenant")?
                .to_str()
                .ok()
                .map(str::to_owned)
        })
        .metrics_path("/metrics") // also .identity(..), .limiter(..), .timeout(..)
        .build()?;
    let app = axum::Router::new()
        .route("/", axum::routing::get(|| async { "hello\n" }))
        .layer(fair);
    axum::serve(tokio::net::TcpListener::bind("127.0.0.1:8080").await?, app).await?;
    Ok(())
}
