//! Statistics and output: the results table (text and markdown) and the SVG
//! plot of the pingpong results.

use std::collections::HashMap;
use std::fmt::Write as _;

/// The median of `v` (sorted in place); NaN when empty.
pub fn median(v: &mut [f64]) -> f64 {
    quantile(v, 0.5)
}

/// The `q` quantile of `v` (sorted in place), linearly interpolated.
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let pos = q * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    fn text(self) -> String {
        match self {
            Target::AtMost(t) => format!("<= {t:.2}"),
            Target::AtLeast(t) => format!(">= {t:.2}"),
        }
    }

    fn met(self, ratio: f64) -> bool {
        match self {
            Target::AtMost(t) => ratio <= t,
            Target::AtLeast(t) => ratio >= t,
        }
    }
}

/// One line of the results: the medians of all C and all Rust samples,
/// their ratio, and the quartiles of the per-round ratios (how noisy the
/// rounds were).
#[derive(Debug, Clone)]
pub struct Line {
    pub name: String,
    pub unit: &'static str,
    pub c: f64,
    pub rust: f64,
    pub ratio: f64,
    pub ratio_q1: f64,
    pub ratio_q3: f64,
    pub rounds: usize,
    pub target: Target,
}

impl Line {
    /// From the samples of each round (round i of C ran next to round i of
    /// Rust).
    pub fn new(
        name: String,
        unit: &'static str,
        c: &[Vec<f64>],
        rust: &[Vec<f64>],
        target: Target,
    ) -> Line {
        let pooled = |rounds: &[Vec<f64>]| median(&mut rounds.concat());
        let mut ratios: Vec<f64> = c
            .iter()
            .zip(rust)
            .map(|(c, r)| median(&mut r.clone()) / median(&mut c.clone()))
            .collect();
        let (c, rust) = (pooled(c), pooled(rust));
        Line {
            name,
            unit,
            c,
            rust,
            ratio: rust / c,
            ratio_q1: quantile(&mut ratios, 0.25),
            ratio_q3: quantile(&mut ratios, 0.75),
            rounds: ratios.len(),
            target,
        }
    }

    pub fn met(&self) -> bool {
        self.target.met(self.ratio)
    }

    fn value(&self, v: f64) -> String {
        match self.unit {
            "ns" if v >= 10_000.0 => format!("{:.2} us", v / 1000.0),
            "ns" => format!("{v:.1} ns"),
            unit => format!("{v:.2} {unit}"),
        }
    }

    fn verdict(&self) -> &'static str {
        if self.met() {
            "met"
        } else {
            "MISSED"
        }
    }
}

/// The results as a fixed-width text table.
pub fn text(lines: &[Line]) -> String {
    let mut out = format!(
        "{:<42} {:>12} {:>12} {:>7} {:>15} {:>8}  {}\n",
        "benchmark", "C", "Rust", "Rust/C", "(quartiles)", "target", "result"
    );
    for l in lines {
        let _ = writeln!(
            out,
            "{:<42} {:>12} {:>12} {:>7.3} {:>15} {:>8}  {}",
            l.name,
            l.value(l.c),
            l.value(l.rust),
            l.ratio,
            format!("({:.3}-{:.3})", l.ratio_q1, l.ratio_q3),
            l.target.text(),
            l.verdict()
        );
    }
    out
}

/// The name of one point of the micro-benchmark matrix.
pub fn key(case: &str, provider: &str, batch: Option<usize>) -> String {
    match batch {
        Some(b) => format!("{case} [{provider}, batch {b}]"),
        None => format!("{case} [{provider}]"),
    }
}

/// Instructions per call of one micro-benchmark, C and Rust.
#[derive(Debug, Clone)]
pub struct Counted {
    pub name: &'static str,
    pub provider: String,
    pub batch: Option<usize>,
    pub c: f64,
    pub rust: f64,
    /// `None`: a comparison reported for information.
    pub target: Option<f64>,
}

impl Counted {
    pub fn key(&self) -> String {
        key(self.name, &self.provider, self.batch)
    }

    pub fn ratio(&self) -> f64 {
        self.rust / self.c
    }

    /// Whether the ratio meets the target (`None` without one).
    pub fn met(&self) -> Option<bool> {
        self.target.map(|t| self.ratio() <= t)
    }

    fn cells(&self) -> [String; 4] {
        let batch = self.batch.map_or("-".into(), |b| b.to_string());
        let target = self.target.map_or("-".into(), |t| format!("<= {t:.2}"));
        let met = match self.met() {
            Some(true) => "met",
            Some(false) => "MISSED",
            None => "(info)",
        };
        [batch, target, met.into(), format!("{:.3}", self.ratio())]
    }
}

fn time_cells(timed: &HashMap<String, Line>, key: &str) -> (String, String) {
    match timed.get(key) {
        Some(l) => (
            format!("{:.3}", l.ratio),
            format!("{:.3}-{:.3}", l.ratio_q1, l.ratio_q3),
        ),
        None => ("-".into(), "-".into()),
    }
}

/// The instruction counts as a table, with the time ratio of the same
/// point (median of the interleaved rounds) and its quartiles when the
/// timings ran.
pub fn instructions_text(counted: &[Counted], timed: &HashMap<String, Line>) -> String {
    let mut out = String::from(
        "instructions: callgrind, user-space instructions per call (per wake-up on the reading \
         side: the difference of runs of 3n and n wake-ups, the fewer of two each, over 2n); \
         time: median of interleaved rounds, quartiles of the per-round ratios\n",
    );
    let _ = writeln!(
        out,
        "{:<42} | {:<11} | {:>5} | {:>8} | {:>8} | {:>6} | {:>7} | {:<6} | {:>6} | (quartiles)",
        "case", "provider", "batch", "C", "Rust", "Rust/C", "target", "met", "time"
    );
    for c in counted {
        let [batch, target, met, ratio] = c.cells();
        let (time, quartiles) = time_cells(timed, &c.key());
        let _ = writeln!(
            out,
            "{:<42} | {:<11} | {:>5} | {:>8.1} | {:>8.1} | {:>6} | {:>7} | {:<6} | {:>6} | {}",
            c.name, c.provider, batch, c.c, c.rust, ratio, target, met, time, quartiles
        );
    }
    out.push_str(&threading_gain_text(counted));
    out
}

/// The empty reads under `FI_THREAD_DOMAIN` against the same reads under
/// `FI_THREAD_SAFE` (same provider and batch): instructions saved per
/// call, C and Rust, and the Rust/C ratio of each model.
pub fn threading_gain_text(counted: &[Counted]) -> String {
    use crate::micro::{CQ_READ_EMPTY, CQ_READ_EMPTY_DOMAIN};
    let mut out = String::new();
    let pairs: Vec<(&Counted, &Counted)> = counted
        .iter()
        .filter(|d| d.name == CQ_READ_EMPTY_DOMAIN)
        .filter_map(|d| {
            counted
                .iter()
                .find(|s| s.name == CQ_READ_EMPTY && s.provider == d.provider && s.batch == d.batch)
                .map(|s| (s, d))
        })
        .collect();
    if pairs.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nempty fi_cq_read, FI_THREAD_DOMAIN against FI_THREAD_SAFE (instructions per call)"
    );
    let _ = writeln!(
        out,
        "{:<11} | {:>5} | {:>8} | {:>8} | {:>6} | {:>8} | {:>8} | {:>6} | {:>7} | {:>7}",
        "provider",
        "batch",
        "C safe",
        "Rust",
        "Rust/C",
        "C domain",
        "Rust",
        "Rust/C",
        "C gain",
        "Rust gain"
    );
    let gain = |safe: f64, domain: f64| {
        if safe > 0.0 {
            format!("{:.1}%", (1.0 - domain / safe) * 100.0)
        } else {
            "-".into()
        }
    };
    let ratio = |c: f64, rust: f64| {
        if c > 0.0 {
            format!("{:.3}", rust / c)
        } else {
            "-".into()
        }
    };
    for (s, d) in pairs {
        let _ = writeln!(
            out,
            "{:<11} | {:>5} | {:>8.1} | {:>8.1} | {:>6} | {:>8.1} | {:>8.1} | {:>6} | {:>7} | {:>7}",
            d.provider,
            d.batch.map_or("-".into(), |b| b.to_string()),
            s.c,
            s.rust,
            ratio(s.c, s.rust),
            d.c,
            d.rust,
            ratio(d.c, d.rust),
            gain(s.c, d.c),
            gain(s.rust, d.rust)
        );
    }
    out
}

/// The results as a markdown document.
pub fn markdown(
    lines: &[Line],
    points: &[SizePoint],
    counted: &[Counted],
    context: &str,
) -> String {
    let mut out = String::from("# C vs Rust benchmarks\n\n");
    let _ = writeln!(out, "{context}\n");
    out.push_str(
        "C and Rust run alternately, round after round. C and Rust are the medians of all \
         samples, Rust/C their ratio; the quartiles are those of the per-round ratios and \
         show how noisy the rounds were.\n\n",
    );
    out.push_str("| benchmark | C | Rust | Rust/C | quartiles | rounds | target | result |\n");
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---|\n");
    for l in lines {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {:.3}-{:.3} | {} | {} | {} |",
            l.name,
            l.value(l.c),
            l.value(l.rust),
            l.ratio,
            l.ratio_q1,
            l.ratio_q3,
            l.rounds,
            l.target.text(),
            l.verdict()
        );
    }
    if !points.is_empty() {
        let _ = write!(
            out,
            "\nPingpong latency, {FAST_NOTE}:\n\n| size | fi_pingpong | Rust | Rust/C |\n|---:|---:|---:|---:|\n"
        );
        for p in points {
            let _ = writeln!(
                out,
                "| {} B | {:.2} us | {:.2} us | {:.3} |",
                p.size,
                p.c_fast_usec,
                p.rust_fast_usec,
                p.rust_fast_usec / p.c_fast_usec
            );
        }
    }
    if !counted.is_empty() {
        out.push_str(
            "\nUser-space instructions per call (per wake-up on the reading side: the \
             difference of runs of 3n and n wake-ups, the fewer of two each, over 2n, which \
             leaves out the queues' setup and the writer thread's start), counted by \
             valgrind's callgrind inside each benchmark's function; they do not depend \
             on the load of the machine. Time: the Rust/C ratio of the timings above.\n\n\
             | case | provider | batch | C | Rust | Rust/C | target | met | time | quartiles |\n\
             |---|---|---:|---:|---:|---:|---:|---|---:|---:|\n",
        );
        let timed: HashMap<String, Line> =
            lines.iter().map(|l| (l.name.clone(), l.clone())).collect();
        for c in counted {
            let [batch, target, met, ratio] = c.cells();
            let (time, quartiles) = time_cells(&timed, &c.key());
            let _ = writeln!(
                out,
                "| {} | {} | {batch} | {:.1} | {:.1} | {ratio} | {target} | {met} | {time} | {quartiles} |",
                c.name, c.provider, c.c, c.rust
            );
        }
    }
    out
}

/// The pingpong medians of one message size, and the lower quartile of
/// each tool's rounds.
#[derive(Debug, Clone, Copy)]
pub struct SizePoint {
    pub size: usize,
    pub c_usec: f64,
    pub rust_usec: f64,
    pub c_mbps: f64,
    pub rust_mbps: f64,
    pub c_fast_usec: f64,
    pub rust_fast_usec: f64,
}

const FAST_NOTE: &str = "lower quartile of each tool's rounds (the least disturbed quarter: \
    on a busy machine the rounds of both tools swing between a fast and a slow mode)";

/// The lower quartiles of the pingpong rounds as text.
pub fn fast_text(points: &[SizePoint]) -> String {
    let mut out = format!("pingpong latency, {FAST_NOTE}:\n");
    for p in points {
        let _ = writeln!(
            out,
            "  {:>6} B: fi_pingpong {:.2} us, Rust {:.2} us, Rust/C {:.3}",
            p.size,
            p.c_fast_usec,
            p.rust_fast_usec,
            p.rust_fast_usec / p.c_fast_usec
        );
    }
    out
}

fn size_label(size: usize) -> String {
    match size {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

/// One panel of grouped bars: per size, C beside Rust.
fn panel(out: &mut String, x0: f64, title: &str, unit: &str, bars: &[(String, f64, f64)]) {
    const W: f64 = 420.0;
    const H: f64 = 260.0;
    const TOP: f64 = 60.0;
    let max = bars
        .iter()
        .map(|b| b.1.max(b.2))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.15;
    let _ = writeln!(
        out,
        r#"<text x="{}" y="35" font-size="16" text-anchor="middle">{title}</text>"#,
        x0 + W / 2.0
    );
    let _ = writeln!(
        out,
        r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#333"/>"##,
        y = TOP + H,
        x1 = x0 + W
    );
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {} {})">{unit}</text>"#,
        x0 - 10.0,
        TOP + H / 2.0,
        x0 - 10.0,
        TOP + H / 2.0
    );
    let group = W / bars.len().max(1) as f64;
    for (i, (label, c, rust)) in bars.iter().enumerate() {
        let gx = x0 + group * i as f64;
        for (j, (value, color)) in [(c, "#8c8c8c"), (rust, "#d2691e")].into_iter().enumerate() {
            let h = value / max * H;
            let x = gx + group * (0.15 + 0.35 * j as f64);
            let _ = writeln!(
                out,
                r#"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="{color}"/>"#,
                TOP + H - h,
                group * 0.33
            );
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{value:.1}</text>"#,
                x + group * 0.165,
                TOP + H - h - 4.0
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" font-size="13" text-anchor="middle">{label}</text>"#,
            gx + group / 2.0,
            TOP + H + 20.0
        );
    }
}

/// An SVG with two panels: latency and bandwidth against message size, C
/// (fi_pingpong) beside Rust.
pub fn svg(points: &[SizePoint], context: &str) -> String {
    let mut out = String::from(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="1000" height="400" font-family="sans-serif">
<rect width="1000" height="400" fill="white"/>
"#,
    );
    let lat: Vec<_> = points
        .iter()
        .map(|p| (size_label(p.size), p.c_usec, p.rust_usec))
        .collect();
    let bw: Vec<_> = points
        .iter()
        .map(|p| (size_label(p.size), p.c_mbps, p.rust_mbps))
        .collect();
    panel(
        &mut out,
        60.0,
        "Latency (usec/xfer, lower is better)",
        "usec",
        &lat,
    );
    panel(
        &mut out,
        560.0,
        "Bandwidth (MB/s, higher is better)",
        "MB/s",
        &bw,
    );
    let _ = writeln!(
        out,
        r##"<rect x="380" y="352" width="14" height="14" fill="#8c8c8c"/><text x="400" y="364" font-size="13">C (fi_pingpong)</text>
<rect x="520" y="352" width="14" height="14" fill="#d2691e"/><text x="540" y="364" font-size="13">Rust (pingpong example)</text>
<text x="500" y="390" font-size="11" text-anchor="middle">{}</text>"##,
        context.replace('&', "&amp;").replace('<', "&lt;")
    );
    out.push_str("</svg>\n");
    out
}
