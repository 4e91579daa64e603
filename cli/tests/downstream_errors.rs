//! Runs the real `fairq` binary on the built-in `downstream-errors` scenario (two downstreams,
//! one failing a fifth of its calls, each after a 1 s timeout, from 07:00 to 12:00) and checks
//! what load shedding must show: under fairq the healthy downstream's tenants keep their p95 and
//! throughput, the failing downstream's pool is cut within one window (plus the timeout before
//! the first error is known) and its in-flight count falls, and both are back within a minute of
//! the failure's end; under fifo the failing calls take the healthy tenants' slots.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fairq");
/// The scenario's judging window and failure timeout, s.
const WINDOW_S: u64 = 5;
const TIMEOUT_S: u64 = 1;

fn run() -> String {
    let out = Command::new(BIN)
        .args([
            "simulate",
            "-s",
            "downstream-errors",
            "--no-chart",
            "--tables",
            "--schedulers",
            "fifo,fairq",
        ])
        .output()
        .expect("the fairq binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The lines of one scheduler's section.
fn section<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| !l.starts_with(&format!("== {name}:")))
        .take_while(|l| !l.is_empty())
        .collect()
}

/// The numbers in `line`, in order.
fn numbers(line: &str) -> Vec<f64> {
    line.split(|c: char| !(c.is_ascii_digit() || c == '.'))
        .filter_map(|w| w.trim_matches('.').parse().ok())
        .collect()
}

/// The first of `lines` that starts with `start` (after its indent).
fn line<'a>(lines: &[&'a str], start: &str) -> &'a str {
    lines
        .iter()
        .find(|l| l.trim_start().starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in\n{}", lines.join("\n")))
}

/// "p95 before / during / after ms, grants/s before / during / after" of a healthy tenant.
fn healthy(lines: &[&str], tenant: &str) -> ([f64; 3], [f64; 3]) {
    let found = lines
        .iter()
        .find(|l| l.trim_start().starts_with(&format!("{tenant} ")) && l.contains(" p95 "))
        .unwrap_or_else(|| panic!("no p95 line of {tenant}"));
    let n = numbers(found.split_once(" p95 ").unwrap().1);
    assert_eq!(n.len(), 6, "{n:?}");
    ([n[0], n[1], n[2]], [n[3], n[4], n[5]])
}

#[test]
fn shedding_protects_the_failing_downstream_and_the_healthy_one_keeps_its_p95_and_throughput() {
    let text = run();
    let fairq = section(&text, "fairq");
    for tenant in ["api-gold", "api-free"] {
        let (p95, rate) = healthy(&fairq, tenant);
        assert!(
            p95[1] <= 1.5 * p95[0] + 1.0,
            "{tenant}: p95 {} ms while failing vs {} ms before",
            p95[1],
            p95[0]
        );
        assert!(
            (rate[1] - rate[0]).abs() <= 0.1 * rate[0],
            "{tenant}: {} grants/s while failing vs {} before",
            rate[1],
            rate[0]
        );
        // Nothing of theirs refused: the columns from q_full to shed (after w, offered,
        // granted) are all 0.
        let row = numbers(line(&fairq, &format!("{tenant} ")));
        assert!(row[3..9].iter().all(|&n| n == 0.0), "{tenant}: {row:?}");
    }
    let limit = numbers(line(&fairq, "pool limit:"));
    // "first cut S s into the failure (lowest L), back at its bound (B) T s after it"
    assert!(
        limit[0] as u64 <= WINDOW_S + TIMEOUT_S + 1,
        "first cut after {} s: {limit:?}",
        limit[0]
    );
    assert_eq!(limit[1], 1.0, "the limit goes down to 1: {limit:?}");
    assert!(limit[3] <= 60.0, "back at its bound after {} s", limit[3]);
    let in_flight = numbers(line(&fairq, "in flight:"));
    // "half its level before S s into the failure, 90% of it again T s after it":
    // [halved after, 90, restored after]
    assert!(
        in_flight[0] <= (3 * WINDOW_S + TIMEOUT_S + 1) as f64,
        "in flight halved after {} s",
        in_flight[0]
    );
    assert!(
        in_flight[2] <= 60.0,
        "in flight back after {} s",
        in_flight[2]
    );
    let search = numbers(line(&fairq, "search     bound"));
    // bound, before, failing, after, granted, failed
    assert!(search[2] <= 0.5 * search[1], "search in flight {search:?}");
    let shed: f64 = ["search-gold", "search-free"]
        .iter()
        .map(|t| numbers(line(&fairq, &format!("{t} ")))[8])
        .sum();
    assert!(shed > 0.0, "no downstream_shedding refusals");

    // Without pools the failing calls take the shared slots: the healthy tenants wait.
    let fifo = section(&text, "fifo");
    let (p95, rate) = healthy(&fifo, "api-gold");
    assert!(
        p95[1] >= 10.0 * (p95[0] + 1.0) && rate[1] < 0.5 * rate[0],
        "fifo: api-gold p95 {p95:?} grants/s {rate:?}"
    );
    let fifo_failed = numbers(line(&fifo, "search     bound"))[5];
    assert!(
        search[5] * 4.0 < fifo_failed,
        "shedding spares the failing downstream: {} failed calls vs {fifo_failed} under fifo",
        search[5]
    );
}
