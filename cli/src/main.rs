//! `fairq`: the fair admission queue's command line.
//!
//! - `fairq simulate` (also a bare `fairq`, and `cargo run --release`): replays one arrival trace
//!   through a FIFO queue, deficit round robin and the real fairq engine, on a virtual clock, and
//!   reports per-tenant waits, refusals, fair-share ratios and starvation against seed 003's
//!   thresholds, with an SVG chart.
//! - `fairq bench`: grants per second of the engine on this machine.
//! - `fairq fleet-replica` (hidden, feature `fleet`): one replica for the fleet harness.
//!
//! This crate holds everything the command needs (argument parsing, charts, progress, TOML), so
//! none of it reaches the C library.

mod bench;
mod chart;
#[cfg(feature = "fleet")]
mod fleet;
mod report;
mod scenario;
mod sched;
mod sim;
mod trace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::scenario::Scenario;
use crate::sim::RunResult;
use crate::trace::Trace;

#[derive(Parser)]
#[command(
    name = "fairq",
    version,
    about = "Weighted fair admission queue: simulate FIFO vs DRR vs fairq, or benchmark the engine",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    simulate: SimulateArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Replay one arrival trace through fifo, drr and fairq (the default command).
    Simulate(SimulateArgs),
    /// Measure the engine's grants per second (enqueue -> next_grant -> complete cycles).
    Bench(BenchArgs),
    /// One replica of the fleet harness (cli/tests/fleet.rs): JSON lines on stdout.
    #[cfg(feature = "fleet")]
    #[command(hide = true)]
    FleetReplica(fleet::ReplicaArgs),
}

#[derive(Args, Clone)]
struct SimulateArgs {
    /// Scenario TOML file, or the name of one under examples/scenarios/ [default: the built-in
    /// noisy-neighbour]
    #[arg(long, short)]
    scenario: Option<String>,
    /// Drop this tenant group from the trace (a baseline run, e.g. `--without burster`).
    #[arg(long, value_name = "NAME")]
    without: Vec<String>,
    /// Override the scenario's virtual duration, s.
    #[arg(long, value_name = "SECONDS")]
    duration: Option<f64>,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Schedulers to run, in report order.
    #[arg(long, value_delimiter = ',', default_value = "fifo,drr,fairq")]
    schedulers: Vec<String>,
    /// Print only the JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// Where to write the SVG chart.
    #[arg(long, default_value = "fairq-report.svg", value_name = "PATH")]
    chart: PathBuf,
    /// Do not write the chart.
    #[arg(long)]
    no_chart: bool,
}

#[derive(Args)]
struct BenchArgs {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 0.5)]
    seconds: f64,
    /// Backlogged tenant counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,64,4096")]
    tenants: Vec<u32>,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Bench(args)) => run_bench(&args),
        Some(Command::Simulate(args)) => simulate(&args),
        #[cfg(feature = "fleet")]
        Some(Command::FleetReplica(args)) => fleet::run(&args).map(|()| ExitCode::SUCCESS),
        None => simulate(&cli.simulate),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fairq: {e}");
            ExitCode::from(2)
        }
    }
}

fn load_scenario(args: &SimulateArgs) -> Result<Scenario, String> {
    let mut scenario = match &args.scenario {
        None => Scenario::builtin(),
        Some(arg) => {
            let path = Path::new(arg);
            let named = Path::new("examples/scenarios").join(format!("{arg}.toml"));
            if path.exists() || !named.exists() {
                Scenario::load(path)
            } else {
                Scenario::load(&named)
            }
            .map_err(|e| e.to_string())?
        }
    };
    if !args.without.is_empty() {
        scenario = scenario.without(&args.without).map_err(|e| e.to_string())?;
    }
    if let Some(d) = args.duration {
        if !(d > 0.0 && d.is_finite()) {
            return Err(format!("--duration must be > 0, got {d}"));
        }
        scenario.duration_s = d;
    }
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    for name in &args.schedulers {
        if !sched::NAMES.contains(&name.as_str()) {
            return Err(format!(
                "unknown scheduler `{name}`; choose from {}",
                sched::NAMES.join(", ")
            ));
        }
    }
    Ok(scenario)
}

fn simulate(args: &SimulateArgs) -> Result<ExitCode, String> {
    let started = Instant::now();
    let scenario = load_scenario(args)?;
    let trace = Trace::generate(&scenario);
    let config = scenario.engine_config();
    let virtual_s = trace.duration_ns / trace::SEC;
    let bar = ProgressBar::with_draw_target(
        Some(virtual_s * args.schedulers.len() as u64),
        ProgressDrawTarget::hidden(),
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} simulating {msg} [{bar:40}] {pos}/{len} virtual s ({eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(format!("{} x{}", scenario.name, args.schedulers.len()));
    let runs: Vec<RunResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = args
            .schedulers
            .iter()
            .map(|name| {
                let (scenario, trace, config, bar) = (&scenario, &trace, &config, &bar);
                scope.spawn(move || {
                    let s = sched::build(name, &scenario.queue, config, &trace.tenants);
                    sim::run(scenario, trace, s, Some(bar))
                })
            })
            .collect();
        // The bar appears only when the run takes more than a second.
        while !handles.iter().all(|h| h.is_finished()) {
            if started.elapsed() > Duration::from_secs(1) && bar.is_hidden() {
                bar.set_draw_target(ProgressDrawTarget::stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("a scheduler run panicked"))
            .collect()
    });
    bar.finish_and_clear();

    let mut anomalies = 0;
    for run in &runs {
        for a in &run.anomalies {
            eprintln!("fairq: ANOMALY in {}: {a}", run.name);
            anomalies += 1;
        }
    }
    if args.json {
        let doc = report::json(&scenario, &runs);
        println!(
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON serialises")
        );
    } else {
        println!("{}", report::header(&scenario, trace.tenants.len() as u64));
        if !scenario.description.is_empty() {
            println!("{}", scenario.description);
        }
        println!(
            "{} arrivals in the trace, replayed identically through every scheduler",
            trace.arrivals.len()
        );
        println!();
        for run in &runs {
            print!("{}", report::table(run));
            for v in report::verdicts(run) {
                println!("  {}", v.line());
            }
            println!();
        }
        println!("{}", report::LEGEND);
    }
    if !args.no_chart {
        chart::write(&args.chart, &scenario.name, &runs)?;
    }
    let done = format!(
        "{}wall {:.2} s",
        if args.no_chart {
            String::new()
        } else {
            format!("chart written to {}; ", args.chart.display())
        },
        started.elapsed().as_secs_f64()
    );
    if args.json {
        eprintln!("{done}");
    } else {
        println!("{done}");
    }
    Ok(if anomalies > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn run_bench(args: &BenchArgs) -> Result<ExitCode, String> {
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        return Err(format!("--seconds must be > 0, got {}", args.seconds));
    }
    println!(
        "fairq bench: next_grant -> complete -> enqueue cycles, every tenant backlogged, \
         weights 8/4/2/1, {} s each",
        args.seconds
    );
    println!(
        "{:>7} {:>8} {:>12} {:>16}",
        "threads", "tenants", "grants/s", "ns/cycle/thread"
    );
    for &threads in &args.threads {
        for &tenants in &args.tenants {
            if threads == 0 || tenants == 0 {
                return Err("--threads and --tenants must be > 0".into());
            }
            let m = bench::measure(threads, tenants, Duration::from_secs_f64(args.seconds))?;
            println!(
                "{:>7} {:>8} {:>12.0} {:>16.1}",
                m.threads, m.tenants, m.grants_per_s, m.ns_per_cycle
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
