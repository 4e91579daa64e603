//! Runs a fixed number of grant cycles of one contender on one thread, for a profiler.
//!
//! ```text
//! cargo build --profile profiling --example cycle_profile
//! valgrind --tool=callgrind target/profiling/examples/cycle_profile fairq_lean 200000 1
//! ```
//!
//! Arguments: the contender (`fairq`, `fairq_lean`, `floor`, `mutex_swrr`), the cycles, the
//! tenants. The workload is `compare`'s (`benches/workload/mod.rs`), one thread, every tenant
//! backlogged. Instruction counts do not move with the host's load, so two runs with different
//! cycle counts give the instructions of one cycle (their difference over the extra cycles),
//! comparable across builds where timings are not.

#[path = "../benches/workload/mod.rs"]
mod workload;

use workload::{Contender, Fairq, FairqLean, Floor, MutexSwrr};

fn run<C: Contender>(cycles: u64, tenants: usize) {
    let tenants = workload::tenants(tenants);
    let contender = C::new(&tenants, 1);
    let now = fairq::now_ns();
    let mut tenant = tenants[0].0;
    for _ in 0..cycles {
        tenant = contender.cycle(tenant, now);
    }
    std::hint::black_box(tenant);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: cycle_profile fairq|fairq_lean|floor|mutex_swrr CYCLES TENANTS";
    let [which, cycles, tenants] = args.as_slice() else {
        eprintln!("{usage}");
        std::process::exit(2)
    };
    let (Ok(cycles), Ok(tenants)) = (cycles.parse::<u64>(), tenants.parse::<usize>()) else {
        eprintln!("{usage}");
        std::process::exit(2)
    };
    match which.as_str() {
        "fairq" => run::<Fairq>(cycles, tenants.max(1)),
        "fairq_lean" => run::<FairqLean>(cycles, tenants.max(1)),
        "floor" => run::<Floor>(cycles, tenants.max(1)),
        "mutex_swrr" => run::<MutexSwrr>(cycles, tenants.max(1)),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2)
        }
    }
}
