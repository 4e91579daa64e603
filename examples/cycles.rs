//! Runs a fixed number of grant cycles of one contender on one thread, for profilers that count
//! instructions (`valgrind --tool=callgrind`) rather than time:
//!
//! ```text
//! cargo build --release --example cycles
//! valgrind --tool=callgrind target/release/examples/cycles fairq 64 200000
//! ```
//!
//! Arguments: contender (`fairq`, `fairq_lean`, `floor`, `mutex_swrr`, `firq_core`), tenants,
//! cycles. The workload is `benches/workload`'s.

#[path = "../benches/workload/mod.rs"]
mod workload;

use workload::{Contender, Fairq, FairqLean, FirqCore, Floor, MutexSwrr, Prepared};

fn run<C: Contender>(tenants: usize, cycles: u64) {
    let prepared = Prepared::<C>::new(tenants, 1);
    let took = prepared.time(cycles);
    eprintln!(
        "{:.1} ns per cycle",
        took.as_nanos() as f64 / prepared.cycles_for(cycles) as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("fairq", String::as_str);
    let tenants = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(64);
    let cycles = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    match name {
        "fairq" => run::<Fairq>(tenants, cycles),
        "fairq_lean" => run::<FairqLean>(tenants, cycles),
        "floor" => run::<Floor>(tenants, cycles),
        "mutex_swrr" => run::<MutexSwrr>(tenants, cycles),
        "firq_core" => run::<FirqCore>(tenants, cycles),
        other => {
            eprintln!("cycles: unknown contender {other}");
            std::process::exit(2);
        }
    }
}
