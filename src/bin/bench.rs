//! `bench`: C against Rust, on the same machine, in the same run.
//!
//! Every C baseline (`bench/baselines.c`, built by `build.rs`) and its Rust
//! counterpart on the safe `libfabric` API run alternately, round after
//! round, on the same queues; the table gives the medians of all samples of
//! each side, their ratio, and the quartiles of the per-round ratios. Then
//! libfabric's `fi_pingpong` and the Rust pingpong example run over tcp
//! loopback with the same provider, endpoint type, sizes and iterations.
//!
//! `bench pingpong ARGS` runs the Rust pingpong itself (the code of
//! `examples/pingpong.rs`); the benchmark starts its server and client that
//! way.
#![deny(clippy::undocumented_unsafe_blocks)]

#[path = "bench/attribution.rs"]
mod attribution;
#[path = "bench/baselines.rs"]
// The one-shot calls serve the parity tests.
#[allow(dead_code)]
mod baselines;
#[path = "bench/micro.rs"]
mod micro;
#[path = "bench/pingpong.rs"]
mod pingpong;
#[path = "../../examples/pingpong.rs"]
// Only `run` is used here; `main` is the example's.
#[allow(dead_code)]
mod pingpong_example;
#[path = "bench/report.rs"]
mod report;

use micro::{Case, Kind, Queues, CASES};
use pingpong::{Run, Tool};
use report::{Counted, Line, SizePoint, Target};
use std::collections::HashMap;
use std::ffi::OsString;
use std::process::{exit, Command};
use std::time::{Duration, Instant};

const USAGE: &str = "\
Usage:
  bench [OPTIONS]               C baselines against the Rust safe API, then
                                fi_pingpong against the Rust pingpong
  bench pingpong [OPTIONS]      the Rust pingpong itself (see `bench pingpong -h`)

C and Rust run alternately, round after round, on the same queues. The
table gives the medians of all C and all Rust samples and their ratio, with
the quartiles of the per-round ratios, which show how noisy the rounds were.

Options:
  --quick               a short run (about a minute)
  --only micro|pingpong run one part
  --rounds N            rounds of the per-call micro-benchmarks (31; quick: 7);
                        the wake-up ones run four times as many, shorter
  --pingpong-rounds N   most rounds of each pingpong size (40; quick: 5); no
                        round starts after 3 minutes of pingpong (quick: 30 s)
  --markdown FILE       also write the results as a markdown table
  --plot FILE.svg       also write an SVG plot of the pingpong results
  --instructions        only count the instructions per call (per wake-up) of
                        each micro-benchmark, C and Rust, with valgrind's
                        callgrind; a full run prints them after the timings
                        (they do not depend on the load of the machine)
  --where               with --instructions: for each per-call case run,
                        where the instructions of each side's own code go,
                        per source function (a run of its own per case
                        and side: choose them with --cases and --providers)
  --listing             with --where: also each instruction of that code
                        run at least half as often as the case's call, its
                        count per call, its disassembly and its source line
  --providers P,P       the providers of the micro-benchmarks (default:
                        tcp,udp;ofi_rxd,tcp;ofi_rxm; quote the semicolons)
  --batches N,N         the batch sizes of the fi_cq_read case (default
                        1,8,64; at most 64)
  --cases WORD,WORD     only the micro-benchmarks whose id contains one of
                        the words (ids: cq_read_empty, eq_write_read,
                        eq_read_queued, eq_read_connreq, trywait_empty,
                        wake_sread, wake_waiter, wake_tokio, rma_write,
                        rma_read, rma_writedata; the rma ones run on the
                        RDM providers only)
  -h, --help            this help
";

/// Pingpong latency ratio at most, bandwidth ratio at least.
const LATENCY_TARGET: f64 = 1.03;
const BANDWIDTH_TARGET: f64 = 0.97;
/// The pingpong sizes.
const SIZES: [usize; 3] = [64, 4096, 65536];
/// Wake-up cases run this many rounds per round of the per-call cases.
const WAKE_ROUNDS_PER_ROUND: usize = 4;
/// Pingpong rounds run whatever the time budget says.
const MIN_PINGPONG_ROUNDS: usize = 3;

struct Settings {
    quick: bool,
    micro: bool,
    pingpong: bool,
    micro_rounds: usize,
    per_call_iters: u64,
    wake_samples: u64,
    pingpong_rounds: usize,
    /// Iterations of each pingpong size.
    pingpong_iters: [usize; 3],
    /// No new pingpong round starts after this much time in the pingpong part
    /// (once MIN_PINGPONG_ROUNDS are done).
    pingpong_budget: Duration,
    markdown: Option<String>,
    plot: Option<String>,
    instructions: bool,
    /// `--where`: attribute the instructions of each per-call case run.
    attribute: bool,
    /// `--listing`: with `--where`, also list each own instruction run.
    listing: bool,
    providers: Vec<String>,
    batches: Vec<usize>,
    /// `--cases`: words of the case ids to run; empty: all.
    cases: Vec<String>,
}

impl Settings {
    fn new(quick: bool) -> Self {
        Settings {
            quick,
            micro: true,
            pingpong: true,
            micro_rounds: if quick { 7 } else { 31 },
            per_call_iters: if quick { 5_000 } else { 20_000 },
            wake_samples: 60,
            pingpong_rounds: if quick { 5 } else { 40 },
            pingpong_iters: if quick {
                [1_000, 1_000, 500]
            } else {
                [5_000, 5_000, 2_000]
            },
            pingpong_budget: Duration::from_secs(if quick { 30 } else { 180 }),
            markdown: None,
            plot: None,
            instructions: false,
            attribute: false,
            listing: false,
            providers: micro::PROVIDERS.iter().map(|p| p.to_string()).collect(),
            batches: micro::BATCHES.to_vec(),
            cases: Vec::new(),
        }
    }
}

fn parse(args: &[String]) -> Result<Option<Settings>, String> {
    let mut s = Settings::new(args.iter().any(|a| a == "--quick"));
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--quick" => {}
            "--instructions" => s.instructions = true,
            "--where" => s.attribute = true,
            "--listing" => s.listing = true,
            "--markdown" => s.markdown = Some(value(arg)?),
            "--plot" => s.plot = Some(value(arg)?),
            "--rounds" | "--pingpong-rounds" => {
                let n: usize = value(arg)?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("{arg} needs a positive number"))?;
                if arg == "--rounds" {
                    s.micro_rounds = n;
                } else {
                    s.pingpong_rounds = n;
                }
            }
            "--providers" => {
                s.providers = value(arg)?
                    .split(',')
                    .filter(|p| !p.is_empty())
                    .map(str::to_string)
                    .collect();
                if s.providers.is_empty() {
                    return Err("--providers needs at least one provider".into());
                }
            }
            "--batches" => {
                s.batches = value(arg)?
                    .split(',')
                    .map(|b| {
                        b.parse()
                            .ok()
                            .filter(|&n| (1..=micro::MAX_BATCH).contains(&n))
                            .ok_or(format!(
                                "--batches: {b:?} is not a size in 1..={}",
                                micro::MAX_BATCH
                            ))
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--cases" => {
                s.cases = value(arg)?
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect();
                let known = |w: &String| CASES.iter().any(|c| c.id.contains(w.as_str()));
                if let Some(w) = s.cases.iter().find(|w| !known(w)) {
                    return Err(format!("--cases: no case id contains {w:?}"));
                }
            }
            "--only" => match value(arg)?.as_str() {
                "micro" => s.pingpong = false,
                "pingpong" => s.micro = false,
                other => return Err(format!("--only: {other:?} is neither micro nor pingpong")),
            },
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if s.attribute && !s.instructions {
        return Err("--where goes with --instructions".into());
    }
    if s.listing && !s.attribute {
        return Err("--listing goes with --where".into());
    }
    Ok(Some(s))
}

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    match args.first().and_then(|a| a.to_str()) {
        Some("pingpong") => exit(pingpong_example::run(args.into_iter().skip(1))),
        Some("case") => exit(run_case(&args[1..])),
        _ => {}
    }
    let args: Vec<String> = match args.into_iter().map(OsString::into_string).collect() {
        Ok(a) => a,
        Err(a) => fail(&format!("argument {a:?} is not UTF-8")),
    };
    let settings = match parse(&args) {
        Ok(Some(s)) => s,
        Ok(None) => {
            print!("{USAGE}");
            return;
        }
        Err(e) => {
            eprintln!("bench: {e}\n\n{USAGE}");
            exit(2);
        }
    };
    if settings.instructions {
        match instructions(&settings) {
            Ok(counted) => {
                print!("{}", report::instructions_text(&counted, &HashMap::new()));
                print_missed_instructions(&counted);
                if settings.attribute {
                    if let Err(e) = print_where(&counted, &settings) {
                        fail(&e);
                    }
                }
            }
            Err(e) => fail(&e),
        }
        return;
    }
    let started = Instant::now();
    let load_before = load_average();
    let mut lines = Vec::new();
    let mut points = Vec::new();
    if settings.micro {
        lines.extend(micro_benchmarks(&settings));
    }
    if settings.pingpong {
        let (pp_lines, pp_points) = pingpong_benchmarks(&settings);
        lines.extend(pp_lines);
        points = pp_points;
    }
    let context = format!(
        "providers {} on 127.0.0.1 (pingpong: tcp), libfabric {}; {}run of {:.0} s; load average {} before, {} after",
        settings.providers.join(", "),
        libfabric_version(),
        if settings.quick { "quick " } else { "" },
        started.elapsed().as_secs_f64(),
        load_before,
        load_average()
    );
    // Instruction counts do not depend on the load: they tell a real cost
    // from noise when a timing misses its target.
    let counted = if settings.micro && !settings.quick && valgrind_available() {
        instructions(&settings).unwrap_or_else(|e| {
            eprintln!("bench: instruction counts skipped: {e}");
            Vec::new()
        })
    } else {
        Vec::new()
    };
    println!("\n{}\n{}", context, report::text(&lines));
    if !points.is_empty() {
        println!("{}", report::fast_text(&points));
    }
    if !counted.is_empty() {
        let timed: HashMap<String, Line> =
            lines.iter().map(|l| (l.name.clone(), l.clone())).collect();
        println!("\n{}", report::instructions_text(&counted, &timed));
        print_missed_instructions(&counted);
    }
    let missed: Vec<&str> = lines
        .iter()
        .filter(|l| !l.met())
        .map(|l| l.name.as_str())
        .collect();
    if missed.is_empty() {
        println!("every target met");
    } else {
        println!("targets missed: {}", missed.join("; "));
    }
    if let Some(path) = &settings.markdown {
        write(path, &report::markdown(&lines, &points, &counted, &context));
    }
    if let Some(path) = &settings.plot {
        if points.is_empty() {
            eprintln!("bench: no pingpong results to plot");
        } else {
            write(path, &report::svg(&points, &context));
        }
    }
}

fn fail(message: &str) -> ! {
    eprintln!("bench: {message}");
    exit(1)
}

fn write(path: &str, text: &str) {
    match std::fs::write(path, text) {
        Ok(()) => eprintln!("bench: wrote {path}"),
        Err(e) => fail(&format!("writing {path}: {e}")),
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn libfabric_version() -> String {
    let v = libfabric_sys::fabric::runtime_version();
    format!(
        "{}.{}",
        libfabric_sys::fabric::FI_MAJOR(v),
        libfabric_sys::fabric::FI_MINOR(v)
    )
}

fn open_queues(provider: &str) -> Queues {
    Queues::open(provider, "127.0.0.1").unwrap_or_else(|e| {
        fail(&format!(
            "the {provider} provider is not usable on 127.0.0.1: {e} (install libfabric1 / libfabric-dev)"
        ))
    })
}

/// One line of the matrix: a case on a provider, with a batch size for the
/// batched cases.
struct Point<'a> {
    case: &'a Case,
    provider: &'a str,
    batch: Option<usize>,
}

impl Point<'_> {
    /// The key that joins a timed line to its instruction count.
    fn key(&self) -> String {
        report::key(self.case.name, self.provider, self.batch)
    }

    fn batch_arg(&self) -> usize {
        self.batch.unwrap_or(micro::CQ_BATCH)
    }
}

/// Every case on every provider, the batched ones at every batch size.
fn matrix(s: &Settings) -> Vec<Point<'_>> {
    let mut points = Vec::new();
    for provider in &s.providers {
        for case in CASES {
            // The RMA cases run on RDM endpoints (Queues::open).
            if case.rma && provider == "tcp" {
                continue;
            }
            if !s.cases.is_empty() && !s.cases.iter().any(|w| case.id.contains(w.as_str())) {
                continue;
            }
            if case.batched {
                points.extend(s.batches.iter().map(|&b| Point {
                    case,
                    provider,
                    batch: Some(b),
                }));
            } else {
                points.push(Point {
                    case,
                    provider,
                    batch: None,
                });
            }
        }
    }
    points
}

fn print_missed_instructions(counted: &[Counted]) {
    let missed: Vec<String> = counted
        .iter()
        .filter(|c| c.met() == Some(false))
        .map(|c| c.key())
        .collect();
    if missed.is_empty() {
        println!("every instruction target met");
    } else {
        println!("instruction targets missed: {}", missed.join("; "));
    }
}

/// Runs every point of the matrix: one warm-up run per side, then `rounds`
/// rounds of C and Rust, alternating which goes first.
fn micro_benchmarks(s: &Settings) -> Vec<Line> {
    let mut lines = Vec::new();
    let mut opened: Option<Queues> = None;
    for point in matrix(s) {
        if opened.as_ref().is_none_or(|q| q.provider != point.provider) {
            // The queues of the previous provider close first.
            drop(opened.take());
            opened = Some(open_queues(point.provider));
        }
        let q = opened.as_ref().expect("opened above");
        let case = point.case;
        // Wake-ups: many short runs, so that C and Rust take turns often.
        let (iters, rounds) = match case.kind {
            Kind::PerCall => (s.per_call_iters, s.micro_rounds),
            Kind::WakeUp => (s.wake_samples, s.micro_rounds * WAKE_ROUNDS_PER_ROUND),
        };
        let batch = point.batch_arg();
        let run = |side: &str, f: micro::RunFn| {
            f(q, iters, batch).unwrap_or_else(|e| fail(&format!("{}, {side}: {e}", point.key())))
        };
        run("C", case.c);
        run("Rust", case.rust);
        let (mut c, mut rust) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            if round % 2 == 0 {
                c.push(run("C", case.c));
                rust.push(run("Rust", case.rust));
            } else {
                rust.push(run("Rust", case.rust));
                c.push(run("C", case.c));
            }
        }
        let line = Line::new(
            point.key(),
            "ns",
            &c,
            &rust,
            Target::AtMost(case.target.unwrap_or(f64::INFINITY)),
        );
        eprintln!(
            "bench: {:<58} C {:>10.1} ns  Rust {:>10.1} ns  Rust/C {:.3}",
            line.name, line.c, line.rust, line.ratio
        );
        lines.push(line);
    }
    lines
}

/// Alternates fi_pingpong and the Rust pingpong, size by size, round after
/// round.
fn pingpong_benchmarks(s: &Settings) -> (Vec<Line>, Vec<SizePoint>) {
    if !pingpong::c_available() {
        eprintln!(
            "bench: {} not found (Debian/Ubuntu: apt-get install libfabric-bin): pingpong skipped",
            pingpong::FI_PINGPONG
        );
        return (Vec::new(), Vec::new());
    }
    let started = Instant::now();
    let mut usec: Vec<[Vec<f64>; 2]> = SIZES.iter().map(|_| [Vec::new(), Vec::new()]).collect();
    for round in 0..s.pingpong_rounds {
        if round >= MIN_PINGPONG_ROUNDS && started.elapsed() > s.pingpong_budget {
            eprintln!("bench: pingpong time budget used after {round} rounds");
            break;
        }
        for (i, &size) in SIZES.iter().enumerate() {
            let run = Run {
                provider: "tcp".into(),
                size,
                iterations: s.pingpong_iters[i],
                timeout: Duration::from_secs(180),
            };
            let order = if round % 2 == 0 {
                [Tool::C, Tool::Rust]
            } else {
                [Tool::Rust, Tool::C]
            };
            let mut got = [f64::NAN; 2];
            for tool in order {
                let slot = tool as usize;
                match pingpong::run_once(tool, &run) {
                    Ok(u) => got[slot] = u,
                    Err(e) => eprintln!("bench: pingpong {size} B, round {}: {e}", round + 1),
                }
            }
            eprintln!(
                "bench: pingpong {size:>6} B round {}/{}: fi_pingpong {:>8.2} us, Rust {:>8.2} us",
                round + 1,
                s.pingpong_rounds,
                got[0],
                got[1]
            );
            // Only complete pairs count: the ratio is taken per round.
            if got.iter().all(|u| u.is_finite()) {
                usec[i][0].push(got[0]);
                usec[i][1].push(got[1]);
            }
        }
    }
    let mut lines = Vec::new();
    let mut points = Vec::new();
    for (i, &size) in SIZES.iter().enumerate() {
        let [c, rust] = &usec[i];
        if c.is_empty() {
            eprintln!("bench: pingpong {size} B: no complete round");
            continue;
        }
        // One sample per round and tool; MB/s = bytes per microsecond.
        let rounds =
            |v: &[f64], f: &dyn Fn(f64) -> f64| v.iter().map(|&u| vec![f(u)]).collect::<Vec<_>>();
        let lat = Line::new(
            format!("pingpong {size} B, latency (usec/xfer)"),
            "us",
            &rounds(c, &|u| u),
            &rounds(rust, &|u| u),
            Target::AtMost(LATENCY_TARGET),
        );
        let mbps = |u: f64| size as f64 / u;
        let bw = Line::new(
            format!("pingpong {size} B, bandwidth (MB/s)"),
            "MB/s",
            &rounds(c, &mbps),
            &rounds(rust, &mbps),
            Target::AtLeast(BANDWIDTH_TARGET),
        );
        let fast = |v: &[f64]| report::quantile(&mut v.to_vec(), 0.25);
        points.push(SizePoint {
            size,
            c_usec: lat.c,
            rust_usec: lat.rust,
            c_mbps: bw.c,
            rust_mbps: bw.rust,
            c_fast_usec: fast(c),
            rust_fast_usec: fast(rust),
        });
        lines.push(lat);
        lines.push(bw);
    }
    (lines, points)
}

/// `bench case c|rust FUNCTION ITERS PROVIDER BATCH`: one run of one side
/// of a case, named by its function (`c_<c_id>` or `rust_<id>`, given
/// without the prefix): what `--instructions` runs under callgrind.
fn run_case(args: &[OsString]) -> i32 {
    let args: Vec<&str> = args.iter().filter_map(|a| a.to_str()).collect();
    let [side, function, iters, provider, batch] = args[..] else {
        eprintln!("usage: bench case c|rust FUNCTION ITERS PROVIDER BATCH");
        return 2;
    };
    let found = CASES.iter().find_map(|c| match side {
        "c" if c.c_id == function => Some(c.c),
        "rust" if c.id == function => Some(c.rust),
        _ => None,
    });
    let (Some(f), Ok(iters), Ok(batch)) = (found, iters.parse(), batch.parse()) else {
        eprintln!(
            "bench case: unknown function {side}_{function}, or bad count {iters:?} or batch {batch:?}"
        );
        return 2;
    };
    let q = open_queues(provider);
    match f(&q, iters, batch) {
        Ok(mut samples) => {
            println!("{:.1} ns", report::median(&mut samples));
            0
        }
        Err(e) => {
            eprintln!("bench case: {e}");
            1
        }
    }
}

/// Whether valgrind can be started.
fn valgrind_available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The calls of a per-call case counted by callgrind.
fn per_call_iters(s: &Settings) -> u64 {
    if s.quick {
        2_000
    } else {
        20_000
    }
}

/// Instructions per call (or per wake-up, on the reading side) of each
/// point of the matrix, C and Rust, counted by callgrind inside the side's
/// function only (user space; the writer thread of a wake-up case is not
/// counted). A function shared by two cases is counted once. A wake-up
/// case's function also opens its queues and starts and joins its writer
/// thread: it is counted at two numbers of wake-ups, and the difference
/// divided by the difference of the numbers, so that only the wake-ups
/// count. Each number is run twice and the fewer instructions kept: how
/// the writer and the reader meet varies from run to run (a reader that
/// parks once more than usual, a spurious wake), and that only ever adds
/// work (one such run made tokio's wake-up on rxm 885 instructions where
/// others made 802 to 806).
fn instructions(s: &Settings) -> Result<Vec<Counted>, String> {
    let per_call_iters = per_call_iters(s);
    let wake_iters: u64 = if s.quick { 50 } else { 100 };
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    let mut counted = Vec::new();
    let mut done: HashMap<(String, String, usize), f64> = HashMap::new();
    for point in matrix(s) {
        let case = point.case;
        let batch = point.batch_arg();
        let mut per_call = [0.0; 2];
        for (slot, (side, function)) in [("c", case.c_id), ("rust", case.id)]
            .into_iter()
            .enumerate()
        {
            let key = (
                format!("{side}_{function}"),
                point.provider.to_string(),
                batch,
            );
            if let Some(&n) = done.get(&key) {
                per_call[slot] = n;
                continue;
            }
            let run = |iters: u64| {
                CaseRun {
                    exe: &exe,
                    side,
                    function,
                    iters,
                    provider: point.provider,
                    batch,
                }
                .total()
                .map_err(|e| format!("{}: {e}", point.key()))
            };
            per_call[slot] = match case.kind {
                Kind::PerCall => run(per_call_iters)? / per_call_iters as f64,
                Kind::WakeUp => {
                    let (few, many) = (wake_iters, 3 * wake_iters);
                    let fewest = |n: u64| -> Result<f64, String> { Ok(run(n)?.min(run(n)?)) };
                    (fewest(many)? - fewest(few)?) / (many - few) as f64
                }
            };
            done.insert(key, per_call[slot]);
        }
        eprintln!(
            "bench: instructions: {:<58} C {:>8.1}  Rust {:>8.1}",
            point.key(),
            per_call[0],
            per_call[1]
        );
        counted.push(Counted {
            name: case.name,
            provider: point.provider.to_string(),
            batch: point.batch,
            c: per_call[0],
            rust: per_call[1],
            target: case.target,
        });
    }
    Ok(counted)
}

/// One run of one side of a case under callgrind: `bench case SIDE
/// FUNCTION ITERS PROVIDER BATCH`, counted inside that function only.
struct CaseRun<'a> {
    exe: &'a std::path::Path,
    /// `c` or `rust`.
    side: &'a str,
    function: &'a str,
    iters: u64,
    provider: &'a str,
    batch: usize,
}

impl CaseRun<'_> {
    /// The instructions callgrind counts over the run.
    fn total(&self) -> Result<f64, String> {
        self.callgrind(&[])?
            .lines()
            .find_map(|l| {
                l.strip_prefix("totals:")
                    .or_else(|| l.strip_prefix("summary:"))
            })
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .ok_or_else(|| "no instruction total in callgrind's output".to_string())
    }

    /// Callgrind's output for the run; `options` are callgrind's.
    fn callgrind(&self, options: &[&str]) -> Result<String, String> {
        let CaseRun {
            exe,
            side,
            function,
            iters,
            provider,
            batch,
        } = *self;
        let out = std::env::temp_dir().join(format!(
            "bench-callgrind-{}-{function}-{side}-{iters}.out",
            std::process::id(),
        ));
        let run = Command::new("valgrind")
            .arg("--tool=callgrind")
            .arg(format!("--callgrind-out-file={}", out.display()))
            .arg(format!("--toggle-collect=*micro::{side}_{function}*"))
            .args(options)
            .arg(exe)
            .args([
                "case",
                side,
                function,
                &iters.to_string(),
                provider,
                &batch.to_string(),
            ])
            .output()
            .map_err(|e| format!("valgrind (apt-get install valgrind): {e}"))?;
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        let _ = std::fs::remove_file(&out);
        if !run.status.success() {
            return Err(format!(
                "valgrind: {}",
                String::from_utf8_lossy(&run.stderr)
            ));
        }
        Ok(text)
    }
}

/// `--listing`: the fewest runs per call of an instruction listed (the
/// hot path's run once per call; a loop's setup, run once per run, is left
/// out).
const LISTED: f64 = 0.5;

/// `--where`: for each per-call point counted, the instructions of each
/// side's own code per source function (with `--listing`, then each
/// instruction).
fn print_where(counted: &[Counted], s: &Settings) -> Result<(), String> {
    let iters = per_call_iters(s);
    let exe = std::env::current_exe().map_err(|e| format!("own path: {e}"))?;
    for c in counted {
        let Some(case) = CASES.iter().find(|k| k.name == c.name) else {
            continue;
        };
        if case.kind != Kind::PerCall {
            continue;
        }
        println!(
            "\n{}: C {:.1}, Rust {:.1} per call; of them, the benchmark's own code \
             (the provider's is the same on both sides):",
            c.key(),
            c.c,
            c.rust
        );
        for (name, side, function) in [("C", "c", case.c_id), ("Rust", "rust", case.id)] {
            let run = CaseRun {
                exe: &exe,
                side,
                function,
                iters,
                provider: &c.provider,
                batch: c.batch.unwrap_or(micro::CQ_BATCH),
            };
            let text = run.callgrind(&[
                "--dump-instr=yes",
                "--compress-pos=no",
                "--compress-strings=no",
            ])?;
            let shares = attribution::shares(&text, &exe, iters)?;
            let own: f64 = shares.iter().map(|s| s.per_call).sum();
            println!("  {name}: {own:.1}");
            for s in shares.iter().filter(|s| s.per_call >= 0.5) {
                println!("    {:>7.1}  {}", s.per_call, s.place);
            }
            if s.listing {
                println!("  {name}, each instruction run at least {LISTED} times per call:");
                for l in attribution::listing(&text, &exe, iters, LISTED)? {
                    println!(
                        "    {:>7.2}  {:>8x}  {:<48}  {}",
                        l.per_call, l.addr, l.text, l.place
                    );
                }
            }
        }
    }
    Ok(())
}
