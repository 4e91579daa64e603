//! Runs a fixed number of grant cycles of one contender on one thread, for profilers that count
//! instructions (`valgrind --tool=callgrind`) rather than time:
//!
//! ```text
//! cargo build --release --example cycles
//! valgrind --tool=callgrind target/release/examples/cycles fairq 64 200000
//! valgrind --tool=callgrind target/release/examples/cycles fairq hot-8:1 200000
//! ```
//!
//! Arguments: contender (`fairq`, `fairq_lean`, `fairq_core`, `floor`, `mutex_swrr`,
//! `firq_core`), tenants, cycles, and optionally runs (default 1): that many timed runs of
//! `cycles` each on the same contender, one line each, to tell a slow engine from a slow stretch
//! of the host. The workload is `benches/workload`'s. Tenants `hot-1` and `hot-8:1` are the
//! hot-tenant cases of `compare --hot` (one tenant; weights 8 and 1; shallow queues).

#[path = "../benches/workload/mod.rs"]
mod workload;

use workload::{
    hot_cases, set_shallow, tenants, Contender, Fairq, FairqCore, FairqLean, FirqCore, Floor,
    MutexSwrr, Prepared,
};

fn run<C: Contender>(tenants: Vec<(u64, u32)>, cycles: u64, runs: u32) {
    let prepared = Prepared::<C>::with_tenants(tenants, 1);
    for _ in 0..runs {
        let took = prepared.time(cycles);
        eprintln!(
            "{:.1} ns per cycle",
            took.as_nanos() as f64 / prepared.cycles_for(cycles) as f64
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let name = args.get(1).map_or("fairq", String::as_str);
    let count = args.get(2).map_or("64", String::as_str);
    let cycles = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let runs = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(1);
    let chosen = match count {
        "hot-1" | "hot-8:1" => {
            set_shallow(true);
            let index = usize::from(count == "hot-8:1");
            hot_cases()[index].1.clone()
        }
        other => match other.parse() {
            Ok(n) => tenants(n),
            Err(_) => {
                eprintln!("cycles: tenants must be a number, hot-1 or hot-8:1, not {other}");
                std::process::exit(2);
            }
        },
    };
    match name {
        "fairq" => run::<Fairq>(chosen, cycles, runs),
        "fairq_lean" => run::<FairqLean>(chosen, cycles, runs),
        "fairq_core" => run::<FairqCore>(chosen, cycles, runs),
        "floor" => run::<Floor>(chosen, cycles, runs),
        "mutex_swrr" => run::<MutexSwrr>(chosen, cycles, runs),
        "firq_core" => run::<FirqCore>(chosen, cycles, runs),
        other => {
            eprintln!("cycles: unknown contender {other}");
            std::process::exit(2);
        }
    }
}
