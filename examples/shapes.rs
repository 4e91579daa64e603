//! Prints the traffic-shape table of `docs/design.md` ("Scheduling discipline"): each request's
//! wait, in grants given to others before it, under plain arrival order, under fairq with the
//! light-tenant lane off, and under fairq as configured by default.
//!
//! `cargo run --release --example shapes` (deterministic; `docs/generate.sh` keeps the table).
#[path = "../tests/common/shapes.rs"]
mod shapes;

use fairq::Config;
use shapes::{Fair, Fifo, Sched, Waits};

/// Grants per row.
const GRANTS: u64 = 200_000;
const SEED: u64 = 7;

fn columns(
    tenants: u64,
    connections: usize,
    permits: u32,
    run: &dyn Fn(&mut dyn Sched) -> Waits,
) -> String {
    let lane = |on: bool| Config {
        light_lane: on,
        ..Config::default()
    };
    let fifo = run(&mut Fifo::new(permits));
    let off = run(&mut Fair::new(lane(false), tenants, connections, permits));
    let on = run(&mut Fair::new(lane(true), tenants, connections, permits));
    format!("{fifo} | {off} | {on}")
}

fn main() {
    println!("| shape: tenants, connections, permits | arrival order | fairq, lane off | fairq |");
    println!("|---|---|---|---|");
    for (n, c, p) in [(100, 32, 8), (1000, 64, 8), (10, 32, 8), (1000, 256, 64)] {
        let row = columns(n, c, p, &|s| shapes::many_light(s, n, c, GRANTS, SEED));
        println!("| many light tenants: {n}, {c}, {p} | {row} |");
    }
    let (n, light, burst, p) = (100, 32, 32, 8);
    let row = columns(n, light + burst, p, &|s| {
        shapes::burst(s, n, light, burst, GRANTS, SEED)
    });
    println!("| one tenant bursts, the others' waits: {n}, {light} + {burst}, {p} | {row} |");
}
