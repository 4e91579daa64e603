//! The admin path: what one `set_weight` costs when the weight table already holds N entries.
//!
//! `cargo bench --bench weights` changes the weight of an existing entry (the table keeps its
//! size) in tables of 1,000, 16,384 and 65,536 entries. A control plane that sets tenants'
//! weights one at a time pays this per call, so its growth with N is what matters.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use fairq::{Config, Engine, TenantKey};

/// Keys spread like the hashes `TenantKey::from_raw` gives (never 0).
fn key(i: u64) -> u64 {
    (i + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1
}

fn set_weight(c: &mut Criterion) {
    let mut group = c.benchmark_group("set_weight");
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    for entries in [1_000u64, 16_384, 65_536] {
        let engine = Engine::new(Config {
            max_weight_classes: 8,
            ..Config::default()
        })
        .expect("valid config");
        let table: Vec<(u64, u32)> = (0..entries).map(|i| (key(i), 1 << (i % 4))).collect();
        engine
            .replace_weight_keys(&table, 1)
            .expect("four weights fit");
        let mut i = 0u64;
        group.bench_function(BenchmarkId::from_parameter(entries), |b| {
            b.iter(|| {
                i = (i + 1) % entries;
                let weight = 1 << ((i + 1) % 4);
                engine
                    .set_weight_key(TenantKey::from_hash(key(i)), black_box(weight))
                    .expect("set_weight");
            })
        });
    }
    group.finish();
}

criterion_group!(benches, set_weight);
criterion_main!(benches);
