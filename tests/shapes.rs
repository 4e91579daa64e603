//! Traffic shapes against references: the many-light-tenants shape (most arrivals from tenants
//! with nothing queued) keeps its tail within reach of fairq without the light-tenant lane, and
//! a burst by one tenant costs the others less than plain arrival order does. The same runs make
//! the table in `docs/design.md` (`cargo run --release --example shapes`).

mod common;

use common::shapes::{self, Fair, Fifo, Waits};
use fairq::Config;

const GRANTS: u64 = 200_000;
const SEED: u64 = 7;

fn lane(on: bool) -> Config {
    Config {
        light_lane: on,
        ..Config::default()
    }
}

#[test]
fn many_light_tenants_wait_about_as_long_as_without_the_lane() {
    for (n, c, p) in [(100, 32, 8), (1000, 64, 8), (10, 32, 8), (1000, 256, 64)] {
        let run =
            |on: bool| shapes::many_light(&mut Fair::new(lane(on), n, c, p), n, c, GRANTS, SEED);
        let (off, on) = (run(false), run(true));
        eprintln!("{n} tenants, {c} connections, {p} permits: lane off {off}, on {on}");
        assert!(
            on.p99 as f64 <= 1.2 * off.p99 as f64 && on.max as f64 <= 1.5 * off.max as f64,
            "{n}, {c}, {p}: lane on {on} against off {off} (p99 within 1.2x, max 1.5x)"
        );
    }
}

#[test]
fn a_burst_by_one_tenant_costs_the_others_less_than_arrival_order() {
    let (n, light, burst, p) = (100, 32, 32, 8);
    let fifo: Waits = shapes::burst(&mut Fifo::new(p), n, light, burst, GRANTS, SEED);
    let fair = shapes::burst(
        &mut Fair::new(Config::default(), n, light + burst, p),
        n,
        light,
        burst,
        GRANTS,
        SEED,
    );
    eprintln!("the light tenants' waits: arrival order {fifo}, fairq {fair}");
    assert!(
        fair.p50 < fifo.p50 && fair.p99 <= fifo.p99,
        "fairq {fair} against arrival order {fifo}"
    );
}
