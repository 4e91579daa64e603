//! Quick comparison of grant cycles: fairq against the floor, a mutex SWRR baseline and firq-core.
//!
//! ```text
//! cargo run --release --example compare -- [--quick] [--json] [--threads 1,2,4] [--tenants 1,64]
//! ```
//!
//! Times the same workload as `cargo bench --bench grants` (the code is shared:
//! `benches/workload/mod.rs`). Each figure is the median of at least 5 timed repetitions, each
//! repetition sized by a calibration run. `--quick` (short repetitions) finishes in well under 40 s
//! on a 2-core machine. `--json` prints one JSON document on stdout instead of a table:
//! `{"results": [{"impl", "tenants", "threads", "ns_per_cycle", "cycles_per_sec"}, ...]}`.
//! `--markdown` prints a Markdown table of millions of cycles per second (`benches/scaling.sh`).
//! With two or more threads, `ns_per_cycle` is wall time over all cycles of all threads (the
//! aggregate cost), so `cycles_per_sec` is the aggregate rate.
//!
//! `--hot` measures the hot-tenant cases instead: one tenant, and two of weights 8 and 1, each
//! with a shallow queue (`workload::backlog`), on 1 and 2 threads; the table gives each
//! contender's aggregate rate and the 2-thread/1-thread ratio (`--json`: rows with
//! `"tenants": "1 tenant"` or `"2 tenants 8:1"`). The one- and two-thread repetitions alternate,
//! so a change in the host's speed during the run moves both figures of the ratio alike.

#[path = "../benches/workload/mod.rs"]
mod workload;

use std::time::Duration;

use workload::{
    hot_cases, set_shallow, Contender, Fairq, FairqLean, FirqCore, Floor, MutexSwrr, Prepared,
    IMPLS, TENANTS,
};

struct Options {
    json: bool,
    markdown: bool,
    rep: Duration,
    reps: usize,
    threads: Vec<usize>,
    tenants: Vec<usize>,
    impls: Vec<String>,
    hot: bool,
}

fn list(arg: Option<String>, what: &str) -> Vec<usize> {
    let arg = arg.unwrap_or_else(|| die(&format!("{what} needs a comma-separated list")));
    arg.split(',')
        .map(|n| {
            n.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .unwrap_or_else(|| die(&format!("{what}: not a positive number: {n}")))
        })
        .collect()
}

fn die(message: &str) -> ! {
    eprintln!("compare: {message}");
    eprintln!(
        "usage: compare [--quick] [--json | --markdown] [--reps N] [--threads 1,2] [--tenants 1,64,1024,16384] \
         [--impls fairq,floor,mutex_swrr,firq_core] [--hot]"
    );
    std::process::exit(2)
}

fn options() -> Options {
    let mut options = Options {
        json: false,
        markdown: false,
        rep: Duration::from_millis(100),
        reps: 9,
        threads: vec![1, 2],
        tenants: TENANTS.to_vec(),
        impls: IMPLS.iter().map(|s| s.to_string()).collect(),
        hot: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => {
                options.rep = Duration::from_millis(20);
                options.reps = options.reps.min(7);
            }
            "--json" => options.json = true,
            "--hot" => options.hot = true,
            "--markdown" => options.markdown = true,
            "--reps" => options.reps = list(args.next(), "--reps")[0].max(5),
            "--threads" => options.threads = list(args.next(), "--threads"),
            "--tenants" => options.tenants = list(args.next(), "--tenants"),
            "--impls" => {
                let arg = args.next().unwrap_or_else(|| die("--impls needs a list"));
                options.impls = arg.split(',').map(|s| s.trim().to_string()).collect();
                if let Some(bad) = options.impls.iter().find(|i| !IMPLS.contains(&i.as_str())) {
                    die(&format!("unknown impl {bad}"));
                }
            }
            "--bench" => {} // cargo may pass it through
            "-h" | "--help" => die("help"),
            other => die(&format!("unknown argument {other}")),
        }
    }
    options
}

struct Row {
    name: &'static str,
    tenants: usize,
    threads: usize,
    ns_per_cycle: f64,
}

/// Median ns per cycle (aggregate over threads) of `reps` repetitions of about `rep` each.
fn measure<C: Contender>(tenants: usize, threads: usize, options: &Options) -> f64 {
    timed(&Prepared::<C>::new(tenants, threads), threads, options)
}

fn timed<C: Contender>(prepared: &Prepared<C>, threads: usize, options: &Options) -> f64 {
    let cycles = calibrate(prepared, threads, options);
    median(
        (0..options.reps)
            .map(|_| sample(prepared, cycles))
            .collect(),
    )
}

/// Cycles per repetition of about `options.rep`, from a calibration run that grows until it
/// takes at least 2 ms (it also warms the caches and the branch predictors).
fn calibrate<C: Contender>(prepared: &Prepared<C>, threads: usize, options: &Options) -> u64 {
    let mut cycles = 64u64;
    let per_cycle = loop {
        let took = prepared.time(cycles);
        if took >= Duration::from_millis(2) || cycles >= 1 << 30 {
            break took.as_secs_f64() / prepared.cycles_for(cycles) as f64;
        }
        cycles *= 4;
    };
    ((options.rep.as_secs_f64() / per_cycle) as u64).max(threads as u64)
}

/// One timed repetition: ns per cycle.
fn sample<C: Contender>(prepared: &Prepared<C>, cycles: u64) -> f64 {
    let took = prepared.time(cycles);
    took.as_nanos() as f64 / prepared.cycles_for(cycles) as f64
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// One contender on one and on two threads over `tenants`, their repetitions alternated, so
/// that a change in the host's speed during the run moves both figures of the ratio alike:
/// median ns per cycle of each.
fn one_and_two<C: Contender>(tenants: &[(u64, u32)], options: &Options) -> (f64, f64) {
    let one = Prepared::<C>::with_tenants(tenants.to_vec(), 1);
    let two = Prepared::<C>::with_tenants(tenants.to_vec(), 2);
    let (cycles_one, cycles_two) = (calibrate(&one, 1, options), calibrate(&two, 2, options));
    let (mut samples_one, mut samples_two) = (Vec::new(), Vec::new());
    for _ in 0..options.reps {
        samples_one.push(sample(&one, cycles_one));
        samples_two.push(sample(&two, cycles_two));
    }
    (median(samples_one), median(samples_two))
}

/// `one_and_two` for the contender called `name`.
fn one_and_two_named(name: &str, tenants: &[(u64, u32)], options: &Options) -> (f64, f64) {
    match name {
        "fairq" => one_and_two::<Fairq>(tenants, options),
        "fairq_lean" => one_and_two::<FairqLean>(tenants, options),
        "floor" => one_and_two::<Floor>(tenants, options),
        "mutex_swrr" => one_and_two::<MutexSwrr>(tenants, options),
        _ => one_and_two::<FirqCore>(tenants, options),
    }
}

/// `--hot`: every contender on each hot case, 1 and 2 threads, in one run.
fn hot(options: &Options) {
    set_shallow(true);
    let mut json = Vec::new();
    if !options.json {
        println!(
            "hot tenants, shallow queues: aggregate Mcycles/s\n{:>14} {:>11} {:>10} {:>10} {:>8}",
            "case", "impl", "1 thread", "2 threads", "2t/1t"
        );
    }
    for (case, tenants) in hot_cases() {
        for name in IMPLS {
            if !options.impls.iter().any(|i| i == name) {
                continue;
            }
            let (one, two) = one_and_two_named(name, &tenants, options);
            if options.json {
                for (threads, ns) in [(1, one), (2, two)] {
                    json.push(format!(
                        "    {{\"impl\": \"{name}\", \"tenants\": \"{case}\", \"threads\": {threads}, \"ns_per_cycle\": {ns:.2}, \"cycles_per_sec\": {:.0}}}",
                        1e9 / ns
                    ));
                }
            } else {
                println!(
                    "{case:>14} {name:>11} {:>10.2} {:>10.2} {:>8.2}",
                    1e3 / one,
                    1e3 / two,
                    one / two
                );
            }
        }
    }
    if options.json {
        println!("{{\"results\": [\n{}\n]}}", json.join(",\n"));
    }
}

fn main() {
    let options = options();
    if options.hot {
        hot(&options);
        return;
    }
    let mut rows = Vec::new();
    for &threads in &options.threads {
        for &tenants in &options.tenants {
            for name in IMPLS {
                if !options.impls.iter().any(|i| i == name) {
                    continue;
                }
                let ns_per_cycle = match name {
                    "fairq" => measure::<Fairq>(tenants, threads, &options),
                    "fairq_lean" => measure::<FairqLean>(tenants, threads, &options),
                    "floor" => measure::<Floor>(tenants, threads, &options),
                    "mutex_swrr" => measure::<MutexSwrr>(tenants, threads, &options),
                    _ => measure::<FirqCore>(tenants, threads, &options),
                };
                if !options.json && !options.markdown {
                    eprintln!("{name:>10}  T={tenants:<6} threads={threads:<2} {ns_per_cycle:>10.1} ns/cycle");
                }
                rows.push(Row {
                    name,
                    tenants,
                    threads,
                    ns_per_cycle,
                });
            }
        }
    }
    if options.json {
        print_json(&rows);
    } else if options.markdown {
        print_markdown(&rows, &options);
    } else {
        print_table(&rows, &options);
    }
}

fn print_json(rows: &[Row]) {
    let entries: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "    {{\"impl\": \"{}\", \"tenants\": {}, \"threads\": {}, \"ns_per_cycle\": {:.2}, \"cycles_per_sec\": {:.0}}}",
                r.name,
                r.tenants,
                r.threads,
                r.ns_per_cycle,
                1e9 / r.ns_per_cycle
            )
        })
        .collect();
    println!("{{\"results\": [\n{}\n]}}", entries.join(",\n"));
}

/// One printed row: threads, tenants, ns per cycle of fairq, fairq_lean (every feature off),
/// floor, mutex_swrr and firq_core (`None` where that impl was not run), and the ratios
/// fairq/floor, mutex_swrr/fairq and firq_core/fairq as text.
type TableRow = (usize, usize, [Option<f64>; 5], [String; 3]);

/// The rows of both tables, per (threads, tenants) in the options' order.
fn table_rows(rows: &[Row], options: &Options) -> Vec<TableRow> {
    let get = |name: &str, tenants: usize, threads: usize| {
        rows.iter()
            .find(|r| r.name == name && r.tenants == tenants && r.threads == threads)
            .map(|r| r.ns_per_cycle)
    };
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{:.2}", a / b),
        _ => "-".to_string(),
    };
    let mut out = Vec::new();
    for &threads in &options.threads {
        for &tenants in &options.tenants {
            let [fairq, lean, floor, mutex, firq] = IMPLS.map(|n| get(n, tenants, threads));
            let ratios = [ratio(fairq, floor), ratio(mutex, fairq), ratio(firq, fairq)];
            out.push((threads, tenants, [fairq, lean, floor, mutex, firq], ratios));
        }
    }
    out
}

fn print_table(rows: &[Row], options: &Options) {
    let cell = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
    println!(
        "{:>7} {:>7} | {:>10} {:>10} {:>10} {:>11} {:>10} | {:>11} {:>16} {:>15}",
        "threads",
        "tenants",
        "fairq",
        "fairq_lean",
        "floor",
        "mutex_swrr",
        "firq_core",
        "fairq/floor",
        "mutex_swrr/fairq",
        "firq_core/fairq"
    );
    println!(
        "{:>7} {:>7} | ns per cycle (aggregate over threads)",
        "", ""
    );
    for (threads, tenants, [fairq, lean, floor, mutex, firq], [r1, r2, r3]) in
        table_rows(rows, options)
    {
        println!(
            "{:>7} {:>7} | {:>10} {:>10} {:>10} {:>11} {:>10} | {:>11} {:>16} {:>15}",
            threads,
            tenants,
            cell(fairq),
            cell(lean),
            cell(floor),
            cell(mutex),
            cell(firq),
            r1,
            r2,
            r3
        );
    }
}

/// Aggregate millions of cycles per second, one row per (tenants, threads), plus the ratios.
fn print_markdown(rows: &[Row], options: &Options) {
    let rate = |v: Option<f64>| v.map_or("-".to_string(), |ns| format!("{:.2}", 1e3 / ns));
    println!(
        "| threads | tenants | fairq Mcyc/s | fairq_lean Mcyc/s | floor Mcyc/s | mutex_swrr Mcyc/s \
         | firq_core Mcyc/s | fairq/floor (ns) | mutex_swrr/fairq | firq_core/fairq |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (threads, tenants, [fairq, lean, floor, mutex, firq], [r1, r2, r3]) in
        table_rows(rows, options)
    {
        println!(
            "| {threads} | {tenants} | {} | {} | {} | {} | {} | {r1} | {r2} | {r3} |",
            rate(fairq),
            rate(lean),
            rate(floor),
            rate(mutex),
            rate(firq),
        );
    }
}
