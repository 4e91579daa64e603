//! Grants per second: fairq against the floor, a mutex SWRR baseline and firq-core, in one run.
//!
//! `cargo bench --bench grants` times one cycle (enqueue, grant, complete) per element for every
//! contender at T ∈ {1, 64, 1024, 16384} tenants and 1 or 2 threads. The workload lives in
//! `benches/workload/mod.rs`, shared with `examples/compare.rs`.

mod workload;

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use workload::{Contender, Fairq, FairqLean, FirqCore, Floor, MutexSwrr, Prepared, TENANTS};

fn bench_contender<C: Contender>(c: &mut Criterion, name: &str) {
    for threads in [1usize, 2] {
        let mut group = c.benchmark_group(format!("cycle/threads={threads}"));
        group.throughput(Throughput::Elements(1));
        group.sample_size(20);
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(2));
        for &tenants in &TENANTS {
            let prepared = Prepared::<C>::new(tenants, threads);
            group.bench_with_input(BenchmarkId::new(name, tenants), &tenants, |b, _| {
                // One criterion iteration is one cycle; with two threads each runs half of them,
                // so the time per element is the aggregate cost of a cycle.
                b.iter_custom(|iters| prepared.time(iters));
            });
        }
        group.finish();
    }
}

fn grants(c: &mut Criterion) {
    bench_contender::<Fairq>(c, "fairq");
    bench_contender::<FairqLean>(c, "fairq_lean");
    bench_contender::<Floor>(c, "floor");
    bench_contender::<MutexSwrr>(c, "mutex_swrr");
    bench_contender::<FirqCore>(c, "firq_core");
}

criterion_group!(benches, grants);
criterion_main!(benches);
