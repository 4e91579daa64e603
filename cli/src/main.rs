//! `fairq`: the fair admission queue's command line.
//!
//! - `fairq simulate` (also a bare `fairq`, and `cargo run --release`): replays one arrival trace
//!   through a FIFO queue, deficit round robin, the real fairq engine and the `ideal` reference
//!   (strict priority over the tenants marked bursting), on a virtual clock, and reports
//!   per-tenant waits, refusals, fair-share ratios and starvation against the alert thresholds,
//!   whether the tenants not marked bursting were isolated, and an SVG chart.
//! - `fairq bench`: grants per second of the engine on this machine.
//! - `fairq fleet-replica` (hidden, feature `fleet`): one replica for the fleet harness.
//!
//! This crate holds everything the command needs (argument parsing, charts, progress, TOML), so
//! none of it reaches the C library.
//!
//! Standard output carries the results only, and is the same on every run of the same scenario
//! and seed (the README's simulation block is this output); wall times, the progress bar and
//! warnings go to standard error.

mod bench;
mod chart;
#[cfg(feature = "fleet")]
mod fleet;
mod report;
mod sched;
mod sim;
mod trace;

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::sim::RunResult;
use crate::trace::Trace;
use fairq_cli::scenario::{self, Scenario};

/// The exit statuses, shown under `--help`.
const EXIT_STATUS: &str = "\
Exit status:
  0  the run finished (ALERT lines are results, not failures); also when standard output is
     closed early, as by `fairq simulate | head`
  2  bad arguments, a bad scenario, or an output path that cannot be written (checked before
     the run starts)
  3  the simulation caught a scheduler breaking a rule (a grant before its Retry-After or after
     its deadline); ANOMALY lines on standard error name each case";

#[derive(Parser)]
#[command(
    name = "fairq",
    version,
    about = "Weighted fair admission queue: simulate FIFO vs DRR vs fairq vs ideal isolation, or \
             benchmark the engine",
    args_conflicts_with_subcommands = true,
    after_help = EXIT_STATUS
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    simulate: SimulateArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Replay one arrival trace through fifo, drr, fairq and ideal (the default command).
    #[command(after_help = EXIT_STATUS)]
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
    /// Scenario TOML file, or the name of a built-in one: noisy-neighbour (the default),
    /// tiers-steady, many-tenants, many-light-tenants, retry-storm, downstream-errors (the files
    /// of examples/scenarios/, compiled in)
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
    /// Schedulers to run, in report order [default: fifo,drr,fairq, and ideal when the scenario
    /// marks a tenant bursting]. ideal is the reference of the isolation verdict: without it,
    /// isolation is not judged.
    #[arg(long, value_delimiter = ',')]
    schedulers: Option<Vec<String>>,
    /// Print only the JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// After the verdict, print each scheduler's table of tenants and its checks.
    #[arg(long)]
    tables: bool,
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
    #[arg(long, default_value_t = 0.2)]
    seconds: f64,
    /// Measurements per row of the main table: it gives their median, lowest and highest.
    #[arg(long, default_value_t = 5, value_name = "N")]
    repeat: u32,
    /// Backlogged tenant counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,64,4096")]
    tenants: Vec<u32>,
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Leave out the hot-tenant table (one tenant; two of weights 8 and 1; 1 and 2 threads).
    #[arg(long)]
    no_hot: bool,
    /// Requests queued per tenant in the hot-tenant table (at least 1).
    #[arg(long, default_value_t = bench::DEPTH, value_name = "N")]
    hot_depth: u32,
}

/// Why a command stopped early.
enum Stop {
    /// A bad argument, scenario or output path (exit status 2).
    Error(String),
    /// Standard output was closed (`fairq simulate | head`): end quietly.
    StdoutClosed,
}

impl From<String> for Stop {
    fn from(e: String) -> Self {
        Stop::Error(e)
    }
}

/// Writes `text` to standard output. A closed pipe is not an error worth a message.
fn emit(text: &str) -> Result<(), Stop> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(Stop::StdoutClosed),
        Err(e) => Err(Stop::Error(format!("cannot write to standard output: {e}"))),
    }
}

/// Writes a line to standard error; a closed standard error is ignored.
fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Command::Bench(args)) => run_bench(&args),
        Some(Command::Simulate(args)) => simulate(&args),
        #[cfg(feature = "fleet")]
        Some(Command::FleetReplica(args)) => fleet::run(&args)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Stop::Error),
        None => simulate(&cli.simulate),
    };
    match result {
        Ok(code) => code,
        Err(Stop::StdoutClosed) => ExitCode::SUCCESS,
        Err(Stop::Error(e)) => {
            note(&format!("fairq: {e}"));
            ExitCode::from(2)
        }
    }
}

fn load_scenario(args: &SimulateArgs) -> Result<Scenario, String> {
    let mut scenario = match &args.scenario {
        None => Scenario::builtin(),
        Some(arg) => {
            let path = Path::new(arg);
            if path.exists() {
                Scenario::load(path).map_err(|e| e.to_string())?
            } else if let Some(scenario) = Scenario::named(arg) {
                scenario
            } else {
                let names: Vec<&str> = scenario::BUILTIN.iter().map(|(n, _)| *n).collect();
                let hint = scenario::nearest_builtin(arg)
                    .map(|n| format!("; did you mean `{n}`?"))
                    .unwrap_or_default();
                return Err(format!(
                    "no scenario file `{arg}`, and no built-in scenario of that name \
                     (built in: {}){hint}",
                    names.join(", ")
                ));
            }
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
    for name in args.schedulers.iter().flatten() {
        if !sched::NAMES.contains(&name.as_str()) {
            return Err(format!(
                "unknown scheduler `{name}`; choose from {}",
                sched::NAMES.join(", ")
            ));
        }
    }
    Ok(scenario)
}

/// Fails now, before a long run, if the chart could not be written to `path` afterwards. Opens
/// it for writing without truncating it, and removes it again if this check created it.
fn check_writable(path: &Path) -> Result<(), String> {
    if path.is_dir() {
        return Err(format!(
            "cannot write the chart to {}: it is a directory",
            path.display()
        ));
    }
    let existed = path.exists();
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| format!("cannot write the chart to {}: {e}", path.display()))?;
    if !existed {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

/// The schedulers asked for, or the default: fifo, drr, fairq, and the `ideal` reference when
/// the scenario marks a tenant bursting (without one it is only a FIFO queue with bounds).
fn schedulers(args: &SimulateArgs, scenario: &Scenario) -> Vec<String> {
    if let Some(names) = &args.schedulers {
        return names.clone();
    }
    let mut names: Vec<String> = ["fifo", "drr", "fairq"].map(String::from).into();
    if scenario.tenants.iter().any(|t| t.bursting) {
        names.push(sched::REFERENCE.to_string());
    }
    names
}

fn simulate(args: &SimulateArgs) -> Result<ExitCode, Stop> {
    let started = Instant::now();
    let scenario = load_scenario(args)?;
    let schedulers = schedulers(args, &scenario);
    if !args.no_chart {
        check_writable(&args.chart)?;
    }
    let trace = Trace::generate(&scenario);
    let config = scenario.engine_config();
    let virtual_s = trace.duration_ns / trace::SEC;
    let bar = ProgressBar::with_draw_target(
        Some(virtual_s * schedulers.len() as u64),
        ProgressDrawTarget::hidden(),
    );
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} simulating {msg} [{bar:40}] {pos}/{len} virtual s ({eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar.set_message(format!("{} x{}", scenario.name, schedulers.len()));
    let runs: Vec<RunResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = schedulers
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
            note(&format!("fairq: ANOMALY in {}: {a}", run.name));
            anomalies += 1;
        }
    }
    // The chart first: it is complete even if standard output closes early.
    if !args.no_chart {
        chart::write(&args.chart, &scenario, &runs)?;
    }
    let mut text = String::new();
    if args.json {
        let doc = report::json(&scenario, &runs);
        let _ = writeln!(
            text,
            "{}",
            serde_json::to_string_pretty(&doc).expect("JSON serialises")
        );
    } else {
        let header = report::header(&scenario, trace.tenants.len() as u64);
        text += &report::wrap(&header, report::WIDTH, "", "  ");
        if !scenario.description.is_empty() {
            text += &report::wrap(&scenario.description, report::WIDTH, "", "");
        }
        let _ = writeln!(
            text,
            "{} arrivals in the trace, replayed identically through every scheduler\n",
            trace.arrivals.len()
        );
        // The verdict first; the tables and each check behind --tables.
        text += &report::bottom_lines(&runs);
        if args.tables {
            text.push('\n');
            for run in &runs {
                text += &report::table(run);
                for v in report::verdicts(run, report::reference(&runs)) {
                    text += &report::wrap(&v.line(), report::WIDTH, "  ", "        ");
                }
                text += &report::downstreams(&scenario, run);
                text.push('\n');
            }
            let _ = writeln!(text, "{}", report::LEGEND);
            if !scenario.downstreams.is_empty() {
                let _ = writeln!(text, "{}", report::SHED_LEGEND);
            }
        } else {
            let _ = writeln!(
                text,
                "\neach scheduler's tenants and checks: --tables; the JSON document: --json"
            );
        }
        if !args.no_chart {
            let _ = writeln!(text, "chart written to {}", args.chart.display());
        }
    }
    emit(&text)?;
    let walls: Vec<String> = runs
        .iter()
        .map(|r| format!("{} {:.2} s", r.name, r.wall.as_secs_f64()))
        .collect();
    note(&format!(
        "wall {:.2} s ({})",
        started.elapsed().as_secs_f64(),
        walls.join(", ")
    ));
    Ok(if anomalies > 0 {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    })
}

fn run_bench(args: &BenchArgs) -> Result<ExitCode, Stop> {
    if !(args.seconds > 0.0 && args.seconds.is_finite()) {
        return Err(format!("--seconds must be > 0, got {}", args.seconds).into());
    }
    if args.threads.contains(&0) || args.tenants.contains(&0) {
        return Err("--threads and --tenants must be > 0".to_string().into());
    }
    if !(1..=1024).contains(&args.hot_depth) {
        return Err("--hot-depth must be in 1..=1024".to_string().into());
    }
    if !(1..=1000).contains(&args.repeat) {
        return Err("--repeat must be in 1..=1000".to_string().into());
    }
    emit(&format!(
        "fairq bench: next_grant -> complete -> enqueue cycles, every tenant backlogged, \
         weights 8/4/2/1\n{} runs of {} s per row: grants/s over all threads (median, lowest, \
         highest); ns/grant = 1e9 / median\n{:>7} {:>8} {:>12} {:>12} {:>12} {:>9}\n",
        args.repeat,
        args.seconds,
        "threads",
        "tenants",
        "grants/s",
        "lowest",
        "highest",
        "ns/grant"
    ))?;
    let run = Duration::from_secs_f64(args.seconds);
    for &threads in &args.threads {
        for &tenants in &args.tenants {
            let (m, lowest, highest) = bench::repeated(threads, tenants, args.repeat, run)?;
            emit(&format!(
                "{:>7} {:>8} {:>12.0} {:>12.0} {:>12.0} {:>9.1}\n",
                m.threads,
                m.tenants,
                m.grants_per_s,
                lowest,
                highest,
                m.ns_per_grant()
            ))?;
        }
    }
    if args.no_hot {
        return Ok(ExitCode::SUCCESS);
    }
    // One hot tenant, and two of weights 8 and 1, each with `depth` requests queued: a second thread
    // must add throughput, not take it away (the ratio is measured in this run).
    let depth = args.hot_depth;
    emit(&format!(
        "\nhot tenants, {depth} requests queued each, {} s each, one and two threads alternated \
         ({} rounds, medians)\n{:>16} {:>14} {:>14} {:>8}\n",
        args.seconds,
        bench::HOT_ROUNDS,
        "case",
        "1 thread /s",
        "2 threads /s",
        "2t / 1t"
    ))?;
    for (case, tenants, weights) in [("1 tenant", 1, &[1][..]), ("2 tenants 8:1", 2, &[8, 1])] {
        let (one, two) = bench::one_and_two(tenants, weights, depth, run)?;
        emit(&format!(
            "{case:>16} {one:>14.0} {two:>14.0} {:>8.2}\n",
            two / one.max(1.0)
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
