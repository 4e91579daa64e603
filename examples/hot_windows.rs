//! The hot-tenant cases held for seconds: the aggregate rate of 1 and 2 callers in 20 ms windows.
//!
//! ```text
//! cargo run --release --example hot_windows -- [--seconds 0.5] [--rounds 3] [--impls fairq,mutex_swrr]
//! ```
//!
//! `compare --hot` times short repetitions and reports their median. This runs each contender on
//! each hot case (`workload::hot_cases`, shallow queues) for `--seconds` with one caller, then
//! with two, and reports the median of its 20 ms windows (Mcycles/s, all callers together) and
//! the two-caller/one-caller ratio. On a shared host the cost of moving a cache line between the
//! two vCPUs changes for minutes at a time; a long run sits in one such stretch, and the
//! `mutex_swrr` row of the same round shows which one.

#[path = "../benches/workload/mod.rs"]
mod workload;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use workload::{hot_cases, set_shallow, Contender, Fairq, FairqLean, MutexSwrr};

const WINDOW: Duration = Duration::from_millis(20);

struct Options {
    seconds: f64,
    rounds: usize,
    impls: Vec<String>,
}

fn options() -> Options {
    let mut options = Options {
        seconds: 0.5,
        rounds: 3,
        impls: vec!["fairq".into(), "mutex_swrr".into()],
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().unwrap_or_else(|| usage(&arg));
        match arg.as_str() {
            "--seconds" => options.seconds = value.parse().unwrap_or_else(|_| usage(&arg)),
            "--rounds" => options.rounds = value.parse().unwrap_or_else(|_| usage(&arg)),
            "--impls" => options.impls = value.split(',').map(str::to_owned).collect(),
            _ => usage(&arg),
        }
    }
    options
}

fn usage(arg: &str) -> ! {
    eprintln!(
        "bad argument {arg}; usage: hot_windows [--seconds S] [--rounds N] \
         [--impls fairq,fairq_lean,mutex_swrr]"
    );
    std::process::exit(2)
}

/// Runs `threads` callers on a fresh contender for `seconds`; the median window's rate.
fn median_window<C: Contender>(tenants: &[(u64, u32)], threads: usize, seconds: f64) -> f64 {
    let contender = C::new(tenants, threads);
    let cycles: Vec<AtomicU64> = (0..threads).map(|_| AtomicU64::new(0)).collect();
    let stop = AtomicBool::new(false);
    let now = fairq::now_ns();
    let mut windows = Vec::new();
    std::thread::scope(|scope| {
        for worker in 0..threads {
            let (contender, cycles, stop) = (&contender, &cycles[worker], &stop);
            scope.spawn(move || {
                let mut tenant = tenants[worker % tenants.len()].0;
                let mut done = 0;
                // Relaxed, here and below: a stop flag and progress counts, read as snapshots.
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..256 {
                        tenant = contender.cycle(tenant, now);
                    }
                    done += 256;
                    cycles.store(done, Ordering::Relaxed);
                }
            });
        }
        let start = Instant::now();
        let (mut last, mut last_at) = (0, start);
        while start.elapsed().as_secs_f64() < seconds {
            std::thread::sleep(WINDOW);
            let total: u64 = cycles.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            let at = Instant::now();
            windows.push((total - last) as f64 / (at - last_at).as_secs_f64() / 1e6);
            (last, last_at) = (total, at);
        }
        stop.store(true, Ordering::Relaxed);
    });
    windows.sort_by(f64::total_cmp);
    windows[windows.len() / 2]
}

fn one_and_two<C: Contender>(tenants: &[(u64, u32)], seconds: f64) -> (f64, f64) {
    (
        median_window::<C>(tenants, 1, seconds),
        median_window::<C>(tenants, 2, seconds),
    )
}

fn main() {
    let options = options();
    set_shallow(true);
    println!(
        "median 20 ms window, Mcycles/s\n{:>6} {:>14} {:>11} {:>9} {:>9} {:>7}",
        "round", "case", "impl", "1 caller", "2 callers", "2c/1c"
    );
    for round in 1..=options.rounds {
        for (case, tenants) in hot_cases() {
            for name in &options.impls {
                let (one, two) = match name.as_str() {
                    "fairq" => one_and_two::<Fairq>(&tenants, options.seconds),
                    "fairq_lean" => one_and_two::<FairqLean>(&tenants, options.seconds),
                    "mutex_swrr" => one_and_two::<MutexSwrr>(&tenants, options.seconds),
                    other => usage(other),
                };
                println!(
                    "{round:>6} {case:>14} {name:>11} {one:>9.2} {two:>9.2} {:>7.2}",
                    two / one
                );
            }
        }
    }
}
